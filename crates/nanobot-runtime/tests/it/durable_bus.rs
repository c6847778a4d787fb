//! The runtime on the NATS JetStream bus (a real `nats-server`): a message is acknowledged only when its turn is
//! over, and a replica stopping in the middle of a turn leaves the message to the next one.

use std::sync::Arc;
use std::time::Duration;

use nanobot_bus::{Bus, InboundMessage};
use nanobot_bus_nats::{NatsBus, NatsBusSettings};
use nanobot_runtime::{Environment, Runtime, RuntimeOptions};
use nanobot_testkit::nats::NatsServer;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

const GUARD: Duration = Duration::from_secs(60);

fn config(mock: &MockLlm) -> nanobot_config::Config {
    serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}, "exec": {"enable": false}}
    }))
    .unwrap()
}

async fn replica(
    server: &NatsServer,
    home: &TempHome,
    config: &nanobot_config::Config,
) -> (Arc<NatsBus>, Runtime) {
    replica_with(server, home, config, RuntimeOptions::default()).await
}

async fn replica_with(
    server: &NatsServer,
    home: &TempHome,
    config: &nanobot_config::Config,
    opts: RuntimeOptions,
) -> (Arc<NatsBus>, Runtime) {
    let mut s = NatsBusSettings::new(server.url());
    s.partitions = 2;
    s.ack_wait = Duration::from_secs(2);
    s.lease_time = Duration::from_secs(2);
    // One process holds several replicas here: each gets a name of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    s.replica = format!(
        "replica-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let bus = Arc::new(NatsBus::connect(s).await.unwrap());
    let env = Environment::new(home.home(), home.env());
    let agent = nanobot_runtime::build_agent(config, &env).unwrap();
    let rt = Runtime::start(agent, bus.clone(), config, opts).unwrap();
    (bus, rt)
}

/// The replica (index) whose cron ran the next job, from the replicas' run reports.
async fn next_run(
    runs: &mut [tokio::sync::broadcast::Receiver<std::sync::Arc<nanobot_cron::RunOutcome>>],
) -> usize {
    tokio::time::timeout(GUARD, async {
        loop {
            let waiting = runs
                .iter_mut()
                .enumerate()
                .map(|(i, r)| Box::pin(async move { (i, r.recv().await) }));
            let ((i, got), _, _) = futures::future::select_all(waiting).await;
            if let Ok(run) = got
                && run.job.name == "every second"
            {
                return i;
            }
        }
    })
    .await
    .expect("no cron run in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_runs_on_one_replica_and_moves_when_it_stops() {
    nanobot_providers::install_ring();
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    // Three replicas on one home (a shared volume): one cron store, one schedule.
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("tick"));
    let config = config(&mock);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica_with(&server, &home, &config, RuntimeOptions::default().with_cron(true)).await);
    }
    let mut runs: Vec<_> = replicas
        .iter()
        .map(|(_, rt)| rt.agent().cron().expect("cron").subscribe())
        .collect();
    let leases = async_nats::jetstream::new(server.client().await.unwrap())
        .get_key_value("NANOBOT_LEASES")
        .await
        .unwrap();
    let holder = scheduler_holder(&leases, &replicas, None).await;
    // The job is added through another replica (whose cron would be woken by it, if it ran one).
    replicas[(holder + 1) % 3]
        .1
        .agent()
        .cron()
        .expect("cron")
        .add(
            nanobot_cron::NewJob::new(
                nanobot_cron::CronSchedule::every(Duration::from_secs(1)),
                nanobot_cron::CronPayload::agent_turn("tick"),
            )
            .with_name("every second"),
        )
        .unwrap();
    for _ in 0..3 {
        assert_eq!(next_run(&mut runs).await, holder, "cron ran off the lease holder");
    }
    // The holder stops: another one takes cron over, and only that one runs it.
    let (bus, rt) = replicas.remove(holder);
    let gone = bus.leases().expect("leases").holder().to_owned();
    runs.remove(holder);
    rt.shutdown().await;
    bus.close();
    drop(rt);
    let next = scheduler_holder(&leases, &replicas, Some(&gone)).await;
    for _ in 0..3 {
        assert_eq!(next_run(&mut runs).await, next, "cron ran off the lease holder");
    }
}

/// The replica (index) holding the scheduler lease, once one (other than `not`) does.
async fn scheduler_holder(
    leases: &async_nats::jetstream::kv::Store,
    replicas: &[(Arc<NatsBus>, Runtime)],
    not: Option<&str>,
) -> usize {
    use futures::StreamExt as _;
    let mut watch = leases.watch_with_history("scheduler").await.unwrap();
    tokio::time::timeout(GUARD, async {
        while let Some(entry) = watch.next().await {
            let entry = entry.unwrap();
            let name = String::from_utf8_lossy(&entry.value).into_owned();
            if Some(name.as_str()) == not || entry.operation != async_nats::jetstream::kv::Operation::Put {
                continue;
            }
            if let Some(i) = replicas
                .iter()
                .position(|(b, _)| b.leases().expect("leases").holder() == name)
            {
                return i;
            }
        }
        panic!("the lease watch ended");
    })
    .await
    .expect("no replica took the scheduler")
}

#[tokio::test]
async fn a_turn_cut_short_by_a_stopping_replica_is_answered_by_the_next() {
    nanobot_providers::install_ring();
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config = config(&mock);

    // Replica A takes the message and is stopped while the model is still thinking.
    mock.push(MockReply::text("too late").delay(Duration::from_secs(300)));
    let (bus_a, rt_a) = replica(&server, &home, &config).await;
    let mut msg = InboundMessage::new("telegram", "42", "42", "what is on my list?");
    msg.metadata.insert("message_id".into(), json!(1001));
    bus_a.publish_inbound(msg).await.unwrap();
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    rt_a.shutdown().await;
    bus_a.close();

    // Replica B gets the same message again and answers it.
    mock.push(MockReply::text("milk and eggs"));
    let (bus_b, rt_b) = replica(&server, &home, &config).await;
    // B holds the Telegram channel, so Telegram's replies come to it.
    let _telegram = bus_b
        .leases()
        .expect("a shared bus has leases")
        .acquire(nanobot_bus::Role::Channel("telegram".into()))
        .await
        .unwrap();
    let reply = tokio::time::timeout(GUARD, async {
        loop {
            let out = bus_b.consume_outbound().await.expect("bus open");
            if out.content == "milk and eggs" {
                break out;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (reply.channel.as_str(), reply.chat_id.as_str()),
        ("telegram", "42")
    );
    let requests = mock.completion_requests();
    assert_eq!(requests.len(), 2, "one cut-short call, one answered call");
    let asked = requests[1].last_user_text().unwrap_or_default();
    assert!(asked.ends_with("what is on my list?"), "{asked}");
    let questions = requests[1]
        .messages()
        .iter()
        .filter(|m| {
            m["role"] == "user"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.ends_with("what is on my list?"))
        })
        .count();
    assert_eq!(
        questions, 1,
        "the cut-short attempt is not replayed beside the new one"
    );
    let session = std::fs::read_to_string(rt_b.agent().sessions().path_for("telegram:42")).unwrap();
    let stored = session
        .lines()
        .filter(|l| l.contains("\"role\":\"user\"") && l.contains("what is on my list?"))
        .count();
    assert_eq!(stored, 1, "the question is stored once:\n{session}");
    assert!(session.contains("milk and eggs"), "{session}");

    // Answered and saved: acknowledged, so a third replica gets nothing.
    rt_b.shutdown().await;
    bus_b.close();
    let mut s = NatsBusSettings::new(server.url());
    s.partitions = 2;
    let c = NatsBus::connect(s).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), c.consume_inbound_delivery())
            .await
            .is_err(),
        "an answered message was delivered again"
    );
}

/// Issue 42: the owner's `yes` to a turn's approval question, received by a replica that does not run the turn,
/// reaches the turn at once (it used to queue behind the turn waiting for it, which gave up at its timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_approves_on_a_replica_that_does_not_run_the_turn() {
    nanobot_providers::install_ring();
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "delete me");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Deleted."));
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        // Far longer than the test waits: only the answer can end the wait.
        "tools": {"web": {"enable": false}, "approval": {"mode": "risky", "timeoutS": 3600}}
    }))
    .unwrap();
    let (runner, rt) = replica(&server, &home, &config).await;
    let _telegram = runner
        .leases()
        .expect("a shared bus has leases")
        .acquire(nanobot_bus::Role::Channel("telegram".into()))
        .await
        .unwrap();
    runner
        .publish_inbound(InboundMessage::new("telegram", "alice", "1", "clean up"))
        .await
        .unwrap();
    let next_out = || async {
        tokio::time::timeout(GUARD, runner.consume_outbound())
            .await
            .expect("a reply in time")
            .expect("bus open")
    };
    loop {
        if next_out().await.metadata.contains_key("_approval") {
            break;
        }
    }
    // The answer comes in through another replica (the one holding the chat's channel, say).
    let mut s = NatsBusSettings::new(server.url());
    s.partitions = 2;
    s.replica = "the-other-replica".into();
    let other = NatsBus::connect(s).await.unwrap();
    other
        .publish_inbound(InboundMessage::new("telegram", "alice", "1", "yes"))
        .await
        .unwrap();
    other.close();
    loop {
        if next_out().await.content == "Deleted." {
            break;
        }
    }
    assert!(
        !home.workspace().join("victim.txt").exists(),
        "the approved command ran"
    );
    rt.shutdown().await;
}

/// A replica with `home` of its own, sharing its files through the NATS server of `settings`, holding the
/// Telegram channel (every answer of a Telegram chat comes out of its bus).
async fn own_home_replica(
    settings: NatsBusSettings,
    config: &nanobot_config::Config,
    home: &TempHome,
) -> (Arc<NatsBus>, Box<dyn nanobot_bus::Lease>, Runtime) {
    let files = nanobot_store_nats::NatsFiles::open(&settings).await.unwrap();
    let bus = Arc::new(NatsBus::connect(settings).await.unwrap());
    let telegram = bus
        .leases()
        .expect("a shared bus has leases")
        .acquire(nanobot_bus::Role::Channel("telegram".into()))
        .await
        .unwrap();
    let env = Environment::new(home.home(), home.env());
    let provider = nanobot_runtime::provider(config, &env).unwrap();
    let agent = nanobot_runtime::agent_builder_shared(config, &env, provider, Some(Arc::new(files)))
        .unwrap()
        .build()
        .unwrap();
    let rt = Runtime::start(agent, bus.clone(), config, RuntimeOptions::default()).unwrap();
    (bus, telegram, rt)
}

/// The next answer out of `bus` (progress, such as tool hints, passed over).
async fn next_out(bus: &NatsBus) -> String {
    loop {
        let out = tokio::time::timeout(GUARD, bus.consume_outbound())
            .await
            .expect("a reply in time")
            .expect("bus open");
        if !out.is_progress() {
            return out.content;
        }
    }
}

/// Issue 42: a call parked by one replica (an unattended run, so nobody could be asked) is approved with
/// `/approve ID` on another replica that has a home of its own (the shared store carries the request), and that
/// replica runs exactly the approved call in the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_is_approved_and_run_on_another_replica_with_a_home_of_its_own() {
    nanobot_providers::install_ring();
    let Some(server) = NatsServer::start().await.unwrap() else {
        return;
    };
    let mock = MockLlm::start().await;
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}, "approval": {"mode": "risky"}}
    }))
    .unwrap();
    let settings = |replica: &str| {
        let mut s = NatsBusSettings::new(server.url());
        s.partitions = 2;
        s.replica = replica.to_owned();
        s
    };
    let (home_a, home_b) = (TempHome::new(), TempHome::new());
    for home in [&home_a, &home_b] {
        home.write_workspace_file("victim.txt", "delete me");
    }
    let (bus_a, lease_a, a) = own_home_replica(settings("replica-a"), &config, &home_a).await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("I need your approval."));
    bus_a
        .publish_inbound(InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Cron,
            "telegram",
            "cron",
            "1",
            "clean up",
        ))
        .await
        .unwrap();
    assert_eq!(next_out(&bus_a).await, "I need your approval.");
    let refused = mock.completion_requests().last().unwrap().raw_body.clone();
    let id: String = refused
        .split("/approve ")
        .nth(1)
        .expect("the model is told the request's id")
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    drop(lease_a);
    a.shutdown().await;
    bus_a.close();

    // Replica A is gone; B (another home) decides the request and runs the call.
    let (bus_b, _lease_b, b) = own_home_replica(settings("replica-b"), &config, &home_b).await;
    let from_alice = |text: &str| InboundMessage::new("telegram", "alice", "1", text);
    bus_b
        .publish_inbound(from_alice(&format!("/approve {id}")))
        .await
        .unwrap();
    let approved = next_out(&bus_b).await;
    assert!(approved.starts_with("✓ Approved once"), "{approved}");
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Done."));
    bus_b.publish_inbound(from_alice("go on")).await.unwrap();
    assert_eq!(next_out(&bus_b).await, "Done.");
    assert!(
        !home_b.workspace().join("victim.txt").exists(),
        "the approved call ran on the replica that took the approval"
    );
    assert!(
        home_a.workspace().join("victim.txt").exists(),
        "nothing ran on the replica that parked it"
    );
    // Spent: the same call again is asked about (and refused).
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Refused again."));
    bus_b.publish_inbound(from_alice("once more")).await.unwrap();
    let asked = next_out(&bus_b).await;
    assert!(asked.starts_with("🔐 Approval needed"), "{asked}");
    bus_b.publish_inbound(from_alice("no")).await.unwrap();
    while next_out(&bus_b).await != "Refused again." {}
    b.shutdown().await;
}
