//! The interactive chat, driven through a pseudo-terminal.

use std::time::Duration;

use expectrl::{ControlCode, Eof, Expect, Session};
use nanobot_testkit::{MockLlm, MockReply};

use crate::support::{nanobot, onboarded};

fn spawn_chat(home: &std::path::Path) -> expectrl::session::OsSession {
    let mut cmd = nanobot(home);
    cmd.env("TERM", "xterm").env_remove("NO_COLOR").arg("agent");
    let mut p = Session::spawn(cmd).expect("spawn nanobot agent in a pty");
    // A generous bound for a loaded CI machine; nothing waits on it when things work.
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    p
}

#[test]
fn one_turn_then_exit() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Hi **there**, I am nanobot."));
    // A line typed earlier in 0.3.5's chat, in its history file (prompt_toolkit's format).
    let history_file = home.nanobot_dir().join("history/cli_history");
    let earlier = "\n# 2026-01-01 09:00:00.000001\n+earlier in python \\ with a backslash\n";
    std::fs::create_dir_all(history_file.parent().unwrap()).unwrap();
    std::fs::write(&history_file, earlier).unwrap();
    let mut p = spawn_chat(home.home());
    p.expect("You: ").unwrap();
    // The up arrow brings it back; Ctrl-U clears it again.
    p.send("\x1b[A").unwrap();
    p.expect("earlier in python \\ with a backslash").unwrap();
    p.send("\x15").unwrap();
    p.send_line("Hello from the terminal").unwrap();
    let answer = p.expect("I am nanobot.").unwrap();
    let before = String::from_utf8_lossy(answer.before()).into_owned();
    assert!(before.contains("there"), "{before:?}");
    assert!(!before.contains("**there**"), "Markdown is rendered: {before:?}");
    p.expect("You: ").unwrap();
    p.send_line("exit").unwrap();
    p.expect("Goodbye").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, expectrl::process::unix::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );

    let req = mock.last_request().unwrap();
    assert!(req.last_user_text().unwrap().contains("Hello from the terminal"));
    assert!(req.is_stream(), "the interactive chat streams");
    // Appended in 0.3.5's format, what was there kept as it was.
    let history = std::fs::read_to_string(&history_file).unwrap();
    assert!(history.starts_with(earlier), "{history}");
    assert!(history.contains("\n+Hello from the terminal\n"), "{history}");
    // 0.3.5's own reader (prompt_toolkit's FileHistory, newest first) finds every entry.
    let Some(python) = nanobot_testkit::peers::require_nanobot_python() else {
        return;
    };
    let read = std::process::Command::new(python)
        .args([
            "-c",
            "import json, sys\nfrom prompt_toolkit.history import FileHistory\n\
             print(json.dumps(list(FileHistory(sys.argv[1]).load_history_strings())))",
        ])
        .arg(&history_file)
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let entries: Vec<String> = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(
        entries,
        [
            "exit",
            "Hello from the terminal",
            "earlier in python \\ with a backslash"
        ]
    );
}

#[test]
fn ctrl_d_leaves() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let mut p = spawn_chat(home.home());
    p.expect("You: ").unwrap();
    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect("Goodbye").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, expectrl::process::unix::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );
    assert_eq!(mock.completion_requests().len(), 0);
}

#[test]
fn ctrl_c_stops_the_running_turn_and_the_chat_goes_on() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    // The first answer would take ten minutes; Ctrl-C must end the turn without waiting for it.
    // (Rules, not a FIFO script: Ctrl-C may come before the first request is even sent.)
    mock.when_last_user_contains(
        "long story",
        MockReply::text("too late").delay(Duration::from_secs(600)),
    );
    mock.when_last_user_contains("Are you there?", MockReply::text("Second answer."));
    let mut p = spawn_chat(home.home());
    p.expect("You: ").unwrap();
    p.send_line("Tell me a long story").unwrap();
    p.expect("thinking").unwrap();
    p.send(ControlCode::EndOfText).unwrap();
    p.expect("Stopped").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("Are you there?").unwrap();
    p.expect("Second answer.").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("quit").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, expectrl::process::unix::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );
    let reqs = mock.completion_requests();
    assert!(reqs.len() <= 2, "{} requests", reqs.len());
    assert!(
        reqs.last()
            .unwrap()
            .last_user_text()
            .unwrap()
            .contains("Are you there?")
    );
}

#[test]
fn cron_jobs_fire_in_the_chat() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let o = crate::support::run(
        home.home(),
        &["cron", "add", "-n", "ping", "-m", "cron ping", "--every", "1"],
    );
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    mock.when_last_user_contains("cron ping", MockReply::text("pong from cron"));
    let mut p = spawn_chat(home.home());
    p.expect("pong from cron").unwrap();
    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect(Eof).unwrap();
    assert!(
        mock.completion_requests()
            .iter()
            .any(|r| r.last_user_text().unwrap_or_default().contains("cron ping"))
    );
}

#[test]
fn piped_input_works_without_a_terminal() {
    use std::io::Write;
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Piped answer."));
    let mut child = nanobot(home.home())
        .arg("agent")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello through a pipe\nexit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Piped answer."), "{text}");
    assert!(!text.contains('\x1b'), "no terminal, no ANSI codes: {text:?}");
}

/// `tools.approval.mode: "risky"` in `home`'s config.
fn ask_before_risky_calls(home: &nanobot_testkit::TempHome) {
    let path = home.config_path();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["tools"]["approval"] = serde_json::json!({"mode": "risky"});
    home.write_config(&config);
}

#[test]
fn a_risky_command_is_asked_about_at_the_prompt() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    ask_before_risky_calls(&home);
    home.write_workspace_file("keep.txt", "keep");
    home.write_workspace_file("drop.txt", "drop");
    mock.when_last_user_contains_once(
        "remove keep",
        MockReply::tool_call("exec", serde_json::json!({"command": "rm keep.txt"})),
    );
    mock.when_last_user_contains_once(
        "remove drop",
        MockReply::tool_call("exec", serde_json::json!({"command": "rm drop.txt"})),
    );
    mock.set_fallback(MockReply::text("Turn over."));
    let mut p = spawn_chat(home.home());
    p.expect("You: ").unwrap();
    p.send_line("please remove keep.txt").unwrap();
    p.expect("Approval needed").unwrap();
    p.expect("rm keep.txt").unwrap();
    p.expect("Run it? [y/N] ").unwrap();
    p.send_line("n").unwrap();
    p.expect("refused").unwrap();
    p.expect("Turn over.").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("now remove drop.txt").unwrap();
    p.expect("Run it? [y/N] ").unwrap();
    p.send_line("y").unwrap();
    p.expect("approved").unwrap();
    p.expect("Turn over.").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("exit").unwrap();
    p.expect(Eof).unwrap();
    assert!(
        home.workspace().join("keep.txt").exists(),
        "refused at the prompt"
    );
    assert!(
        !home.workspace().join("drop.txt").exists(),
        "approved at the prompt"
    );
    let bodies: Vec<String> = mock
        .completion_requests()
        .iter()
        .map(|r| r.raw_body.clone())
        .collect();
    assert!(
        bodies.iter().any(|b| b.contains("the user refused this call")),
        "the model is told"
    );
}
