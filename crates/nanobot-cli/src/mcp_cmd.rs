//! `nanobot mcp list`: each configured server, its transport, whether it connects, and its tools.

use std::fmt::Write as _;

use nanobot_mcp::{ConnectionState, McpManager, McpOptions, ServerStatus};
use nanobot_tools::ssrf::SsrfGuard;

use crate::error::CliError;
use crate::setup::{CliEnv, Setup};

/// The MCP manager for this setup (nothing is started until `connect`).
pub(crate) fn manager(env: &CliEnv, s: &Setup) -> Result<(McpManager, Vec<String>), CliError> {
    let tools = &s.loaded.config.tools;
    let ssrf = SsrfGuard::from_cidrs(&tools.ssrf_whitelist).map_err(|e| {
        CliError::Usage(format!(
            "tools.ssrfWhitelist in {}: {e}",
            s.paths.config_path().display()
        ))
    })?;
    let opts = McpOptions {
        parent_env: env.vars.clone(),
        media_dir: Some(s.paths.media_dir(Some("mcp"))),
        ssrf,
        confinement: nanobot_runtime::mcp::confinement(&s.loaded.config, &env.core_env(&s.paths)),
        ..McpOptions::default()
    };
    let (m, errors) = nanobot_runtime::mcp::mcp_manager(tools.mcp_servers.iter(), opts);
    Ok((m, errors.into_iter().map(|e| e.to_string()).collect()))
}

fn render(statuses: &[ServerStatus], errors: &[String], connected: bool) -> String {
    let mut out = String::new();
    if statuses.is_empty() && errors.is_empty() {
        return "No MCP servers configured (add them under tools.mcpServers).\n".to_owned();
    }
    for st in statuses {
        let state = match &st.state {
            ConnectionState::Connected => "connected".to_owned(),
            ConnectionState::Failed(e) => format!("failed: {e}"),
            ConnectionState::NotConnected if connected => "not connected".to_owned(),
            _ => "not started (--no-connect)".to_owned(),
        };
        let _ = writeln!(
            out,
            "{} [{}] {} — {}",
            st.name,
            st.transport.as_str(),
            st.target,
            state
        );
        if let Some(v) = &st.server_version {
            let _ = writeln!(out, "  server: {v}");
        }
        for t in &st.tools {
            let _ = writeln!(out, "  - {t}");
        }
        for w in &st.warnings {
            let _ = writeln!(out, "  ! {w}");
        }
    }
    for e in errors {
        let _ = writeln!(out, "✗ {e}");
    }
    out
}

/// The listing without connecting.
pub(crate) fn list_text(env: &CliEnv, s: &Setup, _connect: bool) -> Result<String, CliError> {
    let (m, errors) = manager(env, s)?;
    Ok(render(&m.status(), &errors, false))
}

/// Connects every server, lists them with their tools, and shuts them down.
pub(crate) async fn list_connected(env: &CliEnv, s: &Setup) -> Result<String, CliError> {
    let (m, errors) = manager(env, s)?;
    let statuses = m.connect().await;
    let text = render(&statuses, &errors, true);
    m.shutdown().await;
    Ok(text)
}
