//! Time source for the scheduler: the real clock, or a manual one tests drive.

use nanobot_util::lock;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// Where the scheduler gets "now" from and how it waits.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
    /// Completes once [`Clock::now`] has reached `deadline` (at once if it already has).
    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()>;
}

/// The system clock (`Utc::now()`), sleeping with tokio timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            // Re-check the wall clock at least every minute so that a suspended machine or a clock
            // change does not leave the scheduler sleeping past a deadline.
            loop {
                let left = deadline - Utc::now();
                let Ok(left) = left.to_std() else { return };
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left.min(std::time::Duration::from_secs(60))).await;
            }
        })
    }
}

#[derive(Debug)]
struct ManualState {
    now: DateTime<Utc>,
    sleepers: Vec<(DateTime<Utc>, oneshot::Sender<()>)>,
}

/// A clock that only moves when told to ([`ManualClock::advance`], [`ManualClock::set`]); sleepers
/// wake as soon as their deadline is reached. For tests: nothing ever really waits.
#[derive(Debug, Clone)]
pub struct ManualClock {
    state: Arc<Mutex<ManualState>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            state: Arc::new(Mutex::new(ManualState {
                now: start,
                sleepers: Vec::new(),
            })),
        }
    }

    /// Moves the clock forward by `by` and wakes every sleeper whose deadline passed.
    pub fn advance(&self, by: chrono::Duration) {
        let now = self.now() + by;
        self.set(now);
    }

    /// Sets the clock (never backwards: an earlier time is ignored) and wakes due sleepers.
    pub fn set(&self, to: DateTime<Utc>) {
        let mut st = lock(&self.state);
        if to > st.now {
            st.now = to;
        }
        let now = st.now;
        let (due, waiting): (Vec<_>, Vec<_>) = st.sleepers.drain(..).partition(|(d, _)| *d <= now);
        st.sleepers = waiting;
        drop(st);
        for (_, tx) in due {
            let _ = tx.send(());
        }
    }

    /// How many sleepers are waiting (lets a test see that the scheduler is parked).
    pub fn sleepers(&self) -> usize {
        let mut st = lock(&self.state);
        st.sleepers.retain(|(_, tx)| !tx.is_closed());
        st.sleepers.len()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        lock(&self.state).now
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let mut st = lock(&self.state);
        if deadline <= st.now {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        st.sleepers.push((deadline, tx));
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_on_advance() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        let sleep = clock.sleep_until(start + chrono::Duration::minutes(5));
        assert_eq!(clock.sleepers(), 1);
        let waiter = tokio::spawn(sleep);
        clock.advance(chrono::Duration::minutes(4));
        assert_eq!(clock.sleepers(), 1);
        clock.advance(chrono::Duration::minutes(1));
        waiter.await.unwrap();
        assert_eq!(clock.sleepers(), 0);
        // already due: completes at once
        clock.sleep_until(start).await;
    }
}
