//! `nanobot provider login|logout` and a model served through an OAuth provider, against a fake GitHub and a
//! fake Copilot chat API on loopback.

use nanobot_testkit::fake_oauth::{FakeGithub, GITHUB_LOGIN, GITHUB_TOKEN, USER_CODE};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::support::{merge, nanobot, run, stderr, stdout};

fn token_file(home: &TempHome) -> std::path::PathBuf {
    home.home().join(".local/share/nanobot/auth/github-copilot.json")
}

fn provider(home: &TempHome, fake: &FakeGithub, api: &MockLlm, args: &[&str]) -> std::process::Output {
    nanobot(home.home())
        .envs(fake.env(&api.url()))
        .args(args)
        .output()
        .expect("run nanobot")
}

#[test]
fn login_shows_the_code_and_writes_the_token_file_logout_removes_it() {
    let fake = FakeGithub::start_background(vec![]);
    let api = MockLlm::start_background();
    let home = TempHome::new();

    let o = provider(&home, &fake, &api, &["provider", "login", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("Code: {USER_CODE}")), "{out}");
    assert!(out.contains("Open: https://github.com/login/device"), "{out}");
    assert!(
        out.contains(&format!("✓ Authenticated with GitHub Copilot  {GITHUB_LOGIN}")),
        "{out}"
    );
    assert!(!out.contains(GITHUB_TOKEN) && !stderr(&o).contains(GITHUB_TOKEN));

    // 0.3.5's file: the same place and keys, private to the user.
    let path = token_file(&home);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["access"], GITHUB_TOKEN);
    assert_eq!(saved["refresh"], "");
    assert_eq!(saved["account_id"], GITHUB_LOGIN);
    assert!(saved["expires"].as_i64().unwrap() > 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let o = provider(&home, &fake, &api, &["provider", "logout", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(
        stdout(&o).contains("✓ Logged out from GitHub Copilot"),
        "{}",
        stdout(&o)
    );
    assert!(!path.exists());
    let o = provider(&home, &fake, &api, &["provider", "logout", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("No local OAuth credentials found for GitHub Copilot"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_denied_login_fails_and_writes_nothing_unknown_providers_are_named() {
    let fake = FakeGithub::start_background(vec![nanobot_testkit::fake_oauth::Poll::Denied]);
    let api = MockLlm::start_background();
    let home = TempHome::new();
    let o = provider(&home, &fake, &api, &["provider", "login", "github-copilot"]);
    assert_eq!(o.status.code(), Some(1), "stdout: {}", stdout(&o));
    assert!(stderr(&o).contains("sign-in was denied"), "{}", stderr(&o));
    assert!(!token_file(&home).exists());

    let o = run(home.home(), &["provider", "login", "openai"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("github-copilot"), "{}", stderr(&o));
}

#[test]
fn login_set_main_then_agent_answers_through_copilot() {
    let fake = FakeGithub::start_background(vec![]);
    let api = MockLlm::start_background();
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert!(o.status.success(), "onboard: {}", stderr(&o));

    let o = provider(
        &home,
        &fake,
        &api,
        &[
            "provider",
            "login",
            "github-copilot",
            "--set-main",
            "-m",
            "github-copilot/gpt-4.1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(
        stdout(&o).contains("✓ Set github-copilot as the main provider"),
        "{}",
        stdout(&o)
    );
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["agents"]["defaults"]["provider"], "github_copilot");
    assert_eq!(config["agents"]["defaults"]["model"], "github-copilot/gpt-4.1");
    // Nothing else is configured: no key anywhere.
    merge(
        &mut config,
        &json!({"agents": {"defaults": {"provider": "auto"}}}),
    );
    home.write_config(&config);

    api.push(MockReply::text("Hi from Copilot."));
    let o = provider(&home, &fake, &api, &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Hi from Copilot.\n");
    let reqs = api.completion_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("authorization"), Some("Bearer copilot-token-1"));
    assert_eq!(reqs[0].header("editor-version"), Some("vscode/1.99.0"));
    assert_eq!(reqs[0].body["model"], "gpt-4.1");
    assert_eq!(fake.exchanges(), 1);
    assert!(!stderr(&o).contains("unknown"), "{}", stderr(&o));
}

/// Every line still to come from a reader thread of a child's output: it ends at the pipe's end, which the
/// child's exit brings, so lines in flight when `wait` returned are waited for, not lost (bounded).
fn remaining_lines(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => lines.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return lines,
            Err(e) => panic!("the child's output did not end ({e}); printed: {lines:?}"),
        }
    }
}

mod codex {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    use nanobot_testkit::TempHome;
    use nanobot_testkit::fake_oauth::{AUTH_CODE, CHATGPT_ACCOUNT, CodexReply, FakeOpenAi};
    use serde_json::{Value, json};

    use crate::support::{merge, nanobot, run, stderr, stdout};

    fn token_file(home: &TempHome) -> std::path::PathBuf {
        home.home().join(".local/share/oauth-cli-kit/auth/codex.json")
    }

    fn query(url: &str, key: &str) -> String {
        url.split_once('?')
            .map(|(_, q)| q)
            .unwrap_or_default()
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    }

    /// What a browser does after the user signed in: a GET of the callback. Returns the status line.
    fn browser_returns(redirect: &str, state: &str) -> String {
        let rest = redirect.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /{path}?code={AUTH_CODE}&state={state} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[test]
    fn browser_login_writes_0_3_5_s_token_file_logout_removes_it_and_agent_answers() {
        let fake = FakeOpenAi::start_background();
        let home = TempHome::new();
        let port = nanobot_testkit::peers::free_port().unwrap();
        let redirect = format!("http://127.0.0.1:{port}/auth/callback");

        let mut child = nanobot(home.home())
            .envs(fake.env(&redirect))
            .args(["provider", "login", "openai-codex"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let authorize = format!("{}/oauth/authorize?", fake.url());
        let mut printed = Vec::new();
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no authorisation URL ({e}); printed: {printed:?}"));
            if line.starts_with(&authorize) {
                break line;
            }
            printed.push(line);
        };
        fake.expect_challenge(&query(&url, "code_challenge"));
        assert_eq!(
            browser_returns(&redirect, &query(&url, "state")),
            "HTTP/1.1 200 OK"
        );
        let status = child.wait().unwrap();
        let rest = super::remaining_lines(&rx);
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "stderr: {err}; stdout: {rest:?}");
        assert!(
            rest.iter()
                .any(|l| l.contains(&format!("✓ Authenticated with OpenAI Codex  {CHATGPT_ACCOUNT}"))),
            "{rest:?}"
        );

        let path = token_file(&home);
        let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(saved["access"], FakeOpenAi::access_token(1));
        assert_eq!(saved["refresh"], "refresh-1");
        assert_eq!(saved["account_id"], CHATGPT_ACCOUNT);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        // Logged in already: a second login keeps the login and opens nothing.
        let o = nanobot(home.home())
            .envs(fake.env(&redirect))
            .args(["provider", "login", "openai-codex"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert!(!stdout(&o).contains("oauth/authorize"), "{}", stdout(&o));

        // A turn through the Codex API with that login.
        let o = run(home.home(), &["onboard"]);
        assert!(o.status.success(), "onboard: {}", stderr(&o));
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
        merge(
            &mut config,
            &json!({"agents": {"defaults": {"model": "openai-codex/gpt-5.5", "provider": "auto"}},
                "providers": {"openaiCodex": {"apiBase": fake.api_base()}}}),
        );
        home.write_config(&config);
        fake.push(CodexReply::Text("Hi from Codex.".into()));
        let o = run(home.home(), &["agent", "-m", "hi"]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert_eq!(stdout(&o), "Hi from Codex.\n");
        let sent = fake.seen_at("/backend-api/codex/responses");
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].header("chatgpt-account-id"), Some(CHATGPT_ACCOUNT));

        let o = run(home.home(), &["provider", "logout", "openai-codex"]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert!(
            stdout(&o).contains("✓ Logged out from OpenAI Codex"),
            "{}",
            stdout(&o)
        );
        assert!(!path.exists());
    }
}

/// On a terminal the callback URL can be pasted (a sign-in on another machine, whose browser cannot reach this
/// one's callback).
#[test]
fn codex_login_on_a_terminal_takes_a_pasted_callback_url() {
    use std::time::Duration;

    use expectrl::{Eof, Expect, Session};
    use nanobot_testkit::fake_oauth::{AUTH_CODE, CHATGPT_ACCOUNT, FakeOpenAi};

    let fake = FakeOpenAi::start_background();
    let home = TempHome::new();
    // The callback's port is taken: nanobot says so and waits for the paste.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let redirect = format!(
        "http://127.0.0.1:{}/auth/callback",
        taken.local_addr().unwrap().port()
    );
    let mut cmd = nanobot(home.home());
    cmd.envs(fake.env(&redirect))
        .env("TERM", "xterm")
        .args(["provider", "login", "openai-codex"]);
    let mut p = Session::spawn(cmd).expect("spawn nanobot in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    let authorize = format!("{}/oauth/authorize?", fake.url());
    p.expect(authorize.as_str()).unwrap();
    let rest = p.expect("\n").unwrap();
    let url = format!("{authorize}{}", String::from_utf8_lossy(rest.before()).trim());
    let field = |key: &str| {
        url.split('&')
            .find_map(|kv| kv.split('?').next_back()?.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    fake.expect_challenge(&field("code_challenge"));
    p.expect("callback cannot be received").unwrap();
    p.expect("paste the callback URL").unwrap();
    p.send_line(format!("{redirect}?code={AUTH_CODE}&state={}", field("state")))
        .unwrap();
    p.expect(format!("Authenticated with OpenAI Codex  {CHATGPT_ACCOUNT}").as_str())
        .unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, expectrl::process::unix::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(home.home().join(".local/share/oauth-cli-kit/auth/codex.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["account_id"], CHATGPT_ACCOUNT);
    drop(taken);
}

mod grok {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    use nanobot_testkit::TempHome;
    use nanobot_testkit::fake_oauth::{AUTH_CODE, CodexReply, FakeOpenAi, XAI_EMAIL};
    use serde_json::{Value, json};

    use crate::support::{merge, nanobot, run, stderr, stdout};

    fn param(url: &str, key: &str) -> String {
        let raw = url
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or_default()
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default();
        raw.replace("%3A", ":").replace("%2F", "/")
    }

    #[test]
    fn browser_login_set_main_agent_and_logout() {
        let fake = FakeOpenAi::start_background();
        let home = TempHome::new();
        let o = run(home.home(), &["onboard"]);
        assert!(o.status.success(), "onboard: {}", stderr(&o));

        let mut child = nanobot(home.home())
            .envs(fake.xai_env())
            .args(["provider", "login", "xai-grok", "--set-main"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let authorize = format!("{}/oauth2/auth?", fake.url());
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the authorisation URL");
            if line.starts_with(&authorize) {
                break line;
            }
        };
        fake.expect_challenge(&param(&url, "code_challenge"));
        let redirect = param(&url, "redirect_uri");
        let rest = redirect.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /{path}?code={AUTH_CODE}&state={} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
            param(&url, "state")
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let status = child.wait().unwrap();
        let printed = super::remaining_lines(&rx);
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "stderr: {err}; stdout: {printed:?}");
        assert!(
            printed
                .iter()
                .any(|l| l.contains(&format!("✓ Authenticated with xAI Grok  {XAI_EMAIL}"))),
            "{printed:?}"
        );

        // 0.3.5's place: the config's directory.
        let path = home.home().join(".nanobot/auth/xai.json");
        let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(saved["access"], FakeOpenAi::access_token(1));
        assert_eq!(saved["account_id"], XAI_EMAIL);
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
        assert_eq!(config["agents"]["defaults"]["provider"], "xai_grok");
        assert_eq!(config["agents"]["defaults"]["model"], "xai-grok/grok-4.6");
        assert_eq!(config["agents"]["defaults"]["contextWindowTokens"], 500_000);

        merge(
            &mut config,
            &json!({"providers": {"xaiGrok": {"apiBase": fake.xai_api_base()}}}),
        );
        home.write_config(&config);
        fake.push(CodexReply::Text("Hi from Grok.".into()));
        let o = nanobot(home.home())
            .envs(fake.xai_env())
            .args(["agent", "-m", "hi"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert_eq!(stdout(&o), "Hi from Grok.\n");
        assert_eq!(fake.seen_at("/v1/responses").len(), 1);

        // A config elsewhere (`-c`): the login beside that config is the one used, as in 0.3.5.
        let other = home.home().join("elsewhere");
        std::fs::create_dir_all(other.join("auth")).unwrap();
        std::fs::write(other.join("config.json"), config.to_string()).unwrap();
        std::fs::rename(&path, other.join("auth/xai.json")).unwrap();
        fake.push(CodexReply::Text("Hi from elsewhere.".into()));
        let o = nanobot(home.home())
            .envs(fake.xai_env())
            .args(["agent", "-c"])
            .arg(other.join("config.json"))
            .args(["-m", "hi"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert_eq!(stdout(&o), "Hi from elsewhere.\n");
        std::fs::rename(other.join("auth/xai.json"), &path).unwrap();

        let o = run(home.home(), &["provider", "logout", "xai-grok"]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert!(
            stdout(&o).contains("✓ Logged out from xAI Grok"),
            "{}",
            stdout(&o)
        );
        assert!(!path.exists());
    }
}

/// The logins are shared with the real Python nanobot 0.3.5 both ways: what 0.3.5's own storage code writes,
/// this `nanobot` uses and removes; what this one writes, 0.3.5's loaders read.
#[test]
fn logins_are_shared_with_python_nanobot_0_3_5() {
    use nanobot_testkit::fake_oauth::FakeOpenAi;

    let Some(python) = nanobot_testkit::peers::require(
        "python nanobot 0.3.5",
        crate::compat_python::python_nanobot()
            .map(|nb| nb.with_file_name("python"))
            .filter(|p| p.is_file()),
    ) else {
        return;
    };
    let home = TempHome::new();
    let py = |script: &str| {
        let mut cmd = std::process::Command::new(&python);
        cmd.env_clear()
            .env("HOME", home.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(["-c", script]);
        let o = crate::compat_python::bounded(cmd, "python");
        assert!(
            o.status.success(),
            "python: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    // 0.3.5 writes the three logins with its own code.
    py(&format!(
        r#"
from oauth_cli_kit.models import OAuthToken
from oauth_cli_kit.storage import FileTokenStorage
from nanobot.providers.github_copilot_provider import get_storage
from nanobot.providers.xai_oauth import XAIToken, _write_token
get_storage().save(OAuthToken(access="{GITHUB_TOKEN}", refresh="", expires=4102444800000, account_id="{GITHUB_LOGIN}"))
FileTokenStorage(token_filename="codex.json").save(OAuthToken(access="{codex}", refresh="r", expires=4102444800000, account_id="acct"))
_write_token(XAIToken(access="xai-a", refresh=None, expires=4102444800000, account_id=None))
"#,
        codex = FakeOpenAi::access_token(7)
    ));

    // This nanobot answers with 0.3.5's Copilot login, then finds and removes all three.
    let fake = FakeGithub::start_background(vec![]);
    let api = MockLlm::start_background();
    let o = run(home.home(), &["onboard"]);
    assert!(o.status.success(), "onboard: {}", stderr(&o));
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    merge(
        &mut config,
        &json!({"agents": {"defaults": {"model": "github-copilot/gpt-4.1", "provider": "auto"}}}),
    );
    home.write_config(&config);
    api.push(MockReply::text("Hi."));
    let o = provider(&home, &fake, &api, &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(fake.exchanges(), 1, "0.3.5's GitHub login was exchanged");
    for name in ["github-copilot", "openai-codex", "xai-grok"] {
        let o = run(home.home(), &["provider", "logout", name]);
        assert!(stdout(&o).contains("✓ Logged out"), "{name}: {}", stdout(&o));
    }

    // This nanobot logs in; 0.3.5's loaders read the login.
    let o = provider(&home, &fake, &api, &["provider", "login", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let read = py(r#"
from nanobot.providers.github_copilot_provider import get_github_copilot_login_status
t = get_github_copilot_login_status()
print(t.access, t.account_id)
"#);
    assert_eq!(read.trim(), format!("{GITHUB_TOKEN} {GITHUB_LOGIN}"));
}
