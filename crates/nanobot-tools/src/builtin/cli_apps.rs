//! `run_cli_app` (0.3.5's): runs a CLI app the user installed (0.3.5's CLI Apps, recorded in
//! `<data dir>/cli-apps/installed.json`) with an argument list, never through a shell the model writes.
//!
//! The app runs exactly as an `exec` command does (the same sandbox, limits, scrubbed environment, working
//! directory rules and timeout bounds): its entry point and arguments are quoted into one command line, so no
//! argument is read as shell syntax. Only installed apps run; the entry point must be a plain program name.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::exec::{ExecArgs, ExecTool};
use crate::error::ToolError;
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// The largest `installed.json` read.
const MAX_REGISTRY_BYTES: u64 = 1024 * 1024;

/// The installed apps: name → entry point, from 0.3.5's `installed.json` (`{"schema_version": 1, "apps": {…}}`,
/// or the older flat map). A missing file is no apps; an unreadable one is an error naming it.
pub fn installed_apps(registry: &std::path::Path) -> Result<Vec<(String, String)>, ToolError> {
    let text = match nanobot_util::read_to_string_bounded(registry, MAX_REGISTRY_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ToolError::io("reading", registry, e)),
    };
    let root: Map<String, Value> = match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => m,
        Ok(_) | Err(_) => {
            return Err(ToolError::Failed(format!(
                "{} is not a JSON object of installed apps",
                registry.display()
            )));
        }
    };
    let apps = match root.get("apps") {
        Some(Value::Object(m)) => m.clone(),
        _ => root,
    };
    let mut out: Vec<(String, String)> = apps
        .iter()
        .filter_map(|(name, entry)| {
            let ep = entry.get("entry_point").and_then(Value::as_str).unwrap_or(name);
            Some((name.clone(), ep.to_owned())).filter(|_| entry.is_object())
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Whether `entry` is a plain program name (found on `PATH`, never a path or shell syntax).
fn plain_program(entry: &str) -> bool {
    !entry.is_empty()
        && entry.len() <= 128
        && entry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'))
        && !entry.starts_with('.')
        && !entry.starts_with('-')
}

/// One argument as a single-quoted shell word.
fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', "'\\''"))
}

/// Arguments of `run_cli_app` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunCliAppArgs {
    /// The installed app's name (as listed in this tool's description).
    pub name: String,
    /// Arguments for the app, without its program name.
    #[schemars(extend("nullable" = true))]
    pub args: Option<Vec<String>>,
    /// Put --json first when the app supports it (default false).
    #[schemars(extend("nullable" = true, "default" = false))]
    pub json: Option<bool>,
    /// Working directory (default: the workspace).
    #[schemars(extend("nullable" = true))]
    pub working_dir: Option<String>,
    /// Timeout in seconds (1 to 600).
    #[schemars(range(min = 1, max = 600), extend("nullable" = true))]
    pub timeout: Option<u64>,
}

/// `run_cli_app`: runs an installed CLI app through the `exec` sandbox.
#[derive(Debug, Clone)]
pub struct RunCliAppTool {
    exec: ExecTool,
    registry: PathBuf,
    default_timeout: u64,
    description: String,
}

impl RunCliAppTool {
    /// Runs the apps `registry` (`<data dir>/cli-apps/installed.json`) lists through `exec`'s sandbox, with
    /// `default_timeout` seconds unless a call says otherwise (`tools.cliApps.runTimeout`).
    pub fn new(exec: ExecTool, registry: impl Into<PathBuf>, default_timeout: u64) -> Self {
        let registry = registry.into();
        let installed = installed_apps(&registry).unwrap_or_default();
        let note = if installed.is_empty() {
            " No CLI apps are installed.".to_owned()
        } else {
            format!(
                " Installed CLI apps: {}.",
                installed
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Self {
            exec,
            registry,
            default_timeout: default_timeout.clamp(1, 600),
            description: format!(
                "Run a CLI app the user installed (or attached as @app), with a list of arguments; never through \
                 a shell. Not for ordinary programs such as git, python or npm (use exec): unknown names are \
                 refused.{note}"
            ),
        }
    }
}

#[async_trait]
impl TypedTool for RunCliAppTool {
    type Args = RunCliAppArgs;

    fn name(&self) -> &str {
        "run_cli_app"
    }

    /// The app and its arguments, as a command line (a word is quoted only where it must be).
    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        let name = args
            .get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .trim();
        let mut line = name.to_owned();
        for a in args
            .get("args")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            let a = a.as_str().map_or_else(|| a.to_string(), str::to_owned);
            line.push(' ');
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
            line.push_str(&if plain { a } else { quote(&a) });
        }
        crate::Effects::command(line)
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn call(&self, args: RunCliAppArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let registry = self.registry.clone();
        let installed = tokio::task::spawn_blocking(move || installed_apps(&registry))
            .await
            .map_err(|e| ToolError::Failed(format!("reading the installed apps failed: {e}")))??;
        let name = args.name.trim();
        let Some((_, entry)) = installed.iter().find(|(n, _)| n == name) else {
            let list = installed
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ToolError::Failed(format!(
                "CLI app '{name}' is not installed{}",
                if list.is_empty() {
                    " (no CLI apps are installed)".to_owned()
                } else {
                    format!(" (installed: {list})")
                }
            )));
        };
        if !plain_program(entry) {
            return Err(ToolError::Failed(format!(
                "CLI app '{name}' has an entry point that is not a plain program name: {entry:?}"
            )));
        }
        let mut argv = args.args.unwrap_or_default();
        if args.json == Some(true) && !argv.iter().any(|a| a == "--json") {
            argv.insert(0, "--json".into());
        }
        let mut command = entry.clone();
        for a in &argv {
            command.push(' ');
            command.push_str(&quote(a));
        }
        let out = self
            .exec
            .call(
                ExecArgs {
                    command: Some(command),
                    cmd: None,
                    working_dir: args.working_dir,
                    workdir: None,
                    timeout: Some(args.timeout.unwrap_or(self.default_timeout).clamp(1, 600)),
                    shell: Some("sh".into()),
                    login: None,
                    max_output_chars: None,
                    max_output_tokens: None,
                    yield_time_ms: None,
                },
                ctx,
            )
            .await?;
        let shown = std::iter::once(entry.as_str())
            .chain(argv.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let text = format!("CLI app '{name}'. Command: {shown}\n\n{}", out.text);
        Ok(if out.is_error {
            ToolOutput::error(text)
        } else {
            ToolOutput::text(text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_are_plain_names_and_arguments_are_quoted() {
        for ok in ["gimp", "obsidian-cli", "cli_anything.x", "g++"] {
            assert!(plain_program(ok), "{ok}");
        }
        for bad in ["", "/bin/sh", "../x", "a b", "x;rm", "$(id)", "-rf", ".hidden"] {
            assert!(!plain_program(bad), "{bad}");
        }
        assert_eq!(quote("it's $(id)"), "'it'\\''s $(id)'");
    }

    #[test]
    fn the_registry_is_read_in_both_layouts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("installed.json");
        assert!(installed_apps(&p).unwrap().is_empty());
        std::fs::write(
            &p,
            r#"{"schema_version":1,"apps":{"mermaid":{"entry_point":"mmdc"},"drawio":{}}}"#,
        )
        .unwrap();
        assert_eq!(
            installed_apps(&p).unwrap(),
            [
                ("drawio".to_owned(), "drawio".to_owned()),
                ("mermaid".to_owned(), "mmdc".to_owned())
            ]
        );
        std::fs::write(&p, r#"{"gimp":{"entry_point":"gimp-cli"}}"#).unwrap();
        assert_eq!(
            installed_apps(&p).unwrap(),
            [("gimp".to_owned(), "gimp-cli".to_owned())]
        );
        std::fs::write(&p, "[1]").unwrap();
        assert!(
            installed_apps(&p)
                .unwrap_err()
                .to_string()
                .contains("installed.json")
        );
    }
}
