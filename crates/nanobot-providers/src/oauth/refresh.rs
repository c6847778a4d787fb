//! A stored login kept usable: refreshed a margin before it expires (or on demand, after an API refused it), one
//! refresh at a time in this process and across programs (the token file's lock, which 0.3.5 takes too), the
//! result saved, and a login still valid used when a refresh fails.

use std::future::Future;
use std::time::Duration;

use super::browser::Who;
use super::{OAuthError, OAuthToken, REFRESH_LOCK_WAIT, TokenStore};

/// A login in a [`TokenStore`] that is refreshed when it expires within `margin`.
#[derive(Debug)]
pub(crate) struct KeptLogin {
    who: Who,
    store: TokenStore,
    margin: Duration,
    refreshing: tokio::sync::Mutex<()>,
}

impl KeptLogin {
    pub(crate) fn new(who: Who, store: TokenStore, margin: Duration) -> Self {
        Self {
            who,
            store,
            margin,
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// The store the login is kept in.
    pub(crate) fn store(&self) -> &TokenStore {
        &self.store
    }

    /// A usable login: `load`ed, and when it expires within the margin (or always, with `force`) refreshed by
    /// `refresh` and saved. A refreshed login without an account keeps the previous one. When the refresh fails
    /// (or there is no refresh token) and the login has not expired, it is used (unless `force`: the API refused
    /// it); else the error is the refresh's.
    pub(crate) async fn token<Fut>(
        &self,
        force: bool,
        load: impl Fn() -> Option<OAuthToken>,
        refresh: impl FnOnce(OAuthToken) -> Fut,
    ) -> Result<OAuthToken, OAuthError>
    where
        Fut: Future<Output = Result<OAuthToken, OAuthError>>,
    {
        let not_logged_in = || OAuthError::NotLoggedIn {
            provider: self.who.provider,
            login: self.who.login,
        };
        let usable = |t: &OAuthToken| !force && t.fresh_for(self.margin);
        let token = load().ok_or_else(not_logged_in)?;
        if usable(&token) {
            return Ok(token);
        }
        let _one = self.refreshing.lock().await;
        let _other_programs = self.store.lock_for_refresh(REFRESH_LOCK_WAIT).await?;
        // Another call (or program) may have refreshed it meanwhile.
        let latest = load().ok_or_else(not_logged_in)?;
        if usable(&latest) {
            return Ok(latest);
        }
        let refreshed = if latest.refresh.is_empty() {
            Err(OAuthError::LoginExpired {
                provider: self.who.provider,
                login: self.who.login,
            })
        } else {
            let previous_account = latest.account_id.clone();
            refresh(latest.clone()).await.map(|mut fresh| {
                fresh.account_id = fresh.account_id.or(previous_account);
                fresh
            })
        };
        match refreshed {
            Ok(fresh) => {
                self.store.save(&fresh)?;
                tracing::debug!(provider = self.who.provider, "login refreshed");
                Ok(fresh)
            }
            // As 0.3.5: a login that has not expired is used despite the failure (not after the API refused it).
            Err(e) if !force && latest.fresh_for(Duration::ZERO) => {
                tracing::warn!(provider = self.who.provider, error = %e, "cannot refresh the login; using it until it expires");
                Ok(latest)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use nanobot_util::Secret;

    use super::*;

    const WHO: Who = Who {
        provider: "Test",
        login: "test",
    };

    fn token(access: &str, refresh: &str, expires_in_ms: i64) -> OAuthToken {
        OAuthToken {
            access: Secret::new(access),
            refresh: Secret::new(refresh),
            expires: super::super::now_ms() + expires_in_ms,
            account_id: Some("acct".into()),
        }
    }

    fn kept() -> (tempfile::TempDir, KeptLogin) {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::at(dir.path().join("auth").join("t.json"));
        (dir, KeptLogin::new(WHO, store, Duration::from_secs(60)))
    }

    #[tokio::test]
    async fn a_fresh_login_is_not_refreshed_and_a_stale_one_is_refreshed_once_and_saved() {
        let (_dir, kept) = kept();
        assert!(matches!(
            kept.token(false, || kept.store().load(), |_| async { unreachable!() })
                .await,
            Err(OAuthError::NotLoggedIn { .. })
        ));
        kept.store().save(&token("a1", "r1", 3_600_000)).unwrap();
        let t = kept
            .token(false, || kept.store().load(), |_| async { unreachable!() })
            .await
            .unwrap();
        assert_eq!(t.access.expose(), "a1");

        kept.store().save(&token("a1", "r1", 30_000)).unwrap();
        let calls = AtomicUsize::new(0);
        let refresh = |old: OAuthToken| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(old.refresh.expose(), "r1");
                Ok(OAuthToken {
                    account_id: None,
                    ..token("a2", "r2", 3_600_000)
                })
            }
        };
        let (a, b) = tokio::join!(
            kept.token(false, || kept.store().load(), refresh),
            kept.token(false, || kept.store().load(), refresh)
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "calls at the same time wait for one refresh"
        );
        assert_eq!(
            (a.unwrap().access.expose(), b.unwrap().access.expose()),
            ("a2", "a2")
        );
        let saved = kept.store().load().unwrap();
        assert_eq!(saved.refresh.expose(), "r2");
        assert_eq!(saved.account_id.as_deref(), Some("acct"), "the account is kept");
    }

    #[tokio::test]
    async fn a_failed_refresh_uses_a_valid_login_unless_forced_and_no_refresh_token_is_named() {
        let (_dir, kept) = kept();
        let failing = |_| async { Err(OAuthError::Flow("refresh refused".into())) };
        kept.store().save(&token("a1", "r1", 30_000)).unwrap();
        let t = kept.token(false, || kept.store().load(), failing).await.unwrap();
        assert_eq!(t.access.expose(), "a1");
        let err = kept
            .token(true, || kept.store().load(), failing)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("refresh refused"), "{err}");

        kept.store().save(&token("a1", "r1", -1_000)).unwrap();
        let err = kept
            .token(false, || kept.store().load(), failing)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("refresh refused"), "{err}");

        kept.store().save(&token("a1", "", -1_000)).unwrap();
        let err = kept
            .token(false, || kept.store().load(), failing)
            .await
            .unwrap_err();
        assert!(matches!(err, OAuthError::LoginExpired { .. }), "{err:?}");
        assert!(err.to_string().contains("nanobot provider login test"), "{err}");
    }
}
