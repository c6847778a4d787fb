//! The Telegram Bot API emulator (npm `telegram-test-api` 4.2.1, installed under `.ci/.peers/` by
//! `scripts/install-peers.sh`) and a thin proxy that absorbs its quirks, for any crate's tests that need a
//! Telegram to talk to (the adapter's own, the gateway's end-to-end ones).
//!
//! Point the bot at [`Emulator::api_url`] (`channels.telegram.baseUrl`); users write with
//! [`Emulator::user_says`] (private chat) or [`Emulator::user_says_in_group`]; see what the bot did with
//! [`Emulator::next_event`] / [`Emulator::next_sent`] and what a chat shows with [`Emulator::chat_messages`].
//!
//! The emulator is looser than Telegram; the proxy makes it answer like Telegram so the production code is
//! tested unchanged:
//! - `getMe` lacks fields teloxide requires (`has_main_web_app`, `can_join_groups`, …): added.
//! - `getUpdates` ignores `timeout` (no long polling): the proxy holds the request until updates arrive or a
//!   short deadline passes, so the client does not spin.
//! - `sendMessage` answers `date` in milliseconds: converted to seconds.
//! - `editMessageText` answers `result: null`: the edited message is returned.
//! - Callback queries lack `chat_instance` (required by the Bot API and teloxide): added.
//! - The emulator has no flood control: the proxy answers a chat's third `sendMessage` within one second with
//!   Telegram's `429 Too Many Requests` and `retry_after` (Telegram's own limit is about one message per second
//!   per chat, with short bursts allowed), and counts it ([`Emulator::flood_waits`]).
//! - `sendChatAction`, `setMyCommands`, `getFile` and file downloads are not supported (HTTP 500 in a
//!   non-Telegram format): the proxy answers them itself and records them; other unsupported methods get
//!   Telegram's own `{"ok":false,"error_code":404,"description":"Not Found"}` envelope.

use nanobot_util::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::peers::{self, ChildGuard};
use anyhow::{Context as _, Result};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Something the bot did, as seen by the proxy.
#[derive(Debug, Clone)]
pub enum BotEvent {
    /// `getUpdates` was called.
    Poll {
        /// The bot's token.
        token: String,
        /// The offset asked for (negative: the drop of pending updates a starting bot makes).
        offset: i64,
    },
    /// A message was sent (the request body).
    Sent(Value),
    /// A message was edited (the request body).
    Edited(Value),
    /// `sendChatAction`.
    ChatAction {
        /// The chat.
        chat_id: i64,
        /// `typing`, …
        action: String,
    },
    /// `setWebhook` with this URL.
    SetWebhook(Option<String>),
}

/// file id → (file path, bytes).
type Files = Arc<Mutex<HashMap<String, (String, Vec<u8>)>>>;

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    events: mpsc::UnboundedSender<BotEvent>,
    files: Files,
    commands: Arc<Mutex<Vec<Value>>>,
    flood: Arc<Flood>,
}

/// The proxy's flood control: recent `sendMessage` arrivals per chat, and how many were refused.
#[derive(Default)]
struct Flood {
    recent: Mutex<HashMap<String, VecDeque<tokio::time::Instant>>>,
    refused: AtomicUsize,
}

/// Sends to one chat allowed within [`FLOOD_WINDOW`]; one more is refused with 429.
const FLOOD_BURST: usize = 2;
const FLOOD_WINDOW: Duration = Duration::from_secs(1);

impl Flood {
    /// Whether a send to `chat` now is over the limit (then it is counted, and not recorded as sent).
    fn over_limit(&self, chat: &str) -> bool {
        let now = tokio::time::Instant::now();
        let mut recent = lock(&self.recent);
        let sent = recent.entry(chat.to_owned()).or_default();
        while sent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FLOOD_WINDOW)
        {
            sent.pop_front();
        }
        if sent.len() >= FLOOD_BURST {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        sent.push_back(now);
        false
    }
}

/// A running emulator with the fixing proxy in front of it.
pub struct Emulator {
    _node: ChildGuard,
    /// The emulator itself (client-side API: inject user messages, read the chat).
    pub upstream: String,
    /// The Bot API base URL to give the bot (the proxy).
    pub api_url: String,
    http: reqwest::Client,
    events: mpsc::UnboundedReceiver<BotEvent>,
    files: Files,
    commands: Arc<Mutex<Vec<Value>>>,
    flood: Arc<Flood>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.server.abort();
    }
}

const START_JS: &str = r#"
const TelegramServer = require('telegram-test-api');
const server = new TelegramServer({ port: +process.env.TG_PORT, host: '127.0.0.1', storeTimeout: 600 });
server.start().then(() => console.log('READY'));
process.on('SIGTERM', () => server.stop().then(() => process.exit(0)));
"#;

impl Emulator {
    /// Starts the emulator and the proxy; `None` (test skipped) when the emulator is not installed.
    pub async fn start() -> Result<Option<Self>> {
        crate::install_ring();
        let Some(pkg) = peers::require_node_package("telegram-test-api") else {
            return Ok(None);
        };
        let Some(node) = peers::require("node", peers::node()) else {
            return Ok(None);
        };
        let node_modules = pkg.parent().context("package dir has a parent")?.to_path_buf();
        let port = peers::free_port()?;
        let mut cmd = tokio::process::Command::new(node);
        cmd.arg("-e")
            .arg(START_JS)
            .env("NODE_PATH", &node_modules)
            .env("TG_PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let node = ChildGuard::spawn_tokio("telegram-test-api", &mut cmd)?;
        peers::wait_for_port(&format!("127.0.0.1:{port}"), Duration::from_secs(30)).await?;
        let upstream = format!("http://127.0.0.1:{port}");

        let http = reqwest::Client::builder().build()?;
        let (tx, events) = mpsc::unbounded_channel();
        let state = ProxyState {
            upstream: upstream.clone(),
            http: http.clone(),
            events: tx,
            files: Arc::new(Mutex::new(HashMap::new())),
            commands: Arc::new(Mutex::new(Vec::new())),
            flood: Arc::new(Flood::default()),
        };
        let (files, commands, flood) = (state.files.clone(), state.commands.clone(), state.flood.clone());
        let router = axum::Router::new()
            .route("/file/{bot}/{*path}", axum::routing::get(download))
            .route("/{bot}/{method}", axum::routing::post(bot_method).get(bot_method))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let api_url = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Some(Self {
            _node: node,
            upstream,
            api_url,
            http,
            events,
            files,
            commands,
            flood,
            server,
        }))
    }

    /// How many `sendMessage` calls the proxy refused with 429 (a chat's third within a second).
    pub fn flood_waits(&self) -> usize {
        self.flood.refused.load(Ordering::Relaxed)
    }

    /// Next bot action, failing after 20 s.
    pub async fn next_event(&mut self) -> Result<BotEvent> {
        tokio::time::timeout(Duration::from_secs(20), self.events.recv())
            .await
            .context("timed out waiting for the bot")?
            .context("proxy stopped")
    }

    /// Waits for the next event `pick` accepts, skipping others (polls, typing, …).
    pub async fn wait_for<T>(&mut self, mut pick: impl FnMut(&BotEvent) -> Option<T>) -> Result<T> {
        loop {
            let event = self.next_event().await?;
            if let Some(found) = pick(&event) {
                return Ok(found);
            }
        }
    }

    /// Waits (at most `within`) until the bot has sent `chat_id` exactly `expected`, or edited a message into it
    /// (a streamed answer is sent in part, then edited to its whole text); other events are passed over. The
    /// error lists what the chat got instead.
    pub async fn wait_for_text(&mut self, chat_id: i64, expected: &str, within: Duration) -> Result<()> {
        let mut seen = Vec::new();
        let found = tokio::time::timeout(within, async {
            loop {
                if let BotEvent::Sent(body) | BotEvent::Edited(body) = self.next_event().await?
                    && body["chat_id"].as_i64() == Some(chat_id)
                {
                    let text = body["text"].as_str().unwrap_or_default().to_owned();
                    if text == expected {
                        return Ok::<(), anyhow::Error>(());
                    }
                    seen.push(text);
                }
            }
        })
        .await;
        match found {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.context(format!("chat {chat_id} got {seen:?}, not {expected:?}"))),
            Err(_) => anyhow::bail!("timed out: chat {chat_id} got {seen:?}, not {expected:?}"),
        }
    }

    /// Waits until a bot that starts now has dropped the updates pending at its start and polls past them (so
    /// injected messages reach it). Polls of a bot that ran before (still queued as events) do not count: only a
    /// poll that follows a drop by the same token does.
    pub async fn wait_until_polling(&mut self) -> Result<()> {
        let mut dropped: Vec<String> = Vec::new();
        self.wait_for(|e| match e {
            BotEvent::Poll { token, offset } if *offset < 0 => {
                dropped.push(token.clone());
                None
            }
            BotEvent::Poll { token, .. } => dropped.contains(token).then_some(()),
            _ => None,
        })
        .await
    }

    /// Waits for the next message the bot sends; returns its request body.
    pub async fn next_sent(&mut self) -> Result<Value> {
        self.wait_for(|e| match e {
            BotEvent::Sent(body) => Some(body.clone()),
            _ => None,
        })
        .await
    }

    /// A user writes `text` to the bot in a private chat (chat id = user id).
    pub async fn user_says(&self, token: &str, user_id: i64, username: &str, text: &str) -> Result<()> {
        self.user_sends(token, user_id, username, json!({ "text": text }))
            .await
    }

    /// A user sends a message with the given extra fields (`text`, `photo`, `voice`, …; a `chat` field replaces
    /// the private chat).
    pub async fn user_sends(&self, token: &str, user_id: i64, username: &str, fields: Value) -> Result<()> {
        let mut message = json!({
            "botToken": token,
            "from": { "id": user_id, "is_bot": false, "first_name": username, "username": username },
            "chat": { "id": user_id, "type": "private", "first_name": username, "username": username },
            "date": chrono_now(),
        });
        if let (Some(m), Some(f)) = (message.as_object_mut(), fields.as_object()) {
            m.extend(f.clone());
        }
        let resp = self
            .http
            .post(format!("{}/sendMessage", self.upstream))
            .json(&message)
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "emulator rejected the user message: {}",
            resp.status()
        );
        Ok(())
    }

    /// A user writes `text` in the group chat `group_id` (a negative id, as Telegram gives groups).
    pub async fn user_says_in_group(
        &self,
        token: &str,
        user_id: i64,
        username: &str,
        group_id: i64,
        text: &str,
    ) -> Result<()> {
        let chat = json!({ "id": group_id, "type": "group", "title": format!("group {group_id}") });
        self.user_sends(token, user_id, username, json!({ "text": text, "chat": chat }))
            .await
    }

    /// A user presses a button carrying `data` under the bot's message `message_id` in their private chat.
    pub async fn user_presses(
        &self,
        token: &str,
        user_id: i64,
        username: &str,
        message_id: i64,
        data: &str,
    ) -> Result<()> {
        let chat = json!({ "id": user_id, "type": "private", "first_name": username, "username": username });
        let query = json!({
            "botToken": token,
            "from": { "id": user_id, "is_bot": false, "first_name": username, "username": username },
            "message": { "message_id": message_id, "date": chrono_now(), "chat": chat, "text": "question" },
            "data": data,
        });
        let resp = self
            .http
            .post(format!("{}/sendCallback", self.upstream))
            .json(&query)
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "emulator rejected the callback: {}",
            resp.status()
        );
        Ok(())
    }

    /// What the chat with `chat_id` shows from the bot (the emulator's client view; each message once).
    pub async fn chat_messages(&self, token: &str, chat_id: i64) -> Result<Vec<Value>> {
        let resp: Value = self
            .http
            .post(format!("{}/getUpdates", self.upstream))
            .json(&json!({ "token": token, "chatId": chat_id }))
            .send()
            .await?
            .json()
            .await?;
        Ok(resp["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|u| u["message"].clone())
            .collect())
    }

    /// Serves a file for `getFile` + download.
    pub fn add_file(&self, file_id: &str, file_path: &str, bytes: &[u8]) {
        lock(&self.files).insert(file_id.to_string(), (file_path.to_string(), bytes.to_vec()));
    }

    /// The commands the bot registered with `setMyCommands`.
    pub fn registered_commands(&self) -> Vec<Value> {
        lock(&self.commands).clone()
    }
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn ok(result: Value) -> Response {
    axum::Json(json!({ "ok": true, "result": result })).into_response()
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Value {
    let is_json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

async fn forward(state: &ProxyState, bot: &str, method: &str, body: &Value) -> Result<(StatusCode, Value)> {
    let resp = state
        .http
        .post(format!("{}/{bot}/{method}", state.upstream))
        .json(body)
        .send()
        .await?;
    let status = StatusCode::from_u16(resp.status().as_u16())?;
    let value = resp.json().await.unwrap_or(Value::Null);
    Ok((status, value))
}

async fn bot_method(
    State(state): State<ProxyState>,
    Path((bot, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match handle(&state, &bot, &method, &headers, &body).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, format!("proxy error: {e:#}")).into_response(),
    }
}

async fn handle(
    state: &ProxyState,
    bot: &str,
    method: &str,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<Response> {
    let body = parse_body(headers, raw);
    let method = method.to_ascii_lowercase();
    let send = |e| {
        let _ = state.events.send(e);
    };
    Ok(match method.as_str() {
        "getme" => {
            let (_, mut v) = forward(state, bot, "getMe", &body).await?;
            let me = &mut v["result"];
            for (key, value) in [
                ("is_bot", json!(true)),
                ("can_join_groups", json!(true)),
                ("can_read_all_group_messages", json!(false)),
                ("supports_inline_queries", json!(false)),
                ("can_connect_to_business", json!(false)),
                ("has_main_web_app", json!(false)),
            ] {
                me[key] = value;
            }
            axum::Json(v).into_response()
        }
        "getupdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            send(BotEvent::Poll {
                token: bot.strip_prefix("bot").unwrap_or(bot).to_owned(),
                offset,
            });
            let wait = body["timeout"].as_u64().unwrap_or(0).min(1);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
            loop {
                let (_, mut v) = forward(state, bot, "getUpdates", &json!({})).await?;
                for u in v["result"].as_array_mut().into_iter().flatten() {
                    if let Some(q) = u.get_mut("callback_query").and_then(Value::as_object_mut) {
                        q.entry("chat_instance").or_insert_with(|| json!("1"));
                    }
                }
                let empty = v["result"].as_array().is_none_or(Vec::is_empty);
                if !empty || tokio::time::Instant::now() >= deadline {
                    break axum::Json(v).into_response();
                }
                // Emulating a long poll against a server that answers at once.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        "sendmessage" if state.flood.over_limit(&body["chat_id"].to_string()) => (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({
                "ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1",
                "parameters": {"retry_after": 1},
            })),
        )
            .into_response(),
        "sendmessage" => {
            let (status, mut v) = forward(state, bot, "sendMessage", &body).await?;
            // Reported once the emulator has stored it, so the test can read the chat right away.
            send(BotEvent::Sent(body.clone()));
            if let Some(date) = v["result"]["date"].as_i64().filter(|d| *d > 100_000_000_000) {
                v["result"]["date"] = json!(date / 1000);
            }
            (status, axum::Json(v)).into_response()
        }
        "editmessagetext" => {
            forward(state, bot, "editMessageText", &body).await?;
            send(BotEvent::Edited(body.clone()));
            ok(json!({
                "message_id": body["message_id"],
                "date": chrono_now(),
                "chat": { "id": body["chat_id"], "type": "private", "first_name": "Bot" },
                "text": body["text"],
            }))
        }
        "sendchataction" => {
            send(BotEvent::ChatAction {
                chat_id: body["chat_id"].as_i64().unwrap_or(0),
                action: body["action"].as_str().unwrap_or("").to_string(),
            });
            ok(json!(true))
        }
        "setmycommands" => {
            lock(&state.commands).extend(body["commands"].as_array().cloned().unwrap_or_default());
            ok(json!(true))
        }
        "setwebhook" => {
            // teloxide sends setWebhook as multipart; the emulator wants JSON.
            let url = body["url"]
                .as_str()
                .map(String::from)
                .or_else(|| multipart_field(raw, "url"));
            send(BotEvent::SetWebhook(url.clone()));
            let (status, v) = forward(state, bot, "setWebhook", &json!({ "url": url })).await?;
            // It answers `result: null` where Telegram answers `true`.
            if status.is_success() {
                ok(json!(true))
            } else {
                (status, axum::Json(v)).into_response()
            }
        }
        "getfile" => {
            let id = body["file_id"].as_str().unwrap_or("");
            match lock(&state.files)
                .get(id)
            {
                Some((path, bytes)) => ok(json!({
                    "file_id": id, "file_unique_id": format!("u{id}"), "file_size": bytes.len(), "file_path": path,
                })),
                None => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"})),
                )
                    .into_response(),
            }
        }
        _ => {
            let (status, v) = forward(state, bot, &method, &body).await?;
            if status.is_server_error() && v.get("ok").is_none() {
                (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"ok": false, "error_code": 404, "description": "Not Found"})),
                )
                    .into_response()
            } else {
                (status, axum::Json(v)).into_response()
            }
        }
    })
}

/// The value of a text field in a multipart/form-data body (enough for `setWebhook`'s `url`).
fn multipart_field(raw: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let marker = format!("name=\"{name}\"");
    let start = text.find(&marker)? + marker.len();
    let rest = &text[start..];
    let value_start = rest.find("\r\n\r\n")? + 4;
    let value = &rest[value_start..];
    let end = value.find("\r\n")?;
    Some(value[..end].to_string())
}

async fn download(State(state): State<ProxyState>, Path((_bot, path)): Path<(String, String)>) -> Response {
    let files = lock(&state.files);
    match files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
