//! What a provider's server can do, learnt from its answers once and kept for the life of the process (one
//! [`Capabilities`] per client, shared by its clones): whether it streams when tools are offered (llama.cpp's
//! server and some proxies refuse, or answer with an empty stream), and whether the model writes tool calls
//! as text. After the first refusal every call goes straight to the form that works: one request per call.

use nanobot_util::lock;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::ProviderError;

/// Whether the server streams an answer when tools are offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamWithTools {
    /// Not tried yet.
    #[default]
    Unknown,
    /// It streamed.
    Yes,
    /// It refused (an error naming streaming and tools) or sent an empty stream where a plain request
    /// answered: calls with tools are sent without streaming from now on.
    No,
}

#[derive(Debug, Clone, Copy, Default)]
struct Learnt {
    stream_with_tools: StreamWithTools,
    text_tool_calls: bool,
    /// An empty streamed answer was asked again without streaming and was empty there too: the model's empty
    /// answers are answers, and a finished empty stream is not asked again.
    empty_answers: bool,
}

/// The capabilities learnt per model of one provider.
#[derive(Debug, Default)]
pub struct Capabilities {
    models: Mutex<HashMap<String, Learnt>>,
}

impl Capabilities {
    /// Nothing learnt yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, model: &str, f: impl FnOnce(&mut Learnt) -> T) -> T {
        let mut models = lock(&self.models);
        f(models.entry(model.to_owned()).or_default())
    }

    /// What is known about streaming with tools for `model`.
    pub fn stream_with_tools(&self, model: &str) -> StreamWithTools {
        self.with(model, |l| l.stream_with_tools)
    }

    /// True once `model` was seen writing tool calls as text.
    pub fn writes_tool_calls_as_text(&self, model: &str) -> bool {
        self.with(model, |l| l.text_tool_calls)
    }

    /// Records that the server does not stream with tools for `model` (logged once).
    pub(crate) fn refuse_stream_with_tools(&self, provider: &str, model: &str, why: &str) {
        let first = self.with(model, |l| {
            let first = l.stream_with_tools != StreamWithTools::No;
            l.stream_with_tools = StreamWithTools::No;
            first
        });
        if first {
            tracing::info!(
                provider,
                model,
                why,
                "the server does not stream when tools are offered; such calls are sent without streaming from now on"
            );
        }
    }

    /// Records that the server streamed an answer with tools for `model`.
    pub(crate) fn confirm_stream_with_tools(&self, model: &str) {
        self.with(model, |l| {
            if l.stream_with_tools == StreamWithTools::Unknown {
                l.stream_with_tools = StreamWithTools::Yes;
            }
        });
    }

    /// True once an empty streamed answer of `model` was asked again plainly and was empty there too.
    pub fn gives_empty_answers(&self, model: &str) -> bool {
        self.with(model, |l| l.empty_answers)
    }

    /// Records that `model` answered empty both streamed and plain: its empty answers are real.
    pub(crate) fn saw_empty_answer(&self, model: &str) {
        self.with(model, |l| l.empty_answers = true);
    }

    /// Records that `model` wrote tool calls as text (logged once).
    pub(crate) fn saw_text_tool_calls(&self, provider: &str, model: &str) {
        let first = self.with(model, |l| !std::mem::replace(&mut l.text_tool_calls, true));
        if first {
            tracing::info!(
                provider,
                model,
                "the model writes tool calls as text; they are read from its answers"
            );
        }
    }
}

/// True when `err` is a server refusing to stream because tools were offered (llama.cpp: "Cannot use tools
/// with stream"; others name streaming and tools or functions in a 4xx/5xx answer).
pub(crate) fn refuses_stream_with_tools(err: &ProviderError) -> bool {
    let message = match err {
        ProviderError::InvalidRequest { message, .. } => message,
        ProviderError::Transient {
            status: Some(_),
            message,
            ..
        } => message,
        _ => return false,
    };
    let m = message.to_ascii_lowercase();
    m.contains("stream") && (m.contains("tool") || m.contains("function"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_recognised_and_remembered_per_model() {
        let llama = ProviderError::from_http(
            "custom",
            500,
            None,
            r#"{"error":{"code":500,"message":"Cannot use tools with stream","type":"server_error"}}"#,
        );
        assert!(refuses_stream_with_tools(&llama));
        let other = ProviderError::from_http("custom", 400, None, r#"{"error":{"message":"bad model"}}"#);
        assert!(!refuses_stream_with_tools(&other));
        let caps = Capabilities::new();
        assert_eq!(caps.stream_with_tools("m"), StreamWithTools::Unknown);
        caps.refuse_stream_with_tools("custom", "m", "test");
        caps.confirm_stream_with_tools("m");
        assert_eq!(caps.stream_with_tools("m"), StreamWithTools::No);
        assert_eq!(caps.stream_with_tools("other"), StreamWithTools::Unknown);
        caps.confirm_stream_with_tools("other");
        assert_eq!(caps.stream_with_tools("other"), StreamWithTools::Yes);
    }
}
