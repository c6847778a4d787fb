//! [`TokenCache`]: a platform's access token, fetched once and kept until shortly before it expires (Feishu's
//! tenant token, DingTalk's and QQ's access tokens).

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::ChannelError;

/// An access token kept until `margin` before it expires (at most half its lifetime early). Calls at the same
/// time wait for one fetch; a token the API refused is forgotten with [`TokenCache::forget`], so the next call
/// fetches a new one.
#[derive(Debug)]
pub struct TokenCache {
    slot: Mutex<Option<(String, Instant)>>,
    margin: Duration,
}

impl TokenCache {
    /// An empty cache renewing tokens `margin` before they expire.
    pub fn new(margin: Duration) -> Self {
        Self {
            slot: Mutex::new(None),
            margin,
        }
    }

    /// The cached token while it is fresh, else the one `fetch` gets (the token and how long it lives).
    pub async fn get<F, Fut>(&self, fetch: F) -> Result<String, ChannelError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(String, Duration), ChannelError>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((token, until)) = slot.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = fetch().await?;
        let early = self.margin.min(lifetime / 2);
        *slot = Some((token.clone(), Instant::now() + lifetime.saturating_sub(early)));
        Ok(token)
    }

    /// Drops the cached token if it still is `refused` (a newer one fetched meanwhile is kept).
    pub async fn forget(&self, refused: &str) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|(t, _)| t == refused) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn fetched_once_while_fresh_again_when_forgotten_or_stale() {
        let cache = TokenCache::new(Duration::from_secs(60));
        let fetches = AtomicUsize::new(0);
        let fetch = |life: u64| {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            async move { Ok((format!("t{n}"), Duration::from_secs(life))) }
        };
        assert_eq!(cache.get(|| fetch(7200)).await.unwrap(), "t0");
        assert_eq!(cache.get(|| fetch(7200)).await.unwrap(), "t0", "fresh: kept");
        cache.forget("someone else's").await;
        assert_eq!(cache.get(|| fetch(7200)).await.unwrap(), "t0");
        cache.forget("t0").await;
        // Forgotten: fetched again (this one lives no time at all, so it is stale at once).
        assert_eq!(cache.get(|| fetch(0)).await.unwrap(), "t1");
        assert_eq!(cache.get(|| fetch(7200)).await.unwrap(), "t2");
        let err = TokenCache::new(Duration::ZERO)
            .get(|| async { Err(ChannelError::auth("x", "refused")) })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "channel x: authentication failed",
            "the fetch's own error"
        );
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
    }
}
