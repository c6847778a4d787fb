//! Gateway replicas on a real `nats-server` (`gateway.bus.kind: nats`), sharing one home as they would share a
//! volume: one of them holds the Telegram channel (the Telegram Bot API emulator sees one poller), turns run on
//! either, replies reach the chat through the holder, and when the holder stops, another takes the channel over
//! and the conversation goes on with its history.

use std::sync::atomic::Ordering;

use anyhow::{Context as _, Result};
use nanobot_bus::Role;
use nanobot_gateway::Gateway;
use nanobot_testkit::nats::NatsServer;
use nanobot_testkit::telegram_emulator::Emulator;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{GUARD, options};

const TOKEN: &str = "123456:REPLICA-test";
const ALICE: i64 = 101;

async fn replica(home: &TempHome, mock: &MockLlm, emu: &Emulator, nats: &NatsServer, name: &str) -> Gateway {
    nanobot_testkit::install_ring();
    let patch = json!({
        "gateway": {"bus": {"kind": "nats", "nats": {
            "url": nats.url(), "replica": name, "leaseTimeS": 2, "ackWaitS": 2, "partitions": 4
        }}},
        "channels": {"telegram": {
            "enabled": true, "token": TOKEN, "baseUrl": emu.api_url, "allowFrom": [ALICE.to_string()]
        }}
    });
    Gateway::start(options(home, mock, patch)).await.unwrap()
}

/// A replica on its own `home` that shares sessions, cron and memory with the others only through `nats`
/// (`store: jetstream`).
async fn jetstream_replica(
    nats: &NatsServer,
    home: &TempHome,
    mock: &MockLlm,
    name: &str,
) -> Result<Gateway> {
    nanobot_testkit::install_ring();
    let patch = json!({"gateway": {"bus": {"kind": "nats", "nats": {
        "url": nats.url(), "replica": name, "leaseTimeS": 2, "ackWaitS": 2, "partitions": 4,
        "store": "jetstream"
    }}}});
    Ok(Gateway::start(options(home, mock, patch)).await?)
}

/// Asks `gw`'s chat API `text` in session `session` (sent when awaited, which may be on another task); the
/// answer's text.
fn ask(
    gw: &Gateway,
    session: &str,
    text: &str,
) -> impl std::future::Future<Output = Result<String>> + 'static {
    let request = crate::common::client()
        .post(crate::common::api_url(gw, "/v1/chat/completions"))
        .bearer_auth(crate::common::KEY)
        .json(&json!({"messages": [{"role": "user", "content": text}], "session_id": session}));
    async move {
        let answer: serde_json::Value = request.send().await?.json().await?;
        answer["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no answer in {answer}"))
    }
}

fn holds_telegram(gw: &Gateway) -> bool {
    gw.metrics()
        .role_held(&Role::Channel("telegram".into()))
        .load(Ordering::SeqCst)
}

/// Waits until the bot has sent Alice `expected`.
async fn replied(emu: &mut Emulator, expected: &str) -> Result<()> {
    emu.wait_for_text(ALICE, expected, GUARD).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_chat_is_held_by_one_replica_and_goes_on_when_it_stops() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("first question", MockReply::text("first answer"));
    mock.when_last_user_contains("second question", MockReply::text("second answer"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let a = replica(&home, &mock, &emu, &nats, "replica-a").await;
    let b = replica(&home, &mock, &emu, &nats, "replica-b").await;
    emu.wait_until_polling().await?;

    emu.user_says(TOKEN, ALICE, "alice", "first question").await?;
    replied(&mut emu, "first answer").await?;
    // Exactly one replica holds the channel (and so polls Telegram).
    assert!(
        holds_telegram(&a) != holds_telegram(&b),
        "telegram held by a: {}, by b: {}",
        holds_telegram(&a),
        holds_telegram(&b)
    );
    // Each replica's /metrics shows the partitions; the message was taken from one of them, once.
    let mut taken = 0.0;
    for gw in [&a, &b] {
        let text = crate::common::client()
            .get(crate::common::ops_url(gw, "/metrics"))
            .send()
            .await?
            .text()
            .await?;
        assert!(
            text.contains("nanobot_bus_partition_waiting{partition=\"0\"}"),
            "{text}"
        );
        taken += text
            .lines()
            .filter(|l| l.starts_with("nanobot_bus_partition_taken_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    assert!(taken >= 1.0, "no partition says it handed the message out");
    let (holder, other) = if holds_telegram(&a) { (a, b) } else { (b, a) };
    assert!(
        holder
            .metrics()
            .render(&Default::default())
            .contains("nanobot_replica_role_held{role=\"channel.telegram\"} 1"),
        "the metrics say who holds the channel"
    );

    // The holder stops (an upgrade): the other replica takes the channel over and answers, with the history.
    holder.shutdown().await;
    emu.wait_until_polling().await?;
    emu.user_says(TOKEN, ALICE, "alice", "second question").await?;
    replied(&mut emu, "second answer").await?;
    assert!(holds_telegram(&other));
    let last = mock.completion_requests().pop().context("no model call")?;
    let seen: Vec<String> = last
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        seen.iter().any(|c| c == "first answer"),
        "the second turn saw the first: {seen:?}"
    );
    assert_eq!(
        mock.completion_requests()
            .iter()
            .filter(|r| r.last_user_text().is_some_and(|t| t.contains("first question")))
            .count(),
        1,
        "the first question was answered once"
    );
    other.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_requests_on_one_session_wait_for_each_other_across_replicas() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(emu) = Emulator::start().await? else {
        return Ok(());
    };
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains(
        "first",
        MockReply::text("slow answer").delay(std::time::Duration::from_millis(1500)),
    );
    mock.when_last_user_contains("second", MockReply::text("second answer"));
    let a = replica(&home, &mock, &emu, &nats, "replica-a").await;
    let b = replica(&home, &mock, &emu, &nats, "replica-b").await;
    // The first request is running on replica A when the second, for the same session, reaches replica B.
    let first = tokio::spawn(ask(&a, "shared", "first"));
    tokio::time::timeout(GUARD, mock.wait_for_requests(1)).await?;
    let second = ask(&b, "shared", "second").await?;
    assert_eq!(first.await??, "slow answer");
    assert_eq!(second, "second answer");
    // B ran its turn after A's was saved: it saw A's answer.
    let asked = mock.completion_requests();
    let seen: Vec<String> = asked[1]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(seen.iter().any(|t| t == "slow answer"), "{seen:?}");
    let session = &crate::common::sessions(&home)["api:shared"];
    assert_eq!(
        crate::common::texts(session, "user"),
        ["first", "second"],
        "one history, in order"
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[test]
fn the_example_replica_configs_load_and_differ_only_where_they_must() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/replicas");
    let home = TempHome::new();
    let mut env = home.env();
    for var in [
        "OPENAI_API_KEY",
        "NANOBOT_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "NATS_PASSWORD",
    ] {
        env.insert(var.to_owned(), "set-by-the-service".to_owned());
    }
    let load = |name: &str| {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        nanobot_config::load_str(&text, &path, &env).unwrap().config
    };
    let (a, b) = (load("config-a.json"), load("config-b.json"));
    for c in [&a, &b] {
        assert_eq!(c.gateway.bus.kind, nanobot_config::BusKind::Nats);
    }
    assert_ne!(a.gateway.bus.nats.replica, b.gateway.bus.nats.replica);
    assert_ne!(a.gateway.port, b.gateway.port);
    assert_ne!(a.api.port, b.api.port);
    assert_eq!(a.gateway.bus.nats.url, b.gateway.bus.nats.url);
    // The server asks for credentials (an open one is refused), from the environment.
    for c in [&a, &b] {
        assert_eq!(c.gateway.bus.nats.user.as_deref(), Some("nanobot"));
        assert_eq!(
            c.gateway
                .bus
                .nats
                .password
                .as_ref()
                .map(|p| p.expose().to_owned()),
            Some("set-by-the-service".to_owned())
        );
        assert!(!c.gateway.bus.nats.allow_anonymous);
    }
    assert_eq!(a.agents.defaults.workspace, b.agents.defaults.workspace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_is_survived_and_messages_sent_meanwhile_are_answered() -> Result<()> {
    let Some(mut nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("before", MockReply::text("answer before"));
    mock.when_last_user_contains("during", MockReply::text("answer during"));
    let a = replica(&home, &mock, &emu, &nats, "replica-a").await;
    let b = replica(&home, &mock, &emu, &nats, "replica-b").await;
    emu.wait_until_polling().await?;
    emu.user_says(TOKEN, ALICE, "alice", "before").await?;
    replied(&mut emu, "answer before").await?;

    // The server goes away; Alice writes meanwhile; the server comes back (same store).
    nats.kill();
    emu.user_says(TOKEN, ALICE, "alice", "during").await?;
    // Down long enough for the channel's lease to lapse (its holder stops it: no renewal can succeed).
    tokio::time::timeout(GUARD, async {
        while holds_telegram(&a) || holds_telegram(&b) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .context("the channel's lease never lapsed while the server was down")?;
    nats.restart().await?;
    replied(&mut emu, "answer during").await?;
    assert_eq!(
        mock.completion_requests()
            .iter()
            .filter(|r| r.last_user_text().is_some_and(|t| t.contains("during")))
            .count(),
        1,
        "answered once"
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// `gateway.bus.nats.store: jetstream`: two replicas with separate homes (two machines, no shared volume) share
/// only the NATS server, and a session answered on one goes on on the other with its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_separate_homes_share_sessions_through_jetstream() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("first", MockReply::text("first answer"));
    mock.when_last_user_contains("second", MockReply::text("second answer"));
    let a = jetstream_replica(&nats, &home_a, &mock, "replica-a").await?;
    let b = jetstream_replica(&nats, &home_b, &mock, "replica-b").await?;
    assert_eq!(ask(&a, "roaming", "first").await?, "first answer");
    assert_eq!(ask(&b, "roaming", "second").await?, "second answer");
    // B's turn saw A's, which it had only through the server.
    let asked = mock.completion_requests();
    let seen: Vec<String> = asked
        .last()
        .context("a model call")?
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(seen.iter().any(|t| t == "first answer"), "{seen:?}");
    // Each home holds the whole session, in order (A's copy is brought up to date at its next access).
    let on_b = &crate::common::sessions(&home_b)["api:roaming"];
    assert_eq!(crate::common::texts(on_b, "user"), ["first", "second"]);
    assert_eq!(ask(&a, "roaming", "first again").await?, "first answer");
    let on_a = &crate::common::sessions(&home_a)["api:roaming"];
    assert_eq!(
        crate::common::texts(on_a, "user"),
        ["first", "second", "first again"]
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// `store: jetstream` shares the memory files and the profile too: a memory and a `USER.md` the model writes in a
/// turn on replica A (another home) are in the system prompt of the next turn on replica B, in another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_written_on_one_replica_is_in_the_prompt_on_another() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    let mock = MockLlm::start().await;
    mock.when_last_user_contains_once(
        "remember",
        MockReply::tool_call(
            "write_file",
            json!({"path": "memory/MEMORY.md", "content": "# Long-term Memory\n- Alice's bike is blue (h7-fact)\n"}),
        ),
    );
    mock.when_last_user_contains_once(
        "remember",
        MockReply::tool_call(
            "write_file",
            json!({"path": "USER.md", "content": "# User\n\nAlice rides to work (l25-profile).\n"}),
        ),
    );
    mock.when_last_user_contains("remember", MockReply::text("noted"));
    mock.when_last_user_contains("what colour", MockReply::text("blue"));
    let a = jetstream_replica(&nats, &home_a, &mock, "replica-a").await?;
    let b = jetstream_replica(&nats, &home_b, &mock, "replica-b").await?;
    assert_eq!(ask(&a, "one", "remember my bike is blue").await?, "noted");
    assert_eq!(ask(&b, "two", "what colour is my bike?").await?, "blue");
    let asked = mock.completion_requests();
    let system = asked
        .last()
        .context("a model call")?
        .messages()
        .first()
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .context("a system prompt")?;
    assert!(
        system.contains("h7-fact") && system.contains("l25-profile"),
        "B's prompt holds A's memory and profile: {system}"
    );
    // B's home holds the files themselves (the model's file tools there read them too).
    for (file, mark) in [("memory/MEMORY.md", "h7-fact"), ("USER.md", "l25-profile")] {
        let on_b = std::fs::read_to_string(home_b.workspace().join(file))?;
        assert!(on_b.contains(mark), "{file}: {on_b}");
    }
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// With `store: jetstream` each replica has a home of its own, and so its own local trigger queue: a delivery
/// queued in either home (`nanobot trigger` on that machine) runs, whichever replica holds the scheduler lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_runs_the_trigger_deliveries_of_its_own_home() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("seen"));
    let a = jetstream_replica(&nats, &home_a, &mock, "replica-a").await?;
    let b = jetstream_replica(&nats, &home_b, &mock, "replica-b").await?;
    let builds = ["build #1 failed (home A)", "build #2 failed (home B)"];
    for (gw, build) in [(&a, builds[0]), (&b, builds[1])] {
        let store = gw.agent().triggers().context("a trigger store")?;
        let trigger = store.create("nightly", "telegram", "42", "telegram:42", Default::default())?;
        store.enqueue(&trigger.id, build)?;
    }
    let ran = |asked: &[nanobot_testkit::RecordedRequest], build: &str| {
        asked
            .iter()
            .any(|r| r.last_user_text().is_some_and(|t| t.contains(build)))
    };
    tokio::time::timeout(GUARD, async {
        let mut n = 1;
        loop {
            let asked = mock.wait_for_requests(n).await;
            if builds.iter().all(|b| ran(&asked, b)) {
                break;
            }
            n = asked.len() + 1;
        }
    })
    .await
    .with_context(|| {
        let asked = mock.requests();
        format!(
            "not every home's delivery ran: A's {}, B's {}",
            ran(&asked, builds[0]),
            ran(&asked, builds[1])
        )
    })?;
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// With `store: jetstream` Dream's change records are shared: `/dream-log` on one replica lists a Dream run of
/// another (its record published at that replica's next Dream, restore or `/dream-log`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dream_log_on_one_replica_lists_another_replica_s_dream_runs() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    home_a.write_workspace_file(
        "memory/.dream/1.json",
        r#"{"version": 1, "kind": "dream", "timestamp": "2026-11-26 03:00", "summary": "noted the bike (l25-dream)", "changes": []}"#,
    );
    let mock = MockLlm::start().await;
    let a = jetstream_replica(&nats, &home_a, &mock, "replica-a").await?;
    let b = jetstream_replica(&nats, &home_b, &mock, "replica-b").await?;
    let on_a = ask(&a, "ops", "/dream-log").await?;
    assert!(on_a.contains("l25-dream"), "{on_a}");
    let on_b = ask(&b, "ops", "/dream-log").await?;
    assert!(
        on_b.contains("#1") && on_b.contains("l25-dream"),
        "B lists A's Dream run: {on_b}"
    );
    assert_eq!(mock.request_count(), 0, "commands never reach the model");
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// One usage ledger for replicas with separate homes (`store: jetstream`): each replica's calls count on the
/// other, and a budget reached through both holds on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_adds_up_across_replicas_and_a_shared_budget_holds_on_each() -> Result<()> {
    let Some(nats) = NatsServer::start().await? else {
        return Ok(());
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("first", MockReply::text("first answer").with_usage(60, 10));
    mock.when_last_user_contains("second", MockReply::text("second answer").with_usage(30, 10));
    let replica = |home: &TempHome, name: &str| {
        let patch = json!({
            "agents": {"defaults": {"timezone": "UTC", "budget": {"overall": {"daily": {"tokens": 100}}}}},
            "gateway": {"bus": {"kind": "nats", "nats": {
                "url": nats.url(), "replica": name, "leaseTimeS": 2, "ackWaitS": 2, "partitions": 4,
                "store": "jetstream"
            }}}
        });
        nanobot_testkit::install_ring();
        Gateway::start(options(home, &mock, patch))
    };
    let a = replica(&home_a, "replica-a").await?;
    let b = replica(&home_b, "replica-b").await?;
    assert_eq!(ask(&a, "one", "first").await?, "first answer");
    assert_eq!(ask(&b, "two", "second").await?, "second answer");
    // B appended after A's line, which it had only through the server.
    let ledger = nanobot_usage::UsageLedger::new(&home_b.nanobot_dir(), "UTC".parse()?);
    let (day, _) = ledger.totals(&nanobot_usage::Scope::Overall)?;
    assert_eq!((day.calls, day.tokens()), (2, 110));
    // 110 of 100 spent across both: either replica refuses the next turn, in any session.
    for (gw, session) in [(&a, "three"), (&b, "four")] {
        let refused = ask(gw, session, "first").await?;
        assert!(
            refused.contains("overall daily budget of 100 tokens is used up (110 used)"),
            "{refused}"
        );
    }
    assert_eq!(mock.request_count(), 2, "refused turns ask no model");
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}
