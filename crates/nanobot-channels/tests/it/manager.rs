//! ChannelManager: dispatch, filtering, retries, supervision and the watchdog, against scripted channels.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ChannelState, Heartbeat, ManagerSettings, MediaRoots, RetryPolicy,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy)]
enum RunMode {
    /// Publish one inbound message, then wait for cancellation, beating the heartbeat never.
    Idle,
    /// Fail immediately with a transient error.
    Fail,
    /// Fail with a configuration error.
    BadConfig,
}

struct Fake {
    name: &'static str,
    mode: RunMode,
    streaming: bool,
    heartbeat: Option<Heartbeat>,
    /// Transient send failures still to produce.
    fail_sends: AtomicU32,
    runs: mpsc::UnboundedSender<Instant>,
    sends: mpsc::UnboundedSender<(Instant, Result<OutboundMessage, String>)>,
}

#[async_trait]
impl Channel for Fake {
    fn name(&self) -> &str {
        self.name
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let _ = self.runs.send(Instant::now());
        match self.mode {
            RunMode::Idle => {
                bus.publish_inbound(InboundMessage::new(self.name, "u", "c", "hello"))
                    .await?;
                cancel.cancelled().await;
                Ok(())
            }
            RunMode::Fail => Err(ChannelError::Transient {
                channel: self.name.into(),
                source: "connection reset".into(),
            }),
            RunMode::BadConfig => Err(ChannelError::Config {
                channel: self.name.into(),
                message: "token is empty".into(),
            }),
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let failing = self.fail_sends.load(Ordering::SeqCst);
        if failing > 0 {
            self.fail_sends.store(failing - 1, Ordering::SeqCst);
            let _ = self.sends.send((Instant::now(), Err("failed".into())));
            return Err(ChannelError::Transient {
                channel: self.name.into(),
                source: "503".into(),
            });
        }
        let _ = self.sends.send((Instant::now(), Ok(msg.clone())));
        Ok(())
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        self.heartbeat.clone()
    }

    fn supports_streaming(&self) -> bool {
        self.streaming
    }
}

struct Probe {
    runs: mpsc::UnboundedReceiver<Instant>,
    sends: mpsc::UnboundedReceiver<(Instant, Result<OutboundMessage, String>)>,
}

fn fake(name: &'static str, mode: RunMode) -> (Fake, Probe) {
    let (runs_tx, runs) = mpsc::unbounded_channel();
    let (sends_tx, sends) = mpsc::unbounded_channel();
    let channel = Fake {
        name,
        mode,
        streaming: false,
        heartbeat: None,
        fail_sends: AtomicU32::new(0),
        runs: runs_tx,
        sends: sends_tx,
    };
    (channel, Probe { runs, sends })
}

fn msg(channel: &str, kind: OutboundKind, text: &str) -> OutboundMessage {
    OutboundMessage::of_kind(kind, channel, "c", text)
}

#[tokio::test(start_paused = true)]
async fn routes_by_name_and_filters_progress_and_streams() {
    let (a, mut pa) = fake("alpha", RunMode::Idle);
    let (mut b, mut pb) = fake("beta", RunMode::Idle);
    b.streaming = true;
    let mut manager = ChannelManager::new(ManagerSettings::new(false, true, 3));
    manager.add(Arc::new(a));
    manager.add(Arc::new(b));
    let bus = Arc::new(InProcessBus::new(64));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));

    // Both channels run and their inbound messages reach the bus.
    pa.runs.recv().await.unwrap();
    pb.runs.recv().await.unwrap();
    let mut inbound = vec![
        bus.consume_inbound().await.unwrap().channel,
        bus.consume_inbound().await.unwrap().channel,
    ];
    inbound.sort();
    assert_eq!(inbound, ["alpha", "beta"]);

    let sid = || "s1".to_string();
    for m in [
        msg("alpha", OutboundKind::Progress, "thinking"), // sendProgress=false: dropped
        msg("alpha", OutboundKind::ToolHint, "web_search(\"x\")"),
        msg("alpha", OutboundKind::StreamDelta { stream_id: sid() }, "par"), // alpha cannot stream: dropped
        msg(
            "alpha",
            OutboundKind::StreamEnd { stream_id: sid() },
            "partial answer",
        ), // → reply
        msg("nowhere", OutboundKind::Reply, "lost"),
        msg("beta", OutboundKind::StreamDelta { stream_id: sid() }, "par"),
        msg(
            "beta",
            OutboundKind::StreamEnd { stream_id: sid() },
            "partial answer",
        ),
        msg("alpha", OutboundKind::Reply, "done"),
    ] {
        bus.publish_outbound(m).await.unwrap();
    }
    let mut got_a = Vec::new();
    for _ in 0..3 {
        let m = pa.sends.recv().await.unwrap().1.unwrap();
        got_a.push((m.kind, m.content));
    }
    assert_eq!(
        got_a,
        [
            (OutboundKind::ToolHint, "web_search(\"x\")".to_string()),
            (OutboundKind::Reply, "partial answer".to_string()),
            (OutboundKind::Reply, "done".to_string()),
        ]
    );
    let b1 = pb.sends.recv().await.unwrap().1.unwrap();
    let b2 = pb.sends.recv().await.unwrap().1.unwrap();
    assert!(matches!(b1.kind, OutboundKind::StreamDelta { .. }));
    assert!(matches!(b2.kind, OutboundKind::StreamEnd { .. }));

    cancel.cancel();
    task.await.unwrap();
    assert!(
        pa.sends.try_recv().is_err(),
        "nothing else was delivered to alpha"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_transient_failures_after_1_2_4_seconds() {
    let (a, mut pa) = fake("alpha", RunMode::Idle);
    a.fail_sends.store(3, Ordering::SeqCst);
    let mut manager = ChannelManager::new(ManagerSettings::new(true, true, 3));
    manager.add(Arc::new(a));
    let health = manager.health();
    let bus = Arc::new(InProcessBus::new(8));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
    bus.publish_outbound(msg("alpha", OutboundKind::Reply, "hi"))
        .await
        .unwrap();

    let mut times = Vec::new();
    for _ in 0..4 {
        let (at, result) = pa.sends.recv().await.unwrap();
        times.push((at, result.is_ok()));
    }
    let gaps: Vec<u64> = times.windows(2).map(|w| (w[1].0 - w[0].0).as_secs()).collect();
    assert_eq!(gaps, [1, 2, 4]);
    assert_eq!(
        times.iter().map(|t| t.1).collect::<Vec<_>>(),
        [false, false, false, true]
    );

    cancel.cancel();
    task.await.unwrap();
    let h = health.get("alpha").unwrap();
    assert_eq!((h.sent, h.send_failures), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_send_max_retries() {
    let (a, mut pa) = fake("alpha", RunMode::Idle);
    a.fail_sends.store(10, Ordering::SeqCst);
    let mut settings = ManagerSettings::new(true, true, 1);
    settings.retry = RetryPolicy {
        max_retries: 1,
        delays: vec![Duration::from_millis(5)],
    };
    let mut manager = ChannelManager::new(settings);
    manager.add(Arc::new(a));
    let health = manager.health();
    let bus = Arc::new(InProcessBus::new(8));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
    bus.publish_outbound(msg("alpha", OutboundKind::Reply, "one"))
        .await
        .unwrap();
    bus.close();
    // The manager drains the queue and returns once the bus is closed.
    task.await.unwrap();
    let mut attempts = 0;
    while pa.sends.try_recv().is_ok() {
        attempts += 1;
    }
    assert_eq!(attempts, 2, "first attempt + 1 retry");
    let h = health.get("alpha").unwrap();
    assert_eq!((h.sent, h.send_failures), (0, 1));
    assert!(h.last_error.unwrap().contains("503"));
    assert_eq!(h.state, ChannelState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn failing_channel_is_restarted_with_doubling_backoff() {
    let (a, mut pa) = fake("alpha", RunMode::Fail);
    let mut manager = ChannelManager::new(ManagerSettings::default());
    manager.add(Arc::new(a));
    let health = manager.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(Arc::new(InProcessBus::new(8)), cancel.clone()));
    let mut starts = Vec::new();
    for _ in 0..5 {
        starts.push(pa.runs.recv().await.unwrap());
    }
    let gaps: Vec<u64> = starts.windows(2).map(|w| (w[1] - w[0]).as_secs()).collect();
    assert_eq!(gaps, [1, 2, 4, 8]);
    let h = health.get("alpha").unwrap();
    assert!(h.restarts >= 4);
    assert!(h.last_error.unwrap().contains("connection reset"));
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(health.get("alpha").unwrap().state, ChannelState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn configuration_errors_are_not_restarted() {
    let (a, mut pa) = fake("alpha", RunMode::BadConfig);
    let mut manager = ChannelManager::new(ManagerSettings::default());
    manager.add(Arc::new(a));
    let health = manager.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(Arc::new(InProcessBus::new(8)), cancel.clone()));
    pa.runs.recv().await.unwrap();
    // Long after any backoff would have elapsed, there was no second run.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(pa.runs.try_recv().is_err());
    let h = health.get("alpha").unwrap();
    assert_eq!(h.state, ChannelState::Failed);
    assert!(h.last_error.unwrap().contains("token is empty"));
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn watchdog_restarts_a_stalled_receive_loop() {
    let (mut a, mut pa) = fake("alpha", RunMode::Idle);
    let heartbeat = Heartbeat::new();
    a.heartbeat = Some(heartbeat.clone());
    let mut settings = ManagerSettings::default();
    settings.supervisor.stall_timeout = Duration::from_secs(30);
    settings.supervisor.watchdog_interval = Duration::from_secs(5);
    let mut manager = ChannelManager::new(settings);
    manager.add(Arc::new(a));
    let health = manager.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(Arc::new(InProcessBus::new(8)), cancel.clone()));
    let first = pa.runs.recv().await.unwrap();

    // While the heartbeat moves, the channel is left alone.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        heartbeat.beat();
    }
    assert!(
        pa.runs.try_recv().is_err(),
        "a beating channel must not be restarted"
    );
    assert!(health.get("alpha").unwrap().last_progress_at.is_some());

    // Once it stops beating, the watchdog restarts it after the stall timeout (plus one backoff second).
    let second = pa.runs.recv().await.unwrap();
    let stalled_for = second - first - Duration::from_secs(60);
    assert!(
        stalled_for >= Duration::from_secs(30) && stalled_for <= Duration::from_secs(40),
        "{stalled_for:?}"
    );
    let h = health.get("alpha").unwrap();
    assert_eq!(h.restarts, 1);
    assert!(h.last_error.unwrap().starts_with("stalled"));
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn buttons_a_channel_cannot_show_are_added_to_the_text() {
    let (a, mut pa) = fake("alpha", RunMode::Idle);
    let mut manager = ChannelManager::new(ManagerSettings::new(false, true, 3));
    manager.add(Arc::new(a));
    let bus = Arc::new(InProcessBus::new(64));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
    let guard = std::time::Duration::from_secs(30);
    tokio::time::timeout(guard, pa.runs.recv())
        .await
        .unwrap()
        .unwrap();
    let mut m = msg("alpha", OutboundKind::Reply, "Which one?");
    m.metadata.insert(
        nanobot_bus::META_BUTTONS.into(),
        serde_json::json!([["Tea", "Coffee"], ["Neither"]]),
    );
    bus.publish_outbound(m).await.unwrap();
    let got = tokio::time::timeout(guard, pa.sends.recv())
        .await
        .unwrap()
        .unwrap()
        .1
        .unwrap();
    assert_eq!(got.content, "Which one?\n\n[Tea] [Coffee]\n[Neither]");
    assert!(!got.metadata.contains_key(nanobot_bus::META_BUTTONS));
    cancel.cancel();
    task.await.unwrap();
}

/// Issue 42: an outbound message (from the agent, or forged on a shared bus) attaches only files of the media
/// folders, as the gateway sets them (the message tool copies what it sends into `media/outbox`); a workspace
/// file, `config.json` or a session file is withheld, through a link in the media folder too, and the text says
/// so.
#[tokio::test]
async fn attachments_come_only_from_the_media_folders() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join(".nanobot");
    let (ws, media) = (data.join("workspace"), data.join("media"));
    for d in [
        &ws,
        &media.join("telegram"),
        &media.join("outbox"),
        &data.join("sessions"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    let file = |p: std::path::PathBuf| {
        std::fs::write(&p, "x").unwrap();
        p.display().to_string()
    };
    let chart = file(ws.join("chart.png"));
    let photo = file(media.join("telegram/photo.jpg"));
    let config = file(data.join("config.json"));
    let session = file(data.join("sessions/a.jsonl"));
    let outside = file(home.path().join("elsewhere.txt"));
    let staged = file(media.join("outbox/0a1b-report.pdf"));
    std::os::unix::fs::symlink(data.join("config.json"), media.join("outbox/innocent.png")).unwrap();
    let link = media.join("outbox/innocent.png").display().to_string();

    let (a, mut pa) = fake("alpha", RunMode::Idle);
    let mut manager = ChannelManager::new(ManagerSettings::new(true, true, 3))
        .with_media_roots(MediaRoots::new(vec![media.clone()], Vec::new()));
    manager.add(Arc::new(a));
    let bus = Arc::new(InProcessBus::new(64));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
    let guard = Duration::from_secs(30);
    tokio::time::timeout(guard, pa.runs.recv())
        .await
        .expect("the channel runs")
        .unwrap();
    let mut out = msg("alpha", OutboundKind::Reply, "here you go");
    let url = "https://example.com/a.png".to_owned();
    out.media = vec![
        chart,
        photo.clone(),
        staged.clone(),
        url.clone(),
        config,
        session,
        outside,
        link,
        "/nonexistent".into(),
    ];
    bus.publish_outbound(out).await.unwrap();
    let sent = tokio::time::timeout(guard, pa.sends.recv())
        .await
        .expect("the message is delivered")
        .unwrap()
        .1
        .unwrap();
    assert_eq!(sent.media, [photo, staged, url]);
    assert!(sent.content.starts_with("here you go"), "{}", sent.content);
    assert!(
        sent.content.contains("6 attached file(s) withheld"),
        "{}",
        sent.content
    );
    cancel.cancel();
    task.await.unwrap();
}

/// What a durable bus learns of each outbound message: its text and how it was settled.
type Settled = Arc<std::sync::Mutex<Vec<(String, nanobot_bus::Settlement)>>>;

/// The in-process bus with the receipts of a durable one: each outbound message is recorded when settled.
struct Receipted {
    inner: InProcessBus,
    settled: Settled,
}

struct Recording {
    text: String,
    settled: Settled,
}

#[async_trait]
impl nanobot_bus::Receipt for Recording {
    async fn settle(self: Box<Self>, how: nanobot_bus::Settlement) {
        self.settled.lock().unwrap().push((self.text, how));
    }
}

#[async_trait]
impl Bus for Receipted {
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), nanobot_bus::BusError> {
        self.inner.publish_inbound(msg).await
    }
    async fn consume_inbound(&self) -> Option<InboundMessage> {
        self.inner.consume_inbound().await
    }
    async fn publish_outbound(&self, msg: OutboundMessage) -> Result<(), nanobot_bus::BusError> {
        self.inner.publish_outbound(msg).await
    }
    async fn consume_outbound(&self) -> Option<OutboundMessage> {
        unreachable!("the manager takes deliveries, to settle them once sent")
    }
    async fn consume_outbound_delivery(&self) -> Option<nanobot_bus::OutboundDelivery> {
        let msg = self.inner.consume_outbound().await?;
        let receipt = Recording {
            text: msg.content.clone(),
            settled: self.settled.clone(),
        };
        Some(nanobot_bus::Delivery::with_receipt(msg, Box::new(receipt)))
    }
    fn inbound_len(&self) -> usize {
        self.inner.inbound_len()
    }
    fn outbound_len(&self) -> usize {
        self.inner.outbound_len()
    }
    fn close(&self) {
        self.inner.close();
    }
}

/// Issue 42: a durable bus forgets an outbound message only once its channel is done with it (sent, given up, or
/// not for sending); one cut short by stopping goes back to the bus, for the channel's next holder.
#[tokio::test(start_paused = true)]
async fn a_message_is_settled_once_its_channel_is_done_with_it() {
    use nanobot_bus::Settlement::{Done, Retry};
    let (a, mut pa) = fake("alpha", RunMode::Idle);
    a.fail_sends.store(1, Ordering::SeqCst);
    let mut manager = ChannelManager::new(ManagerSettings::new(false, true, 3));
    let a = Arc::new(a);
    manager.add(a.clone());
    let settled = Settled::default();
    let bus = Arc::new(Receipted {
        inner: InProcessBus::new(8),
        settled: settled.clone(),
    });
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
    let now = || settled.lock().unwrap().clone();

    bus.publish_outbound(msg("alpha", OutboundKind::Reply, "hi"))
        .await
        .unwrap();
    let (_, first) = pa.sends.recv().await.unwrap();
    assert!(first.is_err(), "the first attempt fails");
    assert_eq!(now(), [], "not settled while a retry is due");
    let (_, second) = pa.sends.recv().await.unwrap();
    assert_eq!(second.unwrap().content, "hi");

    // Not for sending (sendProgress is off), and a channel nobody runs: settled without a send.
    bus.publish_outbound(msg("alpha", OutboundKind::Progress, "thinking"))
        .await
        .unwrap();
    bus.publish_outbound(msg("nobody", OutboundKind::Reply, "lost"))
        .await
        .unwrap();
    // Failing for good: settled too (another try would fail the same way).
    a.fail_sends.store(u32::MAX, Ordering::SeqCst);
    bus.publish_outbound(msg("alpha", OutboundKind::Reply, "doomed"))
        .await
        .unwrap();
    for _ in 0..4 {
        let (_, attempt) = pa.sends.recv().await.unwrap();
        assert!(attempt.is_err(), "the first attempt and three retries fail");
    }
    // The worker settles right after its last attempt: let it run (bounded; no clock involved).
    for _ in 0..1000 {
        if now().len() == 4 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        now(),
        [
            ("hi".to_owned(), Done),
            ("thinking".to_owned(), Done),
            ("lost".to_owned(), Done),
            ("doomed".to_owned(), Done)
        ]
    );

    // Stopping while a send waits for its retry: handed back.
    a.fail_sends.store(1, Ordering::SeqCst);
    bus.publish_outbound(msg("alpha", OutboundKind::Reply, "interrupted"))
        .await
        .unwrap();
    let (_, attempt) = pa.sends.recv().await.unwrap();
    assert!(attempt.is_err());
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(now().last(), Some(&("interrupted".to_owned(), Retry)));
}
