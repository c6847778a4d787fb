//! What a new user meets with a local server: errors that name the cause, the address and the setting to
//! change (one line each in one-shot mode, never the key), logs off the chat screen, no colour off a terminal.

use std::time::Duration;

use expectrl::{Eof, Expect, Session};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::support::{nanobot, onboarded, run, set, stderr, stdout};

/// Runs `agent -m hi` and checks the common shape of a failure: exit 1, nothing on stdout, one `Error:` line and
/// no other line about it (no log line per layer or per retry; every layer's message names the endpoint), no
/// key, no colour. Returns that line.
fn one_shot_failure(home: &TempHome) -> String {
    let o = run(home.home(), &["agent", "-m", "hi"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "stdout: {out} stderr: {err}");
    assert!(out.is_empty(), "{out}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("Error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    let about: Vec<&str> = err.lines().filter(|l| l.contains("127.0.0.1")).collect();
    assert_eq!(about, errors, "one line per failure: {err}");
    assert!(!err.contains("sk-mock"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    errors[0].to_owned()
}

#[test]
fn a_server_that_is_not_running_is_named_with_the_fix() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    set(
        &home,
        json!({"providers": {"custom": {"apiBase": format!("http://127.0.0.1:{port}/v1")}}}),
    );
    let line = one_shot_failure(&home);
    let address = format!("127.0.0.1:{port}");
    for part in [address.as_str(), "connection refused", "providers.custom.apiBase"] {
        assert!(line.contains(part), "`{part}` missing: {line}");
    }
}

#[test]
fn a_rejected_key_and_an_unknown_model_name_what_to_change() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let base = mock.openai_base_url();
    mock.push(MockReply::error(401).error_message("Incorrect API key provided: sk-mock"));
    let line = one_shot_failure(&home);
    assert!(
        line.contains("providers.custom.apiKey") && line.contains(base.trim_end_matches('/')),
        "{line}"
    );

    mock.push(MockReply::error(404).error_message("model 'mock-model' not found"));
    let line = one_shot_failure(&home);
    assert!(
        line.contains("model `mock-model`") && line.contains("agents.defaults.model"),
        "{line}"
    );

    // A server error is retried (no line per retry), then reported once with the endpoint.
    mock.set_fallback(MockReply::error(503).error_message("loading model"));
    let line = one_shot_failure(&home);
    assert!(
        line.contains("HTTP 503") && line.contains(base.trim_end_matches('/')),
        "{line}"
    );
}

#[test]
fn log_lines_on_stderr_have_no_colour_off_a_terminal_even_without_no_color() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("fine"));
    let o = nanobot(home.home())
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color")
        .env("NANOBOT_LOG", "debug")
        .args(["agent", "-m", "hi"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(stdout(&o).trim(), "fine");
    assert!(err.contains("DEBUG"), "NANOBOT_LOG is honoured: {err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn the_interactive_chat_keeps_log_lines_off_the_screen_and_in_the_log_files() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    // A failing turn logs an ERROR line (and warnings before it).
    mock.push(MockReply::error(401));
    let mut cmd = nanobot(home.home());
    cmd.env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .env("NANOBOT_LOG", "info")
        .arg("agent");
    let mut p = Session::spawn(cmd).expect("spawn nanobot agent in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    p.expect("You: ").unwrap();
    p.send_line("hello").unwrap();
    let shown = p.expect("You: ").unwrap();
    let screen = String::from_utf8_lossy(shown.before()).into_owned();
    assert!(
        screen.contains("providers.custom.apiKey"),
        "the answer explains: {screen:?}"
    );
    for level in ["ERROR", "WARN", " INFO "] {
        assert!(
            !screen.contains(level),
            "a log line on the chat screen: {screen:?}"
        );
    }
    p.send_line("exit").unwrap();
    p.expect(Eof).unwrap();
    let _ = p.get_process().wait();
    let logs = home.nanobot_dir().join("logs");
    let text: String = std::fs::read_dir(&logs)
        .unwrap_or_else(|e| panic!("{}: {e}", logs.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("nanobot.log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(text.contains("model call failed"), "{text}");
    assert!(!text.contains('\u{1b}'), "no colour in files: {text:?}");
    assert!(!text.contains("sk-mock"), "{text}");
}

#[test]
fn command_replies_in_the_chat_show_one_cat() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let mut cmd = nanobot(home.home());
    cmd.env("TERM", "xterm").arg("agent");
    let mut p = Session::spawn(cmd).expect("spawn nanobot agent in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    p.expect("You: ").unwrap();
    p.send_line("/help").unwrap();
    let shown = p.expect("You: ").unwrap();
    let screen = String::from_utf8_lossy(shown.before()).into_owned();
    assert!(screen.contains("nanobot commands"), "{screen:?}");
    assert_eq!(screen.matches('🐈').count(), 1, "{screen:?}");
    p.send_line("exit").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(mock.completion_requests().len(), 0);
}

#[test]
fn doctor_online_sends_one_tiny_request_per_model_and_names_what_fails() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("OK"));
    let o = run(home.home(), &["doctor", "--online"]);
    let out = stdout(&o);
    assert!(
        out.contains("model `mock-model` answers (provider custom at"),
        "{out}\n{}",
        stderr(&o)
    );
    // The mock, like llama-cpp-python, does not say its window: said, with what to set.
    assert!(
        out.contains("does not say how much context it serves") && out.contains("--n_ctx"),
        "{out}"
    );
    let req = mock.completion_requests().pop().unwrap();
    assert_eq!(req.body["max_tokens"], 1, "one output token: {}", req.body);
    let before = mock.completion_requests().len();

    // Without --online nothing is sent.
    let _ = run(home.home(), &["doctor"]);
    assert_eq!(mock.completion_requests().len(), before);

    // A key the server rejects is a problem with the setting to change (plain `doctor` cannot know it).
    mock.push(MockReply::error(401));
    let o = run(home.home(), &["doctor", "--online"]);
    let out = stdout(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("✗ model `mock-model`") && out.contains("providers.custom.apiKey"),
        "{out}"
    );
    assert!(!out.contains("sk-mock"), "{out}");
}

/// `doctor`'s output and its line about the prompt's size.
fn doctor_prompt_line(home: &TempHome) -> (String, String) {
    let o = run(home.home(), &["doctor"]);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains("prompt: about"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    (out, line)
}

/// `doctor` sizes the prompt every request carries (system prompt and tools, built as `agent` builds them)
/// against the context window: a small window with every tool is a problem naming the tool profile and the
/// answer's room, the `local` profile fits and lists its tools, and a turn offers the model exactly those.
#[test]
fn doctor_sizes_the_prompt_against_the_window_and_the_local_profile_offers_few_tools() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    set(
        &home,
        json!({"agents": {"defaults": {"contextWindowTokens": 4096, "maxTokens": 4096}}}),
    );
    let (out, line) = doctor_prompt_line(&home);
    assert!(line.starts_with('✗') && line.contains("does not fit"), "{line}");
    assert!(line.contains("spawn") && line.contains("profile full"), "{line}");
    assert!(
        out.contains("tools.profile: \"local\"") && out.contains("lower `agents.defaults.maxTokens`"),
        "{out}"
    );

    set(
        &home,
        json!({"agents": {"defaults": {"contextWindowTokens": 32768, "maxTokens": 2048}}, "tools": {"profile": "local"}}),
    );
    let (_, line) = doctor_prompt_line(&home);
    assert!(line.starts_with('✓') && line.contains("profile local"), "{line}");
    let listed: Vec<&str> = line.rsplit("tools: ").next().unwrap().split(", ").collect();
    assert_eq!(
        listed,
        [
            "cron",
            "edit_file",
            "exec",
            "list_dir",
            "read_file",
            "web_fetch",
            "write_file"
        ],
        "{line}"
    );

    // A turn offers the model exactly those, and a call of a tool left out does not run.
    mock.push(MockReply::tool_call("spawn", json!({"task": "x"})));
    mock.push(MockReply::text("done"));
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let requests = mock.completion_requests();
    let offered: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(offered, listed, "the request offers what doctor listed");
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .to_string();
    assert!(result.contains("not found"), "{result}");

    // `tools.only` wins; an unknown name is refused by validation with its place.
    set(&home, json!({"tools": {"only": ["read_file", "no such"]}}));
    let o = run(home.home(), &["doctor"]);
    let out = stdout(&o);
    assert!(out.contains("tools.only[1]"), "{out}");
    set(
        &home,
        json!({"tools": {"only": ["read_file", "mcp_*"], "profile": ""}}),
    );
    let (_, line) = doctor_prompt_line(&home);
    assert!(line.ends_with("tools: read_file"), "{line}");
}
