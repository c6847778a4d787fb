//! `nanobot onboard`: the default config (or a refresh that keeps values and adds new keys) and the
//! workspace templates. Without an API key, a model server found on this machine can be written into the config
//! ([`local_changes`]): on a terminal after a question, otherwise only with `--use-local`; a value the user set
//! is never replaced without saying so.

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

/// A fresh config: the built-in defaults plus what `onboard` adds (a block for every
/// known provider, the local WebUI on), as the Python nanobot's file has them.
pub fn default_config() -> Config {
    let mut config = Config::default();
    add_default_blocks(&mut config);
    config
}

/// Adds the blocks `onboard` writes where the config has none (a new config, a refresh, the wizard's result):
/// an empty block for every known provider, so the file shows where each key goes (the OAuth providers get none,
/// as in 0.3.5: their login lives in a token file), and the local WebUI turned on, as 0.3.5's `onboard` leaves
/// it: the `websocket` channel listens on loopback only and hands tokens to this machine's browser only
/// (docs/websocket.md). A block the user has, a channel's enabled or not, is left as it is.
pub(crate) fn add_default_blocks(config: &mut Config) {
    for spec in nanobot_providers::registry::PROVIDERS
        .iter()
        .filter(|s| !s.is_oauth)
    {
        let key = nanobot_providers::registry::config_key(spec.name);
        if config.providers.get(&key).is_none() {
            config.providers.insert(key, ProviderConfig::default());
        }
    }
    config
        .channels
        .other
        .0
        .entry("websocket")
        .or_insert_with(|| serde_json::json!({"enabled": true}));
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
        add_default_blocks(&mut s.loaded.config);
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

/// One value `onboard` writes for a local model server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalChange {
    /// Dotted config key.
    pub(crate) field: String,
    /// The value before (`None`: not set).
    pub(crate) old: Option<String>,
    /// The value written.
    pub(crate) new: String,
    /// The value before is the user's own (not onboard's default), so replacing it is said out loud.
    pub(crate) replaces_user_value: bool,
}

/// The values to write so that `config` uses the server `found`: `agents.defaults.provider`, the model it
/// serves (when it lists one) and the provider block's `apiBase`. Values already equal are left out.
pub(crate) fn local_changes(config: &Config, found: &crate::local_servers::Found) -> Vec<LocalChange> {
    let defaults = nanobot_config::AgentDefaults::default();
    let provider = found.candidate.provider;
    let d = &config.agents.defaults;
    let mut changes = Vec::new();
    let mut push = |field: String, old: Option<&str>, new: &str, default: Option<&str>| {
        let old = old.filter(|o| !o.trim().is_empty());
        if old == Some(new) {
            return;
        }
        changes.push(LocalChange {
            field,
            old: old.map(str::to_owned),
            new: new.to_owned(),
            replaces_user_value: old.is_some() && old != default,
        });
    };
    push(
        "agents.defaults.provider".to_owned(),
        Some(&d.provider),
        provider,
        Some(&defaults.provider),
    );
    if let Some(model) = &found.model {
        push(
            "agents.defaults.model".to_owned(),
            Some(&d.model),
            model,
            Some(&defaults.model),
        );
    }
    let base = config.providers.get(provider).and_then(|p| p.api_base.clone());
    push(
        format!("providers.{provider}.apiBase"),
        base.as_deref(),
        &found.base,
        None,
    );
    // The window the server serves, and an answer's room that leaves most of it for the conversation.
    if let Some(w) = found.window {
        push(
            "agents.defaults.contextWindowTokens".to_owned(),
            Some(&d.context_window_tokens.to_string()),
            &w.tokens.to_string(),
            Some(&defaults.context_window_tokens.to_string()),
        );
        let room = (w.tokens / 4).max(256);
        if d.max_tokens > room {
            push(
                "agents.defaults.maxTokens".to_owned(),
                Some(&d.max_tokens.to_string()),
                &room.to_string(),
                Some(&defaults.max_tokens.to_string()),
            );
        }
    }
    // A small window (or one the server does not state) gets the short tool set, unless the user chose tools.
    let small = found.window.is_none_or(|w| w.tokens <= SMALL_WINDOW);
    if small && config.tools.profile.trim().is_empty() && config.tools.only.is_empty() {
        push("tools.profile".to_owned(), None, "local", None);
    }
    changes
}

/// Up to this context window, `onboard` offers a local server's model the `local` tool profile: the full set's
/// definitions alone fill a quarter of such a window, and a CPU reads them for minutes before each first answer.
pub(crate) const SMALL_WINDOW: u32 = 32_768;

/// Writes `changes` (from [`local_changes`]) into `config`.
pub(crate) fn apply_local(config: &mut Config, changes: &[LocalChange]) {
    for c in changes {
        match c.field.as_str() {
            "agents.defaults.provider" => config.agents.defaults.provider = c.new.clone(),
            "agents.defaults.model" => config.agents.defaults.model = c.new.clone(),
            "agents.defaults.contextWindowTokens" => {
                if let Ok(n) = c.new.parse() {
                    config.agents.defaults.context_window_tokens = n;
                }
            }
            "agents.defaults.maxTokens" => {
                if let Ok(n) = c.new.parse() {
                    config.agents.defaults.max_tokens = n;
                }
            }
            "tools.profile" => config.tools.profile = c.new.clone(),
            field => {
                let Some(name) = field
                    .strip_prefix("providers.")
                    .and_then(|f| f.strip_suffix(".apiBase"))
                else {
                    continue;
                };
                if config.providers.get(name).is_none() {
                    config.providers.insert(name, ProviderConfig::default());
                }
                if let Some(p) = config.providers.get_mut(name) {
                    p.api_base = Some(c.new.clone());
                }
            }
        }
    }
}

/// The lines listing `changes`, each replaced user value marked.
pub(crate) fn describe_changes(changes: &[LocalChange]) -> String {
    let mut out = String::new();
    for c in changes {
        match &c.old {
            Some(old) if c.replaces_user_value => out.push_str(&format!(
                "     {}: \"{}\" (your value, replaced) → \"{}\"\n",
                c.field, old, c.new
            )),
            Some(old) => out.push_str(&format!("     {}: \"{}\" → \"{}\"\n", c.field, old, c.new)),
            None => out.push_str(&format!("     {}: \"{}\"\n", c.field, c.new)),
        }
    }
    out
}

/// What became of a model server found on this machine.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LocalOutcome<'a> {
    /// None found (or not looked for).
    None,
    /// Found and offered: these settings would be written.
    Offered(&'a crate::local_servers::Found, &'a [LocalChange]),
    /// Found, and the user said no.
    Declined(&'a crate::local_servers::Found),
    /// Found and written into the config.
    Written(&'a crate::local_servers::Found, &'a [LocalChange]),
    /// Found, and the config already uses it.
    AlreadySet(&'a crate::local_servers::Found),
}

/// Where the context window written came from, or, when the server does not say, what to set by hand.
fn window_note(found: &crate::local_servers::Found) -> String {
    match found.window {
        Some(w) => format!("  The context window ({} tokens) is what {} reports.\n", w.tokens, w.source),
        None => "  The server does not say how much context it serves: set `agents.defaults.contextWindowTokens` \
                 to the size it was started with (llama-cpp-python: --n_ctx, 2048 unless given, too small for \
                 tools: start it with --n_ctx 8192 or more, and with --chat_format chatml-function-calling unless \
                 the model's template shows tools). `nanobot doctor` shows what the prompt needs.\n"
            .to_owned(),
    }
}

/// The text `nanobot onboard` prints; `local` is what became of a model server found on this machine.
pub(crate) fn render_report(r: &OnboardReport, config: Option<&Config>, local: LocalOutcome<'_>) -> String {
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
    if let LocalOutcome::Written(found, changes) = local {
        out.push_str(&format!(
            "✓ Wrote the settings for {} at {} into {}:\n{}",
            found.candidate.server,
            found.base,
            r.config_path.display(),
            describe_changes(changes)
        ));
        if found.model.is_none() {
            out.push_str("  The server lists no model: set `agents.defaults.model` to one it serves.\n");
        }
        out.push_str(&window_note(found));
    }
    let has_key = config.is_some_and(|c| c.providers.first_with_key().is_some());
    if let LocalOutcome::AlreadySet(found) = local {
        out.push_str(&format!(
            "✓ The config already uses {} at {}\n",
            found.candidate.server, found.base
        ));
    }
    let local_written = matches!(local, LocalOutcome::Written(..) | LocalOutcome::AlreadySet(..));
    out.push_str("\nNext steps:\n");
    match local {
        LocalOutcome::Offered(found, changes) if !has_key => {
            out.push_str(&crate::local_servers::offer(found));
            out.push_str(&format!(
                "  `nanobot onboard --use-local` writes it for you:\n{}",
                describe_changes(changes)
            ));
            out.push_str("  Or, for a cloud model:\n");
        }
        LocalOutcome::Declined(found) if !has_key => {
            out.push_str(&crate::local_servers::offer(found));
            out.push_str("  Or, for a cloud model:\n");
        }
        _ => {}
    }
    if !has_key && !local_written {
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
    fn unedited_templates_are_known_to_the_prompt() {
        // The prompt leaves a profile or memory template nobody edited out; it knows them by digest.
        for (name, text) in TEMPLATES {
            if matches!(*name, "AGENTS.md" | "USER.md" | "memory/MEMORY.md") {
                assert!(
                    nanobot_core::is_unedited_template(name, text),
                    "{name} is not in UNEDITED_TEMPLATES"
                );
                assert!(!nanobot_core::is_unedited_template(
                    name,
                    &format!("{text}\nedited")
                ));
            }
        }
    }

    #[test]
    fn fresh_onboard_writes_camel_case_config_and_templates() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        let r = onboard(&env, &ConfigArgs::default()).unwrap();
        assert!(r.created);
        let text = std::fs::read_to_string(dir.path().join(".nanobot/config.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["agents"]["defaults"]["maxTokens"], 8192);
        assert!(v["providers"]["openrouter"].is_object());
        assert!(!text.contains("max_tokens"));
        // The local WebUI is on, as 0.3.5's onboard leaves it.
        assert_eq!(v["channels"]["websocket"], serde_json::json!({"enabled": true}));
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
               "providers":{"openai":{"apiKey":"${MY_KEY}"}},"tools":{"myOwnKey":{"x":1}}}"#,
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
        assert_eq!(v["tools"]["myOwnKey"]["x"], 1);
        assert_eq!(
            v["channels"]["websocket"]["enabled"], true,
            "a missing WebUI block is added"
        );

        // A block the user has is the user's: turned off, it stays off.
        let mut off = v.clone();
        off["channels"]["websocket"] = serde_json::json!({"enabled": false, "port": 9000});
        std::fs::write(&cfg, off.to_string()).unwrap();
        onboard(&env, &ConfigArgs::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        assert_eq!(
            v["channels"]["websocket"],
            serde_json::json!({"enabled": false, "port": 9000})
        );
    }

    fn mock_candidate(mock: &nanobot_testkit::MockLlm) -> crate::local_servers::Candidate {
        crate::local_servers::Candidate {
            port: mock.addr().port(),
            server: "llama.cpp",
            provider: "custom",
        }
    }

    fn run_onboard(env: &CliEnv, args: &crate::args::OnboardArgs, mock: &nanobot_testkit::MockLlm) -> String {
        let mut out = Vec::new();
        crate::onboard_with(env, args, &mut out, &[mock_candidate(mock)], None).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn config_json(home: &Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(home.join(".nanobot/config.json")).unwrap()).unwrap()
    }

    #[test]
    fn a_local_server_is_written_with_use_local_and_only_offered_without_it() {
        let mock = nanobot_testkit::MockLlm::start_background();
        let base = format!("http://127.0.0.1:{}/v1", mock.addr().port());
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());

        // Not a terminal, no flag: offered, nothing written.
        let text = run_onboard(&env, &crate::args::OnboardArgs::default(), &mock);
        assert!(text.contains("nanobot onboard --use-local"), "{text}");
        assert!(
            text.contains(&format!("providers.custom.apiBase: \"{base}\"")),
            "{text}"
        );
        let v = config_json(dir.path());
        assert_eq!(v["agents"]["defaults"]["provider"], "auto");
        assert!(
            v["providers"]["custom"]["apiBase"].is_null(),
            "{}",
            v["providers"]["custom"]
        );

        // --use-local: written; onboard's own defaults are replaced without fuss.
        let args = crate::args::OnboardArgs {
            use_local: true,
            ..Default::default()
        };
        let text = run_onboard(&env, &args, &mock);
        assert!(text.contains("✓ Wrote the settings for llama.cpp"), "{text}");
        assert!(!text.contains("your value"), "{text}");
        assert!(!text.contains("Add an API key"), "{text}");
        let v = config_json(dir.path());
        assert_eq!(v["agents"]["defaults"]["provider"], "custom");
        assert_eq!(v["agents"]["defaults"]["model"], "mock-model");
        assert_eq!(v["providers"]["custom"]["apiBase"], base.as_str());
        assert_eq!(v["agents"]["defaults"]["maxTokens"], 8192, "the rest untouched");
        // The mock does not say its window: the short tool set, and what to set by hand.
        assert_eq!(v["tools"]["profile"], "local");
        assert_eq!(v["agents"]["defaults"]["contextWindowTokens"], 200_000);
        assert!(text.contains("does not say how much context"), "{text}");

        // Run again: nothing to change, and it says the config already uses the server.
        let text = run_onboard(&env, &args, &mock);
        assert!(text.contains("already uses llama.cpp"), "{text}");
    }

    /// A llama.cpp server that reports its window (8,192 tokens): onboard writes it, an answer's room of a quarter
    /// of it and the short tool set, and says where the window came from; a large window keeps every tool, and a
    /// profile the user chose is kept.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_window_a_server_reports_is_written_with_the_answers_room_and_the_tool_set() {
        use nanobot_testkit::file_server::{Answer, FileServer};
        let json = |v: serde_json::Value| Answer::file(v.to_string().as_bytes(), "application/json");
        let server = |n_ctx: u32| {
            FileServer::start(vec![
                (
                    "/v1/models",
                    json(serde_json::json!({"object": "list", "data": [{"id": "smol", "object": "model"}]})),
                ),
                (
                    "/props",
                    json(serde_json::json!({"default_generation_settings": {"n_ctx": n_ctx}})),
                ),
            ])
        };
        let onboard_at = |env: &CliEnv, server: &FileServer| {
            let port: u16 = server.url("").rsplit(':').next().unwrap().parse().unwrap();
            let candidate = crate::local_servers::Candidate {
                port,
                server: "llama.cpp",
                provider: "custom",
            };
            let args = crate::args::OnboardArgs {
                use_local: true,
                ..Default::default()
            };
            let mut out = Vec::new();
            tokio::task::block_in_place(|| crate::onboard_with(env, &args, &mut out, &[candidate], None))
                .unwrap();
            String::from_utf8(out).unwrap()
        };

        let small = server(8192).await;
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        let text = onboard_at(&env, &small);
        let v = config_json(dir.path());
        assert_eq!(v["agents"]["defaults"]["contextWindowTokens"], 8192, "{text}");
        assert_eq!(v["agents"]["defaults"]["maxTokens"], 2048, "{text}");
        assert_eq!(v["tools"]["profile"], "local", "{text}");
        assert!(
            text.contains("8192 tokens) is what llama.cpp /props reports"),
            "{text}"
        );
        // The config it wrote loads and offers the short set.
        let config: nanobot_config::Config = serde_json::from_value(v).unwrap();
        config.validate().unwrap();

        let large = server(131_072).await;
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        std::fs::create_dir_all(dir.path().join(".nanobot")).unwrap();
        onboard_at(&env, &large);
        let v = config_json(dir.path());
        assert_eq!(v["agents"]["defaults"]["contextWindowTokens"], 131_072);
        assert_eq!(
            v["agents"]["defaults"]["maxTokens"], 8192,
            "a quarter is more than the default"
        );
        assert!(v["tools"].get("profile").is_none(), "{}", v["tools"]);

        // A tool set the user chose stays.
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(&cfg, r#"{"tools":{"only":["read_file"]}}"#).unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        onboard_at(&env, &small);
        let v = config_json(dir.path());
        assert!(v["tools"].get("profile").is_none(), "{}", v["tools"]);
        assert_eq!(v["tools"]["only"], serde_json::json!(["read_file"]));
    }

    #[test]
    fn a_users_own_values_are_replaced_only_when_asked_and_then_named() {
        let mock = nanobot_testkit::MockLlm::start_background();
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(
            &cfg,
            r#"{"agents":{"defaults":{"model":"my-favourite","provider":"ollama"}},
               "providers":{"custom":{"apiBase":"http://10.0.0.5:9000/v1"}}}"#,
        )
        .unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        let text = run_onboard(&env, &crate::args::OnboardArgs::default(), &mock);
        assert!(
            text.contains("agents.defaults.model: \"my-favourite\" (your value, replaced)"),
            "{text}"
        );
        let v = config_json(dir.path());
        assert_eq!(
            v["agents"]["defaults"]["model"], "my-favourite",
            "not written without --use-local"
        );
        assert_eq!(v["providers"]["custom"]["apiBase"], "http://10.0.0.5:9000/v1");

        let args = crate::args::OnboardArgs {
            use_local: true,
            ..Default::default()
        };
        let text = run_onboard(&env, &args, &mock);
        for field in [
            "agents.defaults.model",
            "agents.defaults.provider",
            "providers.custom.apiBase",
        ] {
            assert!(
                text.contains(&format!("{field}: ")) && text.contains("(your value, replaced)"),
                "{field}: {text}"
            );
        }
        assert!(
            text.contains("\"http://10.0.0.5:9000/v1\" (your value, replaced)"),
            "{text}"
        );
        let v = config_json(dir.path());
        assert_eq!(v["agents"]["defaults"]["model"], "mock-model");
        assert_eq!(v["agents"]["defaults"]["provider"], "custom");
    }

    #[test]
    fn skip_local_and_a_configured_key_do_not_probe() {
        let mock = nanobot_testkit::MockLlm::start_background();
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        let args = crate::args::OnboardArgs {
            skip_local: true,
            ..Default::default()
        };
        let text = run_onboard(&env, &args, &mock);
        assert!(!text.contains("llama.cpp"), "{text}");
        assert!(mock.requests().is_empty(), "no probe");
    }

    #[test]
    fn on_a_terminal_onboard_asks_before_writing() {
        let mock = nanobot_testkit::MockLlm::start_background();
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        let ask = |answer: &str| {
            let mut out = Vec::new();
            let mut input = std::io::Cursor::new(answer.as_bytes().to_vec());
            crate::onboard_with(
                &env,
                &crate::args::OnboardArgs::default(),
                &mut out,
                &[mock_candidate(&mock)],
                Some(&mut input),
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        let text = ask("n\n");
        assert!(text.contains("Write these settings into"), "{text}");
        assert!(text.contains("[Y/n]"), "{text}");
        assert!(!text.contains("✓ Wrote"), "{text}");
        assert_eq!(config_json(dir.path())["agents"]["defaults"]["provider"], "auto");
        // Enter means yes.
        let text = ask("\n");
        assert!(text.contains("✓ Wrote the settings for llama.cpp"), "{text}");
        assert_eq!(
            config_json(dir.path())["agents"]["defaults"]["provider"],
            "custom"
        );
    }
}
