//! The job model, in the Python nanobot's `cron/jobs.json` format.
//!
//! Keys are written in camelCase; camelCase and snake_case are both read. Fields this crate does not
//! know are kept in `extra` maps and written back, so a file written by a newer version survives a
//! load/save round trip.

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::CronError;
use crate::schedule::{CronExpr, parse_tz};

/// Run history entries kept per job.
pub const RUN_HISTORY_CAP: usize = 20;

/// `payload.kind` of ordinary jobs: the message becomes an agent turn.
pub const PAYLOAD_AGENT_TURN: &str = "agent_turn";
/// `payload.kind` of system jobs (`dream`, `heartbeat`).
pub const PAYLOAD_SYSTEM_EVENT: &str = "system_event";
/// Ids of the protected system jobs.
pub const PROTECTED_JOB_IDS: [&str; 2] = ["dream", "heartbeat"];

/// `lastStatus` / run record status values.
pub mod status {
    /// The handler returned `Ok`.
    pub const OK: &str = "ok";
    /// The handler returned `Err` (the message is in `lastError`).
    pub const ERROR: &str = "error";
    /// The run was skipped.
    pub const SKIPPED: &str = "skipped";
    /// The job was not run here: nanobot-rs does not trust it yet ([`crate::trust`]). Only reported to
    /// [`crate::CronService::subscribe`]rs, never written to the store.
    pub const HELD: &str = "held";
}

fn yes() -> bool {
    true
}

/// `null` reads as the type's default.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Milliseconds as an integer or a float (Python may write either).
fn ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        _ => None,
    })
}

fn ms_required<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(ms(d)?.unwrap_or_default())
}

/// Which kind of schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// One-shot at `atMs`.
    At,
    /// Every `everyMs` milliseconds.
    Every,
    /// A 5-field crontab `expr` in zone `tz`.
    Cron,
}

/// When a job runs (`schedule` in jobs.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CronSchedule {
    /// The kind.
    pub kind: ScheduleKind,
    /// `at`: epoch milliseconds.
    #[serde(default, alias = "at_ms", deserialize_with = "ms")]
    pub at_ms: Option<i64>,
    /// `every`: interval in milliseconds.
    #[serde(default, alias = "every_ms", deserialize_with = "ms")]
    pub every_ms: Option<i64>,
    /// `cron`: the 5-field expression.
    #[serde(default)]
    pub expr: Option<String>,
    /// `cron`: IANA zone (the service's default zone when absent).
    #[serde(default)]
    pub tz: Option<String>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CronSchedule {
    /// A one-shot schedule.
    pub fn at(when: DateTime<Utc>) -> Self {
        Self::new(ScheduleKind::At, Some(when.timestamp_millis()), None, None, None)
    }

    /// An interval schedule.
    pub fn every(interval: std::time::Duration) -> Self {
        let ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        Self::new(ScheduleKind::Every, None, Some(ms), None, None)
    }

    /// A crontab schedule, optionally in a zone.
    pub fn cron(expr: impl Into<String>, tz: Option<String>) -> Self {
        Self::new(ScheduleKind::Cron, None, None, Some(expr.into()), tz)
    }

    fn new(
        kind: ScheduleKind,
        at_ms: Option<i64>,
        every_ms: Option<i64>,
        expr: Option<String>,
        tz: Option<String>,
    ) -> Self {
        CronSchedule {
            kind,
            at_ms,
            every_ms,
            expr,
            tz,
            extra: Map::new(),
        }
    }

    /// Parses an ISO 8601 time for an `at` schedule. A time without an offset is read on the wall
    /// clock of `default_tz`.
    pub fn parse_at(text: &str, default_tz: Tz) -> Result<DateTime<Utc>, CronError> {
        let text = text.trim();
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return Ok(t.with_timezone(&Utc));
        }
        for fmt in [
            "%Y-%m-%dT%H:%M:%S%.f",
            "%Y-%m-%dT%H:%M",
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%d %H:%M",
        ] {
            if let Ok(naive) = NaiveDateTime::parse_from_str(text, fmt) {
                return default_tz
                    .from_local_datetime(&naive)
                    .earliest()
                    .map(|t| t.with_timezone(&Utc))
                    .ok_or_else(|| CronError::InvalidSchedule {
                        field: "at",
                        reason: format!("`{text}` does not exist in {default_tz} (daylight-saving gap)"),
                    });
            }
        }
        Err(CronError::InvalidSchedule {
            field: "at",
            reason: format!("`{text}` is not an ISO 8601 time such as 2026-05-01T09:00:00+02:00"),
        })
    }

    /// Checks that the schedule can run: the fields its kind needs are present and valid, the
    /// expression parses, the zone exists.
    pub fn validate(&self) -> Result<(), CronError> {
        let invalid = |field: &'static str, reason: &str| CronError::InvalidSchedule {
            field,
            reason: reason.to_owned(),
        };
        if let Some(tz) = &self.tz {
            parse_tz(tz)?;
        }
        match self.kind {
            ScheduleKind::At => {
                self.at_ms
                    .ok_or_else(|| invalid("atMs", "an `at` schedule needs a time"))?;
            }
            ScheduleKind::Every => {
                let every = self
                    .every_ms
                    .ok_or_else(|| invalid("everyMs", "an `every` schedule needs an interval"))?;
                if every < 1000 {
                    return Err(invalid("everyMs", "the interval must be at least 1 second"));
                }
            }
            ScheduleKind::Cron => {
                let expr = self
                    .expr
                    .as_deref()
                    .ok_or_else(|| invalid("expr", "a `cron` schedule needs an expression"))?;
                CronExpr::parse(expr)?;
            }
        }
        Ok(())
    }

    /// The first run strictly after `after_ms` (epoch ms), or `None` when the schedule has no further
    /// run (`at` in the past). `default_tz` applies to `cron` schedules without `tz`.
    pub fn next_run_after(&self, after_ms: i64, default_tz: Tz) -> Result<Option<i64>, CronError> {
        self.validate()?;
        Ok(match self.kind {
            ScheduleKind::At => self.at_ms.filter(|at| *at > after_ms),
            ScheduleKind::Every => self.every_ms.map(|every| after_ms.saturating_add(every)),
            ScheduleKind::Cron => {
                let expr = CronExpr::parse(self.expr.as_deref().unwrap_or_default())?;
                let tz = match &self.tz {
                    Some(tz) => parse_tz(tz)?,
                    None => default_tz,
                };
                let after = Utc.timestamp_millis_opt(after_ms).single().ok_or_else(|| {
                    CronError::InvalidSchedule {
                        field: "after",
                        reason: format!("{after_ms} ms is out of range"),
                    }
                })?;
                expr.next_after(after, tz).map(|t| t.timestamp_millis())
            }
        })
    }

    /// A short human description: `every 1h`, `cron 0 9 * * MON-FRI (Europe/Berlin)`, `at 2026-…`.
    pub fn describe(&self) -> String {
        match self.kind {
            ScheduleKind::At => match self.at_ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single()) {
                Some(t) => format!("at {}", t.to_rfc3339()),
                None => "at ?".into(),
            },
            ScheduleKind::Every => match self.every_ms {
                Some(ms) if ms % 3_600_000 == 0 => format!("every {}h", ms / 3_600_000),
                Some(ms) if ms % 60_000 == 0 => format!("every {}m", ms / 60_000),
                Some(ms) => format!("every {}s", ms / 1000),
                None => "every ?".into(),
            },
            ScheduleKind::Cron => {
                let expr = self.expr.as_deref().unwrap_or("?");
                match &self.tz {
                    Some(tz) => format!("cron {expr} ({tz})"),
                    None => format!("cron {expr}"),
                }
            }
        }
    }
}

/// Schedule parameters as the `cron` tool (`every_seconds`, `cron_expr`, `tz`, `at`) and the CLI
/// (`--every`, `--cron`, `--tz`, `--at`) take them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleArgs {
    /// Interval in seconds (0 counts as absent, like in the Python tool).
    pub every_seconds: Option<i64>,
    /// 5-field crontab expression.
    pub cron_expr: Option<String>,
    /// IANA zone; only with `cron_expr`.
    pub tz: Option<String>,
    /// ISO 8601 time for a one-shot job (without an offset: the default zone's wall clock).
    pub at: Option<String>,
}

impl CronSchedule {
    /// Builds and validates a schedule from tool/CLI arguments: exactly one of `every_seconds`,
    /// `cron_expr`, `at`; `tz` only together with `cron_expr`. Errors name the argument.
    pub fn from_args(args: &ScheduleArgs, default_tz: Tz) -> Result<Self, CronError> {
        let invalid = |field: &'static str, reason: &str| CronError::InvalidSchedule {
            field,
            reason: reason.to_owned(),
        };
        let every = args.every_seconds.filter(|s| *s != 0);
        let expr = args.cron_expr.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let at = args.at.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let tz = args.tz.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let given = usize::from(every.is_some()) + usize::from(expr.is_some()) + usize::from(at.is_some());
        if given == 0 {
            return Err(invalid("schedule", "give one of every_seconds, cron_expr or at"));
        }
        if given > 1 {
            return Err(invalid(
                "schedule",
                "give only one of every_seconds, cron_expr or at",
            ));
        }
        if tz.is_some() && expr.is_none() {
            return Err(invalid("tz", "tz can only be used with cron_expr"));
        }
        let schedule = if let Some(secs) = every {
            if secs < 1 {
                return Err(invalid("every_seconds", "must be a positive number of seconds"));
            }
            Self::new(
                ScheduleKind::Every,
                None,
                Some(secs.saturating_mul(1000)),
                None,
                None,
            )
        } else if let Some(expr) = expr {
            Self::cron(expr, tz.map(str::to_owned))
        } else {
            Self::at(Self::parse_at(at.unwrap_or_default(), default_tz)?)
        };
        schedule.validate()?;
        Ok(schedule)
    }
}

/// What a job does when it fires (`payload` in jobs.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CronPayload {
    /// [`PAYLOAD_AGENT_TURN`] or [`PAYLOAD_SYSTEM_EVENT`].
    #[serde(default = "agent_turn", deserialize_with = "kind_or_default")]
    pub kind: String,
    /// The prompt for the agent turn.
    #[serde(default, deserialize_with = "nullable")]
    pub message: String,
    /// Whether the answer is sent to `channel`/`to`.
    #[serde(default, deserialize_with = "nullable")]
    pub deliver: bool,
    /// Channel to deliver to.
    #[serde(default)]
    pub channel: Option<String>,
    /// Chat id to deliver to.
    #[serde(default)]
    pub to: Option<String>,
    /// Channel-specific delivery metadata.
    #[serde(default, alias = "channel_meta", deserialize_with = "nullable")]
    pub channel_meta: Map<String, Value>,
    /// The session the turn runs in.
    #[serde(default, alias = "session_key")]
    pub session_key: Option<String>,
    /// Channel of the chat that created the job.
    #[serde(default, alias = "origin_channel")]
    pub origin_channel: Option<String>,
    /// Chat that created the job.
    #[serde(default, alias = "origin_chat_id")]
    pub origin_chat_id: Option<String>,
    /// Metadata of the creating message.
    #[serde(default, alias = "origin_metadata", deserialize_with = "nullable")]
    pub origin_metadata: Map<String, Value>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn agent_turn() -> String {
    PAYLOAD_AGENT_TURN.to_owned()
}

fn kind_or_default<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(agent_turn))
}

impl Default for CronPayload {
    fn default() -> Self {
        CronPayload {
            kind: agent_turn(),
            message: String::new(),
            deliver: false,
            channel: None,
            to: None,
            channel_meta: Map::new(),
            session_key: None,
            origin_channel: None,
            origin_chat_id: None,
            origin_metadata: Map::new(),
            extra: Map::new(),
        }
    }
}

impl CronPayload {
    /// An agent-turn payload with this prompt.
    pub fn agent_turn(message: impl Into<String>) -> Self {
        CronPayload {
            message: message.into(),
            ..Self::default()
        }
    }

    /// True for a session-bound agent job as the Python nanobot 0.3.5 writes them: session and origin chat
    /// set, and none of the older delivery fields (`deliver`, `channel`, `to`, `channelMeta`). Its answer
    /// goes back to the origin chat.
    pub fn is_bound(&self) -> bool {
        self.kind == PAYLOAD_AGENT_TURN
            && self.session_key.as_deref().is_some_and(|s| !s.is_empty())
            && self.origin_channel.as_deref().is_some_and(|s| !s.is_empty())
            && self.origin_chat_id.as_deref().is_some_and(|s| !s.is_empty())
            && !self.deliver
            && self.channel.as_deref().is_none_or(str::is_empty)
            && self.to.as_deref().is_none_or(str::is_empty)
            && self.channel_meta.is_empty()
    }

    /// A system-event payload (for `dream` / `heartbeat`).
    pub fn system_event() -> Self {
        CronPayload {
            kind: PAYLOAD_SYSTEM_EVENT.to_owned(),
            ..Self::default()
        }
    }
}

/// One past run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunRecord {
    /// When it started (epoch ms).
    #[serde(alias = "run_at_ms", deserialize_with = "ms_required", default)]
    pub run_at_ms: i64,
    /// See [`status`].
    #[serde(default, deserialize_with = "nullable")]
    pub status: String,
    /// How long it took.
    #[serde(default, alias = "duration_ms", deserialize_with = "ms_required")]
    pub duration_ms: i64,
    /// The error, when it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl RunRecord {
    /// A record of a run.
    pub fn new(run_at_ms: i64, status: &str, duration_ms: i64, error: Option<String>) -> Self {
        RunRecord {
            run_at_ms,
            status: status.to_owned(),
            duration_ms,
            error,
            extra: Map::new(),
        }
    }
}

/// Scheduler state of a job (`state` in jobs.json).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CronJobState {
    /// Next planned run (epoch ms).
    #[serde(default, alias = "next_run_at_ms", deserialize_with = "ms")]
    pub next_run_at_ms: Option<i64>,
    /// Last run start (epoch ms).
    #[serde(default, alias = "last_run_at_ms", deserialize_with = "ms")]
    pub last_run_at_ms: Option<i64>,
    /// Last run's status (see [`status`]).
    #[serde(default, alias = "last_status")]
    pub last_status: Option<String>,
    /// Last run's error.
    #[serde(default, alias = "last_error")]
    pub last_error: Option<String>,
    /// The latest runs, oldest first, at most [`RUN_HISTORY_CAP`].
    #[serde(default, alias = "run_history", deserialize_with = "nullable")]
    pub run_history: Vec<RunRecord>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CronJobState {
    /// Records a run: sets the `last*` fields and appends to the capped history.
    pub fn record(&mut self, run: RunRecord) {
        self.last_run_at_ms = Some(run.run_at_ms);
        self.last_status = Some(run.status.clone());
        self.last_error = run.error.clone();
        self.run_history.push(run);
        let excess = self.run_history.len().saturating_sub(RUN_HISTORY_CAP);
        self.run_history.drain(..excess);
    }
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CronJob {
    /// Unique id (8 hex characters for new jobs; `dream`/`heartbeat` for system jobs).
    pub id: String,
    /// Display name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Disabled jobs never fire.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// When it runs.
    pub schedule: CronSchedule,
    /// What it does.
    #[serde(default)]
    pub payload: CronPayload,
    /// Scheduler state.
    #[serde(default, deserialize_with = "nullable")]
    pub state: CronJobState,
    /// Creation time (epoch ms).
    #[serde(default, alias = "created_at_ms", deserialize_with = "ms_required")]
    pub created_at_ms: i64,
    /// Last edit (epoch ms).
    #[serde(default, alias = "updated_at_ms", deserialize_with = "ms_required")]
    pub updated_at_ms: i64,
    /// One-shot jobs are deleted after they ran (otherwise disabled).
    #[serde(default, alias = "delete_after_run", deserialize_with = "nullable")]
    pub delete_after_run: bool,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CronJob {
    /// A new enabled job created (and last edited) at `now_ms`, due next at `next_run_at_ms`, kept after it ran.
    pub(crate) fn created(
        id: String,
        name: String,
        schedule: CronSchedule,
        payload: CronPayload,
        next_run_at_ms: Option<i64>,
        now_ms: i64,
    ) -> Self {
        Self {
            id,
            name,
            enabled: true,
            schedule,
            payload,
            state: CronJobState {
                next_run_at_ms,
                ..Default::default()
            },
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            delete_after_run: false,
            extra: Map::new(),
        }
    }

    /// Whether this is a protected system job (by id, or by a `system_event` payload).
    pub fn is_protected(&self) -> bool {
        PROTECTED_JOB_IDS.contains(&self.id.as_str()) || self.payload.kind == PAYLOAD_SYSTEM_EVENT
    }

    /// One line for listings (tool and CLI), times shown in `tz`:
    /// `- Morning brief (id: 1a2b3c4d, cron 0 9 * * MON-FRI (Europe/Berlin), next: 2026-03-30 09:00 CEST, last: ok)`.
    pub fn describe(&self, tz: Tz) -> String {
        let when = |ms: Option<i64>| {
            ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single())
                .map(|t| t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string())
        };
        let mut line = format!("- {} (id: {}, {}", self.name, self.id, self.schedule.describe());
        if !self.enabled {
            line.push_str(", disabled");
        } else if let Some(next) = when(self.state.next_run_at_ms) {
            line.push_str(&format!(", next: {next}"));
        }
        if let Some(status) = &self.state.last_status {
            line.push_str(&format!(", last: {status}"));
        }
        line.push(')');
        if self.is_protected() {
            line.push_str(" [system job: view only]");
        }
        line
    }
}
