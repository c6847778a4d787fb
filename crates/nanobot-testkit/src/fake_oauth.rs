//! Fake authorisation servers for the OAuth providers, over real HTTP on `127.0.0.1`.
//!
//! [`FakeGithub`] plays GitHub's device flow (`/login/device/code`, `/login/oauth/access_token` with a scripted
//! sequence of [`Poll`] answers), the user lookup (`/user`) and the Copilot token exchange
//! (`/copilot_internal/v2/token`, handing out `copilot-token-1`, `copilot-token-2`, …). [`FakeOpenAi`] plays the
//! ChatGPT sign-in's token endpoint (PKCE checked, refresh) and the Codex Responses API. Every request is recorded
//! ([`Seen`]). [`FakeGithub::env`] gives the variables that point nanobot at it.

use nanobot_util::lock;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The GitHub OAuth token the fake grants.
pub const GITHUB_TOKEN: &str = "gho_fake_github_token_0123456789";
/// The user code the fake shows.
pub const USER_CODE: &str = "WDJB-MJHT";
/// The account name `/user` answers.
pub const GITHUB_LOGIN: &str = "octocat";

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Seen {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` in a form-encoded body.
    pub fn form(&self, key: &str) -> Option<String> {
        self.body.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| decode(v))
        })
    }
}

fn decode(v: &str) -> String {
    let bytes = v.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = bytes.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(h), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One answer of the device-flow token endpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    /// `{"error": "authorization_pending"}`.
    Pending,
    /// `{"error": "slow_down", "interval": n}` (the server's new interval, 0 to leave it out).
    SlowDown(u64),
    /// `{"error": "expired_token"}`.
    Expired,
    /// `{"error": "access_denied"}`.
    Denied,
    /// The token ([`GITHUB_TOKEN`]).
    Granted,
    /// This status and body.
    Raw(u16, Value),
}

#[derive(Debug)]
struct GithubState {
    polls: VecDeque<Poll>,
    interval: u64,
    expires_in: u64,
    copilot_ttl: i64,
    copilot_status: Option<(u16, Value)>,
    exchanges: usize,
    seen: Vec<Seen>,
}

/// A fake GitHub (device flow, user lookup, Copilot token exchange). Dropping it stops the server.
#[derive(Debug)]
pub struct FakeGithub {
    addr: SocketAddr,
    state: Arc<Mutex<GithubState>>,
    task: JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl FakeGithub {
    /// Starts on the caller's runtime. After the scripted polls the token endpoint answers
    /// [`Poll::Granted`]. The device code asks for a 1-second interval and lives 900 seconds; Copilot tokens
    /// live 30 minutes.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(polls: Vec<Poll>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("FakeGithub: cannot listen: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("FakeGithub: no address: {e}"));
        let state = Arc::new(Mutex::new(GithubState {
            polls: polls.into(),
            interval: 1,
            expires_in: 900,
            copilot_ttl: 1800,
            copilot_status: None,
            exchanges: 0,
            seen: Vec::new(),
        }));
        let router = Router::new()
            .route("/login/device/code", post(device_code))
            .route("/login/oauth/access_token", post(access_token))
            .route("/user", get(user))
            .route("/copilot_internal/v2/token", get(copilot_token))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            addr,
            state,
            task,
            runtime: None,
        }
    }

    /// [`FakeGithub::start`] on a runtime of its own, for tests that block (running the `nanobot` binary).
    ///
    /// # Panics
    /// When the runtime or the server cannot start.
    pub fn start_background(polls: Vec<Poll>) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("FakeGithub: no runtime: {e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let _ = tx.send(Self::start(polls).await);
        });
        let mut fake = rx
            .recv()
            .unwrap_or_else(|e| panic!("FakeGithub: did not start: {e}"));
        fake.runtime = Some(rt);
        fake
    }

    fn state(&self) -> MutexGuard<'_, GithubState> {
        lock(&self.state)
    }

    /// The device code's `interval` and `expires_in`, in seconds.
    pub fn set_device_timing(&self, interval: u64, expires_in: u64) {
        let mut s = self.state();
        s.interval = interval;
        s.expires_in = expires_in;
    }

    /// How long the next Copilot tokens live (seconds; below 60 they are renewed on every call).
    pub fn set_copilot_ttl(&self, secs: i64) {
        self.state().copilot_ttl = secs;
    }

    /// Makes the Copilot token exchange answer this status and body.
    pub fn fail_copilot_exchange(&self, status: u16, body: Value) {
        self.state().copilot_status = Some((status, body));
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The variables pointing nanobot's GitHub and Copilot URLs at this fake, the chat API at `api_base`.
    pub fn env(&self, api_base: &str) -> Vec<(String, String)> {
        let u = self.url();
        vec![
            (
                "NANOBOT_GITHUB_DEVICE_CODE_URL".into(),
                format!("{u}/login/device/code"),
            ),
            (
                "NANOBOT_GITHUB_ACCESS_TOKEN_URL".into(),
                format!("{u}/login/oauth/access_token"),
            ),
            ("NANOBOT_GITHUB_USER_URL".into(), format!("{u}/user")),
            (
                "NANOBOT_COPILOT_TOKEN_URL".into(),
                format!("{u}/copilot_internal/v2/token"),
            ),
            ("NANOBOT_COPILOT_BASE_URL".into(), api_base.to_owned()),
        ]
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// The requests to `path`.
    pub fn seen_at(&self, path: &str) -> Vec<Seen> {
        self.state()
            .seen
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }

    /// How many Copilot tokens were handed out.
    pub fn exchanges(&self) -> usize {
        self.state().exchanges
    }
}

/// Reads `req` (the body up to `limit` bytes) into what the tests look at afterwards.
async fn read_seen(req: Request, limit: usize) -> Seen {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.unwrap_or_default();
    Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn record(state: &Mutex<GithubState>, req: Request) -> Seen {
    let seen = read_seen(req, 1 << 20).await;
    nanobot_util::lock(state).seen.push(seen.clone());
    seen
}

fn answer(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

async fn device_code(State(state): State<Arc<Mutex<GithubState>>>, req: Request) -> Response {
    record(&state, req).await;
    let s = lock(&state);
    answer(
        200,
        json!({
            "device_code": "device-code-secret",
            "user_code": USER_CODE,
            "verification_uri": "https://github.com/login/device",
            "expires_in": s.expires_in,
            "interval": s.interval,
        }),
    )
}

async fn access_token(State(state): State<Arc<Mutex<GithubState>>>, req: Request) -> Response {
    let seen = record(&state, req).await;
    if seen.form("device_code").as_deref() != Some("device-code-secret") {
        return answer(400, json!({"error": "bad_verification_code"}));
    }
    let next = lock(&state).polls.pop_front().unwrap_or(Poll::Granted);
    match next {
        Poll::Pending => answer(200, json!({"error": "authorization_pending"})),
        Poll::SlowDown(0) => answer(200, json!({"error": "slow_down"})),
        Poll::SlowDown(n) => answer(200, json!({"error": "slow_down", "interval": n})),
        Poll::Expired => answer(200, json!({"error": "expired_token"})),
        Poll::Denied => answer(200, json!({"error": "access_denied"})),
        Poll::Granted => answer(
            200,
            json!({"access_token": GITHUB_TOKEN, "token_type": "bearer", "scope": "read:user"}),
        ),
        Poll::Raw(status, body) => answer(status, body),
    }
}

async fn user(State(state): State<Arc<Mutex<GithubState>>>, req: Request) -> Response {
    let seen = record(&state, req).await;
    if seen.header("authorization") != Some(&format!("Bearer {GITHUB_TOKEN}")) {
        return answer(401, json!({"message": "Bad credentials"}));
    }
    answer(200, json!({"login": GITHUB_LOGIN, "id": 1}))
}

async fn copilot_token(State(state): State<Arc<Mutex<GithubState>>>, req: Request) -> Response {
    let seen = record(&state, req).await;
    if seen.header("authorization") != Some(&format!("token {GITHUB_TOKEN}")) {
        return answer(401, json!({"message": "Bad credentials"}));
    }
    let mut s = lock(&state);
    if let Some((status, body)) = s.copilot_status.clone() {
        return answer(status, body);
    }
    s.exchanges += 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    answer(
        200,
        json!({"token": format!("copilot-token-{}", s.exchanges), "expires_at": now + s.copilot_ttl,
            "refresh_in": 1500}),
    )
}

/// The ChatGPT account the fake OpenAI puts into its access tokens.
pub const CHATGPT_ACCOUNT: &str = "acct-fake-123";
/// The account e-mail the fake xAI's userinfo answers.
pub const XAI_EMAIL: &str = "grok-user@example.com";
/// The authorization code the fake OpenAI accepts.
pub const AUTH_CODE: &str = "fake-auth-code";

/// One scripted answer of the fake Codex Responses API.
#[derive(Debug, Clone, PartialEq)]
pub enum CodexReply {
    /// Streamed text (in pieces of at most 4 characters), then `response.completed`.
    Text(String),
    /// One function call with these JSON arguments (streamed in two pieces), then `response.completed`.
    ToolCall(String, Value),
    /// `response.failed` with this error code and message.
    Failed(String, String),
    /// This status and JSON body instead of a stream.
    Status(u16, Value),
}

#[derive(Debug)]
struct OpenAiState {
    base: String,
    challenge: Option<String>,
    issued: usize,
    ttl: i64,
    refreshes: usize,
    last_refresh: Option<String>,
    replies: VecDeque<CodexReply>,
    seen: Vec<Seen>,
}

/// A fake OpenAI: the token endpoint of the ChatGPT sign-in (`/oauth/token`: authorization code with PKCE,
/// refresh) and the Codex Responses API (`/backend-api/codex/responses`, scripted [`CodexReply`]s as SSE).
/// It plays xAI too: OpenID discovery with itself as the issuer, `/oauth2/token` (the same grants),
/// `/oauth2/userinfo` ([`XAI_EMAIL`]) and the Responses API at `/v1/responses` (the same script).
/// Access tokens are JWTs carrying [`CHATGPT_ACCOUNT`]; the n-th is [`FakeOpenAi::access_token`]`(n)`.
#[derive(Debug)]
pub struct FakeOpenAi {
    addr: SocketAddr,
    state: Arc<Mutex<OpenAiState>>,
    task: JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl FakeOpenAi {
    /// Starts on the caller's runtime; tokens live an hour.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("FakeOpenAi: cannot listen: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("FakeOpenAi: no address: {e}"));
        let state = Arc::new(Mutex::new(OpenAiState {
            base: format!("http://{addr}"),
            challenge: None,
            issued: 0,
            ttl: 3600,
            refreshes: 0,
            last_refresh: None,
            replies: VecDeque::new(),
            seen: Vec::new(),
        }));
        let router = Router::new()
            .route("/oauth/token", post(openai_token))
            .route("/backend-api/codex/responses", post(codex_responses))
            .route("/.well-known/openid-configuration", get(xai_discovery))
            .route("/oauth2/token", post(openai_token))
            .route("/oauth2/userinfo", get(xai_userinfo))
            .route("/v1/responses", post(codex_responses))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            addr,
            state,
            task,
            runtime: None,
        }
    }

    /// [`FakeOpenAi::start`] on a runtime of its own, for tests that block.
    ///
    /// # Panics
    /// When the runtime or the server cannot start.
    pub fn start_background() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("FakeOpenAi: no runtime: {e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let _ = tx.send(Self::start().await);
        });
        let mut fake = rx
            .recv()
            .unwrap_or_else(|e| panic!("FakeOpenAi: did not start: {e}"));
        fake.runtime = Some(rt);
        fake
    }

    fn state(&self) -> MutexGuard<'_, OpenAiState> {
        lock(&self.state)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The Codex API base (`providers.openaiCodex.apiBase`): `http://127.0.0.1:PORT/backend-api`.
    pub fn api_base(&self) -> String {
        format!("{}/backend-api", self.url())
    }

    /// The variables pointing nanobot's Codex sign-in at this fake, with the callback at `redirect_uri`.
    pub fn env(&self, redirect_uri: &str) -> Vec<(String, String)> {
        vec![
            (
                "NANOBOT_OPENAI_CODEX_AUTHORIZE_URL".into(),
                format!("{}/oauth/authorize", self.url()),
            ),
            (
                "NANOBOT_OPENAI_CODEX_TOKEN_URL".into(),
                format!("{}/oauth/token", self.url()),
            ),
            (
                "NANOBOT_OPENAI_CODEX_REDIRECT_URI".into(),
                redirect_uri.to_owned(),
            ),
        ]
    }

    /// The variable pointing nanobot's xAI sign-in at this fake (as the issuer).
    pub fn xai_env(&self) -> Vec<(String, String)> {
        vec![("NANOBOT_XAI_OAUTH_ISSUER".into(), self.url())]
    }

    /// The xAI API base (`providers.xaiGrok.apiBase`): `http://127.0.0.1:PORT/v1`.
    pub fn xai_api_base(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Makes the code exchange check the verifier against this S256 `code_challenge`.
    pub fn expect_challenge(&self, challenge: &str) {
        self.state().challenge = Some(challenge.to_owned());
    }

    /// How long the next tokens live (seconds).
    pub fn set_ttl(&self, secs: i64) {
        self.state().ttl = secs;
    }

    /// Queues an answer of the Responses API.
    pub fn push(&self, reply: CodexReply) {
        self.state().replies.push_back(reply);
    }

    /// How many refreshes were granted.
    pub fn refreshes(&self) -> usize {
        self.state().refreshes
    }

    /// The requests to `path`.
    pub fn seen_at(&self, path: &str) -> Vec<Seen> {
        self.state()
            .seen
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }

    /// The `n`-th access token handed out (1-based).
    pub fn access_token(n: usize) -> String {
        use base64::Engine as _;
        let claims = json!({"https://api.openai.com/auth": {"chatgpt_account_id": CHATGPT_ACCOUNT}, "n": n});
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            b64.encode("{\"alg\":\"none\"}"),
            b64.encode(claims.to_string())
        )
    }
}

async fn record_openai(state: &Mutex<OpenAiState>, req: Request) -> Seen {
    let seen = read_seen(req, 4 << 20).await;
    nanobot_util::lock(state).seen.push(seen.clone());
    seen
}

async fn openai_token(State(state): State<Arc<Mutex<OpenAiState>>>, req: Request) -> Response {
    use base64::Engine as _;
    use sha2::Digest as _;
    let seen = record_openai(&state, req).await;
    let mut s = lock(&state);
    match seen.form("grant_type").as_deref() {
        Some("authorization_code") => {
            if seen.form("code").as_deref() != Some(AUTH_CODE) {
                return answer(
                    400,
                    json!({"error": "invalid_grant", "error_description": "unknown code"}),
                );
            }
            if let Some(ch) = &s.challenge {
                let verifier = seen.form("code_verifier").unwrap_or_default();
                let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(sha2::Sha256::digest(verifier.as_bytes()));
                if &computed != ch {
                    return answer(
                        400,
                        json!({"error": "invalid_grant", "error_description": "PKCE mismatch"}),
                    );
                }
            }
        }
        Some("refresh_token") => {
            let expected = s.last_refresh.clone().unwrap_or_else(|| "refresh-0".into());
            if seen.form("refresh_token").as_deref() != Some(expected.as_str()) {
                return answer(
                    401,
                    json!({"error": "invalid_grant", "error_description": "refresh token reused"}),
                );
            }
            s.refreshes += 1;
        }
        _ => return answer(400, json!({"error": "unsupported_grant_type"})),
    }
    s.issued += 1;
    let refresh = format!("refresh-{}", s.issued);
    s.last_refresh = Some(refresh.clone());
    answer(
        200,
        json!({"access_token": FakeOpenAi::access_token(s.issued), "refresh_token": refresh,
            "expires_in": s.ttl, "id_token": "x.y.z"}),
    )
}

fn sse(events: &[Value]) -> Response {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e.get("type").and_then(Value::as_str).unwrap_or("message")
        ));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap_or_else(|_| answer(500, json!({})))
}

async fn codex_responses(State(state): State<Arc<Mutex<OpenAiState>>>, req: Request) -> Response {
    record_openai(&state, req).await;
    let reply = lock(&state).replies.pop_front();
    let completed = |status: &str| {
        json!({"type": "response.completed", "response": {"status": status,
            "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}})
    };
    match reply {
        None => answer(500, json!({"error": {"message": "FakeOpenAi: no reply left"}})),
        Some(CodexReply::Status(status, body)) => answer(status, body),
        Some(CodexReply::Text(text)) => {
            let chars: Vec<char> = text.chars().collect();
            let mut events = vec![json!({"type": "response.created", "response": {"status": "in_progress"}})];
            for piece in chars.chunks(4) {
                events.push(
                    json!({"type": "response.output_text.delta", "delta": piece.iter().collect::<String>()}),
                );
            }
            events.push(completed("completed"));
            sse(&events)
        }
        Some(CodexReply::ToolCall(name, args)) => {
            let args = args.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            let item = |arguments: &str| {
                json!({"type": "function_call", "id": "fc_1", "call_id": "call_fake_1", "name": name,
                    "arguments": arguments})
            };
            sse(&[
                json!({"type": "response.output_item.added", "output_index": 0, "item": item("")}),
                json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": a}),
                json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": b}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item(&args)}),
                completed("completed"),
            ])
        }
        Some(CodexReply::Failed(code, message)) => sse(&[json!({"type": "response.failed",
            "response": {"status": "failed", "error": {"code": code, "message": message}}})]),
    }
}

async fn xai_discovery(State(state): State<Arc<Mutex<OpenAiState>>>, req: Request) -> Response {
    record_openai(&state, req).await;
    let base = lock(&state).base.clone();
    answer(
        200,
        json!({"issuer": base, "authorization_endpoint": format!("{base}/oauth2/auth"),
            "token_endpoint": format!("{base}/oauth2/token"), "userinfo_endpoint": format!("{base}/oauth2/userinfo")}),
    )
}

async fn xai_userinfo(State(state): State<Arc<Mutex<OpenAiState>>>, req: Request) -> Response {
    let seen = record_openai(&state, req).await;
    if !seen
        .header("authorization")
        .is_some_and(|a| a.starts_with("Bearer "))
    {
        return answer(401, json!({"error": "invalid_token"}));
    }
    answer(200, json!({"sub": "user-1", "email": XAI_EMAIL}))
}
