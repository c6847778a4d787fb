//! Short-lived one-time tokens: issued by `tokenIssuePath` (audience `client`) and `/webui/bootstrap`
//! (audience `webui`, which marks the connection as a trusted WebUI).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rand::RngCore as _;

/// Most tokens outstanding at once (more requests get `429`).
pub(crate) const MAX_TOKENS: usize = 10_000;

/// Who a token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Audience {
    /// A programmatic client (`tokenIssuePath`), bound to the `client_id` the issuing request named, if any: the
    /// connection is that client, whatever `client_id` it declares later.
    Client(Option<String>),
    /// The WebUI page (`/webui/bootstrap`): may use `webui_request`.
    WebUi,
}

#[derive(Debug, Default)]
pub(crate) struct TokenStore {
    issued: Mutex<HashMap<String, (Instant, Audience)>>,
    /// Bearer tokens of the HTTP `/api/…` routes (given to the WebUI by `/webui/bootstrap`): valid until they
    /// expire, for any number of requests.
    api: Mutex<HashMap<String, Instant>>,
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "nbwt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

use nanobot_util::lock;

/// Compares two secrets in time independent of where they differ.
pub(crate) fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl TokenStore {
    /// A new token valid for `ttl`, or `None` when too many are outstanding.
    pub(crate) fn issue(&self, ttl: Duration, audience: Audience) -> Option<String> {
        let now = Instant::now();
        let mut issued = lock(&self.issued);
        issued.retain(|_, (exp, _)| *exp > now);
        if issued.len() >= MAX_TOKENS {
            return None;
        }
        let token = new_token();
        issued.insert(token.clone(), (now + ttl, audience));
        Some(token)
    }

    /// A new `/api/…` bearer token valid for `ttl`, or `None` when too many are outstanding.
    pub(crate) fn issue_api(&self, ttl: Duration) -> Option<String> {
        let now = Instant::now();
        let mut api = lock(&self.api);
        api.retain(|_, exp| *exp > now);
        if api.len() >= MAX_TOKENS {
            return None;
        }
        let token = new_token();
        api.insert(token.clone(), now + ttl);
        Some(token)
    }

    /// Whether `token` is an `/api/…` token that has not expired (it stays valid).
    pub(crate) fn check_api(&self, token: &str) -> bool {
        let now = Instant::now();
        let mut api = lock(&self.api);
        match api.get(token) {
            Some(exp) if *exp > now => true,
            Some(_) => {
                api.remove(token);
                false
            }
            None => false,
        }
    }

    /// Consumes `token`: its audience when it was issued and has not expired (a token works once).
    pub(crate) fn take(&self, token: &str) -> Option<Audience> {
        let (exp, audience) = lock(&self.issued).remove(token)?;
        (Instant::now() < exp).then_some(audience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_work_once_and_expire() {
        let s = TokenStore::default();
        let t = s.issue(Duration::from_secs(60), Audience::WebUi).unwrap();
        assert!(t.starts_with("nbwt_") && t.len() > 40);
        assert_eq!(s.take(&t), Some(Audience::WebUi));
        assert_eq!(s.take(&t), None, "a token works once");
        let bound = s
            .issue(Duration::from_secs(60), Audience::Client(Some("a".into())))
            .unwrap();
        assert_eq!(s.take(&bound), Some(Audience::Client(Some("a".into()))));
        let old = s.issue(Duration::ZERO, Audience::Client(None)).unwrap();
        assert_eq!(s.take(&old), None, "expired");
        assert_eq!(s.take("nbwt_forged"), None);
        let api = s.issue_api(Duration::from_secs(60)).unwrap();
        assert!(
            s.check_api(&api) && s.check_api(&api),
            "an API token works until it expires"
        );
        assert_eq!(s.take(&api), None, "an API token does not open a socket");
        assert!(!s.check_api(&t), "a socket token is not an API token");
        let old = s.issue_api(Duration::ZERO).unwrap();
        assert!(!s.check_api(&old));
        assert!(ct_eq("abc", "abc") && !ct_eq("abc", "abd") && !ct_eq("abc", "abcd"));
    }
}
