//! `tools.mcpServers` as `nanobot-mcp` takes it: the config's blocks turned into the raw fields the MCP crate
//! validates. The conversion lives here, in the composition root, so `nanobot-mcp` stays below the config.

use nanobot_config::{McpServerConfig, McpTransportKind};
use nanobot_mcp::{McpError, McpManager, McpOptions, RawServer, ServerSpec};

/// The raw fields of one `tools.mcpServers.<name>` block (blank strings read as absent).
pub fn raw_server(cfg: &McpServerConfig) -> RawServer {
    let non_empty = |s: &str| Some(s.to_owned()).filter(|s| !s.trim().is_empty());
    RawServer {
        r#type: cfg.r#type.map(|k| {
            match k {
                McpTransportKind::Stdio => "stdio",
                McpTransportKind::Sse => "sse",
                McpTransportKind::StreamableHttp => "streamableHttp",
            }
            .to_owned()
        }),
        command: non_empty(&cfg.command),
        args: cfg.args.clone(),
        env: cfg
            .env
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        cwd: cfg.cwd.as_deref().and_then(non_empty).map(Into::into),
        url: non_empty(&cfg.url),
        headers: cfg
            .headers
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        tool_timeout: Some(cfg.tool_timeout),
        enabled_tools: Some(cfg.enabled_tools.clone()),
        read_only: cfg.read_only,
        trusted: cfg.trusted,
        writable_paths: cfg.writable_paths.iter().map(|p| p.trim().into()).collect(),
    }
}

/// How stdio servers are confined for `config` in `env`: `exec`'s sandbox setting, hidden paths and limits (without
/// the CPU-time limit: a server lives long), each server's own directory under `<data dir>/mcp/`, network on, or
/// only to `tools.network.allowedDomains` through nanobot's proxy when that is set.
pub fn confinement(
    config: &nanobot_config::Config,
    env: &crate::Environment,
) -> nanobot_mcp::StdioConfinement {
    let exec = crate::exec_settings(config, env);
    let data_dir = env.paths().data_dir();
    let mut hidden = vec![data_dir.clone()];
    hidden.extend(exec.hide_paths);
    nanobot_mcp::StdioConfinement {
        sandbox: exec.sandbox,
        hidden,
        state_dir: Some(data_dir.join("mcp")),
        limits: nanobot_tools::confine::ExecLimits {
            cpu_seconds: 0,
            ..exec.limits
        },
        network: true,
        egress: exec.egress,
    }
}

/// Validates `tools.mcpServers.<name>`.
pub fn server_spec(name: &str, cfg: &McpServerConfig) -> Result<ServerSpec, McpError> {
    ServerSpec::resolve(name, raw_server(cfg))
}

/// A manager for `tools.mcpServers`; servers whose block is unusable are left out and returned as errors.
pub fn mcp_manager<'a>(
    servers: impl IntoIterator<Item = (&'a String, &'a McpServerConfig)>,
    opts: McpOptions,
) -> (McpManager, Vec<McpError>) {
    McpManager::from_raw(
        servers
            .into_iter()
            .map(|(name, cfg)| (name.clone(), raw_server(cfg))),
        opts,
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nanobot_mcp::{DEFAULT_TOOL_TIMEOUT, TransportKind, TransportSpec};

    use super::*;

    #[test]
    fn python_shaped_config_resolves() {
        let servers: std::collections::BTreeMap<String, McpServerConfig> =
            serde_json::from_value(serde_json::json!({
                "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/w"],
                               "enabledTools": ["read_file"], "toolTimeout": 30},
                "remote-sse": {"url": "https://mcp.example.com/sse",
                               "headers": {"Authorization": "Bearer your-token"}, "toolTimeout": 60},
                "remote-http": {"url": "https://mcp.example.com/mcp", "headers": {"X-API-Key": "your-key"}},
                "forced": {"type": "sse", "url": "https://mcp.example.com/events"}
            }))
            .unwrap();
        let spec = |n: &str| server_spec(n, &servers[n]).unwrap();
        let fs = spec("filesystem");
        assert_eq!(fs.enabled_tools, ["read_file"]);
        assert!(!fs.allows_all());
        assert!(
            matches!(&fs.transport, TransportSpec::Stdio { command, args, cwd: None, .. }
            if command == "npx" && args.len() == 3)
        );
        let sse = spec("remote-sse");
        assert_eq!(sse.transport.kind(), TransportKind::Sse);
        assert_eq!(sse.tool_timeout, Duration::from_secs(60));
        assert!(!format!("{sse:?}").contains("your-token"));
        let http = spec("remote-http");
        assert_eq!(http.transport.kind(), TransportKind::StreamableHttp);
        assert_eq!(http.tool_timeout, DEFAULT_TOOL_TIMEOUT);
        assert!(http.allows_all());
        assert_eq!(spec("forced").transport.kind(), TransportKind::Sse);
    }
}
