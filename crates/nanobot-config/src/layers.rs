//! The layering, done by figment: built-in defaults < `NANOBOT_…__…` environment < `config.json`, the
//! precedence of nanobot 0.3.5 (pydantic-settings gives the values a file passes in priority over the
//! environment; the environment fills what the file leaves out).
//!
//! Our own [`Provider`]s answer figment's two limits for us:
//! - [`EnvLayer`] reads an environment *map* handed in by the caller, never the process environment, one
//!   layer per variable (so figment's metadata names the variable behind a bad value);
//! - it types each value by the key it lands on (`"4096"` for `maxTokens` is a number, an all-digit API key
//!   stays a string) instead of guessing from the text.
//!
//! What figment has no equivalent for stays ours: `${VAR}` interpolation, migrations of old keys, unknown-key
//! warnings and the file/line/field error messages (typing uses `serde_path_to_error` on the merged document,
//! and [`Figment::find_metadata`] says which layer a bad field came from).

use std::path::Path;

use figment::value::{Dict, Map as FigmentMap};
use figment::{Figment, Metadata, Profile, Provider};
use nanobot_util::EnvMap;
use serde_json::{Map, Value};

use crate::doc::{find_key, get};
use crate::env_overlay::{self, Overlay, VarDoc};
use crate::{Config, ConfigError};

/// How a variable's layer is named in figment's metadata, before the variable's name.
const ENV_VAR: &str = "environment variable";
/// The name of the defaults layer.
const DEFAULTS_LAYER: &str = "built-in defaults";

/// A JSON document as a figment layer, under a name (`built-in defaults`, the file's path).
struct JsonLayer {
    metadata: Metadata,
    doc: Value,
}

impl Provider for JsonLayer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<FigmentMap<Profile, Dict>, figment::Error> {
        to_dict(&self.doc)
    }
}

/// The `NANOBOT_…__…` variables of an environment map as figment layers, one per variable (named after it in
/// figment's metadata), each value typed by the key it lands on in the target document (the file over the
/// defaults), keys the file sets left out.
pub(crate) struct EnvLayer {
    overlay: Overlay,
    vars: Vec<VarLayer>,
}

/// One variable's document as a figment layer.
struct VarLayer(VarDoc);

impl Provider for VarLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("{ENV_VAR} {}", self.0.var))
    }

    fn data(&self) -> Result<FigmentMap<Profile, Dict>, figment::Error> {
        to_dict(&self.0.doc)
    }
}

impl EnvLayer {
    /// Reads the overrides in `env` against `target` (canonical JSON: the file typed over the defaults), leaving
    /// out every key `file` (the file's own JSON) sets. Fails on a value that does not fit its key, naming the
    /// variable and the field, never the value.
    pub(crate) fn new(env: &EnvMap, target: &Value, file: &Value) -> Result<Self, ConfigError> {
        let (overlay, docs) = env_overlay::read(env, target, file)?;
        Ok(Self {
            overlay,
            vars: docs.into_iter().map(VarLayer).collect(),
        })
    }

    /// Records the overrides as they look once typed (`typed` is the final config's JSON), so a save
    /// recognises them unchanged and leaves them out of the file.
    pub(crate) fn record_typed(&mut self, typed: &Value) {
        for set in &mut self.overlay.sets {
            if let Some(v) = get(typed, &set.path) {
                set.after = v.clone();
            }
        }
        for (path, after) in &mut self.overlay.created {
            if let Some(v) = get(typed, path) {
                *after = v.clone();
            }
        }
    }

    /// What the environment set, for warnings and for leaving it out of a save.
    pub(crate) fn into_overlay(self) -> Overlay {
        self.overlay
    }
}

/// The layers, lowest first: the defaults, each variable, the file. `file` is the canonical JSON restricted to
/// the keys the file sets. figment merges them (objects key by key, anything else replaced), once.
pub(crate) fn figment(env: &EnvLayer, file: Value, path: &Path) -> Result<Figment, ConfigError> {
    let defaults = serde_json::to_value(Config::default()).map_err(ConfigError::Serialize)?;
    let layered = env.vars.iter().fold(
        Figment::from(JsonLayer {
            metadata: Metadata::named(DEFAULTS_LAYER),
            doc: defaults,
        }),
        Figment::merge,
    );
    Ok(layered.merge(JsonLayer {
        metadata: Metadata::from(
            path.display().to_string(),
            figment::Source::File(path.to_path_buf()),
        ),
        doc: file,
    }))
}

/// The merged document as JSON, keys in the order of `like` (the file's order; figment keeps maps sorted),
/// keys only the environment added after them.
pub(crate) fn merged(figment: &Figment, like: &Value) -> Result<Value, ConfigError> {
    let v: Value = figment.extract().map_err(|e| ConfigError::InvalidValue {
        field: e.path.join("."),
        origin: e
            .metadata
            .as_ref()
            .map_or_else(|| ENV_VAR.to_owned(), |m| m.name.to_string()),
        message: e.kind.to_string(),
        source: None,
    })?;
    Ok(reorder_like(v, like))
}

/// The variable `field` (dotted, as typing errors name it) came from, as `environment variable NAME`, if it came
/// from one.
pub(crate) fn env_origin(figment: &Figment, field: &str) -> Option<String> {
    let key = field.split('[').next().unwrap_or(field);
    if key.is_empty() {
        return None;
    }
    figment
        .find_metadata(key)
        .map(|m| m.name.to_string())
        .filter(|name| name.starts_with(ENV_VAR))
}

/// The keys of `canonical` (the file typed over the defaults, canonical spellings) that the file's own JSON
/// `raw` sets, in any spelling: the file's layer.
pub(crate) fn restrict(canonical: &Value, raw: &Value) -> Value {
    match (canonical, raw) {
        (Value::Object(c), Value::Object(r)) => {
            let mut out = Map::new();
            for (k, v) in c {
                if let Some(rk) = find_key(r, k)
                    && let Some(rv) = r.get(&rk)
                {
                    out.insert(k.clone(), restrict(v, rv));
                }
            }
            Value::Object(out)
        }
        (c, _) => c.clone(),
    }
}

fn reorder_like(v: Value, like: &Value) -> Value {
    match (v, like) {
        (Value::Object(mut m), Value::Object(l)) => {
            let mut out = Map::new();
            for (k, lv) in l {
                if let Some(v) = m.shift_remove(k) {
                    out.insert(k.clone(), reorder_like(v, lv));
                }
            }
            out.extend(m);
            Value::Object(out)
        }
        (Value::Array(items), Value::Array(l)) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| match l.get(i) {
                    Some(lv) => reorder_like(v, lv),
                    None => v,
                })
                .collect(),
        ),
        (v, _) => v,
    }
}

#[expect(
    clippy::result_large_err,
    reason = "figment::Error is what Provider::data returns; this helper only feeds it"
)]
fn to_dict(doc: &Value) -> Result<FigmentMap<Profile, Dict>, figment::Error> {
    let dict: Dict = serde_json::from_value(doc.clone()).map_err(|e| figment::Error::from(e.to_string()))?;
    Ok(Profile::Default.collect(dict))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn restrict_keeps_the_files_keys_in_canonical_spelling() {
        let canonical =
            json!({"agents": {"defaults": {"maxTokens": 10, "model": "m"}}, "gateway": {"port": 1}});
        let raw = json!({"agents": {"defaults": {"max_tokens": "10"}}});
        assert_eq!(
            restrict(&canonical, &raw),
            json!({"agents": {"defaults": {"maxTokens": 10}}})
        );
    }

    #[test]
    fn figment_orders_are_restored() {
        let like = json!({"b": 1, "a": {"z": 1, "y": 2}});
        let v = json!({"a": {"y": 2, "z": 1}, "b": 1, "c": 3});
        let out = reorder_like(v, &like);
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"b":1,"a":{"z":1,"y":2},"c":3}"#
        );
    }
}
