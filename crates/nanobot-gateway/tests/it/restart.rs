//! `/restart` (issue 18) through the Telegram Bot API emulator: only an owner (a sender `allowFrom` names) may
//! restart; the gateway then ends gracefully with the chat that asked, and the next gateway, started with 0.3.5's
//! `NANOBOT_RESTART_NOTIFY_*` variables, tells that chat it is back.

use anyhow::Result;
use nanobot_gateway::{Gateway, restart_notice_vars};
use nanobot_testkit::telegram_emulator::{BotEvent, Emulator};
use nanobot_testkit::{MockLlm, TempHome};
use serde_json::json;

use crate::common::{GUARD, options};

const TOKEN: &str = "123456:RESTART-test";
const OWNER: i64 = 101;
const GUEST: i64 = 102;

fn patch(emu: &Emulator) -> serde_json::Value {
    json!({"channels": {"telegram": {
        "enabled": true, "token": TOKEN, "baseUrl": emu.api_url,
        // The owner is named; everyone else is allowed to talk, not to restart.
        "allowFrom": [OWNER.to_string(), "*"]
    }}})
}

/// The next text the bot sends to `chat`.
async fn next_text(emu: &mut Emulator, chat: i64) -> Result<String> {
    let text = tokio::time::timeout(GUARD, async {
        loop {
            if let BotEvent::Sent(body) = emu.next_event().await?
                && body["chat_id"].as_i64() == Some(chat)
            {
                return anyhow::Ok(body["text"].as_str().unwrap_or_default().to_owned());
            }
        }
    })
    .await??;
    Ok(text)
}

#[tokio::test]
async fn only_the_owner_restarts_and_the_next_gateway_says_it_is_back() -> Result<()> {
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = Gateway::start(options(&home, &mock, patch(&emu))).await?;
    emu.wait_until_polling().await?;

    emu.user_says(TOKEN, GUEST, "guest", "/restart").await?;
    let refused = next_text(&mut emu, GUEST).await?;
    assert!(
        refused.starts_with("Only an owner can restart nanobot"),
        "{refused}"
    );

    emu.user_says(TOKEN, OWNER, "owner", "/restart").await?;
    assert_eq!(next_text(&mut emu, OWNER).await?, "Restarting...");
    let request = tokio::time::timeout(GUARD, gw.restart_requested()).await?;
    assert_eq!(
        (request.channel.as_str(), request.chat_id.as_str()),
        ("telegram", OWNER.to_string().as_str())
    );
    assert!(gw.shutdown().await.drained);
    assert_eq!(
        mock.completion_requests().len(),
        0,
        "commands never reach the model"
    );

    // The process that replaces it gets 0.3.5's variables.
    let mut opts = options(&home, &mock, patch(&emu));
    let mut vars = opts.env.vars.clone();
    for (k, v) in restart_notice_vars(&request) {
        vars.insert(k, v);
    }
    opts.env.vars = vars;
    let gw = Gateway::start(opts).await?;
    let notice = next_text(&mut emu, OWNER).await?;
    assert!(
        notice.starts_with("Restart completed in ") && notice.ends_with("s."),
        "{notice}"
    );
    gw.shutdown().await;
    Ok(())
}
