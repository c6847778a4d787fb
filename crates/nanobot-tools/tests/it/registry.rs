use std::sync::Arc;

use async_trait::async_trait;
use nanobot_tools::{
    ERROR_HINT, RegistrySettings, TOOL_RESULTS_DIR, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry,
};
use serde_json::{Value, json};

struct Fake {
    name: &'static str,
    behaviour: &'static str,
}

#[async_trait]
impl Tool for Fake {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "fake"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
            "n": {"type": "integer"}
        }})
    }
    async fn execute(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self.behaviour {
            "panic" => panic!("boom"),
            "fail" => Err(ToolError::Failed("it broke".into())),
            "empty" => Ok(ToolOutput::text("")),
            "long" => Ok(ToolOutput::text("x".repeat(50_000))),
            _ => Ok(ToolOutput::text(args.to_string())),
        }
    }
}

fn reg() -> ToolRegistry {
    let r = ToolRegistry::new(RegistrySettings {
        max_tool_result_chars: 1000,
        preview_chars: 100,
        ..RegistrySettings::default()
    });
    for (name, behaviour) in [
        ("echo", "echo"),
        ("mcp_srv_b", "echo"),
        ("panicky", "panic"),
        ("failing", "fail"),
        ("quiet", "empty"),
        ("chatty", "long"),
        ("mcp_a_a", "echo"),
    ] {
        r.register(Arc::new(Fake { name, behaviour }));
    }
    r
}

#[test]
fn definitions_sorted_builtins_then_mcp() {
    let names: Vec<String> = reg().definitions().into_iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names,
        [
            "chatty",
            "echo",
            "failing",
            "panicky",
            "quiet",
            "mcp_a_a",
            "mcp_srv_b"
        ]
    );
}

#[tokio::test]
async fn unknown_tool_lists_available() {
    let ws = tempfile::tempdir().unwrap();
    let out = reg().execute("nope", json!({}), &crate::ctx(ws.path())).await;
    assert!(out.is_error);
    assert!(
        out.text
            .starts_with("Error: Tool 'nope' not found. Available: chatty, echo")
    );
    assert!(out.text.ends_with(ERROR_HINT));
}

#[tokio::test]
async fn args_are_cast_then_validated() {
    let ws = tempfile::tempdir().unwrap();
    let r = reg();
    let out = r
        .execute(
            "echo",
            json!({"timeout": "120", "extra": 1}),
            &crate::ctx(ws.path()),
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    let v: Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["timeout"], 120);
    let out = r
        .execute("echo", json!({"timeout": 999}), &crate::ctx(ws.path()))
        .await;
    assert_eq!(
        out.text,
        format!("Error: Invalid parameters for tool 'echo': timeout must be <= 600{ERROR_HINT}")
    );
}

#[tokio::test]
async fn panics_and_errors_become_error_results() {
    let ws = tempfile::tempdir().unwrap();
    let r = reg();
    let out = r.execute("panicky", json!({}), &crate::ctx(ws.path())).await;
    assert!(out.is_error);
    assert!(out.text.contains("tool panicked: boom"), "{}", out.text);
    assert!(out.text.ends_with(ERROR_HINT));
    let out = r.execute("failing", json!({}), &crate::ctx(ws.path())).await;
    assert_eq!(out.text, format!("Error executing failing: it broke{ERROR_HINT}"));
    // the registry still works afterwards
    let out = r.execute("echo", json!({}), &crate::ctx(ws.path())).await;
    assert_eq!(out.text, "{}");
}

#[tokio::test]
async fn empty_output_gets_a_marker() {
    let ws = tempfile::tempdir().unwrap();
    let out = reg().execute("quiet", json!({}), &crate::ctx(ws.path())).await;
    assert_eq!(out.text, "(quiet completed with no output)");
    assert!(!out.is_error);
}

#[tokio::test]
async fn long_output_is_saved_with_a_preview() {
    let ws = tempfile::tempdir().unwrap();
    let ctx = crate::ctx(ws.path()).with_call_id("call_1");
    let out = reg().execute("chatty", json!({}), &ctx).await;
    let path = ws
        .path()
        .join(TOOL_RESULTS_DIR)
        .join("cli_test")
        .join("call_1.txt");
    assert!(out.text.contains(&path.display().to_string()), "{}", out.text);
    assert!(out.text.len() < 1000);
    assert_eq!(std::fs::read_to_string(&path).unwrap().len(), 50_000);
}

#[tokio::test]
async fn cancellation_is_an_error_result() {
    let ws = tempfile::tempdir().unwrap();
    let ctx = crate::ctx(ws.path());
    ctx.cancel.cancel();
    let out = reg().execute("echo", json!({}), &ctx).await;
    assert!(out.is_error);
    assert!(out.text.contains("cancelled"));
}

#[test]
fn register_replace_unregister() {
    let r = reg();
    assert!(r.contains("echo"));
    assert!(
        r.register(Arc::new(Fake {
            name: "echo",
            behaviour: "empty"
        }))
        .is_some()
    );
    assert!(r.unregister("echo").is_some());
    assert!(r.get("echo").is_none());
    assert_eq!(r.len(), 6);
}

#[test]
fn rough_definition_tokens_match_the_serialised_specs_and_follow_registration() {
    let r = reg();
    let expected = |r: &ToolRegistry| -> usize {
        r.definitions()
            .iter()
            .map(|t| {
                t.name.len().div_ceil(3)
                    + t.description.len().div_ceil(3)
                    + t.parameters.to_string().len().div_ceil(3)
            })
            .sum()
    };
    r.register(Arc::new(Fake {
        name: "one",
        behaviour: "echo",
    }));
    let one = r.definitions_rough_tokens();
    assert_eq!(one, expected(&r));
    assert!(one > 0);
    r.register(Arc::new(Fake {
        name: "two",
        behaviour: "echo",
    }));
    assert_eq!(r.definitions_rough_tokens(), expected(&r));
    assert!(r.definitions_rough_tokens() > one);
    r.unregister("two");
    assert_eq!(r.definitions_rough_tokens(), one);
}
