//! Timestamps as the Python nanobot writes them: local time, no offset, `datetime.isoformat()`.

use chrono::{DateTime, Local, NaiveDateTime, Timelike};

/// Now, in local time without offset (Python's `datetime.now()`).
pub(crate) fn now() -> NaiveDateTime {
    Local::now().naive_local()
}

/// Python's `isoformat()`: `2026-11-22T04:36:08.797239`, or without the fraction when it is zero.
pub(crate) fn format(t: NaiveDateTime) -> String {
    if t.nanosecond() == 0 {
        t.format("%Y-%m-%dT%H:%M:%S").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
    }
}

/// Parses what `datetime.fromisoformat` accepts in practice: naive `T`/space separated timestamps with an
/// optional fraction, or RFC 3339 with an offset (converted to local time).
pub(crate) fn parse(s: &str) -> Option<NaiveDateTime> {
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(t);
        }
    }
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Local).naive_local())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_isoformat_round_trips() {
        for s in ["2026-11-22T04:36:08.797239", "2026-02-25T10:00:00"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
        assert!(parse("2026-02-25 10:00:00").is_some());
        assert!(parse("2026-02-25T10:00:00+00:00").is_some());
        assert!(parse("yesterday").is_none());
    }
}
