//! [`Runtime`]: the agent running on a bus: the one dispatcher, cron with the system jobs, the local trigger queue,
//! and the lifecycle.

use std::sync::Arc;

use nanobot_bus::{Bus, Leases, Role};
use nanobot_config::Config;
use nanobot_core::{AgentLoop, SystemJob};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::dispatch::{TurnObserver, dispatch};
use crate::error::RuntimeError;
use crate::system::install_system_jobs;

/// What [`Runtime::start`] runs besides the dispatcher.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct RuntimeOptions {
    /// Run the cron service, with the system jobs installed from the config, and the local trigger queue.
    pub cron: bool,
    /// Told about every bus-driven turn and system job (metrics).
    pub observer: Option<Arc<dyn TurnObserver>>,
    /// This process's home is its own, not shared with the other replicas on its bus (gateway replicas with
    /// `gateway.bus.nats.store: jetstream`): its local trigger queue (`/trigger`, `nanobot trigger`), which only
    /// this home has, runs whether or not this replica holds the scheduler lease. Otherwise (one process, or
    /// replicas sharing one home) the queue runs with cron, under the lease.
    pub own_home: bool,
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("cron", &self.cron)
            .field("observer", &self.observer.is_some())
            .field("own_home", &self.own_home)
            .finish()
    }
}

impl RuntimeOptions {
    /// Runs cron (and so the system jobs) too.
    #[must_use]
    pub fn with_cron(mut self, on: bool) -> Self {
        self.cron = on;
        self
    }

    /// Reports turns and system jobs to `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn TurnObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Whether this process's home is its own among the replicas ([`RuntimeOptions::own_home`]).
    #[must_use]
    pub fn with_own_home(mut self, own: bool) -> Self {
        self.own_home = own;
        self
    }
}

/// The agent running on a bus (see the module docs). Stop it with [`Runtime::stop_accepting`], wait for turns
/// with [`Runtime::drain`], then [`Runtime::shutdown`].
pub struct Runtime {
    agent: AgentLoop,
    accept: CancellationToken,
    tracker: TaskTracker,
    dispatcher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Attaches `bus` to `agent` and starts the dispatcher on it; with `opts.cron`, installs the system jobs
    /// of `config` and runs the cron service (whose system jobs go to
    /// [`AgentLoop::run_system_job`], their only handler).
    pub fn start(
        agent: AgentLoop,
        bus: Arc<dyn Bus>,
        config: &Config,
        opts: RuntimeOptions,
    ) -> Result<Self, RuntimeError> {
        agent.set_bus(bus.clone());
        // On a partitioned bus, answers and `/stop` for a turn running here reach it without queueing behind it.
        bus.set_interceptor(Arc::new(crate::dispatch::AgentInterceptor(agent.clone())));
        let accept = CancellationToken::new();
        let tracker = TaskTracker::new();
        if opts.cron {
            if let Some(cron) = agent.cron() {
                install_system_jobs(&agent, config)?;
                spawn_cron_watch(
                    cron.subscribe(),
                    agent.clone(),
                    opts.observer.clone(),
                    accept.clone(),
                );
            }
            match bus.leases() {
                // Replicas on a shared bus: cron and the system jobs run on the one holding the scheduler lease,
                // and so does the trigger queue of a home they share; a home of its own runs its own queue.
                Some(leases) => {
                    if opts.own_home {
                        spawn_trigger_queue(&agent, &accept, &tracker);
                    }
                    tokio::spawn(schedule_under_lease(
                        agent.clone(),
                        leases,
                        opts.observer.clone(),
                        accept.clone(),
                        tracker.clone(),
                        !opts.own_home,
                    ));
                }
                None => {
                    spawn_cron(&agent, &accept, &tracker);
                    spawn_trigger_queue(&agent, &accept, &tracker);
                }
            }
        }
        // Session files written by the Python nanobot are counted once now, off the turn path, so the first turn
        // on a long one reads only its tail (issue 16). Stops with the runtime.
        let sessions = agent.sessions().clone();
        let stop = accept.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                r = sessions.index_sessions() => match r {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(files = n, "indexed session files written by the Python nanobot"),
                    Err(e) => tracing::warn!(error = %e, "could not index the session files"),
                },
            }
        });
        let dispatcher = tokio::spawn(dispatch(
            agent.clone(),
            bus,
            opts.observer,
            tracker.clone(),
            accept.clone(),
        ));
        Ok(Self {
            agent,
            accept,
            tracker,
            dispatcher: Some(dispatcher),
        })
    }

    /// The agent.
    pub fn agent(&self) -> &AgentLoop {
        &self.agent
    }

    /// Cancelled when the runtime stops accepting work (servers sharing the runtime's life watch it).
    pub fn accepting(&self) -> CancellationToken {
        self.accept.clone()
    }

    /// Tracks every running turn (other front doors, such as the HTTP API, add theirs so a shutdown waits
    /// for them too).
    pub fn tracker(&self) -> TaskTracker {
        self.tracker.clone()
    }

    /// Stops taking messages off the bus and stops cron; what was already queued on the bus is still handed to
    /// the agent (waits up to `deadline` for that).
    pub async fn stop_accepting(&mut self, deadline: Instant) {
        self.accept.cancel();
        if let Some(d) = self.dispatcher.take() {
            let _ = tokio::time::timeout_at(deadline, d).await;
        }
    }

    /// Waits until every tracked turn has finished, up to `deadline`; true when they all did. After
    /// [`stop_accepting`](Self::stop_accepting) that includes the cron jobs and the local trigger delivery
    /// running then, settled and their outcomes recorded.
    pub async fn drain(&self, deadline: Instant) -> bool {
        self.tracker.close();
        tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_ok()
    }

    /// Stops the agent: running turns are cancelled (they save what they did), MCP servers shut down.
    pub async fn shutdown(&self) {
        self.accept.cancel();
        self.agent.shutdown().await;
    }
}

/// Runs cron (with the system jobs) until `stop` fires. Tracked like a turn: the jobs running when `stop` fires
/// finish and are recorded, and [`Runtime::drain`] waits for them.
fn spawn_cron(agent: &AgentLoop, stop: &CancellationToken, tracker: &TaskTracker) {
    if let Some(cron) = agent.cron() {
        let svc = cron.clone();
        let stop = stop.clone();
        tracker.spawn(async move { svc.run(stop).await });
    }
}

/// Runs the local trigger queue (`/trigger`, `nanobot trigger`: deliveries run as turns in their chats) until
/// `stop` fires. It is tracked like a turn: once `stop` fires it finishes the delivery it is running (its answer
/// published, its outcome recorded, the delivery settled) and ends, so [`Runtime::drain`] waits for that delivery
/// instead of leaving it claimed, to run (and answer) again on the next start.
fn spawn_trigger_queue(agent: &AgentLoop, stop: &CancellationToken, tracker: &TaskTracker) {
    if let Some(store) = agent.triggers() {
        let runner = agent.clone();
        let handler: nanobot_cron::triggers::TriggerHandler = Arc::new(move |trigger, delivery| {
            let agent = runner.clone();
            Box::pin(async move { agent.run_trigger(trigger, delivery).await })
        });
        let queue = nanobot_cron::TriggerQueue::new(store.clone(), handler);
        let stop = stop.clone();
        tracker.spawn(async move { queue.run(stop).await });
    }
}

/// Holds the scheduler lease and runs cron (and, with `with_triggers`, the trigger queue of the shared home)
/// while it is held: stops them when the lease is lost and waits to take it again; gives it up when the runtime
/// stops accepting work.
async fn schedule_under_lease(
    agent: AgentLoop,
    leases: Arc<dyn Leases>,
    observer: Option<Arc<dyn TurnObserver>>,
    accept: CancellationToken,
    tracker: TaskTracker,
    with_triggers: bool,
) {
    let held = |on: bool| {
        if let Some(o) = &observer {
            o.scheduler_held(on);
        }
    };
    loop {
        let lease = tokio::select! {
            () = accept.cancelled() => return,
            l = leases.acquire(Role::Scheduler) => l,
        };
        let Ok(lease) = lease else {
            return; // the bus is closed
        };
        tracing::info!(
            replica = leases.holder(),
            "this replica runs cron and the heartbeat"
        );
        held(true);
        let running = accept.child_token();
        spawn_cron(&agent, &running, &tracker);
        if with_triggers {
            spawn_trigger_queue(&agent, &running, &tracker);
        }
        tokio::select! {
            () = accept.cancelled() => {
                held(false);
                drop(lease);
                return;
            }
            () = lease.lost() => {
                tracing::warn!("the scheduler lease was lost: cron stops here until it is taken again");
                running.cancel();
                held(false);
            }
        }
    }
}

/// Follows what the cron service reports: a held job's chat is told why it did not run (each version of a held
/// job is reported once), and the system jobs' runs go to `observer` (metrics).
fn spawn_cron_watch(
    mut runs: tokio::sync::broadcast::Receiver<Arc<nanobot_cron::RunOutcome>>,
    agent: AgentLoop,
    observer: Option<Arc<dyn TurnObserver>>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let run = tokio::select! {
                () = stop.cancelled() => break,
                r = runs.recv() => r,
            };
            let run = match run {
                Ok(run) => run,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            if run.record.status == nanobot_cron::status::HELD {
                agent.tell_held_cron_job(&run.job).await;
                continue;
            }
            let (Some(observer), Some(job)) = (&observer, SystemJob::from_id(&run.job.id)) else {
                continue;
            };
            if run.job.payload.kind != nanobot_cron::PAYLOAD_SYSTEM_EVENT {
                continue;
            }
            let error = run
                .record
                .error
                .clone()
                .unwrap_or_else(|| run.record.status.clone());
            match (&run.output, run.record.status.as_str()) {
                (Some(out), nanobot_cron::status::OK) => observer.system_job_finished(job, Ok(out)),
                _ => observer.system_job_finished(job, Err(&error)),
            }
        }
    });
}
