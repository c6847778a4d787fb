//! The parameter schemas of the built-in tools, against 0.3.5's: optional parameters a model sends as `null` (as
//! models with strict schemas do for what they omit) are accepted and treated as absent; nullable where 0.3.5
//! declares them nullable, with 0.3.5's defaults, never `default: null`, and only keywords every provider and
//! llama.cpp's grammar builder read.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use nanobot_tools::builtin::cli_apps::RunCliAppArgs;
use nanobot_tools::builtin::edit::EditFileArgs;
use nanobot_tools::builtin::exec::ExecArgs;
use nanobot_tools::builtin::exec_session::{ExecSessionArgs, ListExecSessionsArgs};
use nanobot_tools::builtin::fs::{ListDirArgs, ReadFileArgs, WriteFileArgs};
use nanobot_tools::builtin::patch::ApplyPatchArgs;
use nanobot_tools::builtin::search::{FindFilesArgs, GlobArgs, GrepArgs};
#[cfg(feature = "web")]
use nanobot_tools::builtin::web::{WebFetchArgs, WebSearchArgs};
use nanobot_tools::builtin::{ExecTool, RunCliAppTool};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{
    ExecSandbox, ExecSettings, Tool, ToolError, ToolOutput, ToolRegistry, builtin, parse_args,
};
use serde_json::{Map, Value, json};

use crate::{ctx, fs_registry};

fn exec_settings() -> ExecSettings {
    let mut parent = std::collections::BTreeMap::new();
    parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    ExecSettings {
        parent_env: parent.into(),
        sandbox: ExecSandbox::None,
        ..ExecSettings::default()
    }
}

/// Every built-in tool of this crate, registered as the agent registers them.
fn all_builtins(ws: &Path) -> ToolRegistry {
    let reg = fs_registry(ws, true);
    let sandbox = Sandbox::new(ws, true);
    builtin::register_exec_tool(&reg, &exec_settings(), &sandbox).unwrap();
    #[cfg(feature = "web")]
    builtin::register_web_tools(&reg, &nanobot_tools::WebSettings::default());
    let exec = ExecTool::new(exec_settings(), Arc::new(sandbox)).unwrap();
    reg.register(Arc::new(RunCliAppTool::new(exec, ws.join("installed.json"), 60)));
    reg
}

type Parser = fn(Value) -> Result<(), ToolError>;

/// How each tool's arguments are parsed (its args struct).
fn parsers() -> Vec<(&'static str, Parser)> {
    let mut parsers: Vec<(&'static str, Parser)> = vec![
        ("read_file", |v| parse_args::<ReadFileArgs>(v).map(drop)),
        ("write_file", |v| parse_args::<WriteFileArgs>(v).map(drop)),
        ("edit_file", |v| parse_args::<EditFileArgs>(v).map(drop)),
        ("apply_patch", |v| parse_args::<ApplyPatchArgs>(v).map(drop)),
        ("list_dir", |v| parse_args::<ListDirArgs>(v).map(drop)),
        ("glob", |v| parse_args::<GlobArgs>(v).map(drop)),
        ("find_files", |v| parse_args::<FindFilesArgs>(v).map(drop)),
        ("grep", |v| parse_args::<GrepArgs>(v).map(drop)),
        ("exec", |v| parse_args::<ExecArgs>(v).map(drop)),
        ("exec_session", |v| parse_args::<ExecSessionArgs>(v).map(drop)),
        ("list_exec_sessions", |v| {
            parse_args::<ListExecSessionsArgs>(v).map(drop)
        }),
        ("run_cli_app", |v| parse_args::<RunCliAppArgs>(v).map(drop)),
    ];
    #[cfg(feature = "web")]
    parsers.extend([
        (
            "web_fetch",
            (|v| parse_args::<WebFetchArgs>(v).map(drop)) as Parser,
        ),
        ("web_search", |v| parse_args::<WebSearchArgs>(v).map(drop)),
    ]);
    parsers
}

fn primary_type(schema: &Value) -> &str {
    match &schema["type"] {
        Value::String(t) => t,
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or(""),
        _ => "",
    }
}

/// A valid value for `schema` in which every optional parameter, at every level, is `null`.
fn with_nulls(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].get(0) {
        return first.clone();
    }
    match primary_type(schema) {
        "string" => Value::from("x"),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(Value::from(1)),
        "boolean" => Value::Bool(false),
        "array" => {
            let n = schema["minItems"].as_u64().unwrap_or(1).max(1);
            Value::Array((0..n).map(|_| with_nulls(&schema["items"])).collect())
        }
        "object" => {
            let required: BTreeSet<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let props = schema["properties"].as_object().cloned().unwrap_or_default();
            let map: Map<String, Value> = props
                .iter()
                .map(|(name, prop)| {
                    let v = if required.contains(name.as_str()) {
                        with_nulls(prop)
                    } else {
                        Value::Null
                    };
                    (name.clone(), v)
                })
                .collect();
            Value::Object(map)
        }
        other => panic!("no sample for type {other:?} in {schema}"),
    }
}

/// Every schema object inside `schema` (itself, its properties, its items), with a path such as
/// `edits[].old_text`.
fn walk<'a>(path: &str, schema: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.to_owned(), schema));
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let p = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            walk(&p, prop, out);
        }
    }
    if schema["items"].is_object() {
        walk(&format!("{path}[]"), &schema["items"], out);
    }
}

fn schemas(reg: &ToolRegistry) -> Vec<(String, Value)> {
    reg.definitions()
        .into_iter()
        .map(|s| (s.name.clone(), s.parameters.clone()))
        .collect()
}

#[test]
fn every_optional_parameter_of_every_built_in_tool_may_be_null() {
    let ws = tempfile::tempdir().unwrap();
    let reg = all_builtins(ws.path());
    let parsers = parsers();
    let mut names: Vec<&str> = parsers.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let mut registered = reg.names();
    registered.sort();
    assert_eq!(names, registered, "every built-in tool has its args struct here");
    for (name, schema) in schemas(&reg) {
        let args = with_nulls(&schema);
        let prepared = match reg.prepare(&name, args.clone()) {
            Ok((_, prepared)) => prepared,
            Err(e) => panic!("{name} refuses {args}: {e}"),
        };
        // What passed is what the tool parses (a `null` that stayed is one the parameter declares).
        let parse = parsers.iter().find(|(n, _)| *n == name).unwrap().1;
        if let Err(e) = parse(prepared.clone()) {
            panic!("{name} cannot parse {prepared}: {e}");
        }
    }
}

#[tokio::test]
async fn a_null_optional_parameter_behaves_as_if_omitted() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello\nworld\n").unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("sub/b.txt"), "hello again\n").unwrap();
    let omitted_and_null = [
        ("read_file", json!({"path": "a.txt"})),
        ("list_dir", json!({"path": "."})),
        ("glob", json!({"pattern": "*.txt"})),
        ("find_files", json!({})),
        ("grep", json!({"pattern": "hello"})),
        ("exec", json!({"command": "echo hi; pwd"})),
    ];
    for (name, omitted) in omitted_and_null {
        let run = |args: Value| {
            let ws = ws.path();
            async move {
                // A fresh registry each time: read_file remembers what it returned.
                all_builtins(ws).execute(name, args, &ctx(ws)).await
            }
        };
        let schema = all_builtins(ws.path()).get(name).unwrap().parameters();
        let mut nulls = with_nulls(&schema);
        for (k, v) in omitted.as_object().unwrap() {
            nulls[k] = v.clone();
        }
        let expected = run(omitted.clone()).await;
        assert!(!expected.is_error, "{name}: {}", expected.text);
        assert_eq!(run(nulls.clone()).await, expected, "{name} with {nulls}");
    }
}

#[tokio::test]
async fn edit_file_with_a_null_occurrence_edits_as_without_one() {
    // The call 0.3.5 ran where nanobot-rs answered `occurrence should be integer`.
    let edit = |text: &str, args: Value| {
        let text = text.to_owned();
        async move {
            let ws = tempfile::tempdir().unwrap();
            std::fs::write(ws.path().join("f.txt"), text).unwrap();
            let out = fs_registry(ws.path(), true)
                .execute("edit_file", args, &ctx(ws.path()))
                .await;
            (out, std::fs::read_to_string(ws.path().join("f.txt")).unwrap())
        }
    };
    let nulls = json!({"path": "f.txt", "old_text": "a", "new_text": "b", "occurrence": null,
                       "line_hint": null, "expected_replacements": null, "replace_all": null});
    let plain = json!({"path": "f.txt", "old_text": "a", "new_text": "b"});
    let (out, after) = edit("x a y\n", nulls.clone()).await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(after, "x b y\n");
    assert_eq!((out, after), edit("x a y\n", plain.clone()).await);
    // Ambiguous without an occurrence, as when it is omitted.
    let (out, after) = edit("a a\n", nulls).await;
    assert!(out.is_error, "{}", out.text);
    assert_eq!(after, "a a\n");
    assert_eq!((out, after), edit("a a\n", plain).await);

    // Called directly (not through a registry), the tool parses `null` as absent too.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "x a y\n").unwrap();
    let reg = fs_registry(ws.path(), true);
    let tool = reg.get("edit_file").unwrap();
    let out: ToolOutput = tool
        .execute(
            json!({"path": "f.txt", "old_text": "a", "new_text": "b", "occurrence": null, "replace_all": null}),
            &ctx(ws.path()),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
        "x b y\n"
    );
}

#[test]
fn no_schema_declares_default_null() {
    let ws = tempfile::tempdir().unwrap();
    for (name, schema) in schemas(&all_builtins(ws.path())) {
        let mut all = Vec::new();
        walk("", &schema, &mut all);
        for (path, s) in all {
            assert!(
                !s.get("default").is_some_and(Value::is_null),
                "{name}.{path} declares default: null"
            );
        }
    }
}

#[test]
fn nullable_and_defaults_where_0_3_5_declares_them() {
    let ws = tempfile::tempdir().unwrap();
    let mut nullable = BTreeSet::new();
    let mut defaults = BTreeSet::new();
    for (name, schema) in schemas(&all_builtins(ws.path())) {
        let mut all = Vec::new();
        walk("", &schema, &mut all);
        for (path, s) in all {
            if s["type"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| t == "null"))
            {
                nullable.insert(format!("{name}.{path}"));
            }
            if let Some(d) = s.get("default") {
                defaults.insert(format!("{name}.{path}={d}"));
            }
        }
    }
    // 0.3.5's `nullable=True` parameters (agent/tools/*.py) of the tools both have.
    let expected_nullable: BTreeSet<String> = [
        "apply_patch.edits[].new_text",
        "apply_patch.edits[].old_text",
        "edit_file.expected_replacements",
        "edit_file.line_hint",
        "edit_file.occurrence",
        "exec.login",
        "exec.max_output_chars",
        "exec.max_output_tokens",
        "exec.shell",
        "exec.yield_time_ms",
        "exec_session.input",
        "exec_session.timeout_ms",
        "exec_session.wait_for",
        "run_cli_app.args",
        "run_cli_app.json",
        "run_cli_app.timeout",
        "run_cli_app.working_dir",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(nullable, expected_nullable);
    // 0.3.5's declared defaults, and no others.
    let mut expected_defaults: BTreeSet<String> = [
        "apply_patch.dry_run=false",
        "exec.login=false",
        "exec_session.close_stdin=false",
        "exec_session.terminate=false",
        "exec_session.until_exit=false",
        "read_file.force=false",
        "run_cli_app.json=false",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    if cfg!(feature = "web") {
        expected_defaults.insert("web_fetch.extractMode=\"markdown\"".to_owned());
    }
    assert_eq!(defaults, expected_defaults);
}

#[test]
fn schemas_use_only_plain_keywords() {
    // What strict-schema providers and llama.cpp's JSON-schema grammar read; `nullable` in particular is said with
    // a `["T", "null"]` type, as 0.3.5 says it.
    const PLAIN: [&str; 14] = [
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "default",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    ];
    let ws = tempfile::tempdir().unwrap();
    for (name, schema) in schemas(&all_builtins(ws.path())) {
        assert_eq!(schema["type"], "object", "{name}");
        let mut all = Vec::new();
        walk("", &schema, &mut all);
        for (path, s) in all {
            for key in s.as_object().unwrap().keys() {
                assert!(PLAIN.contains(&key.as_str()), "{name}.{path}: {key}");
            }
            if let Value::Array(types) = &s["type"] {
                assert!(
                    types.len() == 2 && types[1] == "null" && types[0] != "null",
                    "{name}.{path}: {types:?}"
                );
            }
        }
    }
}

/// A tool with a hand-written schema, as MCP servers' tools have (normalised to `nullable: true`).
struct Hand;

#[async_trait::async_trait]
impl Tool for Hand {
    fn name(&self) -> &str {
        "mcp_srv_hand"
    }
    fn description(&self) -> &str {
        "hand-written"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "q": {"type": "string"},
            "n": {"type": "integer", "minimum": 1},
            "clear": {"type": "string", "nullable": true},
            "mode": {"type": ["string", "null"], "enum": ["a", "b"]},
            "must": {"type": "integer", "nullable": true},
            "any": {"description": "untyped"}
        }, "required": ["q", "must"]})
    }
    async fn execute(&self, args: Value, _ctx: &nanobot_tools::ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(args.to_string()))
    }
}

#[test]
fn hand_written_schemas_accept_null_for_optional_parameters() {
    let reg = ToolRegistry::default();
    reg.register(Arc::new(Hand));
    // `null` for a parameter that does not admit it is dropped; one it admits is passed on (a server may tell
    // `null` from absent), as 0.3.5 passes it.
    let (_, args) = reg
        .prepare(
            "mcp_srv_hand",
            json!({"q": "x", "n": null, "clear": null, "mode": null, "must": null, "any": null}),
        )
        .unwrap();
    assert_eq!(
        args,
        json!({"q": "x", "clear": null, "mode": null, "must": null, "any": null})
    );
    // A required parameter is not optional: `null` is refused unless it admits it.
    let refused = |args: Value| reg.prepare("mcp_srv_hand", args).err().unwrap();
    let err = refused(json!({"q": null, "must": 1}));
    assert!(err.contains("q should be string"), "{err}");
    // Other values are still checked.
    let err = refused(json!({"q": "x", "must": 1, "n": 0, "mode": "c"}));
    assert!(
        err.contains("n must be >= 1") && err.contains("mode must be one of"),
        "{err}"
    );
    // The schema the model sees is the tool's own.
    assert_eq!(reg.definitions()[0].parameters, Hand.parameters());
}
