//! [`Backoff`]: the exponential delay schedule of every reconnect, restart and resend loop.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential delays (factor 2, no jitter) from `min` up to `max`, without end, built on `backon`.
///
/// The loops that use it stay ours, because each one races its sleep against its own cancellation token and
/// decides when a success resets the schedule ([`Backoff::reset`]); `backon` computes the delays.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// `min`, `2·min`, `4·min`, … capped at `max` (a `max` below `min` is raised to `min`).
    pub fn exponential(min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .without_max_times();
        Self {
            builder,
            delays: builder.build(),
            max,
        }
    }

    /// The next delay of the schedule.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.max)
    }

    /// The next delay, or the delay the other side asked for (`Retry-After`) when it did, capped at the
    /// schedule's maximum either way. The schedule advances in both cases.
    pub fn next_delay_or(&mut self, asked: Option<Duration>) -> Duration {
        let own = self.next_delay();
        asked.map_or(own, |a| a.min(self.max))
    }

    /// The delay before retry number `n` (0-based) of a fresh schedule, without advancing this one: for
    /// callers that count their attempts themselves.
    pub fn nth_delay(&self, n: u32) -> Duration {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.builder.build().nth(n).unwrap_or(self.max)
    }

    /// Starts the schedule over (after a success, or a connection that stayed up long enough).
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let s = Duration::from_secs;
        let mut b = Backoff::exponential(s(1), s(60));
        let seen: Vec<_> = (0..9).map(|_| b.next_delay()).collect();
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 60, 60, 60].map(s));
        b.reset();
        assert_eq!(b.next_delay(), s(1));
        assert_eq!(b.next_delay_or(Some(s(600))), s(60), "asked delays are capped");
        assert_eq!(b.next_delay_or(Some(s(3))), s(3));
        assert_eq!(
            [b.nth_delay(0), b.nth_delay(2), b.nth_delay(40)],
            [s(1), s(4), s(60)]
        );
    }

    #[test]
    fn sub_second_minimums_work() {
        let ms = Duration::from_millis;
        let mut b = Backoff::exponential(ms(10), ms(25));
        assert_eq!(
            [b.next_delay(), b.next_delay(), b.next_delay()],
            [ms(10), ms(20), ms(25)]
        );
        let mut odd = Backoff::exponential(ms(50), ms(10));
        assert_eq!(odd.next_delay(), ms(50), "a max below min is raised to min");
    }
}
