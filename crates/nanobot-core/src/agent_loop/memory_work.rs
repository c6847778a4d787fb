//! The memory part: long-term memory work around turns. It owns the memory service, the copy of the memory
//! files shared with other replicas, and the background work (consolidation, `/new` archives) that
//! [`crate::AgentLoop::finish_background`] waits for.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use nanobot_memory::{MemorySync, ScopeKey};
use tokio_util::task::TaskTracker;

use crate::memory::{ConsolidationTrigger, MemoryService, SyncedMemory, sync_memory};

/// Longest wait for the consolidation before a turn.
const BEFORE_TURN_CONSOLIDATION_BOUND: Duration = Duration::from_secs(120);

/// The memory work of one loop.
pub(super) struct MemoryWork {
    service: Option<Arc<dyn MemoryService>>,
    /// The memory files shared with other replicas (synchronised around turns and memory jobs).
    sync: Option<MemorySync>,
    background: TaskTracker,
}

impl MemoryWork {
    /// Memory work with `service`, its files shared through `sync` when given (then every service call is
    /// wrapped in a sync of its files).
    pub(super) fn new(service: Option<Arc<dyn MemoryService>>, sync: Option<MemorySync>) -> Self {
        let service = match (&sync, service) {
            (Some(sync), Some(inner)) => Some(Arc::new(SyncedMemory {
                inner,
                sync: sync.clone(),
            }) as Arc<dyn MemoryService>),
            (_, service) => service,
        };
        Self {
            service,
            sync,
            background: TaskTracker::new(),
        }
    }

    /// The long-term memory service, when configured.
    pub(super) fn service(&self) -> Option<&Arc<dyn MemoryService>> {
        self.service.as_ref()
    }

    /// Pulls (and publishes) the shared memory files of `scope` (every scope: `None`), when they are shared.
    pub(super) async fn sync(&self, scope: Option<&ScopeKey>, when: &'static str) {
        if let Some(sync) = &self.sync {
            sync_memory(sync, scope, when).await;
        }
    }

    /// Runs `work` in the background, tracked for [`MemoryWork::finish`].
    pub(super) fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.background.spawn(work);
    }

    /// Before a turn builds its prompt: what other replicas wrote is pulled, and what is over the memory budget
    /// is archived (0.3.5 also consolidates before it drops history from a request), so old turns are never left
    /// out of the request unsaved. The wait is bounded by `limit` (and two minutes); a slow consolidation then
    /// goes on in the background as after a turn.
    pub(super) async fn before_turn(&self, key: &str, scope: &ScopeKey, limit: Duration) {
        self.sync(Some(scope), "before a turn").await;
        let Some(m) = &self.service else { return };
        let bound = BEFORE_TURN_CONSOLIDATION_BOUND.min(limit);
        let (m, k, scope) = (m.clone(), key.to_owned(), scope.clone());
        // On the tracker, so a slow one is not cut off by the bound (one-shot mode waits for it at exit).
        let task = self
            .background
            .spawn(async move { m.consolidate(&k, &scope, ConsolidationTrigger::BeforeTurn).await });
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(session = %key, error = %e, "consolidation before the turn failed")
            }
            Ok(Err(e)) => {
                tracing::warn!(session = %key, error = %e, "consolidation before the turn panicked")
            }
            Err(_) => tracing::warn!(
                session = %key,
                seconds = bound.as_secs(),
                "consolidation before the turn did not finish in time; the turn goes on"
            ),
        }
    }

    /// After a turn is saved: what it wrote to memory (the model's file tools may edit `MEMORY.md`) is published
    /// before its answer, and (unless it was cancelled) consolidation runs in the background.
    pub(super) async fn after_turn(&self, key: &str, scope: &ScopeKey, cancelled: bool) {
        self.sync(Some(scope), "after a turn").await;
        if let Some(m) = &self.service
            && !cancelled
        {
            let (m, k, scope) = (m.clone(), key.to_owned(), scope.clone());
            self.background.spawn(async move {
                if let Err(e) = m.consolidate(&k, &scope, ConsolidationTrigger::AfterTurn).await {
                    tracing::warn!(session = %k, error = %e, "background consolidation failed");
                }
            });
        }
    }

    /// Waits up to `limit` for the background work; true when nothing is left running.
    pub(super) async fn finish(&self, limit: Duration) -> bool {
        let tracker = &self.background;
        tracker.close();
        let done = tokio::time::timeout(limit, tracker.wait()).await.is_ok();
        tracker.reopen();
        done
    }
}
