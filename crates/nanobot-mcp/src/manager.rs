//! [`McpManager`]: every configured server, connected lazily and concurrently.

use nanobot_util::lock;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nanobot_tools::ssrf::SsrfGuard;
use nanobot_tools::{Tool, ToolRegistry};
use nanobot_util::error_chain;
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};

use crate::client::{self, ConnectEnv, NanobotClient, Offer, Session};
use crate::naming::{self, prompt_name, resource_name, tool_name};
use crate::wrap::{McpTool, ServerLink};
use crate::{McpError, RawServer, ServerSpec, TransportKind};

/// Default limit for spawning/handshaking/listing one server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default pause before a failed server is tried again.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// Default cap on the text one MCP result may hand the model.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 200_000;
/// How long shutdown waits for one server to go away (stdio: stdin closed, SIGTERM, kill).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings shared by all servers. The caller passes in what a library may not read itself.
///
/// `Debug` shows only the names of `parent_env`, never its values.
#[derive(Clone)]
pub struct McpOptions {
    /// The parent process environment; stdio servers get only its harmless part
    /// ([`crate::INHERITED_ENV`]) plus their configured `env`.
    pub parent_env: nanobot_util::EnvMap,
    /// Where images returned by tools are saved (`None`: described in text, not saved).
    pub media_dir: Option<PathBuf>,
    /// Checks every HTTP server URL; `tools.ssrfWhitelist` CIDRs pass.
    pub ssrf: SsrfGuard,
    /// The HTTP client for SSE / streamable HTTP. `None` builds one from
    /// [`SsrfGuard::client_builder`] (DNS answers checked at connect time, no redirects). A
    /// shared client must not have a total request timeout: the SSE stream lives long.
    pub http_client: Option<reqwest::Client>,
    /// Limit for spawning, handshaking and listing one server.
    pub connect_timeout: Duration,
    /// A failed server is retried on a later [`McpManager::connect`] once this has passed.
    pub retry_interval: Duration,
    /// Longest text one result may hand the model; the rest is cut with a note.
    pub max_result_chars: usize,
    /// How stdio servers are confined (a server with `trusted: true` is not). By default: bubblewrap where it
    /// works, else Landlock, nothing hidden, a temporary directory of its own per start.
    pub confinement: crate::StdioConfinement,
}

impl std::fmt::Debug for McpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpOptions")
            .field("parent_env", &self.parent_env)
            .field("media_dir", &self.media_dir)
            .field("ssrf", &self.ssrf)
            .field("http_client", &self.http_client.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_interval", &self.retry_interval)
            .field("max_result_chars", &self.max_result_chars)
            .field("confinement", &self.confinement)
            .finish()
    }
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            parent_env: nanobot_util::EnvMap::new(),
            media_dir: None,
            ssrf: SsrfGuard::default(),
            http_client: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry_interval: DEFAULT_RETRY_INTERVAL,
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            confinement: crate::StdioConfinement::default(),
        }
    }
}

/// Whether a server is usable.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Not tried yet (connection is lazy).
    NotConnected,
    /// Connected; its tools are registered.
    Connected,
    /// The last attempt failed (or the server went away); the error text.
    Failed(String),
}

/// One line of `nanobot mcp list` / `nanobot status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The configured name.
    pub name: String,
    /// The transport in use.
    pub transport: TransportKind,
    /// Command line or URL (no secrets).
    pub target: String,
    /// Connected, failed, or not tried.
    pub state: ConnectionState,
    /// Names (as the model sees them) of the tools, resources and prompts registered.
    pub tools: Vec<String>,
    /// `serverInfo` name and version, once connected.
    pub server_version: Option<String>,
    /// Problems worth showing the user (e.g. `enabledTools` entries that match nothing).
    pub warnings: Vec<String>,
}

impl ServerStatus {
    /// True when the server is connected.
    pub fn connected(&self) -> bool {
        self.state == ConnectionState::Connected
    }
}

struct Live {
    service: RunningService<RoleClient, NanobotClient>,
    tools: Vec<Arc<dyn Tool>>,
    server_version: Option<String>,
    warnings: Vec<String>,
}

impl Live {
    fn alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }
}

enum SlotState {
    NotConnected,
    Connected(Box<Live>),
    Failed { error: String, at: Instant },
}

struct Slot {
    spec: ServerSpec,
    state: Mutex<SlotState>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock only means another thread panicked mid-update; the state is still a
        // valid enum value.
        lock(&self.state)
    }
}

struct Inner {
    slots: Vec<Slot>,
    opts: McpOptions,
    http: Mutex<Option<reqwest::Client>>,
    /// Serialises `connect` so two messages arriving together do not spawn a server twice.
    connecting: tokio::sync::Mutex<()>,
    /// Names this manager put into a registry (see [`McpManager::register_into`]).
    registered: Mutex<HashSet<String>>,
}

/// All configured MCP servers.
///
/// Nothing happens at construction: [`McpManager::connect`] (called by the agent before a turn)
/// connects every server that is not connected yet, all at once; a server that fails is logged
/// and tried again on a later call, while the others work. [`McpManager::tools`] lists the
/// wrapped tools of the connected servers. Cheap to clone.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field(
                "servers",
                &self.inner.slots.iter().map(|s| &s.spec.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl McpManager {
    /// A manager for `servers` (nothing is started yet).
    pub fn new(servers: Vec<ServerSpec>, opts: McpOptions) -> Self {
        let slots = servers
            .into_iter()
            .map(|spec| Slot {
                spec,
                state: Mutex::new(SlotState::NotConnected),
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                slots,
                opts,
                http: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
                registered: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// A manager for the servers as written (`tools.mcpServers`, name and raw fields). Servers whose fields are
    /// unusable are left out and returned as errors (log them); the rest work.
    pub fn from_raw(
        servers: impl IntoIterator<Item = (String, RawServer)>,
        opts: McpOptions,
    ) -> (Self, Vec<McpError>) {
        let mut specs = Vec::new();
        let mut errors = Vec::new();
        for (name, raw) in servers {
            match ServerSpec::resolve(&name, raw) {
                Ok(spec) => specs.push(spec),
                Err(e) => errors.push(e),
            }
        }
        (Self::new(specs, opts), errors)
    }

    /// True when no server is configured (then [`McpManager::connect`] costs nothing).
    pub fn is_empty(&self) -> bool {
        self.inner.slots.is_empty()
    }

    /// The configured servers.
    pub fn specs(&self) -> impl Iterator<Item = &ServerSpec> {
        self.inner.slots.iter().map(|s| &s.spec)
    }

    /// Connects every server that is not connected (never tried, gone away, or failed more
    /// than `retry_interval` ago), concurrently, and returns everyone's status. Never fails:
    /// problems are logged and reported in the status.
    pub async fn connect(&self) -> Vec<ServerStatus> {
        self.connect_inner(false).await
    }

    /// Like [`McpManager::connect`], but retries failed servers regardless of `retry_interval`.
    pub async fn reconnect_failed(&self) -> Vec<ServerStatus> {
        self.connect_inner(true).await
    }

    async fn connect_inner(&self, force_retry: bool) -> Vec<ServerStatus> {
        if self.is_empty() {
            return Vec::new();
        }
        let _serial = self.inner.connecting.lock().await;
        let now = Instant::now();
        let mut due = Vec::new();
        let mut stale = Vec::new();
        let mut changed = Vec::new();
        for (i, slot) in self.inner.slots.iter().enumerate() {
            let mut state = slot.lock();
            let needs = match &*state {
                SlotState::NotConnected => true,
                SlotState::Connected(live) => !live.alive(),
                SlotState::Failed { at, .. } => {
                    force_retry || now.duration_since(*at) >= self.inner.opts.retry_interval
                }
            };
            if !needs
                && let SlotState::Connected(live) = &*state
                && live.service.service().lists_changed.load(Ordering::SeqCst)
            {
                changed.push((
                    i,
                    live.service.peer().clone(),
                    live.service.service().lists_changed.clone(),
                ));
            }
            if needs {
                if let SlotState::Connected(_) = &*state {
                    tracing::warn!(server = %slot.spec.name, "MCP server went away; reconnecting");
                    if let SlotState::Connected(live) =
                        std::mem::replace(&mut *state, SlotState::NotConnected)
                    {
                        stale.push(live);
                    }
                }
                due.push(i);
            }
        }
        for live in stale {
            let mut live = *live;
            let _ = live.service.close_with_timeout(SHUTDOWN_TIMEOUT).await;
        }
        if !due.is_empty() {
            let http = self.http_client();
            let env = ConnectEnv {
                http: &http,
                parent_env: &self.inner.opts.parent_env,
                guard: &self.inner.opts.ssrf,
                connect_timeout: self.inner.opts.connect_timeout,
                confinement: &self.inner.opts.confinement,
            };
            let attempts = due.iter().map(|&i| {
                let spec = &self.inner.slots[i].spec;
                let env = &env;
                async move { (i, client::connect(spec, env).await) }
            });
            let results = futures::future::join_all(attempts).await;
            let mut taken = self.taken_names(None);
            for (i, result) in results {
                let slot = &self.inner.slots[i];
                let new_state = match result {
                    Ok(session) => {
                        let live = self.wrap(&slot.spec, session, &mut taken);
                        tracing::info!(
                            server = %slot.spec.name,
                            transport = %slot.spec.transport.kind(),
                            tools = live.tools.len(),
                            "MCP server connected"
                        );
                        SlotState::Connected(Box::new(live))
                    }
                    Err(e) => {
                        let error = error_chain(&e);
                        tracing::warn!(server = %slot.spec.name, "MCP server failed (will retry later): {error}");
                        SlotState::Failed {
                            error,
                            at: Instant::now(),
                        }
                    }
                };
                *slot.lock() = new_state;
            }
        }
        for (i, peer, flag) in changed {
            self.refresh(i, &peer, &flag).await;
        }
        self.status()
    }

    /// Re-lists a connected server after it announced a changed list, and swaps its tools.
    async fn refresh(&self, i: usize, peer: &Peer<RoleClient>, flag: &AtomicBool) {
        let slot = &self.inner.slots[i];
        let listing = client::list(&slot.spec, peer, flag);
        let offer = match tokio::time::timeout(self.inner.opts.connect_timeout, listing).await {
            Ok(Ok(offer)) => offer,
            Ok(Err(e)) => {
                tracing::warn!(server = %slot.spec.name, "re-listing failed: {}", error_chain(&e));
                return;
            }
            Err(_) => {
                tracing::warn!(server = %slot.spec.name, "re-listing timed out");
                return;
            }
        };
        let mut taken = self.taken_names(Some(i));
        let egress = match &*slot.lock() {
            SlotState::Connected(live) => live.service.service().egress(),
            _ => None,
        };
        let (tools, warnings) = self.build_tools(&slot.spec, peer, egress, &offer, &mut taken);
        tracing::info!(server = %slot.spec.name, tools = tools.len(), "MCP server changed its lists");
        if let SlotState::Connected(live) = &mut *slot.lock() {
            live.tools = tools;
            live.warnings = warnings;
        }
    }

    /// The shared client, built on first use.
    fn http_client(&self) -> reqwest::Client {
        let mut guard = lock(&self.inner.http);
        if let Some(client) = &*guard {
            return client.clone();
        }
        let client = match &self.inner.opts.http_client {
            Some(c) => c.clone(),
            None => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                match self
                    .inner
                    .opts
                    .ssrf
                    .client_builder()
                    .connect_timeout(Duration::from_secs(15))
                    .build()
                {
                    Ok(c) => c,
                    Err(e) => {
                        // Only a broken TLS setup gets here; fall back to a plain client so that
                        // the URL check still runs and the error shows up per request.
                        tracing::warn!("cannot build the MCP HTTP client: {e}");
                        reqwest::Client::new()
                    }
                }
            }
        };
        *guard = Some(client.clone());
        client
    }

    /// Names of tools already registered by connected servers.
    fn taken_names(&self, except: Option<usize>) -> HashSet<String> {
        let mut taken = HashSet::new();
        for (i, slot) in self.inner.slots.iter().enumerate() {
            if Some(i) == except {
                continue;
            }
            if let SlotState::Connected(live) = &*slot.lock() {
                taken.extend(live.tools.iter().map(|t| t.name().to_owned()));
            }
        }
        taken
    }

    /// Wraps a fresh session's tools, resources and prompts, applying `enabledTools`.
    fn wrap(&self, spec: &ServerSpec, session: Session, taken: &mut HashSet<String>) -> Live {
        let egress = session.service.service().egress();
        let (tools, warnings) = self.build_tools(spec, session.service.peer(), egress, &session.offer, taken);
        Live {
            service: session.service,
            tools,
            server_version: session.server_version,
            warnings,
        }
    }

    /// Wraps what a server offers, applying `enabledTools`; returns the tools and warnings.
    fn build_tools(
        &self,
        spec: &ServerSpec,
        peer: &Peer<RoleClient>,
        egress: Option<Arc<nanobot_tools::egress::EgressProxy>>,
        offer: &Offer,
        taken: &mut HashSet<String>,
    ) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
        let link = Arc::new(ServerLink {
            server: spec.name.clone(),
            peer: peer.clone(),
            timeout: spec.tool_timeout,
            media_dir: self.inner.opts.media_dir.clone(),
            max_chars: self.inner.opts.max_result_chars,
            declared_read_only: spec.read_only,
            egress,
        });
        let mut unique = |base: String, raw: String| -> String {
            let name = if taken.contains(&base) {
                naming::with_hash_suffix(&base, &raw)
            } else {
                base
            };
            taken.insert(name.clone());
            name
        };
        let all = spec.allows_all();
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut matched: HashSet<&str> = HashSet::new();
        for tool in &offer.tools {
            let wrapped = tool_name(&spec.name, &tool.name);
            if !all {
                let hit = spec
                    .enabled_tools
                    .iter()
                    .find(|e| e.as_str() == tool.name.as_ref() || **e == wrapped);
                match hit {
                    Some(e) => {
                        matched.insert(e.as_str());
                    }
                    None => continue,
                }
            }
            let name = unique(wrapped, format!("{}/tool/{}", spec.name, tool.name));
            tools.push(Arc::new(McpTool::tool(name, tool, link.clone())));
        }
        let mut warnings = Vec::new();
        if !all {
            let available: Vec<&str> = offer.tools.iter().map(|t| t.name.as_ref()).collect();
            for entry in &spec.enabled_tools {
                if !matched.contains(entry.as_str()) {
                    let msg = format!(
                        "enabledTools entry '{entry}' matches no tool of server '{}' (available: {})",
                        spec.name,
                        available.join(", ")
                    );
                    tracing::warn!(server = %spec.name, "{msg}");
                    warnings.push(msg);
                }
            }
        } else {
            for resource in &offer.resources {
                let name = unique(
                    resource_name(&spec.name, &resource.name),
                    format!("{}/resource/{}", spec.name, resource.uri),
                );
                tools.push(Arc::new(McpTool::resource(name, resource, link.clone())));
            }
            for prompt in &offer.prompts {
                let name = unique(
                    prompt_name(&spec.name, &prompt.name),
                    format!("{}/prompt/{}", spec.name, prompt.name),
                );
                tools.push(Arc::new(McpTool::prompt(name, prompt, link.clone())));
            }
        }
        (tools, warnings)
    }

    /// The wrapped tools of every connected server, sorted by name (a stable prompt).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for slot in &self.inner.slots {
            if let SlotState::Connected(live) = &*slot.lock() {
                tools.extend(live.tools.iter().cloned());
            }
        }
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// [`McpManager::connect`], then [`McpManager::register_into`]: what the agent calls before
    /// each turn.
    pub async fn connect_into(&self, registry: &ToolRegistry) -> Vec<ServerStatus> {
        let status = self.connect().await;
        self.register_into(registry);
        status
    }

    /// Makes `registry` hold exactly the current MCP tools: registers (or replaces) every tool of
    /// the connected servers and unregisters the ones this manager registered before that are
    /// gone (server reconnected with fewer tools, or shut down). Other tools are not touched.
    pub fn register_into(&self, registry: &ToolRegistry) {
        let tools = self.tools();
        let current: HashSet<String> = tools.iter().map(|t| t.name().to_owned()).collect();
        let mut registered = lock(&self.inner.registered);
        for old in registered.difference(&current) {
            registry.unregister(old);
        }
        for tool in tools {
            registry.register(tool);
        }
        *registered = current;
    }

    /// Each server's status, in configuration order (no connection attempt).
    pub fn status(&self) -> Vec<ServerStatus> {
        self.inner
            .slots
            .iter()
            .map(|slot| {
                let spec = &slot.spec;
                let mut status = ServerStatus {
                    name: spec.name.clone(),
                    transport: spec.transport.kind(),
                    target: spec.transport.target(),
                    state: ConnectionState::NotConnected,
                    tools: Vec::new(),
                    server_version: None,
                    warnings: Vec::new(),
                };
                match &*slot.lock() {
                    SlotState::NotConnected => {}
                    SlotState::Connected(live) if !live.alive() => {
                        status.state = ConnectionState::Failed("the server went away".into());
                    }
                    SlotState::Connected(live) => {
                        status.state = ConnectionState::Connected;
                        status.tools = live.tools.iter().map(|t| t.name().to_owned()).collect();
                        status.server_version = live.server_version.clone();
                        status.warnings = live.warnings.clone();
                    }
                    SlotState::Failed { error, .. } => {
                        status.state = ConnectionState::Failed(error.clone());
                    }
                }
                status
            })
            .collect()
    }

    /// Closes every session: stdio servers get stdin closed, then SIGTERM, then a kill of their
    /// process group, and are reaped (no zombies). The manager can connect again afterwards.
    pub async fn shutdown(&self) {
        let _serial = self.inner.connecting.lock().await;
        let mut lives = Vec::new();
        for slot in &self.inner.slots {
            let mut state = slot.lock();
            if let SlotState::Connected(live) = std::mem::replace(&mut *state, SlotState::NotConnected) {
                lives.push((slot.spec.name.clone(), live));
            }
        }
        let closing = lives.into_iter().map(|(name, live)| async move {
            let mut live = *live;
            match live.service.close_with_timeout(SHUTDOWN_TIMEOUT).await {
                Ok(Some(_)) => tracing::debug!(server = %name, "MCP server closed"),
                Ok(None) => tracing::warn!(server = %name, "MCP server did not close in time"),
                Err(e) => tracing::warn!(server = %name, "MCP server close failed: {e}"),
            }
        });
        futures::future::join_all(closing).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_debug_hides_environment_values() {
        let opts = McpOptions {
            parent_env: nanobot_util::EnvMap::from_iter([("OPENAI_API_KEY", "sk-parent-secret")]),
            ..McpOptions::default()
        };
        let dbg = format!("{opts:?}");
        assert!(dbg.contains("OPENAI_API_KEY"), "{dbg}");
        assert!(!dbg.contains("sk-parent-secret"), "{dbg}");
    }

    #[tokio::test]
    async fn no_servers_means_no_work() {
        let manager = McpManager::new(Vec::new(), McpOptions::default());
        assert!(manager.is_empty());
        assert!(manager.connect().await.is_empty());
        assert!(manager.tools().is_empty());
        manager.shutdown().await;
    }

    #[test]
    fn config_errors_leave_the_other_servers_in() {
        let good = RawServer {
            command: Some("srv".into()),
            ..RawServer::default()
        };
        let servers = [
            ("good".to_owned(), good),
            ("bad".to_owned(), RawServer::default()),
        ];
        let (manager, errors) = McpManager::from_raw(servers, McpOptions::default());
        assert_eq!(
            manager.specs().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["good"]
        );
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("'bad'"), "{}", errors[0]);
    }
}
