//! `nanobot usage`: what the assistant spent, from the home's usage ledger, grouped by day, model, chat or person,
//! with the configured budgets.

use std::fmt::Write as _;

use chrono::{Duration, Utc};
use nanobot_usage::{Budget, Limits, Report, Tally};

use crate::args::UsageArgs;
use crate::error::CliError;
use crate::setup::{self, CliEnv};

/// The report `args` ask for.
pub(crate) fn usage_text(env: &CliEnv, args: &UsageArgs) -> Result<String, CliError> {
    let s = setup::load(env, &args.config, false)?;
    let core_env = env.core_env(&s.paths);
    let config = &s.loaded.config;
    let ledger = nanobot_runtime::usage_ledger(config, &core_env, None)?;
    let tz = ledger.time_zone();
    let since = (args.days > 0).then(|| Utc::now() - Duration::days(i64::from(args.days)));
    let report = Report::read(ledger.dir(), tz, ledger.prices(), since, args.by, |r| {
        args.chat.as_ref().is_none_or(|c| &r.chat == c)
            && args.person.as_ref().is_none_or(|p| r.person.as_ref() == Some(p))
    })
    .map_err(|e| CliError::Failed(e.to_string()))?;
    let mut out = String::new();
    let span = match since {
        Some(t) => format!(
            "since {} (the last {} days)",
            t.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
            args.days
        ),
        None => "all recorded".to_owned(),
    };
    let _ = writeln!(
        out,
        "Usage {span}, by {}, times in {} ({}):",
        args.by.name(),
        tz.name(),
        ledger.dir().display()
    );
    if report.rows.is_empty() {
        let _ = writeln!(out, "  no model calls recorded");
    } else {
        let width = report
            .rows
            .iter()
            .map(|r| r.key.chars().count())
            .max()
            .unwrap_or(0)
            .max(5);
        let _ = writeln!(
            out,
            "  {:<width$}  {:>7}  {:>12}  {:>12}  {:>12}  {:>12}  COST",
            args.by.name().to_uppercase(),
            "CALLS",
            "TOKENS IN",
            "TOKENS OUT",
            "CACHED",
            "REASONING"
        );
        for row in &report.rows {
            let _ = writeln!(out, "  {}", line(&row.key, &row.tally, width));
        }
        let _ = writeln!(out, "  {}", line("TOTAL", &report.total, width));
    }
    if report.unreadable > 0 {
        let _ = writeln!(
            out,
            "  ({} unreadable line(s) left out; the log names them)",
            report.unreadable
        );
    }
    out.push_str(&budget_text(ledger.budget()));
    Ok(out)
}

fn line(key: &str, t: &Tally, width: usize) -> String {
    format!(
        "{key:<width$}  {:>7}  {:>12}  {:>12}  {:>12}  {:>12}  {}",
        t.calls,
        t.input,
        t.output,
        t.cached,
        t.reasoning,
        t.cost_text()
    )
}

/// The budgets, one line per limit set (`agents.defaults.budget`).
pub(crate) fn budget_text(budget: &Budget) -> String {
    match budget_parts(budget) {
        parts if parts.is_empty() => "Budget: none (agents.defaults.budget)\n".to_owned(),
        parts => {
            let mut out = String::from("Budget (agents.defaults.budget):\n");
            for p in parts {
                let _ = writeln!(out, "  {p}");
            }
            out
        }
    }
}

/// Each scope's limits, as `per chat: 1000 tokens a day`.
pub(crate) fn budget_parts(budget: &Budget) -> Vec<String> {
    [
        ("overall", &budget.overall),
        ("per person", &budget.per_person),
        ("per chat", &budget.per_chat),
    ]
    .into_iter()
    .filter_map(|(name, limits)| limits_text(limits).map(|t| format!("{name}: {t}")))
    .collect()
}

fn limits_text(l: &Limits) -> Option<String> {
    let parts: Vec<String> = [("a day", &l.daily), ("a month", &l.monthly)]
        .into_iter()
        .filter(|(_, limit)| !limit.is_unlimited())
        .map(|(period, limit)| format!("{limit} {period}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}
