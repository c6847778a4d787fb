//! `nanobot store export|import`: a home's sessions, cron store and memory files to a NATS server's shared files
//! and back, byte for byte.

use nanobot_testkit::nats::NatsServer;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::support::{merge, onboarded, run, stderr, stdout};

fn session_file(home: &TempHome, encoded_key: &str) -> Option<std::path::PathBuf> {
    let dir = home.nanobot_dir().join("sessions");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|ws| {
        let p = ws.path().join(format!("{encoded_key}.jsonl"));
        p.is_file().then_some(p)
    })
}

fn point_at_nats(home: &TempHome, url: &str) {
    let path = home.config_path();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    merge(
        &mut config,
        &json!({"gateway": {"bus": {"kind": "nats", "nats": {"url": url, "store": "jetstream", "connectTimeoutS": 3}}}}),
    );
    home.write_config(&config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_is_imported_and_exported_to_another_byte_for_byte() {
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("hello back"));
    mock.push(MockReply::text("again back"));
    let url = server.url();
    tokio::task::spawn_blocking(move || {
        let a = onboarded(&mock);
        let o = run(a.home(), &["agent", "-m", "hello"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let o = run(
            a.home(),
            &[
                "cron",
                "add",
                "-n",
                "brief",
                "-m",
                "Morning brief",
                "-c",
                "0 9 * * *",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        // The memory files travel too (the onboarded MEMORY.md and SOUL.md templates, a history line, a Dream
        // record and an edited USER.md).
        std::fs::write(a.workspace().join("USER.md"), "# User\n\nAna, in Oslo.\n").unwrap();
        let record = a.workspace().join("memory/.dream/1.json");
        std::fs::create_dir_all(record.parent().unwrap()).unwrap();
        std::fs::write(
            &record,
            r#"{"version": 1, "kind": "dream", "timestamp": "2026-11-26 10:00", "changes": []}"#,
        )
        .unwrap();
        let history = a.workspace().join("memory/history.jsonl");
        std::fs::write(
            &history,
            "{\"cursor\": 1, \"timestamp\": \"2026-01-01 10:00\", \"content\": \"Alice likes tea.\"}\n",
        )
        .unwrap();
        point_at_nats(&a, &url);
        let o = run(a.home(), &["store", "import"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).starts_with("Imported 8 file(s) from "),
            "{}",
            stdout(&o)
        );
        let o = run(a.home(), &["store", "import"]);
        assert!(stdout(&o).contains("Imported 0 file(s)") && stdout(&o).contains("8 already matched"));

        let b = onboarded(&mock);
        point_at_nats(&b, &url);
        let b_user = std::fs::read(b.workspace().join("USER.md")).unwrap();
        let o = run(b.home(), &["store", "export"]);
        // B's own MEMORY.md and SOUL.md templates already match; its own USER.md differs and is kept.
        assert_ne!(o.status.code(), Some(0));
        assert!(
            stdout(&o).starts_with("Exported 5 file(s) from NANOBOT_FILES")
                && stdout(&o).contains("2 already matched")
                && stdout(&o).contains("USER.md")
                && stdout(&o).contains("--overwrite"),
            "{}",
            stdout(&o)
        );
        assert_eq!(std::fs::read(b.workspace().join("USER.md")).unwrap(), b_user);
        let o = run(b.home(), &["store", "export", "--overwrite"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).starts_with("Exported 1 file(s)") && stdout(&o).contains("7 already matched"),
            "{}",
            stdout(&o)
        );
        let read = |h: &TempHome, f: &str| std::fs::read(h.workspace().join(f)).unwrap();
        for file in ["cron/jobs.json", "USER.md", "SOUL.md", "memory/.dream/1.json"] {
            assert_eq!(read(&a, file), read(&b, file), "{file}");
        }
        assert_eq!(
            std::fs::read(&history).unwrap(),
            std::fs::read(b.workspace().join("memory/history.jsonl")).unwrap()
        );
        let (fa, fb) = (
            session_file(&a, "Y2xpOmRpcmVjdA").unwrap(),
            session_file(&b, "Y2xpOmRpcmVjdA").unwrap(),
        );
        assert_ne!(fa.parent(), fb.parent(), "each home has its own workspace id");
        assert_eq!(std::fs::read(&fa).unwrap(), std::fs::read(&fb).unwrap());
        // The usage ledger travels too: B counts A's turn.
        let month = |h: &TempHome| {
            let dir = h.nanobot_dir().join("usage");
            let file = std::fs::read_dir(&dir).unwrap().flatten().next().unwrap().path();
            std::fs::read(file).unwrap()
        };
        assert_eq!(month(&a), month(&b));

        // A's copy changed offline: importing it again is a conflict, listed, exit 1, the stored one kept.
        let o = run(a.home(), &["agent", "-m", "again"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let o = run(a.home(), &["store", "import"]);
        assert_ne!(o.status.code(), Some(0));
        assert!(
            stdout(&o).contains("sessions/Y2xpOmRpcmVjdA.jsonl"),
            "{}",
            stdout(&o)
        );
        let o = run(b.home(), &["store", "export"]);
        assert!(stdout(&o).contains("8 already matched"), "{}", stdout(&o));
    })
    .await
    .unwrap();
}

#[test]
fn an_unreachable_server_is_named_and_nothing_is_touched() {
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let port = nanobot_testkit::peers::free_port().unwrap();
    point_at_nats(&home, &format!("nats://127.0.0.1:{port}"));
    let o = run(home.home(), &["store", "export"]);
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// What `nanobot store export` writes is a home the Python nanobot 0.3.5 continues as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_home_is_continued_by_the_python_nanobot() {
    let Some(pyexe) = nanobot_testkit::peers::require(
        "python nanobot (nanobot-ai 0.3.5)",
        crate::compat_python::python_nanobot(),
    ) else {
        return;
    };
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("hello back"));
    mock.push(MockReply::text("continued in python"));
    let url = server.url();
    let mock = std::sync::Arc::new(mock);
    let m = mock.clone();
    tokio::task::spawn_blocking(move || {
        let a = onboarded(&m);
        let o = run(a.home(), &["agent", "-m", "hello from rust"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        point_at_nats(&a, &url);
        let o = run(a.home(), &["store", "import"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

        let b = onboarded(&m);
        point_at_nats(&b, &url);
        let o = run(b.home(), &["store", "export"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

        let mut cmd = std::process::Command::new(&pyexe);
        cmd.env_clear()
            .env("HOME", b.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NO_COLOR", "1")
            .env("TERM", "dumb")
            .current_dir(b.home())
            .args(["agent", "-m", "go on"]);
        let o = crate::compat_python::bounded(cmd, "python nanobot");
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("continued in python"), "{}", stdout(&o));
        assert!(!stderr(&o).contains("Traceback"), "{}", stderr(&o));
    })
    .await
    .unwrap();
    // Python read the exported session: the conversation it sent the model holds the turn Rust stored.
    let asked = mock.completion_requests();
    let last = asked.last().unwrap();
    let texts: Vec<String> = last
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(texts.iter().any(|t| t.contains("hello from rust")), "{texts:?}");
    assert!(texts.iter().any(|t| t == "hello back"), "{texts:?}");
}
