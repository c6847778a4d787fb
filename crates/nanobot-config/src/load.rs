//! Loading: built-in defaults < `NANOBOT_…__…` environment variables < `config.json` (nanobot 0.3.5's
//! precedence: the environment fills what the file leaves out), layered by figment (see `layers.rs`).
//!
//! 1. The file is parsed as JSON (errors give line and column) and old keys are migrated.
//! 2. `${VAR}` references in string values are resolved from the environment map.
//! 3. The JSON is typed into [`Config`]: missing keys take the built-in defaults, both camelCase and
//!    snake_case are accepted, and a wrong type is reported with its dotted path.
//! 4. `NANOBOT_` variables fill the keys the file does not set, each typed by its key; figment merges
//!    defaults, environment and file, and the merged document is typed again (errors name the variable).
//! 5. Unmodelled keys become warnings; [`Config::validate`] checks ranges.
//!
//! [`LoadedConfig::save`] writes the config back without the environment's overrides and with `${VAR}`
//! references as written, so secrets that live in the environment never land in the file.

use std::fmt;
use std::path::{Path, PathBuf};

use nanobot_util::EnvMap;
use serde_json::Value;

use crate::doc;
use crate::env_overlay::Overlay;
use crate::interpolate::{self, InterpError, Interpolated};
use crate::layers;
use crate::migrate::migrate;
use crate::{Config, ConfigError};

/// What kind of thing a [`ConfigWarning`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// A key this version does not model. It is kept and written back on save.
    UnknownKey,
    /// An old key was moved to its current place (the next save writes the new layout).
    Migrated,
    /// A `NANOBOT_` variable whose name could not be used.
    IgnoredEnvVar,
    /// A `NANOBOT_` variable for a key the file sets: the file wins (nanobot 0.3.5's precedence).
    ShadowedEnvVar,
}

/// Something about a config worth telling the user that does not stop loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// What kind of warning.
    pub kind: WarningKind,
    /// The dotted field (or the variable name for [`WarningKind::IgnoredEnvVar`]).
    pub field: String,
    /// A sentence for the user.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A loaded config with its warnings, and what is needed to save it faithfully.
///
/// `Debug` shows the config (secrets redacted) and the *paths* of interpolated and overridden fields, never
/// their values.
#[derive(Clone)]
pub struct LoadedConfig {
    /// The resolved config. Change it freely, then [`LoadedConfig::save`].
    pub config: Config,
    /// Warnings (unknown keys, migrations, unusable variables), also logged with `tracing`.
    pub warnings: Vec<ConfigWarning>,
    /// The file the config was loaded from (and is saved to).
    pub path: PathBuf,
    /// Whether the file existed (if not, the config is the defaults plus the environment).
    pub file_found: bool,
    overlay: Overlay,
    interpolated: Vec<Interpolated>,
}

/// Loads the config file at `path` with the environment `env` (`NANOBOT_` overrides and `${VAR}` values).
///
/// A missing file gives the defaults (plus the environment), like the Python nanobot.
///
/// ```
/// use nanobot_util::EnvMap;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("config.json");
/// std::fs::write(&path, r#"{"providers": {"openai": {"apiKey": "${OPENAI_KEY}"}}}"#)?;
/// let env = EnvMap::from_iter([
///     ("OPENAI_KEY", "sk-1"),
///     ("NANOBOT_AGENTS__DEFAULTS__MODEL", "openai/gpt-4o"),
/// ]);
/// let loaded = nanobot_config::load(&path, &env)?;
/// assert_eq!(loaded.config.agents.defaults.model, "openai/gpt-4o");
/// assert_eq!(loaded.config.providers.get("openai").unwrap().api_key.as_ref().unwrap().expose(), "sk-1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load(path: &Path, env: &EnvMap) -> Result<LoadedConfig, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, path, env),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(path = %path.display(), "no config file; using the defaults");
            let mut loaded = load_value(Value::Object(serde_json::Map::new()), path, env)?;
            loaded.file_found = false;
            Ok(loaded)
        }
        Err(source) => Err(ConfigError::Io {
            action: "cannot read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Like [`load`], with the file's text given; `path` names it in errors and is where [`LoadedConfig::save`]
/// writes.
pub fn load_str(text: &str, path: &Path, env: &EnvMap) -> Result<LoadedConfig, ConfigError> {
    // A UTF-8 byte-order mark (Windows editors write one) is not JSON but is accepted, as Python's loader does.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: Value = serde_json::from_str(text).map_err(|source| ConfigError::Json {
        path: path.to_path_buf(),
        line: source.line(),
        column: source.column(),
        source,
    })?;
    load_value(raw, path, env)
}

fn load_value(mut raw: Value, path: &Path, env: &EnvMap) -> Result<LoadedConfig, ConfigError> {
    if !raw.is_object() {
        return Err(ConfigError::InvalidValue {
            field: String::new(),
            origin: path.display().to_string(),
            message: "the config must be a JSON object (`{ … }`)".into(),
            source: None,
        });
    }
    let mut warnings = Vec::new();
    for m in migrate(&mut raw) {
        let message = if m.moved {
            format!(
                "`{}` is an old key; moved to `{}` (the next save writes the new place)",
                m.from, m.to
            )
        } else {
            format!(
                "`{}` is an old key and `{}` is also set; the old key is ignored",
                m.from, m.to
            )
        };
        warnings.push(ConfigWarning {
            kind: WarningKind::Migrated,
            field: m.from,
            message,
        });
    }

    let interpolated = interpolate::interpolate(&mut raw, env).map_err(|e| match e {
        InterpError::Missing { field, var } => ConfigError::MissingEnvVar {
            field,
            var,
            path: path.to_path_buf(),
        },
        InterpError::Malformed { field, reason } => ConfigError::BadReference {
            field,
            reason,
            path: path.to_path_buf(),
        },
    })?;

    let file_origin = path.display().to_string();
    let from_file: Config = typed(&raw, |_| file_origin.clone())?;
    let canonical = serde_json::to_value(&from_file).map_err(ConfigError::Serialize)?;
    let interpolated: Vec<Interpolated> = interpolated
        .into_iter()
        .map(|i| Interpolated {
            path: doc::canonical_path(&canonical, &i.path).unwrap_or(i.path),
            ..i
        })
        .collect();

    // figment layers defaults < environment < file (0.3.5's precedence); the environment is typed by the
    // key each variable lands on, against the file typed over the defaults.
    // A variable the file names in `${…}` is the file's value, not an override too (`NANOBOT_BUS_KEY` for
    // `gateway.bus.nats.key` would otherwise also land on a top-level `busKey`).
    let mut overrides = env.clone();
    for var in interpolated.iter().flat_map(|i| &i.vars) {
        overrides.remove(var);
    }
    let mut env_layer = layers::EnvLayer::new(&overrides, &canonical, &raw)?;
    let figment = layers::figment(&env_layer, layers::restrict(&canonical, &raw), path)?;
    let merged = layers::merged(&figment, &canonical)?;
    let config: Config = typed(&merged, |field| {
        layers::env_origin(&figment, field).unwrap_or_else(|| file_origin.clone())
    })?;
    // Record what the overrides look like once typed, so a save recognises them unchanged.
    let typed_json = serde_json::to_value(&config).map_err(ConfigError::Serialize)?;
    env_layer.record_typed(&typed_json);
    let overlay = env_layer.into_overlay();

    for (var, field) in &overlay.shadowed {
        warnings.push(ConfigWarning {
            kind: WarningKind::ShadowedEnvVar,
            field: var.clone(),
            message: format!(
                "environment variable {var} has no effect: {file_origin} sets `{field}`, and the file wins over \
                 the environment (as in nanobot 0.3.5)"
            ),
        });
    }
    for (var, why) in &overlay.ignored {
        warnings.push(ConfigWarning {
            kind: WarningKind::IgnoredEnvVar,
            field: var.clone(),
            message: format!("environment variable {var} ignored: {why}"),
        });
    }
    // 0.3.5's root settings model forbids extra keys (nested blocks only ignore them): a top-level key the file
    // sets is an error there, so it is one here. (An unknown top-level variable is ignored there: a warning.)
    if let Some(key) = from_file.extra.0.keys().next() {
        return Err(ConfigError::UnknownSetting {
            key: key.clone(),
            path: path.to_path_buf(),
        });
    }
    for field in config.unknown_keys() {
        let message = match overlay.var_for(&field) {
            Some(var) => {
                format!("unknown config key `{field}` (set by environment variable {var}); it is ignored")
            }
            None => {
                format!("unknown config key `{field}` in {file_origin}; it is ignored but kept when saving")
            }
        };
        warnings.push(ConfigWarning {
            kind: WarningKind::UnknownKey,
            field,
            message,
        });
    }
    for w in &warnings {
        tracing::warn!(field = %w.field, "{}", w.message);
    }

    config.validate()?;
    Ok(LoadedConfig {
        config,
        warnings,
        path: path.to_path_buf(),
        file_found: true,
        overlay,
        interpolated,
    })
}

/// Types `value` into a [`Config`], reporting a failure with its dotted path and origin.
///
/// Secrets are known by the schema: a field typed [`crate::Secret`] or [`crate::SecretMap`] refuses a wrong value
/// without quoting it (see `secret.rs`), and a block (an object or a list) given as a plain value is described by
/// the kind of value found, not the value, since such a block may hold secrets (`providers.custom` given as a
/// string is usually the key). Every other bad value is quoted as written.
fn typed(value: &Value, origin: impl Fn(&str) -> String) -> Result<Config, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        let found = value_at(value, e.path());
        let message = hide_misplaced_value(&e.inner().to_string(), found);
        ConfigError::InvalidValue {
            origin: origin(&field),
            field,
            message,
            source: None,
        }
    })
}

/// The raw value at a deserializer's error path, when it can be followed.
fn value_at<'a>(root: &'a Value, path: &serde_path_to_error::Path) -> Option<&'a Value> {
    use serde_path_to_error::Segment;
    let mut cur = root;
    for seg in path.iter() {
        cur = match seg {
            Segment::Map { key } => cur.get(key.as_str())?,
            Segment::Seq { index } => cur.get(*index)?,
            Segment::Enum { .. } => cur,
            Segment::Unknown => return None,
        };
    }
    Some(cur)
}

/// Rewrites serde's "invalid type: string \"…\", expected struct X" when a plain value stands where the schema
/// wants a block: the value is replaced by its kind.
fn hide_misplaced_value(message: &str, found: Option<&Value>) -> String {
    let kind = match found {
        Some(Value::String(_)) => "a string",
        Some(Value::Number(_)) => "a number",
        Some(Value::Bool(_)) => "a boolean",
        _ => return message.to_owned(),
    };
    let Some(rest) = message.strip_prefix("invalid type: ") else {
        return message.to_owned();
    };
    let Some((_, expected)) = rest.split_once(", expected ") else {
        return message.to_owned();
    };
    let block = [
        "struct",
        "a map",
        "map",
        "a sequence",
        "a list",
        "an object",
        "sequence",
    ]
    .iter()
    .any(|w| expected.starts_with(w));
    if !block {
        return message.to_owned();
    }
    format!("expected {expected}, found {kind} (not shown: this block can hold secrets such as API keys)")
}

impl fmt::Debug for LoadedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedConfig")
            .field("config", &self.config)
            .field("warnings", &self.warnings)
            .field("path", &self.path)
            .field("file_found", &self.file_found)
            .field("interpolated_fields", &self.interpolated_fields())
            .field("env_overrides", &self.env_overrides())
            .finish()
    }
}

impl LoadedConfig {
    /// The JSON a save writes: [`LoadedConfig::config`] in camelCase, with the environment's overrides
    /// replaced by the file's own values and `${VAR}` references restored where the value is unchanged.
    pub fn to_file_value(&self) -> Result<Value, ConfigError> {
        let mut v = serde_json::to_value(&self.config).map_err(ConfigError::Serialize)?;
        for (path, after) in &self.overlay.created {
            if doc::get(&v, path) == Some(after) {
                doc::remove(&mut v, path);
            }
        }
        for set in self.overlay.sets.iter().rev() {
            if doc::get(&v, &set.path) == Some(&set.after) {
                match &set.before {
                    Some(before) => {
                        doc::set(&mut v, &set.path, before.clone());
                    }
                    None => doc::remove(&mut v, &set.path),
                }
            }
        }
        for i in &self.interpolated {
            if doc::get(&v, &i.path).and_then(Value::as_str) == Some(i.resolved.as_str()) {
                doc::set(&mut v, &i.path, Value::String(i.template.clone()));
            }
        }
        Ok(v)
    }

    /// Writes the config back to [`LoadedConfig::path`] (atomically, mode 0600; see [`crate::save`]).
    pub fn save(&self) -> Result<(), ConfigError> {
        self.save_to(&self.path)
    }

    /// Writes the config to another file, like [`LoadedConfig::save`].
    pub fn save_to(&self, path: &Path) -> Result<(), ConfigError> {
        crate::save::write_json_atomic(path, &self.to_file_value()?)
    }

    /// Paths of values that came from `${VAR}` references (dotted, canonical spelling).
    pub fn interpolated_fields(&self) -> Vec<String> {
        self.interpolated.iter().map(|i| i.path.to_string()).collect()
    }

    /// Dotted fields set by `NANOBOT_` environment variables, with the variable's name.
    pub fn env_overrides(&self) -> Vec<(String, String)> {
        self.overlay
            .sets
            .iter()
            .map(|s| (s.path.to_string(), s.var.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::hide_misplaced_value;
    use serde_json::json;

    #[test]
    fn plain_values_in_place_of_blocks_are_hidden_others_shown() {
        let msg = "invalid type: string \"sk-abc\", expected struct ProviderConfig";
        let out = hide_misplaced_value(msg, Some(&json!("sk-abc")));
        assert!(
            !out.contains("sk-abc") && out.contains("ProviderConfig") && out.contains("a string"),
            "{out}"
        );
        let msg = "invalid type: string \"lots\", expected u32";
        assert_eq!(hide_misplaced_value(msg, Some(&json!("lots"))), msg);
    }
}
