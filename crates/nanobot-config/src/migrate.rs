//! Moves keys of older config files to where the current schema expects them.
//!
//! Runs on the raw JSON before it is typed, like the Python nanobot's `_migrate_config`. Each change is reported
//! so the user learns that the next save writes the new layout.

use serde_json::{Map, Value};

use crate::doc::find_key;

/// One key moved by a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Migration {
    pub(crate) from: String,
    pub(crate) to: String,
    /// `false` when the old key was dropped because the new one was already set.
    pub(crate) moved: bool,
}

/// Applies every migration to `root` and returns what changed.
pub(crate) fn migrate(root: &mut Value) -> Vec<Migration> {
    let mut done = Vec::new();
    let Some(root) = root.as_object_mut() else {
        return done;
    };

    if let Some(tools) = child_object(root, "tools") {
        // tools.exec.restrictToWorkspace → tools.restrictToWorkspace
        let old = child_object(tools, "exec").and_then(|exec| take(exec, "restrictToWorkspace"));
        if let Some((old_key, value)) = old {
            done.push(put(
                tools,
                "restrictToWorkspace",
                value,
                format!("tools.exec.{old_key}"),
                "tools",
            ));
        }
        // tools.exec.approval / approvalTimeout / approvers (older nanobot-rs) → tools.approval.mode / timeoutS /
        // approvers: the setting governs more than commands.
        for (old, new) in [
            ("approval", "mode"),
            ("approvalTimeout", "timeoutS"),
            ("approvers", "approvers"),
        ] {
            let taken = child_object(tools, "exec").and_then(|exec| take(exec, old));
            if let Some((old_key, value)) = taken
                && let Some(approval) = ensure_object(tools, "approval")
            {
                done.push(put(
                    approval,
                    new,
                    value,
                    format!("tools.exec.{old_key}"),
                    "tools.approval",
                ));
            }
        }
        // tools.myEnabled / tools.mySet → tools.my.enable / tools.my.allowSet
        for (old, new) in [("myEnabled", "enable"), ("mySet", "allowSet")] {
            if let Some((old_key, value)) = take(tools, old)
                && let Some(my) = ensure_object(tools, "my")
            {
                done.push(put(my, new, value, format!("tools.{old_key}"), "tools.my"));
            }
        }
    }

    if let Some(defaults) = child_object(root, "agents").and_then(|a| child_object(a, "defaults")) {
        // agents.defaults.sessionTtlMinutes → agents.defaults.idleCompactAfterMinutes
        if let Some((old_key, value)) = take(defaults, "sessionTtlMinutes") {
            done.push(put(
                defaults,
                "idleCompactAfterMinutes",
                value,
                format!("agents.defaults.{old_key}"),
                "agents.defaults",
            ));
        }
        // agents.defaults.dream.model → agents.defaults.dream.modelOverride
        if let Some(dream) = child_object(defaults, "dream")
            && let Some((old_key, value)) = take(dream, "model")
        {
            done.push(put(
                dream,
                "modelOverride",
                value,
                format!("agents.defaults.dream.{old_key}"),
                "agents.defaults.dream",
            ));
        }
    }
    done
}

/// The object under `key` (any spelling), if it is an object.
fn child_object<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let k = find_key(map, key)?;
    map.get_mut(&k)?.as_object_mut()
}

/// The object under `key` (any spelling), created when missing; a non-object value is replaced.
fn ensure_object<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let k = find_key(map, key).unwrap_or_else(|| key.to_owned());
    let slot = map.entry(k).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// Removes `key` (any spelling) and returns the spelling found and its value.
fn take(map: &mut Map<String, Value>, key: &str) -> Option<(String, Value)> {
    let k = find_key(map, key)?;
    let v = map.shift_remove(&k)?;
    Some((k, v))
}

/// Puts `value` under `key` unless that key (any spelling) is already set.
fn put(map: &mut Map<String, Value>, key: &str, value: Value, from: String, parent: &str) -> Migration {
    let to = crate::doc::join(parent, key);
    if find_key(map, key).is_some() {
        return Migration {
            from,
            to,
            moved: false,
        };
    }
    map.insert(key.to_owned(), value);
    Migration {
        from,
        to,
        moved: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn moves_restrict_to_workspace_out_of_exec() {
        let mut v = json!({"tools": {"exec": {"timeout": 5, "restrictToWorkspace": true}}});
        let done = migrate(&mut v);
        assert_eq!(
            v,
            json!({"tools": {"exec": {"timeout": 5}, "restrictToWorkspace": true}})
        );
        assert_eq!(done.len(), 1);
        assert!(done[0].moved);
        assert_eq!(done[0].from, "tools.exec.restrictToWorkspace");
    }

    #[test]
    fn snake_case_old_key_and_existing_new_key() {
        let mut v =
            json!({"tools": {"restrict_to_workspace": false, "exec": {"restrict_to_workspace": true}}});
        let done = migrate(&mut v);
        assert_eq!(v, json!({"tools": {"restrict_to_workspace": false, "exec": {}}}));
        assert!(!done[0].moved, "the new key wins");
    }

    #[test]
    fn my_tool_flags_and_dream_model() {
        let mut v = json!({
            "tools": {"myEnabled": false, "mySet": true},
            "agents": {"defaults": {"sessionTtlMinutes": 30, "dream": {"model": "m"}}}
        });
        migrate(&mut v);
        assert_eq!(
            v,
            json!({
                "tools": {"my": {"enable": false, "allowSet": true}},
                "agents": {"defaults": {"dream": {"modelOverride": "m"}, "idleCompactAfterMinutes": 30}}
            })
        );
    }

    #[test]
    fn approval_keys_move_out_of_exec_and_an_existing_block_wins() {
        let mut v = json!({"tools": {"exec": {"timeout": 5, "approval": "risky", "approval_timeout": 30,
                                               "approvers": ["telegram:1"]}}});
        let done = migrate(&mut v);
        assert_eq!(
            v,
            json!({"tools": {"exec": {"timeout": 5},
                             "approval": {"mode": "risky", "timeoutS": 30, "approvers": ["telegram:1"]}}})
        );
        assert_eq!(
            done.iter()
                .map(|m| (m.from.as_str(), m.to.as_str()))
                .collect::<Vec<_>>(),
            [
                ("tools.exec.approval", "tools.approval.mode"),
                ("tools.exec.approval_timeout", "tools.approval.timeoutS"),
                ("tools.exec.approvers", "tools.approval.approvers"),
            ]
        );
        let mut v = json!({"tools": {"exec": {"approval": "always"}, "approval": {"mode": "off"}}});
        let done = migrate(&mut v);
        assert_eq!(v, json!({"tools": {"exec": {}, "approval": {"mode": "off"}}}));
        assert!(!done[0].moved, "the new key wins");
    }

    #[test]
    fn nothing_to_do_on_current_files() {
        let mut v = json!({"tools": {"exec": {}}, "agents": {"defaults": {}}});
        assert!(migrate(&mut v).is_empty());
    }
}
