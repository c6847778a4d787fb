//! The workers part: one queue per session (turns of a session in order, sessions concurrently up to
//! `max_concurrent_sessions`), the turns running now (what `/stop` cancels) and the loop's shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nanobot_util::lock;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::types::Job;

/// The session queues, the running turns, the concurrency permits and the shutdown of one loop.
pub(super) struct Workers {
    queues: Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>,
    running: Mutex<HashMap<String, (u64, CancellationToken)>>,
    turn_seq: AtomicU64,
    permits: Arc<Semaphore>,
    shutdown: CancellationToken,
    /// Set by the first [`Workers::shut_down`].
    stopped: AtomicBool,
    started: Instant,
}

impl Workers {
    /// Workers running at most `max_concurrent` sessions at once (at least one).
    pub(super) fn new(max_concurrent: usize) -> Self {
        Self {
            queues: Mutex::default(),
            running: Mutex::default(),
            turn_seq: AtomicU64::new(1),
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            shutdown: CancellationToken::new(),
            stopped: AtomicBool::new(false),
            started: Instant::now(),
        }
    }

    /// Queues `job` for session `key`. Returns the queue's receiver when no worker serves `key` now: the caller
    /// starts one on it.
    pub(super) fn push(&self, key: &str, job: Job) -> Option<mpsc::UnboundedReceiver<Job>> {
        let mut queues = lock(&self.queues);
        let job = match queues.get(key) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return None,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // Cannot fail: the receiver is alive.
        let _ = tx.send(job);
        queues.insert(key.to_owned(), tx);
        Some(rx)
    }

    /// The next job of the worker of `key`; `None` when its queue is empty, which then closes it (the next
    /// [`Workers::push`] starts a new worker).
    pub(super) fn next(&self, key: &str, rx: &mut mpsc::UnboundedReceiver<Job>) -> Option<Job> {
        if let Ok(job) = rx.try_recv() {
            return Some(job);
        }
        // Under the lock: a job pushed meanwhile is either seen here or goes to a new worker.
        let mut queues = lock(&self.queues);
        match rx.try_recv() {
            Ok(job) => Some(job),
            Err(_) => {
                queues.remove(key);
                None
            }
        }
    }

    /// A permit to run one session's turn now; `None` once the loop is shut down.
    pub(super) async fn permit(&self) -> Option<OwnedSemaphorePermit> {
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => None,
            p = self.permits.clone().acquire_owned() => p.ok(),
        }
    }

    /// Records a turn of `key` as running: its id, and the token that `/stop` and shutdown cancel.
    pub(super) fn begin_turn(&self, key: &str) -> (u64, CancellationToken) {
        let id = self.turn_seq.fetch_add(1, Ordering::SeqCst);
        let cancel = self.shutdown.child_token();
        lock(&self.running).insert(key.to_owned(), (id, cancel.clone()));
        (id, cancel)
    }

    /// The turn `id` of `key` is over.
    pub(super) fn end_turn(&self, key: &str, id: u64) {
        let mut running = lock(&self.running);
        if running.get(key).is_some_and(|(running_id, _)| *running_id == id) {
            running.remove(key);
        }
    }

    /// Cancels the running turn of `key`; whether there was one.
    pub(super) fn cancel(&self, key: &str) -> bool {
        match lock(&self.running).remove(key) {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every turn and refuses new ones. True the first time only.
    pub(super) fn shut_down(&self) -> bool {
        self.shutdown.cancel();
        !self.stopped.swap(true, Ordering::SeqCst)
    }

    /// True once [`Workers::shut_down`] was called.
    pub(super) fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// How long the loop has been up.
    pub(super) fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}
