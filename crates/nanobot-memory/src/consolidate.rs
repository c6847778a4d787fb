//! [`Consolidator`]: moves the oldest part of a session into memory, summarised by the model.

use nanobot_util::lock;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use nanobot_sessions::{LAST_SUMMARY_KEY, Session, SessionMessage, SessionStore, SessionVersion};
use nanobot_types::{ChatMessage, ChatRequest, FinishReason, Provider, ProviderError};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::error::{MemoryError, Result};
use crate::format::{budget_text, conversation_lines};
use crate::scope::ScopeKey;
#[cfg(feature = "search")]
use crate::search::SearchIndex;
use crate::store::{HistoryEntry, MemoryStore};

/// The answer with which the model says a slice holds nothing worth keeping (no history entry is written).
pub const NOTHING_TO_KEEP: &str = "(nothing)";

/// What the archive request asks for, after the conversation (same output contract as 0.3.5's archive prompt:
/// one marked fact per line, or `(nothing)`).
pub const ARCHIVE_PROMPT: &str = "Write a compact checkpoint of the conversation above, to be stored in the \
history log and read back later instead of the conversation itself.

Keep what is needed to carry on: the current goal, where it stands, results that later work depends on, open \
problems, the next step, and exact names, paths, commands and identifiers. Mark these `[ephemeral]`.

Keep any other fact only if it spares the user from repeating it, is not already in this checkpoint, would cause \
rework or a lost preference if forgotten, and will still matter in two weeks. Mark each one:
- `[permanent]` lasting preferences, traits and habits of the user;
- `[durable]` technical findings, project knowledge and configuration valid for months;
- `[ephemeral]` task state and decisions that may change within weeks;
- `[correction]` a fact that replaces something long-term memory says.

Where facts conflict, keep the latest. Merge duplicates. If space is short, corrections and preferences first. When a previous checkpoint is given, \
update it to the current state rather than starting over.

Answer with one fact per line, written as `- [mark] fact`, and nothing else. Answer `(nothing)` if nothing \
qualifies.";

/// The tool result given to a model that calls a tool while archiving.
const ARCHIVE_TOOL_REFUSAL: &str =
    "No tools run while archiving. Use only the conversation given and answer with the checkpoint text now.";

/// The system message of the archive request: the model's role and the current long-term memory, as data.
fn archive_system_prompt(current_memory: &str, previous: Option<&str>) -> String {
    let memory = if current_memory.trim().is_empty() {
        "(empty)"
    } else {
        current_memory.trim()
    };
    let mut prompt = format!(
        "You archive conversations of an AI assistant into its history log. Answer with text only; no tools are \
         available.\n\n## Long-term memory (data, for reference; kept by the Dream job, not by you)\n{memory}"
    );
    if let Some(previous) = previous {
        prompt.push_str(&format!(
            "\n\n[Archived Context Summary]\nThe previous checkpoint of this session (update it to the current \
             state; do not start over):\n{previous}"
        ));
    }
    prompt
}

/// The session's archived-context summary ([`LAST_SUMMARY_KEY`]), when it has a usable one.
pub fn last_summary(session: &Session) -> Option<String> {
    session
        .metadata
        .get(LAST_SUMMARY_KEY)?
        .get("text")?
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty() && *t != NOTHING_TO_KEEP)
        .map(str::to_owned)
}

/// Counts the tokens of a text (the agent core passes its tokenizer; the default is a byte heuristic).
pub type TokenCounter = Arc<dyn Fn(&str) -> usize + Send + Sync>;

/// When a session is consolidated and how much of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// When the unconsolidated messages hold more than `max` tokens, the oldest ones are consolidated until at
    /// most `target` tokens remain.
    Tokens {
        /// Trigger threshold.
        max: usize,
        /// What should remain afterwards.
        target: usize,
    },
    /// The old `memoryWindow` rule: when at least `window` messages are unconsolidated, all but the newest
    /// `window / 2` are consolidated.
    Messages {
        /// The window, in messages.
        window: usize,
    },
}

impl Budget {
    /// Tokens left for history in a context window of `context_window_tokens` after `max_output_tokens` and
    /// `reserved_tokens` (system prompt, tools, a safety margin); consolidation aims at half of that.
    pub fn from_context_window(
        context_window_tokens: usize,
        max_output_tokens: usize,
        reserved_tokens: usize,
    ) -> Self {
        let max = context_window_tokens
            .saturating_sub(max_output_tokens)
            .saturating_sub(reserved_tokens)
            .max(1);
        Self::Tokens { max, target: max / 2 }
    }

    /// `memoryWindow` when an old config sets it, else the token budget of the context window.
    pub fn resolve(
        memory_window: Option<usize>,
        context_window_tokens: usize,
        max_output_tokens: usize,
        reserved_tokens: usize,
    ) -> Self {
        match memory_window {
            Some(window) if window > 0 => Self::Messages { window },
            _ => Self::from_context_window(context_window_tokens, max_output_tokens, reserved_tokens),
        }
    }
}

/// How the [`Consolidator`] works.
#[derive(Clone)]
pub struct ConsolidationSettings {
    /// The model that writes the summary.
    pub model: String,
    /// When and how much to consolidate.
    pub budget: Budget,
    /// Output-token limit of the summary call.
    pub max_tokens: Option<u32>,
    /// Each message is cut to this many characters in the consolidation prompt.
    pub max_message_chars: usize,
    /// Consecutive failed model calls for one session after which its slice is archived raw instead.
    pub max_failures: u32,
    /// Consolidation rounds in one background run (each round handles one slice).
    pub max_rounds: usize,
    /// Token counting for [`Budget::Tokens`].
    pub token_counter: TokenCounter,
}

impl fmt::Debug for ConsolidationSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsolidationSettings")
            .field("model", &self.model)
            .field("budget", &self.budget)
            .field("max_tokens", &self.max_tokens)
            .field("max_message_chars", &self.max_message_chars)
            .field("max_failures", &self.max_failures)
            .field("max_rounds", &self.max_rounds)
            .finish_non_exhaustive()
    }
}

impl ConsolidationSettings {
    /// Settings for `model` with `budget` and defaults for the rest.
    pub fn new(model: impl Into<String>, budget: Budget) -> Self {
        Self {
            model: model.into(),
            budget,
            max_tokens: Some(4096),
            max_message_chars: 4000,
            max_failures: 3,
            max_rounds: 5,
            token_counter: Arc::new(|t: &str| t.len().div_ceil(3)),
        }
    }

    /// Uses `counter` to count tokens.
    #[must_use]
    pub fn with_token_counter(mut self, counter: TokenCounter) -> Self {
        self.token_counter = counter;
        self
    }
}

/// What one consolidation did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConsolidationOutcome {
    /// The session is within its budget (or has no safe slice to take).
    NothingToDo,
    /// Another consolidation of this session is running (background runs skip instead of waiting).
    Busy,
    /// The model archived `range` with a text answer.
    Summarised {
        /// The messages consolidated (indices into the session).
        range: Range<usize>,
        /// The history entry written; `None` when the model answered [`NOTHING_TO_KEEP`].
        entry: Option<HistoryEntry>,
    },
    /// The model gave no usable answer (or kept failing): `range` was archived verbatim instead.
    RawArchived {
        /// The messages archived.
        range: Range<usize>,
        /// The history entry written.
        entry: HistoryEntry,
        /// Why the summary was not used.
        reason: String,
    },
}

impl ConsolidationOutcome {
    /// The messages consolidated or archived (empty for [`ConsolidationOutcome::NothingToDo`] and `Busy`).
    pub fn range(&self) -> Range<usize> {
        match self {
            Self::Summarised { range, .. } | Self::RawArchived { range, .. } => range.clone(),
            _ => 0..0,
        }
    }

    /// How many messages went into memory.
    pub fn archived_messages(&self) -> usize {
        self.range().len()
    }

    /// Whether the model summarised them (false for a raw archive or when nothing happened).
    pub fn summarised(&self) -> bool {
        matches!(self, Self::Summarised { .. })
    }

    /// The history entry written, if any.
    pub fn entry(&self) -> Option<&HistoryEntry> {
        match self {
            Self::Summarised { entry, .. } => entry.as_ref(),
            Self::RawArchived { entry, .. } => Some(entry),
            _ => None,
        }
    }
}

/// Moves the oldest safe slice of a session into memory, by 0.3.5's protocol: the conversation followed by an
/// archive prompt ([`ARCHIVE_PROMPT`]); the model's text answer is appended to `history.jsonl` (nothing for
/// [`NOTHING_TO_KEEP`]), then the session's `last_consolidated` pointer moves past the slice. `MEMORY.md` is never
/// written here: only Dream edits it. The session file itself is never shortened.
///
/// A slice always ends at a safe cut: never between a tool call and its result (it prefers the start of a user
/// turn). One consolidation per session runs at a time; [`Consolidator::spawn_if_needed`] runs in the
/// background and skips a session that is already being consolidated. When the model answers without calling
/// text, or its calls keep failing ([`ConsolidationSettings::max_failures`]), the slice is archived raw
/// (`[RAW] n messages` + the formatted conversation) so nothing is lost.
///
/// Cheap to clone; clones share the per-session locks.
#[derive(Clone)]
pub struct Consolidator {
    inner: Arc<Inner>,
    /// Where history is written: the shared memory, or a scope's ([`Consolidator::scoped`]).
    store: MemoryStore,
}

struct Inner {
    sessions: SessionStore,
    provider: Arc<dyn Provider>,
    settings: ConsolidationSettings,
    #[cfg(feature = "search")]
    index: Option<SearchIndex>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    failures: Mutex<HashMap<String, u32>>,
    /// Per session: where the last consolidation ended (index, timestamp of the message before it), so a
    /// session archived after a reset is not archived twice.
    done: Mutex<HashMap<String, (usize, Option<String>)>>,
    /// Per session: the budget costs of its unconsolidated messages, so each message is counted once, not at
    /// every plan (a turn plans twice; a long chat's unconsolidated part grows up to the budget).
    costs: Mutex<HashMap<String, Costs>>,
    /// Per session: the version planned last with nothing to do. Until the session changes, a plan finds nothing
    /// again without reading it (a turn plans before and after; the one before usually follows the one after).
    settled: Mutex<HashMap<String, SessionVersion>>,
}

/// The budget costs of a session's unconsolidated messages, as last planned.
struct Costs {
    /// Index of the first message counted.
    start: usize,
    /// Its timestamp (a reset session that grew back to the same length is not taken for the same messages).
    first: Option<String>,
    costs: Vec<usize>,
}

impl Inner {
    /// The budget costs of `messages` (messages `start..` of session `key`): those counted at an earlier plan
    /// reused, the new ones counted.
    fn costs(&self, key: &str, start: usize, messages: &[SessionMessage]) -> Vec<usize> {
        let count = &*self.settings.token_counter;
        let first = messages.first().and_then(|m| m.timestamp()).map(str::to_owned);
        let mut all = lock(&self.costs);
        let memo = all.entry(key.to_owned()).or_insert_with(|| Costs {
            start,
            first: first.clone(),
            costs: Vec::new(),
        });
        if memo.start != start || memo.first != first || memo.costs.len() > messages.len() {
            *memo = Costs {
                start,
                first,
                costs: Vec::new(),
            };
        }
        let known = memo.costs.len();
        memo.costs.extend(message_costs(&messages[known..], count));
        memo.costs.clone()
    }
}

impl fmt::Debug for Consolidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consolidator")
            .field("memory", &self.store.dir())
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Consolidator {
    /// A consolidator writing to `store`, moving pointers in `sessions`, asking `provider`.
    pub fn new(
        store: MemoryStore,
        sessions: SessionStore,
        provider: Arc<dyn Provider>,
        settings: ConsolidationSettings,
    ) -> Self {
        Self {
            store,
            inner: Arc::new(Inner {
                sessions,
                provider,
                settings,
                #[cfg(feature = "search")]
                index: None,
                locks: Mutex::new(HashMap::new()),
                failures: Mutex::new(HashMap::new()),
                done: Mutex::new(HashMap::new()),
                costs: Mutex::new(HashMap::new()),
                settled: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Also feeds every written entry and consolidated message into `index` (for `memory_search`).
    /// Call before cloning.
    #[cfg(feature = "search")]
    #[must_use]
    pub fn with_index(self, index: SearchIndex) -> Self {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.index = Some(index);
                inner
            }
            Err(shared) => Inner {
                sessions: shared.sessions.clone(),
                provider: shared.provider.clone(),
                settings: shared.settings.clone(),
                index: Some(index),
                locks: Mutex::new(HashMap::new()),
                failures: Mutex::new(HashMap::new()),
                done: Mutex::new(HashMap::new()),
                costs: Mutex::new(HashMap::new()),
                settled: Mutex::new(HashMap::new()),
            },
        };
        Self {
            inner: Arc::new(inner),
            store: self.store,
        }
    }

    /// This consolidator writing to the memory of `scope` (see [`crate::scope`]); it shares the per-session locks,
    /// so a session is still consolidated once at a time whatever scope a caller names.
    #[must_use]
    pub fn scoped(&self, scope: &ScopeKey) -> Self {
        Self {
            inner: self.inner.clone(),
            store: self.store.scoped(scope),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ConsolidationSettings {
        &self.inner.settings
    }

    /// The memory files written to.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The slice of `session` that should be consolidated now under the budget, if any.
    pub fn plan(&self, session: &Session) -> Option<Range<usize>> {
        plan(
            &session.messages,
            session.last_consolidated,
            self.inner.settings.budget,
            &*self.inner.settings.token_counter,
        )
    }

    /// Starts a background consolidation of session `key` if it is over budget and not already being
    /// consolidated ([`Consolidator::run_if_needed`] on a tokio task). Never blocks the caller; returns the task
    /// (awaiting it is optional). Needs a tokio runtime.
    pub fn spawn_if_needed(&self, key: &str) -> JoinHandle<Result<Vec<ConsolidationOutcome>>> {
        let this = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move { this.run_if_needed(&key).await })
    }

    /// Consolidates session `key` while it is over budget (up to [`ConsolidationSettings::max_rounds`]
    /// slices). Returns `[Busy]` at once when another consolidation of this session is running, and
    /// `[NothingToDo]` when the session is within budget.
    pub async fn run_if_needed(&self, key: &str) -> Result<Vec<ConsolidationOutcome>> {
        let Ok(_guard) = self.lock_for(key).try_lock_owned() else {
            return Ok(vec![ConsolidationOutcome::Busy]);
        };
        let mut outcomes = Vec::new();
        for _ in 0..self.inner.settings.max_rounds.max(1) {
            let Some((window, offset, range)) = self.planned(key).await? else {
                break;
            };
            match self.run_slice(&window, range, offset, true).await {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    tracing::warn!(session = %key, error = %e, "memory consolidation failed");
                    return Err(e);
                }
            }
        }
        if outcomes.is_empty() {
            outcomes.push(ConsolidationOutcome::NothingToDo);
        }
        Ok(outcomes)
    }

    /// Consolidates session `key` now if it is over budget (one slice), waiting for a running consolidation of
    /// the same session to finish first.
    pub async fn consolidate(&self, key: &str) -> Result<ConsolidationOutcome> {
        let _guard = self.lock_for(key).lock_owned().await;
        match self.planned(key).await? {
            Some((window, offset, range)) => self.run_slice(&window, range, offset, true).await,
            None => Ok(ConsolidationOutcome::NothingToDo),
        }
    }

    /// For `/compact`: consolidates everything unconsolidated before the latest user turn, whatever the
    /// budget says.
    pub async fn compact(&self, key: &str) -> Result<ConsolidationOutcome> {
        let _guard = self.lock_for(key).lock_owned().await;
        let (window, offset) = self.unconsolidated(key).await?;
        let cuts = safe_cuts(&window.messages, 0);
        let end = cuts
            .iter()
            .rev()
            .find(|&&i| i < window.messages.len() && window.messages[i].role() == Some("user"))
            .copied();
        match end {
            Some(end) if end > 0 => self.run_slice(&window, 0..end, offset, true).await,
            _ => Ok(ConsolidationOutcome::NothingToDo),
        }
    }

    /// For `/new`: resets session `key` (see [`SessionStore::reset`]) and archives its unconsolidated messages
    /// into memory, serialised with any consolidation of that session. The archive needs the model; when it is
    /// unreachable the messages are archived raw, never dropped.
    pub async fn reset_and_archive(&self, key: &str) -> Result<ConsolidationOutcome> {
        let _guard = self.lock_for(key).lock_owned().await;
        let old = self.inner.sessions.reset(key).await?;
        let start = old.last_consolidated.min(old.messages.len());
        if old.messages[start..].iter().all(|m| m.is_command()) {
            return Ok(ConsolidationOutcome::NothingToDo);
        }
        let range = start..old.messages.len();
        self.run_slice(&old, range, 0, false).await
    }

    /// For `/new` when the caller has already reset the session: archives the unconsolidated messages of
    /// `session` (its state before the reset), serialised with any consolidation of that session.
    pub async fn archive_session(&self, session: Session) -> Result<ConsolidationOutcome> {
        let _guard = self.lock_for(&session.key).lock_owned().await;
        let mut start = session.last_consolidated.min(session.messages.len());
        // A consolidation that finished while the session was being reset already archived part of it.
        let done = lock(&self.inner.done).get(&session.key).cloned();
        if let Some((end, ts)) = done
            && end > start
            && end <= session.messages.len()
            && session.messages[end - 1].timestamp().map(str::to_owned) == ts
        {
            start = end;
        }
        if session.messages[start..].iter().all(|m| m.is_command()) {
            return Ok(ConsolidationOutcome::NothingToDo);
        }
        let range = start..session.messages.len();
        self.run_slice(&session, range, 0, false).await
    }

    /// Summarises `messages` (e.g. a session the caller already reset) into memory without touching any
    /// session; falls back to a raw archive as consolidation does.
    pub async fn archive(&self, key: &str, messages: Vec<SessionMessage>) -> Result<ConsolidationOutcome> {
        let mut session = Session::new(key);
        let len = messages.len();
        session.messages = messages;
        self.run_slice(&session, 0..len, 0, false).await
    }

    /// The part of session `key` not yet consolidated, as a session of its own (its `last_consolidated` 0), and
    /// the index of its first message in the whole session. Read from the end of the file: the cost follows that
    /// part, not the session's length.
    async fn unconsolidated(&self, key: &str) -> Result<(Session, usize)> {
        let part = self.inner.sessions.unconsolidated(key).await?;
        let mut window = Session::new(key);
        window.messages = part.messages;
        window.metadata = part.metadata;
        Ok((window, part.start))
    }

    /// What to consolidate of session `key` now under the budget, if anything: the messages up to the slice's
    /// end (as a session of its own), the index of its first message in the whole session, and the slice. The
    /// plan runs on the store's copy (nothing is copied unless there is work) with each message counted once
    /// over the session's life.
    async fn planned(&self, key: &str) -> Result<Option<(Session, usize, Range<usize>)>> {
        let sessions = &self.inner.sessions;
        let before = sessions.version(key);
        if before.is_some() && lock(&self.inner.settled).get(key) == before.as_ref() {
            return Ok(None);
        }
        let (inner, k) = (self.inner.clone(), key.to_owned());
        let budget = self.inner.settings.budget;
        let planned = self
            .inner
            .sessions
            .with_unconsolidated(key, move |start, messages, metadata| {
                let costs = match budget {
                    Budget::Tokens { .. } => inner.costs(&k, start, messages),
                    Budget::Messages { .. } => Vec::new(),
                };
                let range = plan_with_costs(messages, 0, budget, &costs)?;
                let mut window = Session::new(k);
                window.messages = messages[..range.end].to_vec();
                window.metadata = metadata.clone();
                Some((window, start, range))
            })
            .await?;
        // Kept only when the session did not change while it was planned (an append between the read and now).
        if planned.is_none()
            && let Some(v) = before
            && sessions.version(key) == Some(v)
        {
            lock(&self.inner.settled).insert(key.to_owned(), v);
        }
        Ok(planned)
    }

    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.inner.locks);
        locks.entry(key.to_owned()).or_default().clone()
    }

    /// Summarises `session.messages[range]`, which are messages `offset + range` of the whole session; moves the
    /// pointer when `move_pointer`.
    async fn run_slice(
        &self,
        session: &Session,
        range: Range<usize>,
        offset: usize,
        move_pointer: bool,
    ) -> Result<ConsolidationOutcome> {
        let key = session.key.clone();
        let slice = &session.messages[range.clone()];
        let range = (range.start + offset)..(range.end + offset);
        let lines = conversation_lines(slice, self.inner.settings.max_message_chars);
        let store = self.store.clone();
        let current_memory = blocking(move || store.read_memory()).await?;

        let previous = last_summary(session);
        let outcome = if lines.is_empty() {
            None
        } else {
            Some(
                self.summarise(&key, &lines, &current_memory, previous.as_deref(), &range)
                    .await?,
            )
        };

        let (outcome, entry) = match outcome {
            None => (ConsolidationOutcome::NothingToDo, None),
            Some(Summary::Saved { history_entry }) => {
                let store = self.store.clone();
                let k = key.clone();
                let entry = blocking(move || store.append_history(&history_entry, Some(&k))).await?;
                (
                    ConsolidationOutcome::Summarised {
                        range: range.clone(),
                        entry: Some(entry.clone()),
                    },
                    Some(entry),
                )
            }
            Some(Summary::Nothing) => (
                ConsolidationOutcome::Summarised {
                    range: range.clone(),
                    entry: None,
                },
                None,
            ),
            Some(Summary::Raw { reason }) => {
                let text = format!("[RAW] {} messages\n{}", slice.len(), lines.join("\n"));
                let store = self.store.clone();
                let k = key.clone();
                let entry = blocking(move || store.append_history(&text, Some(&k))).await?;
                tracing::warn!(session = %key, %reason, cursor = entry.cursor, "memory slice archived raw");
                (
                    ConsolidationOutcome::RawArchived {
                        range: range.clone(),
                        entry: entry.clone(),
                        reason,
                    },
                    Some(entry),
                )
            }
        };

        // The checkpoint the model wrote becomes the session's archived-context summary (0.3.5's
        // `_last_summary`), shown in the system prompt in place of the messages it covers.
        let summary = match &outcome {
            ConsolidationOutcome::Summarised { entry: Some(e), .. } => Some(e.content.clone()),
            _ => None,
        };
        if move_pointer {
            let (start, end) = (range.start, range.end);
            // The session may have been reset (`/new`) meanwhile: move the pointer only if the slice is still
            // there, unchanged at both ends.
            let first_ts = slice.first().and_then(|m| m.timestamp()).map(str::to_owned);
            let last_ts = slice.last().and_then(|m| m.timestamp()).map(str::to_owned);
            let last_ts_for_done = last_ts.clone();
            let last_active = last_ts.clone().unwrap_or_else(|| {
                chrono::Local::now()
                    .naive_local()
                    .format("%Y-%m-%dT%H:%M:%S%.6f")
                    .to_string()
            });
            let now = self.inner.sessions.unconsolidated(&key).await?;
            let stamp = |i: usize| {
                now.messages
                    .get(i - start)
                    .and_then(|m| m.timestamp())
                    .map(str::to_owned)
            };
            let same = now.start == start && stamp(start) == first_ts && stamp(end - 1) == last_ts;
            let moved = same
                && self
                    .inner
                    .sessions
                    .update_header(&key, move |h| {
                        if h.last_consolidated == start {
                            h.last_consolidated = end;
                            if let Some(text) = summary {
                                h.metadata.insert(
                                    LAST_SUMMARY_KEY.to_owned(),
                                    json!({"text": text, "last_active": last_active}),
                                );
                            }
                        }
                    })
                    .await?;
            lock(&self.inner.done).insert(key.clone(), (end, last_ts_for_done));
            if !moved {
                tracing::warn!(session = %key, start, end, "session changed during consolidation; pointer left alone");
            }
        }

        #[cfg(feature = "search")]
        if let Some(index) = &self.inner.index {
            let index = index.clone();
            let messages: Vec<SessionMessage> = slice.to_vec();
            let k = key.clone();
            let first = range.start;
            let store = self.store.clone();
            let result = blocking(move || {
                if let Some(e) = &entry {
                    index.add_history_entries_of(&store, std::slice::from_ref(e))?;
                }
                index.add_session_messages(&k, first, &messages)
            })
            .await;
            if let Err(e) = result {
                tracing::warn!(session = %key, error = %e, "memory search index not updated");
            }
        }
        #[cfg(not(feature = "search"))]
        let _ = (entry, slice, range);
        Ok(outcome)
    }

    /// Asks the model for an archive of the slice as plain text (0.3.5's protocol: a prompt after the
    /// conversation, the text answer is the history entry, `(nothing)` means nothing worth keeping). No tools
    /// are offered; a model that calls one anyway is told so and asked once more. A model error is returned
    /// (the slice stays for the next run) until the session has failed `max_failures` times in a row; then the
    /// slice is archived raw, as it is when the answer is empty, cut off by the length limit or still a tool
    /// call.
    async fn summarise(
        &self,
        key: &str,
        lines: &[String],
        current_memory: &str,
        previous: Option<&str>,
        range: &Range<usize>,
    ) -> Result<Summary> {
        let mut messages = vec![
            ChatMessage::system(archive_system_prompt(current_memory, previous)),
            ChatMessage::user(format!(
                "## Conversation to archive ({} messages)\n{}\n\n{ARCHIVE_PROMPT}",
                range.len(),
                lines.join("\n")
            )),
        ];
        for attempt in 0..2 {
            let mut request = ChatRequest::new(self.inner.settings.model.clone(), messages.clone());
            request.max_tokens = self.inner.settings.max_tokens;
            let response = match self.inner.provider.chat(request).await {
                Ok(r) => {
                    self.failures(key, |n| *n = 0);
                    r
                }
                Err(e) => return self.on_model_error(key, e, range),
            };
            if response.has_tool_calls() {
                if attempt == 0 {
                    tracing::info!(session = %key, calls = response.tool_calls.len(), "memory archive answered with tool calls; asking for the text");
                    messages.push(ChatMessage::assistant_tool_calls(
                        response.content.clone(),
                        response.tool_calls.clone(),
                    ));
                    for call in &response.tool_calls {
                        messages.push(ChatMessage::tool_result(
                            &call.id,
                            &call.name,
                            ARCHIVE_TOOL_REFUSAL,
                        ));
                    }
                    continue;
                }
                return Ok(Summary::Raw {
                    reason: "the model answered the archive prompt with tool calls".to_owned(),
                });
            }
            if response.finish_reason == FinishReason::Length {
                return Ok(Summary::Raw {
                    reason: "the archive answer was cut off by the output-token limit".to_owned(),
                });
            }
            let text = response.content.as_deref().map(str::trim).unwrap_or_default();
            if text.is_empty() {
                return Ok(Summary::Raw {
                    reason: "the model gave no archive text".to_owned(),
                });
            }
            if text == NOTHING_TO_KEEP {
                return Ok(Summary::Nothing);
            }
            return Ok(Summary::Saved {
                history_entry: text.to_owned(),
            });
        }
        Ok(Summary::Raw {
            reason: "the model answered the archive prompt with tool calls".to_owned(),
        })
    }

    fn on_model_error(&self, key: &str, error: ProviderError, range: &Range<usize>) -> Result<Summary> {
        let max = self.inner.settings.max_failures.max(1);
        let mut count = 0;
        self.failures(key, |n| {
            *n += 1;
            count = *n;
        });
        if count >= max {
            self.failures(key, |n| *n = 0);
            return Ok(Summary::Raw {
                reason: format!("the model failed {count} times in a row ({error})"),
            });
        }
        tracing::warn!(session = %key, ?range, attempt = count, error = %error, "consolidation model call failed");
        Err(MemoryError::Provider(error))
    }

    fn failures(&self, key: &str, f: impl FnOnce(&mut u32)) {
        let mut map = lock(&self.inner.failures);
        f(map.entry(key.to_owned()).or_default());
    }
}

enum Summary {
    Saved {
        history_entry: String,
    },
    /// The model found nothing worth keeping.
    Nothing,
    Raw {
        reason: String,
    },
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// Positions `i` in `(start, len]` where the session may be cut: everything before `i` that called a tool has
/// its result before `i`, and `messages[i]` is not a tool result. A user message always starts a new turn (tool
/// calls left open before it were interrupted and are closed on replay).
pub(crate) fn safe_cuts(messages: &[SessionMessage], start: usize) -> Vec<usize> {
    let mut open: HashSet<String> = HashSet::new();
    let mut cuts = Vec::new();
    for (i, m) in messages.iter().enumerate().skip(start) {
        if i > start {
            let role = m.role();
            if role == Some("user") {
                open.clear();
            }
            if open.is_empty() && role != Some("tool") {
                cuts.push(i);
            }
        }
        match m.role() {
            Some("assistant") => open.extend(m.tool_call_ids().into_iter().map(str::to_owned)),
            Some("tool") => {
                if let Some(id) = m.tool_call_id() {
                    open.remove(id);
                }
            }
            _ => {}
        }
    }
    if messages.len() > start && open.is_empty() {
        cuts.push(messages.len());
    }
    cuts
}

/// The slice `start..end` to consolidate under `budget`, if any.
pub(crate) fn plan(
    messages: &[SessionMessage],
    last_consolidated: usize,
    budget: Budget,
    count: &(dyn Fn(&str) -> usize + Send + Sync),
) -> Option<Range<usize>> {
    let start = last_consolidated.min(messages.len());
    let costs = match budget {
        Budget::Tokens { .. } => message_costs(&messages[start..], count),
        Budget::Messages { .. } => Vec::new(),
    };
    plan_with_costs(messages, start, budget, &costs)
}

/// What each message counts against a token budget: its tokens and 4 for its framing; 0 for a command.
fn message_costs(messages: &[SessionMessage], count: &(dyn Fn(&str) -> usize + Send + Sync)) -> Vec<usize> {
    messages
        .iter()
        .map(|m| {
            if m.is_command() {
                0
            } else {
                count(&budget_text(m)) + 4
            }
        })
        .collect()
}

/// [`plan`] with the costs of `messages[start..]` given ([`message_costs`]; only read under a token budget).
fn plan_with_costs(
    messages: &[SessionMessage],
    start: usize,
    budget: Budget,
    costs: &[usize],
) -> Option<Range<usize>> {
    let len = messages.len();
    let start = start.min(len);
    let desired_end = match budget {
        Budget::Messages { window } => {
            let window = window.max(1);
            if len - start < window {
                return None;
            }
            len - window / 2
        }
        Budget::Tokens { max, target } => {
            let total: usize = costs.iter().sum();
            if total <= max {
                return None;
            }
            // Smallest end whose remaining tail fits the target.
            let mut remaining = total;
            let mut end = start;
            for cost in costs {
                if remaining <= target {
                    break;
                }
                remaining -= cost;
                end += 1;
            }
            end
        }
    };
    let cuts = safe_cuts(messages, start);
    let user_cut = cuts
        .iter()
        .copied()
        .find(|&i| i >= desired_end && i < len && messages[i].role() == Some("user"));
    let end = user_cut
        .or_else(|| cuts.iter().copied().find(|&i| i >= desired_end))
        .or_else(|| cuts.iter().copied().rfind(|&i| i < desired_end))?;
    (end > start).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn msg(v: Value) -> SessionMessage {
        SessionMessage::from_map(v.as_object().cloned().unwrap())
    }

    fn call(id: &str) -> SessionMessage {
        msg(json!({"role": "assistant", "content": null,
                   "tool_calls": [{"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}}]}))
    }

    fn result(id: &str) -> SessionMessage {
        msg(json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": "ok"}))
    }

    fn turn(n: usize) -> Vec<SessionMessage> {
        vec![
            SessionMessage::new("user", format!("question {n}")),
            call(&format!("c{n}")),
            result(&format!("c{n}")),
            SessionMessage::new("assistant", format!("answer {n}")),
        ]
    }

    fn heuristic(t: &str) -> usize {
        t.len()
    }

    #[test]
    fn cuts_never_separate_a_call_from_its_result() {
        let msgs: Vec<_> = (0..3).flat_map(turn).collect();
        let cuts = safe_cuts(&msgs, 0);
        assert_eq!(cuts, vec![1, 3, 4, 5, 7, 8, 9, 11, 12]);
        for c in cuts {
            assert_ne!(msgs.get(c).and_then(|m| m.role()), Some("tool"));
        }
    }

    #[test]
    fn interrupted_calls_do_not_block_later_cuts() {
        let mut msgs = vec![SessionMessage::new("user", "a"), call("lost")];
        msgs.extend(turn(1));
        assert_eq!(safe_cuts(&msgs, 0), vec![1, 2, 3, 5, 6]);
    }

    #[test]
    fn window_plan_keeps_half_and_ends_on_a_user_turn() {
        let msgs: Vec<_> = (0..5).flat_map(turn).collect(); // 20 messages
        assert_eq!(plan(&msgs, 0, Budget::Messages { window: 21 }, &heuristic), None);
        // window 10 → keep 5 → desired end 15 → next user turn starts at 16.
        assert_eq!(
            plan(&msgs, 0, Budget::Messages { window: 10 }, &heuristic),
            Some(0..16)
        );
        assert_eq!(plan(&msgs, 16, Budget::Messages { window: 10 }, &heuristic), None);
    }

    #[test]
    fn token_plan_consolidates_until_the_target() {
        let msgs: Vec<_> = (0..5).flat_map(turn).collect();
        let total: usize = msgs.iter().map(|m| heuristic(&budget_text(m)) + 4).sum();
        assert_eq!(
            plan(
                &msgs,
                0,
                Budget::Tokens {
                    max: total,
                    target: total / 2
                },
                &heuristic
            ),
            None
        );
        let r = plan(
            &msgs,
            0,
            Budget::Tokens {
                max: total - 1,
                target: total / 2,
            },
            &heuristic,
        )
        .unwrap();
        assert_eq!(r.start, 0);
        assert_eq!(msgs[r.end].role(), Some("user"));
        let rest: usize = msgs[r.end..].iter().map(|m| heuristic(&budget_text(m)) + 4).sum();
        assert!(rest <= total / 2, "{rest} > {}", total / 2);
    }

    #[test]
    fn budget_resolution() {
        assert_eq!(
            Budget::resolve(Some(100), 1000, 100, 0),
            Budget::Messages { window: 100 }
        );
        assert_eq!(
            Budget::resolve(None, 1000, 100, 100),
            Budget::Tokens {
                max: 800,
                target: 400
            }
        );
    }
}
