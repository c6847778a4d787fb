//! Resolved settings for the built-in tools.
//!
//! This crate does not read configuration: the agent core resolves `config.json` and fills these
//! structs. Each field names the config key it corresponds to.

use std::path::PathBuf;
use std::time::Duration;

use crate::ssrf::SsrfGuard;

pub use nanobot_util::Secret;

/// Settings of the file tools and the path sandbox.
#[derive(Debug, Clone, Default)]
pub struct FsSettings {
    /// `tools.restrictToWorkspace`: keep every file tool inside the workspace.
    pub restrict_to_workspace: bool,
    /// Extra directories that stay readable under the restriction (the built-in skills folder).
    pub extra_read_roots: Vec<PathBuf>,
    /// The user's home directory, for `~` (the binary passes `$HOME`; none → `~` is refused).
    pub home: Option<PathBuf>,
}

/// How `exec` children are confined (`tools.exec.sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecSandbox {
    /// `""` (the default): bubblewrap namespaces where they work, else Landlock, else none (each
    /// fallback with a warning).
    #[default]
    Auto,
    /// `"landlock"`: Landlock only (no namespaces); if the kernel lacks Landlock, runs
    /// unconfined with a logged warning.
    Landlock,
    /// `"bwrap"`: bubblewrap namespaces required; a call fails when they are unavailable.
    Bwrap,
    /// `"none"`/`"off"`: no OS-level confinement (the command guard still runs).
    None,
}

impl ExecSandbox {
    /// Parses the config value (`""`, `"auto"`, `"bwrap"`, `"landlock"`, `"none"`, `"off"`).
    /// Unknown values map to `Auto` and are reported by returning `Err` with the fallback.
    pub fn from_config(value: &str) -> Result<Self, Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "landlock" => Ok(Self::Landlock),
            "bwrap" | "bubblewrap" => Ok(Self::Bwrap),
            "none" | "off" | "false" => Ok(Self::None),
            _ => Err(Self::Auto),
        }
    }
}

/// Settings of the `exec` tool (`tools.exec.*`). `Debug` shows the parent environment's names only: its values
/// hold API keys and tokens.
#[derive(Clone)]
pub struct ExecSettings {
    /// `tools.exec.timeout`: default timeout in seconds (the model may ask for up to 600).
    pub timeout: Duration,
    /// `tools.exec.pathPrepend`: prepended to the child's `PATH`.
    pub path_prepend: String,
    /// `tools.exec.pathAppend`: appended to the child's `PATH`.
    pub path_append: String,
    /// `tools.exec.sandbox`.
    pub sandbox: ExecSandbox,
    /// `tools.exec.sandboxRwBinds`: extra paths the child may read and write (absolute).
    pub extra_writable: Vec<PathBuf>,
    /// `tools.exec.sandboxRoBinds`: extra paths the child may read under `restrictToWorkspace`
    /// (absolute; without the restriction everything not hidden is readable anyway).
    pub extra_readable: Vec<PathBuf>,
    /// nanobot's data directory (`~/.nanobot`: config with keys, sessions, pairing, cron):
    /// invisible to the child in every mode (the workspace stays visible if it lies inside).
    pub data_dir: Option<PathBuf>,
    /// `tools.exec.hidePaths`, expanded: more paths invisible to the child in every mode
    /// (by default the usual credential stores under `$HOME`).
    pub hide_paths: Vec<PathBuf>,
    /// `tools.exec.network`: whether the child may use the network.
    pub network: bool,
    /// `tools.exec.maxProcesses` and friends.
    pub limits: crate::confine::ExecLimits,
    /// `tools.exec.allowedEnvKeys`: variables passed through from the parent environment.
    pub allowed_env_keys: Vec<String>,
    /// `tools.exec.allowPatterns`: if non-empty, a command must match one (regexes).
    pub allow_patterns: Vec<String>,
    /// `tools.exec.denyPatterns`: extra deny regexes on top of the built-in guard.
    pub deny_patterns: Vec<String>,
    /// `tools.restrictToWorkspace`: refuse `..`, absolute and `~` paths outside the workspace.
    pub restrict_to_workspace: bool,
    /// The parent's environment (the binary passes `std::env::vars()`); the child gets only
    /// `HOME`, `LANG`, `TERM`, `PATH` and `allowed_env_keys` from it.
    pub parent_env: nanobot_util::EnvMap,
    /// Output cap in characters (10,000 as in the Python nanobot).
    pub max_output_chars: usize,
    /// `tools.network.allowedDomains`: when set, a command has no network of its own and reaches only these
    /// domains through nanobot's proxy (with bubblewrap; under Landlock it has no network at all). Overrides
    /// `network`.
    pub egress: Option<crate::egress::EgressSettings>,
}

impl std::fmt::Debug for ExecSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSettings")
            .field("timeout", &self.timeout)
            .field("path_prepend", &self.path_prepend)
            .field("path_append", &self.path_append)
            .field("sandbox", &self.sandbox)
            .field("extra_writable", &self.extra_writable)
            .field("extra_readable", &self.extra_readable)
            .field("data_dir", &self.data_dir)
            .field("hide_paths", &self.hide_paths)
            .field("network", &self.network)
            .field("limits", &self.limits)
            .field("allowed_env_keys", &self.allowed_env_keys)
            .field("allow_patterns", &self.allow_patterns)
            .field("deny_patterns", &self.deny_patterns)
            .field("restrict_to_workspace", &self.restrict_to_workspace)
            .field("parent_env", &self.parent_env)
            .field("max_output_chars", &self.max_output_chars)
            .field("egress", &self.egress.as_ref().map(|e| e.allowed.domains()))
            .finish()
    }
}

impl Default for ExecSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            path_prepend: String::new(),
            path_append: String::new(),
            sandbox: ExecSandbox::Auto,
            extra_writable: Vec::new(),
            extra_readable: Vec::new(),
            data_dir: None,
            hide_paths: Vec::new(),
            network: true,
            limits: crate::confine::ExecLimits::default(),
            allowed_env_keys: Vec::new(),
            allow_patterns: Vec::new(),
            deny_patterns: Vec::new(),
            restrict_to_workspace: false,
            parent_env: nanobot_util::EnvMap::new(),
            max_output_chars: 10_000,
            egress: None,
        }
    }
}

/// Which `web_search` backend (`tools.web.search.provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchProvider {
    /// Brave Search API (needs `apiKey`).
    Brave,
    /// Tavily (needs `apiKey`).
    Tavily,
    /// A SearXNG instance (`baseUrl`).
    Searxng,
    /// Jina search (needs `apiKey`).
    Jina,
    /// DuckDuckGo HTML, no key (the default and the fallback).
    #[default]
    DuckDuckGo,
}

impl SearchProvider {
    /// Parses the config value; unknown → `None`.
    pub fn from_config(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "brave" => Some(Self::Brave),
            "tavily" => Some(Self::Tavily),
            "searxng" | "searx" => Some(Self::Searxng),
            "jina" => Some(Self::Jina),
            "duckduckgo" | "ddg" | "" => Some(Self::DuckDuckGo),
            _ => None,
        }
    }
}

/// Settings of `web_search` (`tools.web.search.*`).
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// `provider`.
    pub provider: SearchProvider,
    /// `apiKey`.
    pub api_key: Secret,
    /// `baseUrl`: the SearXNG instance, or an override of the provider's endpoint (tests).
    pub base_url: String,
    /// `maxResults`: default result count (1–10).
    pub max_results: u32,
    /// `timeout`: request timeout.
    pub timeout: Duration,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            provider: SearchProvider::DuckDuckGo,
            api_key: Secret::default(),
            base_url: String::new(),
            max_results: 5,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Settings of the web tools (`tools.web.*`).
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// `tools.web.proxy`: an HTTP(S) proxy for both tools. Note: through a proxy, the proxy
    /// resolves names, so the SSRF guard checks but cannot pin the address.
    pub proxy: Option<String>,
    /// `tools.web.userAgent`.
    pub user_agent: Option<String>,
    /// `tools.web.search`.
    pub search: SearchSettings,
    /// `tools.ssrfWhitelist`, parsed: the SSRF guard.
    pub ssrf: SsrfGuard,
    /// Default `maxChars` of `web_fetch`.
    pub fetch_max_chars: usize,
    /// Request timeout of `web_fetch`.
    pub fetch_timeout: Duration,
    /// `tools.web.allowedDomains`: `None` = any domain; otherwise the only domains (and their
    /// subdomains) the web tools may contact. See [`WebSettings::domain_allowed`].
    pub allowed_domains: Option<Vec<String>>,
}

impl WebSettings {
    /// Whether the web tools may contact `host`: always without an allow-list; with one, when `host`
    /// equals an entry or is a subdomain of it (`example.com` covers `docs.example.com`; a leading
    /// `*.` or `.` is accepted and means the same). Case-insensitive; a trailing dot is ignored.
    pub fn domain_allowed(&self, host: &str) -> bool {
        let Some(list) = &self.allowed_domains else {
            return true;
        };
        crate::egress::DomainList::new(list).allows(host)
    }

    /// [`WebSettings::domain_allowed`] for a URL, with the refusal the model sees.
    pub fn check_egress(&self, url: &url::Url) -> Result<(), crate::ToolError> {
        let host = url.host_str().unwrap_or_default();
        if self.domain_allowed(host) {
            Ok(())
        } else {
            Err(crate::ToolError::Failed(format!(
                "{host} is not on tools.web.allowedDomains; the web tools may not contact it"
            )))
        }
    }
}

impl Default for WebSettings {
    fn default() -> Self {
        Self {
            proxy: None,
            user_agent: None,
            search: SearchSettings::default(),
            ssrf: SsrfGuard::default(),
            fetch_max_chars: 50_000,
            fetch_timeout: Duration::from_secs(30),
            allowed_domains: None,
        }
    }
}

/// Settings of the registry (`agents.defaults.*`).
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// `agents.defaults.maxToolResultChars`: longer results are saved under the workspace and
    /// replaced by a preview plus the path.
    pub max_tool_result_chars: usize,
    /// Characters of the preview the model gets for a saved result.
    pub preview_chars: usize,
    /// The tools the registry takes (`tools.profile`, `tools.only`): one outside it is never registered, so it is
    /// neither offered to the model nor callable.
    pub selection: ToolSelection,
    /// The credentials granted to domains (`tools.secrets`): every result is scrubbed of their values.
    pub credentials: Option<std::sync::Arc<crate::egress::Credentials>>,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            max_tool_result_chars: 16_000,
            preview_chars: 1_200,
            selection: ToolSelection::all(),
            credentials: None,
        }
    }
}

/// The tools of the `local` profile: what a small model on a small machine uses well, in a prompt it reads
/// quickly (plus every MCP server's tools, which the user configured by name).
pub const LOCAL_TOOLS: &[&str] = &[
    "cron",
    "edit_file",
    "exec",
    "list_dir",
    "read_file",
    "web_fetch",
    "write_file",
    "mcp_*",
];

/// Which tools are offered, by name: every tool, or those a list names (an entry ending in `*` matches every
/// name with that start).
///
/// ```
/// use nanobot_tools::ToolSelection;
/// let local = ToolSelection::local();
/// assert!(local.offers("read_file") && local.offers("mcp_github_search"));
/// assert!(!local.offers("spawn"));
/// assert!(!ToolSelection::none().offers("read_file"));
/// assert!(ToolSelection::only(["exec", "mcp_git_*"]).offers("mcp_git_log"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolSelection {
    /// `None`: every tool.
    names: Option<Vec<String>>,
}

impl ToolSelection {
    /// Every tool (the `full` profile).
    pub fn all() -> Self {
        Self { names: None }
    }

    /// No tool at all (the `chat` profile).
    pub fn none() -> Self {
        Self {
            names: Some(Vec::new()),
        }
    }

    /// The `local` profile ([`LOCAL_TOOLS`]).
    pub fn local() -> Self {
        Self::only(LOCAL_TOOLS.iter().copied())
    }

    /// The tools `names` name (`tools.only`).
    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            names: Some(names.into_iter().map(Into::into).collect()),
        }
    }

    /// True when every tool is offered.
    pub fn is_all(&self) -> bool {
        self.names.is_none()
    }

    /// True when a tool called `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.iter().any(|entry| matches(entry, name)))
    }

    /// The entries of the list that match none of `names` (a misspelt tool, or one not enabled).
    pub fn unmatched<'a>(&'a self, names: &[String]) -> Vec<&'a str> {
        self.names
            .iter()
            .flatten()
            .filter(|entry| !names.iter().any(|n| matches(entry, n)))
            .map(String::as_str)
            .collect()
    }
}

fn matches(entry: &str, name: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(start) => name.starts_with(start),
        None => entry == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_environment_names_never_the_values() {
        let mut s = ExecSettings::default();
        s.parent_env.insert("OPENAI_API_KEY", "sk-live-SEKRIT");
        let shown = format!("{s:?}");
        assert!(shown.contains("OPENAI_API_KEY"), "{shown}");
        assert!(!shown.contains("SEKRIT"), "{shown}");
    }
}
