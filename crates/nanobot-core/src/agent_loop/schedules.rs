//! The schedules part (the `cron` feature): the cron service whose jobs run as turns, and the local triggers
//! (`/trigger`) kept beside its store.

use nanobot_cron::{CronService, TriggerStore};

/// The scheduled work of one loop.
#[derive(Default)]
pub(super) struct Schedules {
    pub(super) cron: Option<CronService>,
    pub(super) triggers: Option<TriggerStore>,
}
