//! The protected system jobs (Dream, heartbeat) as typed ids, and the one handler that runs them.

use crate::agent_loop::AgentLoop;
use crate::error::BoxError;

/// A protected cron job the agent runs itself (never an agent turn with a user's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SystemJob {
    /// Dream: consolidates long-term memory (`memory/MEMORY.md`) from the history.
    Dream,
    /// The heartbeat: reads `HEARTBEAT.md`, lets the model decide whether to run its tasks now.
    Heartbeat,
}

impl SystemJob {
    /// Every system job.
    pub const ALL: [SystemJob; 2] = [SystemJob::Dream, SystemJob::Heartbeat];

    /// The job's id in `cron/jobs.json` (what nanobot 0.3.5 writes).
    pub fn id(self) -> &'static str {
        match self {
            SystemJob::Dream => "dream",
            SystemJob::Heartbeat => "heartbeat",
        }
    }

    /// The job's display name.
    pub fn name(self) -> &'static str {
        match self {
            SystemJob::Dream => "Dream (memory consolidation)",
            SystemJob::Heartbeat => "Heartbeat",
        }
    }

    /// The system job with this cron id.
    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|j| j.id() == id)
    }
}

impl std::fmt::Display for SystemJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

impl AgentLoop {
    /// Runs a system job: the one handler behind the protected cron jobs. Dream answers with its report
    /// (nothing without long-term memory); the heartbeat with its decision
    /// ([`crate::HeartbeatOutcome::label`]: `empty`, `skip` or `run`).
    pub async fn run_system_job(&self, job: SystemJob) -> Result<String, BoxError> {
        match job {
            SystemJob::Dream => match self.memory_service() {
                Some(m) => {
                    if let Some(files) = self.hold_unattended("Dream").await {
                        return Err(
                            format!("held: Dream waits for /confirm-files ({})", files.join(", ")).into(),
                        );
                    }
                    m.dream_all().await
                }
                None => Ok(String::new()),
            },
            SystemJob::Heartbeat => Ok(self.heartbeat_tick().await?.label().to_owned()),
        }
    }
}

#[cfg(all(test, feature = "cron"))]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_match_the_protected_ids_of_the_cron_store() {
        for job in SystemJob::ALL {
            assert_eq!(SystemJob::from_id(job.id()), Some(job));
            assert!(nanobot_cron::PROTECTED_JOB_IDS.contains(&job.id()));
        }
        assert_eq!(SystemJob::from_id("backup"), None);
    }
}
