//! `my` (0.3.5's self-inspection tool): the agent checks its own settings (`check`, optionally a dot-path key),
//! and, when `tools.my.allowSet` is on, switches its conversation's model preset or keeps notes in a scratchpad
//! (`set`).
//!
//! What it shows is a view built for it, never the agent's internals: model and preset (the conversation's),
//! context window, iteration cap, workspace, whether files are confined to it, the tools, the presets, the
//! conversation's running subagents, and the current request's channel, chat and sender. Nothing secret is in
//! the view, and keys naming secrets are refused outright. It can change only the conversation's preset (as
//! `/model` does, within the presets the owner configured) and its scratchpad (at most [`MAX_NOTES`] notes of at
//! most [`MAX_NOTE_CHARS`] characters each, kept in memory for the process's life); the iteration cap, the model
//! and every security setting are read-only.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};

use async_trait::async_trait;
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use nanobot_util::lock;
use serde_json::{Map, Value, json};

use super::inner::LoopInner;
use schemars::JsonSchema;
use serde::Deserialize;

/// Notes one conversation may keep.
pub(crate) const MAX_NOTES: usize = 64;
/// The longest note.
pub(crate) const MAX_NOTE_CHARS: usize = 4_000;

/// Names refused anywhere in a key, whatever they would lead to.
const SENSITIVE: [&str; 9] = [
    "api_key",
    "secret",
    "password",
    "token",
    "credential",
    "private_key",
    "access_token",
    "refresh_token",
    "auth",
];

/// Keys of the view that `set` may not change.
const READ_ONLY: [&str; 9] = [
    "model",
    "context_window_tokens",
    "max_iterations",
    "workspace",
    "restrict_to_workspace",
    "tool_names",
    "model_presets",
    "subagents",
    "request",
];

/// What `my` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MyAction {
    /// Show the settings (all, or one key).
    Check,
    /// Change the preset or a scratchpad note.
    Set,
}

/// Arguments of `my` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct MyArgs {
    /// What to do.
    pub(crate) action: MyAction,
    /// A dot-path such as `model`, `request.chat_id` or `model_presets`; for check without a key, everything.
    pub(crate) key: Option<String>,
    /// The new value (for set): a preset name for `model_preset`, any JSON for a scratchpad note.
    pub(crate) value: Option<Value>,
}

/// `my`: the agent's view of its own settings.
pub(crate) struct MyTool {
    inner: Weak<LoopInner>,
    allow_set: bool,
    /// Per conversation: its notes.
    notes: Mutex<HashMap<String, Map<String, Value>>>,
}

impl MyTool {
    pub(crate) fn new(inner: Weak<LoopInner>, allow_set: bool) -> Self {
        Self {
            inner,
            allow_set,
            notes: Mutex::default(),
        }
    }

    /// The view of the settings for the turn in `ctx`.
    async fn view(&self, inner: &LoopInner, ctx: &ToolContext) -> Map<String, Value> {
        let metadata = inner
            .ledger
            .store()
            .metadata(&ctx.session_key)
            .await
            .unwrap_or_default();
        let choice = inner.kit.model_choice(&metadata);
        let s = &inner.settings;
        let sender = ctx
            .extensions
            .get::<crate::tools::TurnInfo>()
            .map(|i| i.sender_id.clone())
            .unwrap_or_default();
        let mut v = Map::new();
        v.insert("model".into(), json!(choice.model));
        v.insert("model_preset".into(), json!(choice.name));
        v.insert(
            "context_window_tokens".into(),
            json!(choice.context_window_tokens),
        );
        v.insert("max_iterations".into(), json!(s.max_tool_iterations));
        v.insert("workspace".into(), json!(s.workspace.display().to_string()));
        v.insert("restrict_to_workspace".into(), json!(s.restrict_to_workspace));
        v.insert("tool_names".into(), json!(inner.kit.tools.names()));
        let presets = inner.kit.preset_names();
        v.insert("model_presets".into(), json!(presets));
        v.insert(
            "subagents".into(),
            json!({"running": inner.kit.subagents.running_for(&ctx.session_key)}),
        );
        v.insert(
            "request".into(),
            json!({"channel": ctx.channel, "chat_id": ctx.chat_id, "sender_id": sender}),
        );
        v
    }

    fn notes_of(&self, session: &str) -> Map<String, Value> {
        lock(&self.notes).get(session).cloned().unwrap_or_default()
    }
}

/// A key's parts, or why it is refused.
fn parts(key: &str) -> Result<Vec<&str>, ToolError> {
    let key = key.trim();
    if key.is_empty() {
        return Err(ToolError::InvalidArguments("key must not be empty".into()));
    }
    let parts: Vec<&str> = key.split('.').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || p.starts_with("__") || SENSITIVE.contains(&p.to_lowercase().as_str()))
    {
        return Err(ToolError::Failed(format!("'{key}' is not accessible")));
    }
    Ok(parts)
}

/// `key: value` as 0.3.5 shows it: scalars as they are, small objects whole, large ones as their keys.
fn show(key: &str, value: &Value) -> String {
    let text = match value {
        Value::Object(m) if m.len() > 5 || value.to_string().len() > 200 => {
            let keys: Vec<&str> = m.keys().map(String::as_str).take(15).collect();
            format!(
                "{{{}{}}}",
                keys.join(", "),
                if m.len() > 15 { ", ..." } else { "" }
            )
        }
        Value::Array(a) if a.len() > 20 => format!("[{} items]", a.len()),
        other => other.to_string(),
    };
    if key.is_empty() {
        text
    } else {
        format!("{key}: {text}")
    }
}

#[async_trait]
impl TypedTool for MyTool {
    type Args = MyArgs;

    fn name(&self) -> &str {
        "my"
    }

    /// Reading and setting the agent's own runtime settings (`set` is allowed by `tools.my.allowSet`).
    fn effects(&self, _args: &serde_json::Value) -> nanobot_tools::Effects {
        nanobot_tools::Effects::none()
    }

    fn description(&self) -> &str {
        "Check your own settings, and (when the owner allows it) change them. check without a key shows them all; \
         with a key (dot-paths such as request.chat_id) one value. set model_preset switches this conversation to a \
         configured preset (as /model does); set any other new key keeps a note in this conversation's scratchpad \
         (kept until nanobot restarts). The model, the iteration cap and every security setting are read-only."
    }

    async fn call(&self, args: MyArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let inner = self
            .inner
            .upgrade()
            .ok_or_else(|| ToolError::Failed("the agent has stopped".into()))?;
        let view = self.view(&inner, ctx).await;
        let notes = self.notes_of(&ctx.session_key);
        match args.action {
            MyAction::Check => {
                let Some(key) = args.key.as_deref().filter(|k| !k.trim().is_empty()) else {
                    let mut lines: Vec<String> = view.iter().map(|(k, v)| show(k, v)).collect();
                    if !notes.is_empty() {
                        lines.push(show("scratchpad", &Value::Object(notes)));
                    }
                    return Ok(ToolOutput::text(lines.join("\n")));
                };
                let path = parts(key)?;
                if path == ["scratchpad"] {
                    return Ok(ToolOutput::text(if notes.is_empty() {
                        "scratchpad is empty".to_owned()
                    } else {
                        show("scratchpad", &Value::Object(notes))
                    }));
                }
                let mut value = view.get(path[0]).or_else(|| notes.get(path[0]));
                for p in &path[1..] {
                    value = value.and_then(|v| v.get(*p));
                }
                match value {
                    Some(v) => Ok(ToolOutput::text(show(key.trim(), v))),
                    None => Err(ToolError::Failed(format!("'{}' not found", key.trim()))),
                }
            }
            MyAction::Set => {
                if !self.allow_set {
                    return Err(ToolError::Failed(
                        "set is disabled (tools.my.allowSet is false)".into(),
                    ));
                }
                let key = args.key.as_deref().unwrap_or_default();
                let path = parts(key)?;
                let value = args
                    .value
                    .ok_or_else(|| ToolError::InvalidArguments("set needs a value".into()))?;
                if path == ["model_preset"] {
                    let name = value.as_str().ok_or_else(|| {
                        ToolError::InvalidArguments("model_preset takes a preset name".into())
                    })?;
                    let answer = inner
                        .model_command(&ctx.session_key, name)
                        .await
                        .map_err(|e| ToolError::Failed(e.to_string()))?;
                    tracing::info!(session = %ctx.session_key, preset = %name, "my: set model_preset");
                    return Ok(if answer.starts_with("Could not") {
                        ToolOutput::error(answer)
                    } else {
                        ToolOutput::text(answer)
                    });
                }
                if READ_ONLY.contains(&path[0]) || path.len() > 1 {
                    return Err(ToolError::Failed(format!(
                        "'{}' is read-only and cannot be modified",
                        key.trim()
                    )));
                }
                let chars = value.to_string().chars().count();
                if chars > MAX_NOTE_CHARS {
                    return Err(ToolError::InvalidArguments(format!(
                        "a note may hold at most {MAX_NOTE_CHARS} characters (this one: {chars})"
                    )));
                }
                let mut all = lock(&self.notes);
                let mine = all.entry(ctx.session_key.clone()).or_default();
                if !mine.contains_key(path[0]) && mine.len() >= MAX_NOTES {
                    return Err(ToolError::Failed(format!(
                        "the scratchpad holds at most {MAX_NOTES} notes"
                    )));
                }
                mine.insert(path[0].to_owned(), value.clone());
                tracing::info!(session = %ctx.session_key, key = %path[0], "my: scratchpad note set");
                Ok(ToolOutput::text(format!("Set scratchpad.{} = {value}", path[0])))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_refused_wherever_they_are() {
        for bad in [
            "api_key",
            "providers.openai.apiKey.token",
            "x.Secret",
            "__class__",
            "a..b",
            "",
        ] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        assert_eq!(parts("request.chat_id").unwrap(), ["request", "chat_id"]);
    }

    #[test]
    fn values_are_shown_briefly() {
        assert_eq!(show("model", &json!("m")), "model: \"m\"");
        let big: Map<String, Value> = (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
        let shown = show("x", &Value::Object(big));
        assert!(
            shown.starts_with("x: {k0, k1") && shown.ends_with(", ...}"),
            "{shown}"
        );
        assert_eq!(
            show("list", &json!((0..30).collect::<Vec<_>>())),
            "list: [30 items]"
        );
    }
}
