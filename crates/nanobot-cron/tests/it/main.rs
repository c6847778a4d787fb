//! Integration tests for nanobot-cron: schedules across DST, crontab semantics, the store (Python
//! fixture, concurrent processes, migration) and the scheduler with a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

mod schedules;
mod service;
mod store;
mod triggers;

use chrono::{DateTime, TimeZone, Utc};

/// A UTC instant.
pub(crate) fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}
