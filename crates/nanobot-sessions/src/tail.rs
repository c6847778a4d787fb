//! Reading a session file from its end: the newest messages, the current metadata and the message count,
//! without reading the whole file.
//!
//! Every metadata record this crate appends carries [`format::MESSAGE_COUNT`], the number of messages before it.
//! Walking back from the end to the newest metadata record therefore gives the index of every message read
//! (and the first line counts as "0 messages before"). The store appends such a record at least every
//! [`ANCHOR_EVERY`] messages, so finding it costs a bounded read whatever the session's length.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, SessionError};
use crate::format;
use crate::fsio::{self, Tail};
use crate::message::SessionMessage;
use crate::session::Session;
use crate::time;

/// The store appends a metadata record (with the message count) after at most this many messages.
pub(crate) const ANCHOR_EVERY: usize = 256;

/// Lines of a file, newest first.
struct RevLines<'a> {
    file: File,
    path: &'a Path,
    /// File offset of `buf[0]`.
    pos: u64,
    /// Bytes not yet returned; they end at the end of an unreturned line (newline included).
    buf: Vec<u8>,
    chunk: u64,
}

impl<'a> RevLines<'a> {
    fn new(file: File, len: u64, path: &'a Path) -> Self {
        Self {
            file,
            path,
            pos: len,
            buf: Vec::new(),
            chunk: 64 * 1024,
        }
    }

    /// The previous line and its offset, without its newline.
    fn next_line(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        loop {
            let end = self.buf.len() - usize::from(self.buf.last() == Some(&b'\n'));
            if let Some(nl) = self.buf[..end].iter().rposition(|&b| b == b'\n') {
                let mut line = self.buf.split_off(nl + 1);
                line.truncate(end - nl - 1);
                return Ok(Some((self.pos + nl as u64 + 1, line)));
            }
            if self.pos == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let mut line = std::mem::take(&mut self.buf);
                line.truncate(end);
                return Ok(Some((0, line)));
            }
            let start = self.pos.saturating_sub(self.chunk);
            let mut chunk = vec![0u8; (self.pos - start) as usize];
            self.file
                .seek(SeekFrom::Start(start))
                .map_err(|e| SessionError::io("seek", self.path, e))?;
            self.file
                .read_exact(&mut chunk)
                .map_err(|e| SessionError::io("read", self.path, e))?;
            chunk.extend_from_slice(&self.buf);
            self.buf = chunk;
            self.pos = start;
            self.chunk = (self.chunk * 2).min(8 * 1024 * 1024);
        }
    }
}

/// What [`scan`] found.
pub(crate) enum TailRead {
    /// No file.
    Missing,
    /// The file cannot be read from its end (no usable metadata record, or a line that does not parse): read
    /// it whole instead, which also reports errors with their line numbers.
    Unusable,
    /// The newest part of the file.
    Found(Box<TailScan>),
}

pub(crate) struct TailScan {
    /// The session's metadata (no messages).
    pub(crate) header: Session,
    /// Number of messages in the file.
    pub(crate) total: usize,
    /// Messages after the newest metadata record.
    pub(crate) since_anchor: usize,
    /// The newest messages read, oldest first; the last one has index `total - 1`.
    pub(crate) messages: Vec<SessionMessage>,
}

/// Reads `path` backwards until the newest metadata record and at least `want` messages (or the start of the
/// file) are reached. Repairs a cut last line first.
pub(crate) fn scan(path: &Path, key: &str, want: usize) -> Result<TailRead> {
    if fsio::repair_tail(path)? == Tail::Missing {
        return Ok(TailRead::Missing);
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TailRead::Missing),
        Err(e) => return Err(SessionError::io("open", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| SessionError::io("stat", path, e))?
        .len();
    let mut lines = RevLines::new(file, len, path);
    let mut newest_first: Vec<Map<String, Value>> = Vec::new();
    let mut header: Option<(Map<String, Value>, usize, usize)> = None;
    let mut reached_start = true;
    while let Some((offset, line)) = lines.next_line()? {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(map) = serde_json::from_slice::<Map<String, Value>>(&line) else {
            return Ok(TailRead::Unusable);
        };
        if format::is_metadata(&map) {
            if header.is_none() {
                let before = if offset == 0 {
                    Some(0)
                } else {
                    map.get(format::MESSAGE_COUNT)
                        .and_then(Value::as_u64)
                        .and_then(|n| usize::try_from(n).ok())
                };
                let Some(before) = before else {
                    return Ok(TailRead::Unusable);
                };
                header = Some((map, before + newest_first.len(), newest_first.len()));
            }
        } else {
            newest_first.push(map);
        }
        if header.is_some() && newest_first.len() >= want {
            reached_start = false;
            break;
        }
    }
    let Some((map, total, since_anchor)) = header else {
        return Ok(TailRead::Unusable);
    };
    // A count that disagrees with the lines (the file was edited by hand): do not trust it.
    if newest_first.len() > total || (reached_start && newest_first.len() != total) {
        tracing::warn!(file = %path.display(), "message count in the session file is stale; reading it whole");
        return Ok(TailRead::Unusable);
    }
    let mut session = Session::new(key);
    let Ok(updated) = format::apply_metadata(&mut session, map, path, 0) else {
        return Ok(TailRead::Unusable);
    };
    let newest = newest_first
        .first()
        .and_then(|m| m.get("timestamp"))
        .and_then(Value::as_str)
        .and_then(time::parse);
    session.updated_at = match (updated, newest) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b).unwrap_or(session.created_at),
    };
    let messages: Vec<SessionMessage> = newest_first
        .into_iter()
        .rev()
        .map(SessionMessage::from_map)
        .collect();
    Ok(TailRead::Found(Box::new(TailScan {
        header: session,
        total,
        since_anchor,
        messages,
    })))
}
