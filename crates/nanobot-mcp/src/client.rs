//! Opening an MCP session to one configured server and listing what it offers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, Prompt, Resource, Tool};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};

use crate::transport::LegacySseTransport;
use crate::transport::stdio::{self, StdioLaunch};
use nanobot_tools::ssrf::SsrfGuard;

use crate::{McpError, SecretMap, ServerSpec, TransportSpec};

/// The client side of every session: identifies itself as nanobot and asks for nothing extra
/// (no sampling, roots or elicitation), which keeps servers from offering tools that would
/// call back into the agent. Remembers `list_changed` notifications so the manager re-lists.
#[derive(Debug, Clone, Default)]
pub(crate) struct NanobotClient {
    pub(crate) lists_changed: Arc<AtomicBool>,
    /// What a confined stdio server needs kept while the session lives.
    _sandbox: Option<Arc<stdio::SandboxHold>>,
}

impl NanobotClient {
    /// The egress proxy of the confined server this session talks to, if it has one.
    pub(crate) fn egress(&self) -> Option<Arc<nanobot_tools::egress::EgressProxy>> {
        self._sandbox.as_ref()?.egress.clone()
    }
}

impl ClientHandler for NanobotClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("nanobot", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.store(true, Ordering::SeqCst);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.store(true, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.store(true, Ordering::SeqCst);
    }
}

/// Everything `connect` needs besides the server's own settings.
pub(crate) struct ConnectEnv<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) parent_env: &'a nanobot_util::EnvMap,
    pub(crate) guard: &'a SsrfGuard,
    pub(crate) connect_timeout: Duration,
    pub(crate) confinement: &'a crate::StdioConfinement,
}

/// What a server offers.
#[derive(Debug, Default)]
pub(crate) struct Offer {
    pub(crate) tools: Vec<Tool>,
    pub(crate) resources: Vec<Resource>,
    pub(crate) prompts: Vec<Prompt>,
}

/// A live session and what the server offered when it was opened.
pub(crate) struct Session {
    pub(crate) service: RunningService<RoleClient, NanobotClient>,
    pub(crate) offer: Offer,
    pub(crate) server_version: Option<String>,
}

/// Headers rmcp sets itself; user values for these would break the protocol.
const RESERVED_HEADERS: &[&str] = &["accept", "mcp-session-id", "last-event-id", "content-type"];

fn header_map(spec: &ServerSpec, headers: &SecretMap) -> Result<HeaderMap, McpError> {
    let mut map = HeaderMap::new();
    for (k, v) in headers.iter() {
        if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
            tracing::warn!(server = %spec.name, header = %k, "ignoring a header the MCP transport sets itself");
            continue;
        }
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| McpError::Config {
            server: spec.name.clone(),
            reason: format!("field `headers`: {k:?} is not a valid header name"),
        })?;
        let mut value = HeaderValue::from_str(v).map_err(|_| McpError::Config {
            server: spec.name.clone(),
            reason: format!("field `headers.{k}`: the value is not a valid header value"),
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(map)
}

/// Runs `url` through the SSRF guard (scheme, host, every resolved address; whitelisted
/// CIDRs pass).
async fn check_url(spec: &ServerSpec, url: &str, guard: &SsrfGuard) -> Result<(), McpError> {
    guard
        .check_str(url)
        .await
        .map(|_| ())
        .map_err(|source| McpError::Blocked {
            server: spec.name.clone(),
            url: url.to_owned(),
            source,
        })
}

/// Connects to `spec`'s server, performs the handshake and lists tools, resources and prompts,
/// all within `env.connect_timeout`.
pub(crate) async fn connect(spec: &ServerSpec, env: &ConnectEnv<'_>) -> Result<Session, McpError> {
    let work = async {
        let service = open(spec, env).await?;
        let info = service.peer_info();
        let server_version = info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|s| format!("{} {}", s.name, s.version));
        let offer = list(spec, service.peer(), &service.service().lists_changed).await?;
        Ok(Session {
            service,
            offer,
            server_version,
        })
    };
    tokio::time::timeout(env.connect_timeout, work)
        .await
        .map_err(|_| McpError::ConnectTimeout {
            server: spec.name.clone(),
            timeout: env.connect_timeout,
        })?
}

async fn open(
    spec: &ServerSpec,
    env: &ConnectEnv<'_>,
) -> Result<RunningService<RoleClient, NanobotClient>, McpError> {
    let init_err = |e| McpError::Initialize {
        server: spec.name.clone(),
        source: Box::new(e),
    };
    match &spec.transport {
        TransportSpec::Stdio {
            command,
            args,
            env: configured,
            cwd,
            trusted,
            writable_paths,
        } => {
            let (child, hold) = stdio::spawn(StdioLaunch {
                server: &spec.name,
                command,
                args,
                parent_env: env.parent_env,
                configured,
                cwd: cwd.as_ref(),
                trusted: *trusted,
                writable_paths,
                confinement: env.confinement,
            })
            .await?;
            let client = NanobotClient {
                _sandbox: hold.map(Arc::new),
                ..NanobotClient::default()
            };
            client.serve(child).await.map_err(init_err)
        }
        TransportSpec::Sse { url, headers } => {
            check_url(spec, url, env.guard).await?;
            let transport = LegacySseTransport::connect(
                &spec.name,
                env.http.clone(),
                url,
                header_map(spec, headers)?,
                env.connect_timeout,
                spec.tool_timeout,
            )
            .await?;
            NanobotClient::default().serve(transport).await.map_err(init_err)
        }
        TransportSpec::StreamableHttp { url, headers } => {
            check_url(spec, url, env.guard).await?;
            let custom: HashMap<HeaderName, HeaderValue> = header_map(spec, headers)?
                .into_iter()
                .filter_map(|(k, v)| Some((k?, v)))
                .collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let transport = StreamableHttpClientTransport::with_client(env.http.clone(), config);
            NanobotClient::default().serve(transport).await.map_err(init_err)
        }
    }
}

/// Lists tools (and, when everything is enabled, resources and prompts). Clears `changed`
/// first, so a `list_changed` that arrives while listing triggers another listing later.
pub(crate) async fn list(
    spec: &ServerSpec,
    peer: &Peer<RoleClient>,
    changed: &AtomicBool,
) -> Result<Offer, McpError> {
    changed.store(false, Ordering::SeqCst);
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let tools = peer.list_all_tools().await.map_err(|e| McpError::Service {
        server: spec.name.clone(),
        operation: "tools/list",
        source: Box::new(e),
    })?;
    // Resources and prompts are extras: a server that advertises them but fails to list them
    // still gives us its tools.
    let mut offer = Offer {
        tools,
        ..Offer::default()
    };
    if spec.allows_all() {
        if caps.as_ref().is_some_and(|c| c.resources.is_some()) {
            match peer.list_all_resources().await {
                Ok(r) => offer.resources = r,
                Err(e) => tracing::debug!(server = %spec.name, "resources/list failed: {e}"),
            }
        }
        if caps.as_ref().is_some_and(|c| c.prompts.is_some()) {
            match peer.list_all_prompts().await {
                Ok(p) => offer.prompts = p,
                Err(e) => tracing::debug!(server = %spec.name, "prompts/list failed: {e}"),
            }
        }
    }
    Ok(offer)
}
