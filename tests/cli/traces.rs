//! OpenTelemetry traces through the programs (issue 49): a real OTLP/HTTP receiver decoding each export with the
//! OpenTelemetry protobuf definitions gets the spans of a turn with a tool call, with the right parents, the
//! figures (model, tokens, tool, outcome) and no message text; through the gateway, a channel's send is a child
//! of the turn that published it.

use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use nanobot_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use nanobot_testkit::peers::{free_port, wait_for_http};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{nanobot, onboarded, run, set, stderr, stdout, terminate};

const GUARD: Duration = Duration::from_secs(60);

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one `{name}` span expected: {spans:#?}");
    found[0]
}

/// What the user, the model and the tool said must not be in any export.
fn assert_no_text(collector: &OtlpReceiver, texts: &[&str]) {
    for body in collector.bodies() {
        let body = String::from_utf8_lossy(&body);
        for t in texts {
            assert!(!body.contains(t), "`{t}` was exported: {body}");
        }
    }
}

#[test]
fn a_turn_with_a_tool_call_is_one_trace_with_the_right_parents_and_no_text() {
    let collector = OtlpReceiver::start();
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    set(
        &home,
        json!({"gateway": {"tracing": {
            "endpoint": collector.endpoint(),
            "headers": {"x-collector-key": "${COLLECTOR_KEY}"}
        }}}),
    );
    std::fs::write(home.workspace().join("plum.txt"), "PLUM-NOTE-CONTENT").unwrap();
    mock.push(MockReply::tool_call("read_file", json!({"path": "plum.txt"})).with_usage(120, 30));
    mock.push(
        MockReply::text("The note says violet-answer")
            .with_usage(200, 10)
            .with_reasoning_tokens(4),
    );
    let o = nanobot(home.home())
        .env("COLLECTOR_KEY", "collector-key-123")
        .args(["agent", "-m", "what does my quokka-question note say?"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("violet-answer"));

    // Everything is exported before the program exits.
    let spans = collector.spans();
    assert!(collector.refused().is_empty(), "{:?}", collector.refused());
    let turn = one(&spans, "turn");
    let tool = one(&spans, "execute_tool read_file");
    let chats: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name.starts_with("chat ")).collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    assert_eq!(spans.len(), 4, "nothing else is exported: {spans:#?}");

    // One trace: the turn is its root, the model calls and the tool call its children.
    assert!(turn.parent_span_id.is_empty(), "{turn:?}");
    for s in chats.iter().copied().chain([tool]) {
        assert_eq!(s.trace_id, turn.trace_id, "{s:?}");
        assert_eq!(s.parent_span_id, turn.span_id, "{s:?}");
    }
    assert_eq!(turn.service_name, "nanobot");

    // The figures.
    let model = turn.attr("gen_ai.request.model").unwrap();
    assert!(!model.is_empty());
    assert_eq!(turn.attr("nanobot.session"), Some("cli:direct"));
    assert_eq!(turn.attr("nanobot.outcome"), Some("completed"));
    assert_eq!(turn.attr("gen_ai.usage.input_tokens"), Some("320"));
    assert_eq!(turn.attr("gen_ai.usage.output_tokens"), Some("40"));
    assert!(
        turn.attr("enduser.id").is_some_and(|p| p.starts_with("cli:")),
        "{turn:?}"
    );
    let (first, second) = if chats[0].attr("gen_ai.usage.input_tokens") == Some("120") {
        (chats[0], chats[1])
    } else {
        (chats[1], chats[0])
    };
    assert_eq!(first.name, format!("chat {model}"));
    assert_eq!(first.attr("gen_ai.usage.output_tokens"), Some("30"));
    assert_eq!(first.attr("gen_ai.response.finish_reasons"), Some("tool_calls"));
    assert_eq!(second.attr("gen_ai.usage.input_tokens"), Some("200"));
    assert_eq!(second.attr("gen_ai.response.finish_reasons"), Some("stop"));
    assert_eq!(second.attr("gen_ai.usage.reasoning.output_tokens"), Some("4"));
    assert_eq!(first.attr("gen_ai.usage.reasoning.output_tokens"), None);
    assert_eq!(first.kind, 3, "a model call is a client span");
    assert_eq!(tool.attr("gen_ai.tool.name"), Some("read_file"));
    assert_eq!(tool.attr("nanobot.outcome"), Some("ok"));
    assert_eq!(tool.status_code, 0, "{tool:?}");

    // The collector's key went with every export; no text went anywhere.
    assert!(
        collector
            .headers()
            .iter()
            .all(|h| h.get("x-collector-key").map(String::as_str) == Some("collector-key-123")),
        "{:?}",
        collector.headers()
    );
    assert_no_text(
        &collector,
        &[
            "quokka-question",
            "violet-answer",
            "PLUM-NOTE-CONTENT",
            "plum.txt",
            "collector-key-123",
        ],
    );
    // The log lines (stderr) carry no span context either.
    assert!(!stderr(&o).contains("turn{"), "{}", stderr(&o));
}

#[test]
fn a_failed_tool_and_a_failed_model_call_are_marked_as_errors() {
    let collector = OtlpReceiver::start();
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    set(
        &home,
        json!({"gateway": {"tracing": {"endpoint": collector.endpoint()}}}),
    );
    mock.push(MockReply::tool_call("read_file", json!({"path": "missing.txt"})));
    mock.push(MockReply::error(400));
    let o = run(home.home(), &["agent", "-m", "read the missing file"]);
    assert!(o.status.code().is_some(), "stderr: {}", stderr(&o));
    let spans = collector.spans();
    let tool = one(&spans, "execute_tool read_file");
    assert_eq!(tool.attr("nanobot.outcome"), Some("error"));
    assert_eq!(tool.status_code, 2);
    let failed: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat ") && s.status_code == 2)
        .collect();
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(failed[0].attr("error.type"), Some("invalid_request"));
    let turn = one(&spans, "turn");
    assert_eq!(turn.attr("nanobot.outcome"), Some("error"));
    assert_eq!(turn.status_code, 2);
}

#[test]
fn without_a_collector_nothing_is_exported_and_a_bad_endpoint_is_refused_by_name() {
    let collector = OtlpReceiver::start();
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    mock.push(MockReply::text("fine"));
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    // The standard variables turn it on; OTEL_SDK_DISABLED turns it off again.
    mock.push(MockReply::text("fine"));
    let o = nanobot(home.home())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_SDK_DISABLED", "true")
        .args(["agent", "-m", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());
    mock.push(MockReply::text("fine"));
    let o = nanobot(home.home())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_SERVICE_NAME", "my-assistant")
        .args(["agent", "-m", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(one(&collector.spans(), "turn").service_name, "my-assistant");

    // A collector that is not there costs the turn nothing.
    let nobody = format!("http://127.0.0.1:{}", free_port().unwrap());
    set(&home, json!({"gateway": {"tracing": {"endpoint": nobody}}}));
    mock.push(MockReply::text("still answered"));
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "still answered\n");

    // `doctor` says where spans go (header names, never their values), or how to turn them on.
    set(&home, json!({"gateway": {"tracing": {"endpoint": ""}}}));
    let doctor = stdout(&run(home.home(), &["doctor"]));
    assert!(doctor.contains("traces: off"), "{doctor}");
    set(
        &home,
        json!({"gateway": {"tracing": {"endpoint": "http://collector.internal:4318", "headers": {"x-key": "hdr-secret"}}}}),
    );
    let doctor = stdout(&run(home.home(), &["doctor"]));
    assert!(
        doctor.contains("http://collector.internal:4318/v1/traces"),
        "{doctor}"
    );
    assert!(
        doctor.contains("x-key") && !doctor.contains("hdr-secret"),
        "{doctor}"
    );

    set(
        &home,
        json!({"gateway": {"tracing": {"endpoint": "localhost:4318"}}}),
    );
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(err.contains("gateway.tracing.endpoint"), "{err}");
    assert!(err.contains("http://"), "{err}");
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_event(ws: &mut Ws) -> Value {
    loop {
        let frame = tokio::time::timeout(GUARD, ws.next())
            .await
            .expect("an event within the bound")
            .expect("the websocket is open")
            .expect("a frame");
        if let Message::Text(t) = frame {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_channel_send_is_a_child_of_the_turn_that_sent_it() {
    let collector = OtlpReceiver::start();
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let (ops, ws_port) = (free_port().unwrap(), free_port().unwrap());
    set(
        &home,
        json!({
            "gateway": {"host": "127.0.0.1", "port": ops, "tracing": {"endpoint": collector.endpoint()}},
            "channels": {"websocket": {"enabled": true, "host": "127.0.0.1", "port": ws_port,
                                       "token": "ws-token", "allowFrom": ["*"], "streaming": false}}
        }),
    );
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})));
    mock.push(MockReply::text("Here is the wombat-answer"));
    let child = nanobot(home.home())
        .env("NANOBOT_LOG", "debug")
        .arg("gateway")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let health = wait_for_http(&format!("http://127.0.0.1:{ops}/health"), GUARD).await;
    assert_eq!(health.ok(), Some(200));
    let url = format!("ws://127.0.0.1:{ws_port}/?client_id=tester&token=ws-token");
    let (mut ws, _) = tokio::time::timeout(GUARD, tokio_tungstenite::connect_async(url))
        .await
        .unwrap()
        .unwrap();
    let chat = ws_event(&mut ws).await["chat_id"].as_str().unwrap().to_owned();
    let send = json!({"type": "message", "chat_id": chat, "content": "list my koala-files please"});
    ws.send(Message::text(send.to_string())).await.unwrap();
    loop {
        let ev = ws_event(&mut ws).await;
        if ev["event"] == "stream_end" || (ev["event"] == "message" && ev.get("kind").is_none()) {
            break;
        }
    }
    // A graceful stop exports what is still queued.
    let out = terminate(child).await;
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    // The exported spans are not log context, even at `debug`.
    assert!(log.contains("DEBUG"), "{log}");
    for span in ["turn{", "send{", "chat{", "execute_tool{"] {
        assert!(!log.contains(span), "`{span}` in the log: {log}");
    }

    let spans = collector.spans();
    let turn = one(&spans, "turn");
    assert_eq!(
        turn.attr("nanobot.chat"),
        Some(format!("websocket:{chat}").as_str())
    );
    assert_eq!(turn.kind, 2, "a turn is a server span");
    let sends: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "send websocket").collect();
    assert!(!sends.is_empty(), "{spans:#?}");
    let reply = sends
        .iter()
        .find(|s| s.attr("nanobot.kind") == Some("reply"))
        .unwrap_or_else(|| panic!("the reply's send: {sends:#?}"));
    assert_eq!(reply.trace_id, turn.trace_id, "{reply:?}");
    assert_eq!(reply.parent_span_id, turn.span_id, "{reply:?}");
    assert_eq!(reply.attr("nanobot.outcome"), Some("sent"));
    assert_eq!(reply.attr("messaging.destination.name"), Some(chat.as_str()));
    assert_eq!(reply.kind, 4, "a send is a producer span");
    let tool = one(&spans, "execute_tool list_dir");
    assert_eq!(tool.parent_span_id, turn.span_id);
    assert_no_text(&collector, &["koala-files", "wombat-answer"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_heartbeats_model_call_outside_a_turn_has_its_span_too() {
    let collector = OtlpReceiver::start();
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let ops = free_port().unwrap();
    set(
        &home,
        json!({"gateway": {"host": "127.0.0.1", "port": ops, "heartbeat": {"enabled": true, "intervalS": 1},
                           "tracing": {"endpoint": collector.endpoint()}}}),
    );
    std::fs::write(
        home.workspace().join("HEARTBEAT.md"),
        "# Heartbeat Tasks\n\n## Active Tasks\n- [ ] Check the pelican-weather in Paris\n",
    )
    .unwrap();
    mock.set_fallback(MockReply::tool_call("heartbeat", json!({"action": "skip"})).with_usage(50, 5));
    let child = nanobot(home.home())
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .arg("gateway")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let decided = |spans: &[ReceivedSpan]| {
        spans
            .iter()
            .any(|s| s.name.starts_with("chat ") && s.attr("nanobot.tool_calls") == Some("1"))
    };
    let spans = tokio::task::spawn_blocking({
        let collector = std::sync::Arc::new(collector);
        let c = collector.clone();
        move || (c.wait_for(GUARD, decided), collector)
    })
    .await
    .unwrap();
    let (spans, collector) = spans;
    let out = terminate(child).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decision = spans
        .iter()
        .find(|s| s.name.starts_with("chat ") && s.attr("nanobot.tool_calls") == Some("1"))
        .unwrap_or_else(|| panic!("the heartbeat's call: {spans:#?}"));
    assert!(decision.parent_span_id.is_empty(), "{decision:?}");
    assert_eq!(decision.attr("gen_ai.usage.input_tokens"), Some("50"));
    assert_eq!(
        decision.attr("gen_ai.response.finish_reasons"),
        Some("tool_calls")
    );
    assert_no_text(&collector, &["pelican-weather"]);
}
