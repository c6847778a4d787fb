//! One long connection to WeCom: a writer task, a reader task, and requests that wait for their acknowledgement.
//!
//! Every frame the client sends carries a `req_id`, and the server acknowledges it with
//! `{"headers": {"req_id"}, "errcode", "errmsg"}` (plus a `body` for the upload steps). [`Link::request`] registers
//! a waiter under the `req_id` before the frame goes out and waits, bounded, for the reader to hand it the
//! acknowledgement. Replies to one callback reuse the callback's `req_id`, so [`Link::reply`] sends them one at a
//! time, in the order they were asked for.
//!
//! An acknowledgement names nothing but the `req_id`, so one that comes after its request gave up waiting cannot be
//! told from the next request's under the same `req_id`. A `req_id` whose request timed out is therefore retired for
//! the link's life: no request goes out under it again ([`NoAck::Abandoned`]), and acknowledgements that still come
//! for it are dropped. Every acknowledgement reaches the one frame it was for, or nothing.
//!
//! Callbacks go to the channel through two bounded queues, users' messages (`aibot_msg_callback`) and events
//! (`aibot_event_callback`), each stamped with when it was read: the reader never waits for the channel (a callback
//! that finds its queue full is dropped, with a warning), so acknowledgements are routed however slowly callbacks
//! are handled. A `disconnected_event` (another connection subscribed with the bot) ends the link.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use nanobot_channels::RecentIds;
use nanobot_channels::ws::Socket;
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

/// The prefix of heartbeat `req_id`s (the reader counts their acknowledgements).
const PING_PREFIX: &str = "ping_";
/// Frames queued for the writer before a sender waits.
const OUT_QUEUE: usize = 256;
/// Callbacks of each kind (messages, events) waiting for the channel; more are dropped.
pub(crate) const CALLBACK_QUEUE: usize = 256;
/// Timed-out `req_id`s remembered as retired (a link that loses more acknowledgements than this has other trouble).
const RETIRED_REQ_IDS: usize = 4096;

/// The server's acknowledgement of one frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ack {
    /// `errcode` (`-1` when the server gave none).
    pub(crate) errcode: i64,
    /// `errmsg`.
    pub(crate) errmsg: String,
    /// `body` (`Null` when absent).
    pub(crate) body: Value,
}

impl Ack {
    fn from_frame(frame: &Value) -> Self {
        Self {
            errcode: frame["errcode"].as_i64().unwrap_or(-1),
            errmsg: frame["errmsg"].as_str().unwrap_or_default().to_owned(),
            body: frame.get("body").cloned().unwrap_or(Value::Null),
        }
    }
}

/// A callback as the reader got it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// The frame.
    pub(crate) frame: Value,
    /// When it was read (WeCom's reply windows run from here, not from when the channel gets to it).
    pub(crate) at: Instant,
}

/// The channel's end of the callback queues; both close when the connection ends.
#[derive(Debug)]
pub(crate) struct Inbox {
    /// Users' messages (`aibot_msg_callback`).
    pub(crate) messages: mpsc::Receiver<Received>,
    /// Events (`aibot_event_callback`): `enter_chat` must be answered within seconds, so they never queue behind
    /// messages.
    pub(crate) events: mpsc::Receiver<Received>,
}

/// The reader's end of the callback queues.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    messages: mpsc::Sender<Received>,
    events: mpsc::Sender<Received>,
}

/// Two callback queues of `capacity` each.
pub(crate) fn queues(capacity: usize) -> (Outbox, Inbox) {
    let (messages, messages_rx) = mpsc::channel(capacity);
    let (events, events_rx) = mpsc::channel(capacity);
    (
        Outbox { messages, events },
        Inbox {
            messages: messages_rx,
            events: events_rx,
        },
    )
}

/// Why a link ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The server closed the connection.
    Closed,
    /// Reading or writing failed.
    Lost(String),
    /// A `disconnected_event`: another connection subscribed with the bot and took it over.
    Kicked,
    /// This side closed it.
    Local,
}

/// Why a request got no acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoAck {
    /// The connection ended first.
    Gone,
    /// None came within the bound (whether the server took the frame is unknown). Its `req_id` is retired.
    Timeout(Duration),
    /// A request with the same `req_id` is already waiting.
    Busy,
    /// An earlier request under this `req_id` timed out: nothing was sent (its late acknowledgement could not be
    /// told from this one's).
    Abandoned,
}

/// A live connection, shared by the channel's receive loop and its sends.
#[derive(Debug)]
pub(crate) struct Link {
    out: mpsc::Sender<Ws>,
    /// Waiters for acknowledgements, by `req_id`.
    pending: Mutex<HashMap<String, oneshot::Sender<Ack>>>,
    /// `req_id`s whose request timed out: never sent under again, their late acknowledgements dropped. Checked and
    /// changed under `pending`'s lock.
    retired: RecentIds,
    /// One reply at a time per callback `req_id` (FIFO: tokio's mutex is fair).
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Pings sent since the last acknowledged one.
    missed_pings: AtomicU32,
    ended: Mutex<Option<Ended>>,
    gone: CancellationToken,
    ack_timeout: Duration,
}

/// The reader and writer tasks of a link; aborted when dropped.
#[derive(Debug)]
pub(crate) struct Tasks {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Tasks {
    /// Gives the writer up to `grace` to send its close frame, then stops both tasks.
    pub(crate) async fn finish(mut self, grace: Duration) {
        let _ = tokio::time::timeout(grace, &mut self.writer).await;
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Starts the reader and writer of `socket`: the link, the callbacks it receives (the queues close when the
/// connection ends), and the tasks.
pub(crate) fn start(socket: Socket, ack_timeout: Duration) -> (Arc<Link>, Inbox, Tasks) {
    let (out, out_rx) = mpsc::channel(OUT_QUEUE);
    let (outbox, inbox) = queues(CALLBACK_QUEUE);
    let link = Arc::new(Link::new(out, ack_timeout));
    let (sink, stream) = socket.split();
    let writer = tokio::spawn(write_loop(link.clone(), sink, out_rx));
    let reader = tokio::spawn(read_loop(link.clone(), stream, outbox));
    (link, inbox, Tasks { reader, writer })
}

async fn write_loop(
    link: Arc<Link>,
    mut sink: futures::stream::SplitSink<Socket, Ws>,
    mut out: mpsc::Receiver<Ws>,
) {
    loop {
        tokio::select! {
            biased;
            () = link.gone.cancelled() => {
                let _ = sink.send(Ws::Close(None)).await;
                return;
            }
            frame = out.recv() => {
                let Some(frame) = frame else { return };
                if let Err(e) = sink.send(frame).await {
                    link.end(Ended::Lost(format!("sending failed: {e}")));
                    return;
                }
            }
        }
    }
}

async fn read_loop(link: Arc<Link>, mut stream: futures::stream::SplitStream<Socket>, outbox: Outbox) {
    loop {
        let message = tokio::select! {
            () = link.gone.cancelled() => return,
            m = stream.next() => m,
        };
        let text = match message {
            None | Some(Ok(Ws::Close(_))) => {
                link.end(Ended::Closed);
                return;
            }
            Some(Err(e)) => {
                link.end(Ended::Lost(e.to_string()));
                return;
            }
            Some(Ok(Ws::Text(t))) => t.to_string(),
            Some(Ok(Ws::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
            Some(Ok(_)) => continue,
        };
        let Ok(frame) = serde_json::from_str::<Value>(&text) else {
            tracing::debug!("wecom: a frame that is not JSON was ignored");
            continue;
        };
        if !link.route(frame, &outbox) {
            return;
        }
    }
}

impl Link {
    /// A link whose frames go to `out`.
    pub(crate) fn new(out: mpsc::Sender<Ws>, ack_timeout: Duration) -> Self {
        Self {
            out,
            pending: Mutex::default(),
            retired: RecentIds::new(RETIRED_REQ_IDS),
            turns: Mutex::default(),
            missed_pings: AtomicU32::new(0),
            ended: Mutex::default(),
            gone: CancellationToken::new(),
            ack_timeout,
        }
    }

    /// Hands one received frame on, never waiting: an acknowledgement to its waiter, a callback (stamped with the
    /// time) to its queue; false when it ended the link.
    pub(crate) fn route(&self, frame: Value, outbox: &Outbox) -> bool {
        let cmd = frame["cmd"].as_str().unwrap_or_default();
        let req_id = frame["headers"]["req_id"].as_str().unwrap_or_default();
        match cmd {
            "aibot_msg_callback" | "aibot_event_callback" => {
                let event = &frame["body"]["event"];
                let kind = event["eventtype"]
                    .as_str()
                    .or_else(|| event["event_type"].as_str());
                if kind == Some("disconnected_event") {
                    self.end(Ended::Kicked);
                    return false;
                }
                let queue = if cmd == "aibot_msg_callback" {
                    &outbox.messages
                } else {
                    &outbox.events
                };
                let received = Received {
                    frame,
                    at: Instant::now(),
                };
                match queue.try_send(received) {
                    Ok(()) => {}
                    Err(TrySendError::Full(dropped)) => {
                        // What it was, never what it said.
                        let (frame, body) = (&dropped.frame, &dropped.frame["body"]);
                        tracing::warn!(
                            cmd = frame["cmd"].as_str().unwrap_or_default(),
                            msgtype = body["msgtype"].as_str().unwrap_or_default(),
                            event = body["event"]["eventtype"].as_str().unwrap_or_default(),
                            "wecom: {CALLBACK_QUEUE} callbacks are waiting to be handled already; this one was \
                             dropped"
                        );
                    }
                    Err(TrySendError::Closed(_)) => {
                        tracing::debug!("wecom: a callback came after the channel stopped handling them");
                    }
                }
            }
            _ if req_id.starts_with(PING_PREFIX) => {
                if frame["errcode"].as_i64() == Some(0) {
                    self.missed_pings.store(0, Ordering::SeqCst);
                } else {
                    tracing::warn!(errcode = %frame["errcode"], "wecom: a ping was refused");
                }
            }
            _ => {
                let mut pending = lock(&self.pending);
                match pending.remove(req_id) {
                    Some(waiter) => {
                        let _ = waiter.send(Ack::from_frame(&frame));
                    }
                    None if self.retired.contains(req_id) => {
                        tracing::debug!(
                            cmd,
                            "wecom: a late acknowledgement of a retired req_id was dropped"
                        );
                    }
                    None => tracing::debug!(cmd, "wecom: an unexpected frame was ignored"),
                }
            }
        }
        true
    }

    /// Ends the link for `why` (the first reason is kept) and wakes everything waiting on it.
    pub(crate) fn end(&self, why: Ended) {
        lock(&self.ended).get_or_insert(why);
        lock(&self.pending).clear();
        self.gone.cancel();
    }

    /// Why it ended, once it has.
    pub(crate) fn ended(&self) -> Option<Ended> {
        lock(&self.ended).clone()
    }

    /// Fires when the link has ended.
    pub(crate) fn gone(&self) -> &CancellationToken {
        &self.gone
    }

    /// Pings sent since the last acknowledged one.
    pub(crate) fn missed_pings(&self) -> u32 {
        self.missed_pings.load(Ordering::SeqCst)
    }

    /// Sends a heartbeat (`ping`, acknowledged like any frame) without waiting for it.
    pub(crate) fn ping(&self, req_id: &str) {
        self.missed_pings.fetch_add(1, Ordering::SeqCst);
        let frame = json!({"cmd": "ping", "headers": {"req_id": format!("{PING_PREFIX}{req_id}")}});
        if self.out.try_send(Ws::Text(frame.to_string().into())).is_err() {
            tracing::debug!("wecom: the ping was not queued");
        }
    }

    /// Sends `cmd` with `body` under `req_id` and waits (bounded) for its acknowledgement. A request that times out
    /// retires its `req_id` (see the module docs).
    pub(crate) async fn request(&self, cmd: &str, req_id: &str, body: Value) -> Result<Ack, NoAck> {
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if self.gone.is_cancelled() {
                return Err(NoAck::Gone);
            }
            if self.retired.contains(req_id) {
                return Err(NoAck::Abandoned);
            }
            if pending.contains_key(req_id) {
                return Err(NoAck::Busy);
            }
            pending.insert(req_id.to_owned(), tx);
        }
        let frame = json!({"cmd": cmd, "headers": {"req_id": req_id}, "body": body});
        let exchange = async {
            self.out
                .send(Ws::Text(frame.to_string().into()))
                .await
                .map_err(|_| NoAck::Gone)?;
            rx.await.map_err(|_| NoAck::Gone)
        };
        let result = tokio::select! {
            biased;
            r = tokio::time::timeout(self.ack_timeout, exchange) => {
                r.unwrap_or(Err(NoAck::Timeout(self.ack_timeout)))
            }
            () = self.gone.cancelled() => Err(NoAck::Gone),
        };
        if let Err(why) = result {
            let mut pending = lock(&self.pending);
            pending.remove(req_id);
            if matches!(why, NoAck::Timeout(_)) {
                // Even when the acknowledgement got to the waiter just now, nobody uses this req_id again.
                self.retired.insert(req_id);
            }
        }
        result
    }

    /// [`request`](Self::request) for a reply on a callback's `req_id`: replies to one callback wait for each
    /// other, in order. Once one of them timed out, the others get [`NoAck::Abandoned`] without being sent.
    pub(crate) async fn reply(&self, cmd: &str, req_id: &str, body: Value) -> Result<Ack, NoAck> {
        let turn = lock(&self.turns).entry(req_id.to_owned()).or_default().clone();
        let result = {
            let _mine = turn.lock().await;
            self.request(cmd, req_id, body).await
        };
        let mut turns = lock(&self.turns);
        // Only the map and this call hold it: nobody else waits for this callback.
        if Arc::strong_count(&turn) == 2 {
            turns.remove(req_id);
        }
        result
    }
}

/// A link without a socket, for the crate's tests: what it sends comes out of the receiver, and what the server
/// would answer goes in with [`Link::route`] and the [`Outbox`].
#[cfg(test)]
pub(crate) fn detached(ack_timeout: Duration) -> (Arc<Link>, mpsc::Receiver<Ws>, Outbox, Inbox) {
    let (out, rx) = mpsc::channel(64);
    let (outbox, inbox) = queues(CALLBACK_QUEUE);
    (Arc::new(Link::new(out, ack_timeout)), rx, outbox, inbox)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sent(out: &mut mpsc::Receiver<Ws>) -> Value {
        let next = tokio::time::timeout(Duration::from_secs(30), out.recv()).await;
        let Ok(Some(Ws::Text(sent))) = next else {
            panic!("nothing sent within 30 s")
        };
        serde_json::from_str(&sent).unwrap()
    }

    fn ack(req_id: &str, errcode: i64, body: Value) -> Value {
        json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": "ok", "body": body})
    }

    #[tokio::test]
    async fn acks_find_their_waiters_and_callbacks_go_to_the_queue() {
        let (link, mut out, outbox, mut inbox) = detached(Duration::from_secs(5));
        let waiting = {
            let link = link.clone();
            tokio::spawn(async move { link.request("aibot_send_msg", "r1", json!({"x": 1})).await })
        };
        let sent_frame = sent(&mut out).await;
        assert_eq!(sent_frame["cmd"], "aibot_send_msg");
        assert_eq!(sent_frame["headers"]["req_id"], "r1");
        // A callback reusing a req_id is a callback, not an ack: messages and events each to their queue.
        assert!(link.route(
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": "r1"}, "body": {"msgid": "m"}}),
            &outbox
        ));
        assert!(link.route(
            json!({"cmd": "aibot_event_callback", "headers": {"req_id": "e1"},
                   "body": {"msgtype": "event", "event": {"eventtype": "enter_chat"}}}),
            &outbox
        ));
        assert_eq!(inbox.messages.recv().await.unwrap().frame["body"]["msgid"], "m");
        assert_eq!(
            inbox.events.recv().await.unwrap().frame["headers"]["req_id"],
            "e1"
        );
        assert!(link.route(ack("r1", 0, json!({"media_id": "M"})), &outbox));
        let got = waiting.await.unwrap().unwrap();
        assert_eq!((got.errcode, got.body["media_id"].as_str()), (0, Some("M")));
        // Pings: counted when sent, reset by an acknowledgement.
        link.ping("a");
        link.ping("b");
        assert_eq!(link.missed_pings(), 2);
        assert!(link.route(json!({"headers": {"req_id": "ping_b"}, "errcode": 0}), &outbox));
        assert_eq!(link.missed_pings(), 0);
        // The kick ends the link, and waiters learn it at once.
        let waiting = {
            let link = link.clone();
            tokio::spawn(async move { link.request("aibot_send_msg", "r2", json!({})).await })
        };
        let _ = out.recv().await;
        let _ = out.recv().await;
        let _ = out.recv().await;
        assert!(!link.route(
            json!({"cmd": "aibot_event_callback", "headers": {"req_id": "e"},
                   "body": {"msgtype": "event", "event": {"eventtype": "disconnected_event"}}}),
            &outbox
        ));
        assert_eq!(waiting.await.unwrap(), Err(NoAck::Gone));
        assert_eq!(link.ended(), Some(Ended::Kicked));
        link.end(Ended::Closed);
        assert_eq!(link.ended(), Some(Ended::Kicked), "the first reason is kept");
        assert_eq!(
            link.request("aibot_send_msg", "r3", json!({})).await,
            Err(NoAck::Gone)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn callbacks_are_stamped_with_when_they_were_read() {
        let (link, _out, outbox, mut inbox) = detached(Duration::from_secs(5));
        let read_at = Instant::now();
        assert!(link.route(
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": "r"}, "body": {"msgid": "m"}}),
            &outbox
        ));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(inbox.messages.recv().await.unwrap().at, read_at);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_times_out_and_its_req_id_is_retired() {
        let (link, mut out, outbox, _inbox) = detached(Duration::from_secs(5));
        let err = link.request("aibot_respond_msg", "cb", json!({"n": 1})).await;
        assert_eq!(err, Err(NoAck::Timeout(Duration::from_secs(5))));
        assert!(lock(&link.pending).is_empty());
        assert_eq!(sent(&mut out).await["body"]["n"], 1);
        // The next reply on that callback is not sent: its ack could not be told from the late one.
        assert_eq!(
            link.reply("aibot_respond_msg", "cb", json!({"n": 2})).await,
            Err(NoAck::Abandoned)
        );
        assert!(
            out.try_recv().is_err(),
            "nothing went out under the retired req_id"
        );
        // The late ack goes to nobody; a request under another req_id gets only its own.
        let waiting = {
            let link = link.clone();
            tokio::spawn(async move { link.request("aibot_send_msg", "other", json!({})).await })
        };
        assert_eq!(sent(&mut out).await["headers"]["req_id"], "other");
        assert!(link.route(ack("cb", 0, json!({"late": true})), &outbox));
        assert!(link.route(ack("other", 0, json!({"mine": true})), &outbox));
        assert_eq!(waiting.await.unwrap().unwrap().body, json!({"mine": true}));
        assert!(lock(&link.pending).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn replies_queued_behind_a_timed_out_one_are_not_sent() {
        let (link, mut out, _outbox, _inbox) = detached(Duration::from_secs(5));
        let first = {
            let link = link.clone();
            tokio::spawn(async move { link.reply("aibot_respond_msg", "cb", json!({"n": 1})).await })
        };
        assert_eq!(sent(&mut out).await["body"]["n"], 1);
        // Queued behind the first (which holds the callback's turn until it times out).
        let second = {
            let link = link.clone();
            tokio::spawn(async move { link.reply("aibot_respond_msg", "cb", json!({"n": 2})).await })
        };
        assert_eq!(first.await.unwrap(), Err(NoAck::Timeout(Duration::from_secs(5))));
        assert_eq!(second.await.unwrap(), Err(NoAck::Abandoned));
        assert!(out.try_recv().is_err());
        assert!(lock(&link.turns).is_empty());
    }

    #[tokio::test]
    async fn a_full_callback_queue_drops_callbacks_and_acks_still_get_through() {
        let (link, mut out, outbox, mut inbox) = detached(Duration::from_secs(5));
        for i in 0..=CALLBACK_QUEUE {
            assert!(link.route(
                json!({"cmd": "aibot_msg_callback", "headers": {"req_id": format!("r{i}")},
                       "body": {"msgid": format!("m{i}"), "msgtype": "text"}}),
                &outbox
            ));
        }
        // Nobody handles messages, yet events and acknowledgements still go through.
        assert!(link.route(
            json!({"cmd": "aibot_event_callback", "headers": {"req_id": "e"},
                   "body": {"msgtype": "event", "event": {"eventtype": "enter_chat"}}}),
            &outbox
        ));
        assert_eq!(inbox.events.recv().await.unwrap().frame["headers"]["req_id"], "e");
        let waiting = {
            let link = link.clone();
            tokio::spawn(async move { link.request("aibot_send_msg", "s", json!({})).await })
        };
        let _ = sent(&mut out).await;
        assert!(link.route(ack("s", 0, Value::Null), &outbox));
        assert_eq!(waiting.await.unwrap().unwrap().errcode, 0);
        let mut queued = Vec::new();
        while let Ok(r) = inbox.messages.try_recv() {
            queued.push(r.frame["body"]["msgid"].as_str().unwrap().to_owned());
        }
        assert_eq!(queued.len(), CALLBACK_QUEUE, "the last one was dropped");
        assert_eq!(queued.last(), Some(&format!("m{}", CALLBACK_QUEUE - 1)));
    }
}
