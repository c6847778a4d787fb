//! A one-shot `nanobot agent -m` killed mid-turn (a harness's timeout sends SIGTERM) keeps the question: the next
//! turn's request carries it, followed by the interruption note.

use std::process::Stdio;
use std::time::Duration;

use nanobot_core::TURN_INTERRUPTED_NOTE;
use nanobot_testkit::{MockLlm, MockReply};

use crate::support::{nanobot, onboarded, run, stderr, stdout, terminate};

#[tokio::test(flavor = "multi_thread")]
async fn agent_m_killed_by_sigterm_mid_turn_keeps_the_question() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.when_last_user_contains_once(
        "How tall is Mont Blanc?",
        MockReply::text("never finished").stall_after_chunks(0),
    );
    let child = nanobot(home.home())
        .args(["agent", "-m", "How tall is Mont Blanc?"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let asked = tokio::time::timeout(Duration::from_secs(120), mock.wait_for_requests(1)).await;
    let out = terminate(child).await;
    asked.expect("the model was never asked");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("never finished"));

    mock.push(MockReply::text("About 4,806 m."));
    let o = tokio::task::spawn_blocking({
        let home = home.home().to_owned();
        move || run(&home, &["agent", "-m", "Well?"])
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "About 4,806 m.\n");
    let req = mock.last_request().unwrap();
    let turns: Vec<(String, String)> = req
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let i = turns
        .iter()
        .position(|(role, text)| role == "user" && text.contains("How tall is Mont Blanc?"))
        .unwrap_or_else(|| panic!("the question is in the next request: {turns:?}"));
    assert_eq!(
        turns.get(i + 1),
        Some(&("assistant".to_owned(), TURN_INTERRUPTED_NOTE.to_owned())),
        "{turns:?}"
    );
    assert!(turns.last().unwrap().1.contains("Well?"));
}
