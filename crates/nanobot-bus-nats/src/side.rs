//! The side path: messages that must not wait behind their session's running turn.
//!
//! A partition hands out a session's next message only once its running turn is over, so the owner's `yes` to
//! the question that turn asks (or a `/stop` for it) would wait for the turn, which waits for the answer. While a
//! replica runs a turn of a session, it answers requests on that session's side subject
//! (`<prefix>.side.<hash of the session key>`); before a message goes into the inbound stream, the publishing
//! replica offers it there. The replica running the turn hands it to its [`Interceptor`] (the agent), which takes
//! answers and immediate commands and declines the rest; a declined message, or one for a session no replica is
//! running ("no responders", at once), goes into the stream as usual.
//!
//! With a deployment key the offer is sealed like every message; the receiving replica refuses one that does not
//! open, one sealed more than half the duplicate window ago by its clock, and one whose id it has already seen.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use nanobot_bus::{InboundMessage, Interceptor};
use tokio_util::sync::CancellationToken;

use crate::DeploymentKey;

/// The answer of a replica that took the offered message.
const TAKEN: &[u8] = b"taken";
/// The answer of a replica that declined it.
const DECLINED: &[u8] = b"queue";
/// How many recent offer ids are remembered (against replays within the window).
const SEEN_MAX: usize = 10_000;

/// Where the interceptor of this process is set ([`nanobot_bus::Bus::set_interceptor`]).
pub(crate) type InterceptorSlot = Arc<RwLock<Option<Arc<dyn Interceptor>>>>;

/// The side path of one bus.
pub(crate) struct Side {
    client: async_nats::Client,
    key: Option<DeploymentKey>,
    prefix: String,
    slot: InterceptorSlot,
    /// Half the inbound stream's duplicate window: how old a sealed offer may be.
    max_age: Duration,
    bound: Duration,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    ids: HashSet<String>,
    order: VecDeque<(i64, String)>,
}

impl Seen {
    /// Records `id` sealed at `at_ms`; `false` when it was there already. Forgets ids older than `max_age_ms`.
    fn first_time(&mut self, id: &str, at_ms: i64, now_ms: i64, max_age_ms: i64) -> bool {
        while let Some((t, old)) = self.order.front()
            && (now_ms.saturating_sub(*t) > max_age_ms || self.order.len() >= SEEN_MAX)
        {
            self.ids.remove(old);
            self.order.pop_front();
        }
        if !self.ids.insert(id.to_owned()) {
            return false;
        }
        self.order.push_back((at_ms, id.to_owned()));
        true
    }
}

/// The side subject of `session_key`.
pub(crate) fn subject(prefix: &str, session_key: &str) -> String {
    let mut h = crate::Fnv1a::default();
    std::hash::Hasher::write(&mut h, session_key.as_bytes());
    format!("{prefix}.side.{:016x}", std::hash::Hasher::finish(&h))
}

impl Side {
    pub(crate) fn new(
        client: async_nats::Client,
        key: Option<DeploymentKey>,
        prefix: String,
        slot: InterceptorSlot,
        window: Duration,
        bound: Duration,
    ) -> Self {
        Self {
            client,
            key,
            prefix,
            slot,
            max_age: window / 2,
            bound,
            seen: Mutex::default(),
        }
    }

    /// Offers `msg` to the replica running a turn of `session_key`: `true` when it took it.
    pub(crate) async fn offer(&self, session_key: &str, msg: &InboundMessage) -> bool {
        let subject = subject(&self.prefix, session_key);
        let Ok(body) = serde_json::to_vec(msg) else {
            return false;
        };
        let payload = match &self.key {
            Some(key) => match key.seal(&subject, &key.fresh_id(), &body) {
                Ok(sealed) => sealed,
                Err(_) => return false,
            },
            None => body,
        };
        match tokio::time::timeout(self.bound, self.client.request(subject, payload.into())).await {
            Ok(Ok(reply)) => reply.payload.as_ref() == TAKEN,
            // No responders (no replica runs a turn of this session), or no answer in time: the stream.
            _ => false,
        }
    }

    /// Answers offers for `session_key` while a turn of it runs here, until `stop`. Returns once the server knows
    /// the subscription (a round trip on this connection is over), so an offer made after the turn's message is
    /// handed out reaches this replica.
    pub(crate) async fn serve(self: &Arc<Self>, session_key: &str, stop: CancellationToken) {
        let subject = subject(&self.prefix, session_key);
        let mut offers = match self.client.subscribe(subject.clone()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(subject, error = %e, "NATS bus: cannot take answers for a running turn");
                return;
            }
        };
        // `flush` only empties the client's buffer; the answer to a request the server itself answers (JetStream's
        // account information) comes back only after it has handled what this connection sent before, the
        // subscription included.
        let _ = tokio::time::timeout(self.bound, self.client.request("$JS.API.INFO", "".into())).await;
        let side = self.clone();
        tokio::spawn(async move {
            loop {
                let offer = tokio::select! {
                    () = stop.cancelled() => break,
                    o = offers.next() => match o {
                        Some(o) => o,
                        None => return,
                    },
                };
                let taken = side.take(&subject, &offer.payload);
                if let Some(reply) = offer.reply {
                    let answer = if taken { TAKEN } else { DECLINED };
                    if let Err(e) = side.client.publish(reply, answer.into()).await {
                        tracing::debug!(error = %e, "NATS bus: an offer's answer not sent");
                    }
                }
            }
            let _ = offers.unsubscribe().await;
        });
    }

    /// Opens one offer and hands it to the interceptor.
    fn take(&self, subject: &str, payload: &[u8]) -> bool {
        let body = match &self.key {
            Some(key) => {
                let opened = match key.open(subject, payload) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::warn!(subject, "NATS bus: an offered message was refused: {e}");
                        return false;
                    }
                };
                let now = crate::seal::now_ms();
                let max_age = i64::try_from(self.max_age.as_millis()).unwrap_or(i64::MAX);
                let fresh = now.saturating_sub(opened.sealed_at_ms).abs() < max_age;
                let first =
                    nanobot_util::lock(&self.seen).first_time(&opened.id, opened.sealed_at_ms, now, max_age);
                if !fresh || !first {
                    tracing::warn!(subject, "NATS bus: an offered message was refused: a replay");
                    return false;
                }
                opened.body
            }
            None if payload.starts_with(crate::seal::MAGIC) => return false,
            None => payload.to_vec(),
        };
        let Ok(msg) = serde_json::from_slice::<InboundMessage>(&body) else {
            return false;
        };
        let interceptor = self.slot.read().ok().and_then(|s| s.clone());
        interceptor.is_some_and(|i| i.intercept(&msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_taken_once_within_the_window_and_old_ones_are_forgotten() {
        let mut seen = Seen::default();
        assert!(seen.first_time("a", 1_000, 1_000, 60_000));
        assert!(!seen.first_time("a", 1_000, 2_000, 60_000), "a replay");
        assert!(seen.first_time("b", 70_000, 70_000, 60_000));
        assert!(!seen.ids.contains("a"), "forgotten once older than the window");
        assert_eq!(subject("nanobot", "telegram:1"), subject("nanobot", "telegram:1"));
        assert_ne!(subject("nanobot", "telegram:1"), subject("nanobot", "telegram:2"));
    }
}
