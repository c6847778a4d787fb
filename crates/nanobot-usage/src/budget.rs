//! Budgets: limits per person, per chat and overall, per day and per month, in tokens or money.

use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::record::Tally;

/// One limit: tokens (input and output), money (in the price table's currency), or both; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limit {
    /// Tokens in and out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Limit {
    /// No limit at all.
    pub fn is_unlimited(&self) -> bool {
        self.tokens.is_none() && self.cost.is_none()
    }
}

/// `1000 tokens`, `$2.50`, `1000 tokens or $2.50`; nothing when unlimited.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tokens, self.cost) {
            (None, None) => Ok(()),
            (Some(t), None) => write!(f, "{t} tokens"),
            (None, Some(c)) => write!(f, "${c:.2}"),
            (Some(t), Some(c)) => write!(f, "{t} tokens or ${c:.2}"),
        }
    }
}

/// The limits of one kind of scope, per day and per month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Per day (from midnight in the agent's time zone).
    #[serde(default)]
    pub daily: Limit,
    /// Per calendar month (in the agent's time zone).
    #[serde(default)]
    pub monthly: Limit,
}

impl Limits {
    /// The limit of `period`.
    pub fn of(&self, period: Period) -> &Limit {
        match period {
            Period::Day => &self.daily,
            Period::Month => &self.monthly,
        }
    }

    /// No limit in either period.
    pub fn is_unlimited(&self) -> bool {
        self.daily.is_unlimited() && self.monthly.is_unlimited()
    }
}

/// Every limit: each person's, each chat's, and the whole assistant's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// Everything the assistant spends.
    #[serde(default)]
    pub overall: Limits,
    /// What each person's turns spend (unattended work counts against the chat it works for).
    #[serde(default)]
    pub per_person: Limits,
    /// What each chat spends, its unattended work (cron jobs, heartbeat, subagents) included.
    #[serde(default)]
    pub per_chat: Limits,
}

impl Budget {
    /// No limit anywhere.
    pub fn is_unlimited(&self) -> bool {
        self.overall.is_unlimited() && self.per_person.is_unlimited() && self.per_chat.is_unlimited()
    }

    /// The limits of a kind of scope.
    pub fn limits(&self, scope: &Scope) -> &Limits {
        match scope {
            Scope::Overall => &self.overall,
            Scope::Person(_) => &self.per_person,
            Scope::Chat(_) => &self.per_chat,
        }
    }
}

/// What a budget limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Everything.
    Overall,
    /// One person (`channel:user_id`).
    Person(String),
    /// One chat (`channel:chat_id`).
    Chat(String),
}

impl Scope {
    /// Its key under `agents.defaults.budget`.
    pub fn config_key(&self) -> &'static str {
        match self {
            Scope::Overall => "overall",
            Scope::Person(_) => "perPerson",
            Scope::Chat(_) => "perChat",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Overall => f.write_str("the assistant's overall"),
            Scope::Person(p) => write!(f, "the per-person (for {p})"),
            Scope::Chat(c) => write!(f, "the per-chat (for {c})"),
        }
    }
}

/// A budget period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// From midnight to midnight.
    Day,
    /// A calendar month.
    Month,
}

impl Period {
    /// `daily` / `monthly`, as in the configuration.
    pub fn config_key(self) -> &'static str {
        match self {
            Period::Day => "daily",
            Period::Month => "monthly",
        }
    }
}

/// A limit reached: a turn over it is refused, a running one stops at its next model call.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetExceeded {
    /// Whose limit.
    pub scope: Scope,
    /// Which period.
    pub period: Period,
    /// The limit that is reached.
    pub limit: Limit,
    /// What the scope spent in the period.
    pub spent: Tally,
    /// When the period ends.
    pub resets_at: DateTime<Tz>,
}

impl BudgetExceeded {
    /// The configuration key of the limit (`agents.defaults.budget.perChat.daily.tokens`).
    pub fn config_key(&self) -> String {
        let what = if self.limit.tokens.is_some_and(|t| self.spent.tokens() >= t) {
            "tokens"
        } else {
            "cost"
        };
        format!(
            "agents.defaults.budget.{}.{}.{what}",
            self.scope.config_key(),
            self.period.config_key()
        )
    }
}

impl fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let period = self.period.config_key();
        let (limit, spent) = match (self.limit.tokens, self.limit.cost) {
            (Some(t), _) if self.spent.tokens() >= t => (
                format!("{} tokens", group(t)),
                format!("{} used", group(self.spent.tokens())),
            ),
            (_, Some(c)) => (format!("${c:.2}"), format!("{} spent", self.spent.cost_text())),
            _ => ("its limit".to_owned(), String::new()),
        };
        write!(
            f,
            "{} {period} budget of {limit} is used up ({spent}); it resets at {} ({}). Limit: {}.",
            capitalised(&self.scope.to_string()),
            self.resets_at.format("%Y-%m-%d %H:%M"),
            self.resets_at.timezone().name(),
            self.config_key()
        )
    }
}

impl std::error::Error for BudgetExceeded {}

/// `1234567` → `1,234,567`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Whether `spent` reaches `limit` (a money limit counts the priced calls only).
pub(crate) fn reached(limit: &Limit, spent: &Tally) -> bool {
    limit.tokens.is_some_and(|t| spent.tokens() >= t) || limit.cost.is_some_and(|c| spent.cost >= c)
}

/// The start of the day and of the month holding `now` in `tz`, and the ends of both.
pub(crate) fn period_bounds(now: DateTime<Utc>, tz: Tz, period: Period) -> (DateTime<Tz>, DateTime<Tz>) {
    use chrono::{Datelike, Days, Months, NaiveDate, TimeZone};
    let local = now.with_timezone(&tz).date_naive();
    let start = match period {
        Period::Day => local,
        Period::Month => NaiveDate::from_ymd_opt(local.year(), local.month(), 1).unwrap_or(local),
    };
    let end = match period {
        Period::Day => start.checked_add_days(Days::new(1)),
        Period::Month => start.checked_add_months(Months::new(1)),
    }
    .unwrap_or(start);
    // Midnight may not exist (a zone that skips it): the first instant of the day that does.
    let at = |d: NaiveDate| {
        let midnight = d.and_hms_opt(0, 0, 0).unwrap_or_default();
        tz.from_local_datetime(&midnight)
            .earliest()
            .or_else(|| {
                tz.from_local_datetime(&(midnight + chrono::Duration::hours(1)))
                    .earliest()
            })
            .unwrap_or_else(|| now.with_timezone(&tz))
    };
    (at(start), at(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }

    #[test]
    fn periods_follow_the_agents_time_zone() {
        let tz: Tz = "Asia/Shanghai".parse().unwrap();
        // 2026-11-30 17:30 UTC is 2026-12-01 01:30 in Shanghai: a new day and a new month there.
        let now = "2026-11-30T17:30:00Z".parse::<DateTime<Utc>>().unwrap();
        let (start, end) = period_bounds(now, tz, Period::Day);
        assert_eq!(start.to_rfc3339(), "2026-12-01T00:00:00+08:00");
        assert_eq!(end.to_rfc3339(), "2026-12-02T00:00:00+08:00");
        let (start, end) = period_bounds(now, tz, Period::Month);
        assert_eq!(start.to_rfc3339(), "2026-12-01T00:00:00+08:00");
        assert_eq!(end.to_rfc3339(), "2027-01-01T00:00:00+08:00");
    }

    #[test]
    fn a_refusal_names_the_scope_the_limit_the_reset_and_the_key() {
        let tz: Tz = "UTC".parse().unwrap();
        let now = "2026-11-29T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let e = BudgetExceeded {
            scope: Scope::Chat("telegram:42".into()),
            period: Period::Day,
            limit: Limit {
                tokens: Some(10_000),
                cost: None,
            },
            spent: Tally {
                calls: 3,
                input: 9_000,
                output: 1_234,
                ..Tally::default()
            },
            resets_at: period_bounds(now, tz, Period::Day).1,
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "The per-chat (for telegram:42) daily budget of 10,000 tokens is used up (10,234 used); it resets at \
             2026-11-30 00:00 (UTC). Limit: agents.defaults.budget.perChat.daily.tokens."
        );
    }
}
