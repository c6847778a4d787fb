//! [`WebSocketChannel`]: the listener, the handshake checks, one task pair per connection, and fan-out of the
//! agent's messages to the connections subscribed to a chat (held for the chat's next connection when none is
//! there).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt as _, StreamExt as _};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage, Receipt, Settlement};
use nanobot_channels::{AllowList, Channel, ChannelError};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::protocol::{self, Inbound, control, is_valid_chat_id};
use crate::settings::Listen;
use crate::store::{ChatOwner, WebUiStore};
use crate::tokens::TokenStore;
use crate::{NAME, WebSocketError, WebSocketSettings, media};

/// Frames queued for one connection before it counts as too slow and is closed.
const OUTBOUND_QUEUE: usize = 256;
/// How long one frame may take to send.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an answer waits for its chat's next connection when none is attached.
const HELD_FOR: Duration = Duration::from_secs(600);
/// Answers held per chat (the oldest go first).
const HELD_PER_CHAT: usize = 32;
/// Chats with held answers (the one held longest goes first).
const HELD_CHATS: usize = 256;
/// Bytes of held answers, all chats together (the oldest answers go first).
const HELD_BYTES: usize = 8 << 20;

pub(crate) use nanobot_util::lock;

struct Conn {
    tx: mpsc::Sender<Message>,
    chats: HashSet<String>,
    /// Temporary chats this connection created (`new_temporary_chat`): their sessions are deleted when
    /// discarded or when the connection ends.
    temporary: HashSet<String>,
    kill: CancellationToken,
}

#[derive(Default)]
struct Hub {
    next: u64,
    conns: HashMap<u64, Conn>,
    subs: HashMap<String, HashSet<u64>>,
    /// The client each chat belongs to (known in this process: claimed here, or read from the store).
    owners: HashMap<String, String>,
    /// Chats whose owner this process has recorded in the store (or read from it).
    recorded: HashSet<String>,
    /// Answers for chats no connection was attached to when they came (a client between two connections, or a
    /// replica that took the channel over before the client reconnected): the next connection that attaches to
    /// the chat gets them, once.
    held: HeldAnswers,
}

/// Answers waiting for their chat's next connection, by chat, oldest first, within [`HELD_FOR`] and the other
/// `HELD_` bounds.
#[derive(Default)]
struct HeldAnswers {
    chats: HashMap<String, VecDeque<Held>>,
    /// Answers held so far (orders them across chats).
    count: u64,
}

/// An answer held for a chat's next connection.
struct Held {
    /// Its place among all held answers (the smallest is the oldest).
    order: u64,
    at: Instant,
    frame: String,
    /// A durable bus's receipt of the answer: settled once the answer is sent or given up; dropped with the
    /// channel (it stopped, or its process died), the answer goes to the channel's next holder.
    receipt: Option<Box<dyn Receipt>>,
}

/// Receipts of answers sent or given up: settled (off the hub's lock).
fn settle_all(receipts: Vec<Box<dyn Receipt>>) {
    if receipts.is_empty() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        for r in receipts {
            r.settle(Settlement::Done).await;
        }
    });
}

impl HeldAnswers {
    /// Keeps `frame` for `chat` (with its receipt), dropping what expired and, past a bound, the oldest answers.
    /// Returns the receipts of the answers dropped (given up: settle them).
    fn hold(&mut self, chat: &str, frame: &str, receipt: Option<Box<dyn Receipt>>) -> Vec<Box<dyn Receipt>> {
        let now = Instant::now();
        let mut given_up = Vec::new();
        self.chats.retain(|_, frames| {
            let (fresh, expired): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(frames)
                .into_iter()
                .partition(|h| now.duration_since(h.at) < HELD_FOR);
            *frames = fresh;
            given_up.extend(expired.into_iter().filter_map(|h| h.receipt));
            !frames.is_empty()
        });
        if !self.chats.contains_key(chat)
            && self.chats.len() >= HELD_CHATS
            && let Some(oldest) = self.oldest_chat()
        {
            tracing::warn!(chat = %oldest, "websocket: too many chats with answers waiting; dropping the oldest");
            given_up.extend(
                self.chats
                    .remove(&oldest)
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.receipt),
            );
        }
        let frames = self.chats.entry(chat.to_owned()).or_default();
        if frames.len() >= HELD_PER_CHAT {
            given_up.extend(frames.pop_front().and_then(|h| h.receipt));
        }
        self.count += 1;
        frames.push_back(Held {
            order: self.count,
            at: now,
            frame: frame.to_owned(),
            receipt,
        });
        let mut bytes = self.bytes();
        while bytes > HELD_BYTES
            && let Some(oldest) = self.oldest_chat()
        {
            tracing::warn!(chat = %oldest, "websocket: answers waiting take too much memory; dropping the oldest");
            if let Some(frames) = self.chats.get_mut(&oldest) {
                if let Some(h) = frames.pop_front() {
                    bytes -= h.frame.len();
                    given_up.extend(h.receipt);
                }
                if frames.is_empty() {
                    self.chats.remove(&oldest);
                }
            }
        }
        given_up
    }

    /// The answers held for `chat` (still within [`HELD_FOR`]), handed over once, and the receipts of all it
    /// held (settle them once the answers are on their way).
    fn take(&mut self, chat: &str) -> (Vec<String>, Vec<Box<dyn Receipt>>) {
        let now = Instant::now();
        let mut frames = Vec::new();
        let mut receipts = Vec::new();
        for h in self.chats.remove(chat).into_iter().flatten() {
            if now.duration_since(h.at) < HELD_FOR {
                frames.push(h.frame);
            }
            receipts.extend(h.receipt);
        }
        (frames, receipts)
    }

    /// The chat whose first held answer is the oldest of all.
    fn oldest_chat(&self) -> Option<String> {
        self.chats
            .iter()
            .min_by_key(|(_, frames)| frames.front().map(|h| h.order))
            .map(|(chat, _)| chat.clone())
    }

    fn bytes(&self) -> usize {
        self.chats.values().flatten().map(|h| h.frame.len()).sum()
    }
}

impl Hub {
    fn attach(&mut self, id: u64, chat: &str) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.chats.insert(chat.to_string());
            self.subs.entry(chat.to_string()).or_default().insert(id);
        }
    }

    fn detach(&mut self, id: u64, chat: &str) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.chats.remove(chat);
        }
        if let Some(set) = self.subs.get_mut(chat) {
            set.remove(&id);
            if set.is_empty() {
                self.subs.remove(chat);
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            c.kill.cancel();
            for chat in c.chats {
                if let Some(set) = self.subs.get_mut(&chat) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.subs.remove(&chat);
                    }
                }
            }
        }
    }
}

/// What a connection proved at the handshake.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// The client it is: bound by its token when the token was issued for a client, else as declared.
    pub(crate) client_id: String,
    pub(crate) remote: Option<SocketAddr>,
    /// Authenticated as the WebUI (bootstrap token or trusted proxy): may use `webui_request`.
    pub(crate) trusted: bool,
    /// Whose chats it may attach and send to.
    pub(crate) identity: Identity,
}

/// Who a connection is, as far as chats are concerned: decided at the handshake from what it proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The WebUI (bootstrap token) or a trusted proxy's user: the machine's owner, who reaches every chat.
    Owner,
    /// A client, by name: the `client_id` its token was issued for, one name for every holder of the static
    /// token, a name of its own for an unbound issued token, or (with no token configured, where nothing is
    /// proved) the `client_id` it declares.
    Client(String),
}

pub(crate) struct Inner {
    pub(crate) settings: WebSocketSettings,
    pub(crate) media_dir: PathBuf,
    pub(crate) store: Option<Arc<dyn WebUiStore>>,
    pub(crate) allow: AllowList,
    pub(crate) tokens: TokenStore,
    hub: Mutex<Hub>,
    bound: watch::Sender<Option<SocketAddr>>,
    /// Connections refused or closed before their upgrade, by cause.
    refusals: Arc<crate::listen::Refusals>,
}

/// The websocket channel. See the [crate docs](crate).
#[derive(Clone)]
pub struct WebSocketChannel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WebSocketChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketChannel")
            .field("settings", &self.inner.settings)
            .field("media_dir", &self.inner.media_dir)
            .finish_non_exhaustive()
    }
}

impl WebSocketChannel {
    /// A channel with these settings that stores uploaded files in `media_dir`. Without
    /// [`with_store`](Self::with_store) the WebUI's session list, memory and cron views answer `503`.
    pub fn new(settings: WebSocketSettings, media_dir: impl Into<PathBuf>) -> Self {
        let allow = AllowList::new(&settings.allow_from);
        Self {
            inner: Arc::new(Inner {
                settings,
                media_dir: media_dir.into(),
                store: None,
                allow,
                tokens: TokenStore::default(),
                hub: Mutex::new(Hub::default()),
                bound: watch::Sender::new(None),
                refusals: Arc::default(),
            }),
        }
    }

    /// Gives the WebUI read access to sessions, memory and cron jobs (and session deletion).
    #[must_use]
    pub fn with_store(self, store: Arc<dyn WebUiStore>) -> Self {
        let Self { inner } = self;
        match Arc::try_unwrap(inner) {
            Ok(mut inner) => {
                inner.store = Some(store);
                Self {
                    inner: Arc::new(inner),
                }
            }
            // Already shared (running): keep it as it is.
            Err(inner) => Self { inner },
        }
    }

    /// The settings.
    pub fn settings(&self) -> &WebSocketSettings {
        &self.inner.settings
    }

    /// The TCP address the channel listens on, once bound (`None` before, and for Unix sockets).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.inner.bound.borrow()
    }

    /// Waits until the listener is bound, up to `within`; the TCP address (None on timeout or Unix sockets).
    pub async fn wait_bound(&self, within: Duration) -> Option<SocketAddr> {
        let mut rx = self.inner.bound.subscribe();
        tokio::time::timeout(within, rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|v| *v))
    }

    /// Connections refused so far because their address held `max_connections_per_client` already (a
    /// metric).
    pub fn refused_connections(&self) -> u64 {
        self.refusals()[0].1
    }

    /// Connections refused or closed before their upgrade so far, by cause: `per_client_cap` (the address held
    /// `maxConnectionsPerClient` already), `header_timeout` (no request head within `headerReadTimeoutS`),
    /// `tls_handshake` (no TLS handshake within it). Counters, for the gateway's `/metrics`.
    pub fn refusals(&self) -> [(&'static str, u64); 3] {
        self.inner.refusals.snapshot()
    }

    /// Number of open connections.
    pub fn connections(&self) -> usize {
        lock(&self.inner.hub).conns.len()
    }
}

fn io_error(path: String) -> impl FnOnce(std::io::Error) -> ChannelError {
    move |source| ChannelError::Io { path, source }
}

#[async_trait]
impl Channel for WebSocketChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let app = crate::server::App {
            inner: self.inner.clone(),
            bus,
            cancel: cancel.child_token(),
        };
        let router = crate::server::router(app.clone());
        // Certificate and key are read at start, so a bad file stops the channel with an error naming it.
        let tls = match &self.inner.settings.tls {
            Some(files) => Some(crate::listen::tls_acceptor(&files.cert, &files.key)?),
            None => None,
        };
        let result = match &self.inner.settings.listen {
            Listen::Tcp { host, port } => {
                let target = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                let listener =
                    tokio::net::TcpListener::bind(&target)
                        .await
                        .map_err(|e| ChannelError::Config {
                            channel: NAME.into(),
                            message: format!("cannot listen on {target} (channels.websocket.host/port): {e}"),
                        })?;
                let addr = listener.local_addr().ok();
                self.inner.bound.send_replace(addr);
                tracing::info!(?addr, path = %self.inner.settings.path, tls = tls.is_some(), "websocket: listening");
                let per_client = Arc::new(crate::listen::PerClient::default());
                loop {
                    let (stream, remote) = tokio::select! {
                        () = cancel.cancelled() => break Ok(()),
                        r = listener.accept() => match r {
                            Ok(pair) => pair,
                            Err(e) => {
                                // Out of file descriptors and the like: wait a moment instead of spinning.
                                tracing::warn!(error = %e, "websocket: accept failed");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                        },
                    };
                    let cap = self.inner.settings.max_connections_per_client;
                    let Some(slot) = per_client.enter(remote.ip(), cap) else {
                        self.inner.refusals.per_client_cap();
                        tracing::debug!(%remote, "websocket: too many connections from this address");
                        tokio::spawn(crate::listen::refuse(stream));
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let serve = crate::listen::serve_stream(
                        stream,
                        Some(remote),
                        router.clone(),
                        tls.clone(),
                        self.inner.settings.header_read_timeout,
                        self.inner.refusals.clone(),
                        app.cancel.clone(),
                    );
                    tokio::spawn(async move {
                        serve.await;
                        drop(slot);
                    });
                }
            }
            Listen::Unix(path) => {
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir)
                        .await
                        .map_err(io_error(dir.display().to_string()))?;
                }
                let _ = tokio::fs::remove_file(path).await;
                let listener =
                    tokio::net::UnixListener::bind(path).map_err(io_error(path.display().to_string()))?;
                {
                    use std::os::unix::fs::PermissionsExt as _;
                    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .await
                        .map_err(io_error(path.display().to_string()))?;
                }
                tracing::info!(path = %path.display(), "websocket: listening on a unix socket");
                let r = loop {
                    let stream = tokio::select! {
                        () = cancel.cancelled() => break Ok(()),
                        r = listener.accept() => match r {
                            Ok((stream, _)) => stream,
                            Err(e) => {
                                tracing::warn!(error = %e, "websocket: accept failed");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                        },
                    };
                    tokio::spawn(crate::listen::serve_stream(
                        stream,
                        None,
                        router.clone(),
                        tls.clone(),
                        self.inner.settings.header_read_timeout,
                        self.inner.refusals.clone(),
                        app.cancel.clone(),
                    ));
                };
                let _ = tokio::fs::remove_file(path).await;
                r
            }
        };
        app.cancel.cancel();
        self.inner.bound.send_replace(None);
        // Answers held for clients that did not come back go back to a durable bus (their receipts dropped
        // unsettled), for the channel's next run here or its next holder elsewhere.
        let held = std::mem::take(&mut lock(&self.inner.hub).held);
        drop(held);
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        self.send_receipted(msg, &mut None).await
    }

    async fn send_receipted(
        &self,
        msg: &OutboundMessage,
        receipt: &mut Option<Box<dyn Receipt>>,
    ) -> Result<(), ChannelError> {
        let frame = protocol::event(msg).to_string();
        // What a reconnecting client needs is the answer: breadcrumbs and stream pieces are not kept for it (a
        // stream's end carries the whole text).
        let keep = matches!(msg.kind, OutboundKind::Reply | OutboundKind::StreamEnd { .. });
        self.inner.fan_out(&msg.chat_id, &frame, keep.then_some(receipt));
        Ok(())
    }

    fn supports_streaming(&self) -> bool {
        self.inner.settings.streaming
    }
}

impl Inner {
    /// Queues `frame` for every connection subscribed to `chat`; a connection whose queue is full is closed.
    /// With none subscribed, a frame to keep (`keep`: where its receipt is) is held for the chat's next
    /// connection, with its receipt.
    fn fan_out(&self, chat: &str, frame: &str, keep: Option<&mut Option<Box<dyn Receipt>>>) {
        let mut hub = lock(&self.hub);
        let Some(ids) = hub.subs.get(chat).cloned() else {
            if let Some(receipt) = keep {
                let given_up = hub.held.hold(chat, frame, receipt.take());
                drop(hub);
                settle_all(given_up);
            }
            return;
        };
        let mut slow = Vec::new();
        for id in ids {
            if let Some(c) = hub.conns.get(&id)
                && c.tx.try_send(Message::text(frame)).is_err()
            {
                slow.push(id);
            }
        }
        for id in slow {
            tracing::warn!(conn = id, "websocket: closing a connection that does not keep up");
            hub.remove(id);
        }
    }

    fn send_to(&self, id: u64, frame: String) {
        let mut hub = lock(&self.hub);
        let full = hub
            .conns
            .get(&id)
            .is_some_and(|c| c.tx.try_send(Message::text(frame)).is_err());
        if full {
            hub.remove(id);
        }
    }
}

/// Serves one upgraded connection until it closes, the channel stops, or it falls behind.
pub(crate) async fn serve_connection<S>(app: crate::server::App, ws: WebSocketStream<S>, peer: Peer)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let inner = app.inner.clone();
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
    let kill = app.cancel.child_token();
    let default_chat = uuid::Uuid::new_v4().to_string();
    let id = {
        let mut hub = lock(&inner.hub);
        hub.next += 1;
        let id = hub.next;
        let ready = control(
            "ready",
            json!({"chat_id": default_chat, "client_id": peer.client_id}),
        );
        // The queue is empty: the first frame always fits.
        let _ = tx.try_send(Message::text(ready));
        hub.conns.insert(
            id,
            Conn {
                tx,
                chats: HashSet::new(),
                temporary: HashSet::new(),
                kill: kill.clone(),
            },
        );
        hub.attach(id, &default_chat);
        if let Identity::Client(me) = &peer.identity {
            hub.owners.insert(default_chat.clone(), me.clone());
        }
        id
    };
    let ping_every = inner.settings.ping_interval;
    let writer_kill = kill.clone();
    let writer = tokio::spawn(async move {
        let mut ping = tokio::time::interval(ping_every);
        ping.tick().await;
        loop {
            let msg = tokio::select! {
                () = writer_kill.cancelled() => break,
                m = rx.recv() => match m { Some(m) => m, None => break },
                _ = ping.tick() => Message::Ping(Vec::new().into()),
            };
            match tokio::time::timeout(SEND_TIMEOUT, sink.send(msg)).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
    });
    let mut conn = Connection {
        app: &app,
        id,
        peer: &peer,
        default_chat,
    };
    // Any frame (a pong included) proves the peer alive; one silent for a ping interval plus the pong timeout
    // is gone.
    let silent_for = inner.settings.ping_interval + inner.settings.ping_timeout;
    loop {
        let frame = tokio::select! {
            () = kill.cancelled() => break,
            f = tokio::time::timeout(silent_for, stream.next()) => match f {
                Ok(f) => f,
                Err(_) => {
                    tracing::debug!(client = %peer.client_id, "websocket: no pong within the ping timeout; closing");
                    break;
                }
            },
        };
        let text = match frame {
            Some(Ok(Message::Text(t))) => t.as_str().to_string(),
            Some(Ok(Message::Binary(b))) => match String::from_utf8(b.to_vec()) {
                Ok(t) => t,
                Err(_) => continue,
            },
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        };
        conn.handle(&text).await;
    }
    let temporary: Vec<String> = lock(&inner.hub)
        .conns
        .get(&id)
        .map(|c| c.temporary.iter().cloned().collect())
        .unwrap_or_default();
    lock(&inner.hub).remove(id);
    for chat in temporary {
        discard_session(&inner, &chat).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

struct Connection<'a> {
    app: &'a crate::server::App,
    id: u64,
    peer: &'a Peer,
    default_chat: String,
}

impl Connection<'_> {
    fn inner(&self) -> &Inner {
        &self.app.inner
    }

    fn reply(&self, event: &str, fields: Value) {
        self.inner().send_to(self.id, control(event, fields));
    }

    fn attach(&self, chat: &str) {
        lock(&self.inner().hub).attach(self.id, chat);
    }

    /// Sends this connection the answers held for `chat` (see [`HeldAnswers`]); call once it is attached and
    /// told.
    fn deliver_held(&self, chat: &str) {
        let (frames, receipts) = lock(&self.inner().hub).held.take(chat);
        for frame in frames {
            self.inner().send_to(self.id, frame);
        }
        settle_all(receipts);
    }

    /// A chat this connection has just made (a new id): its client owns it.
    fn claim_new(&self, chat: &str) {
        if let Identity::Client(me) = &self.peer.identity {
            lock(&self.inner().hub).owners.insert(chat.to_owned(), me.clone());
        }
    }

    /// Whether this connection may attach to and send into `chat`: the owner reaches every chat; a client
    /// reaches the chats it owns, and claims a chat nobody has (an id no session holds yet). A chat whose session
    /// exists without a recorded client (made before chats had owners) is the owner's alone. The ownership is
    /// recorded in the chat's session (`websocket_owner`) with its first message, so it outlives restarts.
    async fn may_use(&self, chat: &str) -> bool {
        let Identity::Client(me) = &self.peer.identity else {
            return true;
        };
        if let Some(owner) = lock(&self.inner().hub).owners.get(chat) {
            return owner == me;
        }
        let key = format!("{NAME}:{chat}");
        let recorded = match &self.inner().store {
            Some(store) => match store.chat_owner(&key).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "websocket: cannot read a chat's owner; refusing");
                    return false;
                }
            },
            None => ChatOwner::Nobody,
        };
        let mut hub = lock(&self.inner().hub);
        // Another connection may have claimed it meanwhile: the first claim holds.
        if let Some(owner) = hub.owners.get(chat) {
            return owner == me;
        }
        match recorded {
            ChatOwner::Client(owner) => {
                let mine = &owner == me;
                hub.owners.insert(chat.to_owned(), owner);
                hub.recorded.insert(chat.to_owned());
                mine
            }
            ChatOwner::Unrecorded => false,
            ChatOwner::Nobody => {
                hub.owners.insert(chat.to_owned(), me.clone());
                true
            }
        }
    }

    /// Records in the store that this connection's client owns `chat` (before its first message is published).
    async fn record_owner(&self, chat: &str) {
        let (Identity::Client(me), Some(store)) = (&self.peer.identity, &self.inner().store) else {
            return;
        };
        if lock(&self.inner().hub).recorded.contains(chat) {
            return;
        }
        match store.set_chat_owner(&format!("{NAME}:{chat}"), me).await {
            Ok(()) => {
                lock(&self.inner().hub).recorded.insert(chat.to_owned());
            }
            Err(e) => tracing::warn!(error = %e, "websocket: cannot record a chat's owner"),
        }
    }

    /// The refusal of `chat` to a client that does not own it (the same answer whether or not it exists).
    fn refuse(&self, chat: &str) {
        self.reply("error", json!({"detail": "access_denied", "chat_id": chat}));
    }

    async fn handle(&mut self, raw: &str) {
        match protocol::parse(raw) {
            Inbound::Ignore => {}
            Inbound::Legacy(text) => {
                let chat = self.default_chat.clone();
                self.publish(&chat, text, Vec::new(), Map::new()).await;
            }
            Inbound::Envelope(env) => self.envelope(env).await,
        }
    }

    async fn envelope(&mut self, env: Map<String, Value>) {
        let kind = env
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "new_temporary_chat" => {
                let chat = uuid::Uuid::new_v4().to_string();
                self.claim_new(&chat);
                self.attach(&chat);
                if let Some(c) = lock(&self.inner().hub).conns.get_mut(&self.id) {
                    c.temporary.insert(chat.clone());
                }
                self.reply("attached", json!({"chat_id": chat, "temporary": true}));
            }
            "discard_temporary_chat" => self.discard_temporary(&env).await,
            "fork_chat" => self.fork(&env).await,
            "new_chat" => {
                let chat = uuid::Uuid::new_v4().to_string();
                self.claim_new(&chat);
                self.attach(&chat);
                self.reply("attached", json!({"chat_id": chat}));
            }
            "attach" => match env.get("chat_id").and_then(Value::as_str) {
                Some(chat) if is_valid_chat_id(chat) => {
                    if self.may_use(chat).await {
                        self.attach(chat);
                        self.reply("attached", json!({"chat_id": chat}));
                        self.deliver_held(chat);
                    } else {
                        self.refuse(chat);
                    }
                }
                _ => self.reply("error", json!({"detail": "invalid chat_id"})),
            },
            "message" => self.message(&env).await,
            "webui_request" => self.webui_request(&env).await,
            other => self.reply("error", json!({"detail": format!("unknown type: '{other}'")})),
        }
    }

    async fn message(&mut self, env: &Map<String, Value>) {
        let Some(chat) = env
            .get("chat_id")
            .and_then(Value::as_str)
            .filter(|c| is_valid_chat_id(c))
        else {
            self.reply("error", json!({"detail": "invalid chat_id"}));
            return;
        };
        let chat = chat.to_string();
        let turn_id = env
            .get("turn_id")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        let mut reject = json!({"chat_id": chat});
        if let Some(t) = turn_id {
            reject["turn_id"] = json!(t);
        }
        let with = |mut base: Value, extra: Value| {
            if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
                b.extend(e);
            }
            base
        };
        if !self.inner().allow.allows(&self.peer.client_id) || !self.may_use(&chat).await {
            self.reply("error", with(reject, json!({"detail": "access_denied"})));
            return;
        }
        let Some(content) = env.get("content").and_then(Value::as_str) else {
            self.reply("error", with(reject, json!({"detail": "missing content"})));
            return;
        };
        let mut media = Vec::new();
        match env.get("media") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => match media::store(items, &self.inner().media_dir).await {
                Ok(paths) => media = paths,
                Err(WebSocketError::Attachment(reason)) => {
                    self.reply(
                        "error",
                        with(reject, json!({"detail": "attachment_rejected", "reason": reason})),
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "websocket: cannot store an attachment");
                    self.reply(
                        "error",
                        with(
                            reject,
                            json!({"detail": "attachment_rejected", "reason": "decode"}),
                        ),
                    );
                    return;
                }
            },
            Some(_) => {
                self.reply(
                    "error",
                    with(
                        reject,
                        json!({"detail": "attachment_rejected", "reason": "malformed"}),
                    ),
                );
                return;
            }
        }
        if content.trim().is_empty() && media.is_empty() {
            self.reply("error", with(reject, json!({"detail": "missing content"})));
            return;
        }
        // 0.3.5 runs `!command` as a shell command for trusted local WebUI clients only. This version has no
        // user shell: a trusted client is told so; anyone else's `!…` is ordinary text for the agent.
        if env.get("user_shell") == Some(&Value::Bool(true)) && content.starts_with('!') && self.peer.trusted
        {
            self.reply("error", with(reject, json!({"detail": "user_shell_unavailable"})));
            return;
        }
        self.attach(&chat);
        self.deliver_held(&chat);
        let mut meta = Map::new();
        if env.get("webui") == Some(&Value::Bool(true)) {
            meta.insert("webui".into(), Value::Bool(true));
        }
        if let Some(t) = turn_id {
            meta.insert("turn_id".into(), json!(t));
        }
        self.publish(&chat, content.to_string(), media, meta).await;
    }

    async fn publish(&self, chat: &str, content: String, media: Vec<String>, mut meta: Map<String, Value>) {
        if !self.inner().allow.allows(&self.peer.client_id) {
            self.reply("error", json!({"detail": "access_denied", "chat_id": chat}));
            return;
        }
        if let Some(r) = self.peer.remote {
            meta.insert("remote".into(), json!(r.to_string()));
        }
        // An id of its own: a durable bus that delivers it again (the replica running its turn died) has it
        // recognised, so the question is stored and answered once. A client's own `turn_id` is that id: a client
        // that sends the message again after a reconnect (it could not tell whether the server it lost had
        // taken it) has it stored and answered once too.
        let id = match meta.get("turn_id").and_then(Value::as_str) {
            Some(turn) => format!("turn-{turn}"),
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        meta.insert("message_id".into(), json!(id));
        self.record_owner(chat).await;
        let mut msg = InboundMessage::new(NAME, self.peer.client_id.clone(), chat, content)
            .with_streaming(self.inner().settings.streaming);
        msg.media = media;
        msg.metadata = meta;
        if let Err(e) = self.app.bus.publish_inbound(msg).await {
            tracing::warn!(error = %e, "websocket: cannot publish an inbound message");
            self.reply("error", json!({"detail": "unavailable", "chat_id": chat}));
        }
    }

    /// `discard_temporary_chat`: forgets one of this connection's temporary chats and deletes its session.
    async fn discard_temporary(&self, env: &Map<String, Value>) {
        let chat = env
            .get("chat_id")
            .and_then(Value::as_str)
            .filter(|c| is_valid_chat_id(c));
        let Some(chat) = chat else {
            self.reply("error", json!({"detail": "invalid temporary chat_id"}));
            return;
        };
        let owned = {
            let mut hub = lock(&self.inner().hub);
            let owned = hub
                .conns
                .get_mut(&self.id)
                .is_some_and(|c| c.temporary.remove(chat));
            if owned {
                hub.detach(self.id, chat);
            }
            owned
        };
        if !owned {
            self.reply("error", json!({"detail": "temporary_chat_unavailable"}));
            return;
        }
        discard_session(self.inner(), chat).await;
        self.reply("temporary_chat_discarded", json!({"chat_id": chat}));
    }

    /// `fork_chat`: a new chat holding `source_chat_id`'s messages before its `before_user_index`-th user
    /// message (0.3.5's rule: `0` copies nothing before the first user message; the user-message count copies
    /// everything).
    async fn fork(&self, env: &Map<String, Value>) {
        let Some(source) = env
            .get("source_chat_id")
            .and_then(Value::as_str)
            .filter(|c| is_valid_chat_id(c))
        else {
            self.reply("error", json!({"detail": "invalid source_chat_id"}));
            return;
        };
        let Some(before) = env
            .get("before_user_index")
            .filter(|v| !v.is_boolean())
            .and_then(Value::as_u64)
        else {
            self.reply("error", json!({"detail": "invalid before_user_index"}));
            return;
        };
        if !self.may_use(source).await {
            self.refuse(source);
            return;
        }
        let Some(store) = self.inner().store.clone() else {
            self.reply("error", json!({"detail": "session_manager_unavailable"}));
            return;
        };
        let source_key = format!("{NAME}:{source}");
        let messages = match store.messages(&source_key).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "websocket: fork_chat could not read the source");
                self.reply("error", json!({"detail": "fork_chat_failed"}));
                return;
            }
        };
        let Some(copied) = fork_prefix(messages, before) else {
            self.reply("error", json!({"detail": "invalid fork source or index"}));
            return;
        };
        let chat = uuid::Uuid::new_v4().to_string();
        let key = format!("{NAME}:{chat}");
        if let Err(e) = store.create(&key, copied).await {
            tracing::warn!(error = %e, "websocket: fork_chat could not create the fork");
            self.reply("error", json!({"detail": "fork_chat_failed"}));
            return;
        }
        self.claim_new(&chat);
        self.record_owner(&chat).await;
        self.attach(&chat);
        self.reply("attached", json!({"chat_id": chat, "forked_from": source}));
    }

    async fn webui_request(&self, env: &Map<String, Value>) {
        let Some(request_id) = env.get("request_id").and_then(Value::as_str).filter(|r| {
            (1..=128).contains(&r.len())
                && r.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        }) else {
            self.reply("error", json!({"detail": "invalid webui request_id"}));
            return;
        };
        let fail = |status: u16, message: &str| {
            self.reply(
                "webui_response",
                json!({"request_id": request_id, "ok": false, "error": {"status": status, "message": message}}),
            );
        };
        if !self.peer.trusted {
            fail(403, "access_denied");
            return;
        }
        let action = env.get("action").and_then(Value::as_str).unwrap_or_default();
        let empty = Map::new();
        let Some(payload) = env.get("payload").map_or(Some(&empty), Value::as_object) else {
            fail(400, "WebUI request payload must be an object");
            return;
        };
        let Some(store) = self.inner().store.clone() else {
            fail(503, "this gateway gives the WebUI no store");
            return;
        };
        match crate::server::webui_action(store.as_ref(), action, payload).await {
            Ok(result) => self.reply(
                "webui_response",
                json!({"request_id": request_id, "ok": true, "result": result}),
            ),
            Err((status, message)) => fail(status, &message),
        }
    }
}

/// The messages before the `before`-th user message (counting from 0), or `None` when there are fewer user
/// messages than `before`.
pub(crate) fn fork_prefix(messages: Vec<Value>, before: u64) -> Option<Vec<Value>> {
    let mut users = 0u64;
    let mut out = Vec::new();
    for m in messages {
        if m.get("role").and_then(Value::as_str) == Some("user") {
            if users == before {
                return Some(out);
            }
            users += 1;
        }
        out.push(m);
    }
    (users == before).then_some(out)
}

/// Deletes the session of a discarded temporary chat (best effort: logged when it fails).
async fn discard_session(inner: &Inner, chat: &str) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    if let Err(e) = store.delete(&format!("{NAME}:{chat}")).await {
        tracing::warn!(error = %e, "websocket: could not delete a temporary chat's session");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_answers_stay_within_their_bounds() {
        /// A receipt that records nothing (the counts are what is checked).
        struct Quiet;
        #[async_trait::async_trait]
        impl Receipt for Quiet {
            async fn settle(self: Box<Self>, _how: Settlement) {}
        }
        let quiet = || Some(Box::new(Quiet) as Box<dyn Receipt>);
        let mut held = HeldAnswers::default();
        let mut given_up = 0;
        for i in 0..HELD_PER_CHAT + 3 {
            given_up += held.hold("a", &format!("answer {i}"), quiet()).len();
        }
        assert_eq!(
            given_up, 3,
            "the receipts of the answers dropped are given back to be settled"
        );
        let (answers, receipts) = held.take("a");
        assert_eq!(answers.len(), HELD_PER_CHAT, "the oldest of one chat go first");
        assert_eq!(
            receipts.len(),
            HELD_PER_CHAT,
            "each answer handed over with its receipt"
        );
        assert_eq!(answers[0], "answer 3");
        assert!(held.take("a").0.is_empty(), "handed over once");

        for i in 0..=HELD_CHATS {
            held.hold(&format!("chat{i}"), "x", None);
        }
        assert_eq!(held.chats.len(), HELD_CHATS);
        assert!(
            held.take("chat0").0.is_empty(),
            "the chat held longest went first"
        );
        assert_eq!(held.take(&format!("chat{HELD_CHATS}")).0, ["x"]);

        let mut held = HeldAnswers::default();
        let big = "y".repeat(HELD_BYTES / 3);
        let mut given_up = 0;
        for chat in ["p", "q", "r", "s"] {
            given_up += held.hold(chat, &big, quiet()).len();
        }
        let bytes = held.bytes();
        assert!(bytes <= HELD_BYTES, "{bytes}");
        assert_eq!(given_up, 1);
        assert!(held.take("p").0.is_empty(), "the oldest answer went first");
        assert_eq!(held.take("s").0.len(), 1);
    }
}
