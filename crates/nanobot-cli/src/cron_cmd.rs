//! `nanobot cron list | add | remove | enable | run`, on `<workspace>/cron/jobs.json` (the same store the
//! gateway and the `cron` tool use; the file is locked and merged, so this works while a gateway runs).

use std::fmt::Write as _;
use std::sync::Arc;

use chrono_tz::Tz;
use nanobot_cron::{CronPayload, CronSchedule, CronService, JobHandler, JobStore, NewJob, ScheduleArgs};

use crate::args::CronAddArgs;
use crate::error::CliError;
use crate::setup::Setup;

/// The user's zone (`agents.defaults.timezone`), UTC when unset or unknown.
pub(crate) fn user_tz(setup: &Setup) -> Tz {
    setup
        .loaded
        .config
        .agents
        .defaults
        .timezone
        .trim()
        .parse()
        .unwrap_or(Tz::UTC)
}

/// The store of this setup's workspace; an old `~/.nanobot/cron/jobs.json` is migrated into it first.
pub(crate) fn store(setup: &Setup) -> Result<JobStore, CliError> {
    let store = JobStore::new(nanobot_config::paths::workspace::cron_jobs(&setup.workspace));
    let legacy = setup.paths.data_dir().join("cron").join("jobs.json");
    if legacy != store.path() && legacy.exists() {
        store.migrate_from(&legacy)?;
    }
    Ok(store)
}

/// A handler for commands that never run jobs.
fn no_runs() -> JobHandler {
    Arc::new(|job: nanobot_cron::CronJob| {
        Box::pin(async move { Err(format!("job {} cannot run from this command", job.id).into()) })
    })
}

/// The service over this setup's store, running jobs with `handler` (or refusing to run any).
pub(crate) fn service(setup: &Setup, handler: Option<JobHandler>) -> Result<CronService, CliError> {
    let store = store(setup)?;
    // What the CLI adds or enables is the user's own: trusted to run unattended (nanobot_cron::trust).
    let ledger = nanobot_cron::TrustLedger::new(setup.paths.data_dir().join("cron").join("trusted.json"));
    ledger.baseline_if_missing(&store)?;
    Ok(CronService::new(store, handler.unwrap_or_else(no_runs))
        .with_default_tz(user_tz(setup))
        .with_ledger(ledger))
}

/// `cron list`.
pub(crate) fn list_text(setup: &Setup, all: bool) -> Result<String, CliError> {
    let svc = service(setup, None)?;
    let tz = user_tz(setup);
    let jobs = svc.list()?;
    let shown: Vec<_> = jobs.iter().filter(|j| all || j.enabled).collect();
    if shown.is_empty() {
        return Ok(if jobs.is_empty() {
            "No scheduled jobs.\n".to_owned()
        } else {
            "No enabled jobs (use --all to see disabled ones).\n".to_owned()
        });
    }
    let mut out = String::new();
    for j in shown {
        let _ = writeln!(out, "{}", j.describe(tz));
        if j.enabled && svc.held_because(j).is_some() {
            let _ = writeln!(
                out,
                "  ⏸ held: not made through nanobot-rs; `nanobot cron enable {}` lets it run here",
                j.id
            );
        }
    }
    Ok(out)
}

/// `cron add`: validates the schedule before anything is saved.
pub(crate) fn add(setup: &Setup, a: &CronAddArgs) -> Result<String, CliError> {
    if a.message.trim().is_empty() {
        return Err(CliError::Usage("--message must not be empty".into()));
    }
    if a.deliver && (a.to.is_none() || a.channel.is_none()) {
        return Err(CliError::Usage(
            "--deliver needs --channel and --to (the chat to send the answer to)".into(),
        ));
    }
    let svc = service(setup, None)?;
    let schedule = CronSchedule::from_args(
        &ScheduleArgs {
            every_seconds: a.every,
            cron_expr: a.cron.clone(),
            tz: a.tz.clone(),
            at: a.at.clone(),
        },
        user_tz(setup),
    )?;
    let mut payload = CronPayload::agent_turn(a.message.clone());
    payload.deliver = a.deliver;
    payload.channel = a.channel.clone();
    payload.to = a.to.clone();
    if let (Some(ch), Some(to)) = (&a.channel, &a.to) {
        payload.session_key = Some(format!("{ch}:{to}"));
        payload.origin_channel = Some(ch.clone());
        payload.origin_chat_id = Some(to.clone());
    }
    let job = svc.add(NewJob::new(schedule, payload).with_name(a.name.clone()))?;
    Ok(format!("✓ Added job '{}' ({})\n", job.name, job.id))
}

/// `cron remove`.
pub(crate) fn remove(setup: &Setup, id: &str) -> Result<String, CliError> {
    let job = service(setup, None)?.remove(id)?;
    Ok(format!("✓ Removed job '{}' ({})\n", job.name, job.id))
}

/// `cron enable [--disable]`.
pub(crate) fn enable(setup: &Setup, id: &str, enabled: bool) -> Result<String, CliError> {
    let job = service(setup, None)?.set_enabled(id, enabled)?;
    Ok(format!(
        "✓ Job '{}' ({}) {}\n",
        job.name,
        job.id,
        if enabled { "enabled" } else { "disabled" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ConfigArgs;
    use crate::setup::{self, CliEnv};

    fn setup_in(dir: &std::path::Path) -> Setup {
        let env = CliEnv::for_home(dir, nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        setup::load(&env, &ConfigArgs::default(), true).unwrap()
    }

    #[test]
    fn add_list_disable_remove() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup_in(dir.path());
        let out = add(
            &s,
            &CronAddArgs {
                name: "brief".into(),
                message: "Morning brief".into(),
                cron: Some("0 9 * * MON-FRI".into()),
                tz: Some("Europe/Berlin".into()),
                ..CronAddArgs::default()
            },
        )
        .unwrap();
        assert!(out.contains("brief"));
        let listing = list_text(&s, false).unwrap();
        assert!(listing.contains("0 9 * * MON-FRI"), "{listing}");
        let id = service(&s, None).unwrap().list().unwrap()[0].id.clone();
        enable(&s, &id, false).unwrap();
        assert!(list_text(&s, false).unwrap().contains("No enabled jobs"));
        assert!(list_text(&s, true).unwrap().contains("disabled"));
        remove(&s, &id).unwrap();
        assert!(list_text(&s, true).unwrap().contains("No scheduled jobs"));
    }

    #[test]
    fn bad_schedules_are_usage_errors_and_nothing_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup_in(dir.path());
        for (cron, tz) in [("61 * * * *", None), ("0 9 * * *", Some("Mars/Olympus"))] {
            let err = add(
                &s,
                &CronAddArgs {
                    name: "x".into(),
                    message: "y".into(),
                    cron: Some(cron.into()),
                    tz: tz.map(Into::into),
                    ..CronAddArgs::default()
                },
            )
            .unwrap_err();
            assert_eq!(err.exit_code(), crate::error::EXIT_USAGE, "{err}");
        }
        assert!(service(&s, None).unwrap().list().unwrap().is_empty());
    }
}
