//! System jobs: installed from the config with one owner, run through the one handler, observed once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_bus::{Bus, InboundMessage};
use nanobot_core::{CoreError, SystemJob, TurnReply};
use nanobot_runtime::{Environment, RuntimeOptions, TurnObserver, TurnWatch};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

const GUARD: Duration = Duration::from_secs(60);

fn config(mock: &MockLlm, patch: serde_json::Value) -> nanobot_config::Config {
    let mut v = json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}, "exec": {"enable": false}}
    });
    if let (Some(v), Some(p)) = (v.as_object_mut(), patch.as_object()) {
        for (k, x) in p {
            v.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn install_system_jobs_follows_the_config_and_keeps_them_protected() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let env = Environment::new(home.home(), HashMap::new());
    let mut config = config(&mock, json!({"gateway": {"heartbeat": {"enabled": false}}}));
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
    let cron = agent.cron().unwrap().clone();
    nanobot_runtime::install_system_jobs(&agent, &config).unwrap();
    let ids: Vec<String> = cron.list().unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(ids, ["dream"], "dream on, heartbeat off");
    config.gateway.heartbeat.enabled = true;
    config.gateway.heartbeat.interval_s = 0;
    config.agents.defaults.dream.enabled = false;
    nanobot_runtime::install_system_jobs(&agent, &config).unwrap();
    let jobs = cron.list().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, SystemJob::Heartbeat.id());
    assert!(jobs[0].is_protected());
    assert_eq!(
        nanobot_runtime::system_job_schedule(&config, SystemJob::Heartbeat),
        Some(nanobot_cron::CronSchedule::every(
            nanobot_runtime::MIN_HEARTBEAT_INTERVAL
        )),
        "an interval of 0 is raised to the minimum"
    );
    assert!(cron.remove("heartbeat").is_err(), "protected from removal");
}

/// Counts what the runtime reports.
#[derive(Default)]
struct Seen {
    turns: Mutex<Vec<(String, bool)>>,
    jobs: Mutex<Vec<(SystemJob, Result<String, String>)>>,
}

struct Observer(Arc<Seen>);
struct Watch(Arc<Seen>, String);

impl TurnObserver for Observer {
    fn turn_started(&self, msg: &InboundMessage) -> Box<dyn TurnWatch> {
        Box::new(Watch(self.0.clone(), msg.channel.clone()))
    }
    fn system_job_finished(&self, job: SystemJob, result: Result<&str, &str>) {
        let r = result.map(str::to_owned).map_err(str::to_owned);
        self.0.jobs.lock().unwrap().push((job, r));
    }
}

impl TurnWatch for Watch {
    fn finished(self: Box<Self>, result: &Result<TurnReply, CoreError>) {
        self.0
            .turns
            .lock()
            .unwrap()
            .push((self.1.clone(), result.is_ok()));
    }
}

#[tokio::test]
async fn one_heartbeat_tick_is_one_model_call_and_one_observation() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", "- Check the backup folder\n");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("heartbeat", json!({"action": "skip"})));
    let config = config(
        &mock,
        json!({"gateway": {"heartbeat": {"enabled": true, "intervalS": 3600}}}),
    );
    let seen = Arc::new(Seen::default());
    let (agent, bus, mut rt) = crate::start_in_process(
        &home,
        &config,
        RuntimeOptions::default()
            .with_cron(true)
            .with_observer(Arc::new(Observer(seen.clone()))),
    );
    let outcome = tokio::time::timeout(GUARD, agent.cron().unwrap().run_now("heartbeat", true))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.output.as_deref(), Some("skip"));
    assert_eq!(mock.request_count(), 1, "exactly one model call per tick");
    // The observation arrives through the cron broadcast; a bounded wait for it.
    tokio::time::timeout(GUARD, async {
        while seen.jobs.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        seen.jobs.lock().unwrap().as_slice(),
        [(SystemJob::Heartbeat, Ok("skip".to_owned()))]
    );

    // A slash command through the dispatcher: exactly one reply, from the agent, observed as one turn.
    bus.publish_inbound(InboundMessage::new("telegram", "7", "7", "/help"))
        .await
        .unwrap();
    let reply = tokio::time::timeout(GUARD, bus.consume_outbound())
        .await
        .unwrap()
        .unwrap();
    assert!(reply.content.contains("/new"), "{}", reply.content);
    rt.stop_accepting(tokio::time::Instant::now() + GUARD).await;
    assert!(rt.drain(tokio::time::Instant::now() + GUARD).await);
    rt.shutdown().await;
    assert_eq!(bus.outbound_len(), 0, "no second reply");
    assert_eq!(
        seen.turns.lock().unwrap().as_slice(),
        [("telegram".to_owned(), true)]
    );
    assert_eq!(mock.request_count(), 1, "commands never call the model");
    assert!(agent.is_shut_down());
}

/// A cron job running when the runtime stops accepting work is not cut off: [`Runtime::drain`] waits for it, and
/// its run is recorded.
#[tokio::test]
async fn a_cron_job_running_at_a_stop_finishes_and_is_recorded() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    // Long enough that the stop comes while the job's model call is under way.
    mock.set_fallback(MockReply::text("stretched").delay(Duration::from_secs(3)));
    let config = config(&mock, json!({"gateway": {"heartbeat": {"enabled": false}}}));
    let (agent, _bus, mut rt) =
        crate::start_in_process(&home, &config, RuntimeOptions::default().with_cron(true));
    let cron = agent.cron().unwrap().clone();
    let job = cron
        .add(nanobot_cron::NewJob::new(
            nanobot_cron::CronSchedule::every(Duration::from_secs(1)),
            nanobot_cron::CronPayload::agent_turn("stretch"),
        ))
        .unwrap();
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .expect("the job's model call within the guard");
    rt.stop_accepting(tokio::time::Instant::now() + GUARD).await;
    assert!(
        rt.drain(tokio::time::Instant::now() + GUARD).await,
        "the job finishes within the guard"
    );
    let state = cron.get(&job.id).unwrap().unwrap().state;
    assert_eq!(
        (state.last_status.as_deref(), state.run_history.len()),
        (Some("ok"), 1),
        "the run was recorded: {state:?}"
    );
    rt.shutdown().await;
}
