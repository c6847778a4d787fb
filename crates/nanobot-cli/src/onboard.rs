//! `nanobot onboard`: the default config (or a refresh that keeps values and adds new keys) and the
//! workspace templates. Never asks anything, so it works without a terminal.

use std::io::Write;
use std::path::{Path, PathBuf};

use nanobot_config::{Config, ProviderConfig};

use crate::args::ConfigArgs;
use crate::error::CliError;
use crate::setup::{self, CliEnv};

/// The workspace templates: path inside the workspace → contents. Existing files are never overwritten.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("AGENTS.md", include_str!("../templates/AGENTS.md")),
    ("SOUL.md", include_str!("../templates/SOUL.md")),
    ("USER.md", include_str!("../templates/USER.md")),
    ("TOOLS.md", include_str!("../templates/TOOLS.md")),
    ("HEARTBEAT.md", include_str!("../templates/HEARTBEAT.md")),
    ("memory/MEMORY.md", include_str!("../templates/memory/MEMORY.md")),
];

/// What `onboard` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnboardReport {
    /// The config file.
    pub config_path: PathBuf,
    /// True when the config file was created, false when an existing one was refreshed.
    pub created: bool,
    /// The workspace.
    pub workspace: PathBuf,
    /// Workspace files written (relative paths); existing ones are left alone.
    pub written: Vec<String>,
}

/// A fresh config: the built-in defaults plus an empty block for every known provider, so the file shows
/// where each key goes (as the Python nanobot's file does).
pub fn default_config() -> Config {
    let mut config = Config::default();
    add_provider_blocks(&mut config);
    config
}

fn add_provider_blocks(config: &mut Config) {
    for spec in nanobot_providers::registry::PROVIDERS {
        let key = nanobot_providers::registry::config_key(spec.name);
        if config.providers.get(&key).is_none() {
            config.providers.insert(key, ProviderConfig::default());
        }
    }
}

/// Writes (or refreshes) the config and the workspace templates.
pub(crate) fn onboard(env: &CliEnv, args: &ConfigArgs) -> Result<OnboardReport, CliError> {
    let (paths, _) = env.paths(args.config.as_deref());
    let config_path = paths.config_path().to_path_buf();
    let created;
    let workspace;
    if config_path.exists() {
        // Refresh: load (values, `${VAR}` references and unknown keys are kept), add what is new, save.
        let mut s = setup::load(env, args, true)?;
        add_provider_blocks(&mut s.loaded.config);
        s.loaded.save().map_err(|e| CliError::from_config(e, None))?;
        workspace = s.workspace;
        created = false;
    } else {
        let mut config = default_config();
        if let Some(ws) = &args.workspace {
            config.agents.defaults.workspace = env.absolute(ws).display().to_string();
        }
        nanobot_config::save(&config_path, &config).map_err(|e| CliError::from_config(e, None))?;
        workspace = paths.workspace(&config.agents.defaults.workspace);
        created = true;
    }
    let written = write_templates(&workspace)?;
    Ok(OnboardReport {
        config_path,
        created,
        workspace,
        written,
    })
}

/// Creates the workspace, its `skills/` and `memory/` folders and the template files that do not exist yet.
/// Returns the files written.
pub(crate) fn write_templates(workspace: &Path) -> Result<Vec<String>, CliError> {
    for dir in [
        workspace.to_path_buf(),
        workspace.join("memory"),
        workspace.join("skills"),
    ] {
        std::fs::create_dir_all(&dir).map_err(|e| CliError::io("create", &dir, e))?;
    }
    let mut written = Vec::new();
    for (rel, text) in TEMPLATES {
        let path = workspace.join(rel);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(text.as_bytes())
                    .map_err(|e| CliError::io("write", &path, e))?;
                written.push((*rel).to_owned());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CliError::io("create", &path, e)),
        }
    }
    Ok(written)
}

/// The text `nanobot onboard` prints; `local` is a model server found on this machine.
pub(crate) fn render_report(
    r: &OnboardReport,
    config: Option<&Config>,
    local: Option<&crate::local_servers::Found>,
) -> String {
    let mut out = String::new();
    if r.created {
        out.push_str(&format!("✓ Created config at {}\n", r.config_path.display()));
    } else {
        out.push_str(&format!(
            "✓ Refreshed config at {} (existing values kept, new keys added)\n",
            r.config_path.display()
        ));
    }
    out.push_str(&format!("✓ Workspace ready at {}\n", r.workspace.display()));
    for f in &r.written {
        out.push_str(&format!("  created {f}\n"));
    }
    let has_key = config.is_some_and(|c| c.providers.first_with_key().is_some());
    out.push_str("\nNext steps:\n");
    if let (false, Some(found)) = (has_key, local) {
        out.push_str(&crate::local_servers::offer(found));
        out.push_str("  Or, for a cloud model:\n");
    }
    if !has_key {
        let model = config.map_or("anthropic/claude-opus-4-5", |c| c.agents.defaults.model.as_str());
        let which = match nanobot_providers::registry::no_provider_error(model) {
            nanobot_providers::ProviderError::MissingApiKey {
                config_key, env_var, ..
            } => format!(
                "set `providers.{config_key}.apiKey` in {}{}",
                r.config_path.display(),
                env_var
                    .map(|v| format!(" or the environment variable {v}"))
                    .unwrap_or_default()
            ),
            _ => format!("set a provider's `apiKey` in {}", r.config_path.display()),
        };
        out.push_str(&format!(
            "  1. Add an API key for the model `{model}`: {which}.\n     \
             A key for OpenRouter (OPENROUTER_API_KEY, https://openrouter.ai/keys) also works for every model.\n"
        ));
        out.push_str("  2. Chat: nanobot agent -m \"Hello!\"\n");
    } else {
        out.push_str("  Chat: nanobot agent -m \"Hello!\"\n");
    }
    out.push_str(
        "  (`nanobot` not found? Install it with `cargo install --locked --path bins/nanobot` from the source \
         folder, or run `cargo run --release -p nanobot -- agent` there.)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn fresh_onboard_writes_camel_case_config_and_templates() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), BTreeMap::new());
        let r = onboard(&env, &ConfigArgs::default()).unwrap();
        assert!(r.created);
        let text = std::fs::read_to_string(dir.path().join(".nanobot/config.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["agents"]["defaults"]["maxTokens"], 8192);
        assert!(v["providers"]["openrouter"].is_object());
        assert!(!text.contains("max_tokens"));
        let ws = dir.path().join(".nanobot/workspace");
        for (rel, _) in TEMPLATES {
            assert!(ws.join(rel).is_file(), "{rel}");
        }
        assert!(ws.join("skills").is_dir());
    }

    #[test]
    fn refresh_keeps_values_and_edited_templates_and_adds_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(
            &cfg,
            r#"{"agents":{"defaults":{"model":"openai/gpt-4o","max_tokens":1234}},
               "providers":{"openai":{"apiKey":"${MY_KEY}"}},"myOwnKey":{"x":1}}"#,
        )
        .unwrap();
        let ws = dir.path().join(".nanobot/workspace");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("SOUL.md"), "mine").unwrap();
        let env = CliEnv::for_home(dir.path(), BTreeMap::from([("MY_KEY".into(), "sk-live".into())]));
        let r = onboard(&env, &ConfigArgs::default()).unwrap();
        assert!(!r.created);
        assert!(!r.written.contains(&"SOUL.md".to_string()));
        assert_eq!(std::fs::read_to_string(ws.join("SOUL.md")).unwrap(), "mine");
        let text = std::fs::read_to_string(&cfg).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["agents"]["defaults"]["model"], "openai/gpt-4o");
        assert_eq!(v["agents"]["defaults"]["maxTokens"], 1234);
        assert_eq!(v["providers"]["openai"]["apiKey"], "${MY_KEY}");
        assert!(!text.contains("sk-live"));
        assert!(v["gateway"]["heartbeat"].is_object(), "new keys added");
        assert!(v["providers"]["anthropic"].is_object());
        assert_eq!(v["myOwnKey"]["x"], 1);
    }
}
