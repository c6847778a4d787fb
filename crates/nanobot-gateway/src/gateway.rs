//! [`Gateway`]: starts the agent, the channels, cron + heartbeat and the HTTP servers from one config, and
//! shuts them down gracefully.

use nanobot_util::lock;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nanobot_bus::{Bus, InboundMessage, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, HealthRegistry, ManagerSettings, PairingStore,
};
use nanobot_config::Config;
use nanobot_core::{AgentLoop, CoreError, RestartRequest, SystemJob, TurnReply};
use nanobot_providers::Provider;
use nanobot_runtime::{Environment, Runtime, RuntimeOptions, TurnObserver, TurnWatch};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiSettings, api_router_with_limits};
use crate::bus::GatewayBus;
use crate::error::GatewayError;
use crate::http::{OpsState, ops_router};
use crate::metrics::{InFlight, Metrics, TurnOutcome};
use axum::extract::DefaultBodyLimit;

/// Default time running turns get to finish after a shutdown signal.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Capacity of each bus direction.
const BUS_CAPACITY: usize = 1024;

/// What to start. Build with [`GatewayOptions::gateway`] or [`GatewayOptions::serve`], then adjust.
#[derive(Clone)]
#[non_exhaustive]
pub struct GatewayOptions {
    /// The loaded config (with `-w` already applied to `agents.defaults.workspace`).
    pub config: Config,
    /// Home, environment variables and config path (never read from the process by this crate).
    pub env: Environment,
    /// `--port`: overrides `gateway.port`.
    pub port: Option<u16>,
    /// Serve the OpenAI-compatible API on `api.host:api.port` (`--no-api` turns it off).
    pub api: bool,
    /// Serve `/health`, `/ready`, `/metrics` on `gateway.host:gateway.port`.
    pub ops_http: bool,
    /// Run the chat channels enabled in the config.
    pub channels: bool,
    /// Run the cron service with the `dream` and `heartbeat` system jobs (installed and run by the runtime).
    pub cron: bool,
    /// How long running turns may take to finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Use this provider instead of resolving one from the config (tests, embedding).
    pub provider: Option<Arc<dyn Provider>>,
}

impl std::fmt::Debug for GatewayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayOptions")
            .field("port", &self.port)
            .field("api", &self.api)
            .field("ops_http", &self.ops_http)
            .field("channels", &self.channels)
            .field("cron", &self.cron)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish_non_exhaustive()
    }
}

impl GatewayOptions {
    /// `nanobot gateway`: channels, cron, heartbeat and the ops server; the OpenAI-compatible API only when
    /// the config asks for it ([`config_wants_api`]) — the Python nanobot's gateway never runs it.
    pub fn gateway(config: Config, env: Environment) -> Self {
        Self {
            api: config_wants_api(&config),
            config,
            env,
            port: None,
            ops_http: true,
            channels: true,
            cron: true,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            provider: None,
        }
    }

    /// `nanobot serve`: the OpenAI-compatible API alone.
    pub fn serve(config: Config, env: Environment) -> Self {
        Self {
            api: true,
            ops_http: false,
            channels: false,
            cron: false,
            ..Self::gateway(config, env)
        }
    }
}

/// How a shutdown went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// True when every running turn finished before the deadline (none had to be cancelled).
    pub drained: bool,
}

/// A running gateway. Stop it with [`Gateway::shutdown`].
pub struct Gateway {
    runtime: Runtime,
    bus: GatewayBus,
    metrics: Metrics,
    health: HealthRegistry,
    http_addr: Option<SocketAddr>,
    api_addr: Option<SocketAddr>,
    stop_channels: CancellationToken,
    servers: Vec<JoinHandle<()>>,
    channels_task: JoinHandle<()>,
    grace: Duration,
    websocket: Option<nanobot_websocket::WebSocketChannel>,
    /// The addresses of the channels their platforms call (webhooks), by name.
    listeners: Vec<(String, tokio::sync::watch::Receiver<Option<SocketAddr>>)>,
    restart: Arc<RestartSlot>,
}

/// Where `/restart` leaves its request for [`Gateway::restart_requested`].
#[derive(Default)]
struct RestartSlot {
    request: std::sync::Mutex<Option<RestartRequest>>,
    notify: tokio::sync::Notify,
}

/// The variables 0.3.5 passes to the process a `/restart` starts, naming the chat to tell when it is up.
pub const RESTART_NOTIFY_CHANNEL_VAR: &str = "NANOBOT_RESTART_NOTIFY_CHANNEL";
/// See [`RESTART_NOTIFY_CHANNEL_VAR`].
pub const RESTART_NOTIFY_CHAT_ID_VAR: &str = "NANOBOT_RESTART_NOTIFY_CHAT_ID";
/// See [`RESTART_NOTIFY_CHANNEL_VAR`] (JSON object: the `/restart` message's metadata).
pub const RESTART_NOTIFY_METADATA_VAR: &str = "NANOBOT_RESTART_NOTIFY_METADATA";
/// See [`RESTART_NOTIFY_CHANNEL_VAR`] (seconds since the epoch, when the restart began).
pub const RESTART_STARTED_AT_VAR: &str = "NANOBOT_RESTART_STARTED_AT";

/// The variables to give the process that replaces this one after `request` (0.3.5's names and values).
pub fn restart_notice_vars(request: &RestartRequest) -> Vec<(&'static str, String)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let mut vars = vec![
        (RESTART_NOTIFY_CHANNEL_VAR, request.channel.clone()),
        (RESTART_NOTIFY_CHAT_ID_VAR, request.chat_id.clone()),
        (RESTART_STARTED_AT_VAR, format!("{now}")),
    ];
    if !request.metadata.is_empty() {
        vars.push((
            RESTART_NOTIFY_METADATA_VAR,
            serde_json::Value::Object(request.metadata.clone()).to_string(),
        ));
    }
    vars
}

/// The "Restart completed" notice the environment asks for (0.3.5's variables and text), if any.
fn restart_notice(env: &nanobot_util::EnvMap) -> Option<OutboundMessage> {
    let channel = env.non_empty(RESTART_NOTIFY_CHANNEL_VAR)?.trim().to_owned();
    let chat_id = env.non_empty(RESTART_NOTIFY_CHAT_ID_VAR)?.trim().to_owned();
    let elapsed = env
        .non_empty(RESTART_STARTED_AT_VAR)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|started| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            Some(format!(" in {:.1}s", (now - started).max(0.0)))
        })
        .unwrap_or_default();
    let mut out = OutboundMessage::reply(&channel, &chat_id, format!("Restart completed{elapsed}."));
    if let Some(serde_json::Value::Object(m)) = env
        .non_empty(RESTART_NOTIFY_METADATA_VAR)
        .and_then(|v| serde_json::from_str(v).ok())
    {
        out.metadata = m;
    }
    Some(out)
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("http_addr", &self.http_addr)
            .field("api_addr", &self.api_addr)
            .finish_non_exhaustive()
    }
}

/// Resolves `host:port`; the error names the config key.
async fn resolve(field: &'static str, host: &str, port: u16) -> Result<Vec<SocketAddr>, GatewayError> {
    let bad = || GatewayError::BadAddress {
        field,
        value: host.to_owned(),
    };
    let host = host.trim();
    if host.is_empty() {
        return Err(bad());
    }
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target)
        .await
        .map_err(|_| bad())?
        .collect();
    if addrs.is_empty() {
        return Err(bad());
    }
    Ok(addrs)
}

async fn bind(field: &'static str, addrs: &[SocketAddr]) -> Result<TcpListener, GatewayError> {
    let mut last = None;
    for addr in addrs {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some((*addr, e)),
        }
    }
    match last {
        Some((addr, source)) => Err(GatewayError::Bind { field, addr, source }),
        None => Err(GatewayError::BadAddress {
            field,
            value: String::new(),
        }),
    }
}

/// Whether the gateway runs the OpenAI-compatible API without being told (`--api`): when `api.apiKey` is set.
pub fn config_wants_api(config: &Config) -> bool {
    api_key(config).is_some()
}

/// The API key of `config.api`, when one is set.
fn api_key(config: &Config) -> Option<String> {
    config
        .api
        .api_key
        .as_ref()
        .map(|k| k.expose().to_owned())
        .filter(|k| !k.is_empty())
}

/// Checks the API's bind address before anything starts: a non-loopback address needs `api.apiKey`.
pub async fn check_api_bind(config: &Config) -> Result<Vec<SocketAddr>, GatewayError> {
    let addrs = resolve("api.host", &config.api.host, config.api.port).await?;
    if api_key(config).is_none() && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(GatewayError::UnprotectedApi {
            host: config.api.host.clone(),
            port: config.api.port,
        });
    }
    Ok(addrs)
}

/// The chat adapters this build has, each plugged in by its descriptor (its crate's `DESCRIPTOR`): one line per
/// channel, the only place a channel is named outside its own crate. Each is a cargo feature of this crate, all on
/// by default (`all-channels`). The WebUI's `websocket` channel is built apart (it reads this
/// agent's sessions and memory).
pub const CHANNELS: &[nanobot_channels::ChannelDescriptor] = &[
    #[cfg(feature = "telegram")]
    nanobot_telegram::DESCRIPTOR,
    #[cfg(feature = "discord")]
    nanobot_discord::DESCRIPTOR,
    #[cfg(feature = "slack")]
    nanobot_slack::DESCRIPTOR,
    #[cfg(feature = "feishu")]
    nanobot_feishu::DESCRIPTOR,
    #[cfg(feature = "dingtalk")]
    nanobot_dingtalk::DESCRIPTOR,
    #[cfg(feature = "email")]
    nanobot_email::DESCRIPTOR,
    #[cfg(feature = "whatsapp")]
    nanobot_whatsapp::DESCRIPTOR,
    #[cfg(feature = "qq")]
    nanobot_qq::DESCRIPTOR,
    #[cfg(feature = "mochat")]
    nanobot_mochat::DESCRIPTOR,
    #[cfg(feature = "napcat")]
    nanobot_napcat::DESCRIPTOR,
    #[cfg(feature = "mattermost")]
    nanobot_mattermost::DESCRIPTOR,
    #[cfg(feature = "msteams")]
    nanobot_msteams::DESCRIPTOR,
    #[cfg(feature = "signal")]
    nanobot_signal::DESCRIPTOR,
    #[cfg(feature = "matrix")]
    nanobot_matrix::DESCRIPTOR,
    #[cfg(feature = "wecom")]
    nanobot_wecom::DESCRIPTOR,
    #[cfg(feature = "weixin")]
    nanobot_weixin::DESCRIPTOR,
];

/// [`CHANNELS`]' names and `websocket`.
const fn built_names<const N: usize>() -> [&'static str; N] {
    let mut out = [nanobot_websocket::NAME; N];
    let mut i = 0;
    while i < CHANNELS.len() {
        out[i] = CHANNELS[i].name;
        i += 1;
    }
    out
}

const BUILT: [&str; CHANNELS.len() + 1] = built_names::<{ CHANNELS.len() + 1 }>();

/// The chat channels this build can run: the names of [`CHANNELS`] and `websocket` (the WebUI's, always built).
/// Every other enabled channel block is refused at start-up ([`unsupported_channels`]) and reported by `status`,
/// `channels status` and `doctor`.
pub const BUILT_CHANNELS: &[&str] = &BUILT;

/// The variable that lets the gateway start without the enabled channels it cannot run (any non-empty
/// value but `0`/`false`): they are then named in a warning instead of stopping the start.
pub const ALLOW_UNSUPPORTED_CHANNELS_VAR: &str = "NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS";

/// Channels enabled in `config` (`"enabled": true`) that this build cannot run, in file order.
pub fn unsupported_channels(config: &Config) -> Vec<String> {
    let ch = &config.channels;
    let typed = [
        ("telegram", ch.telegram.enabled),
        ("discord", ch.discord.enabled),
        ("slack", ch.slack.enabled),
    ];
    typed
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| n)
        .chain(ch.other.names().filter(|n| ch.other.is_enabled(n)))
        .filter(|n| !BUILT_CHANNELS.contains(n))
        .map(str::to_owned)
        .collect()
}

/// Refuses enabled channels this build cannot run, unless [`ALLOW_UNSUPPORTED_CHANNELS_VAR`] is set (then it
/// warns, naming them).
fn check_unsupported_channels(config: &Config, env: &Environment) -> Result<(), GatewayError> {
    let names = unsupported_channels(config);
    if names.is_empty() {
        return Ok(());
    }
    let allowed = env
        .vars
        .get(ALLOW_UNSUPPORTED_CHANNELS_VAR)
        .is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"));
    if allowed {
        tracing::warn!(
            channels = %names.join(", "),
            "enabled channels this build cannot run are NOT started ({ALLOW_UNSUPPORTED_CHANNELS_VAR} is set)"
        );
        return Ok(());
    }
    Err(GatewayError::UnsupportedChannels { names })
}

/// The channels enabled in `config`, each built by its descriptor with the services shared here.
fn build_channels(
    config: &Config,
    env: &Environment,
    metrics: &Metrics,
    workspace: &std::path::Path,
) -> Result<Vec<Arc<dyn Channel>>, GatewayError> {
    let paths = env.paths();
    let (data_dir, media_root) = (paths.data_dir(), paths.media_dir(None));
    let pairing_cell = std::cell::OnceCell::new();
    let pairing = || -> Result<Arc<PairingStore>, ChannelError> {
        if let Some(p) = pairing_cell.get() {
            return Ok(Arc::clone(p));
        }
        let path = data_dir.join("pairing.json");
        let store = Arc::new(PairingStore::open(&path).map_err(|e| ChannelError::Config {
            channel: "pairing".into(),
            message: format!("cannot open {}: {e}", path.display()),
        })?);
        Ok(Arc::clone(pairing_cell.get_or_init(|| store)))
    };
    // One transcriber (the configured speech-to-text provider) for every channel that receives voice notes, made
    // only when the first such channel is built.
    let transcriber_cell = std::cell::OnceCell::new();
    let transcriber = || -> Option<Arc<dyn nanobot_channels::Transcribe>> {
        transcriber_cell
            .get_or_init(
                || match nanobot_providers::transcriber_from_config(config, &env.vars) {
                    Ok(t) => {
                        t.map(|t| Arc::new(VoiceToText(Arc::new(t))) as Arc<dyn nanobot_channels::Transcribe>)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "voice notes are not transcribed");
                        None
                    }
                },
            )
            .clone()
    };
    let services = nanobot_channels::Services {
        places: nanobot_channels::Places {
            data_dir: &data_dir,
            media_root: &media_root,
            workspace,
            vars: &env.vars,
        },
        pairing: &pairing,
        transcriber: &transcriber,
        refusals: Some({
            let metrics = metrics.clone();
            Arc::new(move |server, kind| nanobot_http::RefusalObserver::refused(&metrics, server, kind))
        }),
    };
    let mut out: Vec<Arc<dyn Channel>> = Vec::new();
    for d in CHANNELS.iter().filter(|d| d.enabled(config)) {
        out.push((d.build)(config, &services).map_err(channel_error(d.name))?);
    }
    Ok(out)
}

/// The providers' transcriber as a channel's [`nanobot_channels::Transcribe`].
struct VoiceToText(Arc<dyn nanobot_providers::Transcriber>);

#[async_trait::async_trait]
impl nanobot_channels::Transcribe for VoiceToText {
    async fn transcribe(&self, path: &std::path::Path) -> Result<String, nanobot_channels::TranscribeError> {
        let audio = tokio::fs::read(path)
            .await
            .map_err(|e| nanobot_channels::TranscribeError(Box::new(e)))?;
        let name = path
            .file_name()
            .map_or_else(|| "voice.ogg".into(), |n| n.to_string_lossy().into_owned());
        let mime = match path.extension().and_then(|e| e.to_str()).unwrap_or_default() {
            "mp3" => "audio/mpeg",
            "m4a" | "mp4" => "audio/mp4",
            "aac" => "audio/aac",
            "amr" => "audio/amr",
            "wav" => "audio/wav",
            _ => "audio/ogg",
        };
        self.0
            .transcribe(audio, &name, mime)
            .await
            .map_err(|e| nanobot_channels::TranscribeError(Box::new(e)))
    }
}

/// The `websocket` channel when `channels.websocket` exists and is enabled (0.3.5 turns it on by default inside
/// the block `nanobot onboard` writes; with no block at all no port is opened). Its WebUI reads this agent's
/// sessions, memory and cron jobs.
fn build_websocket(
    config: &Config,
    env: &Environment,
    agent: &AgentLoop,
) -> Result<Option<nanobot_websocket::WebSocketChannel>, GatewayError> {
    let Some(block) = config.channels.other.get(nanobot_websocket::NAME) else {
        return Ok(None);
    };
    let raw = nanobot_websocket::WebSocketConfig::from_json(block)
        .map_err(channel_error(nanobot_websocket::NAME))?;
    if !raw.enabled {
        return Ok(None);
    }
    let settings = nanobot_websocket::WebSocketSettings::from_config(&raw)
        .map_err(channel_error(nanobot_websocket::NAME))?;
    let store = crate::webui::GatewayWebUiStore {
        sessions: agent.sessions().clone(),
        workspace: agent.settings().workspace.clone(),
        settings: crate::webui::settings_view(config),
    };
    let channel = nanobot_websocket::WebSocketChannel::new(
        settings,
        env.paths().media_dir(Some(nanobot_websocket::NAME)),
    )
    .with_store(Arc::new(store));
    Ok(Some(channel))
}

/// Maps a channel's construction error to the gateway error naming that channel.
fn channel_error(channel: &'static str) -> impl FnOnce(ChannelError) -> GatewayError {
    move |source| GatewayError::Channel { channel, source }
}

/// Feeds the gateway's metrics from the runtime's dispatcher and system jobs.
struct MetricsObserver(Metrics);

struct MetricsWatch {
    metrics: Metrics,
    channel: String,
    in_flight: InFlight,
}

impl TurnObserver for MetricsObserver {
    fn scheduler_held(&self, held: bool) {
        self.0
            .role_held(&nanobot_bus::Role::Scheduler)
            .store(held, std::sync::atomic::Ordering::SeqCst);
    }

    fn turn_started(&self, msg: &InboundMessage) -> Box<dyn TurnWatch> {
        Box::new(MetricsWatch {
            metrics: self.0.clone(),
            channel: msg.channel.clone(),
            in_flight: self.0.turn_started(),
        })
    }

    fn system_job_finished(&self, job: SystemJob, result: Result<&str, &str>) {
        if job != SystemJob::Heartbeat {
            return;
        }
        match result {
            Ok(decision) => self.0.record_heartbeat(decision),
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed");
                self.0.record_heartbeat("error");
                self.0.record_error("heartbeat");
            }
        }
    }
}

impl TurnWatch for MetricsWatch {
    fn finished(self: Box<Self>, result: &Result<TurnReply, CoreError>) {
        let outcome = match result {
            Ok(r) => TurnOutcome::from_stop(r.stop_reason),
            Err(_) => TurnOutcome::Error,
        };
        self.metrics
            .record_turn(&self.channel, outcome, self.in_flight.elapsed());
    }
}

impl Gateway {
    /// Starts everything `opts` asks for. Fails before anything runs when the API would be exposed without a
    /// key, a port cannot be bound, or the provider/channels cannot be built.
    pub async fn start(opts: GatewayOptions) -> Result<Self, GatewayError> {
        nanobot_providers::install_ring();
        let config = &opts.config;
        let api_addrs = if opts.api {
            Some(check_api_bind(config).await?)
        } else {
            None
        };
        let http_addrs = if opts.ops_http {
            let port = opts.port.unwrap_or(config.gateway.port);
            Some(resolve("gateway.host", &config.gateway.host, port).await?)
        } else {
            None
        };
        let provider = match &opts.provider {
            Some(p) => p.clone(),
            None => nanobot_runtime::provider(config, &opts.env)?,
        };
        let metrics = Metrics::new();
        let bus = crate::replicas::connect(config, BUS_CAPACITY).await?;
        let shared = crate::replicas::shared_files(config).await?;
        // Each replica of a shared file store has a home of its own (its local trigger queue runs there).
        let own_home = shared.is_some();
        let agent = nanobot_runtime::agent_builder_shared(config, &opts.env, provider.clone(), shared)?
            .hook(metrics.calls_hook())
            .bus(Arc::new(bus.clone()))
            .build()?;
        // Tokens and costs of every call recorded, in a turn or not.
        match agent.usage_ledger() {
            Some(ledger) => metrics.count_usage_of(ledger),
            None => tracing::warn!("the agent has no usage ledger: /metrics counts no tokens"),
        }
        nanobot_runtime::warn_if_exec_degraded(config, &opts.env, &agent.settings().workspace);
        // `/restart` (for the owner) ends this gateway gracefully; the caller starts the next one.
        let restart = Arc::new(RestartSlot::default());
        {
            let slot = restart.clone();
            agent.set_restart_handler(Arc::new(move |request: RestartRequest| {
                *lock(&slot.request) = Some(request);
                slot.notify.notify_one();
            }));
        }
        let mut channels = if opts.channels {
            check_unsupported_channels(config, &opts.env)?;
            build_channels(config, &opts.env, &metrics, &agent.settings().workspace)?
        } else {
            Vec::new()
        };
        let websocket = if opts.channels {
            build_websocket(config, &opts.env, &agent)?
        } else {
            None
        };
        if let Some(ws) = &websocket {
            channels.push(Arc::new(ws.clone()));
        }
        let channel_names: Vec<String> = channels.iter().map(|c| c.name().to_owned()).collect();
        let listeners = channels
            .iter()
            .filter_map(|c| c.listening().map(|l| (c.name().to_owned(), l)))
            .collect();

        // Listeners first: a port in use fails the start before anything runs.
        let http_listener = match &http_addrs {
            Some(a) => Some(bind("gateway.port", a).await?),
            None => None,
        };
        // The API beside channels is one part among others: a busy port stops that part only, with an error
        // saying so. Alone (`nanobot serve`) it is the whole point, and fails the start.
        let api_is_a_part = opts.ops_http || opts.channels;
        let api_listener = match &api_addrs {
            Some(a) => match bind("api.port", a).await {
                Ok(l) => Some(l),
                Err(e) if api_is_a_part => {
                    tracing::error!(
                        error = %e,
                        "the OpenAI-compatible API is not started (the rest of the gateway runs): free the port, \
                         set another `api.port` in config.json, or pass --no-api"
                    );
                    None
                }
                Err(e) => return Err(e),
            },
            None => None,
        };

        let stop_channels = CancellationToken::new();

        // Attachments go out from nanobot's media folders only (the message tool copies what it sends into
        // `media/outbox`), never from elsewhere (config.json, sessions, the workspace): whoever put the message on
        // the bus (issue 42).
        let paths = opts.env.paths();
        let mut manager =
            ChannelManager::new(ManagerSettings::from_config(&config.channels)).with_media_roots(
                nanobot_channels::MediaRoots::new(vec![paths.media_dir(None)], Vec::new()),
            );
        let leases = bus.leases();
        for c in channels {
            match &leases {
                // Replicas on a shared bus: one at a time holds each channel.
                Some(leases) => {
                    let held = metrics.role_held(&nanobot_bus::Role::Channel(c.name().to_owned()));
                    manager.add(Arc::new(crate::replicas::LeasedChannel::new(
                        c,
                        leases.clone(),
                        held,
                    )));
                }
                None => manager.add(c),
            }
        }
        let health = manager.health();
        let channels_task = tokio::spawn(manager.run(Arc::new(bus.clone()), stop_channels.clone()));
        // Started by a `/restart` (ours or 0.3.5's): tell the chat that asked.
        if let Some(notice) = restart_notice(&opts.env.vars)
            && let Err(e) = bus.publish_outbound(notice).await
        {
            tracing::warn!(error = %e, "cannot send the restart notice");
        }

        // The one dispatcher, cron with the system jobs (the heartbeat runs once per tick, through the agent).
        let runtime = Runtime::start(
            agent.clone(),
            Arc::new(bus.clone()),
            config,
            RuntimeOptions::default()
                .with_cron(opts.cron)
                .with_own_home(own_home)
                .with_observer(Arc::new(MetricsObserver(metrics.clone()))),
        )?;
        let accept = runtime.accepting();
        let tracker = runtime.tracker();

        let mut servers = Vec::new();
        let mut http_addr = None;
        if let Some(listener) = http_listener {
            http_addr = listener.local_addr().ok();
            let router = ops_router(OpsState {
                metrics: metrics.clone(),
                bus: bus.clone(),
                channels: health.clone(),
                provider: provider.name().to_owned(),
                model: agent.settings().model.clone(),
                websocket: websocket.clone(),
            });
            let limits = crate::server::limits_from_config(&config.gateway.limits);
            let router = router.layer(DefaultBodyLimit::max(limits.max_other_body_bytes));
            servers.push(crate::server::serve(
                listener,
                router,
                limits,
                metrics.clone(),
                accept.clone(),
                "gateway",
            ));
        }
        let mut api_addr = None;
        if let Some(listener) = api_listener {
            api_addr = listener.local_addr().ok();
            // A local model may take minutes to load and read the prompt on its first call: left at its
            // default, the API waits as long as the turn may run (`timeouts.turn`, 1200 s for a local model).
            let mut timeout = Duration::from_secs_f64(config.api.timeout.clamp(1.0, 86_400.0));
            if config.api.timeout == nanobot_config::ApiConfig::default().timeout
                && nanobot_runtime::model_is_local(config, &opts.env)
            {
                timeout = timeout.max(agent.settings().turn_timeout);
            }
            let settings = ApiSettings {
                model: agent.settings().model.clone(),
                api_key: api_key(config),
                timeout,
            };
            let limits = crate::server::limits_from_config(&config.api.limits);
            let router =
                api_router_with_limits(agent.clone(), settings, metrics.clone(), tracker.clone(), &limits);
            servers.push(crate::server::serve(
                listener,
                router,
                limits,
                metrics.clone(),
                accept.clone(),
                "api",
            ));
        }
        tracing::info!(?http_addr, ?api_addr, channels = ?channel_names, "gateway started");
        Ok(Self {
            runtime,
            bus,
            metrics,
            health,
            http_addr,
            api_addr,
            stop_channels,
            servers,
            channels_task,
            grace: opts.shutdown_grace,
            websocket,
            listeners,
            restart,
        })
    }

    /// Waits until an owner sends `/restart`; returns the chat that asked.
    pub async fn restart_requested(&self) -> RestartRequest {
        loop {
            let notified = self.restart.notify.notified();
            if let Some(r) = lock(&self.restart.request).take() {
                return r;
            }
            notified.await;
        }
    }

    /// Where `/health`, `/ready` and `/metrics` are served.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// Where the OpenAI-compatible API is served.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr
    }

    /// Where the `websocket` channel (and its WebUI) listens, once bound; waits up to 10 s for the bind.
    pub async fn websocket_addr(&self) -> Option<SocketAddr> {
        match &self.websocket {
            Some(ws) => ws.wait_bound(Duration::from_secs(10)).await,
            None => None,
        }
    }

    /// The address the channel `name` listens on for its platform's requests (a webhook such as Teams'), waiting up
    /// to 10 s for it to open; `None` for a channel that only connects out, or one that did not open in time.
    pub async fn channel_addr(&self, name: &str) -> Option<SocketAddr> {
        let (_, listening) = self.listeners.iter().find(|(n, _)| n == name)?;
        let mut listening = listening.clone();
        let bound = tokio::time::timeout(Duration::from_secs(10), listening.wait_for(Option::is_some)).await;
        bound.ok()?.ok().and_then(|a| *a)
    }

    /// The agent loop.
    pub fn agent(&self) -> &AgentLoop {
        self.runtime.agent()
    }

    /// The bus (publish inbound messages as a channel would).
    pub fn bus(&self) -> &GatewayBus {
        &self.bus
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The channels' health.
    pub fn channel_health(&self) -> &HealthRegistry {
        &self.health
    }

    /// Graceful shutdown: stop accepting (HTTP, channels' inbound, cron), let running turns finish up to the
    /// deadline (then cancel them; cancelled turns still save what they did), deliver queued replies, stop the
    /// channels, the agent and its MCP servers.
    pub async fn shutdown(self) -> ShutdownReport {
        let deadline = Instant::now() + self.grace;
        tracing::info!(
            in_flight = self.metrics.in_flight(),
            "shutting down: waiting for running turns"
        );
        let mut runtime = self.runtime;
        self.bus.close_inbound();
        runtime.stop_accepting(deadline).await;
        let mut servers = self.servers;
        let drained = runtime.drain(deadline).await
            && tokio::time::timeout_at(deadline, async {
                for s in &mut servers {
                    let _ = s.await;
                }
            })
            .await
            .is_ok();
        if !drained {
            tracing::warn!("shutdown deadline reached: cancelling the remaining turns");
            runtime.shutdown().await;
            let _ = tokio::time::timeout(Duration::from_secs(5), runtime.tracker().wait()).await;
            for s in &servers {
                s.abort();
            }
        }
        // Let the channels deliver what is queued, then stop them.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while self.bus.outbound_len() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        self.stop_channels.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.channels_task).await;
        // Stops the agent's workers and MCP servers.
        runtime.shutdown().await;
        // A shared bus stops pulling here; what it still holds waits on the server for the other replicas.
        self.bus.close();
        tracing::info!(drained, "gateway stopped");
        ShutdownReport { drained }
    }
}
