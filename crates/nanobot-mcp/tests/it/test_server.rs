//! An rmcp server written for these tests (shared with `examples/stdio_test_server.rs`):
//! tools for the edge cases (slow, huge, exit mid-call, error, image), one resource, one prompt.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared by the integration tests and the stdio example, each using a part"
)]

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourcesResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, Role,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};

/// 1x1 transparent PNG.
pub const TINY_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// Text to send back.
    pub message: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SlowArgs {
    /// Seconds to sleep.
    pub seconds: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct HugeArgs {
    /// Characters to return.
    pub size: usize,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ShellArgs {
    /// A command for `sh -c` (its output must not be held open by what it leaves running).
    pub command: String,
}

#[derive(Debug, Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
}

impl TestServer {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
}

impl Default for TestServer {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_router]
impl TestServer {
    #[tool(description = "Echo a message back")]
    fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> String {
        format!("Echo: {message}")
    }

    #[tool(description = "Sleep for a while, then answer")]
    async fn slow(&self, Parameters(SlowArgs { seconds }): Parameters<SlowArgs>) -> String {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        "finally done".to_owned()
    }

    #[tool(description = "Return a very large text")]
    fn huge(&self, Parameters(HugeArgs { size }): Parameters<HugeArgs>) -> String {
        let mut s = "0123456789".repeat(size / 10 + 1);
        s.truncate(size);
        s
    }

    #[tool(description = "Exit the server process in the middle of the call")]
    async fn exit_now(&self) -> String {
        std::process::exit(3)
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the widget is broken",
        )]))
    }

    #[tool(description = "Run a shell command; answers its exit status, stdout and stderr")]
    async fn shell(&self, Parameters(ShellArgs { command }): Parameters<ShellArgs>) -> String {
        let run = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .stdin(std::process::Stdio::null())
            .output();
        match run.await {
            Ok(o) => format!(
                "status={}\n{}{}",
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("status=-1\ncannot run sh: {e}"),
        }
    }

    #[tool(description = "Return a tiny image")]
    fn picture(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![
            ContentBlock::text("here is a picture"),
            ContentBlock::image(TINY_PNG, "image/png"),
        ]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("note://greeting", "greeting").with_description("A friendly greeting"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri == "note://greeting" {
            Ok(
                ReadResourceResult::new(vec![ResourceContents::text("hello from a resource", request.uri)])
                    .into(),
            )
        } else {
            Err(ErrorData::resource_not_found("no such resource", None))
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greet",
            Some("Greet someone"),
            Some(vec![
                PromptArgument::new("name")
                    .with_description("Who to greet")
                    .with_required(true),
            ]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(|v| v.as_str())
            .unwrap_or("nobody")
            .to_owned();
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Please greet {name} warmly."),
        )])
        .into())
    }
}
