//! The protected system jobs (Dream, heartbeat) installed from the config: one owner, one schedule each.

use std::time::Duration;

use nanobot_config::Config;
use nanobot_core::{AgentLoop, SystemJob};
use nanobot_cron::CronSchedule;

use crate::error::RuntimeError;

/// Shortest heartbeat interval accepted (`gateway.heartbeat.intervalS` below it is raised to it).
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// The schedule `config` asks for `job`, or `None` when the job is disabled.
pub fn system_job_schedule(config: &Config, job: SystemJob) -> Option<CronSchedule> {
    match job {
        SystemJob::Dream => {
            let dream = &config.agents.defaults.dream;
            dream
                .enabled
                .then(|| CronSchedule::every(Duration::from_secs(u64::from(dream.interval_h.max(1)) * 3600)))
        }
        SystemJob::Heartbeat => {
            let hb = &config.gateway.heartbeat;
            hb.enabled
                .then(|| CronSchedule::every(Duration::from_secs(hb.interval_s).max(MIN_HEARTBEAT_INTERVAL)))
        }
        _ => None,
    }
}

/// Creates, updates or removes the protected system jobs of `agent`'s cron store from `config`: `dream` (every
/// `agents.defaults.dream.intervalH` hours, when enabled) and `heartbeat` (every `gateway.heartbeat.intervalS`
/// seconds, at least one, when enabled). The runtime calls it when it starts cron; a no-op without cron.
pub fn install_system_jobs(agent: &AgentLoop, config: &Config) -> Result<(), RuntimeError> {
    let Some(cron) = agent.cron() else { return Ok(()) };
    for job in SystemJob::ALL {
        match system_job_schedule(config, job) {
            Some(schedule) => {
                cron.upsert_system_job(job.id(), job.name(), schedule)?;
            }
            None => {
                cron.remove_system_job(job.id())?;
            }
        }
    }
    Ok(())
}
