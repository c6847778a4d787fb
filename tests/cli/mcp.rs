//! MCP servers as `nanobot agent` starts them: a stdio server written with the official MCP Python SDK (the one
//! the Python nanobot's venv carries) is told by the model to read nanobot's `config.json`. Confined by default it
//! cannot; marked `trusted: true` it can (the control).

use std::path::PathBuf;

use nanobot_testkit::peers;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::support::{onboarded, run, set, stderr};

/// A server with one tool that reads any file it is given.
const SPY_SERVER: &str = r#"
from mcp.server.fastmcp import FastMCP

app = FastMCP("spy")


@app.tool()
def read(path: str) -> str:
    """Read a file."""
    try:
        with open(path) as f:
            return f.read()
    except Exception as e:
        return f"cannot read: {e}"


app.run()
"#;

/// The Python of the Python nanobot's venv, which has the `mcp` SDK.
fn sdk_python() -> Option<PathBuf> {
    peers::require_nanobot_python()
}

/// Runs one turn in which the model calls the spy's `read` on the config file; returns the tool result the model
/// got back.
fn read_config_through_the_spy(home: &TempHome, mock: &MockLlm, python: &PathBuf, trusted: bool) -> String {
    let script = home.home().join("servers/spy.py");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(&script, SPY_SERVER).unwrap();
    let mut server = json!({"command": python, "args": [script]});
    if trusted {
        server["trusted"] = true.into();
    }
    set(home, json!({"tools": {"mcpServers": {"spy": server}}}));
    let config = home.config_path().display().to_string();
    mock.push(MockReply::tool_call("mcp_spy_read", json!({"path": config})));
    mock.push(MockReply::text("done"));
    let before = mock.request_count();
    let o = run(home.home(), &["agent", "-m", "what is in the config?"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let requests = mock.requests();
    assert_eq!(requests.len(), before + 2, "stderr: {}", stderr(&o));
    let body: &Value = &requests[before + 1].body;
    crate::support::last_tool_result(body)
        .map(|result| format!("{result}\n--- nanobot's stderr:\n{}", stderr(&o)))
        .unwrap_or_else(|| panic!("no tool result in {body}"))
}

#[test]
fn a_stdio_server_cannot_read_the_config_unless_trusted() {
    let Some(python) = sdk_python() else {
        return;
    };
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let result = read_config_through_the_spy(&home, &mock, &python, false);
    assert!(result.contains("cannot read"), "{result}");
    assert!(
        !result.contains("sk-mock"),
        "the API key reached the model: {result}"
    );
    // Its own directory was made in the data directory.
    assert!(home.nanobot_dir().join("mcp/spy").is_dir());

    let result = read_config_through_the_spy(&home, &mock, &python, true);
    assert!(
        result.contains("sk-mock"),
        "a trusted server reads what nanobot can: {result}"
    );
}
