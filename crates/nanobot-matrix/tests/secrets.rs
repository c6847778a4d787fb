//! The password and the token never leave: the adapter against local servers that fail every request while
//! echoing it back (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a
//! hang-up), with the secret searched for in every error rendering and in everything logged at TRACE level
//! (`nanobot_testkit::channel_secrets_test`). The password goes in the login's body, the token in every
//! request's header.
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

nanobot_testkit::channel_secrets_test!(
    "matrix",
    "!room:example.org",
    ["SEKRITmatrixPASSWORD0123456789", "syt_SEKRITmatrixTOKEN_0123"],
    |base, secret, media| {
        let login = if secret.starts_with("syt_") {
            serde_json::json!({"accessToken": secret, "deviceId": "DEVICE"})
        } else {
            serde_json::json!({"password": secret})
        };
        let mut block =
            serde_json::json!({"homeserver": base, "userId": "@bot:example.org", "allowFrom": ["*"]});
        block
            .as_object_mut()
            .unwrap()
            .extend(login.as_object().unwrap().clone());
        nanobot_matrix::MatrixChannel::new(
            nanobot_matrix::MatrixSettings::from_block(&block).unwrap(),
            media.path(),
            media.path(),
        )
    }
);
