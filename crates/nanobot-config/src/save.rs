//! Writing `config.json`: camelCase, pretty-printed like the Python nanobot, atomically and private.

use std::path::Path;

use serde_json::Value;

use crate::{Config, ConfigError};

/// Writes `config` to `path` as camelCase JSON: to a temporary file in the same directory, flushed to disk,
/// mode 0600, then renamed over the old file, so a crash leaves either the old or the new file, never half of
/// one. Missing parent directories are created (mode 0700).
///
/// This writes every modelled key plus the keys kept in each `extra`. To keep `${VAR}` references and leave
/// environment overrides out of the file, save through [`crate::LoadedConfig::save`] instead.
pub fn save(path: &Path, config: &Config) -> Result<(), ConfigError> {
    let value = serde_json::to_value(config).map_err(ConfigError::Serialize)?;
    write_json_atomic(path, &value)
}

pub(crate) fn write_json_atomic(path: &Path, value: &Value) -> Result<(), ConfigError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ConfigError::Io { action, path, source }
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.exists() {
        create_private_dir(dir).map_err(io("cannot create directory", dir))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(ConfigError::Serialize)?;
    nanobot_util::write_atomic(path, text.as_bytes()).map_err(|e| ConfigError::Io {
        action: e.action,
        path: e.path,
        source: e.source,
    })
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}
