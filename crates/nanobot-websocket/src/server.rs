//! The HTTP side of the listener: the WebUI page and assets, `/webui/bootstrap`, the token issue route, and the
//! WebSocket upgrade with its checks (Host, Origin, allow-list, token, trusted proxy).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nanobot_bus::Bus;
use serde_json::{Map, Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig as WsConfig};
use tokio_util::sync::CancellationToken;

use crate::channel::{Identity, Inner, Peer, serve_connection};
use crate::settings::{Listen, is_loopback_host};
use crate::store::WebUiStore;
use crate::tokens::{Audience, ct_eq};

/// The page's content security policy: nothing from anywhere but this origin; no inline script or style.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const ICON_SVG: &str = include_str!("../assets/icon.svg");

/// The WebUI's embedded files: `(path, content type, body)`.
pub const ASSETS: [(&str, &str, &str); 4] = [
    ("/", "text/html; charset=utf-8", INDEX_HTML),
    ("/webui/app.js", "text/javascript; charset=utf-8", APP_JS),
    ("/webui/app.css", "text/css; charset=utf-8", APP_CSS),
    ("/webui/icon.svg", "image/svg+xml", ICON_SVG),
];

#[derive(Clone)]
pub(crate) struct App {
    pub(crate) inner: Arc<Inner>,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) cancel: CancellationToken,
}

pub(crate) fn router(app: App) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn query(uri: &axum::http::Uri, key: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `host[:port]` of an `Origin` (`null` and malformed origins give `None`).
fn origin_authority(origin: &str) -> Option<&str> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))?;
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

impl App {
    fn peer_ip(req: &Request) -> Option<IpAddr> {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    }

    /// DNS-rebinding guard: on a loopback listener the `Host` must name loopback (a page on `evil.example` that
    /// resolves to 127.0.0.1 sends `Host: evil.example`).
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        match &self.inner.settings.listen {
            Listen::Tcp { host, .. } if is_loopback_host(host) => {
                header_str(headers, "host").is_some_and(|h| is_loopback_host(host_name(h)))
            }
            _ => true,
        }
    }

    /// A browser always sends `Origin` on WebSocket upgrades and cross-origin requests: it must be this very
    /// origin (or `publicWsUrl`'s host). Programs that send none are judged by their token alone.
    fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = header_str(headers, "origin") else {
            return true;
        };
        let Some(auth) = origin_authority(origin.trim()) else {
            return false;
        };
        let host = header_str(headers, "host").unwrap_or_default();
        if auth.eq_ignore_ascii_case(host) {
            return true;
        }
        self.inner.settings.public_ws_url.as_deref().is_some_and(|u| {
            let rest = u.split_once("://").map_or(u, |(_, r)| r);
            let public = rest.split('/').next().unwrap_or_default();
            auth.eq_ignore_ascii_case(public)
        })
    }

    fn proxy_authenticated(&self, req: &Request) -> bool {
        self.inner
            .settings
            .trusted_proxy
            .as_ref()
            .is_some_and(|p| p.admits(Self::peer_ip(req), header_str(req.headers(), &p.header)))
    }

    /// A request from this machine's browser: loopback peer (or a Unix socket) and a loopback `Host`, with no
    /// forwarding header naming anything else.
    fn is_local_browser(&self, req: &Request) -> bool {
        let peer_local = match Self::peer_ip(req) {
            Some(ip) => is_loopback_host(&ip.to_string()),
            None => matches!(self.inner.settings.listen, Listen::Unix(_)),
        };
        let h = req.headers();
        let host_local = header_str(h, "host").is_some_and(|v| is_loopback_host(host_name(v)));
        let forwarded_local = ["x-forwarded-for", "x-real-ip", "x-forwarded-host"]
            .iter()
            .all(|name| {
                h.get_all(*name).iter().all(|v| {
                    v.to_str().is_ok_and(|s| {
                        s.split(',')
                            .map(str::trim)
                            .filter(|p| !p.is_empty())
                            .all(|p| is_loopback_host(host_name(p)))
                    })
                })
            })
            && h.get("forwarded").is_none();
        peer_local && host_local && forwarded_local
    }

    fn secret_presented(&self, headers: &HeaderMap) -> bool {
        let secret = self.inner.settings.token_issue_secret.expose();
        let bearer = header_str(headers, "authorization").and_then(|a| {
            let (scheme, rest) = a.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
        let supplied = bearer.or_else(|| header_str(headers, "x-nanobot-auth").map(str::trim));
        supplied.is_some_and(|s| ct_eq(s, secret))
    }

    fn ws_url(&self, headers: &HeaderMap) -> String {
        if let Some(u) = &self.inner.settings.public_ws_url {
            return u.clone();
        }
        let host = header_str(headers, "host")
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or("127.0.0.1");
        let proto = header_str(headers, "x-forwarded-proto").unwrap_or_default();
        let secure = proto.split(',').next().unwrap_or_default().trim();
        let scheme = if secure.eq_ignore_ascii_case("https")
            || secure.eq_ignore_ascii_case("wss")
            || self.inner.settings.tls.is_some()
        {
            "wss"
        } else {
            "ws"
        };
        format!("{scheme}://{host}{}", self.inner.settings.path)
    }
}

async fn handle(State(app): State<App>, req: Request) -> Response {
    if !app.host_ok(req.headers()) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            "Host is not this loopback server\n",
        );
    }
    let path = req.uri().path().to_string();
    let s = &app.inner.settings;
    let is_upgrade =
        header_str(req.headers(), "upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    if path == s.path && is_upgrade {
        return upgrade(app, req).await;
    }
    if path.starts_with("/api/") {
        return api(&app, req).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    }
    if s.token_issue_path.as_deref() == Some(path.as_str()) {
        return issue(&app, &req);
    }
    if path == "/webui/bootstrap" {
        return bootstrap(&app, &req);
    }
    let path = if path == "/index.html" { "/" } else { path.as_str() };
    match ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, ctype, body)) => {
            let mut r = Response::new(Body::from(*body));
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
            h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            r
        }
        None => text(StatusCode::NOT_FOUND, "Not Found\n"),
    }
}

/// The principal of every connection that presented the configured static `token`.
const STATIC_TOKEN_CLIENT: &str = "static-token";

/// `GET tokenIssuePath`: a one-time client token (0.3.5: `{"token", "expires_in"}`). With `?client_id=NAME`
/// (nanobot-rs) the token is bound to that client: the connection it opens is that client, owns that client's
/// chats, and may not declare another `client_id`.
fn issue(app: &App, req: &Request) -> Response {
    let s = &app.inner.settings;
    if !s.token_issue_secret.is_empty() && !app.secret_presented(req.headers()) {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
    }
    if s.token_issue_secret.is_empty() {
        tracing::warn!(
            "websocket: tokenIssuePath is set without tokenIssueSecret: anyone who reaches it gets tokens"
        );
    }
    let client = query(req.uri(), "client_id")
        .map(|c| c.trim().chars().take(128).collect::<String>())
        .filter(|c| !c.is_empty());
    match app.inner.tokens.issue(s.token_ttl, Audience::Client(client)) {
        Some(t) => json_response(
            StatusCode::OK,
            &json!({"token": t, "expires_in": s.token_ttl.as_secs()}),
        ),
        None => json_response(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({"error": "too many outstanding tokens"}),
        ),
    }
}

/// `GET /webui/bootstrap`: a one-time WebUI token for this machine's browser (or for whoever presents the
/// secret, or a trusted proxy's authenticated user).
fn bootstrap(app: &App, req: &Request) -> Response {
    if !app.origin_ok(req.headers()) {
        return text(StatusCode::FORBIDDEN, "Forbidden origin\n");
    }
    let s = &app.inner.settings;
    let proxied = app.proxy_authenticated(req);
    if !proxied {
        if !s.token_issue_secret.is_empty() {
            if !app.secret_presented(req.headers()) {
                return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "Unauthorized"}));
            }
        } else if !app.is_local_browser(req) {
            return json_response(
                StatusCode::FORBIDDEN,
                &json!({"error": "bootstrap is localhost-only"}),
            );
        }
    }
    let mut body = json!({
        "ws_path": s.path,
        "ws_url": app.ws_url(req.headers()),
        "expires_in": s.token_ttl.as_secs(),
        "limits": {"max_frame_bytes": s.max_message_bytes, "attachments": {
            "max_count": crate::media::MAX_ATTACHMENTS, "max_file_bytes": crate::media::MAX_FILE_BYTES}},
    });
    if !proxied {
        let socket = app.inner.tokens.issue(s.token_ttl, Audience::WebUi);
        let api = app.inner.tokens.issue_api(s.token_ttl);
        match (socket, api) {
            (Some(t), Some(a)) => {
                body["token"] = json!(t);
                body["api_token"] = json!(a);
            }
            _ => {
                return json_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    &json!({"error": "too many outstanding tokens"}),
                );
            }
        }
    }
    json_response(StatusCode::OK, &body)
}

fn api_error(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({"error": message}))
}

/// The `/api/…` routes of 0.3.5 the WebUI reads with (writes go over the socket, as in 0.3.5):
///
/// - `GET /api/sessions` (`?query=` filters by title or key): `{"sessions": [...]}`
/// - `GET /api/sessions/<key>/webui-thread`: `{"schemaVersion", "sessionKey", "messages", ...}`
/// - `POST /api/sessions/<key>/delete`: `{"deleted": bool}`
/// - `GET /api/commands`: `{"commands": [{"name", "description"}]}`
/// - `GET /api/settings`: the store's read-only settings (`agent`, `providers`, `requires_restart`)
///
/// Authorisation as in 0.3.5: the `api_token` from `/webui/bootstrap` as `Authorization: Bearer …` (or
/// `?token=`), or a trusted proxy's assertion. No cookies are involved, so another site's page cannot make an
/// authorised request (and a browser's `Origin` must be this origin anyway).
async fn api(app: &App, req: Request) -> Response {
    let proxied = app.proxy_authenticated(&req);
    let (req, _body) = req.into_parts();
    if !app.origin_ok(&req.headers) {
        return api_error(StatusCode::FORBIDDEN, "Forbidden origin");
    }
    let bearer = header_str(&req.headers, "authorization").and_then(|a| {
        let (scheme, rest) = a.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim().to_string())
    });
    let token = bearer.or_else(|| query(&req.uri, "token"));
    let authorised = proxied || token.is_some_and(|t| !t.is_empty() && app.inner.tokens.check_api(&t));
    if !authorised {
        return api_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let Some(store) = app.inner.store.clone() else {
        return api_error(StatusCode::SERVICE_UNAVAILABLE, "session manager unavailable");
    };
    let path = req.uri.path();
    let method = req.method.clone();
    let get = method == Method::GET || method == Method::HEAD;
    let run = |action: &'static str, payload: Map<String, Value>| {
        let store = store.clone();
        async move { webui_action(store.as_ref(), action, &payload).await }
    };
    let answer = |r: Result<Value, (u16, String)>| match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err((code, message)) => api_error(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &message,
        ),
    };
    match path {
        "/api/sessions" if get => {
            let mut payload = Map::new();
            if let Some(q) = query(&req.uri, "query") {
                payload.insert("query".into(), q.into());
            }
            answer(run("sessions.list", payload).await)
        }
        "/api/commands" if get => answer(run("commands.list", Map::new()).await),
        "/api/settings" if get => answer(run("settings.read", Map::new()).await),
        "/api/sessions" | "/api/commands" | "/api/settings" => {
            api_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        }
        _ => {
            let Some(rest) = path.strip_prefix("/api/sessions/") else {
                return api_error(StatusCode::NOT_FOUND, "API route not found");
            };
            let Some((raw_key, route)) = rest.split_once('/') else {
                return api_error(StatusCode::NOT_FOUND, "API route not found");
            };
            let key = percent_decode(raw_key);
            if key.trim().is_empty() || key.len() > 512 || key.chars().any(char::is_control) {
                return api_error(StatusCode::BAD_REQUEST, "invalid session key");
            }
            let mut payload = Map::new();
            payload.insert("key".into(), key.clone().into());
            match route {
                "webui-thread" if get => match run("session.messages", payload).await {
                    Ok(v) => json_response(
                        StatusCode::OK,
                        &json!({
                            "schemaVersion": 1,
                            "sessionKey": key,
                            "messages": v.get("messages").cloned().unwrap_or_else(|| json!([])),
                            "completed_turn_ids": [],
                            "has_pending_tool_calls": false,
                            "active_turn_id": null,
                        }),
                    ),
                    Err(e) => answer(Err(e)),
                },
                "delete" if method == Method::POST => match run("session.delete", payload).await {
                    Ok(v) => json_response(
                        StatusCode::OK,
                        &json!({"deleted": v.get("deleted").cloned().unwrap_or(json!(false))}),
                    ),
                    Err(e) => answer(Err(e)),
                },
                "webui-thread" | "delete" => api_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
                _ => api_error(StatusCode::NOT_FOUND, "API route not found"),
            }
        }
    }
}

/// The WebSocket upgrade: Origin, allow-list, then the token rules of 0.3.5.
async fn upgrade(app: App, mut req: Request) -> Response {
    if !app.origin_ok(req.headers()) {
        return text(StatusCode::FORBIDDEN, "Forbidden origin\n");
    }
    let s = &app.inner.settings;
    let raw_client = query(req.uri(), "client_id").unwrap_or_default();
    let client_id: String = raw_client.trim().chars().take(128).collect();
    let supplied = query(req.uri(), "token").filter(|t| !t.is_empty());
    // Who the connection is, from what it proved; never from what it declares when it proved something.
    let mut identity = None;
    let mut bound_client = None;
    if app.proxy_authenticated(&req) {
        identity = Some(Identity::Owner);
    } else {
        let static_ok =
            !s.token.is_empty() && supplied.as_deref().is_some_and(|t| ct_eq(t, s.token.expose()));
        if static_ok {
            // Everyone holding the configured token is one principal: they share their chats (not the WebUI's).
            identity = Some(Identity::Client(STATIC_TOKEN_CLIENT.to_owned()));
        } else if let Some(audience) = supplied.as_deref().and_then(|t| app.inner.tokens.take(t)) {
            identity = Some(match audience {
                Audience::WebUi => Identity::Owner,
                Audience::Client(Some(bound)) => {
                    if !client_id.is_empty() && client_id != bound {
                        return text(StatusCode::FORBIDDEN, "client_id does not match the token\n");
                    }
                    bound_client = Some(bound.clone());
                    Identity::Client(bound)
                }
                // An unbound token is a client of its own: its chats are nobody else's.
                Audience::Client(None) => {
                    Identity::Client(format!("unbound-token:{}", uuid::Uuid::new_v4().simple()))
                }
            });
        }
        if (!s.token.is_empty() || s.requires_token) && identity.is_none() {
            return text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        }
    }
    let Some(key) = header_str(req.headers(), "sec-websocket-key").map(str::to_owned) else {
        return text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key\n");
    };
    if header_str(req.headers(), "sec-websocket-version") != Some("13") {
        return text(StatusCode::UPGRADE_REQUIRED, "WebSocket version 13 required\n");
    }
    let client_id = match bound_client {
        Some(bound) => bound,
        None if client_id.is_empty() => format!("anon-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        None => client_id,
    };
    // `allowFrom` names clients: the one the token is bound to, else the one declared.
    if !app.inner.allow.allows(&client_id) {
        return text(StatusCode::FORBIDDEN, "Forbidden\n");
    }
    // Without any token configured, nothing is proved: the declared client is who the connection is.
    let identity = identity.unwrap_or_else(|| Identity::Client(client_id.clone()));
    let peer = Peer {
        trusted: identity == Identity::Owner,
        client_id,
        remote: req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0),
        identity,
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let max = s.max_message_bytes;
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let config = WsConfig::default()
                    .max_message_size(Some(max))
                    .max_frame_size(Some(max));
                let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
                serve_connection(app, ws, peer).await;
            }
            Err(e) => tracing::debug!(error = %e, "websocket: upgrade failed"),
        }
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

/// One `webui_request` action against the store: the result, or `(status, message)`.
pub(crate) async fn webui_action(
    store: &dyn WebUiStore,
    action: &str,
    payload: &Map<String, Value>,
) -> Result<Value, (u16, String)> {
    let failed = |e: crate::WebSocketError| {
        tracing::warn!(error = %e, action, "websocket: WebUI request failed");
        (500u16, "the store could not be read".to_string())
    };
    // Only this channel's chats are the WebUI's to read or delete, as in 0.3.5: another channel's session (a
    // Telegram chat, say) is "not found" here, whoever holds the token.
    let own_chat = format!("{}:", crate::NAME);
    let key = || -> Result<String, (u16, String)> {
        if let Some(k) = payload
            .get("key")
            .and_then(Value::as_str)
            .filter(|k| !k.trim().is_empty())
        {
            if !k.starts_with(&own_chat) {
                return Err((404, "session not found".into()));
            }
            return Ok(k.to_string());
        }
        match payload.get("chat_id").and_then(Value::as_str) {
            Some(c) if crate::is_valid_chat_id(c) => Ok(format!("{}:{c}", crate::NAME)),
            _ => Err((400, "missing session key".into())),
        }
    };
    match action {
        "sessions.list" => {
            let q = payload
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim()
                .to_lowercase();
            let mut rows = store.sessions().await.map_err(failed)?;
            rows.retain(|r| r.key.starts_with(&own_chat));
            if !q.is_empty() {
                rows.retain(|r| r.title.to_lowercase().contains(&q) || r.key.to_lowercase().contains(&q));
            }
            Ok(json!({"sessions": rows}))
        }
        "session.messages" => {
            let k = key()?;
            Ok(json!({"key": k, "messages": store.messages(&k).await.map_err(failed)?}))
        }
        "session.delete" => {
            let k = key()?;
            Ok(json!({"key": k, "deleted": store.delete(&k).await.map_err(failed)?}))
        }
        "memory.read" => Ok(json!({"text": store.memory().await.map_err(failed)?})),
        "history.read" => {
            let limit = payload
                .get("limit")
                .and_then(Value::as_u64)
                .unwrap_or(50)
                .clamp(1, 500);
            let limit = usize::try_from(limit).unwrap_or(50);
            Ok(json!({"entries": store.history(limit).await.map_err(failed)?}))
        }
        "cron.list" => Ok(json!({"jobs": store.cron_jobs().await.map_err(failed)?})),
        "settings.read" => match store.settings().await {
            Ok(v) => Ok(v),
            Err(crate::WebSocketError::Unsupported(_)) => Err((404, "settings are not available".into())),
            Err(e) => Err(failed(e)),
        },
        "commands.list" => {
            let list: Vec<Value> = store
                .commands()
                .into_iter()
                .map(|(name, description)| json!({"name": name, "description": description}))
                .collect();
            Ok(json!({"commands": list}))
        }
        _ => Err((404, "unknown WebUI action".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_decoded() {
        let uri: axum::http::Uri = "/?client_id=a%20b&token=x%2By&bad=%zz".parse().unwrap();
        assert_eq!(query(&uri, "client_id").as_deref(), Some("a b"));
        assert_eq!(query(&uri, "token").as_deref(), Some("x+y"));
        assert_eq!(query(&uri, "bad").as_deref(), Some("%zz"));
        assert_eq!(query(&uri, "none"), None);
    }

    #[test]
    fn origins_and_hosts_parse() {
        assert_eq!(origin_authority("http://127.0.0.1:8765"), Some("127.0.0.1:8765"));
        assert_eq!(origin_authority("null"), None);
        assert_eq!(origin_authority("http://a/b"), None);
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("localhost:8765"), "localhost");
        assert_eq!(host_name("evil.example"), "evil.example");
    }
}
