//! Which jobs may run unattended: those created (or confirmed) through the `cron` tool or the CLI.
//!
//! The cron store lives in the workspace, where the model can write files. A job planted there by a file
//! write, or a job whose schedule or payload a file write changed, must not run with nobody watching. The
//! [`TrustLedger`] keeps, outside the workspace (normally `<data dir>/cron/trusted.json`, which no tool can
//! reach), the fingerprints (SHA-256 of id, schedule and payload) of the jobs the service itself added or
//! the user confirmed. The scheduler holds any other job: it does not run it and never changes it in the store
//! (which the Python nanobot may share: its own scheduler must still see the job as its owner left it); it
//! reports each version of a held job once (the log, and the job's chat through the runtime), and `nanobot cron
//! list` marks it; `nanobot cron enable <id>` confirms it.
//!
//! When the ledger does not exist yet (an upgrade), the jobs already in the store are trusted once
//! ([`TrustLedger::baseline_if_missing`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::CronError;
use crate::model::CronJob;
use crate::store::JobStore;

/// The trusted fingerprints as read at one moment ([`TrustLedger::snapshot`]).
#[derive(Debug, Clone, Default)]
pub struct TrustedJobs(BTreeSet<String>);

impl TrustedJobs {
    /// Whether `job`, as it is now, was trusted.
    pub fn contains(&self, job: &CronJob) -> bool {
        self.0.contains(&TrustLedger::fingerprint(job))
    }
}

/// The trusted fingerprints, in a file outside the workspace.
#[derive(Debug, Clone)]
pub struct TrustLedger {
    path: PathBuf,
}

impl TrustLedger {
    /// A ledger kept at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint of what a job does: its id, schedule and payload (not its run state).
    pub fn fingerprint(job: &CronJob) -> String {
        let mut h = Sha256::new();
        h.update(job.id.as_bytes());
        h.update([0]);
        h.update(serde_json::to_vec(&job.schedule).unwrap_or_default());
        h.update([0]);
        h.update(serde_json::to_vec(&job.payload).unwrap_or_default());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn io(&self, source: std::io::Error) -> CronError {
        CronError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn load(&self) -> Result<Option<BTreeSet<String>>, CronError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| CronError::Parse {
                    path: self.path.clone(),
                    source,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(e)),
        }
    }

    fn save(&self, set: &BTreeSet<String>) -> Result<(), CronError> {
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        let json = serde_json::to_vec_pretty(set).map_err(|source| CronError::Parse {
            path: self.path.clone(),
            source,
        })?;
        nanobot_util::write_atomic(&self.path, &json).map_err(|e| CronError::Io {
            path: e.path,
            source: e.source,
        })?;
        Ok(())
    }

    /// Trusts `job` as it is now.
    pub fn trust(&self, job: &CronJob) -> Result<(), CronError> {
        let mut set = self.load()?.unwrap_or_default();
        if set.insert(Self::fingerprint(job)) {
            self.save(&set)?;
        }
        Ok(())
    }

    /// Whether `job`, as it is now, was trusted.
    pub fn is_trusted(&self, job: &CronJob) -> Result<bool, CronError> {
        Ok(self.snapshot()?.contains(job))
    }

    /// The trusted jobs as the ledger holds them now, read once for a pass over many jobs.
    pub fn snapshot(&self) -> Result<TrustedJobs, CronError> {
        Ok(TrustedJobs(self.load()?.unwrap_or_default()))
    }

    /// Without a ledger yet (first start of this version), trusts every job in `store` once. Returns how
    /// many were trusted (0 when the ledger already existed).
    pub fn baseline_if_missing(&self, store: &JobStore) -> Result<usize, CronError> {
        if self.load()?.is_some() {
            return Ok(0);
        }
        let set: BTreeSet<String> = store.load()?.jobs.iter().map(Self::fingerprint).collect();
        self.save(&set)?;
        Ok(set.len())
    }
}
