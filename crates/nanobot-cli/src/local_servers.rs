//! Finding a model server on this machine's usual ports, so `onboard` can offer it: llama.cpp's `llama-server`
//! (8080), LM Studio (1234), Ollama (11434), vLLM (8000). One `GET /v1/models` per port, all at once, each
//! bounded; nothing is sent anywhere else.

use std::time::Duration;

/// A server kind: its usual port, its name, and the provider block to use for it (camelCase config key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) port: u16,
    pub(crate) server: &'static str,
    pub(crate) provider: &'static str,
}

/// The usual local ports.
pub(crate) const USUAL: [Candidate; 4] = [
    Candidate {
        port: 8080,
        server: "llama.cpp",
        provider: "custom",
    },
    Candidate {
        port: 1234,
        server: "LM Studio",
        provider: "lmStudio",
    },
    Candidate {
        port: 11434,
        server: "Ollama",
        provider: "ollama",
    },
    Candidate {
        port: 8000,
        server: "vLLM",
        provider: "vllm",
    },
];

/// How long one probe may take.
const PROBE: Duration = Duration::from_millis(800);

/// A server that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) candidate: Candidate,
    /// `http://127.0.0.1:PORT/v1`.
    pub(crate) base: String,
    /// The first model it lists.
    pub(crate) model: Option<String>,
}

/// Probes `candidates` on `host` (blocking; at most [`PROBE`] in all, on a thread of its own).
pub(crate) fn find(candidates: &[Candidate], host: &str) -> Vec<Found> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                    return Vec::new();
                };
                rt.block_on(probe_all(candidates, host))
            })
            .join()
            .unwrap_or_default()
    })
}

async fn probe_all(candidates: &[Candidate], host: &str) -> Vec<Found> {
    nanobot_providers::install_ring();
    let Ok(http) = nanobot_providers::http_client() else {
        return Vec::new();
    };
    let probes = candidates.iter().map(|c| {
        let http = http.clone();
        let base = format!("http://{host}:{}/v1", c.port);
        async move {
            let resp = http
                .get(format!("{base}/models"))
                .timeout(PROBE)
                .send()
                .await
                .ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let v: serde_json::Value = resp.json().await.ok()?;
            let data = v.get("data")?.as_array()?;
            let model = data
                .first()
                .and_then(|m| m.get("id"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
            Some(Found {
                candidate: *c,
                base,
                model,
            })
        }
    });
    tokio::time::timeout(PROBE * 2, futures::future::join_all(probes))
        .await
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

/// The offer `onboard` prints for the first server found.
pub(crate) fn offer(found: &Found) -> String {
    let c = found.candidate;
    let model = found.model.as_deref().unwrap_or("MODEL");
    format!(
        "  Found a local model server: {} at {}{}. To use it, put this in config.json:\n     \
         \"agents\": {{\"defaults\": {{\"provider\": \"{}\", \"model\": \"{model}\"}}}},\n     \
         \"providers\": {{\"{}\": {{\"apiBase\": \"{}\"}}}}\n     \
         (no API key needed; see docs/configuration.md, \"Local model servers\").\n",
        c.server,
        found.base,
        found
            .model
            .as_deref()
            .map(|m| format!(" serving `{m}`"))
            .unwrap_or_default(),
        c.provider,
        c.provider,
        found.base,
    )
}

#[cfg(test)]
mod tests {
    use nanobot_testkit::MockLlm;

    use super::*;

    #[test]
    fn a_server_answering_models_is_found_and_a_closed_port_is_not() {
        let mock = MockLlm::start_background();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let candidates = [
            Candidate {
                port: mock.addr().port(),
                server: "llama.cpp",
                provider: "custom",
            },
            Candidate {
                port: closed,
                server: "Ollama",
                provider: "ollama",
            },
        ];
        let found = find(&candidates, "127.0.0.1");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].candidate.server, "llama.cpp");
        assert_eq!(
            found[0].base,
            format!("http://127.0.0.1:{}/v1", mock.addr().port())
        );
        let text = offer(&found[0]);
        assert!(
            text.contains("\"provider\": \"custom\"") && text.contains(&found[0].base),
            "{text}"
        );
    }
}
