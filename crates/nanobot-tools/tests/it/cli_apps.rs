//! `run_cli_app` (issue 18): only installed apps run, through the exec sandbox, with arguments that are never
//! shell syntax.

use std::sync::Arc;

use nanobot_tools::builtin::{ExecTool, RunCliAppTool};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ExecSandbox, ExecSettings, ToolRegistry};
use serde_json::json;

use crate::ctx;

#[tokio::test]
async fn installed_apps_run_with_their_arguments_as_data() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let registry = home.path().join("installed.json");
    std::fs::write(
        &registry,
        r#"{"schema_version":1,"apps":{"echoer":{"entry_point":"echo"},"evil":{"entry_point":"/bin/sh"}}}"#,
    )
    .unwrap();
    let mut parent = std::collections::BTreeMap::new();
    parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    let settings = ExecSettings {
        restrict_to_workspace: true,
        parent_env: parent.into(),
        sandbox: ExecSandbox::None,
        ..ExecSettings::default()
    };
    let exec = ExecTool::new(settings, Arc::new(Sandbox::new(&ws, true))).unwrap();
    let tool = RunCliAppTool::new(exec, &registry, 60);
    let reg = ToolRegistry::default();
    reg.register(Arc::new(tool));
    let spec = reg.get("run_cli_app").unwrap().spec();
    assert!(
        spec.description.contains("Installed CLI apps: echoer, evil."),
        "{}",
        spec.description
    );
    let c = ctx(&ws);

    let out = reg
        .execute(
            "run_cli_app",
            json!({"name": "echoer", "args": ["hello; touch pwned", "$(id)", "it's"], "json": true}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(
        out.text.contains("--json hello; touch pwned $(id) it's"),
        "{}",
        out.text
    );
    assert!(out.text.contains("Exit code: 0"), "{}", out.text);
    assert!(!ws.join("pwned").exists(), "an argument never runs as a command");

    let out = reg.execute("run_cli_app", json!({"name": "git"}), &c).await;
    assert!(
        out.is_error && out.text.contains("not installed (installed: echoer, evil)"),
        "{}",
        out.text
    );
    let out = reg.execute("run_cli_app", json!({"name": "evil"}), &c).await;
    assert!(
        out.is_error && out.text.contains("not a plain program name"),
        "{}",
        out.text
    );
    let out = reg
        .execute(
            "run_cli_app",
            json!({"name": "echoer", "working_dir": "/etc"}),
            &c,
        )
        .await;
    assert!(out.is_error, "the workspace rule of exec applies: {}", out.text);
}
