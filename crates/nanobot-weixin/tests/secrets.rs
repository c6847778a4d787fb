//! The bot token never leaves: the adapter against local servers that fail every request while echoing it back
//! (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a hang-up), with
//! the token searched for in every error rendering and in everything logged at TRACE level
//! (`nanobot_testkit::channel_secrets_test`). The token goes in every request's `Authorization` header.
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

nanobot_testkit::channel_secrets_test!(
    "weixin",
    "alice@im.wechat",
    ["f4ke0b07c0de@im.bot:SEKRITweixinTOKEN0123456789"],
    |base, secret, media| {
        let block = serde_json::json!({"token": secret, "baseUrl": base, "cdnBaseUrl": format!("{base}/c2c"),
            "allowFrom": ["*"]});
        nanobot_weixin::WeixinChannel::new(
            nanobot_weixin::WeixinSettings::from_block(&block).unwrap(),
            media.path().join("state"),
            media.path(),
        )
    }
);
