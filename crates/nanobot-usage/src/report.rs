//! Totals over any span, grouped: what `nanobot usage` prints.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::error::UsageError;
use crate::price::PriceTable;
use crate::record::{Tally, UsageRecord};

/// How a report groups calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupBy {
    /// By local day (`2026-11-29`).
    Day,
    /// By model.
    Model,
    /// By chat (`channel:chat_id`).
    Chat,
    /// By person (`channel:user_id`; unattended work as `(cron)`, `(heartbeat)`…).
    Person,
}

impl GroupBy {
    /// `day`, `model`, `chat` or `person`, as parsed.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Day => "day",
            GroupBy::Model => "model",
            GroupBy::Chat => "chat",
            GroupBy::Person => "person",
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "day" => Ok(GroupBy::Day),
            "model" => Ok(GroupBy::Model),
            "chat" => Ok(GroupBy::Chat),
            "person" => Ok(GroupBy::Person),
            other => Err(format!(
                "cannot group by {other:?}: use day, model, chat or person"
            )),
        }
    }
}

/// One group of a report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    /// The group's name.
    pub key: String,
    /// Its calls.
    pub tally: Tally,
}

/// Totals of the calls in a ledger directory since a time, grouped.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The groups, in key order.
    pub rows: Vec<ReportRow>,
    /// Everything.
    pub total: Tally,
    /// Lines that could not be read (named in the log).
    pub unreadable: usize,
}

impl Report {
    /// Reads the month files in `dir` (`<data dir>/usage`) for calls at or after `since` that `keep` accepts,
    /// grouped by `by` (days in `tz`). A missing directory is an empty report.
    pub fn read(
        dir: &Path,
        tz: Tz,
        prices: &PriceTable,
        since: Option<DateTime<Utc>>,
        by: GroupBy,
        keep: impl Fn(&UsageRecord) -> bool,
    ) -> Result<Self, UsageError> {
        let mut groups: BTreeMap<String, Tally> = BTreeMap::new();
        let mut total = Tally::default();
        let mut unreadable = 0;
        let first_month = since.map(|s| s.with_timezone(&tz).format("%Y-%m").to_string());
        let mut months: Vec<_> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let month = name.strip_suffix(".jsonl")?.to_owned();
                    is_month(&month).then_some((month, e.path()))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(UsageError::Io {
                    op: "list",
                    path: dir.to_owned(),
                    source,
                });
            }
        };
        months.retain(|(m, _)| first_month.as_ref().is_none_or(|f| m >= f));
        months.sort();
        for (_, path) in months {
            let file = std::fs::File::open(&path).map_err(|source| UsageError::Io {
                op: "open",
                path: path.clone(),
                source,
            })?;
            for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
                let line = line.map_err(|source| UsageError::Io {
                    op: "read",
                    path: path.clone(),
                    source,
                })?;
                if line.trim().is_empty() {
                    continue;
                }
                let record: UsageRecord = match serde_json::from_str(&line) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(file = %path.display(), line = n + 1, error = %e, "a usage record cannot be read");
                        unreadable += 1;
                        continue;
                    }
                };
                if since.is_some_and(|s| record.ts < s) || !keep(&record) {
                    continue;
                }
                let cost = prices.cost(&record);
                let key = match by {
                    GroupBy::Day => record.ts.with_timezone(&tz).format("%Y-%m-%d").to_string(),
                    GroupBy::Model => record.model.clone(),
                    GroupBy::Chat => record.chat.clone(),
                    GroupBy::Person => match (&record.person, &record.run) {
                        (Some(p), _) => p.clone(),
                        (None, Some(run)) => format!("({run})"),
                        (None, None) => "(nobody)".to_owned(),
                    },
                };
                groups.entry(key).or_default().add(&record, cost);
                total.add(&record, cost);
            }
        }
        Ok(Self {
            rows: groups
                .into_iter()
                .map(|(key, tally)| ReportRow { key, tally })
                .collect(),
            total,
            unreadable,
        })
    }
}

/// `2026-11`.
fn is_month(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7 && b[4] == b'-' && b.iter().enumerate().all(|(i, c)| i == 4 || c.is_ascii_digit())
}
