//! `nanobot doctor --online`: one tiny real request (one output token) to each configured model, the default
//! and the fallbacks, so a wrong address, key or model name shows up before the first chat. Each request is
//! bounded; the finding names the provider and the endpoint (never the key) and, on failure, the cause and what
//! to change.

use std::time::Duration;

use nanobot_providers::{ChatMessage, ChatRequest, ProviderFactory};

use crate::status::Finding;

/// The bound of one check.
const EACH: Duration = Duration::from_secs(30);

/// Checks each configured model against its provider.
pub(crate) fn findings(config: &nanobot_config::Config, vars: &nanobot_util::EnvMap) -> Vec<Finding> {
    let defaults = &config.resolved_defaults();
    let mut models = vec![defaults.model.clone()];
    models.extend(defaults.fallback_models.iter().cloned());
    let factory = ProviderFactory::new(&config.providers, defaults, vars.clone());
    let window = defaults.context_window_tokens;
    crate::status::on_own_runtime(|| async {
        let mut out = Vec::new();
        for model in &models {
            out.push(check(&factory, model).await);
        }
        out.extend(check_window(&factory, &defaults.model, window).await);
        out
    })
    .unwrap_or_else(|| {
        vec![Finding::problem(
            "online check: cannot start a tokio runtime",
            "run `nanobot doctor --online` again",
        )]
    })
}

/// For a model on a server of this machine or network, the context window the server serves against
/// `agents.defaults.contextWindowTokens` (`configured`): larger, and long chats fail instead of being trimmed.
async fn check_window(factory: &ProviderFactory, model: &str, configured: u32) -> Option<Finding> {
    let resolved = factory.resolve(model).ok()?;
    if !nanobot_providers::is_local_url(&resolved.base_url) {
        return None;
    }
    let http = nanobot_providers::http_client().ok()?;
    let base = resolved.base_url.trim_end_matches('/');
    let models = async {
        let resp = http
            .get(format!("{base}/models"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        resp.json::<serde_json::Value>().await.ok()
    }
    .await
    .unwrap_or_default();
    let at = resolved.endpoint.display_url();
    let Some(w) =
        crate::local_servers::context_window(&http, base, Some(&resolved.wire_model), &models).await
    else {
        return Some(Finding::warn(
            format!(
                "the server at {at} does not say how much context it serves (contextWindowTokens is {configured})"
            ),
            "set `agents.defaults.contextWindowTokens` to the size the server was started with (llama-cpp-python: \
             --n_ctx, 2048 unless given)",
        ));
    };
    Some(if w.tokens < configured {
        Finding::problem(
            format!(
                "the server at {at} serves {} tokens of context ({}), but agents.defaults.contextWindowTokens is \
                 {configured}: long chats fail instead of being trimmed",
                w.tokens, w.source
            ),
            format!(
                "set `agents.defaults.contextWindowTokens` to {} (and `maxTokens` to {} or less)",
                w.tokens,
                w.tokens / 4
            ),
        )
    } else {
        Finding::ok(format!(
            "the server at {at} serves {} tokens of context ({}); contextWindowTokens is {configured}",
            w.tokens, w.source
        ))
    })
}

async fn check(factory: &ProviderFactory, model: &str) -> Finding {
    let resolved = match factory.resolve(model) {
        Ok(r) => r,
        Err(e) => return Finding::problem(format!("model `{model}`: {e}"), "see the message"),
    };
    let at = resolved.endpoint.display_url();
    let client = match factory.client(model) {
        Ok(c) => c,
        Err(e) => return Finding::problem(format!("model `{model}`: {e}"), "see the message"),
    };
    let request = ChatRequest::new(model, vec![ChatMessage::user("Reply with OK.")]).with_max_tokens(1);
    match tokio::time::timeout(EACH, client.chat(request)).await {
        Ok(Ok(_)) => Finding::ok(format!(
            "model `{model}` answers (provider {} at {at})",
            resolved.name
        )),
        Ok(Err(e)) => Finding::problem(
            format!("model `{model}` (provider {} at {at}) failed: {e}", resolved.name),
            "the message above names the cause and the setting to change",
        ),
        Err(_) => Finding::problem(
            format!(
                "model `{model}` (provider {} at {at}) did not answer within {} s",
                resolved.name,
                EACH.as_secs()
            ),
            "check that the server is running and not overloaded (a local model may still be loading)",
        ),
    }
}
