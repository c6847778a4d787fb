//! The one bounded wait of the fakes: until a check on their recorded state passes, woken by their `Notify`.

use std::time::Duration;

use anyhow::{Result, bail};
use tokio::sync::Notify;

/// Waits until `check` gives a value, looking again each time `changed` is notified, at most `limit`; the error
/// says `who` and `what` did not happen.
pub(crate) async fn until<T>(
    changed: &Notify,
    limit: Duration,
    who: &str,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        // Registered before the check, so a change between the check and the wait is not missed.
        let notified = changed.notified();
        if let Some(v) = check() {
            return Ok(v);
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            bail!("{who}: {what} did not happen within {limit:?}");
        }
    }
}
