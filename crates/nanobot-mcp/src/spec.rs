//! Resolved, validated server settings (`tools.mcpServers.<name>` after defaults and inference).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::McpError;

/// Default per-call limit when `toolTimeout` is absent (seconds).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// How nanobot talks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio,
    /// The legacy HTTP+SSE transport (protocol 2024-11-05): `GET /sse` + POSTed messages.
    Sse,
    /// The current streamable HTTP transport.
    StreamableHttp,
}

impl TransportKind {
    /// The spelling used in `config.json` (`stdio`, `sse`, `streamableHttp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Sse => "sse",
            Self::StreamableHttp => "streamableHttp",
        }
    }

    /// Parses a configured `type`, accepting common spellings (`streamable_http`, `http`).
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim().to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "stdio" => Some(Self::Stdio),
            "sse" => Some(Self::Sse),
            "streamablehttp" | "http" => Some(Self::StreamableHttp),
            _ => None,
        }
    }

    /// The transport implied by the other fields when `type` is absent: a command means stdio,
    /// a URL whose path ends in `/sse` means SSE, any other URL streamable HTTP.
    pub fn infer(command: Option<&str>, url: Option<&str>) -> Option<Self> {
        if command.is_some_and(|c| !c.trim().is_empty()) {
            return Some(Self::Stdio);
        }
        let url = url.map(str::trim).filter(|u| !u.is_empty())?;
        let path = url.split(['?', '#']).next().unwrap_or(url);
        if path.trim_end_matches('/').ends_with("/sse") {
            Some(Self::Sse)
        } else {
            Some(Self::StreamableHttp)
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use nanobot_util::SecretMap;

/// Where and how to reach one server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportSpec {
    /// Spawn `command args…` with a scrubbed environment plus `env`.
    Stdio {
        /// Program to run (looked up on the scrubbed `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (values redacted in `Debug`).
        env: SecretMap,
        /// Working directory, if configured.
        cwd: Option<PathBuf>,
        /// `trusted`: started without confinement, with nanobot's own rights.
        trusted: bool,
        /// `writablePaths`: more paths the confined server may write (absolute).
        writable_paths: Vec<PathBuf>,
    },
    /// Legacy HTTP+SSE at `url` (the `GET` stream).
    Sse {
        /// The SSE endpoint, e.g. `https://host/sse`.
        url: String,
        /// Headers sent with every request (values redacted in `Debug`).
        headers: SecretMap,
    },
    /// Streamable HTTP at `url`.
    StreamableHttp {
        /// The MCP endpoint, e.g. `https://host/mcp`.
        url: String,
        /// Headers sent with every request (values redacted in `Debug`).
        headers: SecretMap,
    },
}

impl TransportSpec {
    /// Which transport this is.
    pub fn kind(&self) -> TransportKind {
        match self {
            Self::Stdio { .. } => TransportKind::Stdio,
            Self::Sse { .. } => TransportKind::Sse,
            Self::StreamableHttp { .. } => TransportKind::StreamableHttp,
        }
    }

    /// A short, secret-free description for status output (`node index.js stdio`, the URL).
    pub fn target(&self) -> String {
        match self {
            Self::Stdio { command, args, .. } => {
                let mut s = command.clone();
                for a in args {
                    s.push(' ');
                    s.push_str(a);
                }
                s
            }
            Self::Sse { url, .. } | Self::StreamableHttp { url, .. } => url.clone(),
        }
    }
}

/// One configured server after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// The key under `tools.mcpServers`.
    pub name: String,
    /// Transport and its settings.
    pub transport: TransportSpec,
    /// Limit for each tool call, resource read or prompt (`toolTimeout`).
    pub tool_timeout: Duration,
    /// `enabledTools`: `["*"]` registers everything; otherwise only these tools (raw or wrapped
    /// names), and no resources or prompts.
    pub enabled_tools: Vec<String>,
    /// `readOnly`: the user declares that the server's tools only read. Otherwise each call of its tools counts
    /// as running code ([`nanobot_tools::Effects::opaque`]), whatever the server's own annotations say.
    pub read_only: bool,
}

/// The raw fields of `tools.mcpServers.<name>` as written by the user. `Debug` shows the names of `env` and
/// `headers` only: their values are tokens (`GITHUB_TOKEN`, `Authorization`).
#[derive(Clone, Default)]
pub struct RawServer {
    /// `type`: `stdio` | `sse` | `streamableHttp`, inferred when absent.
    pub r#type: Option<String>,
    /// `command` (stdio).
    pub command: Option<String>,
    /// `args` (stdio).
    pub args: Vec<String>,
    /// `env` (stdio).
    pub env: BTreeMap<String, String>,
    /// `cwd` (stdio).
    pub cwd: Option<PathBuf>,
    /// `url` (HTTP).
    pub url: Option<String>,
    /// `headers` (HTTP).
    pub headers: BTreeMap<String, String>,
    /// `toolTimeout` in seconds (default 30).
    pub tool_timeout: Option<u64>,
    /// `enabledTools` (default `["*"]`).
    pub enabled_tools: Option<Vec<String>>,
    /// `readOnly` (default false).
    pub read_only: bool,
    /// `trusted` (stdio; default false): started without confinement.
    pub trusted: bool,
    /// `writablePaths` (stdio): more paths the confined server may write; each must be absolute.
    pub writable_paths: Vec<PathBuf>,
}

impl std::fmt::Debug for RawServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawServer")
            .field("type", &self.r#type)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("tool_timeout", &self.tool_timeout)
            .field("enabled_tools", &self.enabled_tools)
            .field("read_only", &self.read_only)
            .field("trusted", &self.trusted)
            .field("writable_paths", &self.writable_paths)
            .finish()
    }
}

impl ServerSpec {
    /// Validates `raw` for the server called `name`: infers the transport, checks that the
    /// fields it needs are there, and fills in defaults.
    pub fn resolve(name: &str, raw: RawServer) -> Result<Self, McpError> {
        let bad = |reason: String| McpError::Config {
            server: name.to_owned(),
            reason,
        };
        if name.trim().is_empty() {
            return Err(bad("the server name is empty".into()));
        }
        let command = raw.command.filter(|c| !c.trim().is_empty());
        let url = raw.url.map(|u| u.trim().to_owned()).filter(|u| !u.is_empty());
        let kind = match raw.r#type.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => TransportKind::parse(t).ok_or_else(|| {
                bad(format!(
                    "field `type`: unknown transport {t:?} (expected stdio, sse or streamableHttp)"
                ))
            })?,
            None => TransportKind::infer(command.as_deref(), url.as_deref())
                .ok_or_else(|| bad("neither `command` nor `url` is set".into()))?,
        };
        let transport = match kind {
            TransportKind::Stdio => TransportSpec::Stdio {
                command: command
                    .ok_or_else(|| bad("field `command` is required for a stdio server".into()))?,
                args: raw.args,
                env: raw.env.into_iter().collect(),
                cwd: raw.cwd,
                trusted: raw.trusted,
                writable_paths: match raw.writable_paths.iter().find(|p| !p.is_absolute()) {
                    Some(p) => {
                        return Err(bad(format!(
                            "field `writablePaths`: {} is not an absolute path",
                            p.display()
                        )));
                    }
                    None => raw.writable_paths,
                },
            },
            TransportKind::Sse | TransportKind::StreamableHttp => {
                let url = url.ok_or_else(|| bad(format!("field `url` is required for a {kind} server")))?;
                let parsed = reqwest::Url::parse(&url)
                    .map_err(|e| bad(format!("field `url`: {url:?} is not a valid URL ({e})")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(bad(format!(
                        "field `url`: scheme of {url:?} must be http or https"
                    )));
                }
                for key in raw.headers.keys() {
                    if reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_err() {
                        return Err(bad(format!(
                            "field `headers`: {key:?} is not a valid header name"
                        )));
                    }
                }
                let headers: SecretMap = raw.headers.into_iter().collect();
                if kind == TransportKind::Sse {
                    TransportSpec::Sse { url, headers }
                } else {
                    TransportSpec::StreamableHttp { url, headers }
                }
            }
        };
        let tool_timeout = match raw.tool_timeout {
            None | Some(0) => DEFAULT_TOOL_TIMEOUT,
            Some(secs) => Duration::from_secs(secs),
        };
        Ok(Self {
            name: name.to_owned(),
            transport,
            tool_timeout,
            enabled_tools: raw.enabled_tools.unwrap_or_else(|| vec!["*".to_owned()]),
            read_only: raw.read_only,
        })
    }

    /// Whether `enabledTools` lets everything in (`["*"]`, or a list containing `*`).
    pub fn allows_all(&self) -> bool {
        self.enabled_tools.iter().any(|t| t == "*")
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn raw_server_debug_shows_env_and_header_names_only() {
        let mut raw = RawServer::default();
        raw.env.insert("GITHUB_TOKEN".into(), "ghp_SEKRIT".into());
        raw.headers
            .insert("Authorization".into(), "Bearer SEKRIT2".into());
        let shown = format!("{raw:?}");
        assert!(
            shown.contains("GITHUB_TOKEN") && shown.contains("Authorization"),
            "{shown}"
        );
        assert!(!shown.contains("SEKRIT"), "{shown}");
    }

    use super::*;

    fn raw() -> RawServer {
        RawServer::default()
    }

    #[test]
    fn transport_is_inferred() {
        let s = ServerSpec::resolve(
            "fs",
            RawServer {
                command: Some("npx".into()),
                ..raw()
            },
        )
        .unwrap();
        assert_eq!(s.transport.kind(), TransportKind::Stdio);
        assert_eq!(s.tool_timeout, DEFAULT_TOOL_TIMEOUT);
        assert!(s.allows_all());
        for (url, kind) in [
            ("https://x.example/sse", TransportKind::Sse),
            ("https://x.example/sse/", TransportKind::Sse),
            ("https://x.example/sse?key=1", TransportKind::Sse),
            ("https://x.example/mcp", TransportKind::StreamableHttp),
            ("https://x.example/ssex", TransportKind::StreamableHttp),
        ] {
            let s = ServerSpec::resolve(
                "r",
                RawServer {
                    url: Some(url.into()),
                    ..raw()
                },
            )
            .unwrap();
            assert_eq!(s.transport.kind(), kind, "{url}");
        }
    }

    #[test]
    fn explicit_type_wins_and_is_validated() {
        let s = ServerSpec::resolve(
            "r",
            RawServer {
                r#type: Some("streamableHttp".into()),
                url: Some("http://127.0.0.1:1/sse".into()),
                tool_timeout: Some(5),
                ..raw()
            },
        )
        .unwrap();
        assert_eq!(s.transport.kind(), TransportKind::StreamableHttp);
        assert_eq!(s.tool_timeout, Duration::from_secs(5));

        let err = ServerSpec::resolve(
            "r",
            RawServer {
                r#type: Some("websocket".into()),
                url: Some("http://x/".into()),
                ..raw()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("'r'") && err.contains("`type`") && err.contains("websocket"),
            "{err}"
        );

        let err = ServerSpec::resolve(
            "r",
            RawServer {
                r#type: Some("stdio".into()),
                url: Some("http://x/".into()),
                ..raw()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`command`"), "{err}");
        assert!(ServerSpec::resolve("empty", raw()).is_err());
        let err = ServerSpec::resolve(
            "f",
            RawServer {
                url: Some("file:///etc/passwd".into()),
                ..raw()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("scheme"), "{err}");
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let s = ServerSpec::resolve(
            "remote",
            RawServer {
                url: Some("https://x.example/mcp".into()),
                headers: [
                    ("Authorization".to_owned(), "Bearer sk-very-secret".to_owned()),
                    ("X-API-Key".to_owned(), "k-123".to_owned()),
                    ("Content-Type".to_owned(), "application/json".to_owned()),
                ]
                .into(),
                ..raw()
            },
        )
        .unwrap();
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("sk-very-secret") && !dbg.contains("k-123"), "{dbg}");
        assert!(
            dbg.contains("Authorization") && dbg.contains(nanobot_util::secret::REDACTED),
            "{dbg}"
        );
        assert!(dbg.contains("application/json"), "{dbg}");

        let s = ServerSpec::resolve(
            "local",
            RawServer {
                command: Some("srv".into()),
                env: [("BRAVE_API_KEY".to_owned(), "brv-secret".to_owned())].into(),
                ..raw()
            },
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("brv-secret"));
    }
}
