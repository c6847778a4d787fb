use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_mattermost::{MattermostChannel, MattermostSettings};
use nanobot_testkit::fake_mattermost::{BOT_USERNAME, FakeMattermost, TEAM_ID};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "mm-token-1";

/// A 26-character id (Mattermost's length) starting with `name`.
fn id(name: &str) -> String {
    format!("{name:0<26}")
}

struct Harness {
    fake: FakeMattermost,
    channel: Arc<MattermostChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        let fake = FakeMattermost::start(TOKEN).await?;
        fake.add_user(&id("alice"), "alice", "Alice@Example.com");
        fake.add_user(&id("eve"), "eve", "eve@example.com");
        fake.add_channel(&id("dmalice"), "D", "");
        fake.add_channel(&id("dmeve"), "D", "");
        fake.add_channel(&id("town"), "O", TEAM_ID);
        fake.add_channel(&id("elsewhere"), "O", &id("otherteam"));
        let mut block = json!({"enabled": true, "serverUrl": fake.url(), "token": TOKEN, "teamId": TEAM_ID,
            "allowFrom": [id("alice")]});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let channel = Arc::new(
            MattermostChannel::new(MattermostSettings::from_block(&block)?, media.path())
                .with_pairing(pairing),
        );
        let bus = Arc::new(InProcessBus::new(64));
        let mut manager = ChannelManager::new(ManagerSettings {
            supervisor: SupervisorSettings::quick(),
            ..ManagerSettings::default()
        });
        manager.add(channel.clone());
        let manager = manager.spawn(bus.clone());
        let h = Self {
            fake,
            channel,
            bus,
            manager,
            media,
            _data: data,
        };
        h.connected(1).await?;
        Ok(h)
    }

    async fn connected(&self, n: u64) -> Result<()> {
        let mut c = self.channel.connections();
        tokio::time::timeout(Duration::from_secs(30), c.wait_for(|x| *x >= n))
            .await
            .context("no WebSocket hello within 30 s")??;
        Ok(())
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(30), self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// The posts created so far, once there are `n`.
    async fn created(&self, n: usize) -> Result<Vec<Value>> {
        Ok(self
            .fake
            .wait_calls("POST", "/api/v4/posts", n)
            .await?
            .into_iter()
            .map(|c| c.body)
            .collect())
    }

    async fn stop(self) {
        self.manager.stop(Duration::from_secs(20)).await;
    }
}

#[tokio::test]
async fn a_direct_message_is_answered_with_reactions_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let post = h
        .fake
        .post_event(&id("alice"), &id("dmalice"), "hello bot", None, &[]);
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("mattermost", id("alice").as_str(), id("dmalice").as_str())
    );
    assert_eq!(inbound.content, "hello bot");
    assert_eq!(inbound.metadata["message_id"], post);
    assert_eq!(inbound.metadata["mattermost"]["channel_type"], "dm");
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], false);
    assert_eq!(
        inbound.session_key(),
        format!("mattermost:{}", id("dmalice")),
        "a DM keeps the chat's session"
    );
    let reacted = h.fake.wait_calls("POST", "/api/v4/reactions", 1).await?;
    assert_eq!(reacted[0].body["emoji_name"], "eyes");
    assert_eq!(reacted[0].body["post_id"], post);

    let mut reply = OutboundMessage::reply("mattermost", id("dmalice"), "Hi Alice");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let created = h.created(1).await?;
    assert_eq!(created[0]["channel_id"], id("dmalice"));
    assert_eq!(created[0]["message"], "Hi Alice");
    assert!(
        created[0].get("root_id").is_none(),
        "a DM answer is not threaded: {}",
        created[0]
    );
    let removed = h.fake.wait_calls("DELETE", "/api/v4/users/", 1).await?;
    assert!(
        removed[0]
            .path
            .ends_with(&format!("/posts/{post}/reactions/eyes")),
        "{}",
        removed[0].path
    );
    let reacted = h.fake.wait_calls("POST", "/api/v4/reactions", 2).await?;
    assert_eq!(reacted[1].body["emoji_name"], "white_check_mark");
    assert_eq!(reacted[1].body["post_id"], post);
    assert!(
        reacted
            .iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer mm-token-1"))
    );

    // A stranger's DM: a pairing code, never the agent.
    h.fake
        .post_event(&id("eve"), &id("dmeve"), "let me in", None, &[]);
    let created = h.created(2).await?;
    assert_eq!(created[1]["channel_id"], id("dmeve"));
    assert!(
        created[1]["message"].as_str().unwrap().contains("pairing"),
        "{}",
        created[1]
    );
    h.fake
        .post_event(&id("alice"), &id("dmalice"), "after eve", None, &[]);
    assert_eq!(h.inbound().await?.content, "after eve");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn channel_posts_follow_the_policy_and_answers_open_a_thread() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    // No mention: ignored. Another team's channel: ignored. A stranger's mention: ignored.
    h.fake
        .post_event(&id("alice"), &id("town"), "just chatting", None, &[]);
    h.fake.post_event(
        &id("alice"),
        &id("elsewhere"),
        &format!("@{BOT_USERNAME} other team"),
        None,
        &[],
    );
    h.fake.post_event(
        &id("eve"),
        &id("town"),
        &format!("@{BOT_USERNAME} me too"),
        None,
        &[],
    );
    let post = h.fake.post_event(
        &id("alice"),
        &id("town"),
        &format!("@{BOT_USERNAME} what's up"),
        None,
        &[],
    );
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "what's up");
    assert_eq!(inbound.chat_id, id("town"));
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], true);
    assert_eq!(inbound.metadata["mattermost"]["thread_ts"], post);
    assert_eq!(inbound.session_key(), format!("mattermost:{}:{post}", id("town")));

    let mut reply = OutboundMessage::reply("mattermost", id("town"), "all good");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let created = h.created(1).await?;
    assert_eq!(
        created[0]["root_id"], post,
        "the answer opens a thread under the post"
    );

    // A reply in that thread: the thread's earlier posts come with it, once.
    h.fake.post_event(
        &id("alice"),
        &id("town"),
        &format!("@{BOT_USERNAME} and now?"),
        Some(&post),
        &[],
    );
    let inbound = h.inbound().await?;
    assert!(
        inbound
            .content
            .starts_with("Mattermost thread context before this mention:\n"),
        "{}",
        inbound.content
    );
    assert!(inbound.content.contains("- bot: all good"), "{}", inbound.content);
    assert!(
        inbound.content.ends_with("Current message:\nand now?"),
        "{}",
        inbound.content
    );
    assert_eq!(inbound.session_key(), format!("mattermost:{}:{post}", id("town")));
    let thread = h
        .fake
        .wait_calls("GET", &format!("/api/v4/posts/{post}/thread"), 1)
        .await?;
    assert_eq!(thread[0].query, "perPage=20");
    h.fake.post_event(
        &id("alice"),
        &id("town"),
        &format!("@{BOT_USERNAME} again"),
        Some(&post),
        &[],
    );
    assert_eq!(
        h.inbound().await?.content,
        "again",
        "the context comes once per thread"
    );
    assert!(
        h.fake.calls().iter().all(|c| !c.path.contains("elsewhere")),
        "nothing fetched for another team's post beyond its channel"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_go_both_ways_and_a_long_answer_is_split() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.fake.add_file(&id("file1"), "notes.txt", b"the notes".to_vec());
    h.fake.post_event(
        &id("alice"),
        &id("dmalice"),
        "see attached",
        None,
        &[&id("file1")],
    );
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1, "{inbound:?}");
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("mattermost")), "{saved:?}");
    assert_eq!(std::fs::read_to_string(saved)?, "the notes");

    let out = h.media.path().join("report.txt");
    std::fs::write(&out, "REPORT")?;
    let long = "word ".repeat(4000);
    let mut reply = OutboundMessage::reply("mattermost", id("dmalice"), long.trim());
    reply.media = vec![out.display().to_string()];
    h.bus.publish_outbound(reply).await?;
    let uploads = h.fake.wait_calls("POST", "/api/v4/files", 1).await?;
    assert_eq!(uploads[0].body["channel_id"], id("dmalice"));
    assert_eq!(
        uploads[0].body["files"][0],
        json!({"name": "report.txt", "size": 6})
    );
    let created = h.created(2).await?;
    assert_eq!(
        created[0]["file_ids"].as_array().map(Vec::len),
        Some(1),
        "files with the first piece"
    );
    assert!(created[1].get("file_ids").is_none());
    let pieces: Vec<&str> = created.iter().filter_map(|c| c["message"].as_str()).collect();
    assert!(
        pieces
            .iter()
            .all(|p| p.chars().count() <= nanobot_mattermost::MAX_POST_CHARS)
    );
    assert_eq!(pieces.join(" ").split_whitespace().count(), 4000);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_channel_comes_back_after_a_drop_and_a_wrong_token_is_one_clear_error() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.fake.drop_connections();
    h.connected(2).await?;
    h.fake
        .post_event(&id("alice"), &id("dmalice"), "still there?", None, &[]);
    assert_eq!(h.inbound().await?.content, "still there?");
    h.stop().await;

    let fake = FakeMattermost::start(TOKEN).await?;
    let url = fake.url();
    let channel = MattermostChannel::new(
        MattermostSettings::from_block(&json!({"serverUrl": url, "token": "SEKRIT-wrong"}))?,
        std::env::temp_dir(),
    );
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        channel.run(bus, CancellationToken::new()),
    )
    .await
    .context("run did not end")?
    .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    let shown = nanobot_util::error_chain(&err);
    assert!(shown.contains("channels.mattermost.token"), "{shown}");
    assert!(!shown.contains("SEKRIT"), "{shown}");
    assert!(fake.refused() >= 1);
    let err = channel
        .send(&OutboundMessage::reply("mattermost", "private:1", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::InvalidChatId { .. }), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn senders_match_by_username_and_the_other_policies_hold() -> Result<()> {
    // By username; DMs only from dm.allowFrom; every post in the town; threads only on mention; one allow-listed
    // channel elsewhere.
    let h = Harness::start(json!({
        "allowFrom": ["alice"], "allowFromMatchMode": "username",
        "dm": {"policy": "allowlist", "allowFrom": ["bob"]},
        "groupPolicy": "open", "groupPolicyInThread": "mention"
    }))
    .await?;
    h.fake.add_user(&id("bob"), "bob", "bob@example.com");
    h.fake.add_channel(&id("dmbob"), "D", "");
    // Alice is on allowFrom by username, but DMs take dm.allowFrom only: she gets a pairing code.
    h.fake
        .post_event(&id("alice"), &id("dmalice"), "dm from alice", None, &[]);
    let created = h.created(1).await?;
    assert_eq!(created[0]["channel_id"], id("dmalice"));
    assert!(
        created[0]["message"].as_str().unwrap().contains("pairing"),
        "{}",
        created[0]
    );
    h.fake
        .post_event(&id("bob"), &id("dmbob"), "dm from bob", None, &[]);
    let inbound = h.inbound().await?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.content.as_str()),
        (id("bob").as_str(), "dm from bob")
    );
    // `open`: a channel post without a mention is taken (from Alice, matched by username)...
    let root = h
        .fake
        .post_event(&id("alice"), &id("town"), "no mention needed", None, &[]);
    assert_eq!(h.inbound().await?.content, "no mention needed");
    // ...but in a thread `mention` holds; Eve, not on the list, is never taken.
    h.fake.post_event(
        &id("alice"),
        &id("town"),
        "in the thread, unmentioned",
        Some(&root),
        &[],
    );
    h.fake
        .post_event(&id("eve"), &id("town"), "eve in the open channel", None, &[]);
    h.fake.post_event(
        &id("alice"),
        &id("town"),
        &format!("@{BOT_USERNAME} in the thread"),
        Some(&root),
        &[],
    );
    let inbound = h.inbound().await?;
    assert!(
        inbound.content.ends_with("Current message:\nin the thread"),
        "{}",
        inbound.content
    );
    let lookups = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.path == format!("/api/v4/users/{}", id("alice")))
        .count();
    assert_eq!(lookups, 1, "a user is looked up once");
    h.stop().await;
    Ok(())
}
