//! `nanobot agent -m`: one turn against MockLlm; only the answer on stdout.

use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::support::{merge, nanobot, onboarded, run, stderr, stdout};

/// Session files live in `~/.nanobot/sessions/<workspace id>/<base64url key>.jsonl`.
fn session_file(home: &TempHome, encoded_key: &str) -> Option<std::path::PathBuf> {
    let dir = home.nanobot_dir().join("sessions");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|ws| {
        let p = ws.path().join(format!("{encoded_key}.jsonl"));
        p.is_file().then_some(p)
    })
}

#[test]
fn onboard_then_agent_m_prints_only_the_answer() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    home.write_workspace_file("notes.md", "The launch is on Friday.");
    mock.push(MockReply::tool_call("read_file", json!({"path": "notes.md"})));
    mock.push(MockReply::text("The launch is **Friday**."));
    let o = run(home.home(), &["agent", "-m", "When is the launch?"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "The launch is **Friday**.\n",
        "stdout carries only the answer"
    );

    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0]
            .last_user_text()
            .as_deref()
            .map(|t| t.contains("When is the launch?")),
        Some(true)
    );
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(
        results[0].content.contains("The launch is on Friday."),
        "{:?}",
        results[0]
    );

    // The turn is saved in the default session `cli:direct`.
    let file = session_file(&home, "Y2xpOmRpcmVjdA").expect("cli:direct session file");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.lines().next().unwrap().contains("\"_type\":\"metadata\""),
        "{text}"
    );
    assert!(text.contains("When is the launch?"));
    assert!(text.contains("The launch is **Friday**."));
}

#[test]
fn logs_go_to_stderr_and_sessions_keep_history() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Nice to meet you, Ada."));
    mock.push(MockReply::text("You are Ada."));
    mock.push(MockReply::text("I don't know yet."));
    let o = run(home.home(), &["agent", "-m", "I am Ada", "--logs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Nice to meet you, Ada.\n");
    assert!(!stderr(&o).is_empty(), "--logs writes logs to stderr");

    let o = run(home.home(), &["agent", "-m", "Who am I?", "--no-markdown"]);
    assert_eq!(stdout(&o), "You are Ada.\n");
    let second = &mock.completion_requests()[1];
    let history = serde_json::to_string(second.messages()).unwrap();
    assert!(
        history.contains("I am Ada"),
        "the same session carries history: {history}"
    );

    let o = run(home.home(), &["agent", "-m", "Who am I?", "-s", "cli:other"]);
    assert_eq!(stdout(&o), "I don't know yet.\n");
    let third = &mock.completion_requests()[2];
    let history = serde_json::to_string(third.messages()).unwrap();
    assert!(
        !history.contains("I am Ada"),
        "another session starts empty: {history}"
    );
    assert!(
        session_file(&home, "Y2xpOm90aGVy").is_some(),
        "cli:other session file"
    );
}

#[test]
fn python_written_config_works_unchanged() {
    let mock = MockLlm::start_background();
    let home = TempHome::new();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/cli/fixtures/python-config.json"
    );
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    // Only the provider is pointed at the mock.
    merge(
        &mut config,
        &mock.nanobot_config(nanobot_testkit::WireFormat::OpenAi),
    );
    home.write_config(&config);
    mock.push(MockReply::text("Hello from the mock."));
    let o = run(home.home(), &["agent", "-m", "Hello"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Hello from the mock.\n");
    let req = mock.last_request().unwrap();
    assert_eq!(req.model(), Some("mock-model"));
    assert!(!req.tool_names().is_empty(), "the built-in tools are offered");
    // The workspace of the Python config (~/.nanobot/workspace) is used and gets its templates.
    assert!(home.workspace().join("AGENTS.md").is_file());

    let o = run(home.home(), &["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Provider:  custom"), "{}", stdout(&o));
}

#[test]
fn model_failure_is_a_runtime_error_with_empty_stdout() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::error(401));
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {} stderr: {}",
        stdout(&o),
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("Error"), "{}", stderr(&o));
}

#[test]
fn slash_commands_answer_without_a_model_call() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let o = nanobot(home.home())
        .args(["agent", "-m", "/help"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("/new"), "{}", stdout(&o));
    assert_eq!(mock.completion_requests().len(), 0);
}

#[test]
fn bare_nanobot_and_root_agent_options_talk_to_the_agent_as_0_3_5_does() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Hello from the root."));
    let o = run(home.home(), &["-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Hello from the root.\n");
    mock.push(MockReply::text("Again, in a session."));
    let o = run(home.home(), &["--session", "cli:other", "--message=hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Again, in a session.\n");
    assert!(
        session_file(&home, "Y2xpOm90aGVy").is_some(),
        "cli:other was used"
    );
    // `nanobot` alone is the interactive chat: on a closed stdin it ends at once without a model call.
    let before = mock.completion_requests().len();
    let o = nanobot(home.home())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(mock.completion_requests().len(), before);
    // `-v` is the version, as in 0.3.5.
    let o = run(home.home(), &["-v"]);
    assert_eq!(
        stdout(&o).trim(),
        format!("nanobot {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn sessions_restore_workspace_copies_sessions_back_without_overwriting() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("first"));
    let o = run(home.home(), &["agent", "-m", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let src = session_file(&home, "Y2xpOmRpcmVjdA").unwrap();
    let dst = home.workspace().join("sessions/Y2xpOmRpcmVjdA.jsonl");

    let o = run(home.home(), &["sessions", "restore-workspace"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Restored 1 session file(s) to "),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
    let o = run(home.home(), &["sessions", "restore-workspace"]);
    assert!(stdout(&o).contains("Restored 0 session file(s)") && stdout(&o).contains("1 already matched"));

    // A different file of the same name is the user's to review: never overwritten.
    std::fs::write(&dst, "{\"_type\":\"metadata\"}\n").unwrap();
    let o = run(home.home(), &["sessions", "restore-workspace"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Rollback is incomplete"), "{}", stdout(&o));
    assert!(stdout(&o).contains(&dst.display().to_string()), "{}", stdout(&o));
    assert_eq!(
        std::fs::read_to_string(&dst).unwrap(),
        "{\"_type\":\"metadata\"}\n"
    );
}

/// The layout `onboard` writes (workspace `~/.nanobot/workspace` inside the data directory), through the binary
/// as a user runs it: the model lists and searches its own workspace, in both modes; `config.json` beside the
/// workspace stays out of reach.
#[test]
fn onboard_layout_lists_its_own_workspace_in_both_modes() {
    for restrict in [false, true] {
        let mock = MockLlm::start_background();
        let home = onboarded(&mock);
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
        assert!(
            config["agents"]["defaults"]["workspace"]
                .as_str()
                .is_some_and(|w| w.ends_with(".nanobot/workspace"))
        );
        merge(&mut config, &json!({"tools": {"restrictToWorkspace": restrict}}));
        home.write_config(&config);
        home.write_workspace_file("a.txt", "alpha");
        mock.push(MockReply::tool_call("list_dir", json!({"path": "."})));
        mock.push(MockReply::tool_call("glob", json!({"pattern": "*"})));
        mock.push(MockReply::tool_call(
            "read_file",
            json!({"path": "../config.json"}),
        ));
        mock.push(MockReply::text("done"));
        let o = run(home.home(), &["agent", "-m", "look around"]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        let reqs = mock.completion_requests();
        assert_eq!(reqs.len(), 4, "restrict {restrict}");
        let result = |i: usize| reqs[i].tool_results()[0].content.clone();
        assert!(
            result(1).contains("a.txt"),
            "restrict {restrict}: list_dir: {}",
            result(1)
        );
        assert!(
            result(2).contains("a.txt"),
            "restrict {restrict}: glob: {}",
            result(2)
        );
        assert!(
            !result(3).contains("apiKey"),
            "restrict {restrict}: {}",
            result(3)
        );
    }
}

/// `/pairing` is answered in the terminal as 0.3.5 answers it (the local user owns the bot), without the model.
#[test]
fn pairing_command_is_answered_without_a_model_call() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let o = run(home.home(), &["agent", "-m", "/pairing"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "No pending pairing requests.\n");
    let o = run(home.home(), &["agent", "-m", "/pairing approve NOPE-NOPE"]);
    assert!(stdout(&o).contains("Could not approve"), "{}", stdout(&o));
    let o = run(home.home(), &["agent", "-m", "/pairing frobnicate"]);
    assert!(stdout(&o).starts_with("Usage: /pairing"), "{}", stdout(&o));
    assert_eq!(mock.completion_requests().len(), 0);
}

/// `agent -m` streams its request and prints the answer as it comes, to a pipe too (0.3.5 does); the user's
/// message is sent as the user wrote it, with no runtime block (0.3.5 sends none there).
#[test]
fn agent_m_streams_to_a_pipe_and_sends_the_message_as_written() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Streamed answer."));
    let o = run(home.home(), &["agent", "-m", "hello there"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Streamed answer.\n");
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["stream"], true, "{}", reqs[0].body);
    assert_eq!(reqs[0].last_user_text().as_deref(), Some("hello there"));
}

/// `/status` in a new process shows the session's last request and its context, not the process's zeros.
#[test]
fn status_shows_the_sessions_last_usage_in_a_new_process() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("hi"));
    let o = run(home.home(), &["agent", "-m", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(home.home(), &["agent", "-m", "/status"]);
    let text = stdout(&o);
    let tokens = text
        .lines()
        .find(|l| l.starts_with("Tokens: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!tokens.starts_with("Tokens: 0 in / 0 out"), "{text}");
    let context = text
        .lines()
        .find(|l| l.starts_with("Context: "))
        .unwrap_or_else(|| panic!("{text}"));
    // The system prompt and tools alone are thousands of tokens.
    assert!(context.contains("k/"), "{text}");
    assert_eq!(mock.completion_requests().len(), 1);
}

/// A one-shot run probes `exec`'s confinement (which runs bubblewrap) when it runs a command, not at start: it
/// used to start the probe on a thread at every start and exit without waiting for it.
#[test]
fn a_one_shot_run_probes_the_sandbox_only_when_it_runs_a_command() {
    const PROBING: &str = "probing the kernel and bubblewrap";
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let one_shot = || {
        nanobot(home.home())
            .env("NANOBOT_LOG", "nanobot_tools=debug")
            .args(["agent", "-m", "hi"])
            .output()
            .unwrap()
    };
    mock.push(MockReply::text("fine"));
    let o = one_shot();
    assert_eq!(stdout(&o).trim(), "fine", "{}", stderr(&o));
    assert!(!stderr(&o).contains(PROBING), "{}", stderr(&o));

    mock.push(MockReply::tool_call("exec", json!({"command": "echo probed"})));
    mock.push(MockReply::text("done"));
    let o = one_shot();
    assert_eq!(stdout(&o).trim(), "done", "{}", stderr(&o));
    assert!(stderr(&o).contains(PROBING), "{}", stderr(&o));
}
