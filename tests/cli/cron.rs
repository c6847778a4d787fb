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
