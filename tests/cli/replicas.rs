//! Three `nanobot gateway` processes on one home and one real `nats-server` (`gateway.bus.kind: nats`): API
//! requests spread over them with one killed (`kill -9`) in the middle, and a Telegram chat whose replica is
//! killed. Every request gets one answer, every session's history is whole, in order and without duplicates, and
//! the chat goes on. Then two processes with separate homes sharing only the server (`store: jetstream`, its
//! files sealed with the deployment key), and the websocket channel's holder killed mid-turn, and killed while it
//! holds an answer for a client that is away.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use nanobot_testkit::nats::NatsServer;
use nanobot_testkit::peers::{free_port, wait_for_http};
use nanobot_testkit::telegram_emulator::Emulator;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::support::{nanobot, onboarded};

const KEY: &str = "sk-replicas-test";
const TOKEN: &str = "123456:REPLICAS-process";
const ALICE: i64 = 4242;
/// Bound on anything awaited.
const GUARD: Duration = Duration::from_secs(120);
const SESSIONS: usize = 100;
/// The replicas' deployment key (`gateway.bus.nats.key`, given as `${NANOBOT_BUS_KEY}`).
const BUS_KEY: &str = "the replicas' shared deployment key, 32+ characters";
const PER_SESSION: usize = 10;

/// One gateway process; killed (SIGKILL) when dropped.
struct Replica {
    name: String,
    child: Option<Child>,
    api: u16,
    ops: u16,
    log: PathBuf,
}

impl Replica {
    fn start(home: &TempHome, base: &Value, name: &str) -> Result<Self> {
        let (api, ops) = (free_port()?, free_port()?);
        let mut config = base.clone();
        config["gateway"]["port"] = ops.into();
        config["api"]["port"] = api.into();
        config["gateway"]["bus"]["nats"]["replica"] = name.into();
        // Its own config file beside the others: one data directory, so one set of sessions (a shared volume).
        let dir = home.config_path().parent().context("config dir")?.to_owned();
        let path = dir.join(format!("config-{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
        let log = dir.join(format!("{name}.log"));
        let child = nanobot(home.home())
            .env("NANOBOT_LOG", "info")
            .env("NANOBOT_BUS_KEY", BUS_KEY)
            .args(["gateway", "--api", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            api,
            ops,
            log,
        })
    }

    async fn ready(&self) -> Result<()> {
        let status = wait_for_http(&format!("http://127.0.0.1:{}/health", self.ops), GUARD).await;
        if status.ok() != Some(200) {
            bail!("{} did not come up: {}", self.name, self.log_text());
        }
        Ok(())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`: no shutdown, no lease released, turns cut wherever they are.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn metrics(&self, client: &reqwest::Client) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.ops);
        match client.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Whether its metrics say it holds `channel`.
    async fn holds(&self, client: &reqwest::Client, channel: &str) -> bool {
        self.metrics(client).await.contains(&format!(
            "nanobot_replica_role_held{{role=\"channel.{channel}\"}} 1"
        ))
    }

    /// `nanobot_session_lease_waits_total`: the API requests that found their session's lease held by another
    /// replica.
    async fn session_lease_waits(&self, client: &reqwest::Client) -> Result<u64> {
        let text = self.metrics(client).await;
        let line = text
            .lines()
            .find(|l| l.starts_with("nanobot_session_lease_waits_total "))
            .with_context(|| format!("{} reports no session lease waits: {text}", self.name))?;
        Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The replica holding `channel`.
async fn holder(replicas: &[Replica], client: &reqwest::Client, channel: &str) -> Result<usize> {
    for (i, r) in replicas.iter().enumerate() {
        if r.holds(client, channel).await {
            return Ok(i);
        }
    }
    bail!("no replica says it holds {channel}")
}

fn base_config(home: &TempHome, nats: &NatsServer, emu: &Emulator) -> Result<Value> {
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(home.config_path())?)?;
    config["api"]["host"] = "127.0.0.1".into();
    config["api"]["apiKey"] = KEY.into();
    config["api"]["timeout"] = 60.into();
    config["gateway"]["host"] = "127.0.0.1".into();
    config["gateway"]["heartbeat"] = json!({"enabled": false});
    // Sealed with a deployment key (from the environment, as a user would give it): the load and the kill below
    // run on sealed messages and lease records.
    config["gateway"]["bus"] = json!({"kind": "nats", "nats": {
        "url": nats.url(), "leaseTimeS": 2, "ackWaitS": 3, "partitions": 8, "key": "${NANOBOT_BUS_KEY}"
    }});
    config["channels"]["telegram"] = json!({
        "enabled": true, "token": TOKEN, "baseUrl": emu.api_url, "allowFrom": [ALICE.to_string()]
    });
    config["tools"]["exec"] = json!({"enable": false});
    Ok(config)
}

/// Sends request `i` of `session`, retrying on another replica (same `Idempotency-Key`) whenever one fails to
/// answer (killed, or its session lease still held by a replica that died). The answer's text.
async fn ask(client: &reqwest::Client, ports: &[u16], session: usize, i: usize) -> Result<String> {
    let body = json!({
        "messages": [{"role": "user", "content": format!("s{session} m{i}")}],
        "session_id": format!("load-{session}"),
    });
    let mut last = String::new();
    for attempt in 0..40 {
        let port = ports[(session + i + attempt) % ports.len()];
        let sent = client
            .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("Idempotency-Key", format!("load-{session}-{i}"))
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().await?;
                return Ok(v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned());
            }
            Ok(r) => last = format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        // A replica that died holds its session leases until they run out (2 s).
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("request s{session} m{i} never answered: {last}")
}

/// The sessions in the home's data directory: key → its messages (JSONL lines after the metadata).
fn sessions(dir: &Path) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.join("sessions")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let mut key = String::new();
                let mut messages = Vec::new();
                for line in text.lines() {
                    let Ok(v) = serde_json::from_str::<Value>(line) else {
                        continue;
                    };
                    if v["_type"] == "metadata" {
                        key = v["key"].as_str().unwrap_or_default().to_owned();
                    } else if v.get("_type").is_none() {
                        messages.push(v);
                    }
                }
                out.insert(key, messages);
            }
        }
    }
    out
}

/// Waits until the bot has sent Alice `expected`.
/// Every session `api:load-<s>` holds its questions once each, in order, with one answer per question.
fn assert_sessions_whole(
    all: &BTreeMap<String, Vec<Value>>,
    sessions: usize,
    per_session: usize,
) -> Result<()> {
    for s in 0..sessions {
        let messages = all
            .get(&format!("api:load-{s}"))
            .with_context(|| format!("session {s} missing"))?;
        let users: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect();
        let expected: Vec<String> = (0..per_session).map(|i| format!("s{s} m{i}")).collect();
        assert_eq!(users, expected, "session {s}: every question once, in order");
        let answers = messages
            .iter()
            .filter(|m| m["role"] == "assistant" && m["content"] == "ok")
            .count();
        assert_eq!(
            answers, per_session,
            "session {s}: one answer per question: {messages:?}"
        );
    }
    Ok(())
}

async fn replied(emu: &mut Emulator, expected: &str) -> Result<()> {
    emu.wait_for_text(ALICE, expected, GUARD).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_answer_every_request_once_and_survive_a_kill() -> Result<()> {
    nanobot_testkit::install_ring();
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let mock = MockLlm::start_background();
    // A model that takes a little while, so the kill lands in the middle of turns.
    mock.set_fallback(MockReply::text("ok").delay(Duration::from_millis(30)));
    mock.when_last_user_contains("tg one", MockReply::text("telegram one"));
    mock.when_last_user_contains("tg two", MockReply::text("telegram two"));
    let home = onboarded(&mock);
    let base = base_config(&home, &nats, &emu)?;
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        replicas.push(Replica::start(&home, &base, name)?);
    }
    for r in &replicas {
        r.ready().await?;
    }
    let client = reqwest::Client::new();

    // Telegram: answered by whichever replica holds the channel.
    emu.wait_until_polling().await?;
    emu.user_says(TOKEN, ALICE, "alice", "tg one").await?;
    replied(&mut emu, "telegram one").await?;
    let holder = holder(&replicas, &client, "telegram").await?;

    // The load: 100 sessions × 10 requests over the three replicas, sessions in parallel.
    let ports: Arc<Vec<u16>> = Arc::new(replicas.iter().map(|r| r.api).collect());
    // How many requests have been answered so far.
    let (done, mut answered) = tokio::sync::watch::channel(0usize);
    let done = Arc::new(done);
    let load = {
        let (client, ports, done) = (client.clone(), ports.clone(), done.clone());
        tokio::spawn(async move {
            futures::stream::iter(0..SESSIONS)
                .map(|s| {
                    let (client, ports, done) = (client.clone(), ports.clone(), done.clone());
                    async move {
                        let mut answers = Vec::new();
                        for i in 0..PER_SESSION {
                            answers.push(ask(&client, &ports, s, i).await?);
                            done.send_modify(|n| *n += 1);
                        }
                        Ok::<_, anyhow::Error>(answers)
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        })
    };
    // A third of the way in, the replica holding Telegram is killed.
    tokio::time::timeout(GUARD, answered.wait_for(|n| *n >= SESSIONS * PER_SESSION / 3))
        .await
        .context("the load did not get going")??;
    // Until then nothing died: each session's requests, one after another on alternating replicas, found the
    // lease its previous request had let go, and none waited.
    let mut waits = 0;
    for r in &replicas {
        waits += r.session_lease_waits(&client).await?;
    }
    assert_eq!(waits, 0, "requests waited on a session lease already let go");
    replicas[holder].kill();
    let results = tokio::time::timeout(GUARD * 3, load)
        .await
        .context("the load did not finish")??;
    for r in results {
        assert!(r?.iter().all(|a| a == "ok"));
    }

    // Every session whole, in order, each question once with one answer after it.
    let data = home.config_path().parent().context("data dir")?.to_owned();
    let all = sessions(&data);
    assert_sessions_whole(&all, SESSIONS, PER_SESSION)?;

    // The chat goes on: another replica took Telegram over.
    emu.user_says(TOKEN, ALICE, "alice", "tg two").await?;
    replied(&mut emu, "telegram two").await?;
    let mut holders = 0;
    for r in replicas.iter().filter(|r| r.child.is_some()) {
        if r.holds(&client, "telegram").await {
            holders += 1;
        }
    }
    assert_eq!(holders, 1, "one surviving replica holds Telegram");
    Ok(())
}

/// `gateway.bus.nats.store: jetstream`: two `nanobot gateway` processes with separate homes (two machines) share
/// only the NATS server. API requests alternate between them, one is killed (`kill -9`) in the middle, and what
/// the server holds, exported into a third home, is every session whole, in order, without duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_separate_homes_share_only_nats() -> Result<()> {
    const SESSIONS: usize = 12;
    const PER_SESSION: usize = 6;
    nanobot_testkit::install_ring();
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("ok").delay(Duration::from_millis(30)));
    let homes = [onboarded(&mock), onboarded(&mock)];
    let mut replicas = Vec::new();
    for (home, name) in homes.iter().zip(["a", "b"]) {
        let mut config: Value = serde_json::from_str(&std::fs::read_to_string(home.config_path())?)?;
        config["api"]["host"] = "127.0.0.1".into();
        config["api"]["apiKey"] = KEY.into();
        config["api"]["timeout"] = 60.into();
        config["gateway"]["host"] = "127.0.0.1".into();
        config["gateway"]["heartbeat"] = json!({"enabled": false});
        config["gateway"]["bus"] = json!({"kind": "nats", "nats": {
            "url": nats.url(), "leaseTimeS": 2, "ackWaitS": 3, "partitions": 4, "store": "jetstream",
            "key": "${NANOBOT_BUS_KEY}"
        }});
        config["tools"]["exec"] = json!({"enable": false});
        replicas.push(Replica::start(home, &config, name)?);
    }
    for r in &replicas {
        r.ready().await?;
    }
    let client = reqwest::Client::new();
    let ports: Arc<Vec<u16>> = Arc::new(replicas.iter().map(|r| r.api).collect());
    let (done, mut answered) = tokio::sync::watch::channel(0usize);
    let done = Arc::new(done);
    let load = {
        let (client, ports, done) = (client.clone(), ports.clone(), done.clone());
        tokio::spawn(async move {
            futures::stream::iter(0..SESSIONS)
                .map(|s| {
                    let (client, ports, done) = (client.clone(), ports.clone(), done.clone());
                    async move {
                        for i in 0..PER_SESSION {
                            // Request i of a session goes to replica (s + i) % 2: every session moves between
                            // the two homes at each turn.
                            let answer = ask(&client, &ports, s, i).await?;
                            anyhow::ensure!(answer == "ok", "s{s} m{i}: {answer}");
                            done.send_modify(|n| *n += 1);
                        }
                        Ok::<_, anyhow::Error>(())
                    }
                })
                .buffer_unordered(6)
                .collect::<Vec<_>>()
                .await
        })
    };
    tokio::time::timeout(GUARD, answered.wait_for(|n| *n >= SESSIONS * PER_SESSION / 3))
        .await
        .context("the load did not get going")??;
    replicas[1].kill();
    let results = tokio::time::timeout(GUARD * 2, load)
        .await
        .context("the load did not finish")??;
    for r in results {
        r?;
    }

    // What the server holds, written into a third home.
    let third = onboarded(&mock);
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(third.config_path())?)?;
    // Sealed (the replicas' key): the export can read it only with the key.
    config["gateway"]["bus"] = json!({"kind": "nats", "nats": {
        "url": nats.url(), "store": "jetstream", "key": BUS_KEY
    }});
    third.write_config(&config);
    let o = tokio::task::spawn_blocking({
        let h = third.home().to_owned();
        move || crate::support::run(&h, &["store", "export"])
    })
    .await?;
    anyhow::ensure!(o.status.success(), "{}", crate::support::stderr(&o));
    let data = third.config_path().parent().context("data dir")?.to_owned();
    let all = sessions(&data);
    assert_sessions_whole(&all, SESSIONS, PER_SESSION)?;
    Ok(())
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects to the websocket channel, as a client whose server went away would: again until a replica serves it.
async fn ws_connect(port: u16) -> Result<Ws> {
    let url = format!("ws://127.0.0.1:{port}/?client_id=tester&token=ws-token");
    tokio::time::timeout(GUARD, async {
        loop {
            match tokio_tungstenite::connect_async(url.as_str()).await {
                Ok((ws, _)) => return ws,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .context("no replica took the websocket channel over")
}

/// The next event from the server (pings and other frames skipped, all within one bound).
async fn ws_event(ws: &mut Ws) -> Result<Value> {
    use tokio_tungstenite::tungstenite::Message;
    tokio::time::timeout(GUARD, async {
        loop {
            let frame = ws.next().await.context("the websocket closed")??;
            if let Message::Text(t) = frame {
                return Ok(serde_json::from_str(t.as_str())?);
            }
        }
    })
    .await
    .context("no websocket event")?
}

async fn ws_send(ws: &mut Ws, v: Value) -> Result<()> {
    use futures::SinkExt as _;
    ws.send(tokio_tungstenite::tungstenite::Message::text(v.to_string()))
        .await?;
    Ok(())
}

/// The answers (`message` without a kind, or `stream_end`) by chat, read until `chat` gets `until`.
async fn ws_answers_until(ws: &mut Ws, chat: &str, until: &str) -> Result<BTreeMap<String, Vec<String>>> {
    let mut answers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    loop {
        let ev = ws_event(ws).await?;
        let is_answer = (ev["event"] == "message" && ev.get("kind").is_none()) || ev["event"] == "stream_end";
        if !is_answer {
            continue;
        }
        let (c, text) = (
            ev["chat_id"].as_str().unwrap_or_default().to_owned(),
            ev["text"].as_str().unwrap_or_default().to_owned(),
        );
        let done = c == chat && text == until;
        answers.entry(c).or_default().push(text);
        if done {
            return Ok(answers);
        }
    }
}

/// Issue 42: the replica holding the websocket channel is killed (`kill -9`) while three chats' turns run. The
/// client reconnects to whichever replica took the channel over and attaches its chats again: each question
/// is stored once and each answer reaches it once, whether its turn ran on the dead replica (delivered again
/// and resumed elsewhere) or on the survivor (answered while no replica held the channel, or before the client
/// was back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_channel_fails_over_without_repeats() -> Result<()> {
    nanobot_testkit::install_ring();
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(emu) = Emulator::start().await? else {
        return Ok(());
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("ok"));
    for n in 1..=3 {
        mock.when_last_user_contains(
            format!("ws slow {n}"),
            MockReply::text(format!("slow answer {n}")).delay(Duration::from_secs(3)),
        );
    }
    mock.when_last_user_contains("ws hello", MockReply::text("hello answer"));
    mock.when_last_user_contains("ws after", MockReply::text("after answer"));
    let home = onboarded(&mock);
    let (mut replicas, port) = websocket_replicas(&home, &nats, &emu).await?;
    let client = reqwest::Client::new();

    // Three chats, answered before anything dies: one answer per question.
    let mut ws = ws_connect(port).await?;
    let mut chats = vec![
        ws_event(&mut ws).await?["chat_id"]
            .as_str()
            .context("ready")?
            .to_owned(),
    ];
    for _ in 0..2 {
        ws_send(&mut ws, json!({"type": "new_chat"})).await?;
        let ev = ws_event(&mut ws).await?;
        chats.push(ev["chat_id"].as_str().context("attached")?.to_owned());
    }
    ws_send(
        &mut ws,
        json!({"type": "message", "chat_id": chats[0], "content": "ws hello"}),
    )
    .await?;
    ws_send(
        &mut ws,
        json!({"type": "message", "chat_id": chats[0], "content": "ws after"}),
    )
    .await?;
    let answers = ws_answers_until(&mut ws, &chats[0], "after answer").await?;
    assert_eq!(answers[&chats[0]], ["hello answer", "after answer"]);
    let holder = holder(&replicas, &client, "websocket").await?;

    // Three slow turns running (on either replica) when the channel's holder dies.
    let before = mock.request_count();
    for (n, chat) in chats.iter().enumerate() {
        let text = format!("ws slow {}", n + 1);
        ws_send(
            &mut ws,
            json!({"type": "message", "chat_id": chat, "content": text}),
        )
        .await?;
    }
    // All three are running (the model was asked for each; other calls, a title say, may come in between).
    tokio::time::timeout(GUARD, async {
        let mut n = before + 1;
        loop {
            let requests = mock.wait_for_requests(n).await;
            let running = (1..=3)
                .filter(|k| {
                    let asked = format!("ws slow {k}");
                    requests[before..]
                        .iter()
                        .any(|r| r.last_user_text().is_some_and(|t| t.contains(&asked)))
                })
                .count();
            if running == 3 {
                return;
            }
            n = requests.len() + 1;
        }
    })
    .await
    .context("the slow turns did not start")?;
    replicas[holder].kill();
    // What reached the client before its server died counts (a turn may have finished by then).
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    tokio::time::timeout(GUARD, async {
        while let Some(Ok(frame)) = ws.next().await {
            let tokio_tungstenite::tungstenite::Message::Text(t) = frame else {
                continue;
            };
            let ev: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
            if ev["event"] == "stream_end" || (ev["event"] == "message" && ev.get("kind").is_none()) {
                got.entry(ev["chat_id"].as_str().unwrap_or_default().to_owned())
                    .or_default()
                    .push(ev["text"].as_str().unwrap_or_default().to_owned());
            }
        }
    })
    .await
    .context("the killed replica's connection did not close")?;

    // Back on the survivor: each chat attached again, each answer once.
    let mut ws = ws_connect(port).await?;
    ws_event(&mut ws).await?;
    for chat in &chats {
        ws_send(&mut ws, json!({"type": "attach", "chat_id": chat})).await?;
    }
    while (1..=3).any(|n| {
        !got.get(&chats[n - 1])
            .is_some_and(|a| a.contains(&format!("slow answer {n}")))
    }) {
        let ev = match ws_event(&mut ws).await {
            Ok(ev) => ev,
            Err(e) => bail!(
                "{e:#}; answers so far: {got:?}; the survivor's log:\n{}\nthe killed one's:\n{}",
                replicas[1 - holder].log_text(),
                replicas[holder].log_text()
            ),
        };
        match ev["event"].as_str() {
            Some("error") => bail!("the survivor refused the chat: {ev}"),
            Some("message") if ev.get("kind").is_none() => {}
            Some("stream_end") => {}
            _ => continue,
        }
        got.entry(ev["chat_id"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(ev["text"].as_str().unwrap_or_default().to_owned());
    }
    // Anything repeated would come before the answer to a question asked now.
    ws_send(
        &mut ws,
        json!({"type": "message", "chat_id": chats[0], "content": "ws after"}),
    )
    .await?;
    for (chat, answers) in ws_answers_until(&mut ws, &chats[0], "after answer").await? {
        got.entry(chat).or_default().extend(answers);
    }
    for (n, chat) in chats.iter().enumerate() {
        let mut expected = vec![format!("slow answer {}", n + 1)];
        if n == 0 {
            expected.push("after answer".to_owned());
        }
        assert_eq!(
            got.get(chat),
            Some(&expected),
            "chat {n}: each answer once: {got:?}"
        );
    }

    // Stored once: each question once, each answer once.
    let data = home.config_path().parent().context("data dir")?.to_owned();
    let all = sessions(&data);
    for (n, chat) in chats.iter().enumerate() {
        let messages = all
            .get(&format!("websocket:{chat}"))
            .with_context(|| format!("chat {n} has no session"))?;
        let count = |role: &str, text: &str| {
            messages
                .iter()
                .filter(|m| m["role"] == role && m["content"].as_str().is_some_and(|c| c.contains(text)))
                .count()
        };
        let (q, a) = (format!("ws slow {}", n + 1), format!("slow answer {}", n + 1));
        assert_eq!(
            (count("user", &q), count("assistant", &a)),
            (1, 1),
            "chat {n}: {messages:?}"
        );
    }
    Ok(())
}

/// Two replicas on `home` whose one channel is the websocket (on the port returned), both ready.
async fn websocket_replicas(
    home: &TempHome,
    nats: &NatsServer,
    emu: &Emulator,
) -> Result<(Vec<Replica>, u16)> {
    let mut base = base_config(home, nats, emu)?;
    base["channels"]["telegram"]["enabled"] = false.into();
    let port = free_port()?;
    base["channels"]["websocket"] = json!({
        "enabled": true, "host": "127.0.0.1", "port": port, "token": "ws-token"
    });
    let replicas = vec![
        Replica::start(home, &base, "a")?,
        Replica::start(home, &base, "b")?,
    ];
    for r in &replicas {
        r.ready().await?;
    }
    Ok((replicas, port))
}

/// The outbound messages of `channel` taken by its holder and not yet acknowledged (sent), and those waiting.
async fn outbound_in_flight(nats: &NatsServer, channel: &str) -> Result<(usize, u64)> {
    let js = async_nats::jetstream::new(nats.client().await?);
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream("NANOBOT_OUT")
        .await?
        .get_consumer(&format!("NANOBOT-out-{channel}"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let info = consumer.info().await?;
    Ok((info.num_ack_pending, info.num_pending))
}

/// Issue 42: an answer that came while its client was away is held by the channel's holder; when that holder
/// dies, the answer goes to the next holder, which gives it to the client when it is back, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_held_for_an_absent_client_survives_the_death_of_its_holder() -> Result<()> {
    nanobot_testkit::install_ring();
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(emu) = Emulator::start().await? else {
        return Ok(());
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("ok"));
    mock.when_last_user_contains(
        "ws away",
        MockReply::text("answer while away").delay(Duration::from_secs(1)),
    );
    mock.when_last_user_contains("ws back", MockReply::text("back answer"));
    let home = onboarded(&mock);
    let (mut replicas, port) = websocket_replicas(&home, &nats, &emu).await?;
    let client = reqwest::Client::new();
    let mut ws = ws_connect(port).await?;
    let chat = ws_event(&mut ws).await?["chat_id"]
        .as_str()
        .context("ready")?
        .to_owned();
    let holder = holder(&replicas, &client, "websocket").await?;
    ws_send(
        &mut ws,
        json!({"type": "message", "chat_id": chat, "content": "ws away"}),
    )
    .await?;
    // The client goes away while the model answers.
    drop(ws);
    // The answer is stored, taken by the holder and held there (taken, not acknowledged), when the holder dies.
    tokio::time::timeout(GUARD, async {
        loop {
            if outbound_in_flight(&nats, "websocket").await.ok() == Some((1, 0)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .context("the answer was never held by the channel's holder")?;
    replicas[holder].kill();

    // Back, on the survivor: the held answer (once the dead holder's time to send it is out), once; then what
    // comes next, and nothing repeated before it.
    let mut ws = ws_connect(port).await?;
    ws_event(&mut ws).await?;
    ws_send(&mut ws, json!({"type": "attach", "chat_id": chat})).await?;
    let mut answers = match ws_answers_until(&mut ws, &chat, "answer while away").await {
        Ok(a) => a,
        Err(e) => bail!("{e:#}; the survivor's log:\n{}", replicas[1 - holder].log_text()),
    };
    ws_send(
        &mut ws,
        json!({"type": "message", "chat_id": chat, "content": "ws back"}),
    )
    .await?;
    for (c, more) in ws_answers_until(&mut ws, &chat, "back answer").await? {
        answers.entry(c).or_default().extend(more);
    }
    assert_eq!(answers[&chat], ["answer while away", "back answer"]);
    Ok(())
}
