//! Gateway replicas on a shared bus (`gateway.bus.kind: nats`): the bus is connected from the config, and each
//! chat channel runs under its channel lease, so one replica at a time holds a platform connection (Telegram
//! polling, a Slack socket, IMAP IDLE…) and receives that channel's replies, whichever replica ran the turn.
//! With `gateway.bus.nats.store: jetstream`, sessions live on the NATS server too (`nanobot-store-nats`), so
//! replicas on other machines, each with its own home, serve them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, Lease, Leases, OutboundMessage, Role};
use nanobot_channels::{Channel, ChannelError, Heartbeat};
use nanobot_config::{BusKind, Config, StoreKind};
use nanobot_util::SharedFiles;
use tokio_util::sync::CancellationToken;

use crate::bus::GatewayBus;
use crate::error::GatewayError;

/// How long a channel that lost its lease gets to stop by itself before it is dropped.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The gateway's bus as `gateway.bus` says: in-process (holding `capacity` messages each way), or NATS.
pub(crate) async fn connect(config: &Config, capacity: usize) -> Result<GatewayBus, GatewayError> {
    match config.gateway.bus.kind {
        BusKind::Memory => Ok(GatewayBus::new(capacity)),
        BusKind::Nats => connect_nats(&config.gateway.bus.nats, config.agents.defaults.unified_session).await,
    }
}

/// The shared files of `gateway.bus.nats.store: jetstream` (sessions on the NATS server, each replica with its own
/// home); `None` for the in-process bus and for replicas sharing one data directory (the default).
pub(crate) async fn shared_files(config: &Config) -> Result<Option<Arc<dyn SharedFiles>>, GatewayError> {
    let bus = &config.gateway.bus;
    if bus.nats.store != StoreKind::Jetstream {
        return Ok(None);
    }
    if bus.kind != BusKind::Nats {
        tracing::warn!(
            "gateway.bus.nats.store is \"jetstream\" but gateway.bus.kind is not \"nats\": sessions stay in this home"
        );
        return Ok(None);
    }
    open_files(&bus.nats).await.map(Some)
}

#[cfg(feature = "nats")]
async fn open_files(c: &nanobot_config::NatsBusConfig) -> Result<Arc<dyn SharedFiles>, GatewayError> {
    let files = nanobot_store_nats::NatsFiles::open(&nats_settings(c))
        .await
        .map_err(|e| GatewayError::Bus(format!("gateway.bus.nats.store is \"jetstream\": {e}")))?;
    tracing::info!(
        stream = files.stream_name(),
        "sessions, the cron store and the memory files are kept on the NATS server; this home holds copies (the \
         rest of the workspace stays in this home: see docs/scaling.md)"
    );
    Ok(Arc::new(files))
}

#[cfg(not(feature = "nats"))]
async fn open_files(_: &nanobot_config::NatsBusConfig) -> Result<Arc<dyn SharedFiles>, GatewayError> {
    Err(no_nats())
}

/// Which way [`store_transfer`] moves the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreTransfer {
    /// From the NATS server into the home (`nanobot store export`).
    Export,
    /// From the home to the NATS server (`nanobot store import`).
    Import,
}

/// What [`store_transfer`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreTransferReport {
    /// The stream the files are kept on.
    pub stream: String,
    /// Files written (export) or published (import).
    pub moved: usize,
    /// Files that were the same on both sides.
    pub unchanged: usize,
    /// Files that differ on both sides and were left as they were (local paths on export, stored names on
    /// import).
    pub conflicts: Vec<String>,
    /// Stored names not written (no local place for them, or deleted in the store).
    pub skipped: Vec<String>,
}

/// Moves the shared files of `gateway.bus.nats` between the server and a home: `areas` maps each stored area
/// (`sessions`) to its local directory (`<data dir>/sessions/<workspace id>`), or a stored file's name
/// (`cron/jobs.json`) to its local path. A file that differs on both sides is
/// a conflict, left alone unless `overwrite`. The server is the one `gateway.bus.nats` names, whatever
/// `gateway.bus.kind` says (so a home can be moved before switching).
pub async fn store_transfer(
    config: &Config,
    areas: Vec<(String, std::path::PathBuf)>,
    how: StoreTransfer,
    overwrite: bool,
) -> Result<StoreTransferReport, GatewayError> {
    transfer(&config.gateway.bus.nats, areas, how, overwrite).await
}

#[cfg(feature = "nats")]
async fn transfer(
    c: &nanobot_config::NatsBusConfig,
    areas: Vec<(String, std::path::PathBuf)>,
    how: StoreTransfer,
    overwrite: bool,
) -> Result<StoreTransferReport, GatewayError> {
    let files = nanobot_store_nats::NatsFiles::open(&nats_settings(c))
        .await
        .map_err(|e| GatewayError::Bus(e.to_string()))?;
    let mut layout = nanobot_store_nats::HomeLayout::new();
    for (area, path) in areas {
        // A name with a `/` is one file (`cron/jobs.json`); a bare one is a folder of them (`sessions`).
        layout = if area.contains('/') {
            layout.file(&area, path)
        } else {
            layout.area(&area, path)
        };
    }
    let stream = files.stream_name().to_owned();
    let report = tokio::task::spawn_blocking(move || match how {
        StoreTransfer::Export => {
            nanobot_store_nats::export(&files, &layout, overwrite).map(|r| StoreTransferReport {
                stream: String::new(),
                moved: r.written,
                unchanged: r.unchanged,
                conflicts: r.conflicts.iter().map(|p| p.display().to_string()).collect(),
                skipped: r.skipped,
            })
        }
        StoreTransfer::Import => {
            nanobot_store_nats::import(&files, &layout, overwrite).map(|r| StoreTransferReport {
                stream: String::new(),
                moved: r.published,
                unchanged: r.unchanged,
                conflicts: r.conflicts,
                skipped: Vec::new(),
            })
        }
    })
    .await
    .map_err(|e| GatewayError::Bus(format!("the transfer task failed: {e}")))?
    .map_err(|e| GatewayError::Bus(e.to_string()))?;
    Ok(StoreTransferReport { stream, ..report })
}

#[cfg(not(feature = "nats"))]
async fn transfer(
    _: &nanobot_config::NatsBusConfig,
    _: Vec<(String, std::path::PathBuf)>,
    _: StoreTransfer,
    _: bool,
) -> Result<StoreTransferReport, GatewayError> {
    Err(no_nats())
}

/// The NATS bus of `c`; `unified_session` is the agent's (`agents.defaults.unifiedSession`: the unified
/// session's turns are ordered by its partition).
#[cfg(feature = "nats")]
async fn connect_nats(
    c: &nanobot_config::NatsBusConfig,
    unified_session: bool,
) -> Result<GatewayBus, GatewayError> {
    let mut settings = nats_settings(c);
    settings.unified_session = unified_session;
    let bus = nanobot_bus_nats::NatsBus::connect(settings)
        .await
        .map_err(|e| GatewayError::Bus(e.to_string()))?;
    Ok(GatewayBus::over(Arc::new(bus)))
}

#[cfg(not(feature = "nats"))]
async fn connect_nats(_: &nanobot_config::NatsBusConfig, _: bool) -> Result<GatewayBus, GatewayError> {
    Err(no_nats())
}

#[cfg(not(feature = "nats"))]
fn no_nats() -> GatewayError {
    GatewayError::Bus(
        "gateway.bus.kind is \"nats\", but this build has no NATS bus (cargo feature `nats`)".into(),
    )
}

/// How [`bus_status`] starts its words about a NATS server that asks its clients for no credentials.
pub const OPEN_BUS: &str = "OPEN: clients without credentials may publish";

/// What `nanobot doctor` says about `gateway.bus`: `Ok(None)` for the in-process bus; for NATS, the server, the
/// streams and the lease holders (read, nothing created), or why the server cannot be used.
pub async fn bus_status(config: &Config) -> Result<Option<String>, GatewayError> {
    match config.gateway.bus.kind {
        BusKind::Memory => Ok(None),
        BusKind::Nats => nats_status(&config.gateway.bus.nats).await.map(Some),
    }
}

#[cfg(feature = "nats")]
async fn nats_status(c: &nanobot_config::NatsBusConfig) -> Result<String, GatewayError> {
    let settings = nats_settings(c);
    let p = nanobot_bus_nats::probe(&settings)
        .await
        .map_err(|e| GatewayError::Bus(e.to_string()))?;
    let streams: Vec<String> = p
        .streams
        .iter()
        .map(|(name, n)| match n {
            Some(n) if name.ends_with("_FILES") => format!("{name} ({n} messages of shared files)"),
            Some(n) => format!("{name} ({n} waiting)"),
            None if name.ends_with("_FILES") => {
                format!("{name} (made by the first gateway with gateway.bus.nats.store \"jetstream\")")
            }
            None => format!("{name} (made by the first gateway)"),
        })
        .collect();
    let holders = if p.holders.is_empty() {
        "no lease held".to_owned()
    } else {
        p.holders
            .iter()
            .map(|(role, who)| format!("{role} by {who}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let auth = match p.anonymous {
        nanobot_bus_nats::AnonymousAccess::Publishes if c.allow_anonymous => format!(
            "{}; gateways start anyway (gateway.bus.nats.allowAnonymous)",
            p.anonymous.describe()
        ),
        nanobot_bus_nats::AnonymousAccess::Publishes => format!(
            "{}; gateways refuse to start on it (docs/scaling.md, \"Who can reach the bus\")",
            p.anonymous.describe()
        ),
        access => access.describe().to_owned(),
    };
    let sealed = if settings.key.is_some() {
        "messages sealed with the deployment key"
    } else {
        "messages not sealed (no gateway.bus.nats.key)"
    };
    Ok(format!(
        "NATS {} at {} ({auth}; {sealed}): {}; {holders}",
        p.server_version,
        settings.url_without_credentials(),
        streams.join(", ")
    ))
}

#[cfg(not(feature = "nats"))]
async fn nats_status(_: &nanobot_config::NatsBusConfig) -> Result<String, GatewayError> {
    Err(no_nats())
}

/// The bus settings of `gateway.bus.nats`.
#[cfg(feature = "nats")]
pub(crate) fn nats_settings(c: &nanobot_config::NatsBusConfig) -> nanobot_bus_nats::NatsBusSettings {
    let mut s = nanobot_bus_nats::NatsBusSettings::new(c.url.clone());
    let text = |v: &Option<String>| v.as_ref().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    let secret = |v: &Option<nanobot_config::Secret>| v.clone().filter(|t| !t.is_empty());
    let file = |v: &Option<String>| text(v).map(std::path::PathBuf::from);
    s.token = secret(&c.token);
    s.user = text(&c.user);
    s.password = secret(&c.password);
    s.nkey_seed = secret(&c.nkey_seed);
    s.creds_file = file(&c.creds_file);
    s.tls_cert = file(&c.tls_cert);
    s.tls_key = file(&c.tls_key);
    s.tls_ca_file = file(&c.tls_ca_file);
    s.allow_anonymous = c.allow_anonymous;
    s.key = secret(&c.key);
    s.stream = c.stream.clone();
    s.subject_prefix = c.subject_prefix.clone();
    s.partitions = c.partitions;
    s.ack_wait = Duration::from_secs(c.ack_wait_s);
    s.lease_time = Duration::from_secs(c.lease_time_s);
    if !c.replica.trim().is_empty() {
        s.replica = c.replica.trim().to_owned();
    }
    s.connect_timeout = Duration::from_secs(c.connect_timeout_s.max(1));
    s.request_timeout = Duration::from_secs(c.request_timeout_s.max(1));
    s.replicas = c.stream_replicas.max(1);
    s.outbound_max_age = Duration::from_secs(c.outbound_max_age_s);
    s
}

/// A channel that runs only while this replica holds its lease (see the module docs). Standing by, it waits
/// for the lease; when the lease is lost, the channel is stopped and waits again.
pub(crate) struct LeasedChannel {
    inner: Arc<dyn Channel>,
    leases: Arc<dyn Leases>,
    held: Arc<AtomicBool>,
}

impl LeasedChannel {
    /// `inner` under its channel lease; `held` tells the metrics whether this replica holds it.
    pub(crate) fn new(inner: Arc<dyn Channel>, leases: Arc<dyn Leases>, held: Arc<AtomicBool>) -> Self {
        Self { inner, leases, held }
    }

    /// Waits for the lease, keeping the watchdog quiet meanwhile; `None` when cancelled or the bus closed.
    async fn stand_by(&self, cancel: &CancellationToken) -> Option<Box<dyn Lease>> {
        let heartbeat = self.inner.heartbeat();
        let waiting = self.leases.acquire(Role::Channel(self.inner.name().to_owned()));
        tokio::pin!(waiting);
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                () = cancel.cancelled() => return None,
                taken = &mut waiting => return taken.ok(),
                _ = tick.tick() => {
                    // Standing by is progress: the watchdog must not restart a channel for waiting its turn.
                    if let Some(h) = &heartbeat {
                        h.beat();
                    }
                }
            }
        }
    }
}

#[async_trait]
impl Channel for LeasedChannel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let Some(lease) = self.stand_by(&cancel).await else {
            if !cancel.is_cancelled() {
                // The bus is closed: nothing to hold any more; wait for the gateway to stop.
                cancel.cancelled().await;
            }
            return Ok(());
        };
        self.held.store(true, Ordering::SeqCst);
        tracing::info!(channel = self.inner.name(), "this replica holds the channel");
        let stop = cancel.child_token();
        let running = self.inner.run(bus, stop.clone());
        tokio::pin!(running);
        let result = tokio::select! {
            r = &mut running => r,
            () = lease.lost() => {
                tracing::warn!(channel = self.inner.name(), "the channel's lease was lost: stopping it here");
                stop.cancel();
                tokio::time::timeout(STOP_GRACE, &mut running).await.unwrap_or(Ok(()))
            }
        };
        self.held.store(false, Ordering::SeqCst);
        drop(lease);
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        self.inner.send(msg).await
    }

    async fn send_receipted(
        &self,
        msg: &OutboundMessage,
        receipt: &mut Option<Box<dyn nanobot_bus::Receipt>>,
    ) -> Result<(), ChannelError> {
        self.inner.send_receipted(msg, receipt).await
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        self.inner.heartbeat()
    }

    fn supports_streaming(&self) -> bool {
        self.inner.supports_streaming()
    }

    fn supports_buttons(&self) -> bool {
        self.inner.supports_buttons()
    }
}
