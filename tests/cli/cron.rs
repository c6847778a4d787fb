//! `nanobot cron …` through the binary.

use nanobot_testkit::{MockLlm, MockReply};

use crate::support::{onboarded, run, stderr, stdout};

#[test]
fn add_list_enable_run_remove() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let h = home.home();
    let o = run(
        h,
        &[
            "cron",
            "add",
            "-n",
            "brief",
            "-m",
            "Morning brief",
            "-c",
            "0 9 * * MON-FRI",
            "--tz",
            "Europe/Berlin",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let jobs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.workspace().join("cron/jobs.json")).unwrap())
            .unwrap();
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(jobs["jobs"][0]["schedule"]["kind"], "cron");
    assert_eq!(jobs["jobs"][0]["schedule"]["tz"], "Europe/Berlin");

    let o = run(h, &["cron", "list"]);
    assert!(
        stdout(&o).contains("brief") && stdout(&o).contains(&id),
        "{}",
        stdout(&o)
    );

    let o = run(h, &["cron", "enable", &id, "--disable"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(run(h, &["cron", "list"]).stdout.starts_with(b"No enabled jobs"));
    let o = run(h, &["cron", "run", &id]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a disabled job needs --force: {}",
        stderr(&o)
    );

    mock.push(MockReply::text("Here is your brief."));
    let o = run(h, &["cron", "run", &id, "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Here is your brief.\n");
    assert!(
        mock.last_request()
            .unwrap()
            .last_user_text()
            .unwrap()
            .contains("Morning brief")
    );

    let o = run(h, &["cron", "remove", &id]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        run(h, &["cron", "list", "--all"])
            .stdout
            .starts_with(b"No scheduled jobs")
    );
}

#[test]
fn invalid_schedules_are_rejected_before_saving() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let h = home.home();
    for args in [
        vec!["cron", "add", "-n", "x", "-m", "y", "-c", "0 25 * * *"],
        vec![
            "cron",
            "add",
            "-n",
            "x",
            "-m",
            "y",
            "-c",
            "0 9 * * *",
            "--tz",
            "Mars/Base",
        ],
        vec!["cron", "add", "-n", "x", "-m", "y"],
        vec![
            "cron",
            "add",
            "-n",
            "x",
            "-m",
            "y",
            "--every",
            "60",
            "--at",
            "2030-01-01T09:00:00",
        ],
    ] {
        let o = run(h, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty());
    }
    assert!(
        run(h, &["cron", "list", "--all"])
            .stdout
            .starts_with(b"No scheduled jobs")
    );
    let o = run(h, &["cron", "remove", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope"));
}

/// `nanobot trigger`: queues a delivery for a trigger `/trigger` made (here one the Python nanobot made), from an
/// argument or standard input, outside the workspace; unknown triggers and empty messages are refused.
#[test]
fn trigger_queues_a_delivery_outside_the_workspace() {
    use std::io::Write as _;
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let h = home.home();
    let store = home.workspace().join("triggers");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("triggers.json"),
        serde_json::json!({"version": 1, "triggers": [{"id": "trg_ABCDEFGH", "name": "deploys", "enabled": true,
            "channel": "telegram", "chatId": "42", "sessionKey": "telegram:42"}]})
        .to_string(),
    )
    .unwrap();
    let o = run(h, &["trigger", "trg_ABCDEFGH", "deploy finished"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Queued trg_ABCDEFGH (tdl_"),
        "{}",
        stdout(&o)
    );

    let mut child = crate::support::nanobot(h)
        .args(["trigger", "trg_ABCDEFGH"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from a pipe\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let inbox = h.join(".nanobot/triggers/inbox");
    let mut queued: Vec<String> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
            v["delivery"]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    queued.sort();
    assert_eq!(queued, ["deploy finished", "from a pipe\n"]);
    assert!(
        !store.join("inbox").exists(),
        "nothing is queued inside the workspace"
    );

    let o = run(h, &["trigger", "trg_NOPE", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("trigger not found: trg_NOPE"),
        "{}",
        stderr(&o)
    );
    let o = run(h, &["trigger", "trg_ABCDEFGH", "  "]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
