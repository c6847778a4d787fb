//! The field editor behind Advanced Settings: one section of the config (found by a JSON pointer into its
//! camelCase form) shown as a list of fields; picking one asks for a value of the field's kind. Every change is
//! checked by reading the whole config back (types) and [`Config::validate`] (ranges); a value that fails is
//! not kept, the reason is said and the question asked again. Secrets are typed without echo and never shown.

use nanobot_config::Config;
use serde_json::{Number, Value};

use super::ask::{Ask, confirm, select, text};
use crate::error::CliError;

/// What stands for "no value" in the lists.
const NOT_SET: &str = "[not set]";
/// What stands for a secret that is set.
const HIDDEN: &str = "[set, hidden]";
/// The choice that removes an optional value.
const CLEAR: &str = "Clear value";
/// The choice that adds a key to an open block.
const ADD: &str = "[+] Add a setting";

/// `key` escaped for a JSON pointer.
pub(super) fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether a field holds a secret (0.3.5's words: api key, token, secret, password, credentials; also any other
/// key, such as Feishu's `encryptKey`, and the headers sent to a provider).
fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "apikey",
        "api_key",
        "secret",
        "password",
        "credentials",
        "extraheaders",
    ]
    .iter()
    .any(|w| k.contains(w))
        || k.ends_with("token")
        || k.ends_with("key")
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A value as one line of the field list.
fn show(key: &str, v: &Value) -> String {
    if is_empty(v) {
        return NOT_SET.to_owned();
    }
    if is_secret(key) {
        return HIDDEN.to_owned();
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(o) => format!("{{{} settings}}", o.len()),
        other => other.to_string(),
    }
}

fn serialize(config: &Config) -> Result<Value, CliError> {
    serde_json::to_value(config).map_err(|e| CliError::Usage(format!("cannot read the config: {e}")))
}

/// `config` with the value at `path` replaced, read back and validated; the error is a sentence for the user.
fn with_value(config: &Config, path: &str, v: Value) -> Result<Config, String> {
    let mut root = serde_json::to_value(config).map_err(|e| e.to_string())?;
    let Some(slot) = root.pointer_mut(path) else {
        return Err(format!("{path} is not in the config"));
    };
    *slot = v;
    let next: Config = serde_json::from_value(root).map_err(|e| e.to_string())?;
    next.validate().map_err(|e| e.to_string())?;
    Ok(next)
}

/// Edits the object at `pointer` (fields in `skip` left out) until the user picks Done.
pub(super) fn section(
    ask: &mut dyn Ask,
    config: &mut Config,
    title: &str,
    pointer: &str,
    skip: &[&str],
) -> Result<(), CliError> {
    section_with(ask, config, title, pointer, skip, false)
}

/// Like [`section`]; with `open`, the user may also add a setting the block does not have yet (channel blocks:
/// this build has no list of every channel's keys).
pub(super) fn section_with(
    ask: &mut dyn Ask,
    config: &mut Config,
    title: &str,
    pointer: &str,
    skip: &[&str],
    open: bool,
) -> Result<(), CliError> {
    let mut last = None;
    loop {
        let root = serialize(config)?;
        let Some(Value::Object(fields)) = root.pointer(pointer) else {
            ask.say(&format!("{title}: no configurable fields\n"))?;
            return Ok(());
        };
        let fields: Vec<(String, Value)> = fields
            .iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ask.say(&format!("\n── {title} ──\n"))?;
        let mut choices: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{k}: {}", show(k, v)))
            .collect();
        if open {
            choices.push(ADD.to_owned());
        }
        choices.push("[Done]".to_owned());
        let i = select(ask, "Select field to configure:", &choices, last)?;
        if open && i == fields.len() {
            add_setting(ask, config, pointer)?;
            continue;
        }
        let Some((key, current)) = fields.get(i) else {
            return Ok(());
        };
        last = Some(i);
        let path = format!("{pointer}/{}", pointer_escape(key));
        if let Value::Object(_) = current
            && !is_secret(key)
        {
            section(ask, config, key, &path, &[])?;
            continue;
        }
        loop {
            let Some(v) = ask_value(ask, config, pointer, key, current)? else {
                break;
            };
            // A cleared value is `null` where the field is optional, else the empty string (as 0.3.5 does).
            // Channel blocks are read by their channel only when it starts: a text stays a text there.
            let v = if v.is_null() && current.is_string() && pointer.starts_with("/channels/") {
                Value::String(String::new())
            } else {
                v
            };
            let attempt = match with_value(config, &path, v.clone()) {
                Err(_) if v.is_null() && current.is_string() => {
                    with_value(config, &path, Value::String(String::new()))
                }
                other => other,
            };
            match attempt {
                Ok(next) => {
                    *config = next;
                    break;
                }
                Err(why) => ask.say(&refusal(key, &why))?,
            }
        }
    }
}

/// Why a value was not kept: the config's own words, except for a secret (they may quote the value).
fn refusal(key: &str, why: &str) -> String {
    if is_secret(key) {
        format!("! {key}: the config does not take this value (not shown); value not saved, try again.\n")
    } else {
        format!("! {key}: {why}; value not saved, try again.\n")
    }
}

/// A new value for `key` (now `current`), or `None` to keep it.
fn ask_value(
    ask: &mut dyn Ask,
    config: &Config,
    pointer: &str,
    key: &str,
    current: &Value,
) -> Result<Option<Value>, CliError> {
    // Fields with a known set of values are picked from a list.
    if let Some((choices, optional)) = fixed_choices(config, pointer, key) {
        let mut labels = choices.clone();
        if optional {
            labels.push(CLEAR.to_owned());
        }
        let now = current.as_str().and_then(|c| labels.iter().position(|l| l == c));
        let i = select(ask, key, &labels, now.or(Some(0)))?;
        return Ok(Some(match labels.get(i) {
            Some(l) if l == CLEAR && optional => Value::Null,
            Some(l) => Value::String(l.clone()),
            None => return Ok(None),
        }));
    }
    if is_secret(key) {
        if !is_empty(current) {
            let keep = [
                "Keep existing value".to_owned(),
                "Enter new value".to_owned(),
                CLEAR.to_owned(),
            ];
            match select(ask, key, &keep, Some(0))? {
                0 => return Ok(None),
                2 => return Ok(Some(Value::Null)),
                _ => {}
            }
        }
        let typed = ask.secret(&format!("{key}: "))?;
        let typed = typed.trim();
        if typed.is_empty() {
            return Ok(None);
        }
        // A block of secrets (`extraHeaders`) is typed as JSON.
        let json = (current.is_object() || current.is_null()) && typed.starts_with('{');
        return Ok(Some(match serde_json::from_str::<Value>(typed) {
            Ok(v) if json => v,
            _ => Value::String(typed.to_owned()),
        }));
    }
    match current {
        Value::Bool(b) => Ok(Some(Value::Bool(confirm(ask, key, *b)?))),
        Value::Number(n) => loop {
            let answer = text(ask, key, &n.to_string())?;
            let parsed = if n.is_f64() {
                answer.parse::<f64>().ok().and_then(Number::from_f64)
            } else {
                answer.parse::<i64>().ok().map(Number::from)
            };
            match parsed {
                Some(v) => return Ok(Some(Value::Number(v))),
                None => ask.say(&format!("! \"{answer}\" is not a number; try again.\n"))?,
            }
        },
        Value::Array(items) => {
            let shown = show(key, current);
            let default = if shown == NOT_SET { String::new() } else { shown };
            let answer = text(ask, &format!("{key} (comma-separated, '-' clears)"), &default)?;
            if answer == default {
                return Ok(None);
            }
            if answer == "-" {
                return Ok(Some(Value::Array(Vec::new())));
            }
            if answer.starts_with('[') || items.iter().any(|i| !i.is_string()) {
                return Ok(Some(
                    serde_json::from_str(&answer).unwrap_or(Value::String(answer)),
                ));
            }
            Ok(Some(Value::Array(
                answer
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_owned()))
                    .collect(),
            )))
        }
        _ => {
            let default = current.as_str().unwrap_or_default().to_owned();
            let answer = text(ask, &format!("{key} ('-' clears)"), &default)?;
            if answer == default {
                return Ok(None);
            }
            if answer == "-" {
                return Ok(Some(Value::Null));
            }
            if current.is_null()
                && (answer.starts_with('{') || answer.starts_with('['))
                && let Ok(v) = serde_json::from_str::<Value>(&answer)
            {
                return Ok(Some(v));
            }
            Ok(Some(Value::String(answer)))
        }
    }
}

/// Asks for a new key of the block at `pointer` and its value (JSON, else text), and adds it when the config
/// takes it.
fn add_setting(ask: &mut dyn Ask, config: &mut Config, pointer: &str) -> Result<(), CliError> {
    let key = text(
        ask,
        "Setting name (camelCase, as in config.json; empty: none)",
        "",
    )?;
    if key.is_empty() {
        return Ok(());
    }
    let path = format!("{pointer}/{}", pointer_escape(&key));
    if serialize(config)?.pointer(&path).is_some() {
        ask.say(&format!("! {key} is already there; pick it from the list.\n"))?;
        return Ok(());
    }
    loop {
        let value = if is_secret(&key) {
            let typed = ask.secret(&format!("{key}: "))?;
            Value::String(typed.trim().to_owned())
        } else {
            let typed = text(ask, &format!("{key} (true/false, a number, text or JSON)"), "")?;
            serde_json::from_str(&typed).unwrap_or(Value::String(typed))
        };
        let mut root = serialize(config)?;
        let Some(Value::Object(block)) = root.pointer_mut(pointer) else {
            return Ok(());
        };
        block.insert(key.clone(), value);
        let checked = serde_json::from_value::<Config>(root)
            .map_err(|e| e.to_string())
            .and_then(|c| c.validate().map(|()| c).map_err(|e| e.to_string()));
        match checked {
            Ok(next) => {
                *config = next;
                return Ok(());
            }
            Err(why) => ask.say(&refusal(&key, &why))?,
        }
    }
}

/// Fields picked from a list: (choices, whether the value may be cleared).
fn fixed_choices(config: &Config, pointer: &str, key: &str) -> Option<(Vec<String>, bool)> {
    let in_model_settings = pointer == "/agents/defaults" || pointer.starts_with("/modelPresets/");
    match key {
        "reasoningEffort" => Some((["low", "medium", "high"].map(str::to_owned).to_vec(), true)),
        "provider" if in_model_settings => {
            let mut names: Vec<String> = super::api_key_providers()
                .iter()
                .map(|s| s.name.to_owned())
                .collect();
            names.sort();
            names.insert(0, "auto".to_owned());
            Some((names, false))
        }
        "modelPreset" if pointer == "/agents/defaults" => Some((config.model_preset_names(), true)),
        _ => None,
    }
}

/// Advanced → Model Presets: add, edit or delete named presets (`default` is reserved).
pub(super) fn presets(ask: &mut dyn Ask, config: &mut Config) -> Result<(), CliError> {
    loop {
        let names: Vec<String> = config.model_presets.keys().cloned().collect();
        let mut labels: Vec<String> = names
            .iter()
            .map(|n| {
                let model = config.model_presets[n]
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                format!("{n} - {model}")
            })
            .collect();
        labels.push("[+] Add new preset".to_owned());
        labels.push("<- Back".to_owned());
        ask.say("\n── Model Presets ──\nCreate, edit or delete named model presets for quick switching.\n")?;
        let i = select(ask, "Select preset:", &labels, None)?;
        if i == names.len() {
            let name = loop {
                let name = text(ask, "Preset name", "")?;
                if !name.is_empty() {
                    break name;
                }
                ask.say("! Name cannot be empty.\n")?;
            };
            if config.model_presets.contains_key(&name) {
                ask.say(&format!("! Preset '{name}' already exists.\n"))?;
                continue;
            }
            if name == nanobot_config::DEFAULT_PRESET {
                ask.say("! 'default' is reserved; it is generated from Agent Settings.\n")?;
                continue;
            }
            let model = loop {
                let m = text(ask, "Model", "")?;
                if !m.is_empty() {
                    break m;
                }
                ask.say("! A preset needs a model.\n")?;
            };
            let mut preset =
                nanobot_config::ModelPreset::from_defaults(&nanobot_config::AgentDefaults::default());
            preset.model = model;
            preset.provider = "auto".to_owned();
            preset.reasoning_effort = None;
            let v = serde_json::to_value(&preset).map_err(|e| CliError::Usage(e.to_string()))?;
            config.model_presets.insert(name.clone(), v);
            section(
                ask,
                config,
                &format!("New Preset: {name}"),
                &format!("/modelPresets/{}", pointer_escape(&name)),
                &[],
            )?;
            continue;
        }
        let Some(name) = names.get(i) else {
            return Ok(());
        };
        let actions = ["Edit".to_owned(), "Delete".to_owned(), "Cancel".to_owned()];
        match select(ask, &format!("Preset: {name}"), &actions, Some(0))? {
            0 => section(
                ask,
                config,
                &format!("Edit Preset: {name}"),
                &format!("/modelPresets/{}", pointer_escape(name)),
                &[],
            )?,
            1 if confirm(ask, &format!("Delete preset '{name}'?"), false)? => {
                let mut next = config.clone();
                next.model_presets.remove(name);
                match next.validate() {
                    Ok(()) => *config = next,
                    Err(e) => ask.say(&format!("! Not deleted: {e}\n"))?,
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ask::script::Script;
    use super::*;

    #[test]
    fn a_secret_is_kept_replaced_or_cleared_and_never_shown() {
        let mut config: Config =
            serde_json::from_str(r#"{"providers":{"openai":{"apiKey":"sk-old-123"}}}"#).unwrap();
        let field = "apiKey: [set, hidden]";
        let mut s = Script::new(&[field, "Keep existing value", "[Done]"]);
        section(&mut s, &mut config, "OpenAI", "/providers/openai", &[]).unwrap();
        let key = |c: &Config| {
            c.providers
                .get("openai")
                .unwrap()
                .api_key
                .as_ref()
                .map(|k| k.expose().to_owned())
        };
        assert_eq!(key(&config).as_deref(), Some("sk-old-123"));
        let mut s = Script::new(&[field, "Enter new value", "sk-new-456", "[Done]"]);
        section(&mut s, &mut config, "OpenAI", "/providers/openai", &[]).unwrap();
        assert_eq!(key(&config).as_deref(), Some("sk-new-456"));
        assert!(s.said.contains("apiKey: (hidden)"), "{}", s.said);
        // A value of the wrong kind is refused without quoting it.
        let headers = "extraHeaders: [not set]";
        let mut s3 = Script::new(&[headers, "Bearer sk-in-header-77", "{\"X-Key\": \"v\"}", "[Done]"]);
        section(&mut s3, &mut config, "OpenAI", "/providers/openai", &[]).unwrap();
        assert!(
            s3.said
                .contains("extraHeaders: the config does not take this value"),
            "{}",
            s3.said
        );
        assert!(!s3.said.contains("sk-in-header"), "{}", s3.said);
        let v = serde_json::to_value(&config).unwrap();
        assert_eq!(v["providers"]["openai"]["extraHeaders"]["X-Key"], "v");
        let mut s2 = Script::new(&[field, "Clear value", "[Done]"]);
        section(&mut s2, &mut config, "OpenAI", "/providers/openai", &[]).unwrap();
        assert_eq!(key(&config), None);
        for said in [&s.said, &s2.said] {
            assert!(!said.contains("sk-old") && !said.contains("sk-new"), "{said}");
        }
    }

    #[test]
    fn a_bad_port_is_refused_and_asked_again_and_secrets_are_never_shown() {
        let mut config: Config =
            serde_json::from_str(r#"{"providers":{"openai":{"apiKey":"sk-secret-123"}}}"#).unwrap();
        // gateway: pick port, "abc", "70000", "18000", Done.
        let port = {
            let v = serde_json::to_value(&config).unwrap();
            let keys: Vec<String> = v["gateway"].as_object().unwrap().keys().cloned().collect();
            keys.iter().position(|k| k == "port").unwrap() + 1
        };
        let done = serde_json::to_value(&config).unwrap()["gateway"]
            .as_object()
            .unwrap()
            .len()
            + 1;
        let mut s = Script::new(&[&port.to_string(), "abc", "70000", "18000", &done.to_string()]);
        section(&mut s, &mut config, "Gateway", "/gateway", &[]).unwrap();
        assert_eq!(config.gateway.port, 18000);
        assert!(s.said.contains("\"abc\" is not a number"), "{}", s.said);
        assert!(s.said.contains("value not saved"), "{}", s.said);

        let fields = serde_json::to_value(&config).unwrap()["providers"]["openai"]
            .as_object()
            .unwrap()
            .len();
        let mut s = Script::new(&[&(fields + 1).to_string()]);
        section(&mut s, &mut config, "OpenAI", "/providers/openai", &[]).unwrap();
        assert!(s.said.contains(HIDDEN), "{}", s.said);
        assert!(!s.said.contains("sk-secret"), "{}", s.said);
    }
}
