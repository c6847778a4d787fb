//! [`ToolRegistry`]: the tools an agent has, and the one safe way to call them.

use nanobot_util::{read_lock, write_lock};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, RwLock};

use futures::FutureExt;
use nanobot_types::ToolSpec;
use serde_json::Value;

use crate::error::ToolError;
use crate::schema::ArgsSchema;
use crate::settings::RegistrySettings;
use crate::tool::{Tool, ToolContext, ToolOutput};

/// Appended to every error result so the model tries something else instead of repeating itself
/// (the Python nanobot's wording).
pub const ERROR_HINT: &str = "\n\n[Analyze the error above and try a different approach.]";

/// Where results longer than `maxToolResultChars` are saved, relative to the workspace.
pub const TOOL_RESULTS_DIR: &str = ".nanobot/tool-results";

struct Entry {
    tool: Arc<dyn Tool>,
    /// Shared with every request that offers the tool (a turn copies a pointer, not the schema).
    spec: Arc<ToolSpec>,
    args: Arc<ArgsSchema>,
    /// Bytes of `spec.parameters` as JSON, measured once (the context budget's estimate needs it every turn).
    params_len: OnceLock<usize>,
}

/// `value` with every object, list and string at its exact size, down to [`COMPACT_DEPTH`] levels. A schema is
/// built by growing maps and lists and is then kept for the life of the process: the spare room (a third of an
/// idle gateway's tool schemas) would stay allocated with it.
fn compacted(value: Value, depth: usize) -> Value {
    if depth >= COMPACT_DEPTH {
        return value;
    }
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(mut key, v)| {
                    key.shrink_to_fit();
                    (key, compacted(v, depth + 1))
                })
                .collect(),
        ),
        Value::Array(items) => {
            // collected in place: the list keeps its allocation, so it is shrunk after
            let mut items: Vec<Value> = items.into_iter().map(|v| compacted(v, depth + 1)).collect();
            items.shrink_to_fit();
            Value::Array(items)
        }
        Value::String(mut text) => {
            text.shrink_to_fit();
            Value::String(text)
        }
        other => other,
    }
}

/// How deep [`compacted`] goes (an MCP server's schema may nest without bound; deeper levels are kept as they are).
const COMPACT_DEPTH: usize = 32;

impl Entry {
    fn params_len(&self) -> usize {
        *self
            .params_len
            .get_or_init(|| serde_json::to_vec(&self.spec.parameters).map_or(0, |v| v.len()))
    }
}

/// The registered tools. Cheap to share behind an `Arc`; registration works through `&self`
/// (MCP tools arrive after start-up).
///
/// ```
/// use nanobot_tools::{ToolRegistry, ToolContext};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let reg = ToolRegistry::default();
/// let out = reg.execute("nope", serde_json::json!({}), &ToolContext::new("/tmp")).await;
/// assert!(out.is_error);
/// assert!(out.text.starts_with("Error: Tool 'nope' not found"));
/// # });
/// ```
#[derive(Default)]
pub struct ToolRegistry {
    tools: RwLock<HashMap<String, Arc<Entry>>>,
    settings: RegistrySettings,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .field("settings", &self.settings)
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry with `settings`.
    pub fn new(settings: RegistrySettings) -> Self {
        Self {
            tools: RwLock::default(),
            settings,
        }
    }

    /// The registry's settings.
    pub fn settings(&self) -> &RegistrySettings {
        &self.settings
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Entry>>> {
        read_lock(&self.tools)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Entry>>> {
        write_lock(&self.tools)
    }

    /// Registers `tool` under its name (its spec and schema are captured now); returns the tool
    /// it replaced. A tool the settings' [`crate::ToolSelection`] leaves out is not registered.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Option<Arc<dyn Tool>> {
        if !self.settings.selection.offers(tool.name()) {
            tracing::debug!(tool = tool.name(), "left out by tools.profile / tools.only");
            return None;
        }
        let mut spec = tool.spec();
        spec.parameters = compacted(std::mem::take(&mut spec.parameters), 0);
        let spec = Arc::new(spec);
        let args = Arc::new(ArgsSchema::of_spec(spec.clone()));
        let name = spec.name.clone();
        let entry = Arc::new(Entry {
            tool,
            spec,
            args,
            params_len: OnceLock::new(),
        });
        self.write().insert(name, entry).map(|e| e.tool.clone())
    }

    /// Removes the tool called `name`.
    pub fn unregister(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.write().remove(name).map(|e| e.tool.clone())
    }

    /// What a call of `name` with `args` does ([`Tool::effects`]); nothing for a tool that is not registered
    /// (the call fails without running).
    pub fn effects(&self, name: &str, args: &serde_json::Value) -> crate::Effects {
        self.get(name)
            .map_or_else(crate::Effects::none, |t| t.effects(args))
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.read().get(name).map(|e| e.tool.clone())
    }

    /// True when a tool called `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// [`Tool::stop_session`] of every tool; how many things they ended.
    pub async fn stop_session(&self, session_key: &str) -> usize {
        let tools: Vec<Arc<dyn Tool>> = self.read().values().map(|e| e.tool.clone()).collect();
        let mut n = 0;
        for t in tools {
            n += t.stop_session(session_key).await;
        }
        n
    }

    /// [`Tool::shutdown`] of every tool.
    pub async fn shutdown(&self) {
        let tools: Vec<Arc<dyn Tool>> = self.read().values().map(|e| e.tool.clone()).collect();
        for t in tools {
            t.shutdown().await;
        }
    }

    /// Tool names in definition order (built-ins alphabetically, then `mcp_*` alphabetically).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().keys().cloned().collect();
        names.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
        names
    }

    /// The specs for the provider, in a stable order (built-ins alphabetically, then MCP
    /// tools alphabetically) so prompts stay cache-friendly. Shared: each is the registry's own, not a copy.
    pub fn definitions(&self) -> Vec<Arc<ToolSpec>> {
        let tools = self.read();
        let mut specs: Vec<Arc<ToolSpec>> = tools.values().map(|e| e.spec.clone()).collect();
        drop(tools);
        specs.sort_by(|a, b| sort_key(&a.name).cmp(&sort_key(&b.name)));
        specs
    }

    /// The character heuristic of the context budget (one token per 3 bytes, rounded up) over every tool's name,
    /// description and parameter schema as JSON. Each schema is serialised once, when first estimated, not
    /// per turn.
    pub fn definitions_rough_tokens(&self) -> usize {
        self.read()
            .values()
            .map(|e| {
                e.spec.name.len().div_ceil(3)
                    + e.spec.description.len().div_ceil(3)
                    + e.params_len().div_ceil(3)
            })
            .sum()
    }

    /// Casts and validates `args` for tool `name` without running it. `Err` carries the error
    /// text for the model (hint included).
    pub fn prepare(&self, name: &str, args: Value) -> Result<(Arc<dyn Tool>, Value), String> {
        let entry = self.read().get(name).cloned();
        let Some(entry) = entry else {
            return Err(format!(
                "Error: Tool '{name}' not found. Available: {}{ERROR_HINT}",
                self.names().join(", ")
            ));
        };
        match entry.args.prepare(args) {
            Ok(args) => Ok((entry.tool.clone(), args)),
            Err(errors) => Err(format!(
                "Error: Invalid parameters for tool '{name}': {}{ERROR_HINT}",
                errors.join("; ")
            )),
        }
    }

    /// Runs tool `name`. Never fails: unknown tools, invalid arguments, errors, panics and
    /// cancellation all become error results ending with [`ERROR_HINT`]. Empty output becomes
    /// `(<name> completed with no output)`; output longer than `maxToolResultChars` is saved
    /// under `<workspace>/.nanobot/tool-results/` and replaced by a preview plus the path.
    pub async fn execute(&self, name: &str, args: Value, ctx: &ToolContext) -> ToolOutput {
        let (tool, args) = match self.prepare(name, args) {
            Ok(ok) => ok,
            Err(text) => return ToolOutput::error(text),
        };
        let fut = AssertUnwindSafe(tool.execute(args, ctx)).catch_unwind();
        let result = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            r = fut => match r {
                Ok(r) => r,
                Err(panic) => Err(ToolError::Panicked(panic_message(&*panic))),
            },
        };
        let output = match result {
            Ok(out) => out,
            Err(err) => {
                tracing::warn!(tool = name, error = %err.model_text(), "tool failed");
                ToolOutput::error(format!("Error executing {name}: {}", err.model_text()))
            }
        };
        self.finish(name, output, ctx).await
    }

    async fn finish(&self, name: &str, mut out: ToolOutput, ctx: &ToolContext) -> ToolOutput {
        // A granted credential's value never reaches the model, whatever brought it back (a server's echo, a
        // file a command wrote).
        if let Some(c) = &self.settings.credentials
            && let std::borrow::Cow::Owned(scrubbed) = c.scrub(&out.text)
        {
            out.text = scrubbed;
        }
        if out.text.trim().is_empty() && out.media.is_empty() && !out.is_error {
            out.text = format!("({name} completed with no output)");
            return out;
        }
        if !out.is_error && out.text.starts_with("Error") {
            out.is_error = true;
        }
        if out.is_error {
            if out.text.trim().is_empty() {
                out.text = format!("Error: {name} failed without a message");
            }
            if !out.text.ends_with(ERROR_HINT) {
                out.text.push_str(ERROR_HINT);
            }
            return out;
        }
        let max = self.settings.max_tool_result_chars;
        if max > 0 && out.text.chars().count() > max {
            out.text = self.persist(name, &out.text, ctx).await;
        }
        out
    }

    async fn persist(&self, name: &str, text: &str, ctx: &ToolContext) -> String {
        let total = text.chars().count();
        let session = safe_file_name(if ctx.session_key.is_empty() {
            "default"
        } else {
            &ctx.session_key
        });
        let id = ctx
            .call_id
            .as_deref()
            .map(safe_file_name)
            .unwrap_or_else(|| format!("{name}-{}", uuid::Uuid::new_v4().simple()));
        let dir: PathBuf = ctx.workspace.join(TOOL_RESULTS_DIR).join(session);
        let path = dir.join(format!("{id}.txt"));
        let preview: String = text.chars().take(self.settings.preview_chars).collect();
        let saved = async {
            tokio::fs::create_dir_all(&dir).await?;
            tokio::fs::write(&path, text).await
        }
        .await;
        match saved {
            Ok(()) => format!(
                "[{name} output too long: {total} chars, saved to {path}]\n\
                 Preview:\n{preview}\n...\n\
                 [Use read_file with path={path} and offset/limit to read the rest.]",
                path = path.display()
            ),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot save a long tool result");
                let head: String = text.chars().take(self.settings.max_tool_result_chars).collect();
                format!("{head}\n... (truncated, {total} chars total)")
            }
        }
    }
}

fn sort_key(name: &str) -> (bool, &str) {
    (name.starts_with("mcp_"), name)
}

/// A file-name-safe rendition of `s` (session keys like `telegram:123`).
pub(crate) fn safe_file_name(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let out = out.trim_start_matches('.').to_owned();
    if out.is_empty() { "_".to_owned() } else { out }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_compacted_schema_is_the_same_value_at_its_exact_size() {
        let mut list = Vec::with_capacity(64);
        list.push(json!("a"));
        let mut text = String::with_capacity(100);
        text.push_str("path");
        let schema = json!({"type": "object", "properties": {"p": {"type": "string", "description": text}},
                            "required": list, "z": 1, "a": 2});
        let compact = compacted(schema.clone(), 0);
        assert_eq!(compact, schema);
        // key order kept (the schema is sent as written)
        let keys: Vec<&String> = compact.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["type", "properties", "required", "z", "a"]);
        let Value::Array(required) = &compact["required"] else {
            panic!("required is a list")
        };
        assert_eq!(required.capacity(), required.len());
        let Value::String(description) = &compact["properties"]["p"]["description"] else {
            panic!("description is a string")
        };
        assert_eq!(description.capacity(), description.len());
    }

    #[test]
    fn a_schema_deeper_than_the_bound_is_kept_whole() {
        let mut deep = json!("leaf");
        for _ in 0..(COMPACT_DEPTH * 4) {
            deep = json!({"items": [deep]});
        }
        assert_eq!(compacted(deep.clone(), 0), deep);
    }
}
