//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong with cron jobs, their schedules and their store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// A cron expression is malformed; `field` names the part (`minute`, `day-of-week`, …).
    #[error("invalid cron expression `{expr}`: {field}: {reason}")]
    InvalidExpr {
        /// The expression as given.
        expr: String,
        /// The offending field, or `expression` for the whole.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A time zone name that is not in the IANA database.
    #[error("unknown time zone `{tz}` (expected an IANA name such as `Europe/Berlin`)")]
    UnknownTimezone {
        /// The name as given.
        tz: String,
    },
    /// A schedule that cannot be used (missing field, non-positive interval, time in the past…).
    #[error("invalid schedule: {field}: {reason}")]
    InvalidSchedule {
        /// The offending field (`everyMs`, `atMs`, `tz`, `kind`, …).
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No job has this id.
    #[error("no cron job with id `{id}`")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The job is a protected system job (`dream`, `heartbeat`): it can be listed, not changed.
    #[error("cron job `{id}` is a protected system job: it can be listed but not removed or changed")]
    Protected {
        /// The job's id.
        id: String,
    },
    /// The job is disabled (run it with `force`).
    #[error("cron job `{id}` is disabled")]
    Disabled {
        /// The job's id.
        id: String,
    },
    /// The job is running right now.
    #[error("cron job `{id}` is already running")]
    AlreadyRunning {
        /// The job's id.
        id: String,
    },
    /// Reading, writing or locking a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The store file is not valid JSON of the expected shape (it is left untouched).
    #[error("{}: cannot parse cron store: {source}", path.display())]
    Parse {
        /// The store file.
        path: PathBuf,
        /// The JSON error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The store shared by gateway replicas ([`crate::JobStore::with_shared`]) could not bring `jobs.json` up
    /// to date or publish a change (another replica changed it first: nothing was stored, try again).
    #[error(transparent)]
    Shared(#[from] nanobot_util::SharedFilesError),
}
