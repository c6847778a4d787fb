//! [`MochatChannel`]: the socket, the HTTP fallback workers, inbound rules (mentions, reply delay) and sending.

use nanobot_util::lock;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{AllowList, Channel, ChannelError, api_client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::settings::ReplyDelayMode;
use crate::socket::{Incoming, Socket, ws_url};
use crate::{MochatSettings, NAME};

/// Message ids remembered per session / panel against redelivery.
const SEEN_CAPACITY: usize = 2000;
/// Bound of every HTTP call beyond the long-poll time.
const HTTP_MARGIN: Duration = Duration::from_secs(30);

fn transient(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ChannelError {
    ChannelError::Transient {
        channel: NAME.into(),
        source: e.into(),
    }
}

fn text_at<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    keys.iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_str).map(str::trim))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// Message content as text (0.3.5: strings trimmed, anything else as JSON).
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.trim().to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn mention_ids(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| match item {
            Value::String(s) => Some(s.trim()),
            Value::Object(_) => Some(text_at(item, &["id", "userId", "_id"])),
            _ => None,
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether a message payload mentions `agent` (meta flags, mention id lists, or `@agent` in the text).
fn was_mentioned(payload: &Value, agent: &str) -> bool {
    let meta = &payload["meta"];
    if meta["mentioned"] == json!(true) || meta["wasMentioned"] == json!(true) {
        return true;
    }
    if agent.is_empty() {
        return false;
    }
    if ["mentions", "mentionIds", "mentionedUserIds", "mentionedUsers"]
        .iter()
        .any(|k| mention_ids(&meta[*k]).contains(&agent))
    {
        return true;
    }
    payload["content"]
        .as_str()
        .is_some_and(|c| c.contains(&format!("<@{agent}>")) || c.contains(&format!("@{agent}")))
}

/// A message waiting to be handed over.
#[derive(Debug, Clone)]
struct Entry {
    body: String,
    author: String,
    sender_name: String,
    message_id: String,
    group_id: String,
}

#[derive(Default)]
struct Delay {
    entries: Vec<Entry>,
    generation: u64,
}

#[derive(Default)]
struct State {
    sessions: BTreeSet<String>,
    panels: BTreeSet<String>,
    cursors: HashMap<String, u64>,
    cold: HashSet<String>,
    by_converse: HashMap<String, String>,
    seen: HashMap<String, (HashSet<String>, VecDeque<String>)>,
    delays: HashMap<String, Delay>,
}

struct Inner {
    settings: MochatSettings,
    allow: AllowList,
    http: reqwest::Client,
    cursor_file: PathBuf,
    state: Mutex<State>,
    auto_sessions: bool,
    auto_panels: bool,
    handled: watch::Sender<u64>,
    socket_joins: watch::Sender<u64>,
    polling: watch::Sender<bool>,
    /// Fired when `run` ends: pending reply-delay timers are dropped with it.
    stopped: CancellationToken,
}

/// The Mochat channel. See the [crate docs](crate).
pub struct MochatChannel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MochatChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MochatChannel")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl MochatChannel {
    /// A channel with these settings that keeps session cursors in `<data_dir>/mochat/session_cursors.json` (the
    /// file 0.3.5 uses).
    pub fn new(settings: MochatSettings, data_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let http = api_client(NAME, |b| {
            b.timeout(settings.watch_timeout + HTTP_MARGIN)
                .redirect(reqwest::redirect::Policy::none())
        })?;
        let cursor_file = data_dir.into().join(NAME).join("session_cursors.json");
        let mut state = State::default();
        if let Ok(text) = std::fs::read_to_string(&cursor_file)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            for (sid, cur) in v["cursors"].as_object().into_iter().flatten() {
                if let Some(cur) = cur.as_u64() {
                    state.cursors.insert(sid.clone(), cur);
                }
            }
        }
        let auto_sessions = settings.sessions.iter().any(|s| s == "*");
        let auto_panels = settings.panels.iter().any(|s| s == "*");
        for sid in settings.sessions.iter().filter(|s| *s != "*") {
            if !state.cursors.contains_key(sid) {
                state.cold.insert(sid.clone());
            }
            state.sessions.insert(sid.clone());
        }
        state
            .panels
            .extend(settings.panels.iter().filter(|s| *s != "*").cloned());
        Ok(Self {
            inner: Arc::new(Inner {
                allow: AllowList::new(&settings.allow_from),
                settings,
                http,
                cursor_file,
                state: Mutex::new(state),
                auto_sessions,
                auto_panels,
                handled: watch::Sender::new(0),
                socket_joins: watch::Sender::new(0),
                polling: watch::Sender::new(false),
                stopped: CancellationToken::new(),
            }),
        })
    }

    /// Counts the message events finished with (handed over, buffered, ignored or duplicate).
    pub fn handled_events(&self) -> watch::Receiver<u64> {
        self.inner.handled.subscribe()
    }

    /// Counts the socket connections that joined and subscribed.
    pub fn socket_joins(&self) -> watch::Receiver<u64> {
        self.inner.socket_joins.subscribe()
    }

    /// True while the HTTP fallback workers run.
    pub fn polling(&self) -> watch::Receiver<bool> {
        self.inner.polling.subscribe()
    }
}

impl Inner {
    async fn post(&self, path: &str, body: &Value) -> Result<Value, ChannelError> {
        let resp = self
            .http
            .post(format!("{}{path}", self.settings.base_url))
            .header("X-Claw-Token", self.settings.claw_token.expose())
            .json(body)
            .send()
            .await
            .map_err(|e| transient(format!("{path}: {e}")))?;
        let status = resp.status();
        let value = nanobot_channels::download::read_json(resp).await;
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Err(ChannelError::Auth {
                channel: NAME.into(),
                source: format!("{path}: HTTP {status}: check channels.mochat.clawToken").into(),
            });
        }
        if !status.is_success() {
            return Err(transient(format!("{path}: HTTP {status}")));
        }
        // Mochat wraps answers as {code, data}; a code other than 200 is an error.
        if let Some(code) = value.get("code").and_then(Value::as_i64) {
            if code != 200 {
                let msg = nanobot_channels::server_text(
                    text_at(&value, &["message", "name"]),
                    &[self.settings.claw_token.expose()],
                );
                return Err(ChannelError::Rejected {
                    channel: NAME.into(),
                    source: format!("{path}: code {code} {msg}").into(),
                });
            }
            return Ok(value
                .get("data")
                .filter(|d| d.is_object())
                .cloned()
                .unwrap_or(json!({})));
        }
        Ok(if value.is_object() { value } else { json!({}) })
    }

    /// Rediscovers sessions and panels when configured with `"*"`; returns the new ones.
    async fn refresh(&self) -> (Vec<String>, Vec<String>) {
        let mut new_sessions = Vec::new();
        let mut new_panels = Vec::new();
        if self.auto_sessions {
            match self.post("/api/claw/sessions/list", &json!({})).await {
                Ok(v) => {
                    let mut st = lock(&self.state);
                    for s in v["sessions"].as_array().into_iter().flatten() {
                        let sid = text_at(s, &["sessionId"]);
                        if sid.is_empty() {
                            continue;
                        }
                        if st.sessions.insert(sid.to_string()) {
                            new_sessions.push(sid.to_string());
                            if !st.cursors.contains_key(sid) {
                                st.cold.insert(sid.to_string());
                            }
                        }
                        let cid = text_at(s, &["converseId"]);
                        if !cid.is_empty() {
                            st.by_converse.insert(cid.to_string(), sid.to_string());
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "mochat: listing sessions failed"),
            }
        }
        if self.auto_panels {
            match self.post("/api/claw/groups/get", &json!({})).await {
                Ok(v) => {
                    let mut st = lock(&self.state);
                    for p in v["panels"].as_array().into_iter().flatten() {
                        if p["type"].as_i64().is_some_and(|t| t != 0) {
                            continue;
                        }
                        let pid = text_at(p, &["id", "_id"]);
                        if !pid.is_empty() && st.panels.insert(pid.to_string()) {
                            new_panels.push(pid.to_string());
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "mochat: listing panels failed"),
            }
        }
        (new_sessions, new_panels)
    }

    fn mark_cursor(&self, sid: &str, cursor: u64) {
        let snapshot = {
            let mut st = lock(&self.state);
            if st.cursors.get(sid).is_some_and(|c| *c >= cursor) {
                return;
            }
            st.cursors.insert(sid.to_string(), cursor);
            st.cursors.clone()
        };
        let body = json!({"schemaVersion": 1, "cursors": snapshot});
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.cursor_file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            Ok(nanobot_util::write_atomic(
                &self.cursor_file,
                format!("{body:#}\n").as_bytes(),
            )?)
        };
        if let Err(e) = write() {
            tracing::warn!(error = %e, path = %self.cursor_file.display(), "mochat: cursor file not saved");
        }
    }

    /// Handles a session or panel payload `{sessionId, cursor, events}` (socket events, subscribe answers, watch).
    async fn watch_payload(
        self: &Arc<Self>,
        bus: &Arc<dyn Bus>,
        payload: &Value,
        kind: &str,
    ) -> Result<(), ChannelError> {
        let target = text_at(payload, &["sessionId", "panelId"]).to_string();
        if target.is_empty() {
            return Ok(());
        }
        if kind == "session"
            && let Some(c) = payload["cursor"].as_u64()
        {
            self.mark_cursor(&target, c);
        }
        let Some(events) = payload["events"].as_array() else {
            return Ok(());
        };
        // The first answer for a session without a stored cursor is history: not answered.
        if kind == "session" && lock(&self.state).cold.remove(&target) {
            tracing::debug!(session = %target, skipped = events.len(), "mochat: history of a new session skipped");
            return Ok(());
        }
        for ev in events {
            if kind == "session"
                && let Some(seq) = ev["seq"].as_u64()
            {
                self.mark_cursor(&target, seq);
            }
            if ev["type"] == "message.add" {
                self.inbound(bus, &target, ev, kind).await?;
            }
        }
        Ok(())
    }

    /// `notify:chat.message.add`: a panel message.
    async fn notify_message(self: &Arc<Self>, bus: &Arc<dyn Bus>, p: &Value) -> Result<(), ChannelError> {
        let group = text_at(p, &["groupId"]);
        let panel = text_at(p, &["converseId", "panelId"]);
        if group.is_empty() || panel.is_empty() {
            return Ok(());
        }
        {
            let st = lock(&self.state);
            if !st.panels.is_empty() && !st.panels.contains(panel) {
                return Ok(());
            }
        }
        let ev = synthetic(
            text_at(p, &["_id", "messageId"]),
            text_at(p, &["author"]),
            &p["content"],
            &p["meta"],
            group,
            &p["authorInfo"],
        );
        self.inbound(bus, panel, &ev, "panel").await
    }

    /// `notify:chat.inbox.append`: a direct message, mapped to its session by converse id.
    async fn notify_inbox(self: &Arc<Self>, bus: &Arc<dyn Bus>, p: &Value) -> Result<(), ChannelError> {
        let d = &p["payload"];
        if p["type"] != "message" || !text_at(d, &["groupId"]).is_empty() {
            return Ok(());
        }
        let converse = text_at(d, &["converseId"]);
        if converse.is_empty() {
            return Ok(());
        }
        let mut session = lock(&self.state).by_converse.get(converse).cloned();
        if session.is_none() && self.auto_sessions {
            self.refresh().await;
            session = lock(&self.state).by_converse.get(converse).cloned();
        }
        let Some(session) = session else {
            return Ok(());
        };
        let content = json!(text_at(d, &["messagePlainContent", "messageSnippet"]));
        let ev = synthetic(
            [text_at(d, &["messageId"]), text_at(p, &["_id"])]
                .into_iter()
                .find(|s| !s.is_empty())
                .unwrap_or_default(),
            text_at(d, &["messageAuthor"]),
            &content,
            &json!({"source": "notify:chat.inbox.append", "converseId": converse}),
            "",
            &Value::Null,
        );
        self.inbound(bus, &session, &ev, "session").await
    }

    /// One `message.add` event of session / panel `target`.
    async fn inbound(
        self: &Arc<Self>,
        bus: &Arc<dyn Bus>,
        target: &str,
        ev: &Value,
        kind: &str,
    ) -> Result<(), ChannelError> {
        let result = self.inbound_inner(bus, target, ev, kind).await;
        self.handled.send_modify(|n| *n += 1);
        result
    }

    async fn inbound_inner(
        self: &Arc<Self>,
        bus: &Arc<dyn Bus>,
        target: &str,
        ev: &Value,
        kind: &str,
    ) -> Result<(), ChannelError> {
        let p = &ev["payload"];
        let author = text_at(p, &["author"]);
        let agent = self.settings.agent_user_id.as_str();
        if author.is_empty() || (!agent.is_empty() && author == agent) {
            return Ok(());
        }
        if !self.allow.allows(author) {
            tracing::info!(sender = %author, "mochat: access denied");
            return Ok(());
        }
        let key = format!("{kind}:{target}");
        let message_id = text_at(p, &["messageId"]);
        if !message_id.is_empty() {
            let mut st = lock(&self.state);
            let (set, queue) = st.seen.entry(key.clone()).or_default();
            if !set.insert(message_id.to_string()) {
                tracing::debug!(message = %message_id, "mochat: duplicate delivery ignored");
                return Ok(());
            }
            queue.push_back(message_id.to_string());
            while queue.len() > SEEN_CAPACITY {
                if let Some(old) = queue.pop_front() {
                    set.remove(&old);
                }
            }
        }
        let mut body = content_text(&p["content"]);
        if body.is_empty() {
            body = "[empty message]".into();
        }
        let group_id = text_at(p, &["groupId"]).to_string();
        let mentioned = was_mentioned(p, agent);
        let panel = kind == "panel";
        let require = panel && !group_id.is_empty() && self.settings.requires_mention(target, &group_id);
        let delay = panel && self.settings.reply_delay_mode == ReplyDelayMode::NonMention;
        if require && !mentioned && !delay {
            return Ok(());
        }
        let entry = Entry {
            body,
            author: author.to_string(),
            sender_name: text_at(&p["authorInfo"], &["nickname", "email"]).to_string(),
            message_id: message_id.to_string(),
            group_id,
        };
        if !delay {
            return self.dispatch(bus, target, kind, vec![entry], mentioned).await;
        }
        if mentioned {
            let mut entries = {
                let mut st = lock(&self.state);
                let d = st.delays.entry(key).or_default();
                d.generation += 1;
                std::mem::take(&mut d.entries)
            };
            entries.push(entry);
            return self.dispatch(bus, target, kind, entries, true).await;
        }
        let generation = {
            let mut st = lock(&self.state);
            let d = st.delays.entry(key.clone()).or_default();
            d.entries.push(entry);
            d.generation += 1;
            d.generation
        };
        let me = self.clone();
        let bus = bus.clone();
        let target = target.to_string();
        let kind = kind.to_string();
        tokio::spawn(async move {
            tokio::select! {
                () = me.stopped.cancelled() => return,
                () = tokio::time::sleep(me.settings.reply_delay) => {}
            }
            let entries = {
                let mut st = lock(&me.state);
                match st.delays.get_mut(&key) {
                    Some(d) if d.generation == generation => std::mem::take(&mut d.entries),
                    _ => return,
                }
            };
            if let Err(e) = me.dispatch(&bus, &target, &kind, entries, false).await {
                tracing::warn!(error = %e, "mochat: delayed messages not handed over");
            }
        });
        Ok(())
    }

    async fn dispatch(
        &self,
        bus: &Arc<dyn Bus>,
        target: &str,
        kind: &str,
        entries: Vec<Entry>,
        mentioned: bool,
    ) -> Result<(), ChannelError> {
        let Some(last) = entries.last().cloned() else {
            return Ok(());
        };
        let group = !last.group_id.is_empty();
        let body = if entries.len() == 1 {
            last.body.clone()
        } else {
            entries
                .iter()
                .map(|e| {
                    let label = if e.sender_name.is_empty() {
                        &e.author
                    } else {
                        &e.sender_name
                    };
                    if group {
                        format!("{label}: {}", e.body)
                    } else {
                        e.body.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let msg = InboundMessage::new(NAME, last.author.clone(), target.to_string(), body)
            .with_metadata("message_id", last.message_id.clone())
            .with_metadata("is_group", group)
            .with_metadata("group_id", last.group_id.clone())
            .with_metadata("sender_name", last.sender_name.clone())
            .with_metadata("target_kind", kind)
            .with_metadata("was_mentioned", mentioned)
            .with_metadata("buffered_count", entries.len());
        bus.publish_inbound(msg).await?;
        Ok(())
    }

    /// Joins the socket and subscribes to every known session and panel.
    async fn join(&self) -> Result<(Socket, Vec<Value>), String> {
        let url = ws_url(&self.settings.socket_url, &self.settings.socket_path);
        let auth = json!({"token": self.settings.claw_token.expose()});
        let mut socket = Socket::connect(&url, &auth, self.settings.connect_timeout).await?;
        let (sessions, panels, cursors) = {
            let st = lock(&self.state);
            (
                st.sessions.iter().cloned().collect::<Vec<_>>(),
                st.panels.iter().cloned().collect::<Vec<_>>(),
                st.cursors.clone(),
            )
        };
        let mut initial = Vec::new();
        if !sessions.is_empty() {
            let ack = socket
                .call(
                    "com.claw.im.subscribeSessions",
                    &json!({"sessionIds": sessions, "cursors": cursors, "limit": self.settings.watch_limit}),
                )
                .await?;
            if ack["result"] != json!(true) {
                return Err(format!(
                    "subscribeSessions refused: {}",
                    text_at(&ack, &["message"])
                ));
            }
            match &ack["data"] {
                Value::Array(items) => initial.extend(items.iter().cloned()),
                Value::Object(o) => match o.get("sessions") {
                    Some(Value::Array(items)) => initial.extend(items.iter().cloned()),
                    _ if o.contains_key("sessionId") => initial.push(ack["data"].clone()),
                    _ => {}
                },
                _ => {}
            }
        }
        if !panels.is_empty() || self.auto_panels {
            let ack = socket
                .call("com.claw.im.subscribePanels", &json!({"panelIds": panels}))
                .await?;
            if ack["result"] != json!(true) {
                return Err(format!(
                    "subscribePanels refused: {}",
                    text_at(&ack, &["message"])
                ));
            }
        }
        Ok((socket, initial))
    }

    /// One socket connection, until it drops or `cancel` fires.
    async fn socket_session(
        self: &Arc<Self>,
        bus: &Arc<dyn Bus>,
        cancel: &CancellationToken,
        mut socket: Socket,
        initial: Vec<Value>,
    ) -> Result<Option<String>, ChannelError> {
        for p in &initial {
            self.watch_payload(bus, p, "session").await?;
        }
        let mut refresh = tokio::time::interval(self.settings.refresh_interval);
        refresh.tick().await;
        loop {
            let incoming = tokio::select! {
                () = cancel.cancelled() => {
                    socket.close().await;
                    return Ok(None);
                }
                _ = refresh.tick(), if self.auto_sessions || self.auto_panels => {
                    let (sessions, panels) = self.refresh().await;
                    let cursors = lock(&self.state).cursors.clone();
                    if !sessions.is_empty() {
                        match socket.call("com.claw.im.subscribeSessions", &json!({"sessionIds": sessions,
                            "cursors": cursors, "limit": self.settings.watch_limit})).await {
                            Ok(ack) => {
                                if let Value::Object(o) = &ack["data"]
                                    && let Some(Value::Array(items)) = o.get("sessions") {
                                    for p in items { self.watch_payload(bus, p, "session").await?; }
                                }
                            }
                            Err(e) => return Ok(Some(e)),
                        }
                    }
                    if !panels.is_empty()
                        && let Err(e) = socket.call("com.claw.im.subscribePanels", &json!({"panelIds": panels})).await
                    {
                        return Ok(Some(e));
                    }
                    continue;
                }
                ev = socket.next() => ev,
            };
            let result = match incoming {
                Incoming::Closed(why) => return Ok(Some(why)),
                Incoming::Event(name, data) => match name.as_str() {
                    "claw.session.events" => self.watch_payload(bus, &data, "session").await,
                    "claw.panel.events" => self.watch_payload(bus, &data, "panel").await,
                    "notify:chat.message.add" => self.notify_message(bus, &data).await,
                    "notify:chat.inbox.append" => self.notify_inbox(bus, &data).await,
                    _ => Ok(()),
                },
            };
            if let Err(e) = result {
                if matches!(e, ChannelError::Bus(_)) {
                    return Err(e);
                }
                tracing::warn!(error = %e, "mochat: event not handled");
            }
        }
    }

    /// The HTTP fallback: a long-poll per session, a poll per panel, until `stop` fires.
    async fn fallback(self: Arc<Self>, bus: Arc<dyn Bus>, stop: CancellationToken) {
        self.polling.send_replace(true);
        let mut workers = tokio::task::JoinSet::new();
        let mut running: HashSet<String> = HashSet::new();
        let mut refresh = tokio::time::interval(self.settings.refresh_interval);
        loop {
            let (sessions, panels) = {
                let st = lock(&self.state);
                (st.sessions.clone(), st.panels.clone())
            };
            for sid in sessions {
                if running.insert(format!("session:{sid}")) {
                    workers.spawn(self.clone().watch_worker(bus.clone(), stop.clone(), sid));
                }
            }
            for pid in panels {
                if running.insert(format!("panel:{pid}")) {
                    workers.spawn(self.clone().panel_worker(bus.clone(), stop.clone(), pid));
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                _ = refresh.tick() => {
                    if self.auto_sessions || self.auto_panels { self.refresh().await; }
                }
            }
        }
        workers.shutdown().await;
        self.polling.send_replace(false);
    }

    async fn watch_worker(self: Arc<Self>, bus: Arc<dyn Bus>, stop: CancellationToken, sid: String) {
        while !stop.is_cancelled() {
            let cursor = lock(&self.state).cursors.get(&sid).copied().unwrap_or(0);
            let body = json!({"sessionId": sid, "cursor": cursor,
                "timeoutMs": self.settings.watch_timeout.as_millis() as u64, "limit": self.settings.watch_limit});
            let result = tokio::select! {
                () = stop.cancelled() => return,
                r = self.post("/api/claw/sessions/watch", &body) => r,
            };
            let outcome = match result {
                Ok(payload) => self.watch_payload(&bus, &payload, "session").await,
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                tracing::warn!(error = %e, session = %sid, "mochat: watch failed");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(self.settings.retry_delay) => {}
                }
            }
        }
    }

    async fn panel_worker(self: Arc<Self>, bus: Arc<dyn Bus>, stop: CancellationToken, pid: String) {
        while !stop.is_cancelled() {
            let body = json!({"panelId": pid, "limit": self.settings.watch_limit.min(100)});
            match self.post("/api/claw/groups/panels/messages", &body).await {
                Ok(resp) => {
                    let group = text_at(&resp, &["groupId"]).to_string();
                    for m in resp["messages"].as_array().into_iter().flatten().rev() {
                        let ev = synthetic(
                            text_at(m, &["messageId"]),
                            text_at(m, &["author"]),
                            &m["content"],
                            &m["meta"],
                            &group,
                            &m["authorInfo"],
                        );
                        if let Err(e) = self.inbound(&bus, &pid, &ev, "panel").await {
                            tracing::warn!(error = %e, panel = %pid, "mochat: panel message not handled");
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, panel = %pid, "mochat: panel poll failed"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.settings.refresh_interval) => {}
            }
        }
    }
}

fn synthetic(
    id: &str,
    author: &str,
    content: &Value,
    meta: &Value,
    group: &str,
    author_info: &Value,
) -> Value {
    json!({"type": "message.add", "payload": {"messageId": id, "author": author, "content": content,
        "meta": if meta.is_object() { meta.clone() } else { json!({}) }, "groupId": group,
        "authorInfo": if author_info.is_object() { author_info.clone() } else { json!({}) }}})
}

/// Where a chat id points: a session (`session_…`) or a panel (prefixes `group:`, `channel:`, `panel:` force one).
fn target(raw: &str) -> (String, bool) {
    let trimmed = raw.trim();
    let lower = trimmed.to_ascii_lowercase();
    for (prefix, panel) in [
        ("mochat:", false),
        ("group:", true),
        ("channel:", true),
        ("panel:", true),
    ] {
        if lower.starts_with(prefix) {
            let id = trimmed[prefix.len()..].trim().to_string();
            let is_panel = panel || !id.starts_with("session_");
            return (id, is_panel);
        }
    }
    (trimmed.to_string(), !trimmed.starts_with("session_"))
}

impl MochatChannel {
    async fn run_until(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let inner = &self.inner;
        inner.refresh().await;
        let mut backoff = inner.settings.reconnect_delay;
        let mut failures = 0u64;
        let mut poller: Option<(CancellationToken, tokio::task::JoinHandle<()>)> = None;
        loop {
            let socket_allowed =
                inner.settings.max_retry_attempts == 0 || failures <= inner.settings.max_retry_attempts;
            let joined = if socket_allowed {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    r = inner.join() => r,
                }
            } else {
                Err("socket given up after maxRetryAttempts".into())
            };
            match joined {
                Ok((socket, initial)) => {
                    if let Some((stop, task)) = poller.take() {
                        stop.cancel();
                        let _ = task.await;
                    }
                    inner.socket_joins.send_modify(|n| *n += 1);
                    tracing::info!("mochat: socket connected and subscribed");
                    backoff = inner.settings.reconnect_delay;
                    failures = 0;
                    match inner.socket_session(&bus, &cancel, socket, initial).await? {
                        None => break,
                        Some(why) => {
                            tracing::warn!(reason = %why, "mochat: socket disconnected; polling over HTTP meanwhile")
                        }
                    }
                }
                Err(why) => {
                    failures += 1;
                    tracing::warn!(reason = %why, retry_in = ?backoff, "mochat: socket unavailable; polling over HTTP");
                }
            }
            if poller.is_none() {
                let stop = cancel.child_token();
                let task = tokio::spawn(inner.clone().fallback(bus.clone(), stop.clone()));
                poller = Some((stop, task));
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(inner.settings.max_reconnect_delay);
        }
        if let Some((stop, task)) = poller.take() {
            stop.cancel();
            let _ = task.await;
        }
        Ok(())
    }
}

#[async_trait]
impl Channel for MochatChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let result = self.run_until(bus, cancel).await;
        self.inner.stopped.cancel();
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let mut parts: Vec<&str> = Vec::new();
        if !msg.content.trim().is_empty() {
            parts.push(msg.content.trim());
        }
        // 0.3.5 sends media references as lines of text.
        parts.extend(msg.media.iter().map(|m| m.trim()).filter(|m| !m.is_empty()));
        let content = parts.join("\n");
        if content.is_empty() {
            return Ok(());
        }
        let (id, forced_panel) = target(&msg.chat_id);
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        let known_panel = lock(&self.inner.state).panels.contains(&id);
        let panel = (forced_panel || known_panel) && !id.starts_with("session_");
        let reply_to = msg.reply_to.as_deref().filter(|r| !r.is_empty());
        if panel {
            let mut body = json!({"panelId": id, "content": content});
            if let Some(r) = reply_to {
                body["replyTo"] = json!(r);
            }
            if let Some(g) = ["group_id", "groupId"]
                .iter()
                .find_map(|k| msg.metadata.get(*k).and_then(Value::as_str))
                .map(str::trim)
                .filter(|g| !g.is_empty())
            {
                body["groupId"] = json!(g);
            }
            self.inner
                .post("/api/claw/groups/panels/send", &body)
                .await
                .map(drop)
        } else {
            let mut body = json!({"sessionId": id, "content": content});
            if let Some(r) = reply_to {
                body["replyTo"] = json!(r);
            }
            self.inner.post("/api/claw/sessions/send", &body).await.map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_and_targets() {
        let p = json!({"content": "hi", "meta": {"mentionIds": ["agent1"]}});
        assert!(was_mentioned(&p, "agent1"));
        assert!(!was_mentioned(&p, "agent2"));
        assert!(was_mentioned(&json!({"content": "yo @agent2"}), "agent2"));
        assert!(was_mentioned(
            &json!({"meta": {"mentions": [{"userId": "a"}]}}),
            "a"
        ));
        assert!(was_mentioned(&json!({"meta": {"wasMentioned": true}}), ""));
        assert_eq!(target("session_1"), ("session_1".into(), false));
        assert_eq!(target("panel:p1"), ("p1".into(), true));
        assert_eq!(target("p2"), ("p2".into(), true));
        assert_eq!(target("mochat:session_9"), ("session_9".into(), false));
        assert_eq!(content_text(&json!({"a": 1})), r#"{"a":1}"#);
    }
}
