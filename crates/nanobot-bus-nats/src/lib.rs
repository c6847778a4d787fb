//! A durable [`nanobot_bus::Bus`] on NATS JetStream, so several gateway replicas share one queue and a message
//! outlives the replica that was answering it.
//!
//! # How messages flow
//! - **Inbound** messages are published to `<prefix>.in.<partition>` on a file-backed work-queue stream
//!   (`<STREAM>_IN`); the partition is a stable hash of the session key, so one session always lands in one
//!   partition.
//! - Each partition has **one durable pull consumer with at most one message in flight** (`max_ack_pending = 1`).
//!   Every replica pulls from every partition, but the server hands a partition's next message out only when the
//!   previous one is acknowledged: a session's turns run one at a time and in order, whichever replica runs them,
//!   and sessions in different partitions run in parallel (as many at once as there are partitions).
//! - A taken message comes as a [`nanobot_bus::Delivery`] whose receipt the dispatcher settles when the turn it
//!   started has been saved: [`Settlement::Done`] acknowledges it (the work queue then deletes it),
//!   [`Settlement::Retry`] asks for redelivery. While the turn runs, the receipt tells the server the work is in
//!   progress every half acknowledgement wait; a replica that dies stops doing so, and the message is delivered
//!   again once the wait runs out.
//! - Publishing sets `Nats-Msg-Id` from the channel's own message id (`metadata.message_id`), so a channel that
//!   delivers the same message twice within the duplicate window (a webhook retried, a poll repeated after a
//!   restart) has it stored once.
//! - **Outbound** messages go to `<prefix>.out.<channel>` on a second work-queue stream (`<STREAM>_OUT`), read
//!   by the replica holding the channel's lease (one durable consumer per channel) and acknowledged once the
//!   channel has sent it (the channel manager settles its [`nanobot_bus::OutboundDelivery`]; until then its
//!   receipt claims progress), so one the holder dies with is sent by the next holder; one no replica takes within [`NatsBusSettings::outbound_max_age`] (a day by default) is dropped by the server.
//! - **Answers to a running turn** (the owner's `yes` to its question, `/stop`) do not queue behind it: before a
//!   message goes into the stream it is offered to the replica running a turn of its session, if any, over a
//!   request on the session's side subject (`<prefix>.side.<hash>`), and goes into the stream only when no
//!   replica takes it ([`nanobot_bus::Bus::set_interceptor`]).
//! - **Leases** on a key-value bucket (`<STREAM>_LEASES`) make the scheduler and each channel's connection run on
//!   one replica at a time ([`nanobot_bus::Leases`]).
//!
//! # Who may use the bus
//! A client that may publish on the inbound subjects can make a message look as if any user sent it, so
//! [`NatsBus::connect`] tries the server as a client without credentials would ([`anonymous_access`]) and refuses
//! a server that lets it publish, unless [`NatsBusSettings::allow_anonymous`] says to run anyway. The bus itself
//! authenticates with what the settings give: a user and password, a token, an NKey seed, a credentials file,
//! a TLS client certificate.
//!
//! With a deployment key ([`NatsBusSettings::key`]) every message is sealed ([`DeploymentKey`]: encrypted,
//! authenticated, bound to its subject, replays refused), and so are the lease records: a client that reaches
//! the server without the key reads nothing and can make nothing a replica accepts.
//!
//! Every wait is bounded: connecting by [`NatsBusSettings::connect_timeout`], JetStream requests and publish
//! acknowledgements by [`NatsBusSettings::request_timeout`].

mod anonymous;
mod lease;
mod probe;
mod seal;
mod settings;
mod side;

pub use anonymous::{AnonymousAccess, anonymous_access};
pub use probe::{Probe, probe};
pub use seal::{DeploymentKey, MIN_KEY_CHARS, SealError};
pub use settings::{DEFAULT_OUTBOUND_MAX_AGE, NatsBusSettings};

use std::hash::Hasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use async_trait::async_trait;
use futures::StreamExt as _;
use nanobot_bus::{
    Bus, BusError, Delivery, InboundMessage, OutboundDelivery, OutboundMessage, Receipt, Settlement,
};
use nanobot_util::Backoff;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

/// Why connecting to NATS or setting up the streams failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsBusError {
    /// The settings are not usable; the message names the field.
    #[error("bus.nats: {0}")]
    Config(String),
    /// The server could not be reached (or refused the credentials).
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect {
        /// The server address (credentials left out).
        url: String,
        /// What failed.
        reason: String,
    },
    /// A stream or consumer could not be created or read.
    #[error("NATS JetStream {what}: {reason}")]
    JetStream {
        /// The stream or consumer.
        what: String,
        /// What the server said.
        reason: String,
    },
    /// The server lets a client without credentials publish on the bus's subjects, and
    /// [`NatsBusSettings::allow_anonymous`] is not set.
    #[error(
        "the NATS server at {url} lets a client without credentials publish on {subjects}: anyone who reaches it \
         could act as any user of any channel. Give the server users (docs/scaling.md, \"Who can reach the bus\") \
         and set them in gateway.bus.nats, or set gateway.bus.nats.allowAnonymous to true to run anyway"
    )]
    OpenServer {
        /// The server address (credentials left out).
        url: String,
        /// The subjects it lets anyone publish on.
        subjects: String,
    },
}

/// The JetStream bus. See the [crate docs](crate). Cheap to share behind an `Arc<dyn Bus>`.
pub struct NatsBus {
    settings: NatsBusSettings,
    key: Option<DeploymentKey>,
    side: Arc<side::Side>,
    interceptor: side::InterceptorSlot,
    js: jetstream::Context,
    inbound: Mutex<mpsc::Receiver<Delivery>>,
    outbound: Mutex<mpsc::Receiver<OutboundDelivery>>,
    inbound_waiting: Arc<AtomicUsize>,
    outbound_waiting: Arc<AtomicUsize>,
    closed: AtomicBool,
    cancel: CancellationToken,
    leases: Arc<lease::NatsLeases>,
    stats: Arc<Vec<PartitionCounters>>,
}

/// What `/metrics` shows of one partition.
#[derive(Default)]
struct PartitionCounters {
    /// Messages waiting in it, as last read from the server.
    waiting: AtomicU64,
    /// Messages this process took from it.
    taken: AtomicU64,
}

/// How often the partitions' depths are read from the server (for metrics).
const DEPTHS_EVERY: Duration = Duration::from_secs(5);

/// Reads how many messages wait in each partition every [`DEPTHS_EVERY`] (each request bounded by the context's
/// request timeout), until the bus closes.
async fn read_partition_depths(
    consumers: Vec<consumer::PullConsumer>,
    stats: Arc<Vec<PartitionCounters>>,
    cancel: CancellationToken,
) {
    loop {
        for (c, s) in consumers.iter().zip(stats.iter()) {
            if cancel.is_cancelled() {
                return;
            }
            if let Ok(info) = c.get_info().await {
                s.waiting.store(info.num_pending, Ordering::Relaxed);
            }
        }
        if wait_or_cancel(&cancel, DEPTHS_EVERY).await {
            return;
        }
    }
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus")
            .field("settings", &self.settings)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl NatsBus {
    /// Connects, creates the streams and consumers when they are missing, and starts pulling.
    pub async fn connect(settings: NatsBusSettings) -> Result<Self, NatsBusError> {
        settings.validate()?;
        let key = settings.deployment_key()?;
        let shown = settings.url_without_credentials();
        let js = jetstream_context(&settings, &settings.client_name, true).await?;
        let inbound_stream = ensure_stream(
            &js,
            &settings,
            &settings.inbound_stream(),
            &settings.inbound_subjects(),
            settings.max_age,
        )
        .await?;
        match anonymous_access(&settings, Some(&inbound_stream)).await? {
            AnonymousAccess::Publishes if settings.allow_anonymous => tracing::warn!(
                url = %shown,
                "the NATS server lets clients without credentials publish on the bus's subjects (allowAnonymous is \
                 set): anyone who reaches it can act as any user of any channel and read every reply \
                 (docs/scaling.md, \"Who can reach the bus\")"
            ),
            AnonymousAccess::Publishes => {
                return Err(NatsBusError::OpenServer {
                    url: shown,
                    subjects: format!("{}.in.*", settings.subject_prefix),
                });
            }
            access => tracing::debug!(url = %shown, "NATS: {}", access.describe()),
        }
        let outbound_stream = ensure_stream(
            &js,
            &settings,
            &settings.outbound_stream(),
            &settings.outbound_subjects(),
            settings.outbound_max_age,
        )
        .await?;

        let cancel = CancellationToken::new();
        let partitions = usize::from(settings.partitions);
        let (in_tx, in_rx) = mpsc::channel(partitions);
        let (out_tx, out_rx) = mpsc::channel(64);
        let inbound_waiting = Arc::new(AtomicUsize::new(0));
        let outbound_waiting = Arc::new(AtomicUsize::new(0));
        let stats: Arc<Vec<PartitionCounters>> = Arc::new(
            (0..settings.partitions)
                .map(|_| PartitionCounters::default())
                .collect(),
        );
        let interceptor = side::InterceptorSlot::default();
        let side = Arc::new(side::Side::new(
            js.client(),
            key.clone(),
            settings.subject_prefix.clone(),
            interceptor.clone(),
            inbound_stream.cached_info().config.duplicate_window,
            // A running turn's replica answers in milliseconds; a client subscribed to every subject (`nats sub
            // '>'`) answers nothing, and each offer then waits this long before the message goes to the stream.
            settings.request_timeout.min(Duration::from_secs(1)),
        ));
        let mut consumers = Vec::with_capacity(partitions);
        for p in 0..settings.partitions {
            let config = consumer::pull::Config {
                durable_name: Some(settings.partition_consumer(p)),
                filter_subject: settings.partition_subject(p),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: settings.ack_wait,
                max_ack_pending: 1,
                ..Default::default()
            };
            let consumer = ensure_consumer(&inbound_stream, &settings.partition_consumer(p), config).await?;
            consumers.push(consumer.clone());
            tokio::spawn(pull_inbound(
                consumer,
                Intake {
                    opener: Opener::of(key.clone(), &inbound_stream),
                    side: side.clone(),
                    unified_session: settings.unified_session,
                    ack_wait: settings.ack_wait,
                },
                in_tx.clone(),
                inbound_waiting.clone(),
                (stats.clone(), usize::from(p)),
                cancel.clone(),
            ));
        }
        tokio::spawn(read_partition_depths(consumers, stats.clone(), cancel.clone()));
        // Outbound messages are pulled per channel, by the replica holding the channel's lease. The single
        // consumer of every channel that version 0.1 made would overlap those on the work queue: removed.
        match outbound_stream
            .delete_consumer(&settings.legacy_outbound_consumer())
            .await
        {
            Ok(_) => tracing::info!("NATS bus: removed the outbound consumer of an older version"),
            Err(e) if e.to_string().contains("not found") => {}
            Err(e) => tracing::debug!(error = %e, "NATS bus: no older outbound consumer removed"),
        }
        let router = lease::OutboundRouter {
            opener: Opener::of(key.clone(), &outbound_stream),
            stream: outbound_stream,
            settings: settings.clone(),
            tx: out_tx,
            waiting: outbound_waiting.clone(),
        };
        let leases =
            Arc::new(lease::NatsLeases::open(&js, &settings, key.clone(), router, cancel.clone()).await?);
        if key.is_none() {
            tracing::info!(
                "NATS bus: no deployment key (gateway.bus.nats.key): messages on the bus are readable by, and \
                 can be forged by, any client the server lets publish and subscribe there"
            );
        }
        tracing::info!(server = %shown, partitions, stream = %settings.stream, replica = %settings.replica, sealed = key.is_some(), "NATS bus connected");
        Ok(Self {
            settings,
            key,
            side,
            interceptor,
            js,
            inbound: Mutex::new(in_rx),
            outbound: Mutex::new(out_rx),
            inbound_waiting,
            outbound_waiting,
            closed: AtomicBool::new(false),
            cancel,
            leases,
            stats,
        })
    }

    /// The settings this bus was made with.
    pub fn settings(&self) -> &NatsBusSettings {
        &self.settings
    }

    /// The subject on which the replica running a turn of `session_key` takes messages that must not wait behind
    /// it (see the crate docs).
    pub fn side_subject(&self, session_key: &str) -> String {
        side::subject(&self.settings.subject_prefix, session_key)
    }

    /// The partition a session key lands in (stable across processes and versions of this crate).
    pub fn partition_of(&self, session_key: &str) -> u16 {
        partition_of(session_key, self.settings.partitions)
    }

    async fn publish(
        &self,
        subject: String,
        msg_id: Option<String>,
        payload: Vec<u8>,
    ) -> Result<(), BusError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BusError::Closed);
        }
        let mut headers = async_nats::HeaderMap::new();
        // Sealed, every message has an id, sealed inside it too: a copy published again is then a duplicate.
        let (msg_id, payload) = match &self.key {
            Some(key) => {
                let id = msg_id.unwrap_or_else(|| key.fresh_id());
                let sealed = key
                    .seal(&subject, &id, &payload)
                    .map_err(|e| BusError::Unavailable(e.to_string()))?;
                (Some(id), sealed)
            }
            None => (msg_id, payload),
        };
        if let Some(id) = msg_id {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        }
        let unavailable =
            |e: &dyn std::fmt::Display| BusError::Unavailable(format!("publish to {subject}: {e}"));
        let ack = self
            .js
            .publish_with_headers(subject.clone(), headers, payload.into())
            .await
            .map_err(|e| unavailable(&e))?;
        // The stream has stored it (or knew it already) once the server acknowledges; bounded by the request
        // timeout of the context.
        ack.await.map_err(|e| unavailable(&e))?;
        Ok(())
    }
}

/// Connects to the server of `settings` as `name` and returns its JetStream context, every wait bounded by the
/// settings' timeouts. With `keep_trying`, the client reconnects by itself later (a bus); either way the first
/// connection must come within the connect timeout, so a wrong address fails here, by name.
pub async fn jetstream_context(
    settings: &NatsBusSettings,
    name: &str,
    keep_trying: bool,
) -> Result<jetstream::Context, NatsBusError> {
    let shown = settings.url_without_credentials();
    let failed = |reason: String| NatsBusError::Connect {
        url: shown.clone(),
        reason,
    };
    // What went wrong while the client keeps trying (it reports failures as events): the last one is named if
    // no connection comes, and credentials refused end the wait at once (trying again cannot help).
    let (problem_tx, mut problem) = tokio::sync::watch::channel(None::<String>);
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(settings.connect_timeout)
        .request_timeout(Some(settings.request_timeout))
        .event_callback(move |event| {
            let problem_tx = problem_tx.clone();
            async move {
                let what = match event {
                    async_nats::Event::ClientError(e) => e.to_string(),
                    async_nats::Event::ServerError(e) => {
                        tracing::warn!(error = %e, "NATS: the server reported an error");
                        e.to_string()
                    }
                    _ => return,
                };
                problem_tx.send_replace(Some(what));
            }
        });
    if keep_trying {
        options = options.retry_on_initial_connect();
    }
    options = with_credentials(options, settings).await?;
    let client = tokio::time::timeout(settings.connect_timeout, options.connect(shown.as_str()))
        .await
        .map_err(|_| failed(format!("no answer within {:?}", settings.connect_timeout)))?
        .map_err(|e| failed(e.to_string()))?;
    // `retry_on_initial_connect` returns at once: wait (bounded) for the first connection.
    let refused = async {
        loop {
            if let Some(p) = problem.borrow_and_update().as_deref()
                && (p.contains("authorization violation") || p.contains("failed signing nonce"))
            {
                return p.to_owned();
            }
            if problem.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    let flushed = tokio::select! {
        f = tokio::time::timeout(settings.connect_timeout, client.flush()) => f,
        why = refused => return Err(failed(format!("the server refused the credentials ({why})"))),
    };
    if !matches!(flushed, Ok(Ok(()))) {
        let last = problem
            .borrow()
            .clone()
            .map(|p| format!(" (last: {p})"))
            .unwrap_or_default();
        return Err(failed(format!(
            "no connection within {:?}{last}",
            settings.connect_timeout
        )));
    }
    let mut js = jetstream::new(client);
    js.set_timeout(settings.request_timeout);
    Ok(js)
}

/// `options` with the credentials and TLS files of `settings` (checked by [`NatsBusSettings::validate`]).
async fn with_credentials(
    mut options: async_nats::ConnectOptions,
    settings: &NatsBusSettings,
) -> Result<async_nats::ConnectOptions, NatsBusError> {
    // The client does not read credentials out of the URL: they are taken from it here.
    match settings.url_credentials() {
        Some(settings::UrlCredentials::User(user, password)) => {
            options = options.user_and_password(user, password.expose().to_owned());
        }
        Some(settings::UrlCredentials::Token(token)) => options = options.token(token.expose().to_owned()),
        None => {}
    }
    if let Some(token) = &settings.token {
        options = options.token(token.expose().to_owned());
    }
    if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        options = options.user_and_password(user.clone(), password.expose().to_owned());
    }
    if let Some(seed) = &settings.nkey_seed {
        options = options.nkey(seed.expose().trim().to_owned());
    }
    if let Some(path) = &settings.creds_file {
        options = options
            .credentials_file(path.clone())
            .await
            .map_err(|e| NatsBusError::Config(format!("credsFile {}: {e}", path.display())))?;
    }
    if let (Some(cert), Some(key)) = (&settings.tls_cert, &settings.tls_key) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if let Some(ca) = &settings.tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    Ok(options)
}

/// The partition of `session_key` among `partitions`: FNV-1a, stable everywhere (not the std hasher, whose
/// output may change between Rust versions and would move sessions between partitions on an upgrade).
pub fn partition_of(session_key: &str, partitions: u16) -> u16 {
    let mut h = Fnv1a::default();
    h.write(session_key.as_bytes());
    let n = u64::from(partitions.max(1));
    u16::try_from(h.finish() % n).unwrap_or(0)
}

#[derive(Default)]
pub(crate) struct Fnv1a(Option<u64>);

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0.unwrap_or(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.finish();
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = Some(h);
    }
}

/// The work-queue stream `name`, made when missing. Its `max_age` is set to `max_age` when it was made with
/// another (the one setting a user may change on a running stream; the others keep what the stream was made with).
async fn ensure_stream(
    js: &jetstream::Context,
    settings: &NatsBusSettings,
    name: &str,
    subjects: &[String],
    max_age: Duration,
) -> Result<stream::Stream, NatsBusError> {
    let failed = |e: &dyn std::fmt::Display| NatsBusError::JetStream {
        what: format!("stream {name}"),
        reason: e.to_string(),
    };
    // The server refuses a duplicate window longer than the age limit.
    let within_age = |window: Duration| {
        if max_age.is_zero() {
            window
        } else {
            window.min(max_age)
        }
    };
    let config = stream::Config {
        name: name.to_owned(),
        subjects: subjects.to_vec(),
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        duplicate_window: within_age(settings.duplicate_window),
        max_age,
        ..Default::default()
    };
    let mut made = js.get_or_create_stream(config).await.map_err(|e| failed(&e))?;
    let theirs = made.cached_info().config.clone();
    if theirs.max_age != max_age {
        let updated = stream::Config {
            max_age,
            duplicate_window: within_age(theirs.duplicate_window),
            ..theirs.clone()
        };
        js.update_stream(&updated).await.map_err(|e| failed(&e))?;
        made = js.get_stream(name).await.map_err(|e| failed(&e))?;
        tracing::info!(stream = name, from = ?theirs.max_age, to = ?max_age, "NATS bus: the stream's message age limit changed");
    }
    Ok(made)
}

pub(crate) async fn ensure_consumer(
    stream: &stream::Stream,
    name: &str,
    config: consumer::pull::Config,
) -> Result<consumer::PullConsumer, NatsBusError> {
    stream
        .get_or_create_consumer(name, config)
        .await
        .map_err(|e| NatsBusError::JetStream {
            what: format!("consumer {name}"),
            reason: e.to_string(),
        })
}

/// Pulls `consumer` for as long as the bus runs, handing each message to `handle` (which returns false when the
/// bus is gone), and resumes the message stream with backoff when it breaks (a server restart, missed
/// heartbeats).
async fn pull<F, Fut>(
    consumer: consumer::PullConsumer,
    what: &'static str,
    cancel: CancellationToken,
    mut handle: F,
) where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut backoff = Backoff::exponential(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let opened = tokio::select! {
            () = cancel.cancelled() => return,
            m = consumer.messages() => m,
        };
        match opened {
            Ok(mut messages) => loop {
                let next = tokio::select! {
                    () = cancel.cancelled() => return,
                    n = messages.next() => n,
                };
                match next {
                    Some(Ok(message)) => {
                        backoff.reset();
                        if !handle(message).await {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "NATS bus: {what} pull interrupted; resuming");
                        break;
                    }
                    None => break,
                }
            },
            Err(e) => tracing::warn!(error = %e, "NATS bus: cannot pull {what} messages; retrying"),
        }
        if wait_or_cancel(&cancel, backoff.next_delay()).await {
            return;
        }
    }
}

/// Opens the messages taken from one stream: checks the seal when the bus has a deployment key.
#[derive(Clone)]
pub(crate) struct Opener {
    key: Option<DeploymentKey>,
    /// The stream's duplicate window (a replay is stored after it).
    window: Duration,
}

impl Opener {
    fn of(key: Option<DeploymentKey>, stream: &stream::Stream) -> Self {
        Self {
            key,
            window: stream.cached_info().config.duplicate_window,
        }
    }

    /// The body of `message`, or why it is not one of this deployment's.
    fn body(&self, message: &jetstream::Message) -> Result<Vec<u8>, String> {
        let payload = &message.payload;
        let Some(key) = &self.key else {
            if payload.starts_with(seal::MAGIC) {
                return Err(
                    "it is sealed with a deployment key, and this replica has none (gateway.bus.nats.key)"
                        .into(),
                );
            }
            return Ok(payload.to_vec());
        };
        let stored_ms = message
            .info()
            .map_err(|e| format!("no stream information: {e}"))?
            .published
            .unix_timestamp_nanos()
            / 1_000_000;
        let header_id = message
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|v| v.as_str());
        key.open_stored(
            message.subject.as_str(),
            payload,
            header_id,
            i64::try_from(stored_ms).unwrap_or(i64::MAX),
            self.window,
        )
        .map_err(|e| e.to_string())
    }
}

/// How the inbound messages of a partition are taken: opened, their turn's side path served, kept while the turn
/// runs.
struct Intake {
    opener: Opener,
    side: Arc<side::Side>,
    unified_session: bool,
    ack_wait: Duration,
}

/// Pulls one inbound partition: each message becomes a delivery whose receipt keeps it until the turn is over.
async fn pull_inbound(
    consumer: consumer::PullConsumer,
    intake: Intake,
    tx: mpsc::Sender<Delivery>,
    waiting: Arc<AtomicUsize>,
    (stats, partition): (Arc<Vec<PartitionCounters>>, usize),
    cancel: CancellationToken,
) {
    let stop = cancel.clone();
    let Intake {
        opener,
        side,
        unified_session,
        ack_wait,
    } = intake;
    pull(consumer, "inbound", cancel, |message| {
        let (tx, waiting, stop, side) = (tx.clone(), waiting.clone(), stop.clone(), side.clone());
        if let Some(s) = stats.get(partition) {
            s.taken.fetch_add(1, Ordering::Relaxed);
        }
        let body = opener.body(&message);
        async move {
            let (message, acker) = message.split();
            let acker = Arc::new(acker);
            let body = match body {
                Ok(body) => body,
                Err(why) => {
                    // Not from a replica of this deployment: refused, never run, never delivered again.
                    tracing::warn!(subject = %message.subject, "NATS bus: an inbound message was refused: {why}");
                    let _ = acker.ack_with(AckKind::Term).await;
                    return true;
                }
            };
            let msg: InboundMessage = match serde_json::from_slice(&body) {
                Ok(m) => m,
                Err(e) => {
                    // Not ours (or from an incompatible version): never delivered again, never lost silently.
                    tracing::warn!(subject = %message.subject, error = %e, "NATS bus: an inbound message is not a nanobot message; dropped");
                    let _ = acker.ack_with(AckKind::Term).await;
                    return true;
                }
            };
            // While its turn runs here, answers to it come straight here rather than queueing behind it.
            let turn_over = CancellationToken::new();
            side.serve(&msg.turn_session_key(unified_session), turn_over.clone())
                .await;
            let receipt = NatsReceipt::start(acker, ack_wait, Some(turn_over));
            waiting.fetch_add(1, Ordering::SeqCst);
            // Waits for the dispatcher only while the bus runs. A closed bus (or a dropped one) drops the delivery:
            // its receipt stops reporting progress, so the message is delivered again, here or elsewhere.
            let delivery = Delivery::with_receipt(msg, Box::new(receipt));
            tokio::select! {
                sent = tx.send(delivery) => sent.is_ok(),
                () = stop.cancelled() => {
                    waiting.fetch_sub(1, Ordering::SeqCst);
                    false
                }
            }
        }
    })
    .await;
}

/// Pulls the outbound stream of a channel; a message is acknowledged (confirmed) once the channel manager settles
/// its receipt (the channel sent it). Until then the receipt claims progress, so a message waiting behind a slow
/// channel is not handed to anyone else; one this process dies holding goes to the channel's next holder once
/// the acknowledgement wait runs out.
pub(crate) async fn pull_outbound(
    consumer: consumer::PullConsumer,
    opener: Opener,
    tx: mpsc::Sender<OutboundDelivery>,
    waiting: Arc<AtomicUsize>,
    (ack_wait, cancel): (Duration, CancellationToken),
) {
    pull(consumer, "outbound", cancel, |message| {
        let (tx, waiting) = (tx.clone(), waiting.clone());
        let body = opener.body(&message);
        async move {
            let (message, acker) = message.split();
            let acker = Arc::new(acker);
            let body = match body {
                Ok(body) => body,
                Err(why) => {
                    // Not from a replica of this deployment: never sent, never delivered again.
                    tracing::warn!(subject = %message.subject, "NATS bus: an outbound message was refused: {why}");
                    let _ = acker.ack_with(AckKind::Term).await;
                    return true;
                }
            };
            match serde_json::from_slice::<OutboundMessage>(&body) {
                Ok(out) => {
                    let receipt = NatsReceipt::start(acker, ack_wait, None);
                    waiting.fetch_add(1, Ordering::SeqCst);
                    if tx.send(Delivery::with_receipt(out, Box::new(receipt))).await.is_err() {
                        waiting.fetch_sub(1, Ordering::SeqCst);
                        return false;
                    }
                }
                Err(e) => {
                    tracing::warn!(subject = %message.subject, error = %e, "NATS bus: an outbound message is not a nanobot message; dropped");
                    let _ = acker.ack_with(AckKind::Term).await;
                }
            }
            true
        }
    })
    .await;
}

/// Waits `delay` unless `cancel` fires first; true when it fired.
pub(crate) async fn wait_or_cancel(cancel: &CancellationToken, delay: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => true,
        () = tokio::time::sleep(delay) => false,
    }
}

/// The receipt of one message taken off a stream: tells the server it is being dealt with until it is settled.
struct NatsReceipt {
    acker: Arc<jetstream::message::Acker>,
    keepalive: CancellationToken,
    /// Ends the side path of the turn (answers no longer taken here).
    turn_over: Option<CancellationToken>,
    settled: bool,
}

impl NatsReceipt {
    /// Claims progress for the message of `acker` every half `ack_wait` until settled or dropped; `turn_over`
    /// (an inbound message's) ends the side path of its turn then.
    fn start(
        acker: Arc<jetstream::message::Acker>,
        ack_wait: Duration,
        turn_over: Option<CancellationToken>,
    ) -> Self {
        let keepalive = CancellationToken::new();
        let every = (ack_wait / 2).max(Duration::from_millis(100));
        let (a, stop) = (acker.clone(), keepalive.clone());
        tokio::spawn(async move {
            loop {
                if wait_or_cancel(&stop, every).await {
                    return;
                }
                if let Err(e) = a.ack_with(AckKind::Progress).await {
                    tracing::debug!(error = %e, "NATS bus: progress not sent");
                }
            }
        });
        Self {
            acker,
            keepalive,
            turn_over,
            settled: false,
        }
    }
}

impl Drop for NatsReceipt {
    fn drop(&mut self) {
        // Dropped unsettled (the turn's task was cancelled, a stopping replica's queue let go): stop claiming
        // progress and hand the message back at once, so another replica takes it now rather than after the
        // acknowledgement wait. (A replica that dies sends nothing; then the wait decides.)
        self.keepalive.cancel();
        if let Some(t) = &self.turn_over {
            t.cancel();
        }
        if !self.settled
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let acker = self.acker.clone();
            rt.spawn(async move {
                let _ = acker.ack_with(AckKind::Nak(None)).await;
            });
        }
    }
}

#[async_trait]
impl Receipt for NatsReceipt {
    async fn settle(mut self: Box<Self>, how: Settlement) {
        self.settled = true;
        self.keepalive.cancel();
        if let Some(t) = &self.turn_over {
            t.cancel();
        }
        // Done waits for the server to confirm (bounded by the request timeout), so a turn counted as saved is
        // not delivered again because its acknowledgement was still in a buffer when the connection dropped. A
        // lost acknowledgement means a second delivery; it is logged, never retried forever.
        let sent = match how {
            Settlement::Retry => self.acker.ack_with(AckKind::Nak(None)).await,
            _ => self.acker.double_ack_with(AckKind::Ack).await,
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "NATS bus: cannot settle a message (it will be delivered again)");
        }
    }
}

#[async_trait]
impl Bus for NatsBus {
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), BusError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BusError::Closed);
        }
        let session = msg.turn_session_key(self.settings.unified_session);
        // An answer to a turn running on some replica goes to that turn, not into the queue behind it.
        if self.side.offer(&session, &msg).await {
            return Ok(());
        }
        let subject = self.settings.partition_subject(self.partition_of(&session));
        let id = msg.delivery_id();
        let payload = serde_json::to_vec(&msg)
            .map_err(|e| BusError::Unavailable(format!("cannot encode the message: {e}")))?;
        self.publish(subject, id, payload).await
    }

    async fn consume_inbound(&self) -> Option<InboundMessage> {
        // Without a receipt to settle, the message is acknowledged when it is taken.
        let delivery = self.consume_inbound_delivery().await?;
        let (msg, receipt) = delivery.into_parts();
        if let Some(r) = receipt {
            r.settle(Settlement::Done).await;
        }
        Some(msg)
    }

    async fn consume_inbound_delivery(&self) -> Option<Delivery> {
        let mut rx = self.inbound.lock().await;
        let delivery = rx.recv().await?;
        self.inbound_waiting.fetch_sub(1, Ordering::SeqCst);
        Some(delivery)
    }

    async fn publish_outbound(&self, mut msg: OutboundMessage) -> Result<(), BusError> {
        msg.stamp_trace();
        let subject = self.settings.outbound_subject(&msg.channel);
        let payload = serde_json::to_vec(&msg)
            .map_err(|e| BusError::Unavailable(format!("cannot encode the message: {e}")))?;
        self.publish(subject, None, payload).await
    }

    async fn consume_outbound(&self) -> Option<OutboundMessage> {
        // Without a receipt to settle, the message is acknowledged when it is taken.
        let (msg, receipt) = self.consume_outbound_delivery().await?.into_parts();
        if let Some(r) = receipt {
            r.settle(Settlement::Done).await;
        }
        Some(msg)
    }

    async fn consume_outbound_delivery(&self) -> Option<OutboundDelivery> {
        let mut rx = self.outbound.lock().await;
        let delivery = rx.recv().await?;
        self.outbound_waiting.fetch_sub(1, Ordering::SeqCst);
        Some(delivery)
    }

    fn inbound_len(&self) -> usize {
        self.inbound_waiting.load(Ordering::SeqCst)
    }

    fn outbound_len(&self) -> usize {
        self.outbound_waiting.load(Ordering::SeqCst)
    }

    fn leases(&self) -> Option<Arc<dyn nanobot_bus::Leases>> {
        Some(self.leases.clone())
    }

    fn set_interceptor(&self, interceptor: Arc<dyn nanobot_bus::Interceptor>) {
        if let Ok(mut slot) = self.interceptor.write() {
            *slot = Some(interceptor);
        }
    }

    fn partitions(&self) -> Vec<nanobot_bus::PartitionStats> {
        self.stats
            .iter()
            .enumerate()
            .map(|(p, s)| {
                nanobot_bus::PartitionStats::new(
                    u16::try_from(p).unwrap_or(u16::MAX),
                    s.waiting.load(Ordering::Relaxed),
                    s.taken.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Stop pulling: what is in the streams stays there for the other replicas (or the next start).
        self.cancel.cancel();
    }
}

impl Drop for NatsBus {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_stable_and_spread() {
        // Fixed values: a change here moves live sessions between partitions on upgrade.
        assert_eq!(partition_of("telegram:42", 16), 6);
        assert_eq!(partition_of("slack:C1", 16), 7);
        assert_eq!(partition_of("cli:direct", 64), 8);
        let used: std::collections::BTreeSet<u16> = (0..200)
            .map(|i| partition_of(&format!("slack:C{i}"), 16))
            .collect();
        assert!(used.len() > 12, "{used:?}");
        assert!(used.iter().all(|p| *p < 16));
        assert_eq!(partition_of("anything", 1), 0);
        assert_eq!(partition_of("anything", 0), 0);
    }
}
