//! A burst of concurrent API requests across many sessions, then SIGTERM with turns in flight.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use nanobot_testkit::peers::{ChildGuard, free_port, wait_for_http};
use nanobot_testkit::{MockLlm, MockReply, TempHome, WireFormat};
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(120);
const KEY: &str = "sk-process-test";
const SESSIONS: usize = 24;
const SLOW: usize = 4;

/// Every session file under `HOME/.nanobot/sessions`, by the key in its metadata line.
fn sessions(home: &TempHome) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![home.nanobot_dir().join("sessions")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                let text = std::fs::read_to_string(&p).unwrap();
                let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
                let key = lines.next().unwrap()["key"].as_str().unwrap().to_owned();
                out.insert(key, lines.collect());
            }
        }
    }
    out
}

fn texts(messages: &[Value], role: &str) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == role)
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

async fn ask(c: &reqwest::Client, url: &str, session: &str, text: &str) -> anyhow::Result<String> {
    let body = json!({"model": "mock-model", "session_id": session, "messages": [{"role": "user", "content": text}]});
    let r = c.post(url).bearer_auth(KEY).json(&body).send().await?;
    anyhow::ensure!(r.status() == 200, "status {}", r.status());
    let v: Value = r.json().await?;
    Ok(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_across_sessions_then_sigterm_with_turns_in_flight() {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for s in 0..SESSIONS {
        for k in 0..2 {
            mock.when_last_user_contains(format!("<m-{s}-{k}>"), MockReply::text(format!("answer {s}/{k}")));
        }
    }
    for s in 0..SLOW {
        mock.when_last_user_contains(
            format!("<slow-{s}>"),
            MockReply::text(format!("slow answer {s}")).delay(Duration::from_millis(1500)),
        );
    }
    let (http_port, api_port) = (free_port().unwrap(), free_port().unwrap());
    let mut cfg = mock.nanobot_config(WireFormat::OpenAi);
    cfg["agents"]["defaults"]["workspace"] = json!(home.workspace());
    cfg["gateway"] = json!({"host": "127.0.0.1", "port": http_port, "heartbeat": {"enabled": false}});
    cfg["api"] = json!({"host": "127.0.0.1", "port": api_port, "apiKey": KEY});
    let config = home.write_config(&cfg);
    let log = home.root().join("gateway.log");
    let mut guard = ChildGuard::spawn(
        "nanobot-gateway",
        Command::new(env!("CARGO_BIN_EXE_nanobot-gateway"))
            .arg("-c")
            .arg(&config)
            .env_clear()
            .envs(home.env())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap()),
    )
    .unwrap();
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for_http(&format!("http://127.0.0.1:{http_port}/health"), GUARD)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", show_log()));
    let url = format!("http://127.0.0.1:{api_port}/v1/chat/completions");
    let c = reqwest::Client::new();

    // The burst: every session gets two messages at once, all sessions together.
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        for k in 0..2 {
            let (c, url) = (c.clone(), url.clone());
            tasks.push(tokio::spawn(async move {
                let got = ask(&c, &url, &format!("s{s}"), &format!("message <m-{s}-{k}>")).await;
                (s, k, got)
            }));
        }
    }
    for t in tasks {
        let (s, k, got) = tokio::time::timeout(GUARD, t).await.unwrap().unwrap();
        assert_eq!(got.unwrap(), format!("answer {s}/{k}"), "session {s} message {k}");
    }

    // Slow turns in flight, then SIGTERM.
    let before = mock.request_count();
    let mut slow = Vec::new();
    for s in 0..SLOW {
        let (c, url) = (c.clone(), url.clone());
        slow.push(tokio::spawn(async move {
            ask(&c, &url, &format!("slow{s}"), &format!("<slow-{s}>")).await
        }));
    }
    tokio::time::timeout(GUARD, mock.wait_for_requests(before + SLOW))
        .await
        .unwrap();
    let pid = guard.id().unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for (s, t) in slow.into_iter().enumerate() {
        let got = tokio::time::timeout(GUARD, t).await.unwrap().unwrap();
        assert_eq!(
            got.unwrap(),
            format!("slow answer {s}"),
            "in-flight turn {s} finished\n{}",
            show_log()
        );
    }
    let child = guard.std_child_mut().unwrap();
    let status = tokio::time::timeout(GUARD, async {
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the gateway did not exit after SIGTERM\n{}", show_log()));
    assert!(status.success(), "exit status {status:?}\n{}", show_log());
    // Nothing accepts connections any more.
    assert!(
        c.get(format!("http://127.0.0.1:{api_port}/health"))
            .send()
            .await
            .is_err()
    );

    // Session files: every message answered in its own session, nothing mixed, nothing lost.
    let all = sessions(&home);
    for s in 0..SESSIONS {
        let msgs = &all[&format!("api:s{s}")];
        let users = texts(msgs, "user");
        let answers = texts(msgs, "assistant");
        assert_eq!(users.len(), 2, "session {s}: {msgs:?}");
        assert_eq!(answers.len(), 2, "session {s}: {msgs:?}");
        for (u, a) in users.iter().zip(&answers) {
            let k = if u.contains(&format!("<m-{s}-0>")) { 0 } else { 1 };
            assert!(
                u.contains(&format!("<m-{s}-{k}>")),
                "session {s} holds a foreign message: {u}"
            );
            assert_eq!(a, &format!("answer {s}/{k}"), "session {s}");
        }
    }
    for s in 0..SLOW {
        assert_eq!(
            texts(&all[&format!("api:slow{s}")], "assistant"),
            [format!("slow answer {s}")]
        );
    }
}
