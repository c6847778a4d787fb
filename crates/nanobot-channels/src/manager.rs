//! [`ChannelManager`]: runs channels under supervisors and delivers outbound messages to them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nanobot_bus::{Bus, OutboundKind, OutboundMessage, Receipt, Settlement};
use nanobot_util::Backoff;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{Channel, ChannelError};

/// How failed sends are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (`channels.sendMaxRetries`).
    pub max_retries: u32,
    /// Wait before retry *n* (the last entry repeats). A platform's `retry_after` wins when longer.
    pub delays: Vec<Duration>,
}

impl Default for RetryPolicy {
    /// 3 retries after 1, 2 and 4 seconds.
    fn default() -> Self {
        Self::with_max_retries(3)
    }
}

impl RetryPolicy {
    /// `max_retries` retries waiting 1, 2, 4, 4, … seconds.
    pub fn with_max_retries(max_retries: u32) -> Self {
        Self {
            max_retries,
            delays: vec![
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(4),
            ],
        }
    }

    fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let index = usize::try_from(retry)
            .unwrap_or(usize::MAX)
            .min(self.delays.len().saturating_sub(1));
        let base = self.delays.get(index).copied().unwrap_or(Duration::from_secs(1));
        retry_after.map_or(base, |r| r.max(base))
    }
}

/// How channels are restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorSettings {
    /// First wait before a restart.
    pub initial_backoff: Duration,
    /// The wait doubles after each failed run up to this.
    pub max_backoff: Duration,
    /// A run that lasted this long resets the backoff.
    pub healthy_after: Duration,
    /// A channel whose [`Heartbeat`](crate::Heartbeat) has not moved for this long is restarted.
    pub stall_timeout: Duration,
    /// How often the watchdog looks at the heartbeat.
    pub watchdog_interval: Duration,
}

impl Default for SupervisorSettings {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            healthy_after: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(120),
            watchdog_interval: Duration::from_secs(10),
        }
    }
}

impl SupervisorSettings {
    /// Restarts within moments (50 ms, doubling to 200 ms): for a peer on this machine, and for tests.
    pub fn quick() -> Self {
        Self {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            ..Self::default()
        }
    }
}

/// A manager running in a task of its own ([`ChannelManager::spawn`]).
#[derive(Debug)]
pub struct RunningManager {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    health: HealthRegistry,
}

impl RunningManager {
    /// The channels' health.
    pub fn health(&self) -> &HealthRegistry {
        &self.health
    }

    /// Stops the channels and waits up to `within` for them; false when they took longer (the task is then left
    /// to end on its own).
    pub async fn stop(self, within: Duration) -> bool {
        self.cancel.cancel();
        tokio::time::timeout(within, self.task).await.is_ok()
    }
}

/// What the manager needs from `channels.*` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerSettings {
    /// Deliver [`OutboundKind::Progress`] messages (`channels.sendProgress`).
    pub send_progress: bool,
    /// Deliver [`OutboundKind::ToolHint`] messages (`channels.sendToolHints`).
    pub send_tool_hints: bool,
    /// Send retries (`channels.sendMaxRetries`, 1/2/4 s).
    pub retry: RetryPolicy,
    /// Restart behaviour.
    pub supervisor: SupervisorSettings,
    /// Outbound messages queued per channel before the dispatcher waits.
    pub queue_capacity: usize,
}

impl Default for ManagerSettings {
    fn default() -> Self {
        Self::new(true, true, 3)
    }
}

impl ManagerSettings {
    /// Settings from `channels.sendProgress`, `channels.sendToolHints` and `channels.sendMaxRetries`.
    pub fn from_config(config: &nanobot_config::ChannelsConfig) -> Self {
        Self::new(
            config.send_progress,
            config.send_tool_hints,
            config.send_max_retries,
        )
    }

    /// Settings from the three `channels.*` keys, with default supervision.
    pub fn new(send_progress: bool, send_tool_hints: bool, send_max_retries: u32) -> Self {
        Self {
            send_progress,
            send_tool_hints,
            retry: RetryPolicy::with_max_retries(send_max_retries),
            supervisor: SupervisorSettings::default(),
            queue_capacity: 256,
        }
    }
}

/// Where a channel is in its life (new states may be added: matches need a `_` arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
#[serde(rename_all = "snake_case")]
pub enum ChannelState {
    /// Added, not started yet.
    Starting,
    /// Its receive loop is running.
    Running,
    /// It failed or stalled and waits to be restarted.
    Backoff,
    /// It failed in a way restarting cannot fix (bad configuration, rejected token).
    Failed,
    /// The manager was shut down.
    Stopped,
}

/// Health of one channel, for `nanobot channels status` and the gateway's health endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelHealth {
    /// Channel name.
    pub name: String,
    /// Current state.
    pub state: ChannelState,
    /// Restarts so far.
    pub restarts: u32,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// When the receive loop last made progress (heartbeat moved).
    pub last_progress_at: Option<DateTime<Utc>>,
    /// Messages delivered.
    pub sent: u64,
    /// Messages given up on after retries.
    pub send_failures: u64,
}

impl ChannelHealth {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            state: ChannelState::Starting,
            restarts: 0,
            last_error: None,
            last_progress_at: None,
            sent: 0,
            send_failures: 0,
        }
    }
}

/// Shared, cloneable view of every channel's health.
#[derive(Debug, Clone, Default)]
pub struct HealthRegistry(Arc<Mutex<BTreeMap<String, ChannelHealth>>>);

impl HealthRegistry {
    fn update(&self, name: &str, f: impl FnOnce(&mut ChannelHealth)) {
        let mut map = nanobot_util::lock(&self.0);
        f(map
            .entry(name.to_string())
            .or_insert_with(|| ChannelHealth::new(name)));
    }

    /// Every channel's health, ordered by name.
    pub fn snapshot(&self) -> Vec<ChannelHealth> {
        nanobot_util::lock(&self.0).values().cloned().collect()
    }

    /// One channel's health.
    pub fn get(&self, name: &str) -> Option<ChannelHealth> {
        nanobot_util::lock(&self.0).get(name).cloned()
    }
}

/// Runs channels and routes the agent's outbound messages to them.
///
/// The gateway builds the channels that are enabled in the config and [adds](ChannelManager::add) them;
/// [`ChannelManager::run`] then supervises each one (restart with backoff on failure, watchdog on a stalled
/// heartbeat) and dispatches outbound messages by channel name through one ordered queue per channel, with
/// retries and progress/tool-hint filtering.
pub struct ChannelManager {
    channels: Vec<Arc<dyn Channel>>,
    settings: ManagerSettings,
    health: HealthRegistry,
    media: Option<Arc<MediaRoots>>,
}

/// Where the files an outbound message attaches may come from ([`ChannelManager::with_media_roots`]; `http(s)`
/// links are not files and pass). A path is
/// sent when it resolves (links followed) inside an allowed folder more deeply than inside a refused one: with the
/// workspace and `<data dir>/media` allowed and the data directory refused, a workspace file or a downloaded image
/// goes out, `config.json` or a session file does not, whoever put the message on the bus.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaRoots {
    allowed: Vec<PathBuf>,
    refused: Vec<PathBuf>,
}

impl MediaRoots {
    /// Files from `allowed` folders, never from `refused` ones (unless inside an allowed folder within them).
    /// Folders that do not exist are resolved as far as they do.
    pub fn new(allowed: Vec<PathBuf>, refused: Vec<PathBuf>) -> Self {
        let real = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
        Self {
            allowed: allowed.into_iter().map(real).collect(),
            refused: refused.into_iter().map(real).collect(),
        }
    }

    /// Whether the file at `path` may be sent.
    pub fn allows(&self, path: &str) -> bool {
        let Ok(real) = std::fs::canonicalize(path) else {
            return false;
        };
        let depth = |roots: &[PathBuf]| {
            roots
                .iter()
                .filter(|r| real.starts_with(r))
                .map(|r| r.components().count())
                .max()
        };
        match (depth(&self.allowed), depth(&self.refused)) {
            (Some(a), Some(r)) => a > r,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl std::fmt::Debug for ChannelManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelManager")
            .field(
                "channels",
                &self
                    .channels
                    .iter()
                    .map(|c| c.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .field("settings", &self.settings)
            .finish()
    }
}

impl ChannelManager {
    /// A manager with no channels yet.
    pub fn new(settings: ManagerSettings) -> Self {
        Self {
            channels: Vec::new(),
            settings,
            health: HealthRegistry::default(),
            media: None,
        }
    }

    /// Sends only attachments the `roots` allow; the others are dropped from the message (logged, and the text
    /// says a file was withheld). Without it every path is sent as given.
    pub fn with_media_roots(mut self, roots: MediaRoots) -> Self {
        self.media = Some(Arc::new(roots));
        self
    }

    /// Adds a channel (replacing one with the same name).
    pub fn add(&mut self, channel: Arc<dyn Channel>) {
        self.channels.retain(|c| c.name() != channel.name());
        self.health.update(channel.name(), |_| {});
        self.channels.push(channel);
    }

    /// Names of the channels added.
    pub fn channel_names(&self) -> Vec<String> {
        self.channels.iter().map(|c| c.name().to_string()).collect()
    }

    /// The health registry (clone it before calling [`ChannelManager::run`] to watch from elsewhere).
    pub fn health(&self) -> HealthRegistry {
        self.health.clone()
    }

    /// [`ChannelManager::run`] in a task of its own, until [`RunningManager::stop`] (or the bus is closed and
    /// drained).
    pub fn spawn(self, bus: Arc<dyn Bus>) -> RunningManager {
        let cancel = CancellationToken::new();
        let health = self.health();
        let task = tokio::spawn(self.run(bus, cancel.clone()));
        RunningManager { cancel, task, health }
    }

    /// Runs every channel and the outbound dispatcher until `cancel` fires or the bus is closed and drained.
    pub async fn run(self, bus: Arc<dyn Bus>, cancel: CancellationToken) {
        let Self {
            channels,
            settings,
            health,
            media,
        } = self;
        let settings = Arc::new(settings);
        let stop = cancel.child_token();
        let mut tasks = JoinSet::new();
        let mut queues: HashMap<String, mpsc::Sender<Queued>> = HashMap::new();
        let mut workers = JoinSet::new();
        for channel in &channels {
            tasks.spawn(supervise(
                channel.clone(),
                bus.clone(),
                stop.clone(),
                settings.clone(),
                health.clone(),
            ));
            let (tx, rx) = mpsc::channel(settings.queue_capacity.max(1));
            queues.insert(channel.name().to_string(), tx);
            workers.spawn(deliver_loop(
                channel.clone(),
                rx,
                stop.clone(),
                settings.clone(),
                health.clone(),
            ));
        }
        loop {
            let delivery = tokio::select! {
                () = stop.cancelled() => break,
                d = bus.consume_outbound_delivery() => d,
            };
            let Some(delivery) = delivery else { break };
            let (msg, receipt) = delivery.into_parts();
            let Some(mut msg) = filter(msg, &settings, &channels) else {
                settle(receipt, Settlement::Done).await;
                continue;
            };
            if let Some(roots) = &media {
                withhold_media(&mut msg, roots);
            }
            match queues.get(&msg.channel) {
                // A receipt dropped unsettled (the worker stopped) hands the message back to the bus.
                Some(queue) => {
                    if queue.send((msg, receipt)).await.is_err() {
                        tracing::warn!("outbound worker stopped; message left to the bus");
                    }
                }
                None => {
                    tracing::warn!(channel = %msg.channel, "no such channel; outbound message dropped");
                    settle(receipt, Settlement::Done).await;
                }
            }
        }
        // Let queued replies go out, then stop the receive loops.
        drop(queues);
        while workers.join_next().await.is_some() {}
        stop.cancel();
        while tasks.join_next().await.is_some() {}
    }
}

/// Drops the attachments of `msg` that `roots` do not allow, saying so in its text.
fn withhold_media(msg: &mut OutboundMessage, roots: &MediaRoots) {
    let before = msg.media.len();
    msg.media.retain(|p| {
        // A link to a web page or file is the channel's to fetch, not a local file.
        let ok = p.starts_with("https://") || p.starts_with("http://") || roots.allows(p);
        if !ok {
            tracing::warn!(channel = %msg.channel, path = %p, "outbound attachment outside the folders it may come from; not sent");
        }
        ok
    });
    let withheld = before - msg.media.len();
    if withheld > 0 {
        msg.content.push_str(&format!(
            "\n\n({withheld} attached file(s) withheld: only files of nanobot's media folders are sent)"
        ));
    }
}

/// Applies `sendProgress` / `sendToolHints`, and turns streams into plain replies for non-streaming channels.
fn filter(
    mut msg: OutboundMessage,
    settings: &ManagerSettings,
    channels: &[Arc<dyn Channel>],
) -> Option<OutboundMessage> {
    match &msg.kind {
        OutboundKind::Progress if !settings.send_progress => return None,
        OutboundKind::ToolHint if !settings.send_tool_hints => return None,
        _ => {}
    }
    let streams = channels
        .iter()
        .find(|c| c.name() == msg.channel)
        .is_some_and(|c| c.supports_streaming());
    if !streams {
        match &msg.kind {
            OutboundKind::StreamDelta { .. } => return None,
            OutboundKind::StreamEnd { .. } => msg.kind = OutboundKind::Reply,
            _ => {}
        }
    }
    Some(msg)
}

/// An outbound message waiting for its channel, with the receipt to settle once it is sent.
type Queued = (OutboundMessage, Option<Box<dyn Receipt>>);

async fn settle(receipt: Option<Box<dyn Receipt>>, how: Settlement) {
    if let Some(r) = receipt {
        r.settle(how).await;
    }
}

async fn deliver_loop(
    channel: Arc<dyn Channel>,
    mut rx: mpsc::Receiver<Queued>,
    stop: CancellationToken,
    settings: Arc<ManagerSettings>,
    health: HealthRegistry,
) {
    while let Some((msg, mut receipt)) = rx.recv().await {
        // The send's span: a child of the span that published the message (the turn, a tool call), which may
        // have run on another replica.
        let span = tracing::info_span!(
            target: nanobot_util::trace::TARGET,
            "send",
            otel.name = %format_args!("send {}", channel.name()),
            otel.kind = "producer",
            otel.status_code = tracing::field::Empty,
            messaging.system = channel.name(),
            messaging.operation.type = "send",
            messaging.destination.name = %msg.chat_id,
            nanobot.kind = msg.kind.name(),
            nanobot.attempts = tracing::field::Empty,
            nanobot.outcome = tracing::field::Empty,
        );
        if let Some(parent) = &msg.trace {
            nanobot_util::trace::adopt_traceparent(&span, parent);
        }
        let how = deliver(
            channel.as_ref(),
            &msg,
            &mut receipt,
            &stop,
            (&settings.retry, &health),
        )
        .instrument(span)
        .await;
        settle(receipt, how).await;
    }
}

/// Records how a send ended on its span (`deliver_loop`).
fn record_send(outcome: &'static str, attempts: u32) {
    let span = tracing::Span::current();
    span.record("nanobot.outcome", outcome);
    span.record("nanobot.attempts", attempts);
    if outcome != "sent" {
        span.record("otel.status_code", "ERROR");
    }
}

/// Sends `msg`, retrying what may pass later: [`Settlement::Done`] once sent or given up, [`Settlement::Retry`]
/// when stopping cut the retries short (the channel's next holder sends it, on a durable bus). The channel may
/// take `receipt` to settle it itself ([`Channel::send_receipted`]).
async fn deliver(
    channel: &dyn Channel,
    msg: &OutboundMessage,
    receipt: &mut Option<Box<dyn Receipt>>,
    stop: &CancellationToken,
    (retry, health): (&RetryPolicy, &HealthRegistry),
) -> Settlement {
    // Buttons a channel cannot show are still options the user must see: as text.
    let with_text;
    let msg = match nanobot_bus::buttons(&msg.metadata) {
        rows if !rows.is_empty() && !channel.supports_buttons() => {
            let mut m = msg.clone();
            m.metadata.remove(nanobot_bus::META_BUTTONS);
            m.content = format!("{}\n\n{}", m.content, nanobot_bus::buttons_as_text(&rows));
            with_text = m;
            &with_text
        }
        _ => msg,
    };
    let mut attempt: u32 = 0;
    loop {
        match channel.send_receipted(msg, receipt).await {
            Ok(()) => {
                health.update(channel.name(), |h| h.sent += 1);
                record_send("sent", attempt + 1);
                return Settlement::Done;
            }
            Err(e) if e.is_retryable() && attempt < retry.max_retries => {
                let wait = retry.delay(attempt, e.retry_after());
                tracing::warn!(channel = channel.name(), error = %e, attempt, ?wait, "send failed; retrying");
                attempt += 1;
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stop.cancelled() => {
                        health.update(channel.name(), |h| h.send_failures += 1);
                        record_send("stopped", attempt);
                        return Settlement::Retry;
                    }
                }
            }
            Err(e) => {
                tracing::error!(channel = channel.name(), error = %nanobot_util::error_chain(&e), chat = %msg.chat_id, "send failed; message dropped");
                health.update(channel.name(), |h| {
                    h.send_failures += 1;
                    h.last_error = Some(nanobot_util::error_chain(&e));
                });
                record_send("dropped", attempt + 1);
                return Settlement::Done;
            }
        }
    }
}

enum Outcome {
    Exited(Result<(), ChannelError>),
    Stalled,
}

async fn supervise(
    channel: Arc<dyn Channel>,
    bus: Arc<dyn Bus>,
    stop: CancellationToken,
    settings: Arc<ManagerSettings>,
    health: HealthRegistry,
) {
    let s = &settings.supervisor;
    let name = channel.name().to_string();
    let mut schedule = Backoff::exponential(s.initial_backoff, s.max_backoff);
    loop {
        health.update(&name, |h| h.state = ChannelState::Running);
        let started = Instant::now();
        let run_token = stop.child_token();
        let outcome = watch(channel.as_ref(), bus.clone(), run_token.clone(), s, &health).await;
        run_token.cancel();
        if stop.is_cancelled() {
            health.update(&name, |h| h.state = ChannelState::Stopped);
            return;
        }
        let (error, fatal) = match outcome {
            Outcome::Exited(Ok(())) => ("exited unexpectedly".to_string(), false),
            Outcome::Exited(Err(e)) => {
                let fatal = matches!(e, ChannelError::Config { .. } | ChannelError::Auth { .. });
                (nanobot_util::error_chain(&e), fatal)
            }
            Outcome::Stalled => (format!("stalled: no progress for {:?}", s.stall_timeout), false),
        };
        if fatal {
            tracing::error!(channel = %name, error = %error, "channel failed; not restarting");
            health.update(&name, |h| {
                h.state = ChannelState::Failed;
                h.last_error = Some(error);
            });
            return;
        }
        if started.elapsed() >= s.healthy_after {
            schedule.reset();
        }
        let backoff = schedule.next_delay();
        tracing::warn!(channel = %name, error = %error, ?backoff, "channel stopped; restarting");
        health.update(&name, |h| {
            h.state = ChannelState::Backoff;
            h.restarts += 1;
            h.last_error = Some(error);
        });
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => {
                health.update(&name, |h| h.state = ChannelState::Stopped);
                return;
            }
        }
    }
}

/// Runs the channel once, watching its heartbeat.
async fn watch(
    channel: &dyn Channel,
    bus: Arc<dyn Bus>,
    token: CancellationToken,
    s: &SupervisorSettings,
    health: &HealthRegistry,
) -> Outcome {
    let heartbeat = channel.heartbeat();
    let run = channel.run(bus, token);
    tokio::pin!(run);
    let mut last_count = heartbeat.as_ref().map(crate::Heartbeat::count);
    let mut last_change = Instant::now();
    let mut tick = tokio::time::interval(s.watchdog_interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = &mut run => return Outcome::Exited(result),
            _ = tick.tick(), if heartbeat.is_some() => {
                let count = heartbeat.as_ref().map(crate::Heartbeat::count);
                if count != last_count {
                    last_count = count;
                    last_change = Instant::now();
                    health.update(channel.name(), |h| h.last_progress_at = Some(Utc::now()));
                } else if last_change.elapsed() >= s.stall_timeout {
                    return Outcome::Stalled;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_are_1_2_4_and_respect_retry_after() {
        let p = RetryPolicy::with_max_retries(5);
        let d: Vec<u64> = (0..5).map(|i| p.delay(i, None).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 4, 4]);
        assert_eq!(p.delay(0, Some(Duration::from_secs(30))), Duration::from_secs(30));
        assert_eq!(
            p.delay(2, Some(Duration::from_millis(10))),
            Duration::from_secs(4)
        );
    }
}
