//! Scheduled jobs for nanobot: the store, the schedules and the scheduler; and local triggers, jobs fired from
//! outside ([`triggers`]: `/trigger` and `nanobot trigger`).
//!
//! This crate owns `<workspace>/cron/jobs.json` in the Python nanobot's format ([`JobStore`]: atomic
//! writes, an advisory lock, changes by other processes picked up and merged by job id), the three
//! schedule kinds ([`CronSchedule`]: `at`, `every`, and 5-field crontab expressions in IANA zones with
//! crontab's semantics, see [`CronExpr`]), and [`CronService`], which fires due jobs through a callback
//! and records their state. Missed runs after downtime fire once. The system jobs `dream` and
//! `heartbeat` are protected from the tool-facing operations.
//!
//! It knows nothing of agents, sessions or channels: the agent core passes a [`JobHandler`] (and a
//! [`triggers::TriggerHandler`]) that runs the job's message as a turn and delivers the answer. It never reads the process environment; the
//! store path, legacy path and default zone are passed in.
//!
//! ```
//! use std::sync::Arc;
//! use chrono::{TimeZone, Utc};
//! use nanobot_cron::{CronPayload, CronSchedule, CronService, JobStore, ManualClock, NewJob};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 8, 0, 0).unwrap());
//! let service = CronService::new(
//!     JobStore::new(dir.path().join("cron/jobs.json")),
//!     Arc::new(|job: nanobot_cron::CronJob| Box::pin(async move { Ok(format!("did: {}", job.payload.message)) })),
//! )
//! .with_clock(Arc::new(clock.clone()))
//! .with_default_tz(chrono_tz::Europe::Berlin);
//!
//! let job = service
//!     .add(NewJob::new(CronSchedule::cron("0 9 * * MON-FRI", None), CronPayload::agent_turn("Morning brief")))
//!     .unwrap();
//! // 09:00 in Berlin is 08:00 UTC in winter
//! assert_eq!(job.state.next_run_at_ms, Some(Utc.with_ymd_and_hms(2026, 3, 3, 8, 0, 0).unwrap().timestamp_millis()));
//!
//! clock.advance(chrono::Duration::days(1));
//! let ran = service.tick().await.unwrap();
//! assert_eq!(ran[0].output.as_deref(), Some("did: Morning brief"));
//! # });
//! ```

pub mod actions;
mod clock;
mod error;
mod model;
mod schedule;
mod service;
mod store;
pub mod triggers;
pub mod trust;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::CronError;
pub use model::{
    CronJob, CronJobState, CronPayload, CronSchedule, PAYLOAD_AGENT_TURN, PAYLOAD_SYSTEM_EVENT,
    PROTECTED_JOB_IDS, RUN_HISTORY_CAP, RunRecord, ScheduleArgs, ScheduleKind, status,
};
pub use schedule::{CronExpr, parse_tz};
pub use service::{BoxError, CronService, JobHandler, NewJob, RunOutcome};
pub use store::{JobStore, SHARED_CHANGE_ATTEMPTS, SHARED_JOBS_NAME, StoreFile};
pub use triggers::{LocalTrigger, TriggerDelivery, TriggerError, TriggerQueue, TriggerStore};
pub use trust::{TrustLedger, TrustedJobs};
