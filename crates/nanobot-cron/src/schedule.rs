//! Schedules: `at` (one-shot), `every` (interval) and `cron` (5-field crontab in an IANA zone).
//!
//! The `cron` crate differs from crontab in three ways that are hidden here:
//! it wants a seconds field (we add `0`), it numbers weekdays 1–7 from Sunday (we parse crontab's
//! 0–7 with 0 and 7 = Sunday ourselves and hand it weekday *names*), and it ANDs day-of-month with
//! day-of-week where crontab/croniter OR them when both are restricted (we evaluate two schedules
//! and take the earlier time).
//!
//! Time zones: expressions are evaluated on the zone's wall clock. A wall time that does not exist
//! (spring forward) runs at the same distance after the jump (02:30 → 03:30, as Python's `zoneinfo`
//! resolves it); a wall time that happens twice (fall back) runs once, at its first occurrence.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use crate::CronError;

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A parsed, validated 5-field crontab expression.
#[derive(Debug, Clone)]
pub struct CronExpr {
    source: String,
    /// One schedule, or two (day-of-month / day-of-week) whose union is meant.
    schedules: Vec<cron::Schedule>,
}

impl CronExpr {
    /// Parses standard crontab syntax: `minute hour day-of-month month day-of-week`, with `*`, `?`,
    /// lists, ranges, steps, month and weekday names (Sunday is 0 or 7), and the macros `@yearly`,
    /// `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`.
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        let err = |field: &'static str, reason: String| CronError::InvalidExpr {
            expr: expr.to_owned(),
            field,
            reason,
        };
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => {
                return Err(err("expression", format!("unsupported macro `{trimmed}`")));
            }
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(
                "expression",
                format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                    fields.len()
                ),
            ));
        }
        let minute = parse_field(fields[0], 0, 59, None, false).map_err(|r| err("minute", r))?;
        let hour = parse_field(fields[1], 0, 23, None, false).map_err(|r| err("hour", r))?;
        let dom = parse_field(fields[2], 1, 31, None, true).map_err(|r| err("day-of-month", r))?;
        let month = parse_field(fields[3], 1, 12, Some((&MONTHS, 1)), false).map_err(|r| err("month", r))?;
        let mut dow =
            parse_field(fields[4], 0, 7, Some((&WEEKDAYS, 0)), true).map_err(|r| err("day-of-week", r))?;
        if dow.remove(&7) {
            dow.insert(0);
        }

        let dom_restricted = dom.len() < 31;
        let dow_restricted = dow.len() < 7;
        let minutes = join_nums(&minute);
        let hours = join_nums(&hour);
        let months = if month.len() == 12 {
            "*".to_owned()
        } else {
            join_nums(&month)
        };
        let doms = if dom_restricted {
            join_nums(&dom)
        } else {
            "*".to_owned()
        };
        let dows = if dow_restricted {
            dow.iter()
                .map(|d| WEEKDAYS[*d as usize])
                .collect::<Vec<_>>()
                .join(",")
        } else {
            "*".to_owned()
        };
        let mut exprs = Vec::new();
        if dom_restricted && dow_restricted {
            // crontab: a day matches if EITHER field matches
            exprs.push(format!("0 {minutes} {hours} {doms} {months} *"));
            exprs.push(format!("0 {minutes} {hours} * {months} {dows}"));
        } else {
            exprs.push(format!("0 {minutes} {hours} {doms} {months} {dows}"));
        }
        let schedules = exprs
            .iter()
            .map(|e| cron::Schedule::from_str(e).map_err(|e2| err("expression", e2.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        // e.g. `0 0 31 2 *` parses but never fires
        let probe = Utc
            .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
            .single()
            .unwrap_or_default();
        if schedules.iter().all(|s| s.after(&probe).next().is_none()) {
            return Err(err("expression", "never matches any date".into()));
        }
        Ok(CronExpr {
            source: expr.to_owned(),
            schedules,
        })
    }

    /// The expression as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The first time strictly after `after` at which the expression fires in `tz`.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        self.schedules
            .iter()
            .filter_map(|s| next_in_zone(s, after, tz))
            .min()
    }
}

/// Parses an IANA zone name.
pub fn parse_tz(name: &str) -> Result<Tz, CronError> {
    Tz::from_str(name.trim()).map_err(|_| CronError::UnknownTimezone { tz: name.to_owned() })
}

fn join_nums(set: &BTreeSet<u32>) -> String {
    set.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// Parses one crontab field into the set of values it matches.
fn parse_field(
    text: &str,
    min: u32,
    max: u32,
    names: Option<(&[&str], u32)>,
    question_ok: bool,
) -> Result<BTreeSet<u32>, String> {
    let value = |s: &str| -> Result<u32, String> {
        if let Ok(n) = s.parse::<u32>() {
            return if (min..=max).contains(&n) {
                Ok(n)
            } else {
                Err(format!("{n} is out of range {min}-{max}"))
            };
        }
        if let Some((list, first)) = names
            && let Some(i) = list.iter().position(|n| n.eq_ignore_ascii_case(s))
        {
            return Ok(first + i as u32);
        }
        Err(format!(
            "`{s}` is not a number in {min}-{max}{}",
            if names.is_some() { " or a name" } else { "" }
        ))
    };
    let mut out = BTreeSet::new();
    if text.is_empty() {
        return Err("empty field".into());
    }
    for part in text.split(',') {
        if part.is_empty() {
            return Err(format!("empty list item in `{text}`"));
        }
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step `{s}` is not a positive number"))?;
                if step == 0 {
                    return Err("step must be at least 1".into());
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" || (question_ok && range == "?") {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("range `{range}` goes backwards"));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `a/step` means a..max
            (a, if part.contains('/') { max } else { a })
        };
        out.extend((lo..=hi).step_by(step as usize));
    }
    Ok(out)
}

/// Resolves a wall-clock time in `tz`: the first occurrence when it repeats, and the time shifted by
/// the jump when it falls into a gap.
fn resolve_local(naive: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&naive) {
        chrono::LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        chrono::LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        chrono::LocalResult::None => {
            // Use the offset in force before the gap (no transition is less than 3 h after another).
            let before = tz.from_local_datetime(&(naive - Duration::hours(3))).earliest()?;
            let offset = before.offset().fix();
            Some(Utc.from_utc_datetime(&(naive - Duration::seconds(i64::from(offset.local_minus_utc())))))
        }
    }
}

fn next_in_zone(schedule: &cron::Schedule, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    // Walk the wall-clock candidates (evaluated as if UTC, i.e. without DST) and map each to an
    // instant. Candidates shifted out of a gap can overtake later ones, so look a little further.
    let local = after.with_timezone(&tz).naive_local();
    let start = Utc.from_utc_datetime(&local);
    let mut best: Option<DateTime<Utc>> = None;
    let mut first_naive: Option<NaiveDateTime> = None;
    for candidate in schedule.after(&start).take(10_000) {
        let naive = candidate.naive_utc();
        if let Some(first) = first_naive
            && naive > first + Duration::hours(3)
        {
            break;
        }
        let Some(instant) = resolve_local(naive, tz) else {
            continue;
        };
        if instant <= after {
            continue;
        }
        first_naive.get_or_insert(naive);
        if best.is_none_or(|b| instant < b) {
            best = Some(instant);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse() {
        assert_eq!(
            parse_field("*/15", 0, 59, None, false)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![0, 15, 30, 45]
        );
        assert_eq!(
            parse_field("1-5/2,10", 0, 59, None, false)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1, 3, 5, 10]
        );
        assert_eq!(
            parse_field("50/5", 0, 59, None, false)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![50, 55]
        );
        assert_eq!(
            parse_field("mon-FRI", 0, 7, Some((&WEEKDAYS, 0)), true)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(
            parse_field("jan,Dec", 1, 12, Some((&MONTHS, 1)), false)
                .unwrap()
                .len(),
            2
        );
        assert!(
            parse_field("60", 0, 59, None, false)
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            parse_field("5-1", 0, 59, None, false)
                .unwrap_err()
                .contains("backwards")
        );
        assert!(parse_field("*/0", 0, 59, None, false).is_err());
        assert!(parse_field("MON", 0, 59, None, false).is_err());
        assert!(parse_field("1,,2", 0, 59, None, false).is_err());
        assert!(parse_field("?", 0, 59, None, false).is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("0 9 * *", "expression"),
            ("0 9 * * * *", "expression"),
            ("61 9 * * *", "minute"),
            ("0 24 * * *", "hour"),
            ("0 9 0 * *", "day-of-month"),
            ("0 9 * 13 *", "month"),
            ("0 9 * * 8", "day-of-week"),
            ("0 9 * * FUNDAY", "day-of-week"),
            ("0 0 31 2 *", "expression"),
            ("@reboot", "expression"),
        ];
        for (expr, field) in cases {
            match CronExpr::parse(expr) {
                Err(CronError::InvalidExpr { field: f, .. }) => assert_eq!(f, field, "{expr}"),
                other => panic!("{expr}: expected InvalidExpr, got {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_zone_rejected() {
        assert!(matches!(
            parse_tz("Mars/Olympus"),
            Err(CronError::UnknownTimezone { .. })
        ));
        assert_eq!(parse_tz("Europe/Berlin").unwrap(), chrono_tz::Europe::Berlin);
    }
}
