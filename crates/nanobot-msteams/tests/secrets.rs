//! The password and the tokens never leave: the adapter against local servers that fail every request while
//! echoing it back (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a
//! hang-up) as its token endpoint, with the password searched for in every error rendering and in everything logged
//! at TRACE level (`nanobot_testkit::channel_secrets_test`, `send_only`: a webhook channel's password travels only
//! when it sends). A conversation reference is on disk so that sending asks for a token.
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

nanobot_testkit::channel_secrets_test!(
    send_only,
    "msteams",
    "a:1conversation",
    ["SEKRITteamsPASSWORD0123456789", "SEKRIT-short"],
    |base, secret, media| {
        let state = media.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let conversation = serde_json::json!({"a:1conversation": {
            "service_url": "https://smba.trafficmanager.net/amer/", "conversation_id": "a:1conversation",
            "activity_id": "1", "conversation_type": "personal"
        }});
        std::fs::write(state.join("msteams_conversations.json"), conversation.to_string()).unwrap();
        let block = serde_json::json!({
            "appId": "app-1", "appPassword": secret, "allowFrom": ["*"], "host": "127.0.0.1", "port": 0,
            "loginEndpoint": base, "openIdMetadata": format!("{base}/oidc")
        });
        nanobot_msteams::MsTeamsChannel::new(
            nanobot_msteams::MsTeamsSettings::from_block(&block).unwrap(),
            &state,
            media.path(),
        )
    }
);
