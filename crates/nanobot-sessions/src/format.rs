//! The JSONL file format shared with the Python nanobot.
//!
//! ```text
//! {"_type":"metadata","key":"cli:direct","created_at":"…","updated_at":"…","metadata":{…},"last_consolidated":0}
//! {"role":"user","content":"hi","timestamp":"…"}
//! {"role":"assistant","content":"hello","timestamp":"…"}
//! {"_type":"metadata", …}        <- optional: a later metadata record (see below)
//! ```
//!
//! The first line is the metadata record; every other line is one message. A metadata change is appended as a
//! complete new metadata record; the last one wins. The Python loader does the same (every `_type: metadata`
//! line replaces the metadata read so far and is not taken as a message), so files stay readable by it.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, SessionError};
use crate::message::SessionMessage;
use crate::session::Session;
use crate::time;

const TYPE_FIELD: &str = "_type";
const METADATA: &str = "metadata";
/// In a metadata record that is not the first line: how many messages precede it in the file. It lets a reader
/// that starts from the end of the file know each message's index without reading the whole file. The Python
/// nanobot ignores it.
pub(crate) const MESSAGE_COUNT: &str = "_message_count";
/// The archive watermark as 0.3.5 names it; it reads this field first and `last_consolidated` only when it is
/// absent, and writes both. Both are written with the same value, so neither side reads a stale one.
const LAST_ARCHIVED: &str = "last_archived";
const LAST_CONSOLIDATED: &str = "last_consolidated";
const KNOWN: [&str; 8] = [
    TYPE_FIELD,
    "key",
    "created_at",
    "updated_at",
    "metadata",
    LAST_ARCHIVED,
    LAST_CONSOLIDATED,
    MESSAGE_COUNT,
];

/// A parsed session file.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) session: Session,
    /// Metadata records after the first line (appended metadata changes).
    pub(crate) trailing_metadata: usize,
    /// Whether any metadata record was found at all.
    pub(crate) has_metadata: bool,
    /// Messages after the last metadata record a tail reader can use (the first line, or a later record with
    /// [`MESSAGE_COUNT`]); `usize::MAX` when there is none.
    pub(crate) since_anchor: usize,
}

/// The metadata record of `s` as one line, newline included. `message_count` is given for records appended
/// after messages (see [`MESSAGE_COUNT`]), `None` for the first line.
pub(crate) fn metadata_line(s: &Session, message_count: Option<usize>) -> Result<String> {
    let mut map = Map::new();
    map.insert(TYPE_FIELD.into(), METADATA.into());
    map.insert("key".into(), s.key.clone().into());
    map.insert("created_at".into(), time::format(s.created_at).into());
    map.insert("updated_at".into(), time::format(s.updated_at).into());
    map.insert("metadata".into(), Value::Object(s.metadata.clone()));
    for (k, v) in &s.extra {
        if !KNOWN.contains(&k.as_str()) {
            map.insert(k.clone(), v.clone());
        }
    }
    map.insert(LAST_ARCHIVED.into(), s.last_consolidated.into());
    map.insert(LAST_CONSOLIDATED.into(), s.last_consolidated.into());
    if let Some(n) = message_count {
        map.insert(MESSAGE_COUNT.into(), n.into());
    }
    line(&Value::Object(map), "session metadata")
}

/// Messages as lines, newlines included.
pub(crate) fn message_lines<'a>(messages: impl IntoIterator<Item = &'a SessionMessage>) -> Result<String> {
    let mut out = String::new();
    for m in messages {
        out.push_str(&line(m, "session message")?);
    }
    Ok(out)
}

/// The whole file for `s`: metadata record, then every message.
pub(crate) fn whole_file(s: &Session) -> Result<String> {
    let mut out = metadata_line(s, None)?;
    out.push_str(&message_lines(&s.messages)?);
    Ok(out)
}

fn line(v: &impl serde::Serialize, what: &'static str) -> Result<String> {
    let mut s = serde_json::to_string(v).map_err(|source| SessionError::Serialize { what, source })?;
    s.push('\n');
    Ok(s)
}

/// Whether a parsed line is a metadata record.
pub(crate) fn is_metadata(map: &Map<String, Value>) -> bool {
    map.get(TYPE_FIELD).and_then(Value::as_str) == Some(METADATA)
}

/// Whether a parsed line is a record other than metadata and other than a message: a line with a `_type`
/// (0.3.5 writes `{"_type":"provider_state",…}`, a provider's conversation cache, after the metadata line).
/// Such records are neither messages nor counted as messages, as in 0.3.5; they are left in place by appends and
/// dropped when the file is rewritten (the cache is then stale, and 0.3.5 rebuilds it from the messages).
pub(crate) fn is_other_record(map: &Map<String, Value>) -> bool {
    map.get(TYPE_FIELD).is_some_and(Value::is_string) && !is_metadata(map)
}

/// Parses a whole session file. Blank lines are skipped; a line that is not a JSON object is an error naming
/// the file and line. The caller repairs a cut last line first ([`crate::fsio::repair_tail`]).
pub(crate) fn parse(bytes: &[u8], path: &Path, key: &str) -> Result<Parsed> {
    let mut session = Session::new(key);
    let mut metadata_records = 0usize;
    let mut header_updated = None;
    let mut since_anchor = usize::MAX;
    let mut first = true;
    for (idx, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_no = idx + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value: Value = serde_json::from_slice(raw).map_err(|source| SessionError::Json {
            path: path.to_owned(),
            line: line_no,
            source,
        })?;
        let Value::Object(map) = value else {
            return Err(SessionError::Invalid {
                path: path.to_owned(),
                line: line_no,
                what: "expected a JSON object".into(),
            });
        };
        let is_first = std::mem::replace(&mut first, false);
        if is_metadata(&map) {
            metadata_records += 1;
            since_anchor = if is_first || map.get(MESSAGE_COUNT).is_some_and(Value::is_u64) {
                0
            } else {
                usize::MAX
            };
            header_updated = apply_metadata(&mut session, map, path, line_no)?.or(header_updated);
        } else if is_other_record(&map) {
            continue;
        } else {
            session.messages.push(SessionMessage::from_map(map));
            since_anchor = since_anchor.saturating_add(1);
        }
    }
    // Appends do not rewrite the metadata line, so the newest message also dates the session.
    let last_message = session
        .messages
        .last()
        .and_then(|m| m.timestamp())
        .and_then(time::parse);
    session.updated_at = match (header_updated, last_message) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b).unwrap_or(session.created_at),
    };
    Ok(Parsed {
        session,
        trailing_metadata: metadata_records.saturating_sub(1),
        has_metadata: metadata_records > 0,
        since_anchor,
    })
}

/// Applies one metadata record to `s`; returns its `updated_at`.
pub(crate) fn apply_metadata(
    s: &mut Session,
    map: Map<String, Value>,
    path: &Path,
    line: usize,
) -> Result<Option<chrono::NaiveDateTime>> {
    let invalid = |what: String| SessionError::Invalid {
        path: path.to_owned(),
        line,
        what,
    };
    let stamp = |field: &str| -> Result<Option<chrono::NaiveDateTime>> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(t)) => time::parse(t)
                .map(Some)
                .ok_or_else(|| invalid(format!("field `{field}`: not an ISO 8601 timestamp: {t:?}"))),
            Some(other) => Err(invalid(format!(
                "field `{field}`: expected a timestamp string, found {other}"
            ))),
        }
    };
    if let Some(created) = stamp("created_at")? {
        s.created_at = created;
    }
    let updated = stamp("updated_at")?;
    s.metadata = match map.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(invalid(format!(
                "field `metadata`: expected an object, found {other}"
            )));
        }
    };
    // 0.3.5's rule: `last_archived` when it is an integer, else `last_consolidated`.
    let watermark = [LAST_ARCHIVED, LAST_CONSOLIDATED]
        .into_iter()
        .find_map(|field| match map.get(field) {
            Some(v @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some((field, v)),
            _ => None,
        });
    s.last_consolidated = match watermark {
        None => 0,
        Some((field, v)) => v.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
            invalid(format!(
                "field `{field}`: expected a non-negative integer, found {v}"
            ))
        })?,
    };
    s.extra = map
        .into_iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .collect();
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_metadata_record_wins_and_is_not_a_message() {
        let text = concat!(
            r#"{"_type":"metadata","key":"k","created_at":"2026-01-01T00:00:00","metadata":{"a":1},"last_consolidated":0}"#,
            "\n",
            r#"{"role":"user","content":"x","timestamp":"2026-01-01T00:00:01"}"#,
            "\n\n",
            r#"{"_type":"metadata","key":"k","created_at":"2026-01-01T00:00:00","metadata":{"a":2},"last_consolidated":1,"new_field":true}"#,
            "\n"
        );
        let p = parse(text.as_bytes(), Path::new("f.jsonl"), "k").unwrap();
        assert_eq!(p.session.messages.len(), 1);
        assert_eq!(p.trailing_metadata, 1);
        assert_eq!(p.session.metadata["a"], 2);
        assert_eq!(p.session.last_consolidated, 1);
        assert_eq!(p.session.extra["new_field"], true);
        assert_eq!(time::format(p.session.updated_at), "2026-01-01T00:00:01");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = "{\"_type\":\"metadata\",\"last_consolidated\":-3}\n";
        let e = parse(bad.as_bytes(), Path::new("s.jsonl"), "k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.jsonl:1") && e.contains("last_consolidated"), "{e}");
        let bad = "{\"role\":\"user\"}\n[1]\n";
        let e = parse(bad.as_bytes(), Path::new("s.jsonl"), "k")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "s.jsonl:2: expected a JSON object");
        let bad = "{\"role\":\"user\"}\n{oops}\n{}\n";
        let e = parse(bad.as_bytes(), Path::new("s.jsonl"), "k")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "s.jsonl:2: invalid JSON");
    }
}
