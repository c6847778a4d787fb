//! What the OAuth-based providers share: the token files of 0.3.5 (`oauth_cli_kit`'s format and places), the
//! errors of a sign-in, and bounded HTTP calls to authorisation servers.
//!
//! A token file is JSON with `access`, `refresh`, `expires` (milliseconds since the Unix epoch) and an optional
//! `account_id`, the layout 0.3.5 reads and writes, so a user switching between the two finds their login. It is
//! written atomically with mode 0600 in a directory made with mode 0700.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nanobot_util::{EnvMap, Secret};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod browser;
mod refresh;

pub use browser::BrowserSignIn;
pub(crate) use browser::{Redirect, Who, random_b64};
pub(crate) use refresh::KeptLogin;

/// 0.3.5's (`oauth_cli_kit`'s) variable naming one token file used instead of every provider's own.
pub const TOKEN_PATH_VAR: &str = "OAUTH_CLI_KIT_TOKEN_PATH";

/// The longest wait of one HTTP request to an authorisation server (connecting and reading the answer), 0.3.5's
/// 20 seconds.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// The most bytes read from an authorisation server's answer.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A stored OAuth login. `Debug` shows neither token.
#[derive(Clone, Serialize, Deserialize)]
pub struct OAuthToken {
    /// The access token.
    pub access: Secret,
    /// The refresh token (empty when the provider has none, as GitHub's device flow).
    pub refresh: Secret,
    /// When the access token expires, in milliseconds since the Unix epoch.
    pub expires: i64,
    /// The account the token belongs to (a GitHub login, a ChatGPT account id), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
}

impl fmt::Debug for OAuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthToken")
            .field("access", &self.access)
            .field("refresh", &self.refresh)
            .field("expires", &self.expires)
            .field("account_id", &self.account_id)
            .finish()
    }
}

impl OAuthToken {
    /// Whether the access token is still valid for at least `margin`.
    pub fn fresh_for(&self, margin: Duration) -> bool {
        let margin = i64::try_from(margin.as_millis()).unwrap_or(i64::MAX);
        self.expires.saturating_sub(now_ms()) > margin
    }
}

/// `env`'s value of `var`, trimmed, unless it is missing or blank: then `default` (how the providers' endpoint
/// variables override their defaults).
pub(crate) fn env_or(env: &EnvMap, var: &str, default: String) -> String {
    env.get(var)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map_or(default, str::to_owned)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Where one provider's login is kept, and reading, writing and removing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenStore {
    path: PathBuf,
}

impl TokenStore {
    /// The store at exactly `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The store 0.3.5 uses for `file` of application `app`: the file named by [`TOKEN_PATH_VAR`] when set,
    /// else `<user data dir>/<app>/auth/<file>` (on Linux `$XDG_DATA_HOME`, else `~/.local/share`; on macOS
    /// `~/Library/Application Support`; on Windows `%LOCALAPPDATA%`, as Python's `platformdirs`). `None` when
    /// no home directory is known.
    pub fn for_app(env: &EnvMap, app: &str, file: &str) -> Option<Self> {
        if let Some(p) = env.non_empty(TOKEN_PATH_VAR) {
            return Some(Self::at(p));
        }
        Some(Self::at(user_data_dir(env)?.join(app).join("auth").join(file)))
    }

    /// The token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file 0.3.5 takes while refreshing (removed by a logout too).
    pub fn lock_path(&self) -> PathBuf {
        self.path.with_extension("lock")
    }

    /// The stored login; `None` when there is none or the file cannot be understood (as 0.3.5, which then asks
    /// for a new login; a warning names the file).
    pub fn load(&self) -> Option<OAuthToken> {
        let text = match nanobot_util::read_to_string_bounded(&self.path, 1 << 20) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read the OAuth token file");
                return None;
            }
        };
        match serde_json::from_str::<OAuthToken>(&text) {
            Ok(t) if !t.access.is_empty() => Some(t),
            Ok(_) => None,
            Err(e) => {
                // serde's message names the field, never a value it could not parse as a string.
                tracing::warn!(path = %self.path.display(), error = %e, "the OAuth token file is not usable");
                None
            }
        }
    }

    /// Writes `token` atomically (mode 0600; the directory is made with mode 0700 when missing).
    pub fn save(&self, token: &OAuthToken) -> Result<(), OAuthError> {
        let storage = |source| OAuthError::Storage {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir).map_err(storage)?;
        }
        let text = serde_json::to_string_pretty(token).map_err(|e| storage(std::io::Error::other(e)))?;
        nanobot_util::write_atomic(&self.path, text.as_bytes()).map_err(|e| storage(e.into()))
    }

    /// Removes the token file and its lock file; returns the files removed. A file that is not there is not an
    /// error.
    pub fn remove(&self) -> Result<Vec<PathBuf>, OAuthError> {
        let mut removed = Vec::new();
        for path in [self.path.clone(), self.lock_path()] {
            match std::fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(OAuthError::Storage { path, source }),
            }
        }
        Ok(removed)
    }
}

/// The token file's lock, held while a refresh runs so that two programs (nanobot-rs and 0.3.5 included: the same
/// `<file>.lock`, locked with `flock`) do not both spend a refresh token; released when dropped.
#[derive(Debug)]
pub struct RefreshLock {
    _file: std::fs::File,
}

/// How long a refresh waits for another program's refresh to finish.
pub const REFRESH_LOCK_WAIT: Duration = Duration::from_secs(30);

impl TokenStore {
    /// Takes the lock file's exclusive lock, waiting at most `bound` for another holder.
    pub async fn lock_for_refresh(&self, bound: Duration) -> Result<RefreshLock, OAuthError> {
        let path = self.lock_path();
        let storage = |source| OAuthError::Storage {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir).map_err(storage)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(storage)?;
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(RefreshLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(OAuthError::Flow(format!(
                        "another program has been refreshing the login in {} for {}s",
                        self.path.display(),
                        bound.as_secs()
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(storage(e)),
            }
        }
    }
}

/// The user data directory as Python's `platformdirs.user_data_dir` finds it (without the application name).
fn user_data_dir(env: &EnvMap) -> Option<PathBuf> {
    if cfg!(windows) {
        return env.non_empty("LOCALAPPDATA").map(PathBuf::from);
    }
    let home = env.non_empty("HOME").map(PathBuf::from);
    if cfg!(target_os = "macos") {
        return home.map(|h| h.join("Library").join("Application Support"));
    }
    match env.get("XDG_DATA_HOME").map(str::trim).filter(|s| !s.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => home.map(|h| h.join(".local").join("share")),
    }
}

/// Why a sign-in, a token exchange or a token file failed. Never holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// The server could not be reached or the connection broke.
    #[error("cannot reach {endpoint}: {cause}")]
    Unreachable {
        /// The URL, without credentials or query.
        endpoint: String,
        /// What went wrong.
        cause: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The server did not answer in time.
    #[error("{endpoint} did not answer within {}s", after.as_secs())]
    TimedOut {
        /// The URL, without credentials or query.
        endpoint: String,
        /// How long was waited.
        after: Duration,
    },
    /// The server answered with an error status.
    #[error("{endpoint} answered HTTP {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Status {
        /// The URL, without credentials or query.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The server's error code and description, when it gave them.
        detail: String,
    },
    /// The server's answer is not what the protocol says.
    #[error("{endpoint} gave an answer nanobot cannot use: {problem}")]
    BadAnswer {
        /// The URL, without credentials or query.
        endpoint: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The user (or the server) refused the sign-in.
    #[error("{provider} sign-in was denied{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Denied {
        /// The provider's name for people.
        provider: &'static str,
        /// The server's explanation, if any.
        detail: String,
    },
    /// The sign-in was not completed in time.
    #[error("{provider} sign-in expired before it was completed; run `nanobot provider login {login}` again")]
    Expired {
        /// The provider's name for people.
        provider: &'static str,
        /// The name `nanobot provider login` takes.
        login: &'static str,
    },
    /// The stored login has expired and has no refresh token.
    #[error("{provider}'s login has expired and cannot be refreshed; run `nanobot provider login {login}`")]
    LoginExpired {
        /// The provider's name for people.
        provider: &'static str,
        /// The name `nanobot provider login` takes.
        login: &'static str,
    },
    /// There is no stored login.
    #[error("{provider} is not logged in; run `nanobot provider login {login}`")]
    NotLoggedIn {
        /// The provider's name for people.
        provider: &'static str,
        /// The name `nanobot provider login` takes.
        login: &'static str,
    },
    /// No home directory is known, so the token file has no place.
    #[error("cannot find the token file: neither HOME nor {TOKEN_PATH_VAR} is set")]
    NoHome,
    /// The token file could not be written, read or removed.
    #[error("cannot use the token file {}: {source}", path.display())]
    Storage {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The sign-in went wrong in another way (a state mismatch, a missing code).
    #[error("{0}")]
    Flow(String),
}

impl OAuthError {
    /// This error as a [`crate::ProviderError`] of `provider` (what a model call reports).
    pub(crate) fn into_provider_error(self, provider: &str) -> crate::ProviderError {
        match self {
            Self::Status { status, .. } if matches!(status, 401 | 403) => crate::ProviderError::Auth {
                provider: provider.to_owned(),
                status,
                message: self.to_string(),
            },
            Self::Unreachable { .. } | Self::TimedOut { .. } => {
                crate::ProviderError::transient(provider, self.to_string(), Some(Box::new(self)))
            }
            Self::Status { status, .. } if status == 429 || status >= 500 => {
                crate::ProviderError::transient(provider, self.to_string(), Some(Box::new(self)))
            }
            Self::BadAnswer { .. } => {
                crate::ProviderError::decode(provider, self.to_string(), Some(Box::new(self)))
            }
            other => crate::ProviderError::Config(format!("{provider}: {other}")),
        }
    }
}

/// `application/x-www-form-urlencoded` text of `pairs`.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A form `POST` to an OAuth endpoint that answers JSON (token exchange and refresh).
pub(crate) fn form_post(
    http: &reqwest::Client,
    url: &str,
    pairs: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    http.post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(form(pairs))
}

/// Sends `req` (to `url`, named in errors without its query) and reads a JSON object answer, at most
/// [`MAX_ANSWER_BYTES`], all within `timeout`. A non-2xx status is [`OAuthError::Status`] with the server's
/// `error`/`error_description`/`message` fields (never the whole body); 2xx answers that are not a JSON object
/// are [`OAuthError::BadAnswer`]. With `accept_error_json`, a 4xx answer whose body is a JSON object carrying
/// an `error` field is returned as the answer (OAuth token endpoints say `authorization_pending` that way).
pub(crate) async fn send_json(
    req: reqwest::RequestBuilder,
    url: &str,
    timeout: Duration,
    accept_error_json: bool,
) -> Result<serde_json::Map<String, Value>, OAuthError> {
    let endpoint = crate::display_endpoint(url);
    let work = async {
        let resp = req.send().await.map_err(|e| unreachable(&endpoint, e))?;
        let status = resp.status();
        let mut resp = resp;
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| unreachable(&endpoint, e))? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(OAuthError::BadAnswer {
                    endpoint: endpoint.clone(),
                    problem: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, bytes))
    };
    let (status, bytes) = match tokio::time::timeout(timeout, work).await {
        Err(_) => {
            return Err(OAuthError::TimedOut {
                endpoint,
                after: timeout,
            });
        }
        Ok(r) => r?,
    };
    let parsed = serde_json::from_slice::<Value>(&bytes).ok();
    if !status.is_success() {
        if accept_error_json
            && status.is_client_error()
            && let Some(Value::Object(map)) = &parsed
            && map.get("error").is_some_and(Value::is_string)
        {
            return Ok(map.clone());
        }
        return Err(OAuthError::Status {
            endpoint,
            status: status.as_u16(),
            detail: parsed.as_ref().map(error_detail).unwrap_or_default(),
        });
    }
    match parsed {
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(OAuthError::BadAnswer {
            endpoint,
            problem: "expected a JSON object".into(),
        }),
        None => Err(OAuthError::BadAnswer {
            endpoint,
            problem: "the answer is not JSON".into(),
        }),
    }
}

fn unreachable(endpoint: &str, e: reqwest::Error) -> OAuthError {
    if e.is_timeout() {
        return OAuthError::TimedOut {
            endpoint: endpoint.to_owned(),
            after: HTTP_TIMEOUT,
        };
    }
    let e = e.without_url();
    OAuthError::Unreachable {
        endpoint: endpoint.to_owned(),
        cause: nanobot_util::error_chain(&e),
        source: e,
    }
}

/// The server's own words about an error: `error`, `error_description` or `message` (also nested under
/// `error`), at most 300 characters.
pub(crate) fn error_detail(v: &Value) -> String {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let nested = v.get("error").filter(|e| e.is_object());
    let parts: Vec<String> = [
        text(v, "error"),
        text(v, "error_description"),
        text(v, "message"),
        nested.and_then(|e| text(e, "message")),
        nested.and_then(|e| text(e, "code")),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.trim().is_empty())
    .collect();
    let joined = parts.join(": ");
    joined.chars().take(300).collect()
}

/// A required non-empty string field of an answer from `url`.
pub(crate) fn required_str(
    map: &serde_json::Map<String, Value>,
    key: &str,
    url: &str,
) -> Result<String, OAuthError> {
    match map.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(_) => Err(OAuthError::BadAnswer {
            endpoint: crate::display_endpoint(url),
            problem: format!("`{key}` is empty or not a string"),
        }),
        None => Err(OAuthError::BadAnswer {
            endpoint: crate::display_endpoint(url),
            problem: format!("`{key}` is missing"),
        }),
    }
}

/// A non-negative whole number field (`interval`, `expires_in`), when present and usable.
pub(crate) fn seconds_field(map: &serde_json::Map<String, Value>, key: &str) -> Option<u64> {
    match map.get(key)? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An HTTP client for authorisation servers: the shared TLS set-up, connect timeout [`HTTP_TIMEOUT`].
pub(crate) fn oauth_http_client() -> Result<reqwest::Client, OAuthError> {
    crate::http::http_client_builder(HTTP_TIMEOUT)
        .build()
        .map_err(|e| OAuthError::Flow(format!("cannot build the HTTP client: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_are_0_3_5_s_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let env = EnvMap::from_iter([("HOME", dir.path().to_str().unwrap())]);
        let store = TokenStore::for_app(&env, "nanobot", "github-copilot.json").unwrap();
        if !cfg!(windows) && !cfg!(target_os = "macos") {
            assert_eq!(
                store.path(),
                dir.path().join(".local/share/nanobot/auth/github-copilot.json")
            );
        }
        assert!(store.load().is_none());
        let token = OAuthToken {
            access: Secret::new("gho_secret"),
            refresh: Secret::new(""),
            expires: 1_700_000_000_000,
            account_id: Some("octocat".into()),
        };
        assert!(!format!("{token:?}").contains("gho_secret"));
        store.save(&token).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(store.path()).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"access": "gho_secret", "refresh": "", "expires": 1_700_000_000_000_i64,
                "account_id": "octocat"})
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(store.load().unwrap().access.expose(), "gho_secret");
        std::fs::write(store.lock_path(), "").unwrap();
        assert_eq!(store.remove().unwrap().len(), 2);
        assert!(store.remove().unwrap().is_empty());
    }

    #[test]
    fn the_override_and_xdg_are_honoured() {
        let env = EnvMap::from_iter([("HOME", "/h"), (TOKEN_PATH_VAR, "/t/tok.json")]);
        assert_eq!(
            TokenStore::for_app(&env, "nanobot", "x.json").unwrap().path(),
            Path::new("/t/tok.json")
        );
        if !cfg!(windows) && !cfg!(target_os = "macos") {
            let env = EnvMap::from_iter([("HOME", "/h"), ("XDG_DATA_HOME", "/d")]);
            assert_eq!(
                TokenStore::for_app(&env, "oauth-cli-kit", "codex.json")
                    .unwrap()
                    .path(),
                Path::new("/d/oauth-cli-kit/auth/codex.json")
            );
        }
        assert!(TokenStore::for_app(&EnvMap::new(), "nanobot", "x.json").is_none() || cfg!(windows));
    }

    #[tokio::test]
    async fn the_refresh_lock_is_exclusive_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::at(dir.path().join("auth/codex.json"));
        let held = store.lock_for_refresh(Duration::from_secs(1)).await.unwrap();
        assert!(store.lock_path().is_file());
        let err = store.lock_for_refresh(Duration::ZERO).await.unwrap_err();
        assert!(err.to_string().contains("another program"), "{err}");
        drop(held);
        store.lock_for_refresh(Duration::ZERO).await.unwrap();
    }

    #[test]
    fn a_malformed_file_is_no_login() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::at(dir.path().join("t.json"));
        std::fs::write(store.path(), r#"{"access": 5}"#).unwrap();
        assert!(store.load().is_none());
        std::fs::write(store.path(), "not json").unwrap();
        assert!(store.load().is_none());
    }
}
