//! A small fake of Discord: REST (`/api/v10/...`) recorded on axum, and a gateway on tokio-tungstenite that
//! speaks just enough of the protocol for serenity: op 10 Hello, op 2 Identify → READY, op 1 → op 11, and
//! MESSAGE_CREATE dispatches pushed by the test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;

pub(crate) const BOT_ID: &str = "999";
pub(crate) const TOKEN: &str = "fake-bot-token";

/// One REST request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Recorded {
    /// The JSON payload of a message POST, whether sent as JSON or as multipart (`payload_json` part).
    pub(crate) fn payload(&self) -> Value {
        if self.content_type.starts_with("application/json") {
            return serde_json::from_slice(&self.body).unwrap_or(Value::Null);
        }
        let text = String::from_utf8_lossy(&self.body);
        // multipart: find the payload_json part's body.
        text.split("name=\"payload_json\"")
            .nth(1)
            .and_then(|rest| rest.split("\r\n\r\n").nth(1))
            .and_then(|body| body.split("\r\n--").next())
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or(Value::Null)
    }

    /// File names of multipart file parts.
    pub(crate) fn file_names(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.body);
        text.split("filename=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next().map(String::from))
            .collect()
    }
}

#[derive(Default)]
struct State {
    requests: std::sync::Mutex<Vec<Recorded>>,
    identifies: std::sync::Mutex<Vec<Value>>,
    changed: Notify,
    next_id: AtomicU64,
}

pub(crate) struct FakeDiscord {
    pub(crate) base: String,
    state: Arc<State>,
    events: mpsc::UnboundedSender<(&'static str, Value)>,
}

impl FakeDiscord {
    pub(crate) async fn start() -> Result<Self> {
        let state = Arc::new(State {
            next_id: AtomicU64::new(5000),
            ..State::default()
        });
        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let ws_url = format!("ws://{}", ws.local_addr()?);
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", http.local_addr()?);

        let rest_state = Arc::clone(&state);
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = Arc::clone(&rest_state);
                let ws_url = ws_url.clone();
                async move { rest(&state, &ws_url, method, uri, headers, body) }
            });
        tokio::spawn(async move { axum::serve(http, app).await });

        let (events, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        let gw_state = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((stream, _)) = ws.accept().await {
                let state = Arc::clone(&gw_state);
                let rx = Arc::clone(&rx);
                tokio::spawn(async move {
                    if let Err(e) = gateway(stream, state, rx).await {
                        eprintln!("fake gateway connection ended: {e:#}");
                    }
                });
            }
        });
        Ok(Self { base, state, events })
    }

    /// Dispatches MESSAGE_CREATE with this message object.
    pub(crate) fn push_message(&self, message: Value) {
        let _ = self.events.send(("MESSAGE_CREATE", message));
    }

    /// Dispatches INTERACTION_CREATE: `user` pressed the button `custom_id` under the bot's message `message_id`
    /// in channel `channel` (a DM: no guild).
    pub(crate) fn push_press(&self, channel: u64, message_id: u64, user: (u64, &str), custom_id: &str) {
        let mut msg = message(
            message_id,
            channel,
            None,
            (BOT_ID.parse().unwrap_or(1), "nanobot"),
            "question",
        );
        msg["author"]["bot"] = json!(true);
        let interaction = json!({
            "id": "9001", "application_id": BOT_ID, "type": 3, "token": "interaction-token", "version": 1,
            "channel_id": channel.to_string(), "channel": null,
            "user": {"id": user.0.to_string(), "username": user.1, "discriminator": "0", "avatar": null,
                     "global_name": null},
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": msg, "locale": "en-US", "entitlements": [], "attachment_size_limit": 8_388_608,
        });
        let _ = self.events.send(("INTERACTION_CREATE", interaction));
    }

    /// Waits (at most 20 s) until an identify arrived; returns it.
    pub(crate) async fn identified(&self) -> Result<Value> {
        self.wait(|s| s.identifies.lock().unwrap().first().cloned()).await
    }

    /// Waits (at most 20 s) until `pick` finds something in the recorded requests.
    pub(crate) async fn wait_request<T>(&self, pick: impl Fn(&[Recorded]) -> Option<T>) -> Result<T> {
        self.wait(|s| pick(&s.requests.lock().unwrap())).await
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
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
        .context("the fake Discord did not see what the test waited for within 20 s")
    }
}

fn rest(state: &State, ws_url: &str, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path().to_string();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let auth_ok = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bot {TOKEN}"));
    state.requests.lock().unwrap().push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        content_type,
        body: body.to_vec(),
    });
    state.changed.notify_waiters();
    if path.starts_with("/files/") {
        return (StatusCode::OK, "attachment-bytes").into_response();
    }
    // Interaction callbacks are authenticated by the interaction's token in the path, not the bot token.
    if path.starts_with("/api/v10/interactions/") && path.ends_with("/callback") {
        return StatusCode::NO_CONTENT.into_response();
    }
    if !auth_ok {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"message": "401: Unauthorized", "code": 0})),
        )
            .into_response();
    }
    let segments: Vec<&str> = path.trim_start_matches("/api/v10/").split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway"]) => axum::Json(json!({"url": ws_url})).into_response(),
        ("GET", ["users", "@me"]) => axum::Json(bot_user()).into_response(),
        ("POST", ["channels", channel, "messages"]) => {
            let id = state.next_id.fetch_add(1, Ordering::Relaxed).to_string();
            axum::Json(json!({
                "id": id, "channel_id": channel, "author": bot_user(), "content": "",
                "timestamp": "2026-11-22T07:00:00+00:00", "edited_timestamp": null, "tts": false,
                "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": false, "type": 0,
            }))
            .into_response()
        }
        ("POST", ["channels", _, "typing"])
        | ("PUT", ["channels", _, "messages", _, "reactions", _, "@me"]) => {
            StatusCode::NO_CONTENT.into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "404: Not Found", "code": 0})),
        )
            .into_response(),
    }
}

pub(crate) fn bot_user() -> Value {
    json!({"id": BOT_ID, "username": "nanobot", "discriminator": "0", "avatar": null, "global_name": null, "bot": true})
}

async fn gateway(
    stream: tokio::net::TcpStream,
    state: Arc<State>,
    events: Arc<Mutex<mpsc::UnboundedReceiver<(&'static str, Value)>>>,
) -> Result<()> {
    let mut ws = tokio_tungstenite::accept_async(stream).await?;
    ws.send(Ws::text(
        json!({"op": 10, "d": {"heartbeat_interval": 41250}}).to_string(),
    ))
    .await?;
    let mut seq = 0u64;
    // Identify first.
    loop {
        let Some(frame) = ws.next().await else {
            return Ok(());
        };
        let Ws::Text(text) = frame? else { continue };
        let v: Value = serde_json::from_str(&text)?;
        match v["op"].as_u64() {
            Some(1) => ws.send(Ws::text(json!({"op": 11}).to_string())).await?,
            Some(2) => {
                state.identifies.lock().unwrap().push(v["d"].clone());
                state.changed.notify_waiters();
                seq += 1;
                let ready = json!({"op": 0, "s": seq, "t": "READY", "d": {
                    "v": 10, "user": bot_user(), "guilds": [], "session_id": "fake-session",
                    "resume_gateway_url": "ws://127.0.0.1:9", "shard": [0, 1],
                    "application": {"id": BOT_ID, "flags": 0},
                }});
                ws.send(Ws::text(ready.to_string())).await?;
                break;
            }
            _ => {}
        }
    }
    let mut events = events.lock().await;
    loop {
        tokio::select! {
            frame = ws.next() => {
                let Some(frame) = frame else { return Ok(()) };
                match frame? {
                    Ws::Text(text) => {
                        let v: Value = serde_json::from_str(&text)?;
                        if v["op"].as_u64() == Some(1) {
                            ws.send(Ws::text(json!({"op": 11}).to_string())).await?;
                        }
                    }
                    Ws::Close(_) => return Ok(()),
                    _ => {}
                }
            }
            event = events.recv() => {
                let Some((kind, data)) = event else { return Ok(()) };
                seq += 1;
                let dispatch = json!({"op": 0, "s": seq, "t": kind, "d": data});
                ws.send(Ws::text(dispatch.to_string())).await?;
            }
        }
    }
}

/// A message object as the gateway sends it. `guild` = `None` for a direct message.
pub(crate) fn message(
    id: u64,
    channel: u64,
    guild: Option<u64>,
    author: (u64, &str),
    content: &str,
) -> Value {
    let mut m = json!({
        "id": id.to_string(), "channel_id": channel.to_string(),
        "author": {"id": author.0.to_string(), "username": author.1, "discriminator": "0", "avatar": null,
                   "global_name": null},
        "content": content, "timestamp": "2026-11-22T07:00:00+00:00", "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "type": 0,
    });
    if let Some(guild) = guild {
        m["guild_id"] = json!(guild.to_string());
    }
    m
}
