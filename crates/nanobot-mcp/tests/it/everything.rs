//! `@modelcontextprotocol/server-everything` over all three transports.

use std::sync::Arc;

use nanobot_mcp::{ConnectionState, McpManager, McpOptions, RawServer, TransportKind};
use nanobot_tools::Tool;
use serde_json::json;

use crate::peers::{self, ctx, local_options, spec};

const PKG: &str = "@modelcontextprotocol/server-everything";

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

/// The calls every transport must get right.
async fn exercise(manager: &McpManager, server: &str) {
    let tools = manager.tools();
    let echo = find(&tools, &format!("mcp_{server}_echo"));
    assert_eq!(echo.parameters()["properties"]["message"]["type"], "string");
    assert!(echo.parameters().get("$schema").is_none());
    let out = echo
        .execute(json!({"message": "hi there"}), &ctx())
        .await
        .unwrap();
    assert_eq!(out.text, "Echo: hi there");
    assert!(!out.is_error);

    let sum = find(&tools, &format!("mcp_{server}_get-sum"));
    let out = sum.execute(json!({"a": 2, "b": 40}), &ctx()).await.unwrap();
    assert!(out.text.contains("42"), "{}", out.text);
}

#[tokio::test]
async fn stdio_tools_resources_prompts_and_images() {
    let Some(entry) = peers::npm_server(PKG) else {
        return;
    };
    let media = tempfile::tempdir().unwrap();
    let manager = McpManager::new(
        vec![spec(
            "everything",
            RawServer {
                command: Some("node".into()),
                args: vec![entry.display().to_string(), "stdio".into()],
                ..RawServer::default()
            },
        )],
        local_options(Some(media.path())),
    );
    assert!(manager.tools().is_empty(), "lazy: nothing before connect()");
    let status = manager.connect().await;
    assert_eq!(status.len(), 1);
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert_eq!(status[0].transport, TransportKind::Stdio);
    assert!(
        status[0]
            .server_version
            .as_deref()
            .is_some_and(|v| v.contains("everything"))
    );

    exercise(&manager, "everything").await;
    let tools = manager.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert!(names.windows(2).all(|w| w[0] <= w[1]), "sorted: {names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.len() <= 64 && n.starts_with("mcp_everything_"))
    );

    // Images are saved as media.
    let image = find(&tools, "mcp_everything_get-tiny-image");
    let out = image.execute(json!({}), &ctx()).await.unwrap();
    assert_eq!(out.media.len(), 1, "{}", out.text);
    let bytes = std::fs::read(&out.media[0]).unwrap();
    assert_eq!(&bytes[..4], b"\x89PNG");
    assert!(out.media[0].starts_with(media.path()));

    // Resources become read-only tools.
    let resource = tools
        .iter()
        .find(|t| t.name().starts_with("mcp_everything_resource_") && t.name().contains("architecture"))
        .cloned()
        .expect("a static resource");
    assert!(resource.read_only());
    assert!(
        resource
            .description()
            .contains("demo://resource/static/document/")
    );
    let out = resource.execute(json!({}), &ctx()).await.unwrap();
    assert!(out.text.len() > 20, "{}", out.text);

    // Prompts become tools whose arguments are parameters.
    let prompt = find(&tools, "mcp_everything_prompt_args-prompt");
    let params = prompt.parameters();
    assert_eq!(params["properties"]["city"]["type"], "string");
    assert!(params["required"].as_array().unwrap().contains(&json!("city")));
    let out = prompt
        .execute(json!({"city": "Paris", "state": "IDF"}), &ctx())
        .await
        .unwrap();
    assert!(out.text.contains("Paris"), "{}", out.text);

    manager.shutdown().await;
    assert!(manager.tools().is_empty());
    assert_eq!(manager.status()[0].state, ConnectionState::NotConnected);
}

#[tokio::test]
async fn streamable_http_is_guarded_then_works_when_whitelisted() {
    let Some(entry) = peers::npm_server(PKG) else {
        return;
    };
    let (_peer, port) = peers::start_http_peer(&entry, "streamableHttp").await;
    let raw = RawServer {
        url: Some(format!("http://127.0.0.1:{port}/mcp")),
        headers: [("Authorization".to_owned(), "Bearer not-a-real-token".to_owned())].into(),
        ..RawServer::default()
    };

    // Default options: loopback is refused by the SSRF guard, nothing is contacted.
    let blocked = McpManager::new(
        vec![spec("remote", raw.clone())],
        McpOptions {
            parent_env: peers::parent_env(),
            ..McpOptions::default()
        },
    );
    let status = blocked.connect().await;
    match &status[0].state {
        ConnectionState::Failed(e) => assert!(e.contains("not allowed"), "{e}"),
        other => panic!("expected a blocked server, got {other:?}"),
    }
    assert!(blocked.tools().is_empty());

    let manager = McpManager::new(vec![spec("remote", raw)], local_options(None));
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert_eq!(status[0].transport, TransportKind::StreamableHttp);
    assert!(!format!("{:?}", manager.specs().next().unwrap()).contains("not-a-real-token"));
    exercise(&manager, "remote").await;
    manager.shutdown().await;
}

#[tokio::test]
async fn legacy_sse_transport() {
    let Some(entry) = peers::npm_server(PKG) else {
        return;
    };
    let (_peer, port) = peers::start_http_peer(&entry, "sse").await;
    let manager = McpManager::new(
        vec![spec(
            "legacy",
            RawServer {
                url: Some(format!("http://127.0.0.1:{port}/sse")),
                ..RawServer::default()
            },
        )],
        local_options(None),
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert_eq!(
        status[0].transport,
        TransportKind::Sse,
        "inferred from the /sse URL"
    );
    exercise(&manager, "legacy").await;
    manager.shutdown().await;
}
