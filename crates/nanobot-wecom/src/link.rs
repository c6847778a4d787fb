//! One long connection to WeCom: a writer task, a reader task, and requests that wait for their acknowledgement.
//!
//! Every frame the client sends carries a `req_id`, and the server acknowledges it with
//! `{"headers": {"req_id"}, "errcode", "errmsg"}` (plus a `body` for the upload steps). [`Link::request`] registers
//! a waiter under the `req_id` before the frame goes out and waits, bounded, for the reader to hand it the
//! acknowledgement. Replies to one callback reuse the callback's `req_id`, so [`Link::reply`] sends them one at a
//! time, in the order they were asked for. Callbacks (`aibot_msg_callback`, `aibot_event_callback`) go to the
//! channel through a queue; a `disconnected_event` (another connection subscribed with the bot) ends the link.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use nanobot_channels::ws::Socket;
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

/// The prefix of heartbeat `req_id`s (the reader counts their acknowledgements).
const PING_PREFIX: &str = "ping_";
/// Frames queued for the writer before a sender waits.
const OUT_QUEUE: usize = 256;

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
    /// None came within the bound.
    Timeout(Duration),
    /// A request with the same `req_id` is already waiting.
    Busy,
}

/// A live connection, shared by the channel's receive loop and its sends.
#[derive(Debug)]
pub(crate) struct Link {
    out: mpsc::Sender<Ws>,
    /// Waiters for acknowledgements, by `req_id`.
    pending: Mutex<HashMap<String, oneshot::Sender<Ack>>>,
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

/// Starts the reader and writer of `socket`: the link, the callbacks it receives (the queue closes when the
/// connection ends), and the tasks.
pub(crate) fn start(
    socket: Socket,
    ack_timeout: Duration,
) -> (Arc<Link>, mpsc::UnboundedReceiver<Value>, Tasks) {
    let (out, out_rx) = mpsc::channel(OUT_QUEUE);
    let (events, events_rx) = mpsc::unbounded_channel();
    let link = Arc::new(Link {
        out,
        pending: Mutex::default(),
        turns: Mutex::default(),
        missed_pings: AtomicU32::new(0),
        ended: Mutex::default(),
        gone: CancellationToken::new(),
        ack_timeout,
    });
    let (sink, stream) = socket.split();
    let writer = tokio::spawn(write_loop(link.clone(), sink, out_rx));
    let reader = tokio::spawn(read_loop(link.clone(), stream, events));
    (link, events_rx, Tasks { reader, writer })
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

async fn read_loop(
    link: Arc<Link>,
    mut stream: futures::stream::SplitStream<Socket>,
    events: mpsc::UnboundedSender<Value>,
) {
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
        if !link.route(frame, &events) {
            return;
        }
    }
}

impl Link {
    /// Hands one received frame on; false when it ended the link.
    fn route(&self, frame: Value, events: &mpsc::UnboundedSender<Value>) -> bool {
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
                let _ = events.send(frame);
            }
            _ if req_id.starts_with(PING_PREFIX) => {
                if frame["errcode"].as_i64() == Some(0) {
                    self.missed_pings.store(0, Ordering::SeqCst);
                } else {
                    tracing::warn!(errcode = %frame["errcode"], "wecom: a ping was refused");
                }
            }
            _ => match lock(&self.pending).remove(req_id) {
                Some(waiter) => {
                    let _ = waiter.send(Ack::from_frame(&frame));
                }
                None => tracing::debug!(cmd, "wecom: an unexpected frame was ignored"),
            },
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

    /// Sends `cmd` with `body` under `req_id` and waits (bounded) for its acknowledgement.
    pub(crate) async fn request(&self, cmd: &str, req_id: &str, body: Value) -> Result<Ack, NoAck> {
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if self.gone.is_cancelled() {
                return Err(NoAck::Gone);
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
        if result.is_err() {
            lock(&self.pending).remove(req_id);
        }
        result
    }

    /// [`request`](Self::request) for a reply on a callback's `req_id`: replies to one callback wait for each
    /// other, in order.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bare_link() -> (Link, mpsc::Receiver<Ws>) {
        let (out, rx) = mpsc::channel(8);
        let link = Link {
            out,
            pending: Mutex::default(),
            turns: Mutex::default(),
            missed_pings: AtomicU32::new(0),
            ended: Mutex::default(),
            gone: CancellationToken::new(),
            ack_timeout: Duration::from_secs(5),
        };
        (link, rx)
    }

    #[tokio::test]
    async fn acks_find_their_waiters_and_callbacks_go_to_the_queue() {
        let (link, mut out) = bare_link();
        let link = Arc::new(link);
        let (events, mut events_rx) = mpsc::unbounded_channel();
        let waiting = {
            let link = link.clone();
            tokio::spawn(async move { link.request("aibot_send_msg", "r1", json!({"x": 1})).await })
        };
        let Some(Ws::Text(sent)) = out.recv().await else {
            panic!("nothing sent")
        };
        let sent: Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(sent["cmd"], "aibot_send_msg");
        assert_eq!(sent["headers"]["req_id"], "r1");
        // A callback reusing a req_id is a callback, not an ack.
        assert!(link.route(
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": "r1"}, "body": {"msgid": "m"}}),
            &events
        ));
        assert_eq!(events_rx.recv().await.unwrap()["body"]["msgid"], "m");
        assert!(link.route(
            json!({"headers": {"req_id": "r1"}, "errcode": 0, "errmsg": "ok", "body": {"media_id": "M"}}),
            &events
        ));
        let ack = waiting.await.unwrap().unwrap();
        assert_eq!((ack.errcode, ack.body["media_id"].as_str()), (0, Some("M")));
        // Pings: counted when sent, reset by an acknowledgement.
        link.ping("a");
        link.ping("b");
        assert_eq!(link.missed_pings(), 2);
        assert!(link.route(json!({"headers": {"req_id": "ping_b"}, "errcode": 0}), &events));
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
            &events
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
    async fn an_unanswered_request_times_out_and_frees_its_req_id() {
        let (link, _out) = bare_link();
        let err = link.request("aibot_send_msg", "r", json!({})).await;
        assert_eq!(err, Err(NoAck::Timeout(Duration::from_secs(5))));
        assert!(lock(&link.pending).is_empty());
    }
}
