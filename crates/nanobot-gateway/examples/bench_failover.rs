//! Failover under load for `benches/failover.sh` (issue 42): drives gateway replicas, kills one with `kill -9`
//! part-way, and prints one JSON line of what the clients saw.
//!
//! - `bench_failover api URL[,URL…] KEY CONCURRENCY SECONDS VICTIM_PID`: CONCURRENCY API clients, each its own
//!   session on URL `w mod n`, one request after another for SECONDS; the replica VICTIM_PID (the last URL) is
//!   killed after a third of the time. A request that fails is sent again to the next replica with the same
//!   `Idempotency-Key`, as a client of several replicas does. Reports the requests that were running on the
//!   victim (how long after the kill each was answered), throughput before and after, and requests never answered.
//! - `bench_failover ws PORT TOKEN CHATS SECONDS OPS_URL[,OPS_URL…] PID[,PID…]`: one websocket client with CHATS
//!   chats, each asking again as soon as it is answered, for SECONDS; the replica holding the websocket channel
//!   (found from the metrics at OPS_URL) is killed after a third of the time. The client reconnects (same port:
//!   the next holder listens there), attaches its chats again, sends the unanswered questions again (same
//!   `turn_id`: one the dead server had taken is recognised) and waits for the answers that were pending.
//!   Reports when it was connected again and when the last pending answer came, and every question answered
//!   twice or never.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// The longest anything is waited for.
const BOUND: Duration = Duration::from_secs(180);

#[tokio::main]
async fn main() -> Result<()> {
    nanobot_testkit::install_ring();
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("api") if args.len() == 7 => api(&args[2..]).await,
        Some("ws") if args.len() == 8 => websocket(&args[2..]).await,
        _ => bail!(
            "usage: bench_failover api URL[,URL…] KEY CONCURRENCY SECONDS VICTIM_PID\n       \
             bench_failover ws PORT TOKEN CHATS SECONDS OPS_URL[,OPS_URL…] PID[,PID…]"
        ),
    }
}

fn kill(pid: &str) -> Result<()> {
    let status = std::process::Command::new("kill").args(["-9", pid]).status()?;
    anyhow::ensure!(status.success(), "kill -9 {pid} failed");
    Ok(())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// One answered API request.
struct Answered {
    sent: Instant,
    done: Instant,
    /// It was sent to the victim first and answered elsewhere.
    moved: bool,
}

async fn api(args: &[String]) -> Result<()> {
    let urls: Vec<String> = args[0].split(',').map(str::to_owned).collect();
    let key = args[1].clone();
    let conc: usize = args[2].parse()?;
    let run = Duration::from_secs(args[3].parse()?);
    let victim = args[4].clone();
    let victim_url = urls.len() - 1;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(conc)
        .timeout(BOUND)
        .build()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..conc {
        let (client, urls, key) = (client.clone(), urls.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut lost = 0usize;
            let mut i = 0usize;
            while started.elapsed() < run {
                let body = json!({"session_id": format!("failover-{w}"),
                                  "messages": [{"role": "user", "content": format!("hi {i}")}]});
                let sent = Instant::now();
                let first = w % urls.len();
                let mut done = None;
                for attempt in 0..60 {
                    let url = &urls[(first + attempt) % urls.len()];
                    let ok = client
                        .post(url)
                        .bearer_auth(&key)
                        .header("Idempotency-Key", format!("failover-{w}-{i}"))
                        .json(&body)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        done = Some(Instant::now());
                        break;
                    }
                    // Not answered (the replica died, or the session's lease is still the dead one's): next.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                match done {
                    Some(done) => answered.push(Answered {
                        sent,
                        done,
                        moved: first == victim_url,
                    }),
                    None => lost += 1,
                }
                i += 1;
            }
            (answered, lost)
        }));
    }
    tokio::time::sleep(run / 3).await;
    let killed = Instant::now();
    kill(&victim)?;
    let mut all = Vec::new();
    let mut lost = 0;
    for t in tasks {
        let (a, l) = t.await?;
        all.extend(a);
        lost += l;
    }
    let ended = Instant::now();
    // Running on the victim when it died: sent there before the kill, answered after it.
    let mut cut: Vec<f64> = all
        .iter()
        .filter(|a| a.moved && a.sent < killed && a.done > killed)
        .map(|a| secs(a.done.duration_since(killed)))
        .collect();
    cut.sort_by(f64::total_cmp);
    let before = all.iter().filter(|a| a.done <= killed).count();
    let after = all.iter().filter(|a| a.sent >= killed).count();
    let mut later: Vec<f64> = all
        .iter()
        .filter(|a| a.sent >= killed)
        .map(|a| secs(a.done.duration_since(a.sent)))
        .collect();
    later.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "{}",
        json!({
            "bench": "failover_api",
            "replicas": urls.len(),
            "concurrency": conc,
            "answered": all.len(),
            "never_answered": lost,
            "rps_before": before as f64 / secs(killed.duration_since(started)),
            "rps_after": after as f64 / secs(ended.duration_since(killed)),
            "cut_requests": cut.len(),
            "cut_answered_after_s_p50": pct(&cut, 0.5),
            "cut_answered_after_s_max": cut.last().copied().unwrap_or(0.0),
            "after_kill_latency_s_p50": pct(&later, 0.5),
            "after_kill_latency_s_p99": pct(&later, 0.99),
        })
    );
    Ok(())
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(port: &str, token: &str) -> Result<Ws> {
    let url = format!("ws://127.0.0.1:{port}/?client_id=bench&token={token}");
    tokio::time::timeout(BOUND, async {
        loop {
            match tokio_tungstenite::connect_async(url.as_str()).await {
                Ok((ws, _)) => return ws,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .context("no replica took the websocket channel over")
}

/// The next event, `None` when the connection ended.
async fn event(ws: &mut Ws) -> Result<Option<Value>> {
    tokio::time::timeout(BOUND, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => return Ok(Some(serde_json::from_str(t.as_str())?)),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Ok(None),
            }
        }
    })
    .await
    .context("no websocket event")?
}

async fn send(ws: &mut Ws, v: Value) -> Result<()> {
    ws.send(Message::text(v.to_string())).await?;
    Ok(())
}

fn is_answer(ev: &Value) -> bool {
    (ev["event"] == "message" && ev.get("kind").is_none()) || ev["event"] == "stream_end"
}

/// The index of the replica whose metrics say it holds the websocket channel.
async fn holder(ops: &[String]) -> Result<usize> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    for (i, base) in ops.iter().enumerate() {
        let text = match client.get(format!("{base}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => continue,
        };
        if text.contains("nanobot_replica_role_held{role=\"channel.websocket\"} 1") {
            return Ok(i);
        }
    }
    bail!("no replica says it holds the websocket channel")
}

/// Asks the next question in chat `id`.
async fn ask(ws: &mut Ws, chats: &mut BTreeMap<String, Chat>, id: String) -> Result<()> {
    let chat = chats.entry(id.clone()).or_default();
    chat.asked += 1;
    chat.open_since = Some(Instant::now());
    send(ws, question(&id, chat.asked)).await
}

/// Question `n` of chat `id`, with a turn id of its own: sent again after a reconnect, it is recognised.
fn question(id: &str, n: usize) -> Value {
    json!({"type": "message", "chat_id": id, "content": format!("question {n}"), "turn_id": format!("q{n}")})
}

/// Per chat: questions asked, answers received (to an open question, and with none open: a repeat), and when
/// the open question was asked. A chat asks its next question only once the last one is answered.
#[derive(Default)]
struct Chat {
    asked: usize,
    answered: usize,
    repeats: usize,
    open_since: Option<Instant>,
}

async fn websocket(args: &[String]) -> Result<()> {
    let (port, token) = (&args[0], &args[1]);
    let chats_n: usize = args[2].parse()?;
    let run = Duration::from_secs(args[3].parse()?);
    let ops: Vec<String> = args[4].split(',').map(str::to_owned).collect();
    let pids: Vec<String> = args[5].split(',').map(str::to_owned).collect();
    let mut ws = connect(port, token).await?;
    let first = event(&mut ws).await?.context("no ready event")?;
    let mut ids = vec![
        first["chat_id"]
            .as_str()
            .context("ready without a chat")?
            .to_owned(),
    ];
    while ids.len() < chats_n {
        send(&mut ws, json!({"type": "new_chat"})).await?;
        loop {
            let ev = event(&mut ws).await?.context("closed while opening chats")?;
            if ev["event"] == "attached" {
                ids.push(
                    ev["chat_id"]
                        .as_str()
                        .context("attached without a chat")?
                        .to_owned(),
                );
                break;
            }
        }
    }
    let mut chats: BTreeMap<String, Chat> = ids.iter().map(|c| (c.clone(), Chat::default())).collect();
    for id in &ids {
        ask(&mut ws, &mut chats, id.clone()).await?;
    }
    let holder = holder(&ops).await?;
    let started = Instant::now();
    let kill_at = started + run / 3;
    let mut killed: Option<Instant> = None;
    let mut reconnected: Option<Instant> = None;
    let mut pending_at_kill: Vec<String> = Vec::new();
    let mut last_pending_answer: Option<Instant> = None;
    let mut latencies: Vec<f64> = Vec::new();
    loop {
        if killed.is_none() && Instant::now() >= kill_at {
            kill(&pids[holder])?;
            killed = Some(Instant::now());
            pending_at_kill = chats
                .iter()
                .filter(|(_, c)| c.open_since.is_some())
                .map(|(id, _)| id.clone())
                .collect();
        }
        let stop_asking = started.elapsed() >= run;
        if stop_asking && chats.values().all(|c| c.open_since.is_none()) {
            break;
        }
        let ev = match killed {
            None => {
                let wait = kill_at.saturating_duration_since(Instant::now());
                match tokio::time::timeout(wait, event(&mut ws)).await {
                    Ok(ev) => ev?,
                    Err(_) => continue,
                }
            }
            // What has not come within a minute (every chat waiting) is not coming.
            Some(_) => match tokio::time::timeout(Duration::from_secs(60), event(&mut ws)).await {
                Ok(ev) => ev?,
                Err(_) => break,
            },
        };
        let Some(ev) = ev else {
            // The holder died: connect to the next one (same port), attach every chat again.
            ws = connect(port, token).await?;
            event(&mut ws)
                .await?
                .context("no ready event after reconnecting")?;
            reconnected.get_or_insert_with(Instant::now);
            // Attach every chat; ask again what is unanswered (the dead server may not have taken it): the same
            // turn id, so a question it did take is not asked twice.
            for id in &ids {
                send(&mut ws, json!({"type": "attach", "chat_id": id})).await?;
                if let Some(chat) = chats.get(id)
                    && chat.open_since.is_some()
                {
                    send(&mut ws, question(id, chat.asked)).await?;
                }
            }
            continue;
        };
        if std::env::var_os("BENCH_DEBUG").is_some() && killed.is_some() {
            eprintln!("{:?} {ev}", killed.map(|k| k.elapsed()));
        }
        if !is_answer(&ev) {
            continue;
        }
        let id = ev["chat_id"].as_str().unwrap_or_default().to_owned();
        let Some(chat) = chats.get_mut(&id) else { continue };
        let Some(since) = chat.open_since.take() else {
            chat.repeats += 1;
            continue;
        };
        chat.answered += 1;
        {
            latencies.push(secs(since.elapsed()));
            if killed.is_some() && pending_at_kill.contains(&id) {
                pending_at_kill.retain(|c| *c != id);
                if pending_at_kill.is_empty() {
                    last_pending_answer = Some(Instant::now());
                }
            }
        }
        if !stop_asking {
            ask(&mut ws, &mut chats, id).await?;
        }
    }
    let killed = killed.context("the run ended before the kill")?;
    for (id, c) in &chats {
        if c.asked != c.answered || c.repeats > 0 {
            eprintln!(
                "chat {id}: asked {}, answered {}, repeated {}",
                c.asked, c.answered, c.repeats
            );
        }
    }
    let asked: usize = chats.values().map(|c| c.asked).sum();
    let answered: usize = chats.values().map(|c| c.answered).sum();
    let twice: usize = chats.values().map(|c| c.repeats).sum();
    latencies.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({
            "bench": "failover_ws",
            "replicas": ops.len(),
            "chats": chats_n,
            "asked": asked,
            "answered": answered,
            "answered_twice": twice,
            "never_answered": asked - answered,
            "reconnected_after_s": reconnected.map(|r| secs(r.duration_since(killed))),
            "pending_at_kill_answered_after_s": last_pending_answer.map(|l| secs(l.duration_since(killed))),
            "latency_s_max": latencies.last().copied().unwrap_or(0.0),
        })
    );
    Ok(())
}
