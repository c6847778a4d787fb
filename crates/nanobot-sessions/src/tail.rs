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

/// Lines of a file, newest first. Reading costs O(bytes returned): chunks are read backwards, each is searched
/// for newlines once, and a chunk grows with a line that does not fit, so a 16 MiB line is read in a few
/// large reads rather than rescanned at every step.
struct RevLines<'a> {
    file: File,
    path: &'a Path,
    /// File offset of `buf[0]`.
    pos: u64,
    /// Bytes not yet returned; they end at the end of an unreturned line (newline included).
    buf: Vec<u8>,
    /// `buf[..unsearched]` has not been searched for a newline yet; the rest holds none (besides the one
    /// ending the buffer).
    unsearched: usize,
    chunk: u64,
    /// Bytes read from the file so far.
    read: u64,
}

impl<'a> RevLines<'a> {
    fn new(file: File, len: u64, path: &'a Path) -> Self {
        Self {
            file,
            path,
            pos: len,
            buf: Vec::new(),
            unsearched: 0,
            chunk: 64 * 1024,
            read: 0,
        }
    }

    /// The previous line and its offset, without its newline.
    fn next_line(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        loop {
            let end = self.buf.len() - usize::from(self.buf.last() == Some(&b'\n'));
            let search_to = self.unsearched.min(end);
            if let Some(nl) = memchr::memrchr(b'\n', &self.buf[..search_to]) {
                let mut line = self.buf.split_off(nl + 1);
                line.truncate(end - nl - 1);
                // Everything before `nl` is still unsearched; `nl` itself ends the next line.
                self.unsearched = nl;
                return Ok(Some((self.pos + nl as u64 + 1, line)));
            }
            if self.pos == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let mut line = std::mem::take(&mut self.buf);
                line.truncate(end);
                self.unsearched = 0;
                return Ok(Some((0, line)));
            }
            // A line longer than the buffer: read at least as much again, so the total stays linear.
            self.read_more()?;
        }
    }
}

impl RevLines<'_> {
    /// Skips lines backwards without returning them, and returns how many of them were not blank. Stops before
    /// a line that may be a metadata record ([`may_be_metadata`]) and before the file's first line: those are
    /// left for [`RevLines::next_line`].
    ///
    /// Only the newlines and the first bytes of each line are looked at (one `memchr` pass, no copy per line),
    /// so counting the 100,000 messages of a file written by the Python nanobot costs about one read of it.
    fn skip_plain(&mut self) -> Result<usize> {
        let mut counted = 0usize;
        loop {
            let end = self.buf.len() - usize::from(self.buf.last() == Some(&b'\n'));
            let search_to = self.unsearched.min(end);
            // `keep`: length of `buf` once the lines skipped so far are dropped (it ends with a newline).
            let mut keep = self.buf.len();
            let mut line_end = end;
            let mut stopped = false;
            for nl in memchr::memrchr_iter(b'\n', &self.buf[..search_to]) {
                let line = &self.buf[nl + 1..line_end];
                if may_be_metadata(line) {
                    stopped = true;
                    break;
                }
                if !is_blank(line) {
                    counted += 1;
                }
                keep = nl + 1;
                line_end = nl;
            }
            self.buf.truncate(keep);
            if stopped {
                self.unsearched = self.unsearched.min(keep.saturating_sub(1));
                return Ok(counted);
            }
            // No newline left before `line_end`: the rest of `buf` is the start of a line.
            self.unsearched = 0;
            if self.pos == 0 {
                return Ok(counted);
            }
            self.read_more()?;
        }
    }

    /// Prepends the bytes before `pos` (at least as many as `buf` holds, so a long line costs linear time).
    fn read_more(&mut self) -> Result<()> {
        let want = self.chunk.max(self.buf.len() as u64);
        let start = self.pos.saturating_sub(want);
        let mut chunk = vec![0u8; (self.pos - start) as usize];
        self.file
            .seek(SeekFrom::Start(start))
            .map_err(|e| SessionError::io("seek", self.path, e))?;
        self.file
            .read_exact(&mut chunk)
            .map_err(|e| SessionError::io("read", self.path, e))?;
        self.read += chunk.len() as u64;
        self.unsearched = chunk.len();
        chunk.extend_from_slice(&self.buf);
        self.buf = chunk;
        self.pos = start;
        self.chunk = (self.chunk * 2).min(MAX_CHUNK);
        Ok(())
    }
}

/// The largest read of [`RevLines`] (a longer line is read in reads as long as what is already buffered).
const MAX_CHUNK: u64 = 256 * 1024;

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Whether a line may be a metadata record (`"_type"` near its start): only those are parsed while counting.
fn may_be_metadata(line: &[u8]) -> bool {
    let head = &line[..line.len().min(64)];
    // `memchr` for the rare `_`, then a comparison: cheaper per line than building a substring searcher.
    memchr::memchr_iter(b'_', head).any(|i| i > 0 && head[i - 1] == b'"' && head[i..].starts_with(b"_type\""))
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

/// Reads `path` as [`scan`] does, adding the bytes read (repair included) to `read`.
pub(crate) fn scan_counted(path: &Path, key: &str, want: usize, read: &mut u64) -> Result<TailRead> {
    scan_inner(path, key, want, read)
}

/// Newest-first messages kept, messages only counted, the header (record, total, messages after it) and
/// whether the start of the file was reached; `None` when a line does not parse.
type Walked = (
    Vec<Map<String, Value>>,
    usize,
    Option<(Map<String, Value>, usize, usize)>,
    bool,
);

fn walk(lines: &mut RevLines<'_>, want: usize) -> Result<Option<Walked>> {
    let mut newest_first: Vec<Map<String, Value>> = Vec::new();
    let mut counted = 0usize;
    let mut header: Option<(Map<String, Value>, usize, usize)> = None;
    loop {
        if newest_first.len() >= want {
            // Only counting from here on, up to the next line that may be a metadata record.
            counted += lines.skip_plain()?;
        }
        let Some((offset, line)) = lines.next_line()? else {
            break;
        };
        if is_blank(&line) {
            continue;
        }
        let kept = newest_first.len() < want;
        if !kept && offset != 0 && !may_be_metadata(&line) {
            counted += 1;
            continue;
        }
        let Ok(map) = serde_json::from_slice::<Map<String, Value>>(&line) else {
            return Ok(None);
        };
        if format::is_metadata(&map) {
            let before = if offset == 0 {
                Some(0)
            } else {
                map.get(format::MESSAGE_COUNT)
                    .and_then(Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok())
            };
            let Some(before) = before else {
                return Ok(None);
            };
            let after = newest_first.len() + counted;
            header = Some((map, before + after, after));
            if newest_first.len() >= want {
                return Ok(Some((newest_first, counted, header, false)));
            }
            // Keep reading for more messages; the newest metadata record already gave the count.
            return finish(lines, newest_first, header, want);
        } else if format::is_other_record(&map) {
            continue;
        } else if kept {
            newest_first.push(map);
        } else {
            counted += 1;
        }
    }
    Ok(Some((newest_first, counted, header, true)))
}

/// After the header was found: read back until `want` messages are kept (older metadata records skipped).
/// (Counting never started: it begins only once `want` messages are kept.)
fn finish(
    lines: &mut RevLines<'_>,
    mut newest_first: Vec<Map<String, Value>>,
    header: Option<(Map<String, Value>, usize, usize)>,
    want: usize,
) -> Result<Option<Walked>> {
    while newest_first.len() < want {
        let Some((_, line)) = lines.next_line()? else {
            return Ok(Some((newest_first, 0, header, true)));
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(map) = serde_json::from_slice::<Map<String, Value>>(&line) else {
            return Ok(None);
        };
        if !format::is_metadata(&map) && !format::is_other_record(&map) {
            newest_first.push(map);
        }
    }
    Ok(Some((newest_first, 0, header, false)))
}

/// Reads `path` backwards until the newest metadata record and at least `want` messages (or the start of the
/// file) are reached. Repairs a cut last line first.
///
/// Past the `want` newest messages, lines are only counted (a metadata record, recognised by `"_type"` near the
/// line's start, is parsed): the first read of a file written by the Python nanobot, whose only metadata is
/// its first line, walks back to it without parsing or keeping the messages in between.
fn scan_inner(path: &Path, key: &str, want: usize, read: &mut u64) -> Result<TailRead> {
    if fsio::repair_tail_counted(path, read)? == Tail::Missing {
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
    let result = walk(&mut lines, want);
    *read += lines.read;
    let Some((newest_first, counted, header, reached_start)) = result? else {
        return Ok(TailRead::Unusable);
    };
    let Some((map, total, since_anchor)) = header else {
        return Ok(TailRead::Unusable);
    };
    let seen = newest_first.len() + counted;
    // A count that disagrees with the lines (the file was edited by hand): do not trust it.
    if seen > total || (reached_start && seen != total) {
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
