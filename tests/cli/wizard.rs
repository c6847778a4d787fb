//! `nanobot onboard --wizard`, driven through a pseudo-terminal: Quick Start end to end, an abort that leaves the
//! old file byte for byte, wrong answers asked again, the refusal without a terminal, and the same answers given
//! to 0.3.5's wizard giving the same values.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use expectrl::{ControlCode, Eof, Expect, Session};
use nanobot_testkit::{TempHome, peers};
use serde_json::{Value, json};

use crate::compat_python::{bounded, python_nanobot};
use crate::support::{nanobot, run, stderr};

const API_KEY: &str = "sk-or-wizard-7f3a91";
const PASSWORD: &str = "webui-pass-5521";

/// A wizard session with everything it printed so far.
struct Wizard {
    p: expectrl::session::OsSession,
    seen: String,
}

impl Wizard {
    fn spawn(home: &Path, vars: &[(&str, &str)]) -> Self {
        Self::spawn_with(home, vars, &[])
    }

    fn spawn_with(home: &Path, vars: &[(&str, &str)], args: &[&str]) -> Self {
        let mut cmd = nanobot(home);
        cmd.env("TERM", "xterm").args(["onboard", "--wizard"]).args(args);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut p = Session::spawn(cmd).expect("spawn nanobot onboard --wizard in a pty");
        // A generous bound for a loaded CI machine; nothing waits on it when things work.
        p.set_expect_timeout(Some(Duration::from_secs(120)));
        Wizard {
            p,
            seen: String::new(),
        }
    }

    /// Waits for `text`, keeping what came before it.
    fn wait(&mut self, text: &str) -> String {
        let found = self
            .p
            .expect(text)
            .unwrap_or_else(|e| panic!("waiting for {text:?}: {e}; so far:\n{}", self.seen));
        let before = String::from_utf8_lossy(found.before()).into_owned();
        self.seen.push_str(&before);
        self.seen.push_str(text);
        before
    }

    /// Waits for `prompt`, then types `answer` and Enter.
    fn answer(&mut self, prompt: &str, answer: &str) -> String {
        let before = self.wait(prompt);
        self.p.send_line(answer).unwrap();
        before
    }

    /// Waits for the end and returns the exit code, keeping the rest of the output.
    fn exit_code(mut self) -> (i32, String) {
        let rest = self.p.expect(Eof).unwrap();
        // Eof matches everything left.
        self.seen.push_str(&String::from_utf8_lossy(rest.as_bytes()));
        match self.p.get_process().wait().unwrap() {
            expectrl::process::unix::WaitStatus::Exited(_, code) => (code, self.seen),
            other => panic!("{other:?}; output:\n{}", self.seen),
        }
    }
}

fn config(home: &TempHome) -> Value {
    serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap()
}

#[test]
fn quick_start_end_to_end_writes_the_config_and_never_shows_the_secrets() {
    let home = TempHome::new();
    let mut w = Wizard::spawn(home.home(), &[]);
    w.wait("Setup Wizard");
    w.answer("Choose 1-3:", "1");
    w.wait("Which provider do you want to use?");
    w.answer("Choose 1-", "OpenRouter");
    w.answer("OpenRouter API key: ", API_KEY);
    w.answer("Model ID: ", "anthropic/claude-sonnet-4");
    w.answer("Enable WebSocket channel now? [Y/n]", "");
    w.answer("Set a WebUI password: ", PASSWORD);
    let review = w.answer("Press Enter to save and exit...", "");
    assert!(review.contains("Ready"), "{review}");
    w.wait("nanobot is ready. Run: nanobot webui");
    let (code, seen) = w.exit_code();
    assert_eq!(code, 0, "{seen}");
    assert!(!seen.contains(API_KEY), "the API key was shown:\n{seen}");
    assert!(!seen.contains(PASSWORD), "the password was shown:\n{seen}");
    assert!(
        seen.contains(&"*".repeat(API_KEY.len())),
        "each typed character shows as *:\n{seen}"
    );
    assert!(seen.contains("Config saved at"), "{seen}");

    let v = config(&home);
    let or = &v["providers"]["openrouter"];
    assert_eq!(or["apiKey"], API_KEY);
    assert_eq!(or["apiBase"], "https://openrouter.ai/api/v1");
    assert_eq!(v["agents"]["defaults"]["modelPreset"], "primary");
    assert_eq!(
        v["modelPresets"]["primary"],
        json!({
            "model": "anthropic/claude-sonnet-4",
            "provider": "openrouter",
            "maxTokens": 8192,
            "contextWindowTokens": 200000,
            "temperature": 0.1,
            "reasoningEffort": null
        })
    );
    // What Quick Start does not ask about keeps its default.
    assert_eq!(v["agents"]["defaults"]["model"], "anthropic/claude-opus-4-5");
    assert_eq!(v["agents"]["defaults"]["provider"], "auto");
    assert_eq!(v["gateway"]["port"], 18790);
    let ws = &v["channels"]["websocket"];
    assert_eq!(ws["enabled"], true);
    assert_eq!(ws["tokenIssueSecret"], PASSWORD);
    assert_eq!(ws["websocketRequiresToken"], true);
    assert_eq!(ws["host"], "127.0.0.1");
    assert_eq!(ws["port"], 8765);
    assert_eq!(ws["allowFrom"], json!(["*"]));
    assert!(
        v["providers"]["anthropic"].is_object(),
        "every provider has its block"
    );
    for f in [
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "HEARTBEAT.md",
        "memory/MEMORY.md",
    ] {
        assert!(home.nanobot_dir().join("workspace").join(f).is_file(), "{f}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.config_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the config holds secrets");
    }
}

#[test]
fn an_explicit_config_and_workspace_are_used_and_named() {
    let home = TempHome::new();
    let mut w = Wizard::spawn_with(home.home(), &[], &["-c", "elsewhere/my.json", "-w", "my-ws"]);
    w.answer("Choose 1-3:", "Quick Start");
    w.answer("Choose 1-", "LM Studio");
    w.answer("Model ID: ", "qwen3-8b");
    w.answer("[Y/n]", "yes");
    w.answer("password: ", PASSWORD);
    w.answer("save and exit...", "");
    let (code, seen) = w.exit_code();
    assert_eq!(code, 0, "{seen}");
    let path = home.home().join("elsewhere/my.json");
    assert!(
        seen.contains(&format!("Run: nanobot webui -c \"{}\"", path.display())),
        "{seen}"
    );
    assert!(!home.config_path().exists(), "the default config is not written");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ws = home.home().join("my-ws");
    assert_eq!(v["agents"]["defaults"]["workspace"], ws.display().to_string());
    assert!(ws.join("AGENTS.md").is_file());
    assert_eq!(v["providers"]["lmStudio"]["apiBase"], "http://localhost:1234/v1");
    assert!(
        v["providers"]["lmStudio"]["apiKey"].is_null(),
        "no key asked for a local server"
    );
    assert_eq!(v["modelPresets"]["primary"]["provider"], "lm_studio");
}

/// A config the user wrote: a `${VAR}` key, a key this version does not know, a changed value.
fn users_config(home: &TempHome) -> Vec<u8> {
    let text = r#"{
  "agents": {"defaults": {"model": "openai/gpt-4o", "maxTokens": 1234}},
  "providers": {"openai": {"apiKey": "${MY_OPENAI_KEY}"}},
  "tools": {"myOwnKey": {"x": 1}},
  "gateway": {"port": 18790}
}
"#;
    std::fs::create_dir_all(home.nanobot_dir()).unwrap();
    std::fs::write(home.config_path(), text).unwrap();
    text.as_bytes().to_vec()
}

#[test]
fn ctrl_c_or_ctrl_d_at_any_question_leaves_the_old_config_byte_for_byte() {
    let home = TempHome::new();
    let before = users_config(&home);
    let vars = [("MY_OPENAI_KEY", "sk-from-env")];

    // Ctrl-C at the (hidden) API key question, after a provider was picked.
    let mut w = Wizard::spawn(home.home(), &vars);
    w.answer("Choose 1-3:", "Quick Start");
    w.wait("Which provider do you want to use?");
    w.answer("Choose 1-", "OpenRouter");
    w.wait("OpenRouter API key: ");
    w.p.send("sk-half-typed").unwrap();
    w.p.send(ControlCode::EndOfText).unwrap();
    w.wait("Configuration discarded. No changes were saved.");
    let (code, seen) = w.exit_code();
    assert_eq!(code, 130, "{seen}");
    assert!(!seen.contains("sk-half-typed"), "{seen}");
    assert_eq!(std::fs::read(home.config_path()).unwrap(), before);

    // Ctrl-D at a line question, after an edit that was not saved.
    let mut w = Wizard::spawn(home.home(), &vars);
    w.answer("Choose 1-3:", "Advanced Settings");
    w.answer("Choose 1-10:", "Gateway");
    w.wait("Select field to configure:");
    w.answer("Choose 1-", "2");
    w.answer("port [18790]: ", "18801");
    w.wait("Select field to configure:");
    w.wait("Choose 1-");
    w.p.send(ControlCode::EndOfTransmission).unwrap();
    w.wait("Configuration discarded. No changes were saved.");
    let (code, seen) = w.exit_code();
    assert_eq!(code, 130, "{seen}");
    assert_eq!(std::fs::read(home.config_path()).unwrap(), before);
    assert!(
        !home.workspace().join("AGENTS.md").exists(),
        "no templates written"
    );
}

#[test]
fn the_terminal_is_restored_after_ctrl_c_at_a_hidden_question() {
    let home = TempHome::new();
    // `stty -a`, the wizard, `stty -a` again in the same terminal: the settings are as before (the hidden
    // question turns echo, line editing and signals off while it reads).
    let mut cmd = std::process::Command::new("sh");
    cmd.env_clear()
        .env("HOME", home.home())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .current_dir(home.home())
        .arg("-c")
        .arg("stty -a; echo BEFORE-END; \"$0\" onboard --wizard; echo \"exit=$?\"; stty -a; echo AFTER-END")
        .arg(crate::support::exe());
    let mut p = Session::spawn(cmd).expect("spawn sh in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    let mut w = Wizard {
        p,
        seen: String::new(),
    };
    let before = w.wait("BEFORE-END");
    w.answer("Choose 1-3:", "1");
    w.wait("Which provider do you want to use?");
    w.answer("Choose 1-", "Groq");
    w.wait("Groq API key: ");
    w.p.send("gsk").unwrap();
    w.p.send(ControlCode::EndOfText).unwrap();
    w.wait("exit=130");
    let after = w.wait("AFTER-END");
    let flags = |text: &str| -> Vec<String> {
        let from = text.find("speed").expect("stty output");
        text[from..].split_whitespace().map(str::to_owned).collect()
    };
    assert_eq!(
        flags(&before),
        flags(&after),
        "before:\n{before}\nafter:\n{after}"
    );
    assert!(flags(&after).iter().any(|f| f == "icanon"), "{after}");
    assert!(!home.config_path().exists());
}

#[test]
fn wrong_answers_are_named_and_asked_again_and_other_values_are_kept() {
    let home = TempHome::new();
    users_config(&home);
    let mut w = Wizard::spawn(home.home(), &[("MY_OPENAI_KEY", "sk-from-env")]);
    w.answer("Choose 1-3:", "7");
    w.wait("\"7\" is not one of the choices: enter a number from 1 to 3.");
    w.answer("Choose 1-3:", "2");
    w.answer("Choose 1-10:", "Gateway");
    w.wait("Select field to configure:");
    w.answer("Choose 1-", "2");
    w.answer("port [18790]: ", "abc");
    w.wait("\"abc\" is not a number; try again.");
    w.answer("port [18790]: ", "70000");
    let refused = w.wait("value not saved, try again.");
    assert!(refused.contains("port"), "{refused}");
    w.answer("port [18790]: ", "18801");
    w.wait("Select field to configure:");
    w.answer("Choose 1-", "[Done]");
    w.answer("Choose 1-10", "<- Back");
    // An edit was made: the menu now offers to save.
    w.answer("Choose 1-4:", "Save and Exit");
    w.wait("Config saved at");
    let (code, seen) = w.exit_code();
    assert_eq!(code, 0, "{seen}");

    let v = config(&home);
    assert_eq!(v["gateway"]["port"], 18801);
    assert_eq!(
        v["providers"]["openai"]["apiKey"], "${MY_OPENAI_KEY}",
        "the reference is kept"
    );
    assert_eq!(v["agents"]["defaults"]["model"], "openai/gpt-4o");
    assert_eq!(v["agents"]["defaults"]["maxTokens"], 1234);
    assert_eq!(v["tools"]["myOwnKey"], json!({"x": 1}), "unknown keys are kept");
    assert!(
        !std::fs::read_to_string(home.config_path())
            .unwrap()
            .contains("sk-from-env")
    );
}

#[test]
fn without_a_terminal_the_wizard_refuses_and_writes_nothing() {
    let home = TempHome::new();
    let out = nanobot(home.home())
        .args(["onboard", "--wizard"])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(err.contains("nanobot onboard"), "{err}");
    assert!(!home.config_path().exists());
    // The flag is refused together with the non-interactive ones.
    let o = run(home.home(), &["onboard", "--wizard", "--refresh"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// 0.3.5's wizard, its questions answered by a script (the prompt functions replaced; the flow, the checks and
/// what is written are 0.3.5's own), saving to `path`.
const PYTHON_QUICK_START: &str = r#"
import sys
from pathlib import Path
from nanobot.cli import onboard as o
from nanobot.config.loader import save_config
from nanobot.config.schema import Config

answers = iter(sys.argv[2:])
nxt = lambda *a, **k: next(answers)
o._select_with_back = nxt
o._input_text = nxt
o._input_secret = nxt
o._input_model_with_autocomplete = nxt
o._pause = lambda *a, **k: None
o.console.clear = lambda *a, **k: None

class _Ask:
    def __init__(self, value):
        self.value = value
    def ask(self):
        return self.value

class _Questionary:
    def confirm(self, *a, **k):
        return _Ask(next(answers) == "yes")
    def select(self, *a, **k):
        return _Ask(next(answers))
    def text(self, *a, **k):
        return _Ask(next(answers))

o._get_questionary = lambda: _Questionary()
result = o.run_onboard(initial_config=Config())
assert result.should_save
save_config(result.config, Path(sys.argv[1]))
"#;

#[test]
fn the_same_answers_give_the_same_values_as_python() {
    let Some(py_nanobot) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let python = py_nanobot.with_file_name("python");
    // A ChatGPT login both programs find (0.3.5's token file; valid for a day, so nobody refreshes it).
    let oauth = TempHome::new();
    let token_path = oauth.home().join("codex.json");
    let expires = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 86_400_000) as i64;
    std::fs::write(
        &token_path,
        json!({"access": "codex-access-1", "refresh": "codex-refresh-1", "expires": expires, "account_id": "acct-1"})
            .to_string(),
    )
    .unwrap();
    let token_var = token_path.display().to_string();
    let vars = [("OAUTH_CLI_KIT_TOKEN_PATH", token_var.as_str())];
    /// (provider, 0.3.5's answers, ours as (prompt, answer)); 0.3.5 is asked in the same order.
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case<'_>> = vec![
        (
            "openrouter",
            vec![
                "[Q] Quick Start",
                "OpenRouter",
                API_KEY,
                "anthropic/claude-sonnet-4",
                "yes",
                PASSWORD,
            ],
            vec![
                ("Choose 1-3:", "Quick Start"),
                ("Choose 1-", "OpenRouter"),
                ("API key: ", API_KEY),
                ("Model ID: ", "anthropic/claude-sonnet-4"),
                ("[Y/n]", ""),
                ("password: ", PASSWORD),
                ("save and exit...", ""),
            ],
        ),
        (
            "custom",
            vec![
                "[Q] Quick Start",
                "Other OpenAI-compatible",
                API_KEY,
                "http://127.0.0.1:9999/v1/",
                "my-local-model",
                "yes",
                PASSWORD,
            ],
            vec![
                ("Choose 1-3:", "Quick Start"),
                ("Choose 1-", "Other OpenAI-compatible"),
                ("API key: ", API_KEY),
                ("Provider base URL: ", "http://127.0.0.1:9999/v1/"),
                ("Model ID: ", "my-local-model"),
                ("[Y/n]", ""),
                ("password: ", PASSWORD),
                ("save and exit...", ""),
            ],
        ),
        (
            // A local server: no key asked, the default endpoint written.
            "ollama",
            vec!["[Q] Quick Start", "Ollama", "llama3.2", "yes", PASSWORD],
            vec![
                ("Choose 1-3:", "Quick Start"),
                ("Choose 1-", "Ollama"),
                ("Model ID: ", "llama3.2"),
                ("[Y/n]", "y"),
                ("password: ", PASSWORD),
                ("save and exit...", ""),
            ],
        ),
        (
            // OAuth: signed in already, no key asked, 0.3.5's model proposed.
            "openaiCodex",
            vec![
                "[Q] Quick Start",
                "OpenAI Codex",
                "openai-codex/gpt-5.6-sol",
                "yes",
                PASSWORD,
            ],
            vec![
                ("Choose 1-3:", "Quick Start"),
                ("Choose 1-", "OpenAI Codex"),
                ("Model ID [openai-codex/gpt-5.6-sol]: ", ""),
                ("[Y/n]", ""),
                ("password: ", PASSWORD),
                ("save and exit...", ""),
            ],
        ),
        (
            // Two endpoints: the second picked.
            "zhipu",
            vec![
                "[Q] Quick Start",
                "Zhipu AI",
                "Coding Plan",
                API_KEY,
                "glm-4.6",
                "yes",
                PASSWORD,
            ],
            vec![
                ("Choose 1-3:", "Quick Start"),
                ("Choose 1-", "Zhipu AI"),
                ("Choose 1-3 [1]:", "Coding Plan"),
                ("API key: ", API_KEY),
                ("Model ID: ", "glm-4.6"),
                ("[Y/n]", ""),
                ("password: ", PASSWORD),
                ("save and exit...", ""),
            ],
        ),
    ];
    for (provider, py_answers, rs_steps) in cases {
        let py_home = TempHome::new();
        let py_path = py_home.config_path();
        let mut cmd = std::process::Command::new(&python);
        cmd.env_clear()
            .env("HOME", py_home.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NO_COLOR", "1")
            .env("TERM", "dumb")
            .arg("-c")
            .arg(PYTHON_QUICK_START)
            .arg(&py_path)
            .envs(vars)
            .args(&py_answers);
        let out = bounded(cmd, "python quick start");
        assert!(
            out.status.success(),
            "python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let py = config(&py_home);

        let rs_home = TempHome::new();
        let mut w = Wizard::spawn(rs_home.home(), &vars);
        w.wait("Setup Wizard");
        for (prompt, answer) in rs_steps {
            w.answer(prompt, answer);
        }
        let (code, seen) = w.exit_code();
        assert_eq!(code, 0, "{seen}");
        let rs = config(&rs_home);

        assert_eq!(rs["modelPresets"], py["modelPresets"], "{provider}: modelPresets");
        assert_eq!(
            rs["agents"]["defaults"]["modelPreset"], py["agents"]["defaults"]["modelPreset"],
            "{provider}: modelPreset"
        );
        for key in ["apiKey", "apiBase"] {
            assert_eq!(
                rs["providers"][provider][key], py["providers"][provider][key],
                "{provider}: providers.{provider}.{key}"
            );
        }
        let expected_base = match provider {
            "zhipu" => json!("https://open.bigmodel.cn/api/coding/paas/v4"),
            "custom" => json!("http://127.0.0.1:9999/v1"),
            "ollama" => json!("http://localhost:11434/v1"),
            // 0.3.5 keeps OAuth providers' blocks out of the file; `onboard` adds an empty one.
            "openaiCodex" => Value::Null,
            _ => json!("https://openrouter.ai/api/v1"),
        };
        assert_eq!(rs["providers"][provider]["apiBase"], expected_base, "{provider}");
        // Every key 0.3.5 writes in the WebSocket block, with the same value.
        let py_ws = py["channels"]["websocket"].as_object().unwrap();
        for (k, v) in py_ws {
            assert_eq!(
                &rs["channels"]["websocket"][k], v,
                "{provider}: channels.websocket.{k}"
            );
        }
        // And the rest of the agent defaults are the same defaults.
        for key in [
            "model",
            "provider",
            "maxTokens",
            "contextWindowTokens",
            "temperature",
            "workspace",
        ] {
            assert_eq!(
                rs["agents"]["defaults"][key], py["agents"]["defaults"][key],
                "{provider}: agents.defaults.{key}"
            );
        }
    }
}
