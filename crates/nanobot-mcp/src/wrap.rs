//! Server tools, resources and prompts as nanobot [`Tool`]s.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nanobot_tools::{Tool, ToolContext, ToolError, ToolOutput};
use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, JsonObject, Prompt, ReadResourceRequestParams, Resource,
};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value, json};

use crate::content::{self, RenderOptions, Rendered};
use crate::schema::{empty_object_schema, normalize_schema};

/// What every wrapper of one server shares: the live session and the call limits.
#[derive(Debug)]
pub(crate) struct ServerLink {
    pub(crate) server: String,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) timeout: Duration,
    pub(crate) media_dir: Option<PathBuf>,
    pub(crate) max_chars: usize,
    /// The user declared the server read-only (`readOnly`).
    pub(crate) declared_read_only: bool,
    /// The server's egress proxy, whose refusals each call's answer tells.
    pub(crate) egress: Option<Arc<nanobot_tools::egress::EgressProxy>>,
}

impl ServerLink {
    fn render_options(&self) -> RenderOptions<'_> {
        RenderOptions {
            server: &self.server,
            media_dir: self.media_dir.as_deref(),
            max_chars: self.max_chars,
        }
    }

    /// Runs one request bounded by `toolTimeout` and the turn's cancellation token. Dropping
    /// the request future on timeout makes rmcp send `notifications/cancelled`.
    async fn run<T>(
        &self,
        operation: &str,
        ctx: &ToolContext,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ToolError> {
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            outcome = tokio::time::timeout(self.timeout, request) => match outcome {
                Err(_) => {
                    tracing::warn!(server = %self.server, operation, timeout = ?self.timeout, "MCP request timed out");
                    Err(ToolError::Timeout(self.timeout))
                }
                Ok(Err(e)) => {
                    tracing::warn!(server = %self.server, operation, "MCP request failed: {e}");
                    Err(ToolError::Failed(format!(
                        "MCP server '{}': {operation} failed: {e}",
                        self.server
                    )))
                }
                Ok(Ok(v)) => Ok(v),
            }
        }
    }

    fn render_error(&self, e: crate::McpError) -> ToolError {
        match e {
            crate::McpError::Media { path, source } => ToolError::io("saving MCP media to", path, source),
            other => ToolError::Failed(other.to_string()),
        }
    }
}

fn output(rendered: Rendered) -> ToolOutput {
    let text = if rendered.text.trim().is_empty() && rendered.media.is_empty() {
        "(no output)".to_owned()
    } else {
        rendered.text
    };
    ToolOutput {
        text,
        media: rendered.media,
        is_error: false,
    }
}

fn object_args(args: Value) -> Result<JsonObject, ToolError> {
    match args {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(ToolError::InvalidArguments(format!(
            "expected a JSON object, got {other}"
        ))),
    }
}

/// What a registered MCP tool reaches on its server.
#[derive(Debug, Clone)]
enum Target {
    /// A server tool, called by its name on the server; `read_only` is the server's `readOnlyHint`.
    Tool { original: String, read_only: bool },
    /// A resource, read by its URI (always read-only).
    Resource { uri: String },
    /// A prompt, filled by its name on the server (always read-only); its arguments are strings.
    Prompt { original: String },
}

/// One thing an MCP server offers, registered as a tool: a server tool as `mcp_<server>_<tool>` (calls go to the
/// original name), a resource as the read-only `mcp_<server>_resource_<name>`, a prompt as the read-only
/// `mcp_<server>_prompt_<name>` (its arguments become string parameters).
#[derive(Debug)]
pub struct McpTool {
    name: String,
    description: String,
    parameters: Value,
    target: Target,
    link: Arc<ServerLink>,
}

impl McpTool {
    /// A server tool.
    pub(crate) fn tool(name: String, tool: &rmcp::model::Tool, link: Arc<ServerLink>) -> Self {
        let description = tool
            .description
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(str::to_owned)
            .or_else(|| tool.title.clone())
            .unwrap_or_else(|| tool.name.to_string());
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Self {
            name,
            description,
            parameters: normalize_schema(&Value::Object((*tool.input_schema).clone())),
            target: Target::Tool {
                original: tool.name.to_string(),
                read_only,
            },
            link,
        }
    }

    /// A resource.
    pub(crate) fn resource(name: String, resource: &Resource, link: Arc<ServerLink>) -> Self {
        let about = resource
            .description
            .clone()
            .or_else(|| resource.title.clone())
            .unwrap_or_else(|| resource.name.clone());
        Self {
            name,
            description: format!("[MCP Resource] {about}\nURI: {}", resource.uri),
            parameters: empty_object_schema(),
            target: Target::Resource {
                uri: resource.uri.clone(),
            },
            link,
        }
    }

    /// A prompt.
    pub(crate) fn prompt(name: String, prompt: &Prompt, link: Arc<ServerLink>) -> Self {
        let about = prompt
            .description
            .clone()
            .or_else(|| prompt.title.clone())
            .unwrap_or_else(|| prompt.name.clone());
        let mut properties = Map::new();
        let mut required = Vec::new();
        for arg in prompt.arguments.iter().flatten() {
            let mut prop = json!({"type": "string"});
            if let Some(d) = arg.description.as_ref().or(arg.title.as_ref()) {
                prop["description"] = Value::String(d.clone());
            }
            properties.insert(arg.name.clone(), prop);
            if arg.required == Some(true) {
                required.push(Value::String(arg.name.clone()));
            }
        }
        Self {
            name,
            description: format!("[MCP Prompt] {about}\nReturns a filled prompt template."),
            parameters: json!({"type": "object", "properties": properties, "required": required}),
            target: Target::Prompt {
                original: prompt.name.clone(),
            },
            link,
        }
    }

    /// What it reaches on its server: the tool's or prompt's own name, or the resource's URI.
    pub fn original_name(&self) -> &str {
        match &self.target {
            Target::Tool { original, .. } | Target::Prompt { original } => original,
            Target::Resource { uri } => uri,
        }
    }

    /// The server it belongs to.
    pub fn server(&self) -> &str {
        &self.link.server
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn read_only(&self) -> bool {
        match self.target {
            Target::Tool { read_only, .. } => read_only,
            Target::Resource { .. } | Target::Prompt { .. } => true,
        }
    }

    /// A server is a program nanobot cannot read: each tool call may run code, unless the user declared the
    /// server read-only (its own `readOnlyHint` is only the server's word; it still orders calls and trims
    /// results). Reading a resource or filling a prompt has no effect.
    fn effects(&self, _args: &Value) -> nanobot_tools::Effects {
        match self.target {
            Target::Tool { .. } if !self.link.declared_read_only => {
                nanobot_tools::Effects::opaque(&self.name)
            }
            _ => nanobot_tools::Effects::none(),
        }
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let options = self.link.render_options();
        let rendered = match &self.target {
            Target::Tool { original, .. } => {
                let params = CallToolRequestParams::new(original.clone()).with_arguments(object_args(args)?);
                let result = self
                    .link
                    .run("tools/call", ctx, self.link.peer.call_tool(params))
                    .await?;
                let mut rendered = content::render_tool_result(&result, &options)
                    .await
                    .map_err(|e| self.link.render_error(e))?;
                // What the server was refused on the network, whatever it made of it.
                let network: String = self
                    .link
                    .egress
                    .iter()
                    .flat_map(|proxy| proxy.notes())
                    .map(|note| format!("\n{note}"))
                    .collect();
                if result.is_error == Some(true) {
                    let text = if rendered.text.trim().is_empty() {
                        "the tool reported an error without a message".to_owned()
                    } else {
                        rendered.text
                    };
                    return Err(ToolError::Failed(format!(
                        "MCP tool '{original}' on server '{}' failed: {text}{network}",
                        self.link.server
                    )));
                }
                rendered.text.push_str(&network);
                rendered
            }
            Target::Resource { uri } => {
                let params = ReadResourceRequestParams::new(uri.clone());
                let result = self
                    .link
                    .run("resources/read", ctx, self.link.peer.read_resource(params))
                    .await?;
                content::render_resource(&result, &options)
                    .await
                    .map_err(|e| self.link.render_error(e))?
            }
            Target::Prompt { original } => {
                // Prompt arguments are strings on the wire.
                let arguments: JsonObject = object_args(args)?
                    .into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        let s = match v {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, Value::String(s))
                    })
                    .collect();
                let params = GetPromptRequestParams::new(original.clone()).with_arguments(arguments);
                let result = self
                    .link
                    .run("prompts/get", ctx, self.link.peer.get_prompt(params))
                    .await?;
                content::render_prompt(&result, &options)
                    .await
                    .map_err(|e| self.link.render_error(e))?
            }
        };
        Ok(output(rendered))
    }
}
