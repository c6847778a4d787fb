//! One browser sign-in with an authorization code and PKCE (RFC 7636), as both browser logins of 0.3.5 (OpenAI
//! Codex and xAI Grok) run it: the authorisation URL with the challenge and a random state, a callback listener
//! on this machine that takes the code of this sign-in only, and the code from what a user pasted instead. What
//! differs between the providers (the endpoints, extra parameters, the code exchange) stays with them.

use std::borrow::Cow;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nanobot_util::Secret;
use rand::RngCore as _;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::OAuthError;

/// The page the browser shows once the code has arrived.
const SUCCESS_HTML: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\" /><title>Authentication \
    successful</title></head><body><p>Authentication successful. Return to your terminal to continue.</p></body></html>";

/// The longest one callback request may take to arrive and be answered (a stalled connection is dropped and the
/// wait goes on).
const CALLBACK_REQUEST_BOUND: Duration = Duration::from_secs(10);

/// The most bytes of a callback request's head that are read.
const MAX_CALLBACK_HEAD: usize = 8192;

/// `n` random bytes, base64url without padding (PKCE verifiers, states, nonces).
pub(crate) fn random_b64(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Where the browser comes back.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Redirect<'a> {
    /// A registered redirect URI: the callback listens on its host and port; when it cannot, the code can still
    /// be pasted ([`BrowserSignIn::callback_problem`] says why).
    Registered(&'a str),
    /// `http://127.0.0.1:<a port of the system's choosing><path>`; not being able to listen is an error.
    LoopbackAnyPort(&'a str),
}

/// Who signs in, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Who {
    /// The provider's name for people.
    pub(crate) provider: &'static str,
    /// The name `nanobot provider login` takes.
    pub(crate) login: &'static str,
}

/// One browser sign-in in progress: [`BrowserSignIn::authorize_url`] to open, [`BrowserSignIn::wait_for_callback`]
/// (or [`BrowserSignIn::code_from_pasted`]) for the code, which the provider's login exchanges with the PKCE
/// verifier kept here and [`BrowserSignIn::redirect_uri`].
#[derive(Debug)]
pub struct BrowserSignIn {
    who: Who,
    verifier: Secret,
    state: String,
    authorize_url: String,
    redirect_uri: String,
    callback_path: String,
    cors_origin: Option<&'static str>,
    listener: Result<TcpListener, String>,
}

impl BrowserSignIn {
    /// Makes the PKCE pair and the state, the authorisation URL (`authorize` with `response_type=code`,
    /// `client_id`, `redirect_uri`, `scope`, the challenge, the state, then `extra`), and listens for the
    /// callback. `cors_origin` is a sign-in page allowed to call the callback itself and read its answer.
    pub(crate) async fn start(
        who: Who,
        authorize: &str,
        client_id: &str,
        scope: &str,
        redirect: Redirect<'_>,
        extra: &[(&str, &str)],
        cors_origin: Option<&'static str>,
    ) -> Result<Self, OAuthError> {
        let mut url = reqwest::Url::parse(authorize).map_err(|e| OAuthError::BadAnswer {
            endpoint: crate::display_endpoint(authorize),
            problem: format!("the authorisation URL is not a URL: {e}"),
        })?;
        let (listener, redirect_uri) = match redirect {
            Redirect::Registered(uri) => (listen(uri).await, uri.to_owned()),
            Redirect::LoopbackAnyPort(path) => {
                let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
                    OAuthError::Flow(format!(
                        "cannot listen for the sign-in callback on 127.0.0.1: {e}"
                    ))
                })?;
                let port = listener
                    .local_addr()
                    .map_err(|e| OAuthError::Flow(format!("cannot listen for the sign-in callback: {e}")))?
                    .port();
                (Ok(listener), format!("http://127.0.0.1:{port}{path}"))
            }
        };
        let callback_path = reqwest::Url::parse(&redirect_uri)
            .map(|u| u.path().to_owned())
            .map_err(|e| OAuthError::Flow(format!("the redirect URI {redirect_uri:?} is not a URL: {e}")))?;
        let verifier = random_b64(32);
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let state = random_b64(32);
        url.query_pairs_mut()
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri.as_str()),
                ("scope", scope),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
                ("state", state.as_str()),
            ])
            .extend_pairs(extra);
        Ok(Self {
            who,
            verifier: Secret::new(verifier),
            state,
            authorize_url: url.to_string(),
            redirect_uri,
            callback_path,
            cors_origin,
            listener,
        })
    }

    /// The URL to open in a browser.
    pub fn authorize_url(&self) -> &str {
        &self.authorize_url
    }

    /// Where the browser comes back.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// Why the callback is not listened for (then [`BrowserSignIn::code_from_pasted`] is the only way).
    pub fn callback_problem(&self) -> Option<&str> {
        self.listener.as_ref().err().map(String::as_str)
    }

    /// The PKCE verifier, for the code exchange.
    pub(crate) fn verifier(&self) -> &str {
        self.verifier.expose()
    }

    /// Waits at most `bound` for the browser to come back with the code of this sign-in (requests with another
    /// state or path are refused and waited past).
    pub async fn wait_for_callback(&self, bound: Duration) -> Result<String, OAuthError> {
        let listener = self
            .listener
            .as_ref()
            .map_err(|why| OAuthError::Flow(format!("the callback cannot be received: {why}")))?;
        let work = async {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    // Out of descriptors, say: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let one = callback(
                    socket,
                    &self.callback_path,
                    &self.state,
                    self.who.provider,
                    self.cors_origin,
                );
                if let Ok(Some(result)) = tokio::time::timeout(CALLBACK_REQUEST_BOUND, one).await {
                    return result;
                }
            }
        };
        tokio::time::timeout(bound, work)
            .await
            .map_err(|_| OAuthError::Expired {
                provider: self.who.provider,
                login: self.who.login,
            })?
    }

    /// The code from what the user pasted: the whole callback URL (its state is checked), `code#state`, a query
    /// string, or the bare code.
    pub fn code_from_pasted(&self, raw: &str) -> Result<String, OAuthError> {
        let value = raw.trim();
        let (code, state) = if let Ok(url) = reqwest::Url::parse(value) {
            code_and_state(url.query_pairs())
        } else if let Some((c, s)) = value.split_once('#') {
            (Some(c.to_owned()), Some(s.to_owned()))
        } else if value.contains("code=") {
            code_and_state(url::form_urlencoded::parse(
                value.trim_start_matches('?').as_bytes(),
            ))
        } else {
            (Some(value.to_owned()), None)
        };
        if state.as_deref().is_some_and(|s| s != self.state) {
            return Err(OAuthError::Flow(format!(
                "the pasted URL belongs to another {} sign-in (its state does not match)",
                self.who.provider
            )));
        }
        code.filter(|c| !c.is_empty())
            .ok_or_else(|| OAuthError::Flow(format!("no {} authorization code was given", self.who.provider)))
    }
}

/// The `code` and `state` among query pairs.
fn code_and_state<'a>(
    pairs: impl Iterator<Item = (Cow<'a, str>, Cow<'a, str>)>,
) -> (Option<String>, Option<String>) {
    let (mut code, mut state) = (None, None);
    for (k, v) in pairs {
        match &*k {
            "code" => code = Some(v.into_owned()),
            "state" => state = Some(v.into_owned()),
            _ => {}
        }
    }
    (code, state)
}

/// A listener on the redirect URI's host and port, or why there is none.
async fn listen(redirect_uri: &str) -> Result<TcpListener, String> {
    let url = reqwest::Url::parse(redirect_uri).map_err(|e| format!("the redirect URI is not a URL: {e}"))?;
    let host = url
        .host_str()
        .unwrap_or("localhost")
        .trim_matches(['[', ']'])
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    TcpListener::bind((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot listen on {host}:{port}: {e}"))
}

/// Answers one request to the callback listener: `Some(Ok(code))` for the callback of this sign-in,
/// `Some(Err(_))` when the provider refused it, `None` for anything else (answered 400/404 and waited past).
async fn callback(
    mut socket: tokio::net::TcpStream,
    path: &str,
    state: &str,
    provider: &'static str,
    cors_origin: Option<&str>,
) -> Option<Result<String, OAuthError>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_CALLBACK_HEAD {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("GET").to_owned();
    let target = words.next().unwrap_or("/");
    let url = reqwest::Url::parse(&format!("http://callback{target}")).ok()?;
    // A sign-in page that calls the callback itself (xAI's) is let read the answer, and through the browser's
    // private-network check.
    let origin = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("origin")
            .then(|| v.trim().to_owned())
    });
    let mut cors = String::from("Access-Control-Allow-Private-Network: true\r\n");
    if let (Some(allowed), Some(origin)) = (cors_origin, origin.as_deref())
        && allowed == origin
    {
        cors.push_str(&format!(
            "Access-Control-Allow-Origin: {origin}\r\nVary: Origin\r\n"
        ));
    }
    let reply = |status: &str, body: &str, kind: &str| {
        format!(
            "HTTP/1.1 {status}\r\n{cors}Content-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let q = |k: &str| {
        url.query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.into_owned())
    };
    let (answer, result) = if url.path() != path {
        (reply("404 Not Found", "Not found", "text/plain"), None)
    } else if method.eq_ignore_ascii_case("OPTIONS") {
        let preflight = format!(
            "HTTP/1.1 204 No Content\r\n{cors}Access-Control-Allow-Methods: GET, OPTIONS\r\n\
             Access-Control-Allow-Headers: Content-Type\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        (preflight, None)
    } else if q("state").as_deref() != Some(state) {
        (reply("400 Bad Request", "State mismatch", "text/plain"), None)
    } else if let Some(code) = q("code").filter(|c| !c.is_empty()) {
        (
            reply("200 OK", SUCCESS_HTML, "text/html; charset=utf-8"),
            Some(Ok(code)),
        )
    } else if let Some(error) = q("error") {
        let detail = q("error_description").unwrap_or(error);
        (
            reply("400 Bad Request", "Sign-in was not completed", "text/plain"),
            Some(Err(OAuthError::Denied { provider, detail })),
        )
    } else {
        (reply("400 Bad Request", "Missing code", "text/plain"), None)
    };
    let _ = socket.write_all(answer.as_bytes()).await;
    let _ = socket.shutdown().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHO: Who = Who {
        provider: "Test",
        login: "test",
    };

    async fn sign_in() -> BrowserSignIn {
        BrowserSignIn::start(
            WHO,
            "https://auth.example/authorize",
            "client",
            "openid",
            Redirect::LoopbackAnyPort("/callback"),
            &[("nonce", "n1")],
            None,
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn the_url_carries_the_challenge_of_the_verifier_and_the_extra_pairs() {
        let s = sign_in().await;
        let url = reqwest::Url::parse(s.authorize_url()).unwrap();
        let q = |k: &str| {
            url.query_pairs()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.into_owned())
                .unwrap()
        };
        let expected = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(s.verifier().as_bytes()));
        assert_eq!(q("code_challenge"), expected);
        assert_eq!(q("redirect_uri"), s.redirect_uri());
        assert!(s.redirect_uri().starts_with("http://127.0.0.1:") && s.redirect_uri().ends_with("/callback"));
        assert_eq!(q("nonce"), "n1");
        assert_eq!(s.callback_problem(), None);
    }

    #[tokio::test]
    async fn every_pasted_form_gives_the_code_and_another_sign_in_s_state_is_refused() {
        let s = sign_in().await;
        let state = s.state.clone();
        for pasted in [
            format!("{}?code=c1&state={state}", s.redirect_uri()),
            format!("c1#{state}"),
            format!("?code=c1&state={state}"),
            format!("code=c1&state={state}\n"),
            " c1 ".to_owned(),
        ] {
            assert_eq!(s.code_from_pasted(&pasted).unwrap(), "c1", "{pasted}");
        }
        let err = s
            .code_from_pasted(&format!("{}?code=c1&state=other", s.redirect_uri()))
            .unwrap_err();
        assert!(err.to_string().contains("state does not match"), "{err}");
        let err = s
            .code_from_pasted(&format!("{}?state={state}", s.redirect_uri()))
            .unwrap_err();
        assert!(err.to_string().contains("no Test authorization code"), "{err}");
        assert!(s.code_from_pasted("  ").is_err());
    }

    #[tokio::test]
    async fn a_registered_uri_that_cannot_be_listened_on_leaves_pasting() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri = format!(
            "http://127.0.0.1:{}/auth/callback",
            taken.local_addr().unwrap().port()
        );
        let s = BrowserSignIn::start(
            WHO,
            "https://auth.example/a",
            "c",
            "s",
            Redirect::Registered(&uri),
            &[],
            None,
        )
        .await
        .unwrap();
        let why = s.callback_problem().unwrap().to_owned();
        assert!(why.contains("cannot listen on 127.0.0.1"), "{why}");
        let err = s.wait_for_callback(Duration::from_secs(5)).await.unwrap_err();
        assert!(err.to_string().contains(&why), "{err}");
        assert_eq!(s.code_from_pasted("abc").unwrap(), "abc");
    }
}
