//! The scheduler: runs due jobs through a callback, records their state, and offers the operations
//! the `cron` tool, the CLI and the gateway need.

use nanobot_util::lock;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::model::status;
use crate::{
    Clock, CronError, CronJob, CronPayload, CronSchedule, JobStore, RunRecord, ScheduleKind, SystemClock,
};

/// Error type a job handler may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs one job (the agent core supplies it: an agent turn in the job's session, delivering the
/// answer when `payload.deliver`; `dream`/`heartbeat` for system jobs). `Ok(text)` is the answer.
pub type JobHandler = Arc<dyn Fn(CronJob) -> BoxFuture<'static, Result<String, BoxError>> + Send + Sync>;

/// A job to create with [`CronService::add`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NewJob {
    /// Display name (defaults to the start of the message).
    pub name: Option<String>,
    /// When it runs.
    pub schedule: CronSchedule,
    /// What it does (`kind` is forced to `agent_turn`).
    pub payload: CronPayload,
    /// Delete after running; defaults to `true` for `at` schedules, `false` otherwise.
    pub delete_after_run: Option<bool>,
}

impl NewJob {
    /// A job with this schedule and payload.
    pub fn new(schedule: CronSchedule, payload: CronPayload) -> Self {
        NewJob {
            name: None,
            schedule,
            payload,
            delete_after_run: None,
        }
    }

    /// Sets the display name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunOutcome {
    /// The job as it was when it fired.
    pub job: CronJob,
    /// What was recorded in its history.
    pub record: RunRecord,
    /// The handler's answer, when it succeeded.
    pub output: Option<String>,
}

struct Shared {
    wake: Notify,
    running: Mutex<HashSet<String>>,
    /// Each outcome shared by pointer: a slot of the channel holds one (`broadcast` allocates every slot at
    /// start, and an outcome carries its whole job).
    finished: broadcast::Sender<Arc<RunOutcome>>,
    /// The fingerprints of the held jobs already reported (each version of a job is reported once).
    reported_holds: Mutex<HashSet<String>>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            wake: Notify::new(),
            running: Mutex::default(),
            finished: broadcast::channel(64).0,
            reported_holds: Mutex::default(),
        }
    }
}

/// The cron scheduler and job API. Cheap to clone; clones share state.
///
/// The tool-facing operations ([`add`](Self::add), [`remove`](Self::remove),
/// [`set_enabled`](Self::set_enabled)) refuse the protected system jobs; the gateway manages those
/// with [`upsert_system_job`](Self::upsert_system_job). Store operations are short synchronous file
/// operations under a file lock.
#[derive(Clone)]
pub struct CronService {
    store: Arc<JobStore>,
    clock: Arc<dyn Clock>,
    handler: JobHandler,
    default_tz: Tz,
    poll: chrono::Duration,
    shared: Arc<Shared>,
    ledger: Option<Arc<crate::trust::TrustLedger>>,
}

impl std::fmt::Debug for CronService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronService")
            .field("store", &self.store.path())
            .field("default_tz", &self.default_tz)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl CronService {
    /// A service over `store`, running jobs with `handler`, on the system clock, in UTC, checking the
    /// file for outside changes every 5 s.
    pub fn new(store: JobStore, handler: JobHandler) -> Self {
        CronService {
            store: Arc::new(store),
            clock: Arc::new(SystemClock),
            handler,
            default_tz: Tz::UTC,
            poll: chrono::Duration::seconds(5),
            shared: Arc::default(),
            ledger: None,
        }
    }

    /// Holds jobs `ledger` does not trust instead of running them unattended (see [`crate::trust`]); jobs
    /// this service adds, and jobs [`CronService::set_enabled`] enables, are trusted. Call
    /// [`crate::TrustLedger::baseline_if_missing`] first when upgrading.
    #[must_use]
    pub fn with_ledger(mut self, ledger: crate::trust::TrustLedger) -> Self {
        self.ledger = Some(Arc::new(ledger));
        self
    }

    /// Trusts job `id` as stored now (after an add or a confirmation).
    fn trust_stored(&self, id: &str) -> Result<(), CronError> {
        if let Some(ledger) = &self.ledger
            && let Some(job) = self.get(id)?
        {
            ledger.trust(&job)?;
        }
        Ok(())
    }

    /// The trust ledger read once, for a pass over the jobs ([`Holds::reason`]).
    fn holds(&self) -> Holds {
        Holds(
            self.ledger
                .as_ref()
                .map(|ledger| ledger.snapshot().map_err(|e| e.to_string())),
        )
    }

    /// Uses another clock (tests: [`crate::ManualClock`]).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Zone for `cron` schedules without `tz` and for `at` times without an offset.
    #[must_use]
    pub fn with_default_tz(mut self, tz: Tz) -> Self {
        self.default_tz = tz;
        self
    }

    /// How often the running scheduler re-reads the store for changes made by other processes.
    #[must_use]
    pub fn with_poll_interval(mut self, every: std::time::Duration) -> Self {
        self.poll = chrono::Duration::from_std(every).unwrap_or(chrono::Duration::seconds(5));
        self
    }

    /// The store.
    pub fn store(&self) -> &JobStore {
        &self.store
    }

    /// The default zone.
    pub fn default_tz(&self) -> Tz {
        self.default_tz
    }

    /// Every finished run (scheduled or [`run_now`](Self::run_now)), after its result was recorded, and each
    /// version of a held job once ([`status::HELD`], not recorded). For metrics, logs, telling the job's chat and
    /// tests; slow receivers miss old events.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<RunOutcome>> {
        self.shared.finished.subscribe()
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// All jobs, system jobs included, in file order.
    pub fn list(&self) -> Result<Vec<CronJob>, CronError> {
        Ok(self.store.load()?.jobs)
    }

    /// One job.
    pub fn get(&self, id: &str) -> Result<Option<CronJob>, CronError> {
        self.store.job(id)
    }

    /// Validates and adds a job; returns it with its id and first run time. Invalid expressions,
    /// unknown zones, intervals under 1 s and `at` times in the past are rejected before anything is
    /// saved.
    pub fn add(&self, new: NewJob) -> Result<CronJob, CronError> {
        let now = self.now_ms();
        new.schedule.validate()?;
        if new.schedule.kind == ScheduleKind::At && new.schedule.at_ms.is_some_and(|at| at < now) {
            return Err(CronError::InvalidSchedule {
                field: "at",
                reason: "the time is in the past".into(),
            });
        }
        let next = new.schedule.next_run_after(now, self.default_tz)?;
        let mut payload = new.payload;
        payload.kind = crate::model::PAYLOAD_AGENT_TURN.to_owned();
        let name = new.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| {
            let m: String = payload.message.chars().take(30).collect();
            if m.is_empty() { "job".to_owned() } else { m }
        });
        let delete_after_run = new
            .delete_after_run
            .unwrap_or(new.schedule.kind == ScheduleKind::At);
        let job = self.store.update(|file| {
            let id = loop {
                let id: String = uuid::Uuid::new_v4()
                    .simple()
                    .to_string()
                    .chars()
                    .take(8)
                    .collect();
                if file.job(&id).is_none() && !crate::model::PROTECTED_JOB_IDS.contains(&id.as_str()) {
                    break id;
                }
            };
            let job = CronJob {
                delete_after_run,
                ..CronJob::created(id, name.clone(), new.schedule.clone(), payload.clone(), next, now)
            };
            file.jobs.push(job.clone());
            Ok(job)
        })?;
        self.trust_stored(&job.id)?;
        self.wake();
        Ok(job)
    }

    /// Removes a job (not a protected one).
    pub fn remove(&self, id: &str) -> Result<CronJob, CronError> {
        let job = self.store.update(|file| {
            let job = file
                .job(id)
                .ok_or_else(|| CronError::NotFound { id: id.to_owned() })?;
            if job.is_protected() {
                return Err(CronError::Protected { id: id.to_owned() });
            }
            file.remove(id)
                .ok_or_else(|| CronError::NotFound { id: id.to_owned() })
        })?;
        self.wake();
        Ok(job)
    }

    /// Enables or disables a job (not a protected one). Enabling plans the next run from now and, with a
    /// ledger, trusts the job as it is ([`crate::trust`]).
    pub fn set_enabled(&self, id: &str, enabled: bool) -> Result<CronJob, CronError> {
        let now = self.now_ms();
        let tz = self.default_tz;
        let job = self.store.update(|file| {
            let job = file
                .job_mut(id)
                .ok_or_else(|| CronError::NotFound { id: id.to_owned() })?;
            if job.is_protected() {
                return Err(CronError::Protected { id: id.to_owned() });
            }
            if job.enabled != enabled {
                job.enabled = enabled;
                job.updated_at_ms = now;
                job.state.next_run_at_ms = if enabled {
                    job.schedule.next_run_after(now, tz)?
                } else {
                    None
                };
            }
            Ok(job.clone())
        })?;
        if enabled {
            // Enabling is the user's confirmation (the CLI): the job may run unattended as it is now.
            self.trust_stored(id)?;
        }
        self.wake();
        Ok(job)
    }

    /// Creates or updates a system job (`dream`, `heartbeat`) with this id: the gateway calls it at
    /// start-up from the config. Its run state is kept; the next run is re-planned only when the
    /// schedule changed or none is planned.
    pub fn upsert_system_job(
        &self,
        id: &str,
        name: &str,
        schedule: CronSchedule,
    ) -> Result<CronJob, CronError> {
        schedule.validate()?;
        let now = self.now_ms();
        let tz = self.default_tz;
        let job = self.store.update(|file| {
            if let Some(job) = file.job_mut(id) {
                let changed = job.schedule != schedule;
                if changed
                    || job.name != name
                    || !job.enabled
                    || job.payload.kind != crate::model::PAYLOAD_SYSTEM_EVENT
                {
                    job.updated_at_ms = now;
                }
                if changed || job.state.next_run_at_ms.is_none() {
                    job.state.next_run_at_ms = schedule.next_run_after(now, tz)?;
                }
                job.name = name.to_owned();
                job.enabled = true;
                job.schedule = schedule.clone();
                job.payload.kind = crate::model::PAYLOAD_SYSTEM_EVENT.to_owned();
                return Ok(job.clone());
            }
            let next = schedule.next_run_after(now, tz)?;
            let job = CronJob::created(
                id.to_owned(),
                name.to_owned(),
                schedule.clone(),
                CronPayload::system_event(),
                next,
                now,
            );
            file.jobs.push(job.clone());
            Ok(job)
        })?;
        self.wake();
        Ok(job)
    }

    /// Removes a system job (e.g. when the heartbeat is disabled in the config). Returns whether it
    /// existed.
    pub fn remove_system_job(&self, id: &str) -> Result<bool, CronError> {
        let removed = self.store.update(|file| Ok(file.remove(id).is_some()))?;
        self.wake();
        Ok(removed)
    }

    /// Runs a job now, whatever its schedule (`nanobot cron run ID`). A disabled job runs only with
    /// `force`. The run is recorded like a scheduled one (an `at` job is then deleted).
    pub async fn run_now(&self, id: &str, force: bool) -> Result<RunOutcome, CronError> {
        let job = self
            .store
            .job(id)?
            .ok_or_else(|| CronError::NotFound { id: id.to_owned() })?;
        if !job.enabled && !force {
            return Err(CronError::Disabled { id: id.to_owned() });
        }
        {
            let mut running = lock(&self.shared.running);
            if !running.insert(job.id.clone()) {
                return Err(CronError::AlreadyRunning { id: id.to_owned() });
            }
        }
        Ok(self.execute(job).await)
    }

    /// Runs every job that is due now, one after the other, and returns what happened. Jobs whose
    /// runs were missed (the process was down) run once, not once per missed slot. The running
    /// scheduler ([`run`](Self::run)) does the same on its own, concurrently.
    pub async fn tick(&self) -> Result<Vec<RunOutcome>, CronError> {
        let due = self.claim_due(self.clock.now())?;
        let mut out = Vec::with_capacity(due.len());
        for job in due {
            out.push(self.execute_unattended(job).await);
        }
        Ok(out)
    }

    /// The scheduler loop: fires due jobs (each in its own task; a job never overlaps itself), sleeps
    /// until the next run or the next store check, and wakes early when a job is added or changed
    /// through this service. When `cancel` fires no job starts any more, and the jobs running then finish
    /// (their runs recorded) before `run` returns: an aborted job would leave no record, and its claimed run
    /// (an `at` job's only one) would be gone. The caller bounds that wait (the runtime's drain deadline) and
    /// hurries the jobs by cancelling their turns.
    pub async fn run(&self, cancel: CancellationToken) {
        let mut tasks = JoinSet::new();
        loop {
            let now = self.clock.now();
            match self.claim_due(now) {
                Ok(jobs) => {
                    for job in jobs {
                        let me = self.clone();
                        tasks.spawn(async move {
                            me.execute_unattended(job).await;
                        });
                    }
                }
                Err(e) => tracing::warn!("cron: cannot read jobs: {e}"),
            }
            while tasks.try_join_next().is_some() {}
            let next = self.next_wake().unwrap_or(None);
            let mut deadline = now + self.poll;
            if let Some(next) = next
                && next < deadline
            {
                deadline = next;
            }
            let sleep = self.clock.sleep_until(deadline);
            tokio::select! {
                () = cancel.cancelled() => break,
                () = sleep => {}
                () = self.shared.wake.notified() => {}
                Some(_) = tasks.join_next() => {}
            }
        }
        if !tasks.is_empty() {
            tracing::info!(jobs = tasks.len(), "cron stops: waiting for the jobs running now");
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Earliest planned run among enabled jobs that are not running.
    fn next_wake(&self) -> Result<Option<DateTime<Utc>>, CronError> {
        let file = self.store.load()?;
        let running = lock(&self.shared.running).clone();
        let holds = self.holds();
        Ok(file
            .jobs
            .iter()
            .filter(|j| j.enabled && !running.contains(&j.id) && holds.reason(j).is_none())
            .filter_map(|j| j.state.next_run_at_ms)
            .min()
            .and_then(DateTime::from_timestamp_millis))
    }

    /// Under the store lock: plans missing next runs and claims the due jobs by moving their next run
    /// forward (so another process running a scheduler on the same file cannot fire them too).
    fn claim_due(&self, now: DateTime<Utc>) -> Result<Vec<CronJob>, CronError> {
        let now_ms = now.timestamp_millis();
        let holds = self.holds();
        // Jobs to fire or to plan. Those held are reported here and never touched in the store (neither claimed
        // nor planned); the others are work for the update below.
        {
            let running = lock(&self.shared.running).clone();
            let mut work = false;
            let file = self.store.load()?;
            let wanted = file.jobs.iter().filter(|j| {
                j.enabled
                    && !running.contains(&j.id)
                    && match j.state.next_run_at_ms {
                        Some(next) => next <= now_ms,
                        None => j.schedule.kind != ScheduleKind::At || j.state.last_run_at_ms.is_none(),
                    }
            });
            for job in wanted {
                match holds.reason(job) {
                    Some(reason) => {
                        self.report_hold(job.clone(), reason);
                    }
                    None => work = true,
                }
            }
            if !work {
                return Ok(Vec::new());
            }
        }
        let tz = self.default_tz;
        let shared = Arc::clone(&self.shared);
        self.store.update(|file| {
            let mut running = lock(&shared.running);
            let mut due = Vec::new();
            for job in file.jobs.iter_mut() {
                if !job.enabled || running.contains(&job.id) || holds.reason(job).is_some() {
                    continue;
                }
                let next = match job.state.next_run_at_ms {
                    Some(next) => next,
                    // never planned (e.g. written by hand): an `at` job that never ran is planned at its
                    // time (if that passed, it is a missed run and fires now); others from now on
                    None if job.schedule.kind == ScheduleKind::At => {
                        match (job.state.last_run_at_ms, job.schedule.at_ms) {
                            (None, Some(at)) => {
                                job.state.next_run_at_ms = Some(at);
                                at
                            }
                            _ => continue,
                        }
                    }
                    None => match job.schedule.next_run_after(now_ms, tz) {
                        Ok(next) => {
                            job.state.next_run_at_ms = next;
                            continue;
                        }
                        Err(e) => {
                            let msg = format!("invalid schedule: {e}");
                            if job.state.last_error.as_deref() != Some(msg.as_str()) {
                                tracing::warn!(job = %job.id, "cron: {msg}");
                                job.state.last_status = Some(status::ERROR.to_owned());
                                job.state.last_error = Some(msg);
                            }
                            continue;
                        }
                    },
                };
                if next > now_ms {
                    continue;
                }
                let fired = job.clone();
                job.state.next_run_at_ms = match job.schedule.kind {
                    ScheduleKind::At => None,
                    _ => match job.schedule.next_run_after(now_ms, tz) {
                        Ok(n) => n,
                        Err(e) => {
                            tracing::warn!(job = %job.id, "cron: invalid schedule: {e}");
                            None
                        }
                    },
                };
                running.insert(job.id.clone());
                due.push(fired);
            }
            Ok(due)
        })
    }

    /// Runs a job the scheduler claimed, unless it must be held ([`crate::trust`]; the claim passes held jobs
    /// over, this catches one whose trust changed in between): then the handler never sees it, and the store is
    /// left as it is.
    async fn execute_unattended(&self, job: CronJob) -> RunOutcome {
        let Some(reason) = self.holds().reason(&job) else {
            return self.execute(job).await;
        };
        lock(&self.shared.running).remove(&job.id);
        self.wake();
        self.report_hold(job, reason)
    }

    /// Says once per version of a held job why it does not run: a warning, and a [`status::HELD`] outcome to
    /// the [`subscribe`](Self::subscribe)rs (the runtime tells the job's chat). The held job is never changed
    /// in the store: `jobs.json` may be shared with another program (the Python nanobot), whose own scheduler
    /// must still see the job as its owner left it.
    fn report_hold(&self, job: CronJob, reason: String) -> RunOutcome {
        let record = RunRecord::new(
            self.clock.now().timestamp_millis(),
            status::HELD,
            0,
            Some(reason.clone()),
        );
        let outcome = RunOutcome {
            job,
            record,
            output: None,
        };
        let first =
            lock(&self.shared.reported_holds).insert(crate::trust::TrustLedger::fingerprint(&outcome.job));
        if first {
            tracing::warn!(job = %outcome.job.id, "cron: {reason}");
            let _ = self.shared.finished.send(Arc::new(outcome.clone()));
        }
        outcome
    }

    /// Why the scheduler holds `job` instead of running it ([`crate::trust`]), when it does.
    pub fn held_because(&self, job: &CronJob) -> Option<String> {
        self.holds().reason(job)
    }

    /// Runs a claimed job through the handler and records the result.
    async fn execute(&self, job: CronJob) -> RunOutcome {
        let started = self.clock.now();
        let result = AssertUnwindSafe((self.handler)(job.clone())).catch_unwind().await;
        let duration = (self.clock.now() - started).num_milliseconds().max(0);
        let (output, record) = match result {
            Ok(Ok(text)) => (
                Some(text),
                RunRecord::new(started.timestamp_millis(), status::OK, duration, None),
            ),
            Ok(Err(e)) => (
                None,
                RunRecord::new(
                    started.timestamp_millis(),
                    status::ERROR,
                    duration,
                    Some(e.to_string()),
                ),
            ),
            Err(_) => (
                None,
                RunRecord::new(
                    started.timestamp_millis(),
                    status::ERROR,
                    duration,
                    Some("job handler panicked".into()),
                ),
            ),
        };
        if let Some(err) = &record.error {
            tracing::warn!(job = %job.id, "cron job failed: {err}");
        }
        let saved = self.store.update(|file| {
            let Some(current) = file.job_mut(&job.id) else {
                return Ok(());
            }; // removed meanwhile
            current.state.record(record.clone());
            if current.schedule.kind == ScheduleKind::At {
                if current.delete_after_run {
                    file.remove(&job.id);
                } else {
                    current.enabled = false;
                    current.state.next_run_at_ms = None;
                }
            }
            Ok(())
        });
        if let Err(e) = saved {
            tracing::warn!(job = %job.id, "cron: cannot record run: {e}");
        }
        lock(&self.shared.running).remove(&job.id);
        self.wake();
        let outcome = RunOutcome { job, record, output };
        let _ = self.shared.finished.send(Arc::new(outcome.clone()));
        outcome
    }
}

/// What the trust ledger said when read ([`CronService::holds`]): `None` without a ledger (nothing is held).
struct Holds(Option<Result<crate::trust::TrustedJobs, String>>);

impl Holds {
    /// Why `job` must not run unattended, if it must not: not trusted, or the ledger unreadable. The system
    /// jobs are never held.
    fn reason(&self, job: &CronJob) -> Option<String> {
        let trusted = self.0.as_ref()?;
        if job.is_protected() {
            return None;
        }
        match trusted {
            Ok(set) if set.contains(job) => None,
            Ok(_) => Some(format!(
                "held: job {} was not created through nanobot-rs's cron tool or CLI (another program such as the \
                 Python nanobot made it, or a file write changed it since); it does not run here unattended until \
                 `nanobot cron enable {}` confirms it (the job itself is left as it is)",
                job.id, job.id
            )),
            Err(e) => Some(format!("held: cannot read the trusted-jobs ledger: {e}")),
        }
    }
}
