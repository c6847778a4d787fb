//! The app secret never leaves: the adapter against local servers that fail every request while echoing it back
//! (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a hang-up), with
//! the secret searched for in every error rendering and in everything logged at TRACE level
//! (`nanobot_testkit::channel_secrets_test`).
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use nanobot_config::Secret;

nanobot_testkit::channel_secrets_test!(
    "qq",
    "c2c:OPENID1",
    ["SEKRITqqsecretSEKRIT0123456789", "SEKRIT-short"],
    |base, secret, media| {
        let mut s = nanobot_qq::QqSettings::new("1020304", Secret::new(secret));
        s.api_url = base.clone();
        s.token_url = format!("{base}/app/getAppAccessToken");
        s.allow_from = vec!["*".into()];
        nanobot_qq::QqChannel::new(s, media.path()).unwrap()
    }
);
