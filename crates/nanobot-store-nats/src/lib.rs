//! The nanobot home's shared files on NATS JetStream: [`NatsFiles`] implements [`nanobot_util::SharedFiles`], so
//! gateway replicas on several machines, each with its own local home, serve the same sessions
//! (`nanobot_sessions::StoreOptions::shared`) and cron store (`nanobot_cron::JobStore::with_shared`).
//! [`export`] and [`import`] move the stored files to and from a home's directory layout.
//!
//! # Layout
//! One stream, `<STREAM>_FILES` (file storage, direct reads allowed), on the subjects `<prefix>.files.>`. Each file
//! has one subject: its name (`sessions/<stem>.jsonl`) with every `/`-separated part encoded as unpadded
//! base64url (`<prefix>.files.c2Vzc2lvbnM.<…>`). A subject's messages, oldest first, rebuild the file:
//!
//! | `Nanobot-Op` | payload | meaning |
//! |---|---|---|
//! | `put` | the whole file (or its last chunk) | the file is this |
//! | `append` | the appended bytes (or their last chunk) | the file grows by this |
//! | `delete` | empty | the file is gone |
//! | `part` | a chunk | the start of a `put` or `append` too large for one message (over the server's maximum payload, 1 MiB by default); the final message names the first part's sequence in `Nanobot-First` |
//!
//! After a `put` or `delete`, the subject's older messages are purged, so a subject holds one whole file and the
//! appends after it. A file appended to [`COMPACT_AFTER`] times is published whole at its next change, so a
//! replica catching up never reads more than that many messages.
//!
//! # Sealing
//! With a deployment key ([`NatsBusSettings::key`], the bus's), every message is sealed
//! ([`nanobot_bus_nats::DeploymentKey::seal_bound`]: encrypted and authenticated) and marked `Nanobot-Sealed`,
//! bound to its subject, its `Nanobot-Op`, its `Nanobot-First` and the sequence of the message it follows. A
//! reader skips (and logs) a message that does not open with the key, whose headers are not the sealed ones, or
//! that does not follow the message read before it (a replay); a reader without the key skips sealed messages.
//! Skipped messages still count as read, so the next publish expects the subject's true last sequence.
//!
//! # Concurrency
//! Every publish carries `Nats-Expected-Last-Subject-Sequence`: the last sequence of the file's subject this
//! replica read. A replica whose copy is stale is refused by the server; it then brings its copy up to date (its
//! change is dropped) and the caller gets [`nanobot_util::SharedFilesError::Conflict`]. The callers serialise
//! the work on one file across replicas already (a session's turns through the bus partition or the session
//! lease), so a conflict is the failure case, not the normal one.
//!
//! # Local copies
//! This process remembers, per file, the sequence its copy reflects and the copy's identity, length, change
//! time and last bytes. A copy changed without [`NatsFiles::push`] (or a process that restarted) is rebuilt
//! from the stream at the next pull; a rebuilt file with the same bytes is left untouched. A file the stream has
//! never held is left alone and published whole at its first change. A copy this process had not seen yet that
//! is replaced and is not an older version of the stored one (not a prefix of it: a home used before its files
//! were imported) is kept as `<file>.replaced` first (once).
//!
//! The [`nanobot_util::SharedFiles`] calls block: they are made from tokio's blocking pool (where the storage
//! crates do their file work) or from a worker of a multi-threaded runtime (whose other tasks then move to
//! other workers, `block_in_place`), and wait, bounded by [`NatsFiles::op_timeout`], for the requests sent on
//! the runtime the store was opened on. Do not call them on a single-threaded runtime's own thread.

mod layout;

pub use layout::{ExportReport, HomeLayout, ImportReport, export, import};

use std::collections::HashMap;
use std::fs;
use std::io::{Read as _, Seek as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use base64::Engine as _;
use futures::TryStreamExt as _;
use nanobot_bus_nats::{DeploymentKey, NatsBusSettings};
use nanobot_util::{SharedFile, SharedFiles, SharedFilesError};

/// A file appended to this many times is published whole at its next change (and its older messages purged).
pub const COMPACT_AFTER: u32 = 256;
/// How many of a file's last bytes are remembered to recognise an append.
const TAIL_BYTES: u64 = 64;
/// Room left for headers under the server's maximum payload.
const HEADER_ROOM: usize = 4096;
/// Header naming the operation of a message.
const OP: &str = "Nanobot-Op";
/// Header naming the first part of a chunked operation.
const FIRST: &str = "Nanobot-First";
/// Header marking a message sealed with the deployment key (so that a replica without it refuses it).
const SEALED: &str = "Nanobot-Sealed";

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsFilesError {
    /// Connecting failed, or the settings are unusable.
    #[error(transparent)]
    Bus(#[from] nanobot_bus_nats::NatsBusError),
    /// The stream could not be created or read.
    #[error("NATS JetStream stream {stream}: {reason}")]
    Stream {
        /// The stream.
        stream: String,
        /// What the server said.
        reason: String,
    },
    /// Not called within a tokio runtime.
    #[error("the shared file store must be opened within a tokio runtime")]
    NoRuntime,
}

/// The shared files on JetStream. See the [crate docs](crate). `Clone` shares the state.
#[derive(Clone)]
pub struct NatsFiles {
    core: Arc<Core>,
}

struct Core {
    stream: stream::Stream,
    js: jetstream::Context,
    stream_name: String,
    /// `<prefix>.files`.
    root: String,
    /// Largest payload of one message.
    chunk: usize,
    op_timeout: Duration,
    runtime: tokio::runtime::Handle,
    files: Mutex<HashMap<String, Arc<Mutex<FileState>>>>,
    /// The deployment key: every message sealed, and only sealed messages read (see the crate docs).
    key: Option<DeploymentKey>,
}

impl std::fmt::Debug for NatsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsFiles")
            .field("stream", &self.core.stream_name)
            .field("root", &self.core.root)
            .finish_non_exhaustive()
    }
}

/// What this process knows of one file.
#[derive(Default)]
struct FileState {
    /// The last sequence of the file's subject read (what the next publish expects).
    seen: u64,
    /// What the local copy is, as of `seen`.
    known: Known,
    /// Appends since the last whole version.
    appends: u32,
    /// Parts read whose final message has not been read yet.
    pending: Vec<(u64, Vec<u8>)>,
    /// Pulled or pushed by this process already.
    touched: bool,
}

#[derive(Default, Clone, Debug, PartialEq, Eq)]
enum Known {
    /// Not known: the next pull rebuilds it from the stream.
    #[default]
    Unknown,
    /// The file does not exist.
    Absent,
    /// The file as last read or written.
    Present(Stamp),
}

/// What tells one version of a local file from another without reading it whole.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    tail: Vec<u8>,
}

impl Stamp {
    fn of(file: SharedFile<'_>) -> Result<Option<Self>, SharedFilesError> {
        use std::os::unix::fs::MetadataExt as _;
        let io = |op, e| io_err(file, op, e);
        let mut f = match fs::File::open(file.local) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", e)),
        };
        let m = f.metadata().map_err(|e| io("stat", e))?;
        let len = m.len();
        let from = len.saturating_sub(TAIL_BYTES);
        let tail = read_range(&mut f, from, len).map_err(|e| io("read", e))?;
        Ok(Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            len,
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            tail,
        }))
    }
}

fn read_range(f: &mut fs::File, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
    f.seek(std::io::SeekFrom::Start(from))?;
    let mut buf = Vec::with_capacity(usize::try_from(to.saturating_sub(from)).unwrap_or(0));
    f.take(to.saturating_sub(from)).read_to_end(&mut buf)?;
    Ok(buf)
}

fn io_err(file: SharedFile<'_>, op: &'static str, source: std::io::Error) -> SharedFilesError {
    SharedFilesError::Io {
        name: file.name.to_owned(),
        op,
        path: file.local.to_owned(),
        source,
    }
}

/// A file's messages after a sequence, as read.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    /// The messages taken, oldest first.
    records: Vec<Record>,
    /// The last sequence of the subject read, taken or refused (what the next publish must expect).
    last: u64,
}

/// One message of a file's subject, as read.
#[derive(Debug)]
pub(crate) struct Record {
    seq: u64,
    op: String,
    first: Option<u64>,
    payload: Vec<u8>,
}

/// The file a run of records makes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) enum Folded {
    /// Nothing changes.
    #[default]
    Same,
    /// Bytes to append to the file as it is.
    Appended(Vec<u8>),
    /// The whole file.
    Whole(Vec<u8>),
    /// The file is gone.
    Deleted,
}

/// Applies `records` (read after `st.seen`) to `start`, updating `st`.
fn fold(
    name: &str,
    st: &mut FileState,
    start: Folded,
    records: Vec<Record>,
) -> Result<Folded, SharedFilesError> {
    let mut out = start;
    for r in records {
        st.seen = r.seq;
        let final_data = |st: &mut FileState, r: Record| {
            let first = r.first.unwrap_or(r.seq);
            let mut data = Vec::new();
            for (seq, part) in st.pending.drain(..) {
                if seq >= first {
                    data.extend_from_slice(&part);
                }
            }
            data.extend_from_slice(&r.payload);
            data
        };
        match r.op.as_str() {
            "part" => st.pending.push((r.seq, r.payload)),
            "put" => {
                out = Folded::Whole(final_data(st, r));
                st.appends = 0;
            }
            "append" => {
                let data = final_data(st, r);
                st.appends = st.appends.saturating_add(1);
                out = match out {
                    Folded::Same => Folded::Appended(data),
                    Folded::Appended(mut a) => {
                        a.extend_from_slice(&data);
                        Folded::Appended(a)
                    }
                    Folded::Whole(mut w) => {
                        w.extend_from_slice(&data);
                        Folded::Whole(w)
                    }
                    Folded::Deleted => Folded::Whole(data),
                };
            }
            "delete" => {
                st.pending.clear();
                st.appends = 0;
                out = Folded::Deleted;
            }
            other => {
                return Err(SharedFilesError::Invalid {
                    name: name.to_owned(),
                    reason: format!(
                        "message {} has the unknown operation {other:?} (written by a newer version?)",
                        r.seq
                    ),
                });
            }
        }
    }
    Ok(out)
}

/// What a push publishes.
enum Change {
    Append(Vec<u8>),
    Put(Vec<u8>),
    Delete,
}

/// Why a publish failed.
enum PublishFailure {
    /// The subject's last sequence was not the one expected.
    Conflict,
    Other(String),
}

impl NatsFiles {
    /// Connects to the server of `settings` and creates the stream `<stream>_FILES` when missing. Must be called
    /// within a tokio runtime (multi-threaded, for the blocking calls).
    pub async fn open(settings: &NatsBusSettings) -> Result<Self, NatsFilesError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NatsFilesError::NoRuntime)?;
        let js =
            nanobot_bus_nats::jetstream_context(settings, &format!("{}-files", settings.client_name), true)
                .await?;
        let stream_name = format!("{}_FILES", settings.stream);
        let root = format!("{}.files", settings.subject_prefix);
        let config = stream::Config {
            name: stream_name.clone(),
            subjects: vec![format!("{root}.>")],
            storage: stream::StorageType::File,
            allow_direct: true,
            num_replicas: settings.replicas.max(1),
            ..Default::default()
        };
        let failed = |reason: String| NatsFilesError::Stream {
            stream: stream_name.clone(),
            reason,
        };
        let stream = js
            .get_or_create_stream(config)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let key = settings.deployment_key()?;
        let max_payload = js.client().server_info().max_payload;
        let chunk = max_payload.saturating_sub(HEADER_ROOM).max(1024);
        Ok(Self {
            core: Arc::new(Core {
                stream,
                js,
                stream_name,
                root,
                chunk,
                op_timeout: settings.request_timeout.saturating_mul(6),
                runtime,
                files: Mutex::new(HashMap::new()),
                key,
            }),
        })
    }

    /// The bound on one pull, push or list, all its requests together (six request timeouts).
    pub fn op_timeout(&self) -> Duration {
        self.core.op_timeout
    }

    /// The stream's name.
    pub fn stream_name(&self) -> &str {
        &self.core.stream_name
    }

    /// The largest payload of one message (the server's maximum less room for headers).
    pub fn chunk_size(&self) -> usize {
        self.core.chunk
    }

    /// Uses chunks of at most `bytes` (at least 1): for tests of chunked files on a small scale.
    #[must_use]
    pub fn with_chunk_size(self, bytes: usize) -> Self {
        let core = &self.core;
        Self {
            core: Arc::new(Core {
                stream: core.stream.clone(),
                js: core.js.clone(),
                stream_name: core.stream_name.clone(),
                root: core.root.clone(),
                chunk: bytes.clamp(1, core.chunk),
                op_timeout: core.op_timeout,
                runtime: core.runtime.clone(),
                files: Mutex::new(HashMap::new()),
                key: core.key.clone(),
            }),
        }
    }

    /// The subject of the file called `name`.
    pub fn subject_of(&self, name: &str) -> Result<String, SharedFilesError> {
        let mut subject = self.core.root.clone();
        for part in name_parts(name)? {
            subject.push('.');
            subject.push_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(part));
        }
        Ok(subject)
    }

    /// The name of the file whose subject is `subject` (`None`: not one of this store's).
    fn name_of(&self, subject: &str) -> Option<String> {
        let rest = subject.strip_prefix(&self.core.root)?.strip_prefix('.')?;
        let parts: Option<Vec<String>> = rest
            .split('.')
            .map(|t| {
                let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(t).ok()?;
                String::from_utf8(bytes).ok()
            })
            .collect();
        Some(parts?.join("/"))
    }

    fn state(&self, name: &str) -> Arc<Mutex<FileState>> {
        let mut files = nanobot_util::lock(&self.core.files);
        files.entry(name.to_owned()).or_default().clone()
    }

    /// Runs `fut` on the store's runtime and waits for it, bounded by the operation timeout.
    fn block<T: Send + 'static>(
        &self,
        name: &str,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, String>> + Send + 'static,
    ) -> Result<T, SharedFilesError> {
        let bound = self.core.op_timeout;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.core.runtime.spawn(async move {
            let out = match tokio::time::timeout(bound, fut).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {bound:?}")),
            };
            let _ = tx.send(out);
        });
        let unavailable = |reason: String| SharedFilesError::Unavailable {
            name: name.to_owned(),
            what: what.to_owned(),
            reason,
        };
        let wait = || rx.recv_timeout(bound + Duration::from_secs(1));
        // Called on a worker of a multi-threaded runtime (a synchronous store used from async code), the
        // worker's other tasks move elsewhere while this one waits, so the request can still run.
        let on_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let answer = if on_worker {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        };
        match answer {
            Ok(r) => r.map_err(unavailable),
            Err(_) => Err(unavailable(format!("no answer within {bound:?}"))),
        }
    }

    /// The records of `subject` after sequence `after`, oldest first. With a deployment key, a message that does
    /// not open with it, or is not where it was sealed to be, is refused (logged, skipped).
    fn fetch(&self, name: &str, subject: String, after: u64) -> Result<Fetched, SharedFilesError> {
        let stream = self.core.stream.clone();
        let key = self.core.key.clone();
        let file = name.to_owned();
        self.block(name, "read", async move {
            let mut out = Fetched {
                records: Vec::new(),
                last: after,
            };
            // The sequence of the message before the next one (`None`: not read, the first one read may follow
            // messages purged since).
            let mut previous = None;
            loop {
                let next = out.last + 1;
                match stream
                    .direct_get_next_for_subject(subject.as_str(), Some(next))
                    .await
                {
                    Ok(m) => {
                        let header = |k: &str| m.headers.get(k).map(|v| v.as_str().to_owned());
                        let mut record = Record {
                            seq: m.sequence,
                            op: header(OP).unwrap_or_default(),
                            first: header(FIRST).and_then(|v| v.parse().ok()),
                            payload: m.payload.to_vec(),
                        };
                        out.last = m.sequence;
                        let taken = match &key {
                            None if m.headers.get(SEALED).is_some() => {
                                tracing::warn!(
                                    file,
                                    sequence = m.sequence,
                                    "shared file: a message sealed with a deployment key this replica does not \
                                     have was refused (set gateway.bus.nats.key as on the other replicas); skipped"
                                );
                                false
                            }
                            None => true,
                            Some(key) => match unseal(key, &subject, &mut record, previous, after) {
                                Ok(()) => true,
                                Err(why) => {
                                    tracing::warn!(
                                        file,
                                        sequence = m.sequence,
                                        "shared file: a message was refused ({why}); skipped"
                                    );
                                    false
                                }
                            },
                        };
                        previous = Some(m.sequence);
                        if taken {
                            out.records.push(record);
                        }
                    }
                    Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => return Ok(out),
                    Err(e) => return Err(format!("reading {subject} from sequence {next}: {e}")),
                }
            }
        })
    }

    /// What the store holds of `name` now (without touching any local file): `None` when it never held it.
    pub(crate) fn stored(&self, name: &str) -> Result<(Option<Folded>, u64), SharedFilesError> {
        let subject = self.subject_of(name)?;
        let Fetched { records, last } = self.fetch(name, subject, 0)?;
        let never = !records.iter().any(|r| r.op != "part");
        let mut st = FileState::default();
        let out = fold(name, &mut st, Folded::Whole(Vec::new()), records)?;
        Ok((if never { None } else { Some(out) }, last))
    }

    /// [`SharedFiles::pull`] with the file's state locked.
    /// `first_touch`: this process has not read or written the file yet, so a local copy that differs may hold
    /// what the store never had (a home used before `import`); it is kept beside the file before being replaced.
    fn pull_locked(
        &self,
        file: SharedFile<'_>,
        st: &mut FileState,
        first_touch: bool,
    ) -> Result<bool, SharedFilesError> {
        let subject = self.subject_of(file.name)?;
        let now = Stamp::of(file)?;
        let matches = match (&st.known, &now) {
            (Known::Absent, None) => true,
            (Known::Present(k), Some(n)) => k == n,
            _ => false,
        };
        let rebuild = !matches;
        if rebuild {
            *st = FileState::default();
        }
        let Fetched { records, last } = self.fetch(file.name, subject, st.seen)?;
        if rebuild && !records.iter().any(|r| r.op != "part") {
            // The store has never held this file (at most the parts of a first version whose writer stopped): the
            // local copy (if any) stays as it is, published whole at its first change.
            fold(file.name, st, Folded::Same, records)?;
            st.seen = last;
            return Ok(false);
        }
        let start = if rebuild {
            Folded::Whole(Vec::new())
        } else {
            Folded::Same
        };
        let folded = fold(file.name, st, start, records)?;
        st.seen = last;
        if rebuild && first_touch {
            keep_replaced(file, &folded)?;
        }
        let changed = self.apply(file, folded)?;
        st.known = match Stamp::of(file)? {
            Some(s) => Known::Present(s),
            None => Known::Absent,
        };
        Ok(changed)
    }

    /// Makes the local copy what `folded` says; whether it changed.
    fn apply(&self, file: SharedFile<'_>, folded: Folded) -> Result<bool, SharedFilesError> {
        let io = |op, e| io_err(file, op, e);
        match folded {
            Folded::Same => Ok(false),
            Folded::Deleted => match fs::remove_file(file.local) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(io("delete", e)),
            },
            Folded::Whole(bytes) => {
                match fs::read(file.local) {
                    Ok(old) if old == bytes => return Ok(false),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io("read", e)),
                }
                create_parent(file)?;
                nanobot_util::write_atomic(file.local, &bytes).map_err(|e| SharedFilesError::Io {
                    name: file.name.to_owned(),
                    op: "write",
                    path: file.local.to_owned(),
                    source: std::io::Error::from(e),
                })?;
                Ok(true)
            }
            Folded::Appended(bytes) => {
                create_parent(file)?;
                let mut opts = fs::OpenOptions::new();
                opts.create(true).append(true);
                std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
                let mut f = opts.open(file.local).map_err(|e| io("open", e))?;
                f.write_all(&bytes).map_err(|e| io("append to", e))?;
                f.sync_data().map_err(|e| io("fsync", e))?;
                Ok(true)
            }
        }
    }

    /// [`SharedFiles::push`] with the file's state locked.
    fn push_locked(&self, file: SharedFile<'_>, st: &mut FileState) -> Result<(), SharedFilesError> {
        let subject = self.subject_of(file.name)?;
        let now = Stamp::of(file)?;
        let io = |op, e| io_err(file, op, e);
        let change = match (&st.known, &now) {
            (Known::Present(k), Some(n)) if k == n => return Ok(()),
            (Known::Absent, None) => return Ok(()),
            (Known::Unknown, None) if st.seen == 0 => return Ok(()),
            (_, None) => Change::Delete,
            (Known::Present(k), Some(n))
                if n.dev == k.dev && n.ino == k.ino && n.len > k.len && st.appends < COMPACT_AFTER =>
            {
                let mut f = fs::File::open(file.local).map_err(|e| io("open", e))?;
                let from = k.len.saturating_sub(k.tail.len() as u64);
                let before = read_range(&mut f, from, k.len).map_err(|e| io("read", e))?;
                if before == k.tail {
                    Change::Append(read_range(&mut f, k.len, n.len).map_err(|e| io("read", e))?)
                } else {
                    Change::Put(fs::read(file.local).map_err(|e| io("read", e))?)
                }
            }
            (_, Some(_)) => Change::Put(fs::read(file.local).map_err(|e| io("read", e))?),
        };
        let (op, data) = match change {
            Change::Append(d) => ("append", d),
            Change::Put(d) => ("put", d),
            Change::Delete => ("delete", Vec::new()),
        };
        match self.publish(file.name, &subject, op, st.seen, data) {
            Ok(last) => {
                st.seen = last;
                st.pending.clear();
                st.appends = if op == "append" { st.appends + 1 } else { 0 };
                st.known = match now {
                    Some(s) => Known::Present(s),
                    None => Known::Absent,
                };
                Ok(())
            }
            Err(PublishFailure::Conflict) => {
                tracing::warn!(
                    file = file.name,
                    "shared file changed by another replica first: catching up"
                );
                *st = FileState::default();
                if let Err(e) = self.pull_locked(file, st, false) {
                    tracing::warn!(file = file.name, error = %e, "could not catch up after a conflict");
                    *st = FileState::default();
                }
                Err(SharedFilesError::Conflict {
                    name: file.name.to_owned(),
                })
            }
            Err(PublishFailure::Other(reason)) => {
                // The local copy holds a change the store does not: the next pull replaces it.
                st.known = Known::Unknown;
                Err(SharedFilesError::Unavailable {
                    name: file.name.to_owned(),
                    what: format!("publish to {}", self.core.stream_name),
                    reason,
                })
            }
        }
    }

    /// Publishes `data` as `op` (in parts when larger than a chunk), each message expecting the previous one;
    /// after a `put` or `delete` the older messages are purged. Returns the last sequence.
    fn publish(
        &self,
        name: &str,
        subject: &str,
        op: &'static str,
        expected: u64,
        data: Vec<u8>,
    ) -> Result<u64, PublishFailure> {
        let js = self.core.js.clone();
        let stream = self.core.stream.clone();
        let key = self.core.key.clone();
        let chunk = self.core.chunk;
        let subject = subject.to_owned();
        let purge = op != "append";
        let out = self.block(name, "publish", async move {
            let mut pieces: Vec<Vec<u8>> = data.chunks(chunk).map(<[u8]>::to_vec).collect();
            if pieces.is_empty() {
                pieces.push(Vec::new());
            }
            let n = pieces.len();
            let (mut expected, mut first) = (expected, None::<u64>);
            for (i, piece) in pieces.into_iter().enumerate() {
                let last = i + 1 == n;
                let this_op = if last { op } else { "part" };
                let this_first = if last { first } else { None };
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(OP, this_op);
                if let Some(f) = this_first {
                    headers.insert(FIRST, f.to_string().as_str());
                }
                let piece = match &key {
                    None => piece,
                    Some(key) => {
                        headers.insert(SEALED, "1");
                        match key.seal_bound(&subject, &binding(this_op, expected, this_first), &piece) {
                            Ok(sealed) => sealed,
                            Err(e) => return Ok(Err(PublishFailure::Other(e.to_string()))),
                        }
                    }
                };
                headers.insert(
                    async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                    expected.to_string().as_str(),
                );
                let acked = match js.publish_with_headers(subject.clone(), headers, piece.into()).await {
                    Ok(ack) => ack.await,
                    Err(e) => return Ok(Err(PublishFailure::Other(e.to_string()))),
                };
                match acked {
                    Ok(ack) => {
                        expected = ack.sequence;
                        first.get_or_insert(ack.sequence);
                    }
                    Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                        return Ok(Err(PublishFailure::Conflict));
                    }
                    Err(e) => return Ok(Err(PublishFailure::Other(e.to_string()))),
                }
            }
            // (The server reads a purge up to sequence 1 as "everything": there is nothing before 1 anyway.)
            if purge && let Some(keep_from) = first.filter(|f| *f > 1) {
                // Best effort: a purge that fails leaves history longer, never wrong.
                if let Err(e) = stream.purge().filter(subject.as_str()).sequence(keep_from).await {
                    tracing::warn!(subject = %subject, error = %e, "could not purge a shared file's older messages");
                }
            }
            Ok(Ok(expected))
        });
        match out {
            Ok(r) => r,
            Err(e) => Err(PublishFailure::Other(e.to_string())),
        }
    }

    /// Publishes the local file whole, replacing what the store holds (for [`import`] with overwriting).
    pub(crate) fn put_whole(&self, file: SharedFile<'_>, expected: u64) -> Result<(), SharedFilesError> {
        let bytes = fs::read(file.local).map_err(|e| io_err(file, "read", e))?;
        let subject = self.subject_of(file.name)?;
        match self.publish(file.name, &subject, "put", expected, bytes) {
            Ok(_) => Ok(()),
            Err(PublishFailure::Conflict) => Err(SharedFilesError::Conflict {
                name: file.name.to_owned(),
            }),
            Err(PublishFailure::Other(reason)) => Err(SharedFilesError::Unavailable {
                name: file.name.to_owned(),
                what: format!("publish to {}", self.core.stream_name),
                reason,
            }),
        }
    }
}

/// What a sealed message of a shared file is bound to: its operation, the sequence of the message it follows on
/// its subject, and the first part of a chunked operation.
fn binding(op: &str, follows: u64, first: Option<u64>) -> String {
    format!("{op}:{follows}:{}", first.unwrap_or(0))
}

/// Opens `record` with the deployment key in place. It must be bound to its own operation and first part, and
/// follow the message read before it (`previous`); the first one read must follow at least `after` (later
/// messages may have been purged by a whole version). Refused: not sealed with the key, sealed for another
/// subject, or a sealed message published again elsewhere (a replay).
fn unseal(
    key: &DeploymentKey,
    subject: &str,
    record: &mut Record,
    previous: Option<u64>,
    after: u64,
) -> Result<(), String> {
    let (bound, body) = key
        .open_bound(subject, &record.payload)
        .map_err(|e| e.to_string())?;
    let mut parts = bound.splitn(3, ':');
    let (op, follows, first) = (parts.next(), parts.next(), parts.next());
    let follows: u64 = follows
        .and_then(|f| f.parse().ok())
        .ok_or("a malformed binding")?;
    if op != Some(record.op.as_str()) || first != Some(record.first.unwrap_or(0).to_string().as_str()) {
        return Err("its headers are not the ones sealed".into());
    }
    let in_place = match previous {
        Some(p) => follows == p,
        None => follows >= after && follows < record.seq,
    };
    if !in_place {
        return Err(format!(
            "sealed to follow message {follows}, found after {}: published again",
            previous.map_or_else(|| format!("at least {after}"), |p| p.to_string())
        ));
    }
    record.payload = body;
    Ok(())
}

/// Before the stored version replaces a local copy this process had not seen yet: when the copy is not simply an
/// older version of what is stored (not a prefix of it), it is kept as `<file>.replaced` (once: an existing one is
/// left), so what a home held before its files were imported is never lost.
fn keep_replaced(file: SharedFile<'_>, folded: &Folded) -> Result<(), SharedFilesError> {
    let stored: &[u8] = match folded {
        Folded::Whole(bytes) => bytes,
        Folded::Deleted => &[],
        Folded::Same | Folded::Appended(_) => return Ok(()),
    };
    let local = match fs::read(file.local) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(file, "read", e)),
    };
    if local.is_empty() || stored.starts_with(&local) {
        return Ok(());
    }
    let mut backup = file.local.as_os_str().to_owned();
    backup.push(".replaced");
    let backup = std::path::PathBuf::from(backup);
    if backup.exists() {
        return Ok(());
    }
    nanobot_util::write_atomic(&backup, &local).map_err(|e| SharedFilesError::Io {
        name: file.name.to_owned(),
        op: "keep a copy of",
        path: backup.clone(),
        source: std::io::Error::from(e),
    })?;
    tracing::warn!(
        file = file.name,
        kept = %backup.display(),
        "the local copy differed from the shared one and was never published: kept beside it"
    );
    Ok(())
}

fn create_parent(file: SharedFile<'_>) -> Result<(), SharedFilesError> {
    if let Some(parent) = file.local.parent() {
        let mut b = fs::DirBuilder::new();
        b.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(parent)
            .map_err(|e| io_err(file, "create the directory of", e))?;
    }
    Ok(())
}

/// The `/`-separated parts of a file name, refusing names that cannot be stored.
fn name_parts(name: &str) -> Result<Vec<&str>, SharedFilesError> {
    let bad = |reason: &str| SharedFilesError::Invalid {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("the name is empty"));
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err(bad("a part of the name is empty, `.` or `..`"));
    }
    if name.contains('\0') {
        return Err(bad("the name holds a NUL character"));
    }
    Ok(parts)
}

impl SharedFiles for NatsFiles {
    fn pull(&self, file: SharedFile<'_>) -> Result<bool, SharedFilesError> {
        let state = self.state(file.name);
        let mut st = nanobot_util::lock(&state);
        let first_touch = !st.touched;
        let out = self.pull_locked(file, &mut st, first_touch);
        if out.is_err() {
            *st = FileState::default();
        }
        st.touched = true;
        out
    }

    fn push(&self, file: SharedFile<'_>) -> Result<(), SharedFilesError> {
        let state = self.state(file.name);
        let mut st = nanobot_util::lock(&state);
        let out = self.push_locked(file, &mut st);
        st.touched = true;
        out
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError> {
        // The complete parts of the prefix narrow the subjects asked for.
        let mut filter = self.core.root.clone();
        let complete: Vec<&str> = match prefix.rsplit_once('/') {
            Some((dirs, _)) if !dirs.is_empty() => dirs.split('/').collect(),
            _ => Vec::new(),
        };
        for part in complete {
            filter.push('.');
            filter.push_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(part));
        }
        filter.push_str(".>");
        let stream = self.core.stream.clone();
        let subjects = self.block(prefix, "list", async move {
            let mut info = stream
                .info_with_subjects(filter.as_str())
                .await
                .map_err(|e| format!("listing {filter}: {e}"))?;
            let mut out = Vec::new();
            while let Some((subject, _count)) = info
                .try_next()
                .await
                .map_err(|e| format!("listing {filter}: {e}"))?
            {
                out.push(subject);
            }
            Ok(out)
        })?;
        let mut names: Vec<String> = subjects
            .iter()
            .filter_map(|s| self.name_of(s))
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, op: &str, first: Option<u64>, payload: &[u8]) -> Record {
        Record {
            seq,
            op: op.into(),
            first,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn records_fold_into_the_file() {
        let mut st = FileState::default();
        let out = fold(
            "f",
            &mut st,
            Folded::Whole(Vec::new()),
            vec![
                rec(1, "put", None, b"ab"),
                rec(2, "append", None, b"c"),
                // A put whose writer died after its first part, then a whole one in two parts.
                rec(3, "part", None, b"zz"),
                rec(4, "part", None, b"x"),
                rec(5, "put", Some(4), b"y"),
                rec(6, "append", None, b"!"),
            ],
        )
        .unwrap();
        assert_eq!(out, Folded::Whole(b"xy!".to_vec()));
        assert_eq!((st.seen, st.appends), (6, 1));
        let out = fold("f", &mut st, Folded::Same, vec![rec(7, "append", None, b"1")]).unwrap();
        assert_eq!(out, Folded::Appended(b"1".to_vec()));
        let out = fold("f", &mut st, Folded::Same, vec![rec(8, "delete", None, b"")]).unwrap();
        assert_eq!(out, Folded::Deleted);
        let err = fold("f", &mut st, Folded::Same, vec![rec(9, "truncate", None, b"")]).unwrap_err();
        assert!(err.to_string().contains("message 9") && err.to_string().contains("truncate"));
    }

    #[test]
    fn names_that_cannot_be_stored_are_refused() {
        for bad in ["", "a//b", "../x", "a/./b", "a\0b"] {
            assert!(name_parts(bad).is_err(), "{bad:?}");
        }
        assert_eq!(name_parts("sessions/a.jsonl").unwrap(), ["sessions", "a.jsonl"]);
    }
}
