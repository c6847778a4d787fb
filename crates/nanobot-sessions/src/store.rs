//! [`SessionStore`]: where session files live, and every read and write of them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use chrono::NaiveDateTime;
use nanobot_util::{SharedFile, SharedFiles};
use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::{Result, SessionError};
use crate::format;
use crate::fsio::{self, Tail};
use crate::handles::{self, HANDLE_METADATA_KEY, SessionHandle};
use crate::keyname;
use crate::message::SessionMessage;
use crate::session::{self, Session, SessionHeader};
use crate::tail::{self, TailRead, TailScan};
use crate::time;

/// When appended messages reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsyncPolicy {
    /// `fdatasync` after every append and metadata change: a message is on disk when the call returns
    /// (survives power loss). The default.
    #[default]
    Always,
    /// Leave flushing to the OS: an append is one `write(2)` and survives a crash of the process, but the last
    /// few seconds may be lost on power loss. Whole-file rewrites are still fsynced.
    Never,
}

/// Tuning for a [`SessionStore`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// When appends reach the disk.
    pub fsync: FsyncPolicy,
    /// Once more metadata records than this (and than 1/8 of the message count) have been appended, the next
    /// metadata change rewrites the file (atomically) with a single, up-to-date first line.
    pub compact_after: usize,
    /// A message whose text `content` is longer than this many bytes (default [`MAX_MESSAGE_BYTES`]) is
    /// spilled: the whole text goes to a side file beside the session (`<session>.spill/<id>.txt`, mode
    /// 0600) and the session line keeps its first [`SPILL_PREVIEW_BYTES`] bytes with a note naming the file.
    /// Session lines stay small, so reading the tail stays cheap.
    pub max_message_bytes: usize,
    /// The store shared by gateway replicas on several machines (`nanobot-store-nats`), or `None` (the default):
    /// local files only. With one, each access first brings the session's file (and, for checkpoint calls, its
    /// checkpoint) up to date from the shared store, and each change is published to it before the call
    /// returns; a change another replica made first fails the call with [`SessionError::Shared`]. Names in the
    /// store: `sessions/<file name>` (the same on every replica, whatever its workspace id).
    pub shared: Option<Arc<dyn SharedFiles>>,
}

/// Default of [`StoreOptions::max_message_bytes`]: 1 MiB.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// How much of a spilled message stays in the session line.
pub const SPILL_PREVIEW_BYTES: usize = 16 * 1024;

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::Always,
            compact_after: 64,
            max_message_bytes: MAX_MESSAGE_BYTES,
            shared: None,
        }
    }
}

impl StoreOptions {
    /// Sets [`StoreOptions::fsync`].
    #[must_use]
    pub fn fsync(mut self, policy: FsyncPolicy) -> Self {
        self.fsync = policy;
        self
    }

    /// Sets [`StoreOptions::max_message_bytes`] (at least [`SPILL_PREVIEW_BYTES`]).
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes.max(SPILL_PREVIEW_BYTES);
        self
    }

    /// Sets [`StoreOptions::shared`].
    #[must_use]
    pub fn shared(mut self, files: Arc<dyn SharedFiles>) -> Self {
        self.shared = Some(files);
        self
    }

    /// Sets [`StoreOptions::compact_after`] (at least 1).
    #[must_use]
    pub fn compact_after(mut self, records: usize) -> Self {
        self.compact_after = records.max(1);
        self
    }
}

/// What [`SessionStore::restore_to_workspace`] did.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// Files copied.
    pub restored: usize,
    /// Files already there with the same contents.
    pub unchanged: usize,
    /// Files that need the user: another file of the same name is in the workspace, or the session's id has
    /// no name 0.3.5 can store.
    pub conflicts: Vec<PathBuf>,
}

enum Restored {
    Copied,
    Unchanged,
    Conflict(PathBuf),
}

/// What [`SessionStore::with_history_then_open`] writes once the history is read: a turn's opening checkpoint
/// record (not synced) and then a change of the session's header. Both optional.
#[derive(Default)]
#[non_exhaustive]
pub struct Opening {
    /// The checkpoint payload to write.
    pub checkpoint: Option<Value>,
    /// The header change to make.
    pub header: Option<HeaderChange>,
}

impl Opening {
    /// Writes `payload` as the checkpoint.
    #[must_use]
    pub fn checkpoint(mut self, payload: Value) -> Self {
        self.checkpoint = Some(payload);
        self
    }

    /// Changes the header with `f` (after the checkpoint); several changes run in the order given.
    #[must_use]
    pub fn header(mut self, f: impl FnOnce(&mut SessionHeader) + Send + 'static) -> Self {
        self.header = Some(match self.header.take() {
            None => Box::new(f),
            Some(first) => Box::new(move |h: &mut SessionHeader| {
                first(h);
                f(h);
            }),
        });
        self
    }
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opening")
            .field("checkpoint", &self.checkpoint)
            .field("header", &self.header.as_ref().map(|_| "FnOnce"))
            .finish()
    }
}

/// A change of a session's header, as [`Opening`] carries it.
pub type HeaderChange = Box<dyn FnOnce(&mut SessionHeader) + Send>;

/// A version of a session as one [`SessionStore`] knows it ([`SessionStore::version`]): two equal versions mean
/// this store has written nothing to the session between them and has found no change by anyone else. Unique
/// within a store (never reused, not even after the session is reset or deleted); meaningless across stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionVersion(u64);

/// The part of a session not yet consolidated ([`SessionStore::unconsolidated`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Unconsolidated {
    /// Index of the first message here in the whole session (the session's `last_consolidated`, at most its
    /// length).
    pub start: usize,
    /// The messages from `start` to the end.
    pub messages: Vec<SessionMessage>,
    /// The session's metadata.
    pub metadata: Map<String, Value>,
}

/// One row of [`SessionStore::list_sessions`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The session key.
    pub key: String,
    /// When the session was created.
    pub created_at: NaiveDateTime,
    /// When it last changed (newest of the metadata records read and the last message's `timestamp`).
    pub updated_at: NaiveDateTime,
    /// The file.
    pub path: PathBuf,
    /// Whether the file is in an old layout. Always `false` now: old layouts are imported when the store opens
    /// ([`crate::legacy`]); kept so callers built against earlier versions still compile.
    pub legacy: bool,
}

/// Reads and writes session files in the Python nanobot's layout:
/// `<config dir>/sessions/<workspace id>/<unpadded base64url(key)>.jsonl`.
///
/// * **Concurrency.** `Send + Sync + Clone` (clones share state). Each session key has its own async lock, so
///   different sessions are read and written in parallel, and calls on one session are serialised. The file
///   work runs on tokio's blocking pool (`spawn_blocking`), so callers need a tokio runtime. Two *processes*
///   writing the same session at the same moment are not coordinated (gateway replicas take a session's turns
///   one at a time through their shared bus).
/// * **Cache.** A session is read from disk once and then served from memory, for as long as the file is as
///   this store left it: its identity, length and change time are compared at each access (one `stat`), so a
///   session another process wrote meanwhile (a replica that ran its last turn, an editor) is read again.
///   [`SessionStore::invalidate`] / [`SessionStore::invalidate_all`] drop the cache outright.
/// * **Durability.** Appending messages is one `write(2)` of the new lines on an `O_APPEND` descriptor, then an
///   fsync as [`FsyncPolicy`] says: no rewrite per message. A metadata change appends one complete metadata
///   record (see the crate docs); a torn record is a cut last line, handled below. When appended records exceed
///   both [`StoreOptions::compact_after`] and 1/8 of the message count, and on [`SessionStore::save`] /
///   [`SessionStore::reset`] / migration, the file is replaced atomically (temp file, fsync, rename, fsync of
///   the directory). Files are created mode 0600, directories 0700.
/// * **Crash recovery.** A file whose last line was cut is copied to `<file>.corrupt-<time>`, cut back to its
///   last complete line, and loaded with a warning.
/// * **Old layouts.** `<workspace>/sessions/<channel>_<chat_id>.jsonl` (and the even older
///   `<config dir>/sessions/<channel>_<chat_id>.jsonl`) are imported once, when the store first opens its
///   namespace ([`crate::legacy`]), copied into the current layout atomically, and the old file is kept
///   (never deleted) out of the workspace, in the namespace folder: no chat reads another's history through
///   the file tools. They are never looked up on demand: the workspace is where the model can write.
/// * **Names.** [`crate::keyname`]: base64url as in the Python nanobot, long keys hashed, control characters
///   refused.
#[derive(Clone)]
pub struct SessionStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("dir", &self.inner.dir)
            .field("workspace", &self.inner.workspace)
            .finish_non_exhaustive()
    }
}

struct Inner {
    workspace: PathBuf,
    workspace_id: String,
    dir: PathBuf,
    options: StoreOptions,
    slots: StdMutex<HashMap<String, Arc<Mutex<Slot>>>>,
    /// Bytes read from session files (tail reads, repairs, whole loads): see [`SessionStore::bytes_read`].
    bytes_read: AtomicU64,
    /// `fdatasync`/`fsync` calls on session and checkpoint files: see [`SessionStore::syncs`].
    syncs: AtomicU64,
    /// The last [`SessionVersion`] given out.
    versions: AtomicU64,
    /// Held while handles are given out ([`SessionStore::handles`]). It guards no data, so a panic while it is
    /// held leaves nothing broken (hence `AssertUnwindSafe`: the store stays unwind-safe).
    handles: std::panic::AssertUnwindSafe<Mutex<()>>,
}

/// Per-key state, guarded by the key's lock.
#[derive(Default)]
struct Slot {
    /// The whole session, once read.
    cached: Option<Session>,
    /// Only the metadata (no messages), when the file was read from its end ([`tail::scan`]).
    head: Option<Session>,
    /// Without `cached`: the unconsolidated messages once read from the end (index of the first, messages), kept
    /// up to date by appends, so a long-running process reads them once, not at every consolidation check.
    window: Option<(usize, Vec<SessionMessage>)>,
    /// Messages in the file (valid when `cached` or `head` is set).
    total: usize,
    /// Messages after the newest metadata record a tail reader can use.
    since_anchor: usize,
    /// Metadata records after the first line (exact only when `cached` is set).
    trailing_metadata: usize,
    /// The file is known to end with a complete line (checked or written by us).
    tail_ok: bool,
    /// The checkpoint as last written by this store (what the next write appends a change to).
    checkpoint: Option<Map<String, Value>>,
    /// The file as this store last left it: another process changing it (a gateway replica that ran the
    /// session's last turn, an editor) makes the cached state stale, and it is read again.
    seen: Option<FileStamp>,
    /// The session's [`SessionVersion`] as this store knows it; 0 before it was first read or written.
    version: u64,
}

/// What tells one version of a session file from another without reading it: identity, length and change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileStamp {
    /// The stamp of `path` now; `None` when it does not exist (or cannot be read).
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let m = fs::metadata(path).ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        })
    }
}

impl Slot {
    /// The session's metadata: the cached session or the header read from the end of the file.
    fn header(&mut self) -> Option<&mut Session> {
        self.cached.as_mut().or(self.head.as_mut())
    }
}

/// The messages of a history view, owned.
fn owned(history: &[Cow<'_, SessionMessage>]) -> Vec<SessionMessage> {
    history.iter().map(|m| m.clone().into_owned()).collect()
}

/// File name of the workspace id, inside `<workspace>/.nanobot/`.
pub const WORKSPACE_ID_FILE: &str = "workspace-id";

impl SessionStore {
    /// A store for `workspace`'s sessions under `config_dir` (normally `~/.nanobot`), with default options.
    ///
    /// Claims the workspace's session namespace as the Python nanobot 0.3.5 does ([`crate::namespace`]):
    /// `<workspace>/.nanobot/workspace-id` and the folder's `.workspace` marker, created or repaired as
    /// needed. This is the only blocking I/O outside the async methods.
    pub fn new(config_dir: impl Into<PathBuf>, workspace: impl Into<PathBuf>) -> Result<Self> {
        Self::with_options(config_dir, workspace, StoreOptions::default())
    }

    /// Like [`SessionStore::new`], with options.
    pub fn with_options(
        config_dir: impl Into<PathBuf>,
        workspace: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<Self> {
        let config_dir = config_dir.into();
        let workspace = workspace.into();
        let ns = crate::namespace::claim(&config_dir.join("sessions"), &workspace)?;
        let (workspace_id, dir) = (ns.id, ns.dir);
        crate::legacy::import_once(&config_dir, &workspace, &dir)?;
        Ok(Self {
            inner: Arc::new(Inner {
                workspace,
                workspace_id,
                dir,
                options,
                slots: StdMutex::new(HashMap::new()),
                bytes_read: AtomicU64::new(0),
                syncs: AtomicU64::new(0),
                versions: AtomicU64::new(0),
                handles: std::panic::AssertUnwindSafe(Mutex::new(())),
            }),
        })
    }

    /// Bytes this store has read from session files so far: tail reads, tail repairs and whole loads. Reading
    /// history costs bytes of the tail, whatever the file's length or the length of its lines; tests and
    /// benchmarks assert on this rather than on time.
    pub fn bytes_read(&self) -> u64 {
        self.inner.bytes_read.load(Ordering::Relaxed)
    }

    /// `fdatasync`/`fsync` calls this store has made on session and checkpoint files so far (appends with
    /// [`FsyncPolicy::Always`], checkpoint writes; atomic rewrites count once).
    pub fn syncs(&self) -> u64 {
        self.inner.syncs.load(Ordering::Relaxed)
    }

    /// The workspace id (the directory name under `<config dir>/sessions/`).
    pub fn workspace_id(&self) -> &str {
        &self.inner.workspace_id
    }

    /// The directory holding this workspace's session files.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The file of session `key` (it may not exist yet).
    pub fn path_for(&self, key: &str) -> PathBuf {
        self.inner.path_for(key)
    }

    /// The checkpoint file of session `key`: `<session file>.checkpoint.json`.
    pub fn checkpoint_path(&self, key: &str) -> PathBuf {
        checkpoint_path(&self.inner.path_for(key))
    }

    /// Whether this machine's checkpoint file of session `key` holds a checkpoint (exists and is not empty: a
    /// cleared checkpoint is an empty file). Reads no shared store.
    pub fn holds_checkpoint(&self, key: &str) -> bool {
        self.checkpoint_len(key).is_ok_and(|len| len > 0)
    }

    /// The version of session `key` as this store last saw it, answered from memory (no file is read): it
    /// changes whenever this store writes the session or finds that someone else changed it, which it checks at
    /// every async call on the key. `None` before the session was first read or written, after an error, and
    /// while a call on the key is running. What lets a caller keep what it worked out from a session (a
    /// consolidation plan) until the session changes.
    pub fn version(&self, key: &str) -> Option<SessionVersion> {
        keyname::check_key(key).ok()?;
        let slot = self.inner.slot(key);
        let slot = slot.try_lock().ok()?;
        (slot.version != 0).then_some(SessionVersion(slot.version))
    }

    /// Whether session `key` has no checkpoint on this machine: its file is missing or empty (one `stat` on the
    /// calling thread, no read, no trip to the blocking pool). Always `false` when the files are shared with other
    /// replicas through a shared store (another replica's checkpoint is in that store, not here yet), for a key
    /// that is refused, and when the file cannot be looked at. What lets a turn skip its crash check; replicas
    /// sharing one home see each other's checkpoints here.
    pub fn holds_no_checkpoint(&self, key: &str) -> bool {
        self.inner.options.shared.is_none()
            && keyname::check_key(key).is_ok()
            && self.checkpoint_len(key).is_ok_and(|len| len == 0)
    }

    /// The length of this machine's checkpoint file of `key` (0 when there is none).
    fn checkpoint_len(&self, key: &str) -> std::io::Result<u64> {
        match fs::metadata(self.checkpoint_path(key)) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// A copy of session `key`, loaded (or migrated) from disk on first use; an empty, not yet saved session
    /// if it has no file. Prefer [`SessionStore::with_session`] or [`SessionStore::history`] for long sessions.
    pub async fn session(&self, key: &str) -> Result<Session> {
        self.with_session(key, Session::clone).await
    }

    /// Runs `f` on session `key` (loaded as by [`SessionStore::session`]) without copying it.
    pub async fn with_session<R, F>(&self, key: &str, f: F) -> Result<R>
    where
        F: FnOnce(&Session) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run(key, move |inner, key, slot| Ok(f(inner.load(key, slot)?)))
            .await
    }

    /// Whether session `key` has a file (in the current or an old layout) or unsaved state in the cache.
    pub async fn exists(&self, key: &str) -> Result<bool> {
        self.run(key, |inner, key, slot| {
            Ok(slot.cached.as_ref().is_some_and(|s| !s.messages.is_empty()) || inner.path_for(key).exists())
        })
        .await
    }

    /// The history to send to the model; see [`Session::history`] for the rules. The cost is proportional to
    /// `max_messages`, not to the session's length: served from the cache when the session is loaded, otherwise
    /// read from the end of the file (see the crate docs); only a file the Python nanobot wrote is read whole,
    /// once.
    pub async fn history(&self, key: &str, max_messages: usize) -> Result<Vec<SessionMessage>> {
        self.with_history(key, max_messages, |history, _| owned(history))
            .await
    }

    /// Runs `f` on what [`SessionStore::history_and_metadata`] reads, without copying it: the messages as
    /// [`Session::history_view`] gives them (borrowed from the cached session or from what was read) and the
    /// metadata. What a turn builds its request from.
    pub async fn with_history<R, F>(&self, key: &str, max_messages: usize, f: F) -> Result<R>
    where
        F: FnOnce(&[Cow<'_, SessionMessage>], &Map<String, Value>) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run(key, move |inner, key, slot| {
            inner.with_history(key, slot, max_messages, f)
        })
        .await
    }

    /// [`SessionStore::with_history`], then what `f` asks to write on the strength of what it read, in the same
    /// step under the session's lock (one trip to the blocking pool instead of up to three): how a turn opens,
    /// its history read, its opening checkpoint record written (as by [`SessionStore::write_checkpoint_unsynced`])
    /// and then its header changed (the record that a channel message is being answered, say). The outer error is
    /// the read's (nothing was written); `Ok((r, Err(_)))` means a write failed (what came before it stands).
    pub async fn with_history_then_open<R, F>(
        &self,
        key: &str,
        max_messages: usize,
        f: F,
    ) -> Result<(R, Result<()>)>
    where
        F: FnOnce(&[Cow<'_, SessionMessage>], &Map<String, Value>) -> (R, Opening) + Send + 'static,
        R: Send + 'static,
    {
        self.run(key, move |inner, key, slot| {
            let (r, opening) = inner.with_history(key, slot, max_messages, f)?;
            let Opening { checkpoint, header } = opening;
            let mut written = checkpoint.map_or(Ok(()), |cp| inner.put_checkpoint(key, slot, cp, false));
            if written.is_ok()
                && let Some(change) = header
            {
                written = inner.update_header(key, slot, change).map(|_| ());
            }
            if written.is_err() {
                // What the slot holds may no longer be the file: read it again next time.
                *slot = Slot::default();
            }
            Ok((r, written))
        })
        .await
    }

    /// The messages not yet consolidated (from `last_consolidated` to the end) and the session's metadata. The
    /// cost is proportional to that part, not to the session's length: served from the cache when the session
    /// is loaded, otherwise read from the end of the file (only a file the Python nanobot wrote is read whole,
    /// once). What consolidation plans on.
    pub async fn unconsolidated(&self, key: &str) -> Result<Unconsolidated> {
        self.with_unconsolidated(key, |start, messages, metadata| Unconsolidated {
            start,
            messages: messages.to_vec(),
            metadata: metadata.clone(),
        })
        .await
    }

    /// Runs `f` on what [`SessionStore::unconsolidated`] reads (the index of its first message, the messages,
    /// the metadata) without copying it when the session is cached.
    pub async fn with_unconsolidated<R, F>(&self, key: &str, f: F) -> Result<R>
    where
        F: FnOnce(usize, &[SessionMessage], &Map<String, Value>) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run(key, move |inner, key, slot| {
            inner.unconsolidated(key, slot)?;
            if let Some(s) = &slot.cached {
                let start = s.last_consolidated.min(s.messages.len());
                return Ok(f(start, &s.messages[start..], &s.metadata));
            }
            let metadata = slot.head.as_ref().map(|h| h.metadata.clone()).unwrap_or_default();
            match &slot.window {
                Some((start, messages)) => Ok(f(*start, messages, &metadata)),
                None => Ok(f(slot.total, &[], &metadata)),
            }
        })
        .await
    }

    /// [`SessionStore::history`] and the session's metadata (`metadata` of its metadata line), read together.
    pub async fn history_and_metadata(
        &self,
        key: &str,
        max_messages: usize,
    ) -> Result<(Vec<SessionMessage>, Map<String, Value>)> {
        self.with_history(key, max_messages, |history, metadata| {
            (owned(history), metadata.clone())
        })
        .await
    }

    /// Appends messages to session `key`, creating the session (and its file) if needed. Messages without a
    /// `timestamp` get one. One write of the new lines; the metadata line is not rewritten (the session's
    /// `updated_at` is taken from its newest message when read).
    pub async fn append(&self, key: &str, messages: Vec<SessionMessage>) -> Result<()> {
        self.run(key, move |inner, key, slot| inner.append(key, slot, messages))
            .await
    }

    /// Appends `messages` to session `key` and changes its metadata with `f`, in one write: after a crash the file
    /// holds both or neither (a turn's messages and the record that it was answered, say).
    pub async fn append_with_header<F>(&self, key: &str, messages: Vec<SessionMessage>, f: F) -> Result<()>
    where
        F: FnOnce(&mut SessionHeader) + Send + 'static,
    {
        self.run(key, move |inner, key, slot| {
            inner.append_with_header(key, slot, messages, Some(f))
        })
        .await
    }

    /// Changes the metadata line of session `key` (`metadata`, `last_consolidated`, unmodelled fields). Writes
    /// only if `f` changed something; returns whether it did.
    pub async fn update_header<F>(&self, key: &str, f: F) -> Result<bool>
    where
        F: FnOnce(&mut SessionHeader) + Send + 'static,
    {
        self.run(key, move |inner, key, slot| inner.update_header(key, slot, f))
            .await
    }

    /// Sets `last_consolidated` of session `key` (after the consolidator archived messages up to `index`).
    pub async fn set_last_consolidated(&self, key: &str, index: usize) -> Result<bool> {
        self.update_header(key, move |h| h.last_consolidated = index)
            .await
    }

    /// Replaces session `session.key` on disk with `session` (atomic rewrite) and caches it.
    pub async fn save(&self, session: Session) -> Result<()> {
        let key = session.key.clone();
        self.run(&key, move |inner, key, slot| {
            let path = inner.path_for(key);
            fsio::write_atomic(&path, format::whole_file(&session)?.as_bytes())?;
            slot.total = session.messages.len();
            slot.since_anchor = session.messages.len();
            slot.cached = Some(session);
            slot.head = None;
            slot.window = None;
            slot.trailing_metadata = 0;
            slot.tail_ok = true;
            Ok(())
        })
        .await
    }

    /// Starts session `key` afresh (for `/new`): no messages, `last_consolidated = 0`, metadata and creation
    /// time kept. The file is replaced atomically. Returns the session as it was, so the caller can archive
    /// its messages.
    pub async fn reset(&self, key: &str) -> Result<Session> {
        self.run(key, |inner, key, slot| {
            let current = inner.load(key, slot)?;
            let mut fresh = Session {
                key: current.key.clone(),
                messages: Vec::new(),
                created_at: current.created_at,
                updated_at: time::now(),
                metadata: current.metadata.clone(),
                last_consolidated: 0,
                extra: current.extra.clone(),
            };
            fresh.clear();
            fsio::write_atomic(&inner.path_for(key), format::whole_file(&fresh)?.as_bytes())?;
            let old = std::mem::replace(current, fresh);
            slot.trailing_metadata = 0;
            slot.total = 0;
            slot.since_anchor = 0;
            slot.tail_ok = true;
            Ok(old)
        })
        .await
    }

    /// Deletes session `key`'s file and checkpoint and forgets it. Old-layout files are left alone.
    pub async fn delete(&self, key: &str) -> Result<()> {
        self.run(key, |inner, key, slot| {
            let path = inner.path_for(key);
            let checkpoint = checkpoint_path(&path);
            inner.pull_shared(&checkpoint)?;
            for p in [checkpoint.clone(), path] {
                match fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(SessionError::io("delete", p, e)),
                }
            }
            inner.push_shared(&checkpoint)?;
            *slot = Slot::default();
            Ok(())
        })
        .await
    }

    /// Drops session `key` from the cache; the next access reads the file again.
    pub async fn invalidate(&self, key: &str) {
        let slot = self.inner.slot(key);
        *slot.lock().await = Slot::default();
    }

    /// Drops every cached session.
    pub async fn invalidate_all(&self) {
        let slots: Vec<_> = self.inner.slots_snapshot();
        for slot in slots {
            *slot.lock().await = Slot::default();
        }
    }

    /// Every session of this workspace, most recently updated first, including old-layout files not yet
    /// migrated (a key in both layouts is listed once, from the current one). Reads only the first and the last
    /// line of each file. Files that cannot be read are skipped with a warning.
    pub async fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        self.pull_all().await?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.list()).await?
    }

    /// With a shared store ([`StoreOptions::shared`]), brings every session file it holds into this store's
    /// directory (each under its session's lock), so listing sees the sessions other replicas wrote. Without
    /// one, does nothing.
    pub async fn pull_all(&self) -> Result<()> {
        let Some(shared) = self.inner.options.shared.clone() else {
            return Ok(());
        };
        let names = tokio::task::spawn_blocking(move || shared.list("sessions/")).await??;
        for name in names {
            let Some(file) = name.strip_prefix("sessions/") else {
                continue;
            };
            let Some(stem) = file.strip_suffix(".jsonl").filter(|s| !s.contains('/')) else {
                continue;
            };
            match keyname::key_from_stem(stem) {
                Some(key) => self.run(&key, |_, _, _| Ok(())).await?,
                None => {
                    // A hashed name: its key is in the file. Fetched only when this replica has no copy yet (so no
                    // call of this process can be writing it).
                    let inner = self.inner.clone();
                    let path = self.inner.dir.join(file);
                    if !path.exists() {
                        tokio::task::spawn_blocking(move || inner.pull_shared(&path)).await??;
                    }
                }
            }
        }
        Ok(())
    }

    /// The metadata (`metadata` of the metadata line) of session `key`: empty for a session without a file.
    /// Read from the cache or the end of the file, not the whole session.
    pub async fn metadata(&self, key: &str) -> Result<Map<String, Value>> {
        self.run(key, |inner, key, slot| {
            inner.ensure_head(key, slot)?;
            Ok(slot.header().map(|s| s.metadata.clone()).unwrap_or_default())
        })
        .await
    }

    /// Calls `f(&mut state, index, message)` for each message of session `key`, oldest first (`index` counts
    /// messages from the start of the file), and returns the final state; `None` when the session has no file.
    /// The file is streamed line by line and nothing is cached, so any session can be searched in bounded
    /// memory. A line that is not a JSON object (a cut last line) is skipped.
    pub async fn scan_messages<S, F>(&self, key: &str, state: S, f: F) -> Result<Option<S>>
    where
        S: Send + 'static,
        F: FnMut(&mut S, usize, SessionMessage) + Send + 'static,
    {
        self.run(key, move |inner, key, slot| inner.scan(key, slot, state, f))
            .await
    }

    /// The handle of every session of this workspace ([`crate::handles`]), oldest session first. Sessions
    /// without one are given one now, written into their metadata (as the Python nanobot 0.3.5 does). Calls
    /// are serialised, so two callers never give one name to two sessions.
    pub async fn handles(&self) -> Result<Vec<SessionHandle>> {
        let _one_at_a_time = self.inner.handles.lock().await;
        let mut rows = self.list_sessions().await?;
        rows.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
        let mut used = std::collections::HashSet::new();
        let mut named = Vec::with_capacity(rows.len());
        let mut pending = Vec::new();
        for row in rows {
            let metadata = match self.metadata(&row.key).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(session = %row.key, error = %e, "session skipped: unreadable metadata");
                    continue;
                }
            };
            let name = metadata
                .get(HANDLE_METADATA_KEY)
                .and_then(Value::as_str)
                .and_then(|n| handles::normalize_handle(n).ok())
                .filter(|n| !used.contains(n));
            match name {
                Some(n) => {
                    used.insert(n.clone());
                    named.push(SessionHandle {
                        name: n,
                        key: row.key,
                    });
                }
                None => pending.push(row.key),
            }
        }
        for key in pending {
            let name = handles::allocate_handle(&used);
            let value = Value::String(name.clone());
            match self
                .update_header(&key, move |h| {
                    h.metadata.insert(HANDLE_METADATA_KEY.into(), value);
                })
                .await
            {
                Ok(_) => {
                    used.insert(name.clone());
                    named.push(SessionHandle { name, key });
                }
                Err(e) => tracing::warn!(session = %key, error = %e, "cannot record the session's handle"),
            }
        }
        Ok(named)
    }

    /// Copies every session file back into `<workspace>/sessions/` under the same name, as 0.3.5's
    /// `nanobot sessions restore-workspace` does before a downgrade to a release that kept sessions there. A file
    /// already there with the same bytes is left; one with other bytes is a conflict (never overwritten); a
    /// `<workspace>/sessions` that is a symbolic link is refused. Files with hashed names (ids 0.3.5 cannot
    /// store) are not copied and are reported as conflicts too. Each file is read under its session's lock and
    /// written atomically (mode 0600).
    pub async fn restore_to_workspace(&self) -> Result<RestoreReport> {
        self.pull_all().await?;
        let target = self.inner.workspace.join("sessions");
        match fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(SessionError::Invalid {
                    path: target,
                    line: 0,
                    what: "refusing to restore into a sessions directory that is a symbolic link".into(),
                });
            }
            _ => {}
        }
        fs::create_dir_all(&target).map_err(|e| SessionError::io("create", target.clone(), e))?;
        let mut report = RestoreReport::default();
        let entries = match fs::read_dir(&self.inner.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
            Err(e) => return Err(SessionError::io("list", self.inner.dir.clone(), e)),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        for src in files {
            let stem = src
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(key) = keyname::key_from_stem(&stem) else {
                if keyname::is_hashed_stem(&stem) {
                    report.conflicts.push(src);
                }
                continue;
            };
            let dst = target.join(src.file_name().unwrap_or_default());
            let outcome = self
                .run(&key, move |_, _, _| {
                    let bytes = fs::read(&src).map_err(|e| SessionError::io("read", src.clone(), e))?;
                    match fs::read(&dst) {
                        Ok(existing) if existing == bytes => return Ok(Restored::Unchanged),
                        Ok(_) => return Ok(Restored::Conflict(dst)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(SessionError::io("read", dst, e)),
                    }
                    fsio::write_atomic(&dst, &bytes)?;
                    Ok(Restored::Copied)
                })
                .await?;
            match outcome {
                Restored::Copied => report.restored += 1,
                Restored::Unchanged => report.unchanged += 1,
                Restored::Conflict(p) => report.conflicts.push(p),
            }
        }
        Ok(report)
    }

    /// Prepares every session file of this workspace for reads from its end. A file written by the Python nanobot
    /// (its only metadata is the first line, and `last_consolidated` there counts from the start) has to be
    /// counted through once before its newest messages can be placed; this does that count now and leaves a
    /// message-count record at the file's end, so the first turn on it reads only its tail. Files that already
    /// end near such a record cost one small read from the end.
    ///
    /// Meant for the background of a long-running process (the runtime starts it with the dispatcher). Each file
    /// is handled under its session's lock, so a turn on that session waits at most for that one file, and a
    /// session a turn has already read is skipped. Returns how many files got a count record; a file that
    /// cannot be read is skipped with a warning.
    pub async fn index_sessions(&self) -> Result<usize> {
        let mut marked = 0;
        for info in self.list_sessions().await? {
            match self
                .run(&info.key, |inner, key, slot| inner.mark_count(key, slot))
                .await
            {
                Ok(true) => marked += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(file = %info.path.display(), error = %e, "could not index a session file")
                }
            }
        }
        Ok(marked)
    }

    /// Writes the crash-recovery checkpoint of session `key` (mode 0600), replacing any previous one. The
    /// payload is opaque to this crate, but an object whose arrays only grow between two writes (a run's
    /// messages) costs only the change: the file is a journal, the first write of a run holds the whole
    /// payload and each later one appends the fields that changed (for an array that grew, its new items).
    /// One `write(2)` and one `fdatasync` per call; a torn last record is ignored when reading.
    pub async fn write_checkpoint(&self, key: &str, payload: &Value) -> Result<()> {
        self.put_checkpoint(key, payload, true).await
    }

    /// [`SessionStore::write_checkpoint`] without the `fdatasync`: for the opening record of a turn (the user's
    /// question, before anything ran), which a killed process keeps (the kernel writes it out) and only a power
    /// loss within the turn could lose, with nothing done yet to repeat. Later records, which say what tools
    /// did, are synced.
    pub async fn write_checkpoint_unsynced(&self, key: &str, payload: &Value) -> Result<()> {
        self.put_checkpoint(key, payload, false).await
    }

    async fn put_checkpoint(&self, key: &str, payload: &Value, sync: bool) -> Result<()> {
        let payload = payload.clone();
        self.run(key, move |inner, key, slot| {
            inner.put_checkpoint(key, slot, payload, sync)
        })
        .await
    }

    /// The checkpoint of session `key`, if one was written and not cleared. Reads the journal written by
    /// [`SessionStore::write_checkpoint`] (ignoring a torn last record) and the single-object file of older
    /// versions.
    pub async fn read_checkpoint(&self, key: &str) -> Result<Option<Value>> {
        self.run(key, |inner, key, _| {
            let path = checkpoint_path(&inner.path_for(key));
            inner.pull_shared(&path)?;
            match fs::read(&path) {
                Ok(bytes) => replay_checkpoint(&bytes, &path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(SessionError::io("read", path, e)),
            }
        })
        .await
    }

    /// Empties the checkpoint of session `key` (no error if there is none): the file is truncated, not deleted,
    /// so a turn's checkpoint costs no directory change (the next turn's opening record reuses the file); an empty
    /// file holds no checkpoint.
    pub async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        self.run(key, |inner, key, slot| inner.clear_checkpoint(key, slot))
            .await
    }

    /// [`SessionStore::append_with_header`], then [`SessionStore::clear_checkpoint`], in one step under the
    /// session's lock (one trip to the blocking pool instead of two): how a turn is saved, its messages written
    /// and then its checkpoint emptied. The outer error is the append's (nothing was cleared); `Ok(Err(_))` means
    /// the messages are saved but the checkpoint could not be emptied.
    pub async fn append_and_clear_checkpoint<F>(
        &self,
        key: &str,
        messages: Vec<SessionMessage>,
        f: F,
    ) -> Result<Result<()>>
    where
        F: FnOnce(&mut SessionHeader) + Send + 'static,
    {
        self.append_and_clear_checkpoint_then(key, messages, f, || ())
            .await
            .map(|(cleared, ())| cleared)
    }

    /// [`SessionStore::append_and_clear_checkpoint`], then `then` on the same blocking thread, whatever the save's
    /// outcome: other blocking work that belongs with the save (a turn's usage records), without a trip of its
    /// own to the blocking pool. `then` does not run only when nothing runs at all (a key refused by
    /// [`crate::keyname`], a runtime shutting down). Its result comes back beside the checkpoint's when the save
    /// succeeded.
    pub async fn append_and_clear_checkpoint_then<F, T, R>(
        &self,
        key: &str,
        messages: Vec<SessionMessage>,
        f: F,
        then: T,
    ) -> Result<(Result<()>, R)>
    where
        F: FnOnce(&mut SessionHeader) + Send + 'static,
        T: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run(key, move |inner, key, slot| {
            // Published before the checkpoint is emptied: a replica killed in between leaves the checkpoint for the
            // next one to restore, never a turn in neither. (`run` pushes the file again after this step; unchanged,
            // that costs the shared store one `stat`.)
            let saved = inner
                .append_with_header(key, slot, messages, Some(f))
                .and_then(|()| inner.push_shared(&inner.path_for(key)));
            let cleared = saved.map(|()| inner.clear_checkpoint(key, slot));
            let done = then();
            Ok((cleared?, done))
        })
        .await
    }

    /// Runs `f` with the key's lock held, on the blocking pool.
    async fn run<R, F>(&self, key: &str, f: F) -> Result<R>
    where
        F: FnOnce(&Inner, &str, &mut Slot) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        keyname::check_key(key)?;
        let mut guard: OwnedMutexGuard<Slot> = self.inner.slot(key).lock_owned().await;
        let inner = self.inner.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || {
            let path = inner.path_for(&key);
            let slot: &mut Slot = &mut guard;
            // Shared between replicas: bring the file up to what the others wrote (the stamp below then sees it).
            if let Err(e) = inner.pull_session(&path) {
                *slot = Slot::default();
                return Err(e);
            }
            // Changed by someone else since we last touched it: what we hold of it is stale.
            if slot.seen != FileStamp::of(&path) {
                *slot = Slot::default();
            }
            let out = f(&inner, &key, slot).and_then(|r| inner.push_shared(&path).map(|()| r));
            match &out {
                Ok(_) => {
                    let now = FileStamp::of(&path);
                    if slot.version == 0 || now != slot.seen {
                        slot.version = inner.versions.fetch_add(1, Ordering::Relaxed) + 1;
                    }
                    slot.seen = now;
                }
                // A failure may have left the file and the slot apart: read it again next time.
                Err(_) => *slot = Slot::default(),
            }
            out
        })
        .await?
    }
}

impl Inner {
    /// Writes a checkpoint record of `key` (see [`SessionStore::write_checkpoint`]).
    fn put_checkpoint(&self, key: &str, slot: &mut Slot, payload: Value, sync: bool) -> Result<()> {
        let path = checkpoint_path(&self.path_for(key));
        let new = match payload {
            Value::Object(m) => m,
            other => {
                let mut m = Map::new();
                m.insert(CHECKPOINT_VALUE.into(), other);
                m
            }
        };
        if self.pull_shared(&path)? {
            // Another replica wrote it: the next record cannot be a change to what this one wrote.
            slot.checkpoint = None;
        }
        let mut opts = fs::OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        // The directory is made only when missing (not a `mkdir` per record).
        let file = match opts.open(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fsio::create_dir_private(&self.dir)?;
                opts.open(&path)
            }
            other => other,
        }
        .map_err(|e| SessionError::io("open", &path, e))?;
        // A change is written only onto the records it changes: a file emptied or removed meanwhile (another
        // process cleared it) gets the whole payload again.
        let len = file.metadata().map(|m| m.len()).ok();
        let existing = len.is_some_and(|l| l > 0);
        let (record, base) = match slot.checkpoint.as_ref().filter(|_| existing) {
            Some(prev) => (checkpoint_delta(prev, &new), false),
            None => (
                json!({CHECKPOINT_RECORD: "base", "value": Value::Object(new.clone())}),
                true,
            ),
        };
        let mut line = serde_json::to_vec(&record).map_err(|source| SessionError::Serialize {
            what: "checkpoint",
            source,
        })?;
        line.push(b'\n');
        // A whole payload starts the journal (a file whose length is unknown is emptied too); a turn's
        // opening record finds the file the previous turn emptied, and truncating it again would cost a
        // journal transaction for nothing.
        if base && len != Some(0) {
            file.set_len(0)
                .map_err(|e| SessionError::io("truncate", &path, e))?;
        }
        slot.checkpoint = None;
        (&file)
            .write_all(&line)
            .map_err(|e| SessionError::io("append to", &path, e))?;
        if sync {
            file.sync_data()
                .map_err(|e| SessionError::io("fsync", &path, e))?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = self.push_shared(&path) {
            slot.checkpoint = None;
            return Err(e);
        }
        slot.checkpoint = Some(new);
        Ok(())
    }

    /// Empties the checkpoint of `key` (see [`SessionStore::clear_checkpoint`]).
    fn clear_checkpoint(&self, key: &str, slot: &mut Slot) -> Result<()> {
        slot.checkpoint = None;
        let path = checkpoint_path(&self.path_for(key));
        self.pull_shared(&path)?;
        match fs::OpenOptions::new().write(true).open(&path) {
            Ok(file) => {
                if !file.metadata().is_ok_and(|m| m.len() == 0) {
                    file.set_len(0)
                        .map_err(|e| SessionError::io("truncate", &path, e))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(SessionError::io("clear", path, e)),
        }
        self.push_shared(&path)
    }

    /// The name of a file of this store's directory in the shared store: `sessions/<path below the directory>`.
    fn shared_name(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.dir).unwrap_or(path);
        let parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        format!("sessions/{}", parts.join("/"))
    }

    /// Brings `path` up to date from the shared store (nothing without one); whether it changed.
    fn pull_shared(&self, path: &Path) -> Result<bool> {
        let Some(shared) = &self.options.shared else {
            return Ok(false);
        };
        Ok(shared.pull(SharedFile::new(&self.shared_name(path), path))?)
    }

    /// Publishes what changed in `path` to the shared store (nothing without one).
    fn push_shared(&self, path: &Path) -> Result<()> {
        let Some(shared) = &self.options.shared else {
            return Ok(());
        };
        Ok(shared.push(SharedFile::new(&self.shared_name(path), path))?)
    }

    /// [`Inner::pull_shared`] for a session file; when it changed, its spilled messages written by other
    /// replicas are fetched too.
    fn pull_session(&self, path: &Path) -> Result<()> {
        let Some(shared) = &self.options.shared else {
            return Ok(());
        };
        if !self.pull_shared(path)? {
            return Ok(());
        }
        let spill = spill_dir(path);
        let prefix = format!("{}/", self.shared_name(&spill));
        for name in shared.list(&prefix)? {
            let Some(file) = name.strip_prefix(&prefix) else {
                continue;
            };
            let local = spill.join(file);
            if !local.exists() {
                shared.pull(SharedFile::new(&name, &local))?;
            }
        }
        Ok(())
    }

    /// [`tail::scan`], counting the bytes read.
    fn tail_scan(&self, path: &Path, key: &str, want: usize) -> Result<TailRead> {
        let mut read = 0;
        let out = tail::scan_counted(path, key, want, &mut read);
        self.bytes_read.fetch_add(read, Ordering::Relaxed);
        out
    }

    fn slot(&self, key: &str) -> Arc<Mutex<Slot>> {
        let mut slots = nanobot_util::lock(&self.slots);
        slots.entry(key.to_owned()).or_default().clone()
    }

    fn slots_snapshot(&self) -> Vec<Arc<Mutex<Slot>>> {
        let slots = nanobot_util::lock(&self.slots);
        slots.values().cloned().collect()
    }

    fn path_for(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.jsonl", keyname::file_stem(key)))
    }

    /// [`Inner::path_for`], checking that a hashed file really belongs to `key` (its first line names it).
    fn owned_path(&self, key: &str) -> Result<PathBuf> {
        let path = self.path_for(key);
        if keyname::is_hashed_stem(&keyname::file_stem(key))
            && let Some(first) = fsio::first_line(&path)?
            && let Some(other) = metadata_key(&first)
            && other != key
        {
            return Err(SessionError::KeyMismatch { path });
        }
        Ok(path)
    }

    /// [`SessionStore::scan_messages`] under the key's lock: from the cache when loaded, else streamed.
    fn scan<S, F>(&self, key: &str, slot: &mut Slot, mut state: S, mut f: F) -> Result<Option<S>>
    where
        F: FnMut(&mut S, usize, SessionMessage),
    {
        use std::io::BufRead as _;
        if let Some(session) = &slot.cached {
            for (i, m) in session.messages.iter().enumerate() {
                f(&mut state, i, m.clone());
            }
            return Ok(Some(state));
        }
        let path = self.owned_path(key)?;
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SessionError::io("read", &path, e)),
        };
        let mut reader = std::io::BufReader::new(file);
        let (mut line, mut index) = (Vec::new(), 0usize);
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| SessionError::io("read", &path, e))?;
            if n == 0 {
                break;
            }
            self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
            let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if format::is_metadata(&map) || format::is_other_record(&map) {
                continue;
            }
            f(&mut state, index, SessionMessage::from_map(map));
            index += 1;
        }
        Ok(Some(state))
    }

    /// Loads session `key` into the slot (once) and returns it.
    fn load<'s>(&self, key: &str, slot: &'s mut Slot) -> Result<&'s mut Session> {
        if slot.cached.is_none() {
            let path = self.owned_path(key)?;
            let mut read = 0;
            let parsed = read_session(&path, key, &mut read);
            self.bytes_read.fetch_add(read, Ordering::Relaxed);
            let (session, trailing, since) = match parsed? {
                Some(parsed) => (parsed.session, parsed.trailing_metadata, parsed.since_anchor),
                None => (Session::new(key), 0, 0),
            };
            slot.trailing_metadata = trailing;
            slot.since_anchor = since;
            slot.total = session.messages.len();
            slot.tail_ok = true;
            slot.head = None;
            slot.window = None;
            return Ok(slot.cached.insert(session));
        }
        slot.cached.as_mut().ok_or(SessionError::Invalid {
            path: self.path_for(key),
            line: 0,
            what: "session cache slot emptied while locked".into(),
        })
    }

    /// Makes sure the slot knows the session's metadata and message count, reading as little as possible:
    /// from the cache, else from the end of the file, else (a file without usable metadata records) whole.
    fn ensure_head(&self, key: &str, slot: &mut Slot) -> Result<()> {
        if slot.cached.is_some() || slot.head.is_some() {
            return Ok(());
        }
        let path = self.owned_path(key)?;
        match self.tail_scan(&path, key, 0)? {
            TailRead::Missing => self.set_head(slot, Session::new(key), 0, 0),
            TailRead::Found(scan) => self.set_head(slot, scan.header, scan.total, scan.since_anchor),
            TailRead::Unusable => {
                self.load(key, slot)?;
            }
        }
        Ok(())
    }

    /// [`SessionStore::index_sessions`] for one file: counts it from its end and, when the newest count record
    /// is far from the end (or missing), appends one (not fsynced: losing it only costs a later read its speed).
    fn mark_count(&self, key: &str, slot: &mut Slot) -> Result<bool> {
        if slot.cached.is_some() || slot.head.is_some() {
            return Ok(false);
        }
        let path = self.owned_path(key)?;
        match self.tail_scan(&path, key, 0)? {
            TailRead::Found(scan) => {
                let far = scan.since_anchor >= tail::ANCHOR_EVERY;
                self.set_head(slot, scan.header, scan.total, scan.since_anchor);
                if far {
                    self.append_metadata_record_synced(key, slot, false)?;
                }
                Ok(far)
            }
            // Missing, or unusable from the end (read whole by the first turn, as before): nothing to prepare.
            TailRead::Missing | TailRead::Unusable => Ok(false),
        }
    }

    fn set_head(&self, slot: &mut Slot, header: Session, total: usize, since_anchor: usize) {
        slot.head = Some(header);
        slot.total = total;
        slot.since_anchor = since_anchor;
        slot.tail_ok = true;
    }

    /// Makes sure the slot holds the unconsolidated messages: the cached session, else the window (kept from an
    /// earlier read and still true of the header, else read from the end of the file).
    fn unconsolidated(&self, key: &str, slot: &mut Slot) -> Result<()> {
        /// Messages read from the end when the head is not known yet (most sessions keep fewer unconsolidated).
        const FIRST_GUESS: usize = 64;
        if slot.cached.is_some() {
            return Ok(());
        }
        if let (Some(h), Some((start, messages))) = (&slot.head, &mut slot.window) {
            // The pointer moved forward within the window (a consolidation): drop what it passed.
            let lc = h.last_consolidated.min(slot.total);
            if lc >= *start && lc <= *start + messages.len() {
                messages.drain(..lc - *start);
                *start = lc;
            }
            if *start == lc && *start + messages.len() == slot.total {
                return Ok(());
            }
        }
        slot.window = None;
        let path = self.owned_path(key)?;
        let mut want = match &slot.head {
            Some(h) => slot.total - h.last_consolidated.min(slot.total),
            None => FIRST_GUESS,
        };
        // One read from the end; a second one when the first guess was short.
        for _ in 0..2 {
            let scan = match self.tail_scan(&path, key, want)? {
                TailRead::Missing => {
                    self.set_head(slot, Session::new(key), 0, 0);
                    slot.window = Some((0, Vec::new()));
                    return Ok(());
                }
                TailRead::Unusable => break,
                TailRead::Found(scan) => scan,
            };
            // The scan's own header decides (the file may have changed since the head was read).
            let start = scan.header.last_consolidated.min(scan.total);
            let first = scan.total - scan.messages.len();
            let TailScan {
                header,
                total,
                since_anchor,
                mut messages,
            } = *scan;
            self.set_head(slot, header, total, since_anchor);
            if first > start {
                want = total - start;
                continue;
            }
            messages.drain(..start - first);
            slot.window = Some((start, messages));
            self.leave_count_record(key, slot);
            return Ok(());
        }
        // Unreadable from the end (or changing underneath): read whole.
        self.load(key, slot)?;
        Ok(())
    }

    /// After a read from the end that went far (a file written by the Python nanobot): leaves a message-count
    /// record so the next read from the end stops here. Best effort: a read must not fail because the file
    /// cannot be written.
    fn leave_count_record(&self, key: &str, slot: &mut Slot) {
        if slot.since_anchor >= tail::ANCHOR_EVERY
            && let Err(e) = self.append_metadata_record_synced(key, slot, false)
        {
            tracing::warn!(error = %e, "could not append a message-count record to the session file");
        }
    }

    /// `f` on the history (see [`Session::history`]) and the metadata, read from the cache or from the end of the
    /// file.
    fn with_history<R>(
        &self,
        key: &str,
        slot: &mut Slot,
        max: usize,
        f: impl FnOnce(&[Cow<'_, SessionMessage>], &Map<String, Value>) -> R,
    ) -> Result<R> {
        if let Some(s) = &slot.cached {
            return Ok(f(&s.history_view(max), &s.metadata));
        }
        // The unconsolidated part kept for the consolidator (a long-running process) holds all the history may
        // use: nothing to read.
        if let (Some(h), Some((start, messages))) = (&slot.head, &slot.window)
            && *start == h.last_consolidated.min(slot.total)
            && *start + messages.len() == slot.total
        {
            let history = session::history_from(messages, max, true).unwrap_or_default();
            return Ok(f(&history, &h.metadata));
        }
        let path = self.owned_path(key)?;
        let want = max.saturating_mul(2).saturating_add(32);
        let scan = match self.tail_scan(&path, key, want)? {
            TailRead::Missing => {
                self.set_head(slot, Session::new(key), 0, 0);
                return Ok(f(&[], &Map::new()));
            }
            TailRead::Unusable => {
                let s = self.load(key, slot)?;
                return Ok(f(&s.history_view(max), &s.metadata));
            }
            TailRead::Found(scan) => scan,
        };
        let first_index = scan.total - scan.messages.len();
        let consolidated = scan.header.last_consolidated.min(scan.total);
        let complete = first_index <= consolidated;
        let from = consolidated.saturating_sub(first_index).min(scan.messages.len());
        let found = session::history_from(&scan.messages[from..], max, complete);
        self.set_head(slot, scan.header, scan.total, scan.since_anchor);
        self.leave_count_record(key, slot);
        match found {
            Some(h) => {
                let metadata = slot.header().map(|s| &s.metadata);
                Ok(f(&h, metadata.unwrap_or(&Map::new())))
            }
            // The rules need older messages than were read (e.g. a very long run without a user turn).
            None => {
                let s = self.load(key, slot)?;
                Ok(f(&s.history_view(max), &s.metadata))
            }
        }
    }

    fn append(&self, key: &str, slot: &mut Slot, messages: Vec<SessionMessage>) -> Result<()> {
        self.append_with_header(key, slot, messages, None::<fn(&mut SessionHeader)>)
    }

    /// Appends `messages` and, when `change` changes the metadata, the new metadata record, in one write.
    fn append_with_header<F: FnOnce(&mut SessionHeader)>(
        &self,
        key: &str,
        slot: &mut Slot,
        mut messages: Vec<SessionMessage>,
        change: Option<F>,
    ) -> Result<()> {
        if messages.is_empty() && change.is_none() {
            return Ok(());
        }
        for m in &mut messages {
            m.ensure_timestamp();
        }
        self.ensure_head(key, slot)?;
        let path = self.path_for(key);
        for m in &mut messages {
            self.spill_if_large(&path, m)?;
        }
        if !slot.tail_ok {
            fsio::repair_tail(&path)?;
            slot.tail_ok = true;
        }
        let mut changed = false;
        if let Some(f) = change
            && let Some(session) = slot.header()
        {
            let before = session.header();
            let mut header = before.clone();
            f(&mut header);
            if header != before {
                session.set_header(header);
                changed = true;
            }
        }
        if messages.is_empty() && !changed {
            return Ok(());
        }
        let now = time::now();
        let total = slot.total + messages.len();
        // A changed header goes into the same write as the messages: after a crash, both or neither.
        let anchor = changed || slot.since_anchor.saturating_add(messages.len()) >= tail::ANCHOR_EVERY;
        match fsio::open_append(&path)? {
            Some(mut file) => {
                let mut bytes = format::message_lines(&messages)?;
                if anchor && let Some(h) = slot.header() {
                    h.updated_at = now;
                    bytes.push_str(&format::metadata_line(h, Some(total))?);
                }
                file.write_all(bytes.as_bytes())
                    .map_err(|e| SessionError::io("append to", &path, e))?;
                if self.options.fsync == FsyncPolicy::Always {
                    self.syncs.fetch_add(1, Ordering::Relaxed);
                    file.sync_data()
                        .map_err(|e| SessionError::io("fsync", &path, e))?;
                }
                if anchor {
                    slot.trailing_metadata += 1;
                    slot.since_anchor = 0;
                } else {
                    slot.since_anchor += messages.len();
                }
                slot.total = total;
            }
            None => {
                // New session (or its file vanished): metadata + everything known, atomically.
                let mut session = match (&slot.cached, &slot.head) {
                    (Some(s), _) | (None, Some(s)) => s.clone(),
                    (None, None) => Session::new(key),
                };
                session.messages.extend(messages.iter().cloned());
                session.updated_at = now;
                fsio::write_atomic(&path, format::whole_file(&session)?.as_bytes())?;
                slot.trailing_metadata = 0;
                slot.total = session.messages.len();
                slot.since_anchor = session.messages.len();
            }
        }
        if let Some(h) = slot.header() {
            h.updated_at = now;
        }
        if let Some(s) = slot.cached.as_mut() {
            s.messages.extend(messages);
        } else if let Some((_, window)) = slot.window.as_mut() {
            window.extend(messages);
        }
        Ok(())
    }

    /// Moves the text of a message longer than [`StoreOptions::max_message_bytes`] to a side file, keeping a
    /// preview and a note in the message (see there).
    fn spill_if_large(&self, session_path: &Path, m: &mut SessionMessage) -> Result<()> {
        let limit = self.options.max_message_bytes;
        let Some(Value::String(text)) = m.content() else {
            return Ok(());
        };
        if text.len() <= limit {
            return Ok(());
        }
        let dir = spill_dir(session_path);
        fsio::create_dir_private(&dir)?;
        let file = dir.join(format!("{}.txt", uuid::Uuid::new_v4().simple()));
        let mut f = fsio::private_new()
            .open(&file)
            .map_err(|e| SessionError::io("create", &file, e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| SessionError::io("write", &file, e))?;
        f.sync_data().map_err(|e| SessionError::io("fsync", &file, e))?;
        self.push_shared(&file)?;
        let mut cut = SPILL_PREVIEW_BYTES.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let note = format!(
            "{}\n\n[message shortened in the session file: its full text ({} bytes) is in {}]",
            &text[..cut],
            text.len(),
            file.display()
        );
        tracing::info!(bytes = text.len(), file = %file.display(), "large message spilled to a side file");
        *m = std::mem::replace(m, SessionMessage::new("user", "")).with("content", note);
        Ok(())
    }

    /// Appends the current metadata (with the message count) as a new record.
    fn append_metadata_record(&self, key: &str, slot: &mut Slot) -> Result<()> {
        self.append_metadata_record_synced(key, slot, true)
    }

    /// [`Inner::append_metadata_record`]; `sync: false` skips the `fdatasync` (for the count marker a read
    /// leaves: losing it in a crash only costs the next read its speed, and a cut line is repaired).
    fn append_metadata_record_synced(&self, key: &str, slot: &mut Slot, sync: bool) -> Result<()> {
        let path = self.path_for(key);
        let total = slot.total;
        let Some(h) = slot.header() else { return Ok(()) };
        let line = format::metadata_line(h, Some(total))?;
        let bare = format::metadata_line(h, None)?;
        match fsio::open_append(&path)? {
            Some(mut file) => {
                file.write_all(line.as_bytes())
                    .map_err(|e| SessionError::io("append to", &path, e))?;
                if sync && self.options.fsync == FsyncPolicy::Always {
                    self.syncs.fetch_add(1, Ordering::Relaxed);
                    file.sync_data()
                        .map_err(|e| SessionError::io("fsync", &path, e))?;
                }
            }
            None => {
                let whole = match &slot.cached {
                    Some(s) => format::whole_file(s)?,
                    None => bare,
                };
                fsio::write_atomic(&path, whole.as_bytes())?;
                slot.total = slot.cached.as_ref().map_or(0, |s| s.messages.len());
                slot.trailing_metadata = 0;
                slot.since_anchor = slot.total;
                return Ok(());
            }
        }
        slot.trailing_metadata += 1;
        slot.since_anchor = 0;
        Ok(())
    }

    fn update_header<F: FnOnce(&mut SessionHeader)>(&self, key: &str, slot: &mut Slot, f: F) -> Result<bool> {
        self.ensure_head(key, slot)?;
        if !slot.tail_ok {
            fsio::repair_tail(&self.path_for(key))?;
            slot.tail_ok = true;
        }
        // Rewrite (one clean first line) once appended records are both numerous and a sizeable part of the
        // file, so the amortised cost per change stays constant however long the session is.
        let threshold = self.options.compact_after.max(slot.total / 8);
        let compact = slot.trailing_metadata + 1 > threshold;
        if compact {
            self.load(key, slot)?;
        }
        let Some(session) = slot.header() else {
            return Ok(false);
        };
        let before = session.header();
        let mut header = before.clone();
        f(&mut header);
        if header == before {
            return Ok(false);
        }
        session.set_header(header);
        session.updated_at = time::now();
        if compact && let Some(s) = &slot.cached {
            fsio::write_atomic(&self.path_for(key), format::whole_file(s)?.as_bytes())?;
            slot.trailing_metadata = 0;
            slot.since_anchor = slot.total;
            return Ok(true);
        }
        self.append_metadata_record(key, slot)?;
        Ok(true)
    }

    fn list(&self) -> Result<Vec<SessionInfo>> {
        let mut out: Vec<SessionInfo> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let dirs = [(self.dir.clone(), false)];
        for (dir, legacy) in dirs {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SessionError::io("list", dir, e)),
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "jsonl"))
                .collect();
            files.sort();
            for path in files {
                match session_info(&path, legacy) {
                    Ok(Some(info)) => {
                        if seen.insert(info.key.clone()) {
                            out.push(info);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "skipping unreadable session file")
                    }
                }
            }
        }
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.key.cmp(&b.key)));
        Ok(out)
    }
}

/// Reads and parses a session file, repairing a cut last line first. `None` if the file is missing.
fn read_session(path: &Path, key: &str, read: &mut u64) -> Result<Option<format::Parsed>> {
    if fsio::repair_tail_counted(path, read)? == Tail::Missing {
        return Ok(None);
    }
    let bytes = match fs::read(path) {
        Ok(b) => {
            *read += b.len() as u64;
            b
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io("read", path, e)),
    };
    let parsed = format::parse(&bytes, path, key)?;
    if !parsed.has_metadata && !parsed.session.messages.is_empty() {
        tracing::warn!(file = %path.display(), "session file has no metadata line; using defaults");
    }
    Ok(Some(parsed))
}

/// Reads the first and last line only.
fn session_info(path: &Path, legacy: bool) -> Result<Option<SessionInfo>> {
    let Some(first) = fsio::first_line(path)? else {
        return Ok(None);
    };
    let line_no = 1;
    let head: Map<String, Value> = serde_json::from_slice(&first).map_err(|source| SessionError::Json {
        path: path.to_owned(),
        line: line_no,
        source,
    })?;
    let file_key = if legacy {
        None
    } else {
        path.file_stem()
            .and_then(|s| keyname::key_from_stem(&s.to_string_lossy()))
    };
    let key = match head.get("key").and_then(Value::as_str) {
        Some(k) => k.to_owned(),
        None => match file_key {
            Some(k) => k,
            None => return Ok(None),
        },
    };
    let mut session = Session::new(key.clone());
    let mut updated = if format::is_metadata(&head) {
        format::apply_metadata(&mut session, head, path, line_no)?
    } else {
        None
    };
    let mut f = fs::File::open(path).map_err(|e| SessionError::io("open", path, e))?;
    let len = f.metadata().map_err(|e| SessionError::io("stat", path, e))?.len();
    let (_, last) = fsio::last_line(&mut f, len, path)?;
    if let Ok(map) = serde_json::from_slice::<Map<String, Value>>(&last) {
        let stamp = if format::is_metadata(&map) {
            map.get("updated_at")
        } else {
            map.get("timestamp")
        };
        if let Some(t) = stamp.and_then(Value::as_str).and_then(time::parse) {
            updated = Some(updated.map_or(t, |u| u.max(t)));
        }
    }
    Ok(Some(SessionInfo {
        key,
        created_at: session.created_at,
        updated_at: updated.unwrap_or(session.created_at),
        path: path.to_owned(),
        legacy,
    }))
}

fn metadata_key(first_line: &[u8]) -> Option<String> {
    let map: Map<String, Value> = serde_json::from_slice(first_line).ok()?;
    map.get("key").and_then(Value::as_str).map(str::to_owned)
}

/// The key marking a checkpoint journal record (`"base"` or `"change"`).
const CHECKPOINT_RECORD: &str = "_checkpoint";
/// Where a payload that is not an object is kept inside the journal's object.
const CHECKPOINT_VALUE: &str = "_value";

/// The record that turns `prev` into `new`: changed fields (`set`), grown arrays (`extend`, new items only)
/// and removed fields (`unset`).
fn checkpoint_delta(prev: &Map<String, Value>, new: &Map<String, Value>) -> Value {
    let mut set = Map::new();
    let mut extend = Map::new();
    for (k, v) in new {
        match (prev.get(k), v) {
            (Some(old), _) if old == v => {}
            (Some(Value::Array(old)), Value::Array(items))
                if items.len() > old.len() && items[..old.len()] == old[..] =>
            {
                extend.insert(k.clone(), Value::Array(items[old.len()..].to_vec()));
            }
            _ => {
                set.insert(k.clone(), v.clone());
            }
        }
    }
    let unset: Vec<&String> = prev.keys().filter(|k| !new.contains_key(*k)).collect();
    json!({CHECKPOINT_RECORD: "change", "set": set, "extend": extend, "unset": unset})
}

/// The checkpoint a journal (or an older single-object file) holds.
fn replay_checkpoint(bytes: &[u8], path: &Path) -> Result<Option<Value>> {
    let mut state: Option<Map<String, Value>> = None;
    let mut lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let first: Value = serde_json::from_slice(first).map_err(|source| SessionError::Checkpoint {
        path: path.to_owned(),
        source,
    })?;
    match first {
        Value::Object(mut m) if m.get(CHECKPOINT_RECORD).and_then(Value::as_str) == Some("base") => {
            if let Some(Value::Object(v)) = m.remove("value") {
                state = Some(v);
            }
        }
        // A checkpoint written whole by an older version.
        other => return Ok(Some(other)),
    }
    for line in lines {
        // A torn record (crash mid-write) ends the journal: the state before it stands.
        let Ok(Value::Object(rec)) = serde_json::from_slice::<Value>(line) else {
            break;
        };
        let Some(st) = state.as_mut() else { break };
        if let Some(Value::Object(set)) = rec.get("set") {
            for (k, v) in set {
                st.insert(k.clone(), v.clone());
            }
        }
        if let Some(Value::Object(ext)) = rec.get("extend") {
            for (k, v) in ext {
                if let (Some(Value::Array(items)), Value::Array(more)) = (st.get_mut(k), v) {
                    items.extend(more.iter().cloned());
                }
            }
        }
        if let Some(Value::Array(unset)) = rec.get("unset") {
            for k in unset.iter().filter_map(Value::as_str) {
                st.remove(k);
            }
        }
    }
    Ok(state.map(|mut m| match m.remove(CHECKPOINT_VALUE) {
        Some(v) if m.is_empty() => v,
        Some(v) => {
            m.insert(CHECKPOINT_VALUE.into(), v);
            Value::Object(m)
        }
        None => Value::Object(m),
    }))
}

/// Where the spilled messages of a session file go: `<session file>.spill/`.
fn spill_dir(session_file: &Path) -> PathBuf {
    let mut dir = session_file.as_os_str().to_owned();
    dir.push(".spill");
    PathBuf::from(dir)
}

fn checkpoint_path(session_file: &Path) -> PathBuf {
    let mut name = session_file.as_os_str().to_owned();
    name.push(".checkpoint.json");
    PathBuf::from(name)
}

/// The old layout's file stem: `channel:chat_id` → `channel_chat_id`, with characters that are unsafe in file
/// names replaced by `_` (Python's `safe_filename(key.replace(":", "_"))`).
pub(crate) fn legacy_safe_key(key: &str) -> String {
    key.chars()
        .map(|c| {
            if matches!(c, ':' | '<' | '>' | '"' | '/' | '\\' | '|' | '?' | '*') {
                '_'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_shareable_across_tasks() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<SessionStore>();
    }

    #[test]
    fn legacy_names_match_python() {
        assert_eq!(legacy_safe_key("telegram:12345"), "telegram_12345");
        assert_eq!(legacy_safe_key("api:a/b?c"), "api_a_b_c");
    }
}
