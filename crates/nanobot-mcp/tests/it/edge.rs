//! Edge cases against the rmcp test server: in-process over streamable HTTP, and as a stdio child.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use nanobot_mcp::{ConnectionState, McpError, McpManager, McpOptions, RawServer, TransportKind};
use nanobot_tools::{Tool, ToolError};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use crate::peers::{self, ctx, local_options, spec};
use crate::test_server::TestServer;

/// Serves the test server at `http://127.0.0.1:<port>/mcp` until the test ends.
async fn serve_http() -> String {
    serve_http_recording(Arc::default()).await
}

/// Like [`serve_http`], recording the `x-api-key` and `accept` headers of every request.
async fn serve_http_recording(seen: Arc<std::sync::Mutex<Vec<(String, String)>>>) -> String {
    let service = StreamableHttpService::new(
        || Ok(TestServer::new()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let get = |n: &str| {
                    req.headers()
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned()
                };
                seen.lock().unwrap().push((get("x-api-key"), get("accept")));
                next.run(req)
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/mcp")
}

fn find(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| {
            let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
            panic!("no tool {name} among {names:?}")
        })
}

async fn http_manager(raw: RawServer, opts: McpOptions) -> McpManager {
    let url = serve_http().await;
    let manager = McpManager::new(
        vec![spec(
            "test",
            RawServer {
                url: Some(url),
                ..raw
            },
        )],
        opts,
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    manager
}

#[tokio::test]
async fn slow_tool_times_out_and_the_session_stays_usable() {
    let manager = http_manager(
        RawServer {
            tool_timeout: Some(1),
            ..RawServer::default()
        },
        local_options(None),
    )
    .await;
    let tools = manager.tools();
    let err = find(&tools, "mcp_test_slow")
        .execute(json!({"seconds": 60}), &ctx())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::Timeout(d) if d == Duration::from_secs(1)),
        "{err:?}"
    );
    let out = find(&tools, "mcp_test_echo")
        .execute(json!({"message": "still here"}), &ctx())
        .await
        .unwrap();
    assert_eq!(out.text, "Echo: still here");
    manager.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_turn_cancels_the_call() {
    let manager = http_manager(RawServer::default(), local_options(None)).await;
    let context = ctx();
    context.cancel.cancel();
    let err = find(&manager.tools(), "mcp_test_slow")
        .execute(json!({"seconds": 60}), &context)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Cancelled), "{err:?}");
    manager.shutdown().await;
}

#[tokio::test]
async fn huge_results_are_cut_with_a_note() {
    let manager = http_manager(
        RawServer::default(),
        McpOptions {
            max_result_chars: 100_000,
            ..local_options(None)
        },
    )
    .await;
    let out = find(&manager.tools(), "mcp_test_huge")
        .execute(json!({"size": 3_000_000}), &ctx())
        .await
        .unwrap();
    assert!(out.text.starts_with("0123456789"));
    assert!(
        out.text.ends_with("[truncated 2900000 more characters]"),
        "{}",
        &out.text[out.text.len() - 80..]
    );
    assert!(out.text.len() < 100_100);
    manager.shutdown().await;
}

#[tokio::test]
async fn errors_images_resources_and_prompts() {
    let media = tempfile::tempdir().unwrap();
    let manager = http_manager(RawServer::default(), local_options(Some(media.path()))).await;
    let tools = manager.tools();

    let err = find(&tools, "mcp_test_fail")
        .execute(json!({}), &ctx())
        .await
        .unwrap_err();
    assert!(err.model_text().contains("the widget is broken"), "{err}");

    let out = find(&tools, "mcp_test_picture")
        .execute(json!({}), &ctx())
        .await
        .unwrap();
    assert!(
        out.text.starts_with("here is a picture\n[image saved: "),
        "{}",
        out.text
    );
    assert_eq!(out.media.len(), 1);
    assert_eq!(&std::fs::read(&out.media[0]).unwrap()[..4], b"\x89PNG");

    let resource = find(&tools, "mcp_test_resource_greeting");
    assert!(resource.read_only());
    assert_eq!(resource.parameters(), json!({"type": "object", "properties": {}}));
    let out = resource.execute(json!({}), &ctx()).await.unwrap();
    assert_eq!(out.text, "hello from a resource");

    let prompt = find(&tools, "mcp_test_prompt_greet");
    assert_eq!(prompt.parameters()["required"], json!(["name"]));
    let out = prompt.execute(json!({"name": "Ada"}), &ctx()).await.unwrap();
    assert_eq!(out.text, "Please greet Ada warmly.");
    manager.shutdown().await;
}

#[tokio::test]
async fn an_enabled_tools_list_leaves_out_resources_and_prompts() {
    let manager = http_manager(
        RawServer {
            enabled_tools: Some(vec!["echo".into(), "mcp_test_huge".into()]),
            ..RawServer::default()
        },
        local_options(None),
    )
    .await;
    let names: Vec<String> = manager.tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(names, ["mcp_test_echo", "mcp_test_huge"]);
    assert!(manager.status()[0].warnings.is_empty());

    let nothing = http_manager(
        RawServer {
            enabled_tools: Some(vec![]),
            ..RawServer::default()
        },
        local_options(None),
    )
    .await;
    assert!(nothing.tools().is_empty(), "an empty list enables nothing");
    manager.shutdown().await;
    nothing.shutdown().await;
}

#[tokio::test]
async fn server_exiting_mid_call_is_a_tool_error_and_is_reconnected_later() {
    let manager = McpManager::new(
        vec![spec(
            "kid",
            RawServer {
                command: Some(peers::stdio_test_server().display().to_string()),
                tool_timeout: Some(120),
                ..RawServer::default()
            },
        )],
        McpOptions {
            retry_interval: Duration::ZERO,
            ..local_options(None)
        },
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    let err = find(&manager.tools(), "mcp_kid_exit_now")
        .execute(json!({}), &ctx())
        .await
        .unwrap_err();
    assert!(
        !matches!(err, ToolError::Timeout(_)),
        "the exit is noticed, not waited out: {err:?}"
    );
    assert!(err.model_text().contains("kid"), "{}", err.model_text());

    // The next connect() notices and starts a new process.
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    let out = find(&manager.tools(), "mcp_kid_echo")
        .execute(json!({"message": "again"}), &ctx())
        .await
        .unwrap();
    assert_eq!(out.text, "Echo: again");
    manager.shutdown().await;
}

#[tokio::test]
async fn a_failing_server_does_not_block_the_others_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let later = dir.path().join("server-installed-later");
    let manager = McpManager::new(
        vec![
            spec(
                "broken",
                RawServer {
                    command: Some(later.display().to_string()),
                    ..RawServer::default()
                },
            ),
            spec(
                "good",
                RawServer {
                    command: Some(peers::stdio_test_server().display().to_string()),
                    ..RawServer::default()
                },
            ),
        ],
        McpOptions {
            retry_interval: Duration::ZERO,
            ..local_options(None)
        },
    );
    let status = manager.connect().await;
    match &status[0].state {
        ConnectionState::Failed(e) => assert!(e.contains("cannot start"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(status[1].connected());
    assert!(manager.tools().iter().all(|t| t.name().starts_with("mcp_good_")));

    // The command appears; the next connect() picks the server up, the good one is untouched.
    std::os::unix::fs::symlink(peers::stdio_test_server(), &later).unwrap();
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert!(status[1].connected());
    assert!(manager.tools().iter().any(|t| t.name() == "mcp_broken_echo"));
    manager.shutdown().await;
}

#[tokio::test]
async fn failed_servers_wait_for_the_retry_interval() {
    let manager = McpManager::new(
        vec![spec(
            "gone",
            RawServer {
                command: Some("/nonexistent/nanobot-mcp-test".into()),
                ..RawServer::default()
            },
        )],
        McpOptions {
            retry_interval: Duration::from_secs(3600),
            ..local_options(None)
        },
    );
    let first = manager.connect().await;
    let ConnectionState::Failed(e1) = &first[0].state else {
        panic!()
    };
    // Within the interval the failure is reported again without a new attempt…
    assert_eq!(manager.connect().await, first);
    // …and an explicit retry ignores the interval.
    let again = manager.reconnect_failed().await;
    let ConnectionState::Failed(e2) = &again[0].state else {
        panic!()
    };
    assert_eq!(e1, e2);
    assert_eq!(first[0].transport, TransportKind::Stdio);
}

/// A legacy SSE server that announces an endpoint and then never answers POSTs.
async fn silent_sse_server(endpoint: &'static str) -> String {
    use axum::body::Body;
    use axum::response::Response;
    let router = axum::Router::new()
        .route(
            "/sse",
            axum::routing::get(move || async move {
                let first = futures::stream::once(async move {
                    Ok::<_, Infallible>(format!("event: endpoint\ndata: {endpoint}\n\n"))
                });
                let body = Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()));
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(body)
                    .unwrap()
            }),
        )
        .route(
            "/message",
            axum::routing::post(std::future::pending::<&'static str>),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/sse")
}

#[tokio::test]
async fn legacy_sse_posts_time_out_instead_of_hanging() {
    let url = silent_sse_server("/message?sessionId=abc").await;
    let manager = McpManager::new(
        vec![spec(
            "silent",
            RawServer {
                url: Some(url),
                tool_timeout: Some(1),
                ..RawServer::default()
            },
        )],
        McpOptions {
            // Far longer than the POST timeout: the failure must come from the POST.
            connect_timeout: Duration::from_secs(600),
            ..local_options(None)
        },
    );
    let status = manager.connect().await;
    match &status[0].state {
        ConnectionState::Failed(e) => assert!(e.contains("initialisation failed"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn legacy_sse_refuses_an_endpoint_on_another_origin() {
    let url = silent_sse_server("http://elsewhere.example/message").await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let err = nanobot_mcp::LegacySseTransport::connect(
        "evil",
        reqwest::Client::new(),
        &url,
        Default::default(),
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::SseHandshake { .. }), "{err:?}");
    assert!(err.to_string().contains("same origin"), "{err}");
}

#[tokio::test]
async fn the_registry_runs_mcp_tools_and_follows_reconnects() {
    use nanobot_tools::ToolRegistry;
    let registry = ToolRegistry::default();
    let manager = McpManager::new(
        vec![spec(
            "kid",
            RawServer {
                command: Some(peers::stdio_test_server().display().to_string()),
                enabled_tools: Some(vec!["echo".into(), "fail".into(), "exit_now".into()]),
                ..RawServer::default()
            },
        )],
        McpOptions {
            retry_interval: Duration::ZERO,
            ..local_options(None)
        },
    );
    let status = manager.connect_into(&registry).await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert_eq!(
        registry.names(),
        ["mcp_kid_echo", "mcp_kid_exit_now", "mcp_kid_fail"]
    );

    // The model's view: validated arguments, plain results, errors with the hint.
    let out = registry
        .execute("mcp_kid_echo", json!({"message": "via registry"}), &ctx())
        .await;
    assert_eq!(out.text, "Echo: via registry");
    let out = registry.execute("mcp_kid_echo", json!({}), &ctx()).await;
    assert!(out.is_error, "missing required argument: {}", out.text);
    let out = registry.execute("mcp_kid_fail", json!({}), &ctx()).await;
    assert!(out.is_error);
    assert!(out.text.contains("the widget is broken"), "{}", out.text);
    assert!(out.text.ends_with(nanobot_tools::ERROR_HINT));

    // The server dies; the next turn reconnects and the registry keeps working.
    let out = registry.execute("mcp_kid_exit_now", json!({}), &ctx()).await;
    assert!(out.is_error);
    manager.connect_into(&registry).await;
    let out = registry
        .execute("mcp_kid_echo", json!({"message": "back"}), &ctx())
        .await;
    assert_eq!(out.text, "Echo: back");

    // Shutdown + sync removes exactly our tools.
    manager.shutdown().await;
    manager.register_into(&registry);
    assert!(registry.is_empty(), "{:?}", registry.names());
}

#[tokio::test]
async fn configured_headers_reach_the_server_and_accept_is_ours() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let url = serve_http_recording(seen.clone()).await;
    let manager = McpManager::new(
        vec![spec(
            "keyed",
            RawServer {
                url: Some(url),
                headers: [
                    ("X-API-Key".to_owned(), "k-123".to_owned()),
                    ("Accept".to_owned(), "text/plain".to_owned()),
                ]
                .into(),
                ..RawServer::default()
            },
        )],
        local_options(None),
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    manager.shutdown().await;
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for (key, accept) in &seen {
        assert_eq!(key, "k-123");
        assert_ne!(
            accept, "text/plain",
            "a configured Accept must not replace the transport's"
        );
    }
    assert!(
        seen.iter()
            .any(|(_, a)| a.contains("text/event-stream") && a.contains("application/json"))
    );
}

/// A server whose tool list grows when its `grow` tool is called (and says so).
#[derive(Clone, Default)]
struct Growing {
    grown: Arc<std::sync::atomic::AtomicBool>,
}

impl rmcp::ServerHandler for Growing {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = Arc::new(serde_json::Map::from_iter([("type".to_owned(), json!("object"))]));
        let mut tools = vec![rmcp::model::Tool::new("grow", "Adds a tool", schema.clone())];
        if self.grown.load(std::sync::atomic::Ordering::SeqCst) {
            tools.push(rmcp::model::Tool::new("fresh", "A new tool", schema));
        }
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        use rmcp::model::{CallToolResult, ContentBlock};
        match request.name.as_ref() {
            "grow" => {
                self.grown.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(CallToolResult::success(vec![ContentBlock::text("grown")]).into())
            }
            "fresh" => Ok(CallToolResult::success(vec![ContentBlock::text("fresh!")]).into()),
            _ => Err(rmcp::ErrorData::invalid_params("unknown tool", None)),
        }
    }
}

#[tokio::test]
async fn a_list_changed_notification_makes_the_next_connect_relist() {
    let service = StreamableHttpService::new(
        || Ok(Growing::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let manager = McpManager::new(
        vec![spec(
            "grow",
            RawServer {
                url: Some(format!("http://{addr}/mcp")),
                ..RawServer::default()
            },
        )],
        local_options(None),
    );
    let status = manager.connect().await;
    assert_eq!(status[0].tools, ["mcp_grow_grow"]);
    let out = find(&manager.tools(), "mcp_grow_grow")
        .execute(json!({}), &ctx())
        .await
        .unwrap();
    assert_eq!(out.text, "grown");
    // The notification is handled on a task of its own: give it turns until it has run.
    let mut tools = Vec::new();
    for _ in 0..200 {
        tools = manager.connect().await[0].tools.clone();
        if tools.len() == 2 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tools, ["mcp_grow_grow", "mcp_grow_fresh"]);
    let out = find(&manager.tools(), "mcp_grow_fresh")
        .execute(json!({}), &ctx())
        .await
        .unwrap();
    assert_eq!(out.text, "fresh!");
    manager.shutdown().await;
}
