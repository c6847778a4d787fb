//! The ledger part: a session's record of its turns. It owns the session store and keeps, beside the messages,
//! what a turn needs to survive a crash and a redelivery: the opening checkpoint and its recovery, which channel
//! messages were answered, the chat the session answers in, the goal's continuation rounds.

use nanobot_bus::InboundMessage;
use nanobot_providers::ChatMessage;
use nanobot_sessions::{Opening, SessionMessage, SessionStore};
use serde_json::{Map, Value, json};

use super::persist::{SessionCheckpoint, recovered_messages};
use super::redelivery::{self, Earlier};
use super::spending::DeferredUsage;
use crate::error::CoreError;

/// What [`Ledger::history`] reads for a turn.
pub(super) struct History {
    pub(super) messages: Vec<ChatMessage>,
    /// The session's archived-context summary (0.3.5's `_last_summary`): text and when the archived part was last
    /// active.
    pub(super) summary: Option<(String, String)>,
    pub(super) metadata: Map<String, Value>,
}

/// A stored message as the model is sent it (a user message without the runtime-context block older sessions
/// kept in it); `None` for a line that is not a message.
fn chat_message(stored: &SessionMessage) -> Option<ChatMessage> {
    let map = stored.as_map();
    let read = if stored.role() == Some("user")
        && let Some(Value::String(text)) = map.get("content")
        && text.contains(crate::context::RUNTIME_CONTEXT_TAG)
    {
        let mut map = map.clone();
        map.insert(
            "content".into(),
            Value::String(crate::context::strip_runtime_context(text)),
        );
        ChatMessage::from_json_map(&map)
    } else {
        ChatMessage::from_json_map(map)
    };
    read.map_err(|e| tracing::debug!(error = %e, "history: skipped an unreadable message"))
        .ok()
}

/// The session's archived-context summary in `metadata`: text and when the archived part was last active.
fn summary_of(metadata: &Map<String, Value>) -> Option<(String, String)> {
    let v = metadata.get(nanobot_sessions::LAST_SUMMARY_KEY)?;
    let text = v.get("text")?.as_str()?.trim();
    let last_active = v.get("last_active").and_then(Value::as_str).unwrap_or("?");
    (!text.is_empty() && text != "(nothing)").then(|| (text.to_owned(), last_active.to_owned()))
}

/// Whether `metadata` already records `channel:chat_id` as the chat the session answers in.
fn routed_to(metadata: &Map<String, Value>, channel: &str, chat_id: &str) -> bool {
    metadata.get(crate::tools::ROUTE_METADATA_KEY).is_some_and(|r| {
        r.get("channel").and_then(Value::as_str) == Some(channel)
            && r.get("chat_id").and_then(Value::as_str) == Some(chat_id)
    })
}

/// What a turn opens with ([`Ledger::open_turn`]).
pub(super) struct TurnOpening {
    /// The user's message as stored.
    pub(super) user: SessionMessage,
    pub(super) turn_id: u64,
    /// The channel message's delivery id, when it has one (not for cron turns).
    pub(super) delivery: Option<String>,
    /// A retried request (the API's): the same question as the last turn is taken for a redelivery of it.
    pub(super) retry: bool,
    /// The chat to record as the one the session answers in (`channel`, `chat_id`), when the turn comes from one.
    pub(super) route: Option<(String, String)>,
}

/// A turn opened ([`Ledger::open_turn`]).
pub(super) struct OpenedTurn {
    pub(super) history: History,
    /// How far an earlier delivery of the same message got.
    pub(super) earlier: Option<Earlier>,
    /// The sink of the run's checkpoints.
    pub(super) checkpoints: std::sync::Arc<SessionCheckpoint>,
}

/// The sessions of one loop.
pub(super) struct Ledger {
    store: SessionStore,
    /// Most messages replayed to the model.
    max_history: usize,
}

impl Ledger {
    pub(super) fn new(store: SessionStore, max_history: usize) -> Self {
        Self { store, max_history }
    }

    /// The session store.
    pub(super) fn store(&self) -> &SessionStore {
        &self.store
    }

    /// The history to replay (runtime context stripped from user messages), the session's archived-context
    /// summary when it has one, and the session's metadata.
    pub(super) async fn history(&self, key: &str) -> Result<History, CoreError> {
        // Converted where the store keeps them: the stored messages are read, not copied first.
        let (messages, metadata) = self
            .store
            .with_history(key, self.max_history, |stored, metadata| {
                let messages = stored.iter().filter_map(|m| chat_message(m)).collect();
                (messages, metadata.clone())
            })
            .await?;
        Ok(History {
            messages,
            summary: summary_of(&metadata),
            metadata,
        })
    }

    /// Restores the turn a killed process left in `key`'s checkpoint (its question, what it did, an
    /// "interrupted" result for each call it did not finish), once. Nothing is read when the checkpoint file is
    /// missing or empty (one `stat`; replicas sharing a store through NATS always read).
    pub(super) async fn recover_checkpoint(&self, key: &str) {
        if self.store.holds_no_checkpoint(key) {
            return;
        }
        let cp = match self.store.read_checkpoint(key).await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %key, error = %e, "unreadable checkpoint ignored");
                let _ = self.store.clear_checkpoint(key).await;
                return;
            }
        };
        // The channel message the interrupted turn answered, when it had one: its turn may have been saved just
        // before the process died (then the checkpoint is left over, not lost work), and restoring it records
        // the delivery as started in the same write, so a redelivery neither repeats the question nor is lost.
        let delivery = cp.get("delivery").and_then(Value::as_str).map(str::to_owned);
        if let Some(id) = &delivery {
            let saved = self
                .store
                .metadata(key)
                .await
                .is_ok_and(|m| redelivery::earlier(&m, id) == Some(Earlier::Answered));
            if saved {
                tracing::info!(session = %key, "a checkpoint of a turn already saved was left over; dropped");
                let _ = self.store.clear_checkpoint(key).await;
                return;
            }
        }
        match recovered_messages(&cp) {
            Some(msgs) => {
                tracing::warn!(session = %key, messages = msgs.len(), "recovering an interrupted turn from its checkpoint");
                let restored = match delivery {
                    Some(id) => {
                        self.store
                            .append_with_header(key, msgs, move |h| {
                                redelivery::record(&mut h.metadata, &id, Earlier::Started);
                            })
                            .await
                    }
                    None => self.store.append(key, msgs).await,
                };
                if let Err(e) = restored {
                    tracing::error!(session = %key, error = %e, "cannot restore the checkpoint");
                    return;
                }
            }
            None => tracing::warn!(session = %key, "malformed checkpoint ignored"),
        }
        let _ = self.store.clear_checkpoint(key).await;
    }

    /// Opens turn `turn_id` of `key` in one step of the store: the history read (as [`Ledger::history`]) and how
    /// far an earlier delivery of the same message got; then, unless it was answered before, a checkpoint holding
    /// the user's message (so a turn killed at any point, by SIGTERM or a caller's timeout killing the process,
    /// keeps the question), the chat the session answers in when `route` is new, and the channel message's
    /// delivery recorded as started after the checkpoint (a redelivery then finds the message in the session).
    /// The returned sink keeps the run's later checkpoints. A failed write is logged, not fatal.
    pub(super) async fn open_turn(&self, key: &str, turn: TurnOpening) -> Result<OpenedTurn, CoreError> {
        let TurnOpening {
            user,
            turn_id,
            delivery,
            retry,
            route,
        } = turn;
        let sink = std::sync::Arc::new(SessionCheckpoint {
            store: self.store.clone(),
            key: key.to_owned(),
            user,
            turn_id,
            delivery: delivery.clone(),
        });
        let opening = sink.payload(None);
        let user_text = sink.user.content_text().unwrap_or_default();
        let (read, written) = self
            .store
            .with_history_then_open(key, self.max_history, move |stored, metadata| {
                let messages: Vec<ChatMessage> = stored.iter().filter_map(|m| chat_message(m)).collect();
                let earlier = delivery
                    .as_deref()
                    .and_then(|id| redelivery::earlier(metadata, id))
                    .or_else(|| {
                        retry
                            .then(|| redelivery::last_turn(&messages, &user_text))
                            .flatten()
                    });
                let mut writes = Opening::default();
                if earlier != Some(Earlier::Answered) {
                    writes = writes.checkpoint(opening);
                    if let Some((channel, chat_id)) = route.filter(|(c, id)| !routed_to(metadata, c, id)) {
                        let value = json!({"channel": channel, "chat_id": chat_id, "metadata": {}});
                        writes = writes.header(move |h| {
                            h.metadata.insert(crate::tools::ROUTE_METADATA_KEY.into(), value);
                        });
                    }
                    if let (None, Some(id)) = (earlier, delivery) {
                        writes = writes
                            .header(move |h| redelivery::record(&mut h.metadata, &id, Earlier::Started));
                    }
                }
                ((messages, metadata.clone(), earlier), writes)
            })
            .await?;
        if let Err(e) = written {
            tracing::warn!(session = %key, error = %e, "cannot record the opening of the turn");
        }
        let (messages, metadata, earlier) = read;
        Ok(OpenedTurn {
            history: History {
                summary: summary_of(&metadata),
                messages,
                metadata,
            },
            earlier,
            checkpoints: sink,
        })
    }

    /// Saves a turn: its messages, its usage, and (when it answered channel message `answered`) the record of
    /// that, in one write: a process dying at any point leaves both or neither, so a redelivery is answered
    /// exactly once. Then the turn's checkpoint goes, and the usage records kept for the save are written, in the
    /// same trip to the blocking pool (whatever the save's outcome).
    pub(super) async fn save_turn(
        &self,
        key: &str,
        messages: Vec<SessionMessage>,
        usage: Option<Value>,
        answered: Option<String>,
        records: Option<DeferredUsage>,
    ) -> Result<(), CoreError> {
        let (cleared, ()) = self
            .store
            .append_and_clear_checkpoint_then(
                key,
                messages,
                move |h| {
                    if let Some(usage) = usage {
                        h.metadata.insert("_last_usage".into(), usage);
                    }
                    if let Some(id) = answered {
                        redelivery::record(&mut h.metadata, &id, Earlier::Answered);
                    }
                },
                move || records.map_or((), DeferredUsage::write),
            )
            .await?;
        if let Err(e) = cleared {
            tracing::warn!(session = %key, error = %e, "cannot clear the checkpoint");
        }
        Ok(())
    }

    /// Records how far the turn of delivery `id` got (logged, never fatal: the worst case is a second answer).
    /// Whether delivery `id` of session `key` was answered before (a session that cannot be read: not known to).
    pub(super) async fn answered_before(&self, key: &str, id: &str) -> bool {
        self.store
            .metadata(key)
            .await
            .is_ok_and(|m| redelivery::earlier(&m, id) == Some(Earlier::Answered))
    }

    pub(super) async fn record_delivery(&self, key: &str, id: &str, state: Earlier) {
        let id = id.to_owned();
        if let Err(e) = self
            .store
            .update_header(key, move |h| redelivery::record(&mut h.metadata, &id, state))
            .await
        {
            tracing::warn!(session = %key, error = %e, "cannot record the message's delivery");
        }
    }

    /// The internal message that continues session `key`'s active goal after a turn hit the iteration cap, and
    /// the round counted; `None` without an active goal or once [`crate::tools::MAX_CONTINUATION_ROUNDS`] ran in a row.
    pub(super) async fn goal_continuation(
        &self,
        key: &str,
        channel: &str,
        chat_id: &str,
    ) -> Option<InboundMessage> {
        use crate::tools::{CONTINUATION_ROUNDS_KEY, CONTINUATION_SENDER};
        let metadata = self.store.metadata(key).await.ok()?;
        let rounds = metadata
            .get(CONTINUATION_ROUNDS_KEY)
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if !crate::tools::goal_active(&metadata) || rounds >= crate::tools::MAX_CONTINUATION_ROUNDS {
            return None;
        }
        let counted = self
            .store
            .update_header(key, move |h| {
                h.metadata
                    .insert(CONTINUATION_ROUNDS_KEY.into(), json!(rounds + 1));
            })
            .await;
        if let Err(e) = counted {
            tracing::warn!(session = %key, error = %e, "cannot count the goal's continuation; not continuing");
            return None;
        }
        tracing::info!(session = %key, round = rounds + 1, "goal: continuing after the iteration cap");
        let prompt = crate::tools::continuation_prompt(&metadata);
        Some(
            InboundMessage::system_report(CONTINUATION_SENDER, channel, chat_id, prompt)
                .with_session_key(key)
                .with_metadata(crate::tools::CONTINUATION_MARK, true),
        )
    }
}
