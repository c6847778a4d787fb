//! The OpenAI-compatible API (the Python nanobot's `serve`): `GET /health`, `GET /v1/models`,
//! `POST /v1/chat/completions` (JSON, or SSE with `"stream": true`).
//!
//! The conversation lives on the server: each request's last user message is one turn in the nanobot session
//! `api:<session_id>` (`session_id` from the body; [`DEFAULT_SESSION`] without one), as in the Python nanobot.
//! Only the configured model may be asked for. A bearer key (`api.apiKey`) is required
//! when configured; bodies are limited to [`MAX_BODY_BYTES`]; a client that goes away cancels its turn.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::Utc;
use futures::Stream;
use nanobot_bus::{InboundMessage, Lease, Role};
use nanobot_core::{AgentLoop, CoreError, TurnOptions, TurnReply};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::metrics::{Metrics, TurnOutcome};
use crate::server::ServerLimits;

/// The session used when a request names none.
pub const DEFAULT_SESSION: &str = "api:default";
/// Default largest body of `POST /v1/chat/completions` (larger ones get 413); `api.limits.maxBodyBytes`.
pub const MAX_BODY_BYTES: usize = 20 * 1024 * 1024;
/// The channel name API turns are recorded under.
pub const API_CHANNEL: &str = "api";

/// What the API needs besides the agent.
#[derive(Clone)]
pub struct ApiSettings {
    /// The model name reported by `/v1/models` and in responses.
    pub model: String,
    /// The bearer key clients must send; `None` (or empty) = no authentication.
    pub api_key: Option<String>,
    /// Longest a turn may take before the request fails with 504 (`api.timeout`).
    pub timeout: Duration,
}

impl std::fmt::Debug for ApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSettings")
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Clone)]
struct ApiState {
    agent: AgentLoop,
    settings: Arc<ApiSettings>,
    metrics: Metrics,
    tracker: TaskTracker,
}

/// The API's router. Turns started by streaming requests are spawned on `tracker`, so a graceful shutdown can
/// wait for them.
pub fn api_router(agent: AgentLoop, settings: ApiSettings, metrics: Metrics, tracker: TaskTracker) -> Router {
    api_router_with_limits(agent, settings, metrics, tracker, &ServerLimits::default())
}

/// [`api_router`] with the body limits of `limits`: `max_body_bytes` for `POST /v1/chat/completions`,
/// `max_other_body_bytes` for every other route.
pub fn api_router_with_limits(
    agent: AgentLoop,
    settings: ApiSettings,
    metrics: Metrics,
    tracker: TaskTracker,
    limits: &ServerLimits,
) -> Router {
    let state = ApiState {
        agent,
        settings: Arc::new(settings),
        metrics,
        tracker,
    };
    Router::new()
        .route(
            "/health",
            get(health).layer(DefaultBodyLimit::max(limits.max_other_body_bytes)),
        )
        .route(
            "/v1/models",
            get(models).layer(DefaultBodyLimit::max(limits.max_other_body_bytes)),
        )
        .route(
            "/v1/chat/completions",
            post(chat_completions).layer(DefaultBodyLimit::max(limits.max_body_bytes)),
        )
        .with_state(state)
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// An OpenAI-style error response.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": null, "code": status.as_u16()}});
    (status, axum::Json(body)).into_response()
}

/// Compares in time independent of where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `Ok` when no key is configured or the request carries `Authorization: Bearer <key>`.
fn check_auth(settings: &ApiSettings, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => Ok(()),
        _ => Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Invalid or missing API key (send `Authorization: Bearer <api.apiKey>`).",
        ))),
    }
}

async fn models(State(st): State<ApiState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&st.settings, &headers) {
        return *r;
    }
    axum::Json(json!({
        "object": "list",
        "data": [{"id": st.settings.model, "object": "model", "created": 0, "owned_by": "nanobot"}],
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<Value>,
    #[serde(default)]
    stream: bool,
    /// `{"include_usage": true}` asks for a last chunk with the turn's usage (OpenAI's streaming option).
    #[serde(default)]
    stream_options: Option<Value>,
    #[serde(default)]
    session_id: Option<String>,
}

/// The text of the last `user` message (text parts joined; other parts ignored).
fn last_user_text(messages: &[Value]) -> Option<String> {
    let m = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let text = match m.get("content")? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// Cancels the session's running turn when dropped while armed (the client went away).
struct StopOnDrop {
    agent: AgentLoop,
    key: String,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let n = self.agent.stop_session(&self.key);
            tracing::info!(session = %self.key, stopped = n, "API client went away: turn cancelled");
        }
    }
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

async fn chat_completions(State(st): State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let route = "/v1/chat/completions";
    let response = chat_inner(&st, &headers, &body).await;
    st.metrics
        .record_api(route, response.status().as_u16(), started.elapsed());
    response
}

async fn chat_inner(st: &ApiState, headers: &HeaderMap, body: &Bytes) -> Response {
    if let Err(r) = check_auth(&st.settings, headers) {
        return *r;
    }
    let req: ChatBody = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("invalid request body: {e}"),
            );
        }
    };
    let Some(text) = last_user_text(&req.messages) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "`messages` must contain a user message with text",
        );
    };
    // Taken as given (no trimming, like the Python nanobot's JSON route); an empty id means the default
    // session. Control characters cannot name a session: refused here with a message that names the character
    // and never a server path.
    let session = req.session_id.as_deref().filter(|s| !s.is_empty());
    if let Some(s) = session
        && let Err(e) = nanobot_sessions::keyname::check_key(s)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("`session_id`: {e}"),
        );
    }
    let key = session.map_or_else(|| DEFAULT_SESSION.to_owned(), |s| format!("api:{s}"));
    let chat_id = session.unwrap_or("default").to_owned();
    let mut msg = InboundMessage::new(API_CHANNEL, "api", chat_id, text).with_session_key(&key);
    // A retried request with the same key is answered once (with the first answer), whichever replica gets it.
    match idempotency_key(headers) {
        Ok(Some(id)) => {
            msg.metadata.insert("message_id".into(), Value::String(id));
        }
        Ok(None) => {}
        Err(r) => return *r,
    }
    let opts = TurnOptions {
        retry: is_client_retry(headers),
        ..TurnOptions::default()
    };
    let model = st.settings.model.clone();
    if let Some(asked) = req.model.as_deref().filter(|m| !m.is_empty())
        && asked != model
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("Only configured model '{model}' is available"),
        );
    }
    // Replicas on a shared bus: one request at a time per session across all of them.
    let lease = match session_lease(st, &key).await {
        Ok(l) => l,
        Err(r) => return *r,
    };
    if req.stream {
        let include_usage = req
            .stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        return stream_completion(st, msg, opts, key, model, include_usage, lease);
    }

    let in_flight = st.metrics.turn_started();
    let mut guard = StopOnDrop {
        agent: st.agent.clone(),
        key: key.clone(),
        armed: true,
    };
    let result = tokio::time::timeout(st.settings.timeout, st.agent.process_message(msg, opts)).await;
    let result = match result {
        Ok(r) => {
            guard.armed = false;
            r
        }
        Err(_) => {
            st.metrics
                .record_turn(API_CHANNEL, TurnOutcome::Cancelled, in_flight.elapsed());
            return error(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("the turn took longer than {}s", st.settings.timeout.as_secs()),
            );
        }
    };
    // Released before the answer goes out: the client's next request may reach another replica at once.
    if let Some(lease) = lease {
        lease.release().await;
    }
    finish_turn(st, &result, in_flight.elapsed());
    match result {
        Ok(reply) => axum::Json(json!({
            "id": completion_id(),
            "object": "chat.completion",
            "created": Utc::now().timestamp(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": "stop",
            }],
            "usage": usage_json(&reply.usage),
        }))
        .into_response(),
        Err(e) => turn_error(&e),
    }
}

/// A turn's usage as OpenAI reports a completion's: the provider's figures summed over the turn's model calls,
/// with the input served from the provider's cache and the output spent on reasoning when it said so.
fn usage_json(u: &nanobot_providers::Usage) -> Value {
    let mut usage = json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    });
    if let Some(cached) = u.cache_read_tokens {
        usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
    }
    if let Some(reasoning) = u.reasoning_tokens {
        usage["completion_tokens_details"] = json!({ "reasoning_tokens": reasoning });
    }
    usage
}

/// Whether the client marks the request as a retry of its previous one: OpenAI's SDKs (Python, Node and those
/// generated alike) send `x-stainless-retry-count`, 0 on the first attempt. A retry whose question the session
/// already holds is not stored twice (see [`TurnOptions::retry`]).
fn is_client_retry(headers: &HeaderMap) -> bool {
    headers
        .get("x-stainless-retry-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0)
}

/// The `Idempotency-Key` header: printable ASCII, 1 to 255 characters; `None` when absent.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 255 && k.chars().all(|c| c.is_ascii_graphic() || c == ' ') => {
            Ok(Some(k.to_owned()))
        }
        _ => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the `Idempotency-Key` header must be 1 to 255 printable ASCII characters",
        ))),
    }
}

/// On a bus shared by gateway replicas, the session's lease, so one request at a time runs per session across
/// them (waiting up to the API timeout for another replica's request to finish). `None` on a bus of one process.
async fn session_lease(st: &ApiState, key: &str) -> Result<Option<Box<dyn Lease>>, Box<Response>> {
    let Some(leases) = st.agent.bus().and_then(|b| b.leases()) else {
        return Ok(None);
    };
    match tokio::time::timeout(st.settings.timeout, leases.acquire(Role::Session(key.to_owned()))).await {
        Ok(Ok(lease)) => Ok(Some(lease)),
        Ok(Err(_)) => Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the gateway is shutting down",
        ))),
        Err(_) => Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!(
                "this session's previous request was still running (on another replica) after {}s",
                st.settings.timeout.as_secs()
            ),
        ))),
    }
}

fn finish_turn(st: &ApiState, result: &Result<TurnReply, CoreError>, took: Duration) {
    let outcome = match result {
        Ok(r) => TurnOutcome::from_stop(r.stop_reason),
        Err(_) => TurnOutcome::Error,
    };
    st.metrics.record_turn(API_CHANNEL, outcome, took);
}

fn turn_error(e: &CoreError) -> Response {
    match e {
        CoreError::Stopped => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the gateway is shutting down",
        ),
        other => {
            // The error may name files of the server: it goes to the log, the client gets a plain message.
            tracing::error!(error = %other, "API turn failed");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the turn failed; the gateway log has the details",
            )
        }
    }
}

struct ChunkMeta {
    id: String,
    created: i64,
    model: String,
}

impl ChunkMeta {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Event::default().data(v.to_string())
    }

    /// The last chunk of `stream_options.include_usage`: no choices, the turn's usage.
    fn usage_chunk(&self, u: nanobot_providers::Usage) -> Event {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_json(&u),
        });
        Event::default().data(v.to_string())
    }
}

enum Phase {
    Start,
    Deltas,
    Finish,
    Stop,
    Usage,
    DoneMarker,
    End,
}

struct StreamState {
    phase: Phase,
    deltas: mpsc::UnboundedReceiver<String>,
    done: oneshot::Receiver<Result<TurnReply, CoreError>>,
    guard: StopOnDrop,
    sent_any: bool,
    meta: ChunkMeta,
    include_usage: bool,
    usage: nanobot_providers::Usage,
}

#[allow(clippy::too_many_arguments)]
fn stream_completion(
    st: &ApiState,
    msg: InboundMessage,
    opts: TurnOptions,
    key: String,
    model: String,
    include_usage: bool,
    lease: Option<Box<dyn Lease>>,
) -> Response {
    let (tx, deltas) = mpsc::unbounded_channel();
    let (done_tx, done) = oneshot::channel();
    let agent = st.agent.clone();
    let metrics = st.metrics.clone();
    let in_flight = st.metrics.turn_started();
    let timeout = st.settings.timeout;
    let turn_key = key.clone();
    st.tracker.spawn(async move {
        let opts = TurnOptions {
            stream: Some(tx),
            ..opts
        };
        let result = match tokio::time::timeout(timeout, agent.process_message(msg, opts)).await {
            Ok(r) => r,
            Err(_) => {
                agent.stop_session(&turn_key);
                Err(CoreError::Config(format!(
                    "the turn took longer than {}s",
                    timeout.as_secs()
                )))
            }
        };
        let outcome = match &result {
            Ok(r) => TurnOutcome::from_stop(r.stop_reason),
            Err(_) => TurnOutcome::Error,
        };
        metrics.record_turn(API_CHANNEL, outcome, in_flight.elapsed());
        drop(in_flight);
        if let Some(lease) = lease {
            lease.release().await;
        }
        let _ = done_tx.send(result);
    });
    let state = StreamState {
        phase: Phase::Start,
        deltas,
        done,
        guard: StopOnDrop {
            agent: st.agent.clone(),
            key,
            armed: true,
        },
        sent_any: false,
        meta: ChunkMeta {
            id: completion_id(),
            created: Utc::now().timestamp(),
            model,
        },
        include_usage,
        usage: nanobot_providers::Usage::default(),
    };
    Sse::new(sse_events(state))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn error_event(message: &str) -> Event {
    let body = json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}});
    Event::default().data(body.to_string())
}

/// The SSE events of one streamed turn: a role chunk, the deltas, the final chunk, `[DONE]`. Dropping the
/// stream before the turn ended (the client went away) cancels the turn.
fn sse_events(state: StreamState) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(state, |mut s| async move {
        loop {
            match s.phase {
                Phase::Start => {
                    s.phase = Phase::Deltas;
                    let ev = s.meta.chunk(json!({"role": "assistant", "content": ""}), None);
                    return Some((Ok(ev), s));
                }
                Phase::Deltas => match s.deltas.recv().await {
                    Some(d) if d.is_empty() => {}
                    Some(d) => {
                        s.sent_any = true;
                        let ev = s.meta.chunk(json!({"content": d}), None);
                        return Some((Ok(ev), s));
                    }
                    // The turn dropped its sender: only the result is left.
                    None => s.phase = Phase::Finish,
                },
                Phase::Finish => {
                    let result = (&mut s.done).await;
                    s.guard.armed = false;
                    s.phase = Phase::Stop;
                    if let Ok(Ok(reply)) = &result {
                        s.usage = reply.usage;
                    }
                    match result {
                        Ok(Ok(reply)) if !s.sent_any && !reply.content.is_empty() => {
                            let ev = s.meta.chunk(json!({"content": reply.content}), None);
                            return Some((Ok(ev), s));
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            s.phase = Phase::DoneMarker;
                            return Some((Ok(error_event(&e.to_string())), s));
                        }
                        Err(_) => {
                            s.phase = Phase::DoneMarker;
                            return Some((Ok(error_event("the turn was lost")), s));
                        }
                    }
                }
                Phase::Stop => {
                    s.phase = if s.include_usage {
                        Phase::Usage
                    } else {
                        Phase::DoneMarker
                    };
                    let ev = s.meta.chunk(json!({}), Some("stop"));
                    return Some((Ok(ev), s));
                }
                Phase::Usage => {
                    s.phase = Phase::DoneMarker;
                    return Some((Ok(s.meta.usage_chunk(s.usage)), s));
                }
                Phase::DoneMarker => {
                    s.phase = Phase::End;
                    return Some((Ok(Event::default().data("[DONE]")), s));
                }
                Phase::End => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_user_text_takes_the_last_user_message_and_joins_text_parts() {
        let msgs = vec![
            json!({"role": "user", "content": "first"}),
            json!({"role": "assistant", "content": "ok"}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:..."}},
                {"type": "text", "text": "here"}
            ]}),
        ];
        assert_eq!(last_user_text(&msgs).as_deref(), Some("look\nhere"));
        assert_eq!(last_user_text(&[json!({"role": "system", "content": "x"})]), None);
        assert_eq!(last_user_text(&[json!({"role": "user", "content": "  "})]), None);
    }

    #[test]
    fn auth_requires_the_exact_bearer_key_when_one_is_set() {
        let s = ApiSettings {
            model: "m".into(),
            api_key: Some("sk-right".into()),
            timeout: Duration::from_secs(1),
        };
        let mut h = HeaderMap::new();
        assert!(check_auth(&s, &h).is_err());
        h.insert(header::AUTHORIZATION, "Bearer sk-wrong".parse().unwrap());
        assert!(check_auth(&s, &h).is_err());
        h.insert(header::AUTHORIZATION, "Bearer sk-right".parse().unwrap());
        assert!(check_auth(&s, &h).is_ok());
        let open = ApiSettings {
            api_key: Some(String::new()),
            ..s.clone()
        };
        assert!(check_auth(&open, &HeaderMap::new()).is_ok());
        assert!(!format!("{s:?}").contains("sk-right"));
    }
}
