//! Flags 0.3.5 has for things this program does differently: accepted, with the effect their help states.
//! `agent --classic`/`--no-tui` (the line prompt is the only chat here), `agent --theme` (checked, unused),
//! `plugins enable --logs/--no-logs` (nothing is installed).

use std::time::Duration;

use expectrl::{Eof, Expect, Session};
use nanobot_testkit::{MockLlm, MockReply, TempHome};

use crate::support::{nanobot, onboarded, run, stderr, stdout};

#[test]
fn classic_and_no_tui_answer_like_plain_agent() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    for flag in ["--classic", "--no-tui"] {
        mock.push(MockReply::text(format!("Answer with {flag}.")));
        let o = run(home.home(), &["agent", flag, "-m", "hello"]);
        assert_eq!(o.status.code(), Some(0), "{flag}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("Answer with {flag}.\n"));
    }
    assert_eq!(mock.completion_requests().len(), 2);
}

#[test]
fn classic_opens_the_interactive_chat_and_theme_is_accepted() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("Hello from the line prompt."));
    let mut cmd = nanobot(home.home());
    cmd.env("TERM", "xterm")
        .args(["agent", "--classic", "--theme", " Light "]);
    let mut p = Session::spawn(cmd).expect("spawn nanobot agent in a pty");
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    p.expect("You: ").unwrap();
    p.send_line("hi").unwrap();
    p.expect("Hello from the line prompt.").unwrap();
    p.expect("You: ").unwrap();
    p.send_line("exit").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(mock.completion_requests().len(), 1);
}

#[test]
fn an_unknown_theme_is_a_usage_error() {
    let home = TempHome::new();
    let o = run(home.home(), &["agent", "--theme", "blue", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("--theme") && err.contains("auto, dark, or light"),
        "{err}"
    );
}

#[test]
fn plugins_enable_logs_says_nothing_is_installed_and_enables() {
    let home = TempHome::new();
    assert_eq!(run(home.home(), &["onboard"]).status.code(), Some(0));
    let o = run(home.home(), &["plugins", "enable", "telegram", "--logs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("Nothing to install"), "{}", stdout(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["channels"]["telegram"]["enabled"], true);

    // `--no-logs` (the default, and the last of the pair wins) prints no such line.
    let o = run(
        home.home(),
        &["plugins", "enable", "telegram", "--logs", "--no-logs"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("Nothing to install"), "{}", stdout(&o));
}
