//! `@modelcontextprotocol/server-filesystem` over stdio, with `enabledTools` filtering.

use nanobot_mcp::{McpManager, RawServer};
use serde_json::json;

use crate::peers::{self, ctx, local_options, spec};

#[tokio::test]
async fn enabled_tools_filter_raw_and_wrapped_names_and_errors_reach_the_model() {
    let Some(entry) = peers::npm_server("@modelcontextprotocol/server-filesystem") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("note.txt"), "remember the milk\n").unwrap();
    let manager = McpManager::new(
        vec![spec(
            "fs",
            RawServer {
                command: Some("node".into()),
                args: vec![entry.display().to_string(), root.display().to_string()],
                enabled_tools: Some(vec![
                    "read_text_file".into(),
                    "mcp_fs_list_directory".into(),
                    "no_such_tool".into(),
                ]),
                ..RawServer::default()
            },
        )],
        local_options(None),
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    assert_eq!(
        status[0].tools,
        vec![
            "mcp_fs_read_text_file".to_owned(),
            "mcp_fs_list_directory".to_owned()
        ]
    );
    assert_eq!(status[0].warnings.len(), 1);
    assert!(status[0].warnings[0].contains("no_such_tool"));

    let tools = manager.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["mcp_fs_list_directory", "mcp_fs_read_text_file"]);

    let read = tools
        .iter()
        .find(|t| t.name() == "mcp_fs_read_text_file")
        .unwrap();
    let note = root.join("note.txt").display().to_string();
    let out = read.execute(json!({"path": note}), &ctx()).await.unwrap();
    assert!(out.text.contains("remember the milk"), "{}", out.text);

    // isError from the server is a tool error with the server's message.
    let err = read
        .execute(json!({"path": "/etc/hostname"}), &ctx())
        .await
        .unwrap_err();
    let text = err.model_text();
    assert!(
        text.contains("Access denied") || text.contains("outside"),
        "{text}"
    );

    // Shutdown reaps the child: no process is left running with our directory argument.
    let needle = root.display().to_string();
    assert!(
        !peers::processes_with(&needle).is_empty(),
        "the server runs before shutdown"
    );
    manager.shutdown().await;
    assert_eq!(peers::processes_with(&needle), Vec::<u32>::new());
}
