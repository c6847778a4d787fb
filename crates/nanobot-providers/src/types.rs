//! Conversation types shared by every provider.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool as a model sees it: a name, what it does, and the JSON Schema of its arguments.
///
/// This is all a provider ever learns about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`read_file`, `mcp_github_search`).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema (an `object` schema) of the arguments.
    pub parameters: Value,
}
