//! `/health`, `/ready`, `/metrics`, bus-driven turns and the graceful shutdown, in-process.

use std::time::Duration;

use nanobot_bus::{Bus, InboundMessage};
use nanobot_gateway::Gateway;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::common::{GUARD, KEY, api_url, client, ops_url, options, sessions, start, texts};

#[tokio::test]
async fn health_ready_and_metrics_report_turns_tokens_and_tools() {
    let home = TempHome::new();
    home.write_workspace_file("notes.txt", "hello");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("read_file", json!({"path": "notes.txt"})).with_usage(100, 10));
    mock.push(MockReply::text("It says hello.").with_usage(150, 5));
    let gw = start(&home, &mock).await;
    let c = client();

    let h: Value = c
        .get(ops_url(&gw, "/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(h["status"], "ok");
    let r = c.get(ops_url(&gw, "/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200, "no channels configured: ready");
    let ready: Value = r.json().await.unwrap();
    assert_eq!(ready["provider"]["model"], "mock-model");

    // A message arriving on the bus, as a channel would publish it.
    gw.bus()
        .publish_inbound(InboundMessage::new(
            "telegram",
            "7",
            "42",
            "what is in notes.txt?",
        ))
        .await
        .unwrap();
    mock.wait_for_requests(2).await;

    // The turn ends asynchronously after the second model call; its session file shows it.
    let m = gw.metrics().clone();
    tokio::time::timeout(GUARD, async {
        while m.turns(nanobot_gateway::TurnOutcome::Ok) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    let text = metrics_text(&c, &gw).await;
    assert!(
        text.contains("nanobot_turns_total{channel=\"telegram\",outcome=\"ok\"} 1"),
        "{text}"
    );
    assert!(text.contains("nanobot_llm_requests_total 2"), "{text}");
    assert!(
        text.contains("nanobot_llm_tokens_total{kind=\"prompt\"} 250"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_llm_tokens_total{kind=\"completion\"} 15"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_tool_calls_total{tool=\"read_file\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_turn_duration_seconds_count{channel=\"telegram\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_bus_queue_depth{direction=\"inbound\"} 0"),
        "{text}"
    );
    assert!(text.contains("nanobot_turns_in_flight 0"), "{text}");
    gw.shutdown().await;
    let s = sessions(&home);
    assert_eq!(
        texts(&s["telegram:42"], "assistant").last().map(String::as_str),
        Some("It says hello.")
    );
}

#[tokio::test]
async fn shutdown_lets_a_running_turn_finish_and_saves_it() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("finished anyway").delay(Duration::from_millis(500)));
    let gw = start(&home, &mock).await;
    let url = api_url(&gw, "/v1/chat/completions");
    let req = client()
        .post(url)
        .bearer_auth(KEY)
        .json(&json!({"messages": [{"role": "user", "content": "slow"}], "session_id": "slow"}))
        .send();
    let answer = tokio::spawn(req);
    mock.wait_for_requests(1).await;
    let report = tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(report.drained, "the turn finished within the grace period");
    let r = answer.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "finished anyway");
    assert_eq!(
        texts(&sessions(&home)["api:slow"], "assistant"),
        ["finished anyway"]
    );
}

#[tokio::test]
async fn shutdown_past_the_deadline_cancels_the_turn_but_keeps_the_user_message() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("never").delay(Duration::from_secs(600)));
    let mut opts = options(&home, &mock, json!({}));
    opts.shutdown_grace = Duration::from_millis(100);
    let gw = Gateway::start(opts).await.unwrap();
    gw.bus()
        .publish_inbound(InboundMessage::new("telegram", "7", "42", "a long task"))
        .await
        .unwrap();
    mock.wait_for_requests(1).await;
    let report = tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(!report.drained);
    let s = sessions(&home);
    let msgs = &s["telegram:42"];
    assert!(texts(msgs, "user")[0].contains("a long task"), "{msgs:?}");
    assert!(!texts(msgs, "assistant").iter().any(|t| t == "never"));
}

#[tokio::test]
async fn an_occupied_port_fails_the_start_with_the_config_key() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let opts = options(&home, &mock, json!({"gateway": {"port": port}}));
    let err = Gateway::start(opts).await.unwrap_err();
    assert!(err.to_string().contains("gateway.port"), "{err}");
}

#[tokio::test]
async fn enabled_discord_and_slack_channels_are_built_from_the_config() {
    // Each enabled channel is constructed (and its settings validated) at start: a missing token names the
    // channel and the key, which shows the gateway wires that adapter in rather than ignoring the block.
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (name, block, key) in [
        (
            "discord",
            json!({"discord": {"enabled": true, "token": "", "allowFrom": ["1"]}}),
            "token",
        ),
        (
            "slack",
            json!({"slack": {"enabled": true, "appToken": "", "botToken": "", "allowFrom": ["U1"]}}),
            "Token",
        ),
    ] {
        let opts = options(&home, &mock, json!({ "channels": block }));
        let err = Gateway::start(opts).await.unwrap_err().to_string();
        assert!(err.contains(name), "{name}: {err}");
        assert!(err.contains(key), "{name}: {err}");
    }
}

#[tokio::test]
async fn enabled_feishu_and_dingtalk_channels_are_built_from_the_config() {
    // Their blocks stay raw in the config; an enabled one is read and validated at start (the error names the
    // channel and the key), a disabled one is left alone.
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (name, block, key) in [
        (
            "feishu",
            json!({"feishu": {"enabled": true, "appId": "", "appSecret": "s"}}),
            "appId",
        ),
        (
            "feishu",
            json!({"feishu": {"enabled": true, "appId": "cli_1", "appSecret": "s", "domain": "x"}}),
            "domain",
        ),
        (
            "feishu",
            json!({"feishu": {"enabled": true, "allowFrom": 5}}),
            "channels.feishu",
        ),
        (
            "dingtalk",
            json!({"dingtalk": {"enabled": true, "clientId": "d", "clientSecret": ""}}),
            "clientSecret",
        ),
    ] {
        let opts = options(&home, &mock, json!({ "channels": block }));
        let err = Gateway::start(opts).await.unwrap_err().to_string();
        assert!(err.contains(name), "{name}: {err}");
        assert!(err.contains(key), "{name}: {err}");
    }
}

#[tokio::test]
async fn a_busy_api_port_stops_the_api_only_and_serve_alone_fails() {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let patch = json!({"api": {"port": port}});
    let gw = Gateway::start(options(&home, &mock, patch.clone()))
        .await
        .expect("the gateway starts without its API");
    assert_eq!(gw.api_addr(), None);
    let health = client().get(ops_url(&gw, "/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    gw.shutdown().await;

    // `serve` is the API alone: the busy port is the start's error, naming the setting and the address.
    let opts = options(&home, &mock, patch);
    let serve = nanobot_gateway::GatewayOptions::serve(opts.config, opts.env);
    let Err(err) = Gateway::start(serve).await else {
        panic!("serve must fail on a busy api.port");
    };
    let text = err.to_string();
    assert!(
        text.contains("api.port") && text.contains(&port.to_string()),
        "{text}"
    );
}

#[tokio::test]
async fn the_api_reports_the_providers_usage_and_metrics_show_tokens_and_cost_by_model() {
    let home = TempHome::new();
    home.write_workspace_file("notes.txt", "hello");
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("read_file", json!({"path": "notes.txt"}))
            .with_usage(1000, 100)
            .with_cache_usage(0, 400),
    );
    mock.push(
        MockReply::text("It says hello.")
            .with_usage(2000, 50)
            .with_reasoning_tokens(30),
    );
    let patch = json!({"agents": {"defaults": {"timezone": "UTC", "prices": {"mock-model": {"input": 2, "output": 10, "cachedInput": 1}}}}});
    nanobot_testkit::install_ring();
    let gw = Gateway::start(options(&home, &mock, patch)).await.unwrap();
    let c = client();
    let body = ask(&c, &gw, "what is in notes.txt?").await;
    // The two model calls' figures as the provider reported them, summed.
    assert_eq!(body["usage"]["prompt_tokens"], 3000, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 150, "{body}");
    assert_eq!(body["usage"]["total_tokens"], 3150, "{body}");
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"], 400,
        "{body}"
    );
    assert_eq!(
        body["usage"]["completion_tokens_details"]["reasoning_tokens"], 30,
        "{body}"
    );

    let text = metrics_text(&c, &gw).await;
    assert!(
        text.contains("nanobot_llm_model_tokens_total{model=\"mock-model\",kind=\"prompt\"} 3000"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_llm_model_tokens_total{model=\"mock-model\",kind=\"reasoning\"} 30"),
        "{text}"
    );
    // 2,600 fresh input at $2, 400 cached at $1, 150 output at $10 per million.
    let expected = (2600.0 * 2.0 + 400.0 * 1.0 + 150.0 * 10.0) / 1e6;
    let cost: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("nanobot_llm_cost_total{model=\"mock-model\"} "))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    assert!(
        !text.contains("nanobot_llm_unpriced_tokens_total{model=\"mock-model\"}"),
        "{text}"
    );
    gw.shutdown().await;
    // The same calls are in the home's usage ledger, for the API's caller.
    let ledger = nanobot_usage::UsageLedger::new(&home.nanobot_dir(), "UTC".parse().unwrap());
    let (day, _) = ledger.totals(&nanobot_usage::Scope::Overall).unwrap();
    assert_eq!(
        (day.calls, day.input, day.output, day.cached, day.reasoning),
        (2, 3000, 150, 400, 30)
    );
}

/// One non-streamed question to the gateway's OpenAI-compatible API; the answer's body.
async fn ask(c: &reqwest::Client, gw: &Gateway, content: &str) -> Value {
    c.post(api_url(gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "mock-model", "messages": [{"role": "user", "content": content}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The gateway's `/metrics` page.
async fn metrics_text(c: &reqwest::Client, gw: &Gateway) -> String {
    c.get(ops_url(gw, "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_count_the_calls_made_outside_a_turn_as_the_ledger_records_them() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    // The turn asks a subagent and waits for it: the subagent's call is made outside the turn's run.
    mock.push(
        MockReply::tool_call("spawn", json!({"task": "count to three", "wait": true})).with_usage(100, 10),
    );
    mock.push(MockReply::text("one, two, three").with_usage(200, 20));
    mock.push(MockReply::text("It counted to three.").with_usage(300, 30));
    nanobot_testkit::install_ring();
    let gw = Gateway::start(options(&home, &mock, json!({}))).await.unwrap();
    let c = client();
    let body = ask(&c, &gw, "count to three").await;
    assert_eq!(
        body["choices"][0]["message"]["content"], "It counted to three.",
        "{body}"
    );
    assert_eq!(mock.request_count(), 3);
    let text = metrics_text(&c, &gw).await;
    assert!(text.contains("nanobot_llm_requests_total 3"), "{text}");
    assert!(
        text.contains("nanobot_llm_tokens_total{kind=\"prompt\"} 600"),
        "{text}"
    );
    assert!(
        text.contains("nanobot_llm_tokens_total{kind=\"completion\"} 60"),
        "{text}"
    );
    gw.shutdown().await;
    let ledger = nanobot_usage::UsageLedger::new(&home.nanobot_dir(), "UTC".parse().unwrap());
    let (day, _) = ledger.totals(&nanobot_usage::Scope::Overall).unwrap();
    assert_eq!(
        (day.calls, day.input, day.output),
        (3, 600, 60),
        "/metrics agrees with the ledger"
    );
}
