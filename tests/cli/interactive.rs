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
    let mut p = spawn_chat(home.home());
    p.expect("You: ").unwrap();
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
    let history = std::fs::read_to_string(home.nanobot_dir().join("history/cli_history")).unwrap();
    assert!(history.contains("Hello from the terminal"), "{history}");
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
