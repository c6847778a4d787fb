//! The JetStream bus against a real `nats-server` (JetStream on loopback, a store of its own per test): two
//! `NatsBus` values on one server are two gateway replicas.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod auth;
mod sealed;
mod side;

use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, Delivery, InboundMessage, Lease, OutboundMessage, Role, Settlement};
use nanobot_bus_nats::{NatsBus, NatsBusSettings};
use nanobot_testkit::nats::NatsServer;
use serde_json::json;

/// Bound on anything the tests wait for.
const GUARD: Duration = Duration::from_secs(20);
/// How long a replica must see nothing where nothing may come (a bound, not a measurement: the server hands
/// out an available message in milliseconds).
const QUIET: Duration = Duration::from_millis(1500);

fn settings(server: &NatsServer) -> NatsBusSettings {
    let mut s = NatsBusSettings::new(server.url());
    s.partitions = 4;
    s.ack_wait = Duration::from_secs(2);
    s.lease_time = LEASE;
    s
}

/// The lease time of the tests' replicas.
const LEASE: Duration = Duration::from_secs(3);

fn msg(chat: &str, text: &str, id: i64) -> InboundMessage {
    let mut m = InboundMessage::new("telegram", "1", chat, text);
    m.metadata.insert("message_id".into(), json!(id));
    m
}

async fn next(bus: &NatsBus) -> Result<Delivery> {
    tokio::time::timeout(GUARD, bus.consume_inbound_delivery())
        .await
        .context("no delivery in time")?
        .context("bus closed")
}

/// The next delivery to either replica, and which one took it (0: `a`, 1: `b`).
async fn next_either(a: &NatsBus, b: &NatsBus) -> Result<(usize, Delivery)> {
    tokio::time::timeout(GUARD, async {
        tokio::select! {
            d = a.consume_inbound_delivery() => d.map(|d| (0, d)),
            d = b.consume_inbound_delivery() => d.map(|d| (1, d)),
        }
    })
    .await
    .context("no delivery in time")?
    .context("bus closed")
}

async fn nothing_within_quiet(bus: &NatsBus) -> bool {
    tokio::time::timeout(QUIET, bus.consume_inbound_delivery())
        .await
        .is_err()
}

async fn settle(d: Delivery, how: Settlement) -> InboundMessage {
    let (msg, receipt) = d.into_parts();
    receipt.expect("a durable bus gives a receipt").settle(how).await;
    msg
}

#[tokio::test]
async fn a_settled_message_is_gone_and_an_unsettled_one_comes_back_to_another_replica() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let b = NatsBus::connect(settings(&server)).await?;
    a.publish_inbound(msg("42", "first", 1)).await?;
    let (_, d) = next_either(&a, &b).await?;
    let got = settle(d, Settlement::Done).await;
    assert_eq!((got.chat_id.as_str(), got.content.as_str()), ("42", "first"));
    assert!(
        nothing_within_quiet(&a).await,
        "a settled message is delivered once"
    );
    assert!(
        nothing_within_quiet(&b).await,
        "a settled message is delivered once"
    );

    // A replica stops before running the turn: it asks for redelivery, and it comes again.
    a.publish_inbound(msg("42", "second", 2)).await?;
    let (_, d) = next_either(&a, &b).await?;
    settle(d, Settlement::Retry).await;
    let (_, again) = next_either(&a, &b).await?;
    assert_eq!(settle(again, Settlement::Done).await.content, "second");
    Ok(())
}

#[tokio::test]
async fn a_replica_that_dies_mid_turn_leaves_the_message_to_the_next() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let dying = NatsBus::connect(settings(&server)).await?;
    dying.publish_inbound(msg("7", "do the thing", 1)).await?;
    let taken = next(&dying).await?;
    assert_eq!(taken.msg.content, "do the thing");
    // The process dies: no acknowledgement, no more progress.
    drop(taken);
    drop(dying);
    let survivor = NatsBus::connect(settings(&server)).await?;
    let d = next(&survivor).await?;
    assert_eq!(settle(d, Settlement::Done).await.content, "do the thing");
    Ok(())
}

#[tokio::test]
async fn a_delivery_let_go_unsettled_goes_to_another_replica_without_waiting() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    // An acknowledgement wait far longer than the test's bound: only the hand-back can make this pass.
    let long = || {
        let mut s = settings(&server);
        s.ack_wait = GUARD * 3;
        s
    };
    let stopping = NatsBus::connect(long()).await?;
    let other = NatsBus::connect(long()).await?;
    stopping.publish_inbound(msg("8", "still to do", 1)).await?;
    let taken = next(&stopping).await?;
    // A stopping replica lets go of a message it had not started (its receipt dropped, unsettled).
    drop(taken);
    stopping.close();
    let d = next(&other).await?;
    assert_eq!(settle(d, Settlement::Done).await.content, "still to do");
    Ok(())
}

#[tokio::test]
async fn a_long_turn_keeps_its_message_past_the_ack_wait() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let b = NatsBus::connect(settings(&server)).await?;
    a.publish_inbound(msg("9", "slow", 1)).await?;
    let held = next(&a).await?;
    // Longer than the 2 s acknowledgement wait: the receipt's progress keeps the message with `a`.
    for _ in 0..2 {
        assert!(
            nothing_within_quiet(&b).await,
            "the running turn's message was handed out again"
        );
    }
    settle(held, Settlement::Done).await;
    assert!(nothing_within_quiet(&b).await);
    Ok(())
}

#[tokio::test]
async fn one_session_runs_one_turn_at_a_time_in_order_across_replicas() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let b = NatsBus::connect(settings(&server)).await?;
    for (i, text) in ["one", "two", "three"].into_iter().enumerate() {
        a.publish_inbound(msg("100", text, i64::try_from(i)?)).await?;
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (holder, d) = next_either(&a, &b).await?;
        // While this turn runs, neither replica may get the session's next message.
        let (this, other) = if holder == 0 { (&a, &b) } else { (&b, &a) };
        assert!(
            nothing_within_quiet(other).await,
            "two turns of one session at once"
        );
        assert!(
            nothing_within_quiet(this).await,
            "two turns of one session at once"
        );
        seen.push(settle(d, Settlement::Done).await.content);
    }
    assert_eq!(seen, ["one", "two", "three"]);
    // Another session is not held up by a running one.
    a.publish_inbound(msg("100", "four", 4)).await?;
    let (_, first) = next_either(&a, &b).await?;
    let key_other = (0..100)
        .map(|i| format!("{i}"))
        .find(|c| a.partition_of(&format!("telegram:{c}")) != a.partition_of("telegram:100"))
        .unwrap();
    b.publish_inbound(msg(&key_other, "elsewhere", 5)).await?;
    let (_, second) = next_either(&a, &b).await?;
    assert_eq!(second.msg.content, "elsewhere");
    settle(first, Settlement::Done).await;
    settle(second, Settlement::Done).await;
    Ok(())
}

#[tokio::test]
async fn a_channel_message_published_twice_is_stored_once() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let bus = NatsBus::connect(settings(&server)).await?;
    bus.publish_inbound(msg("5", "hello", 77)).await?;
    bus.publish_inbound(msg("5", "hello", 77)).await?;
    bus.publish_inbound(msg("5", "hello again", 78)).await?;
    assert_eq!(settle(next(&bus).await?, Settlement::Done).await.content, "hello");
    assert_eq!(
        settle(next(&bus).await?, Settlement::Done).await.content,
        "hello again"
    );
    assert!(nothing_within_quiet(&bus).await, "the duplicate was stored");
    Ok(())
}

#[tokio::test]
async fn messages_wait_through_a_server_restart() -> Result<()> {
    let Some(mut server) = NatsServer::start().await? else {
        return Ok(());
    };
    let bus = NatsBus::connect(settings(&server)).await?;
    let leases = bus.leases().context("a shared bus has leases")?;
    let _telegram = leases.acquire(Role::Channel("telegram".into())).await?;
    bus.publish_inbound(msg("3", "before the restart", 1)).await?;
    bus.publish_outbound(OutboundMessage::reply("telegram", "3", "an answer"))
        .await?;
    // The outbound message is taken before the restart (its acknowledgement may still be on its way when the
    // server dies: outbound delivery is at least once).
    let out = tokio::time::timeout(GUARD, bus.consume_outbound())
        .await?
        .context("closed")?;
    assert_eq!(out.content, "an answer");
    bus.close();
    drop(bus);
    server.restart().await?;
    let bus = NatsBus::connect(settings(&server)).await?;
    assert_eq!(
        settle(next(&bus).await?, Settlement::Done).await.content,
        "before the restart"
    );
    // The client reconnects by itself when the server comes back while it runs.
    server.restart().await?;
    tokio::time::timeout(GUARD, async {
        loop {
            match bus.publish_inbound(msg("3", "after", 2)).await {
                Ok(()) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .context("no publish after the restart")?;
    assert_eq!(settle(next(&bus).await?, Settlement::Done).await.content, "after");
    Ok(())
}

#[tokio::test]
async fn a_wrong_address_is_named_and_a_closed_bus_refuses() -> Result<()> {
    let mut s = NatsBusSettings::new(format!(
        "nats://bot:sekrit@127.0.0.1:{}",
        nanobot_testkit::peers::free_port()?
    ));
    s.connect_timeout = Duration::from_secs(2);
    let err = NatsBus::connect(s).await.unwrap_err().to_string();
    assert!(err.contains("127.0.0.1") && !err.contains("sekrit"), "{err}");

    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let bus = NatsBus::connect(settings(&server)).await?;
    bus.close();
    assert!(matches!(
        bus.publish_inbound(msg("1", "late", 1)).await,
        Err(nanobot_bus::BusError::Closed)
    ));
    Ok(())
}

/// The lease bucket as another program sees it (a replica that died, or one that took a lease over).
async fn lease_bucket(server: &NatsServer) -> Result<async_nats::jetstream::kv::Store> {
    let client = server.client().await?;
    Ok(async_nats::jetstream::new(client)
        .get_key_value("NANOBOT_LEASES")
        .await?)
}

async fn acquire(bus: &NatsBus, role: Role) -> Result<Box<dyn Lease>> {
    let leases = bus.leases().context("a shared bus has leases")?;
    tokio::time::timeout(GUARD, leases.acquire(role))
        .await
        .context("lease not taken in time")?
        .context("bus closed")
}

/// Whether `bus` gets `role` within [`QUIET`] (it must not while another replica holds it).
async fn acquired_within_quiet(bus: &NatsBus, role: Role) -> bool {
    let leases = bus.leases().expect("leases");
    tokio::time::timeout(QUIET, leases.acquire(role)).await.is_ok()
}

async fn lost_in_time(lease: &dyn Lease) -> Result<()> {
    tokio::time::timeout(GUARD, lease.lost())
        .await
        .context("the lease was never reported lost")
}

#[tokio::test]
async fn one_replica_holds_a_role_and_another_takes_over_when_it_lets_go() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let b = NatsBus::connect(settings(&server)).await?;
    let held = acquire(&a, Role::Scheduler).await?;
    assert_eq!(held.role(), &Role::Scheduler);
    assert!(
        !acquired_within_quiet(&b, Role::Scheduler).await,
        "two replicas held the scheduler at once"
    );
    // Another role is free all the while.
    let _channel = acquire(&b, Role::Channel("telegram".into())).await?;
    drop(held);
    let taken = acquire(&b, Role::Scheduler).await?;
    assert!(
        !acquired_within_quiet(&a, Role::Scheduler).await,
        "the first replica took it back while the second held it"
    );
    // A closed bus stops waiting.
    a.close();
    assert!(matches!(
        a.leases().expect("leases").acquire(Role::Scheduler).await,
        Err(nanobot_bus::BusError::Closed)
    ));
    drop(taken);
    Ok(())
}

/// Issue 42: a released session lease is gone from the bucket when `release` returns, so the chat's next request
/// on another replica takes it at once (a dropped lease was deleted in the background, after the answer had gone
/// out, and the next replica retried a quarter of the lease time later).
#[tokio::test]
async fn a_released_lease_is_gone_when_release_returns() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let bucket = lease_bucket(&server).await?;
    let role = Role::Session("api-client-7".into()); // a key stored as is (others are hashed)
    let held = acquire(&a, role.clone()).await?;
    let key = role.key();
    let entry = bucket.get(&key).await?;
    assert!(entry.is_some(), "the lease is in the bucket while held");
    held.release().await;
    assert_eq!(
        bucket.get(&key).await?,
        None,
        "the key is deleted when release returns"
    );
    // And another replica takes it on its first try: the bucket shows it as the holder.
    let b = NatsBus::connect(settings(&server)).await?;
    let _again = acquire(&b, role).await?;
    assert!(bucket.get(&key).await?.is_some());
    Ok(())
}

/// Issue 42: a replica waiting for a session another replica runs takes it the moment that one lets go, not at
/// its next look (every quarter of the lease time: 30 s here, longer than the tests' bound).
#[tokio::test]
async fn a_replica_waiting_for_a_lease_takes_it_when_the_holder_lets_go() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let long = |server: &NatsServer| {
        let mut s = settings(server);
        s.lease_time = Duration::from_secs(120);
        s
    };
    let a = NatsBus::connect(long(&server)).await?;
    let b = NatsBus::connect(long(&server)).await?;
    let role = Role::Session("api:chat-9".into());
    let held = acquire(&a, role.clone()).await?;
    let waiting = tokio::spawn({
        let leases = b.leases().context("leases")?;
        let role = role.clone();
        async move { leases.acquire(role).await }
    });
    // b has looked and is standing by.
    assert!(!acquired_within_quiet(&b, role.clone()).await);
    assert!(!waiting.is_finished());
    held.release().await;
    let taken = tokio::time::timeout(GUARD, waiting)
        .await
        .context("the waiting replica did not take the lease its holder let go")???;
    assert_eq!(taken.role(), &role);
    Ok(())
}

#[tokio::test]
async fn a_role_whose_holder_died_is_taken_over_after_the_lease_time() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let b = NatsBus::connect(settings(&server)).await?;
    // A replica that took the scheduler and died: its key is never renewed or released.
    lease_bucket(&server)
        .await?
        .create("scheduler", "a-dead-replica".into())
        .await?;
    assert!(
        !acquired_within_quiet(&b, Role::Scheduler).await,
        "taken before the dead holder's lease ran out"
    );
    let held = acquire(&b, Role::Scheduler).await?;
    let holder = lease_bucket(&server).await?.get("scheduler").await?;
    assert_eq!(
        holder.as_deref(),
        Some(b.leases().expect("leases").holder().as_bytes())
    );
    drop(held);
    Ok(())
}

#[tokio::test]
async fn a_lease_is_reported_lost_when_it_is_taken_over_or_cannot_be_renewed() -> Result<()> {
    let Some(mut server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    // Someone else wrote the key (as after our lease ran out): the next renewal says so.
    let held = acquire(&a, Role::Channel("slack".into())).await?;
    lease_bucket(&server)
        .await?
        .put("channel.slack", "another-replica".into())
        .await?;
    lost_in_time(held.as_ref()).await?;
    // The server goes away: the holder gives the lease up before the server could hand it to anyone else.
    let held = acquire(&a, Role::Scheduler).await?;
    server.kill();
    lost_in_time(held.as_ref()).await?;
    Ok(())
}

#[tokio::test]
async fn outbound_messages_reach_the_replica_holding_their_channel() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let a = NatsBus::connect(settings(&server)).await?;
    let b = NatsBus::connect(settings(&server)).await?;
    let telegram = acquire(&a, Role::Channel("telegram".into())).await?;
    let _slack = acquire(&b, Role::Channel("slack".into())).await?;
    // Published by either replica (the one that ran the turn), delivered by the holder.
    b.publish_outbound(OutboundMessage::reply("telegram", "7", "to telegram"))
        .await?;
    a.publish_outbound(OutboundMessage::reply("slack", "C1", "to slack"))
        .await?;
    let out = tokio::time::timeout(GUARD, a.consume_outbound())
        .await?
        .context("closed")?;
    assert_eq!(
        (out.channel.as_str(), out.content.as_str()),
        ("telegram", "to telegram")
    );
    let out = tokio::time::timeout(GUARD, b.consume_outbound())
        .await?
        .context("closed")?;
    assert_eq!(
        (out.channel.as_str(), out.content.as_str()),
        ("slack", "to slack")
    );
    assert!(
        tokio::time::timeout(QUIET, b.consume_outbound()).await.is_err(),
        "a replica got a message of a channel it does not hold"
    );
    // The channel moves: its messages follow it, none lost in between.
    drop(telegram);
    a.publish_outbound(OutboundMessage::reply("telegram", "7", "while moving"))
        .await?;
    let _moved = acquire(&b, Role::Channel("telegram".into())).await?;
    let out = tokio::time::timeout(GUARD, b.consume_outbound())
        .await?
        .context("closed")?;
    assert_eq!(out.content, "while moving");
    assert!(
        tokio::time::timeout(QUIET, a.consume_outbound()).await.is_err(),
        "the old holder still got the channel's messages"
    );
    Ok(())
}

/// Issue 42: an outbound message the channel's holder took but had not sent when it died (`kill -9`: no
/// acknowledgement, no progress, no hand-back) is sent by the channel's next holder; one it sent is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbound_message_its_holder_died_with_goes_to_the_next_holder() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    // The dying replica runs on a runtime of its own: shutting that down ends its tasks and connections at once.
    let dying = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let s = settings(&server);
    let taken = dying
        .spawn(async move {
            let a = NatsBus::connect(s).await?;
            let lease = acquire(&a, Role::Channel("telegram".into())).await?;
            for text in ["sent", "taken, never sent"] {
                a.publish_outbound(OutboundMessage::reply("telegram", "7", text))
                    .await?;
            }
            let next = || async {
                tokio::time::timeout(GUARD, a.consume_outbound_delivery())
                    .await
                    .context("no outbound message in time")?
                    .context("closed")
            };
            let (sent, receipt) = next().await?.into_parts();
            receipt
                .expect("a durable bus gives a receipt")
                .settle(Settlement::Done)
                .await;
            let unsent = next().await?;
            let text = unsent.msg.content.clone();
            // Dies holding it: nothing of this replica runs again.
            std::mem::forget((unsent, lease, a));
            anyhow::Ok((sent.content, text))
        })
        .await;
    // (A runtime may not be dropped in async code: shut down in the background, whatever happened.)
    dying.shutdown_background();
    assert_eq!(taken??, ("sent".to_owned(), "taken, never sent".to_owned()));

    let b = NatsBus::connect(settings(&server)).await?;
    let _telegram = acquire(&b, Role::Channel("telegram".into())).await?;
    let out = tokio::time::timeout(GUARD, b.consume_outbound())
        .await?
        .context("closed")?;
    assert_eq!(out.content, "taken, never sent");
    assert!(
        tokio::time::timeout(QUIET, b.consume_outbound()).await.is_err(),
        "a message the dead holder had sent came again"
    );
    Ok(())
}

#[tokio::test]
async fn the_probe_reports_streams_and_lease_holders_without_creating_anything() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let mut s = settings(&server);
    s.replica = "replica-one".into();
    let before = nanobot_bus_nats::probe(&s).await?;
    assert!(!before.server_version.is_empty());
    assert_eq!(before.streams.len(), 4, "in, out, files, leases");
    assert!(before.streams.iter().all(|(_, n)| n.is_none()), "{before:?}");
    // Still nothing there: the probe created nothing.
    assert!(
        nanobot_bus_nats::probe(&s)
            .await?
            .streams
            .iter()
            .all(|(_, n)| n.is_none())
    );

    let bus = NatsBus::connect(s.clone()).await?;
    let _held = acquire(&bus, Role::Scheduler).await?;
    bus.publish_inbound(msg("1", "waiting", 1)).await?;
    let after = nanobot_bus_nats::probe(&s).await?;
    assert!(
        after
            .streams
            .iter()
            .any(|(name, n)| name == "NANOBOT_IN" && *n == Some(1)),
        "{after:?}"
    );
    assert_eq!(
        after.holders,
        [("scheduler".to_owned(), "replica-one".to_owned())]
    );

    let mut nowhere = NatsBusSettings::new(format!(
        "nats://127.0.0.1:{}",
        nanobot_testkit::peers::free_port()?
    ));
    nowhere.connect_timeout = Duration::from_secs(2);
    let err = nanobot_bus_nats::probe(&nowhere).await.unwrap_err().to_string();
    assert!(err.contains("127.0.0.1"), "{err}");
    Ok(())
}

#[tokio::test]
async fn replies_nobody_takes_age_out_and_a_new_limit_reaches_a_running_stream() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let js = async_nats::jetstream::new(server.client().await?);
    let config_of = |name: &'static str| {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream(name).await?;
            anyhow::Ok(stream.info().await?.config.clone())
        }
    };
    // The default: a day for replies, no limit for questions (an unanswered one is never dropped).
    let bus = NatsBus::connect(settings(&server)).await?;
    assert_eq!(
        config_of("NANOBOT_OUT").await?.max_age,
        nanobot_bus_nats::DEFAULT_OUTBOUND_MAX_AGE
    );
    assert_eq!(config_of("NANOBOT_IN").await?.max_age, Duration::ZERO);
    // A reply to a channel nobody holds waits on the server meanwhile.
    bus.publish_outbound(OutboundMessage::reply("email", "ana@example.com", "kept"))
        .await?;
    bus.close();
    drop(bus);

    // A replica started with a shorter limit changes the running stream; what waits stays.
    let mut s = settings(&server);
    s.outbound_max_age = Duration::from_secs(90);
    let bus = NatsBus::connect(s).await?;
    let out = config_of("NANOBOT_OUT").await?;
    assert_eq!(out.max_age, Duration::from_secs(90));
    assert!(out.duplicate_window <= out.max_age, "{out:?}");
    let mut stream = js.get_stream("NANOBOT_OUT").await?;
    assert_eq!(stream.info().await?.state.messages, 1);
    bus.close();

    // Zero: kept until taken.
    let mut s = settings(&server);
    s.outbound_max_age = Duration::ZERO;
    let _bus = NatsBus::connect(s).await?;
    assert_eq!(config_of("NANOBOT_OUT").await?.max_age, Duration::ZERO);
    Ok(())
}

#[tokio::test]
async fn with_a_unified_session_every_chat_waits_for_the_running_turn() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    // Two chats whose own sessions are in different partitions.
    let separate = NatsBus::connect(settings(&server)).await?;
    let first = msg("1", "from chat 1", 1);
    let other = (2..100)
        .map(|chat| msg(&chat.to_string(), "from another chat", 2))
        .find(|m| separate.partition_of(&m.session_key()) != separate.partition_of(&first.session_key()))
        .context("a chat in another partition")?;
    // Without the unified session they run at once.
    separate.publish_inbound(first.clone()).await?;
    separate.publish_inbound(other.clone()).await?;
    let (d1, d2) = (next(&separate).await?, next(&separate).await?);
    settle(d1, Settlement::Done).await;
    settle(d2, Settlement::Done).await;
    separate.close();

    // With it both are turns of one session: the second is handed out only once the first is settled.
    let mut s = settings(&server);
    s.unified_session = true;
    let unified = NatsBus::connect(s).await?;
    let (mut first, mut other) = (first, other);
    first.metadata.insert("message_id".into(), json!(11));
    other.metadata.insert("message_id".into(), json!(12));
    unified.publish_inbound(first).await?;
    unified.publish_inbound(other).await?;
    let (running, receipt) = next(&unified).await?.into_parts();
    assert_eq!(running.content, "from chat 1");
    assert!(
        nothing_within_quiet(&unified).await,
        "another chat's turn of the unified session started while one ran"
    );
    receipt.context("a receipt")?.settle(Settlement::Done).await;
    let then = settle(next(&unified).await?, Settlement::Done).await;
    assert_eq!(then.content, "from another chat");

    // A message with a session of its own (a thread, the API) keeps its own partition.
    let mut threaded = msg("1", "in a thread", 13);
    threaded.session_key_override = Some("telegram:1:thread:9".into());
    assert_eq!(
        threaded.turn_session_key(true),
        "telegram:1:thread:9",
        "an override is kept"
    );
    assert_eq!(
        msg("5", "x", 14).turn_session_key(true),
        nanobot_bus::UNIFIED_SESSION_KEY
    );
    Ok(())
}
