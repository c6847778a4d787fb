//! [`SearchIndex`]: full-text search over history entries and session messages (SQLite FTS5).

use nanobot_util::lock;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_sessions::{SessionMessage, SessionStore};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{MemoryError, Result};
use crate::format::short_stamp;
use crate::store::{HistoryEntry, MEMORY_DIR, MemoryStore};

/// File name of the index, inside `<workspace>/memory/` ([`SearchIndex::open_in_workspace`]).
pub const INDEX_FILE: &str = "index.sqlite";

/// File name of the index that [`crate::Memory::open`] keeps beside the workspace's session files (in nanobot's
/// data directory, out of reach of `exec` and the file tools: SQLite opens files by name, so a copy in the
/// workspace could be redirected by a symlink a command planted there). It is rebuilt from `history.jsonl` and
/// the sessions on use.
pub const SESSION_DIR_INDEX_FILE: &str = "memory-index.sqlite";

/// Session messages longer than this many characters are indexed in part.
const MAX_INDEXED_CHARS: usize = 8000;

const SCHEMA: &str = "
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(
    content,
    kind UNINDEXED,
    session_key UNINDEXED,
    timestamp UNINDEXED,
    position UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS seen_history (cursor INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS seen_scoped_history (
    folder TEXT NOT NULL,
    cursor INTEGER NOT NULL,
    PRIMARY KEY (folder, cursor)
);
CREATE TABLE IF NOT EXISTS seen_messages (
    session_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    PRIMARY KEY (session_key, position, timestamp)
);
CREATE TABLE IF NOT EXISTS session_marks (session_key TEXT PRIMARY KEY, updated_at TEXT NOT NULL);
";

/// Where a search hit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HitKind {
    /// A `history.jsonl` entry (`position` is its cursor).
    History,
    /// A session message (`position` is its index in the session).
    Message,
}

/// One ranked search result.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// History entry or session message.
    pub kind: HitKind,
    /// The session it belongs to (`None` for history entries without one).
    pub session_key: Option<String>,
    /// When it was written (`YYYY-MM-DD HH:MM`).
    pub timestamp: String,
    /// The history cursor or the message index.
    pub position: u64,
    /// The matching part, terms marked `[like this]`.
    pub snippet: String,
    /// BM25 rank (lower is better).
    pub score: f64,
}

/// An embedded SQLite FTS5 index at `<workspace>/memory/index.sqlite`, fed with history entries and session
/// messages (user and assistant text) and updated incrementally: each entry and message is indexed once,
/// however often it is offered ([`SearchIndex::sync_history`], [`SearchIndex::sync_sessions`]).
///
/// Cheap to clone (one connection behind a mutex). The methods block (SQLite); call them from
/// `spawn_blocking` in async code, as the [`crate::MemorySearchTool`] does.
///
/// ```
/// use nanobot_memory::{MemoryStore, SearchIndex};
///
/// let ws = tempfile::tempdir().unwrap();
/// let store = MemoryStore::new(ws.path());
/// store.append_history("[2026-01-01 10:00] Alice's cat is called Miso.", Some("telegram:1")).unwrap();
/// let index = SearchIndex::open_in_workspace(ws.path()).unwrap();
/// assert_eq!(index.sync_history(&store).unwrap(), 1);
/// let hits = index.search("cat name Miso", 5).unwrap();
/// assert_eq!(hits[0].session_key.as_deref(), Some("telegram:1"));
/// assert!(hits[0].snippet.contains("[Miso]"));
/// ```
#[derive(Clone)]
pub struct SearchIndex {
    path: PathBuf,
    /// `None` until first used when opened with [`SearchIndex::open_lazy`].
    conn: Arc<Mutex<Option<Connection>>>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SearchIndex {
    /// Opens (creating if needed) the index of `workspace`: `<workspace>/memory/index.sqlite`.
    pub fn open_in_workspace(workspace: &Path) -> Result<Self> {
        Self::open(&workspace.join(MEMORY_DIR).join(INDEX_FILE))
    }

    /// Opens (creating if needed) the index at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Self::connect(path)?;
        Ok(Self {
            path: path.to_owned(),
            conn: Arc::new(Mutex::new(Some(conn))),
        })
    }

    /// The index of `workspace` (`<workspace>/memory/index.sqlite`), opened (and created) only when first
    /// searched or fed, so a start-up or a turn that never touches it costs no SQLite work. An error opening
    /// it is reported by that first call.
    pub fn open_lazy_in_workspace(workspace: &Path) -> Self {
        Self::open_lazy(&workspace.join(MEMORY_DIR).join(INDEX_FILE))
    }

    /// The index at `path`, opened on first use (see [`SearchIndex::open_lazy_in_workspace`]).
    pub fn open_lazy(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            conn: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether the database has been opened (at once by [`SearchIndex::open`], else by the first use).
    pub fn is_open(&self) -> bool {
        lock(&self.conn).is_some()
    }

    fn connect(path: &Path) -> Result<Connection> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| MemoryError::io("creating directory", dir, e))?;
        }
        let err = |source| MemoryError::Index {
            path: path.to_owned(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(err)?;
        // WAL lets another process read while we write; the answer row is the new mode.
        let _mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(conn)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut slot = lock(&self.conn);
        let conn = match &mut *slot {
            Some(conn) => conn,
            None => slot.insert(Self::connect(&self.path)?),
        };
        f(conn).map_err(|source| MemoryError::Index {
            path: self.path.clone(),
            source,
        })
    }

    /// Indexes one history entry of the shared memory (no-op when it is indexed already). Returns whether it
    /// was new.
    pub fn add_history_entry(&self, entry: &HistoryEntry) -> Result<bool> {
        self.add_history_entries(std::slice::from_ref(entry))
            .map(|n| n == 1)
    }

    /// Indexes history entries of the shared memory not indexed yet; returns how many were new.
    pub fn add_history_entries(&self, entries: &[HistoryEntry]) -> Result<usize> {
        self.add_history_in(None, entries)
    }

    /// Indexes history entries of `store` (the shared memory or a scope's: cursors count per folder) not
    /// indexed yet; returns how many were new.
    pub fn add_history_entries_of(&self, store: &MemoryStore, entries: &[HistoryEntry]) -> Result<usize> {
        let folder = (store.rel_dir() != Path::new(MEMORY_DIR)).then(|| store.rel_dir().to_string_lossy());
        self.add_history_in(folder.as_deref(), entries)
    }

    /// `folder`: `None` for `memory/` (its cursors are in `seen_history`, as before scopes existed).
    fn add_history_in(&self, folder: Option<&str>, entries: &[HistoryEntry]) -> Result<usize> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let mut added = 0;
            {
                let mut shared = tx.prepare_cached("INSERT OR IGNORE INTO seen_history (cursor) VALUES (?1)")?;
                let mut scoped =
                    tx.prepare_cached("INSERT OR IGNORE INTO seen_scoped_history (folder, cursor) VALUES (?1, ?2)")?;
                let mut doc = tx.prepare_cached(
                    "INSERT INTO docs (content, kind, session_key, timestamp, position) VALUES (?1, 'history', ?2, ?3, ?4)",
                )?;
                for e in entries {
                    let cursor = i64::try_from(e.cursor).unwrap_or(i64::MAX);
                    let new = match folder {
                        None => shared.execute(params![cursor])?,
                        Some(f) => scoped.execute(params![f, cursor])?,
                    };
                    if new == 1 {
                        doc.execute(params![cjk_spaced(&e.content), e.session_key, e.timestamp, cursor])?;
                        added += 1;
                    }
                }
            }
            tx.commit()?;
            Ok(added)
        })
    }

    /// Indexes the user and assistant text of `messages`, which start at index `first` of session `key`;
    /// messages indexed already are skipped. Returns how many were new.
    pub fn add_session_messages(
        &self,
        key: &str,
        first: usize,
        messages: &[SessionMessage],
    ) -> Result<usize> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let mut added = 0;
            {
                let mut seen = tx.prepare_cached(
                    "INSERT OR IGNORE INTO seen_messages (session_key, position, timestamp) VALUES (?1, ?2, ?3)",
                )?;
                let mut doc = tx.prepare_cached(
                    "INSERT INTO docs (content, kind, session_key, timestamp, position) VALUES (?1, 'message', ?2, ?3, ?4)",
                )?;
                for (i, m) in messages.iter().enumerate() {
                    if m.is_command() || !matches!(m.role(), Some("user" | "assistant")) {
                        continue;
                    }
                    let Some(text) = m.content_text().filter(|t| !t.trim().is_empty()) else {
                        continue;
                    };
                    let text: String = text.chars().take(MAX_INDEXED_CHARS).collect();
                    let position = i64::try_from(first + i).unwrap_or(i64::MAX);
                    let raw_ts = m.timestamp().unwrap_or("");
                    if seen.execute(params![key, position, raw_ts])? == 1 {
                        let stamp = short_stamp(m.timestamp());
                        doc.execute(params![cjk_spaced(&text), key, stamp, position])?;
                        added += 1;
                    }
                }
            }
            tx.commit()?;
            Ok(added)
        })
    }

    /// Indexes the history entries of `store` (the shared memory or a scope's) that are not indexed yet; returns
    /// how many were new.
    pub fn sync_history(&self, store: &MemoryStore) -> Result<usize> {
        let entries = store.read_history_after(0)?;
        self.add_history_entries_of(store, &entries)
    }

    /// Indexes new messages of every session in `sessions` whose file changed since the last sync (old-layout
    /// files not migrated yet are skipped); returns how many messages were new.
    pub async fn sync_sessions(&self, sessions: &SessionStore) -> Result<usize> {
        let mut added = 0;
        // Old-layout files are left for the session store to migrate when their session is next used.
        for info in sessions.list_sessions().await?.into_iter().filter(|i| !i.legacy) {
            // The newest message's time and the file size: either changes when messages are appended.
            let size = std::fs::metadata(&info.path).map(|m| m.len()).unwrap_or(0);
            let mark = format!("{}|{size}", info.updated_at.format("%Y-%m-%dT%H:%M:%S%.f"));
            let this = self.clone();
            let key = info.key.clone();
            let known = tokio::task::spawn_blocking(move || {
                this.with_conn(|c| {
                    c.query_row(
                        "SELECT updated_at FROM session_marks WHERE session_key = ?1",
                        params![key],
                        |r| r.get::<_, String>(0),
                    )
                    .optional()
                })
            })
            .await??;
            if known.as_deref() == Some(mark.as_str()) {
                continue;
            }
            let messages = sessions.with_session(&info.key, |s| s.messages.clone()).await?;
            let this = self.clone();
            let key = info.key.clone();
            added += tokio::task::spawn_blocking(move || {
                let n = this.add_session_messages(&key, 0, &messages)?;
                this.with_conn(|c| {
                    c.execute(
                        "INSERT INTO session_marks (session_key, updated_at) VALUES (?1, ?2)
                         ON CONFLICT(session_key) DO UPDATE SET updated_at = excluded.updated_at",
                        params![key, mark],
                    )
                })?;
                Ok::<_, MemoryError>(n)
            })
            .await??;
        }
        Ok(added)
    }

    /// The best `limit` matches for `query`, best first. Every word of the query must match; when nothing
    /// does, any word may. Query syntax is not interpreted (words are quoted), so any text is safe.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>> {
        self.search_in(query, limit, None)
    }

    /// Like [`SearchIndex::search`], but with `session` given, only what that session said: its messages and
    /// the history entries recorded from it (history entries that name no session still match).
    pub fn search_in(&self, query: &str, limit: usize, session: Option<&str>) -> Result<Vec<SearchHit>> {
        let terms = query_terms(query);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let all = terms.join(" AND ");
        let hits = self.run_query(&all, limit, session)?;
        if !hits.is_empty() || terms.len() == 1 {
            return Ok(hits);
        }
        self.run_query(&terms.join(" OR "), limit, session)
    }

    fn run_query(&self, fts_query: &str, limit: i64, session: Option<&str>) -> Result<Vec<SearchHit>> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT kind, session_key, timestamp, position,
                        snippet(docs, 0, '[', ']', '…', 24), bm25(docs)
                 FROM docs WHERE docs MATCH ?1
                   AND (?3 IS NULL OR session_key = ?3 OR (kind = 'history' AND COALESCE(session_key, '') = ''))
                 ORDER BY bm25(docs) LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![fts_query, limit, session], |r| {
                let kind: String = r.get(0)?;
                Ok(SearchHit {
                    kind: if kind == "history" {
                        HitKind::History
                    } else {
                        HitKind::Message
                    },
                    session_key: r.get(1)?,
                    timestamp: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    position: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                    snippet: cjk_unspaced(&r.get::<_, String>(4)?),
                    score: r.get(5)?,
                })
            })?;
            rows.collect()
        })
    }
}

/// Chinese, Japanese and Korean script characters, which are written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FFFF) // CJK Extensions B–F
}

/// The text as indexed: each CJK character becomes its own token (FTS5's `unicode61` tokenizer would otherwise
/// keep a whole run of CJK characters as one word), so a query can match words inside a sentence.
fn cjk_spaced(text: &str) -> String {
    if !text.chars().any(is_cjk) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if is_cjk(c) {
            out.push(' ');
            out.push(c);
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Undoes [`cjk_spaced`] in a snippet: drops spaces next to CJK characters (and next to the `[`/`]` marks
/// around them).
fn cjk_unspaced(text: &str) -> String {
    if !text.chars().any(is_cjk) {
        return text.to_owned();
    }
    let chars: Vec<char> = text.chars().collect();
    let near_cjk = |i: usize, step: isize| {
        let mut j = i as isize + step;
        while j >= 0 && (j as usize) < chars.len() && matches!(chars[j as usize], '[' | ']' | ' ') {
            j += step;
        }
        j >= 0 && (j as usize) < chars.len() && is_cjk(chars[j as usize])
    };
    chars
        .iter()
        .enumerate()
        .filter(|&(i, &c)| !(c == ' ' && (near_cjk(i, -1) || near_cjk(i, 1))))
        .map(|(_, &c)| c)
        .collect()
}

/// FTS5 terms of a free-text query, each quoted (so FTS syntax in the query is inert): words, and for runs
/// of CJK characters their overlapping two-character phrases (a single character stays as it is).
fn query_terms(query: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for word in query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
    {
        let mut latin = String::new();
        let mut run: Vec<char> = Vec::new();
        let flush_run = |run: &mut Vec<char>, terms: &mut Vec<String>| {
            match run.len() {
                0 => {}
                1 => terms.push(format!("\"{}\"", run[0])),
                _ => terms.extend(run.windows(2).map(|w| format!("\"{} {}\"", w[0], w[1]))),
            }
            run.clear();
        };
        for c in word.chars() {
            if is_cjk(c) {
                if !latin.is_empty() {
                    terms.push(format!("\"{latin}\""));
                    latin.clear();
                }
                run.push(c);
            } else {
                flush_run(&mut run, &mut terms);
                latin.push(c);
            }
        }
        flush_run(&mut run, &mut terms);
        if !latin.is_empty() {
            terms.push(format!("\"{latin}\""));
        }
    }
    terms.dedup();
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_indexed_once_and_found() {
        let dir = tempfile::tempdir().unwrap();
        let index = SearchIndex::open(&dir.path().join("i.sqlite")).unwrap();
        let msgs = vec![
            SessionMessage::new("user", "my favourite colour is teal"),
            SessionMessage::new("assistant", "Noted: teal."),
            SessionMessage::new("tool", "teal teal teal").with("tool_call_id", "c"),
            SessionMessage::new("user", "/help teal").with("_command", true),
        ];
        assert_eq!(index.add_session_messages("cli:direct", 0, &msgs).unwrap(), 2);
        assert_eq!(index.add_session_messages("cli:direct", 0, &msgs).unwrap(), 0);
        let hits = index.search("favourite colour", 10).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].kind, HitKind::Message);
        assert_eq!(hits[0].position, 0);
        assert_eq!(index.search("teal", 10).unwrap().len(), 2);
        // Any word may match when not all do; FTS syntax in the query is inert.
        assert_eq!(index.search("colour OR \"zebra\" NEAR(", 10).unwrap().len(), 1);
        assert!(index.search("  ** ", 10).unwrap().is_empty());
    }

    #[test]
    fn cjk_text_is_found_by_words_inside_sentences() {
        let dir = tempfile::tempdir().unwrap();
        let index = SearchIndex::open(&dir.path().join("i.sqlite")).unwrap();
        let msgs = vec![
            SessionMessage::new("user", "我的猫叫米索，它不喜欢洗澡。"),
            SessionMessage::new("user", "明天去北京出差"),
        ];
        index.add_session_messages("feishu:1", 0, &msgs).unwrap();
        let hits = index.search("洗澡", 5).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].position, 0);
        assert!(hits[0].snippet.contains("不喜欢[洗澡]。"), "{}", hits[0].snippet);
        assert!(hits[0].snippet.contains("我的猫叫米索"), "{}", hits[0].snippet);
        assert_eq!(index.search("北京", 5).unwrap()[0].position, 1);
        assert!(
            index.search("京北", 5).unwrap().is_empty(),
            "order matters inside a CJK word"
        );
        assert_eq!(
            query_terms("猫 abc北京x"),
            vec!["\"猫\"", "\"abc\"", "\"北 京\"", "\"x\""]
        );
    }
}
