//! The iLink bot API as 0.3.5 calls it: `POST <base>/ilink/bot/<name>` with a JSON body carrying `base_info`, its
//! headers, its timeouts, and its answers (errors come back as HTTP 200 with `ret` / `errcode`).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use nanobot_channels::{ChannelError, server_text};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::NAME;

/// The openclaw-weixin protocol version 0.3.5 speaks.
pub(crate) const CHANNEL_VERSION: &str = "2.4.6";
/// [`CHANNEL_VERSION`] as `0x00MMNNPP` in decimal (`iLink-App-ClientVersion`).
pub(crate) const CLIENT_VERSION: &str = "132102";
/// `iLink-App-Id`.
const APP_ID: &str = "bot";

/// A context token that cannot send more.
pub(crate) const ERR_CONTEXT: i64 = -2;
/// An invalid argument.
pub(crate) const ERR_INVALID: i64 = -3;
/// A stale bot token: the login expired.
pub(crate) const ERR_SESSION: i64 = -14;

/// `getconfig`, `sendtyping` and the notifications (0.3.5's 10 s).
pub(crate) const CONFIG_TIMEOUT: Duration = Duration::from_secs(10);
/// The QR status poll (0.3.5's 60 s).
pub(crate) const QR_POLL_TIMEOUT: Duration = Duration::from_secs(60);
/// Every other call (0.3.5's 15 s).
pub(crate) const API_TIMEOUT: Duration = Duration::from_secs(15);
/// Connecting (0.3.5's 30 s).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest `getupdates` answer read: a batch of long messages may be far over the 2 MiB other answers are
/// read up to, and one never read would stall the poll on its cursor.
pub(crate) const MAX_POLL_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

/// What 0.3.5 says when the login expired.
pub(crate) const AUTH_EXPIRED: &str = "WeChat login expired. Scan again to reconnect.";

/// `base_info` of every bot call's body: the protocol version and who is calling.
pub(crate) fn base_info() -> Value {
    json!({
        "channel_version": CHANNEL_VERSION,
        "bot_agent": concat!("nanobot-rs/", env!("CARGO_PKG_VERSION"), " (rust)"),
    })
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The request timed out.
    Timeout,
    /// The connection failed (the reason, without the URL).
    Network(String),
    /// An HTTP status other than success.
    Status(u16),
    /// The answer is not a JSON object (retryable, as 0.3.5 counts it).
    BadAnswer,
    /// The answer is longer than the bound it is read up to (in bytes).
    TooLarge(u64),
    /// `ret` / `errcode` -2: the context token cannot send more.
    Quota(String),
    /// `ret` / `errcode` -14: the login expired.
    Auth(String),
    /// Another `ret` / `errcode`.
    Api {
        /// The call.
        endpoint: String,
        /// `ret`.
        ret: i64,
        /// `errcode`.
        errcode: i64,
        /// `errmsg`, cleaned of the token.
        errmsg: String,
    },
}

/// 0.3.5's retryable statuses: 408, 425, 429 and 5xx.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 425 | 429) || status >= 500
}

impl CallError {
    /// Whether trying again later may succeed (network trouble, 408/425/429/5xx, a broken answer).
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Self::Timeout | Self::Network(_) | Self::BadAnswer => true,
            Self::Status(s) => retryable_status(*s),
            Self::Quota(_) | Self::Auth(_) | Self::Api { .. } | Self::TooLarge(_) => false,
        }
    }

    /// The error the channel manager acts on: the auth error stops the channel, retryable ones are transient,
    /// the rest rejected.
    pub(crate) fn into_channel(self, what: &str) -> ChannelError {
        match self {
            Self::Auth(why) => auth_error(&why),
            e if e.retryable() => ChannelError::transient(NAME, format!("{what}: {e}")),
            e => ChannelError::rejected(NAME, format!("{what}: {e}")),
        }
    }
}

/// The login-expired error: 0.3.5's words and what to run.
pub(crate) fn auth_error(why: &str) -> ChannelError {
    ChannelError::auth(
        NAME,
        format!("{AUTH_EXPIRED} Run `nanobot channels login weixin` (the server answered -14: {why})"),
    )
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("the request timed out"),
            Self::Network(why) => write!(f, "the request failed: {why}"),
            Self::Status(s) => write!(f, "HTTP {s}"),
            Self::BadAnswer => f.write_str("the server's answer is not a JSON object"),
            Self::TooLarge(max) if max % (1024 * 1024) == 0 => write!(
                f,
                "the server's answer is larger than {} MiB, the most read",
                max / (1024 * 1024)
            ),
            Self::TooLarge(max) => write!(f, "the server's answer is larger than {max} bytes, the most read"),
            Self::Quota(why) => write!(f, "the context token cannot send more (-2): {why}"),
            Self::Auth(why) => write!(f, "the login expired (-14): {why}"),
            Self::Api {
                endpoint,
                ret,
                errcode,
                errmsg,
            } => {
                let code = if *errcode != 0 { errcode } else { ret };
                write!(
                    f,
                    "WeChat {endpoint} failed (code={code}, ret={ret}, errcode={errcode}): {}",
                    if errmsg.is_empty() {
                        "no error message"
                    } else {
                        errmsg
                    }
                )
            }
        }
    }
}

impl std::error::Error for CallError {}

/// A JSON number, a numeric string or a bool as an integer; anything else 0 (0.3.5's `_response_int`).
pub(crate) fn int_at(v: &Value, key: &str) -> i64 {
    match &v[key] {
        Value::Bool(b) => i64::from(*b),
        Value::Number(n) => n.as_i64().unwrap_or_else(|| n.as_f64().map_or(0, |f| f as i64)),
        Value::String(s) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// `Ok` when the answer's `ret` and `errcode` are 0; else the error (0.3.5's `_raise_for_api_error`). `errmsg`
/// is cleaned of `secrets`.
pub(crate) fn check(endpoint: &str, answer: &Value, secrets: &[&str]) -> Result<(), CallError> {
    let (ret, errcode) = (int_at(answer, "ret"), int_at(answer, "errcode"));
    if ret == 0 && errcode == 0 {
        return Ok(());
    }
    let errmsg = server_text(answer["errmsg"].as_str().unwrap_or_default(), secrets);
    if ret == ERR_CONTEXT || errcode == ERR_CONTEXT {
        let why = if errmsg.is_empty() {
            "context token expired, quota exhausted, or sending restricted".to_owned()
        } else {
            errmsg
        };
        return Err(CallError::Quota(format!("{endpoint}: {why}")));
    }
    if ret == ERR_SESSION || errcode == ERR_SESSION {
        let why = if errmsg.is_empty() {
            "bot token is stale".to_owned()
        } else {
            errmsg
        };
        return Err(CallError::Auth(format!("{endpoint}: {why}")));
    }
    Err(CallError::Api {
        endpoint: endpoint.to_owned(),
        ret,
        errcode,
        errmsg,
    })
}

/// Where a call goes and as whom.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The API base (`baseUrl`, or a QR redirect's host).
    pub base: &'a str,
    /// The bot token (none for the QR login).
    pub token: Option<&'a str>,
    /// `routeTag`.
    pub route_tag: Option<&'a str>,
}

/// X-WECHAT-UIN: base64 of a random uint32 in decimal, new for each request (openclaw-weixin's `randomWechatUin`).
fn random_uin() -> String {
    STANDARD.encode(rand::random::<u32>().to_string())
}

/// 0.3.5's headers.
pub(crate) fn headers(target: &Target<'_>) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut put = |name: &'static str, value: &str, sensitive: bool| {
        if let Ok(mut v) = HeaderValue::from_str(value) {
            v.set_sensitive(sensitive);
            h.insert(HeaderName::from_static(name), v);
        }
    };
    put("x-wechat-uin", &random_uin(), false);
    put("content-type", "application/json", false);
    put("authorizationtype", "ilink_bot_token", false);
    put("ilink-app-id", APP_ID, false);
    put("ilink-app-clientversion", CLIENT_VERSION, false);
    if let Some(token) = target.token.filter(|t| !t.is_empty()) {
        put("authorization", &format!("Bearer {token}"), true);
    }
    if let Some(tag) = target.route_tag.filter(|t| !t.is_empty()) {
        put("skroutetag", tag, false);
    }
    h
}

/// The HTTP client of the API and the CDN: no proxy of the environment (0.3.5's `trust_env=False`), redirects
/// followed (reqwest drops the `Authorization` header on a redirect to another host).
pub(crate) fn client() -> Result<reqwest::Client, ChannelError> {
    nanobot_channels::api_client(NAME, |b| {
        b.no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(10))
    })
}

/// A transport error as a [`CallError`] (the URL left out).
pub(crate) fn transport(e: reqwest::Error) -> CallError {
    if e.is_timeout() {
        CallError::Timeout
    } else {
        CallError::Network(nanobot_util::error_chain(&e.without_url()))
    }
}

async fn answer(resp: reqwest::Response, max: Option<u64>) -> Result<Value, CallError> {
    let status = resp.status();
    if !status.is_success() {
        return Err(CallError::Status(status.as_u16()));
    }
    let value = match max {
        None => nanobot_channels::download::read_json(resp).await,
        Some(max) => {
            let body = nanobot_channels::download::read_body(NAME, "the answer", resp, max)
                .await
                .map_err(|e| {
                    if e.is_too_large() {
                        CallError::TooLarge(max)
                    } else {
                        CallError::Network(nanobot_util::error_chain(&e))
                    }
                })?;
            serde_json::from_slice(&body).unwrap_or(Value::Null)
        }
    };
    match value {
        v @ Value::Object(_) => Ok(v),
        _ => Err(CallError::BadAnswer),
    }
}

/// `POST <base>/<path>` with `body` (plus `base_info` when `with_base_info`), bounded by `timeout`; the JSON
/// object answered (its `ret` / `errcode` not checked), read up to 2 MiB.
pub(crate) async fn post(
    client: &reqwest::Client,
    target: &Target<'_>,
    path: &str,
    body: Value,
    with_base_info: bool,
    timeout: Duration,
) -> Result<Value, CallError> {
    post_bounded(client, target, path, body, with_base_info, timeout, None).await
}

/// [`post`], the answer read up to `max` bytes (`None`: the 2 MiB of every platform answer); a longer one is
/// [`CallError::TooLarge`].
pub(crate) async fn post_bounded(
    client: &reqwest::Client,
    target: &Target<'_>,
    path: &str,
    mut body: Value,
    with_base_info: bool,
    timeout: Duration,
    max: Option<u64>,
) -> Result<Value, CallError> {
    if with_base_info && body.get("base_info").is_none() {
        body["base_info"] = base_info();
    }
    let url = format!("{}/{path}", target.base);
    let resp = client
        .post(url)
        .headers(headers(target))
        .body(body.to_string())
        .timeout(timeout)
        .send()
        .await
        .map_err(transport)?;
    answer(resp, max).await
}

/// `GET <base>/<path>?<query>`, bounded by `timeout`; the JSON object answered.
pub(crate) async fn get(
    client: &reqwest::Client,
    target: &Target<'_>,
    path: &str,
    query: &[(&str, &str)],
    timeout: Duration,
) -> Result<Value, CallError> {
    let url =
        reqwest::Url::parse_with_params(&format!("{}/{path}", target.base.trim_end_matches('/')), query)
            .map_err(|e| CallError::Network(format!("bad address: {e}")))?;
    let resp = client
        .get(url)
        .headers(headers(target))
        .timeout(timeout)
        .send()
        .await
        .map_err(transport)?;
    answer(resp, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_as_0_3_5_checks_them() {
        assert_eq!(check("x", &json!({}), &[]), Ok(()));
        assert_eq!(check("x", &json!({"ret": 0, "errcode": "0"}), &[]), Ok(()));
        assert!(
            matches!(check("sendmessage", &json!({"ret": -2}), &[]), Err(CallError::Quota(w)) if w.contains("sendmessage"))
        );
        assert!(matches!(
            check("x", &json!({"errcode": "-2"}), &[]),
            Err(CallError::Quota(_))
        ));
        let stale = check(
            "getupdates",
            &json!({"errcode": -14, "errmsg": "session timeout"}),
            &[],
        );
        assert_eq!(stale, Err(CallError::Auth("getupdates: session timeout".into())));
        let other = check(
            "x",
            &json!({"ret": -3, "errcode": -3, "errmsg": "bad TOKEN-1"}),
            &["TOKEN-1"],
        )
        .unwrap_err();
        assert_eq!(
            other.to_string(),
            "WeChat x failed (code=-3, ret=-3, errcode=-3): bad [REDACTED]"
        );
        assert!(!other.retryable());
        assert_eq!(int_at(&json!({"a": true}), "a"), 1);
        assert_eq!(int_at(&json!({"a": "x"}), "a"), 0);
    }

    #[test]
    fn errors_become_what_the_manager_acts_on() {
        assert!(matches!(
            CallError::Timeout.into_channel("poll"),
            ChannelError::Transient { .. }
        ));
        assert!(matches!(
            CallError::Status(503).into_channel("poll"),
            ChannelError::Transient { .. }
        ));
        assert!(matches!(
            CallError::Status(429).into_channel("poll"),
            ChannelError::Transient { .. }
        ));
        assert!(matches!(
            CallError::Status(404).into_channel("poll"),
            ChannelError::Rejected { .. }
        ));
        assert!(matches!(
            CallError::BadAnswer.into_channel("poll"),
            ChannelError::Transient { .. }
        ));
        let auth = CallError::Auth("getupdates: session timeout".into()).into_channel("poll");
        assert!(matches!(auth, ChannelError::Auth { .. }));
        let shown = nanobot_util::error_chain(&auth);
        assert!(
            shown.contains(AUTH_EXPIRED) && shown.contains("nanobot channels login weixin"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_long_poll_answer_is_read_up_to_its_own_bound() {
        use nanobot_testkit::fake_weixin::FakeWeixin;
        let fake = FakeWeixin::start().await.unwrap();
        let token = fake.issue_token("a@im.wechat");
        let long = "长".repeat(1024 * 1024);
        fake.push_text("a@im.wechat", &long);
        let client = client().unwrap();
        let base = fake.base_url();
        let target = Target {
            base: &base,
            token: Some(&token),
            route_tag: None,
        };
        let poll = |max| {
            post_bounded(
                &client,
                &target,
                "ilink/bot/getupdates",
                json!({"get_updates_buf": ""}),
                true,
                API_TIMEOUT,
                max,
            )
        };
        // Over the 2 MiB of other answers, within the poll's bound.
        assert_eq!(poll(None).await, Err(CallError::BadAnswer));
        let answer = poll(Some(MAX_POLL_ANSWER_BYTES)).await.unwrap();
        assert_eq!(answer["msgs"][0]["item_list"][0]["text_item"]["text"], long);
        // Over the bound: an error naming it.
        let err = poll(Some(1024 * 1024)).await.unwrap_err();
        assert_eq!(err, CallError::TooLarge(1024 * 1024));
        assert!(!err.retryable());
        let shown = nanobot_util::error_chain(&err.into_channel("the long poll (getupdates)"));
        assert!(
            shown.contains("the long poll (getupdates): the server's answer is larger than 1 MiB"),
            "{shown}"
        );
        assert_eq!(
            poll(Some(1000)).await.unwrap_err().to_string(),
            "the server's answer is larger than 1000 bytes, the most read"
        );
    }

    #[test]
    fn headers_are_0_3_5s_and_the_token_is_sensitive() {
        let h = headers(&Target {
            base: "http://x",
            token: Some("tok"),
            route_tag: Some("7"),
        });
        assert_eq!(h["authorizationtype"], "ilink_bot_token");
        assert_eq!(h["ilink-app-id"], "bot");
        assert_eq!(h["ilink-app-clientversion"], "132102");
        assert_eq!(h["skroutetag"], "7");
        assert!(h["authorization"].is_sensitive());
        let uin = STANDARD.decode(h["x-wechat-uin"].as_bytes()).unwrap();
        assert!(String::from_utf8(uin).unwrap().parse::<u32>().is_ok());
        let none = headers(&Target {
            base: "http://x",
            token: None,
            route_tag: None,
        });
        assert!(none.get("authorization").is_none() && none.get("skroutetag").is_none());
        // 2.4.6 as 0x00MMNNPP.
        assert_eq!(CLIENT_VERSION.parse::<u32>().unwrap(), (2 << 16) | (4 << 8) | 6);
    }
}
