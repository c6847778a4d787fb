//! The token never leaves: the adapter against local servers that fail every request while echoing it back
//! (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a hang-up), with
//! the token searched for in every error rendering and in everything logged at TRACE level
//! (`nanobot_testkit::channel_secrets_test`).
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

nanobot_testkit::channel_secrets_test!(
    "mattermost",
    "chanid00000000000000000001",
    ["SEKRITmattermostTOKEN0123456789", "SEKRIT-short"],
    |base, secret, media| {
        let block = serde_json::json!({"serverUrl": base, "token": secret, "allowFrom": ["*"]});
        nanobot_mattermost::MattermostChannel::new(
            nanobot_mattermost::MattermostSettings::from_block(&block).unwrap(),
            media.path(),
        )
    }
);
