//! Finding a model server on this machine's usual ports, so `onboard` can offer it: llama.cpp's `llama-server`
//! (8080), LM Studio (1234), Ollama (11434), vLLM (8000). One `GET /v1/models` per port, all at once, each
//! bounded; nothing is sent anywhere else. For a server that answers, the context window it serves is asked where
//! each kind reports it ([`context_window`]), so the config matches the machine.

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
    /// The context window it serves that model with, when it says.
    pub(crate) window: Option<Window>,
}

/// A context window a server reports, and where it said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) tokens: u32,
    /// What reported it, for the user (`llama.cpp /props`, `Ollama's default`, …).
    pub(crate) source: &'static str,
}

/// The context Ollama gives a model when neither the model nor the server sets one.
const OLLAMA_DEFAULT_CONTEXT: u32 = 4096;

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
            let window = context_window(&http, &base, model.as_deref(), &v).await;
            Some(Found {
                candidate: *c,
                base,
                model,
                window,
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

/// The context window the server at `base` (`http://host:port/v1`) serves `model` with, asked where each kind
/// reports it: the `/v1/models` listing `models` (vLLM's `max_model_len`, LM Studio's and others'
/// `context_length`), llama.cpp's `/props`, LM Studio's `/api/v0/models/{model}`, Ollama's `/api/show` (the
/// model's `num_ctx`) and `/api/ps` (a loaded model's context), else Ollama's default. `None` when the server does
/// not say (llama-cpp-python). Each request is bounded by [`PROBE`].
pub(crate) async fn context_window(
    http: &nanobot_providers::reqwest::Client,
    base: &str,
    model: Option<&str>,
    models: &serde_json::Value,
) -> Option<Window> {
    use serde_json::Value;
    let tokens = |v: Option<&Value>| {
        v.and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    let entry = models.get("data").and_then(Value::as_array).and_then(|data| {
        data.iter()
            .find(|m| model.is_some_and(|id| m.get("id").and_then(Value::as_str) == Some(id)))
            .or_else(|| data.first())
    });
    if let Some(e) = entry {
        for key in [
            "max_model_len",
            "loaded_context_length",
            "context_length",
            "max_context_length",
        ] {
            if let Some(n) = tokens(e.get(key)) {
                return Some(Window {
                    tokens: n,
                    source: "its model list",
                });
            }
        }
    }
    let root = base.trim_end_matches('/').trim_end_matches("/v1");
    let get = |path: String| {
        let http = http.clone();
        async move {
            let resp = http.get(path).timeout(PROBE).send().await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            resp.json::<Value>().await.ok()
        }
    };
    if let Some(props) = get(format!("{root}/props")).await {
        let n = tokens(props.pointer("/default_generation_settings/n_ctx"))
            .or_else(|| tokens(props.get("n_ctx")));
        if let Some(n) = n {
            return Some(Window {
                tokens: n,
                source: "llama.cpp /props",
            });
        }
    }
    let model = model?;
    if let Some(m) = get(format!("{root}/api/v0/models/{model}")).await
        && let Some(n) =
            tokens(m.get("loaded_context_length")).or_else(|| tokens(m.get("max_context_length")))
    {
        return Some(Window {
            tokens: n,
            source: "LM Studio /api/v0/models",
        });
    }
    let show = http
        .post(format!("{root}/api/show"))
        .json(&serde_json::json!({ "model": model }))
        .timeout(PROBE)
        .send()
        .await
        .ok()
        .filter(|r| r.status().is_success())?
        .json::<Value>()
        .await
        .ok()?;
    // The model's own `num_ctx` (a Modelfile `PARAMETER`), one "name value" pair per line.
    let num_ctx = show.get("parameters").and_then(Value::as_str).and_then(|p| {
        p.lines().find_map(|line| {
            let mut parts = line.split_whitespace();
            (parts.next() == Some("num_ctx")).then(|| parts.next()?.parse::<u32>().ok())?
        })
    });
    if let Some(n) = num_ctx.filter(|n| *n > 0) {
        return Some(Window {
            tokens: n,
            source: "the model's num_ctx (Ollama /api/show)",
        });
    }
    let loaded = get(format!("{root}/api/ps")).await.and_then(|ps| {
        ps.get("models")?
            .as_array()?
            .iter()
            .find(|m| m.get("name").and_then(Value::as_str) == Some(model))
            .and_then(|m| tokens(m.get("context_length")))
    });
    Some(match loaded {
        Some(n) => Window {
            tokens: n,
            source: "the loaded model (Ollama /api/ps)",
        },
        None => Window {
            tokens: OLLAMA_DEFAULT_CONTEXT,
            source: "Ollama's default (OLLAMA_CONTEXT_LENGTH on the server changes it)",
        },
    })
}

/// The offer `onboard` prints for the first server found.
pub(crate) fn offer(found: &Found) -> String {
    let c = found.candidate;
    let model = found.model.as_deref().unwrap_or("MODEL");
    format!(
        "  Found a local model server: {} at {}{}. To use it, put this in config.json:\n     \
         \"agents\": {{\"defaults\": {{\"provider\": \"{}\", \"model\": \"{model}\"}}}},\n     \
         \"providers\": {{\"{}\": {{\"apiBase\": \"{}\"}}}}\n     \
         (no API key needed; see docs/configuration.md, \"Local model servers\").\n{}",
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
        found
            .window
            .map(|w| format!(
                "     It serves {} tokens of context ({}): set `agents.defaults.contextWindowTokens` to that.\n",
                w.tokens, w.source
            ))
            .unwrap_or_default(),
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

    /// Each kind of server, answered as it answers (shapes from their documentation and sources): the window is
    /// read where that kind reports it, a training size is never taken for the served one, and a server that does
    /// not say gets none.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_context_window_is_asked_where_each_kind_of_server_reports_it() {
        use nanobot_testkit::file_server::{Answer, FileServer};
        use serde_json::json;
        let json = |v: serde_json::Value| Answer::file(v.to_string().as_bytes(), "application/json");
        let list = |entry: serde_json::Value| json!({"object": "list", "data": [entry]});
        let plain = list(json!({"id": "m1", "object": "model", "owned_by": "me", "permissions": []}));
        type Case<'a> = (&'a str, Vec<(&'a str, Answer)>, Option<(u32, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                "vLLM",
                vec![(
                    "/v1/models",
                    json(list(
                        json!({"id": "m1", "object": "model", "max_model_len": 32768}),
                    )),
                )],
                Some((32768, "model list")),
            ),
            (
                "llama.cpp",
                vec![
                    (
                        "/v1/models",
                        json(list(
                            json!({"id": "m1", "object": "model", "meta": {"n_ctx_train": 131072}}),
                        )),
                    ),
                    (
                        "/props",
                        json(json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1})),
                    ),
                ],
                Some((8192, "/props")),
            ),
            (
                "LM Studio",
                vec![
                    ("/v1/models", json(plain.clone())),
                    (
                        "/api/v0/models/m1",
                        json(
                            json!({"id": "m1", "state": "loaded", "max_context_length": 131072, "loaded_context_length": 4096}),
                        ),
                    ),
                ],
                Some((4096, "LM Studio")),
            ),
            (
                "Ollama, num_ctx",
                vec![
                    ("/v1/models", json(plain.clone())),
                    (
                        "/api/show",
                        json(
                            json!({"parameters": "num_ctx                        16384\nstop \"<|eot_id|>\"", "model_info": {"llama.context_length": 131072}}),
                        ),
                    ),
                ],
                Some((16384, "num_ctx")),
            ),
            (
                "Ollama, loaded",
                vec![
                    ("/v1/models", json(plain.clone())),
                    (
                        "/api/show",
                        json(json!({"parameters": "stop x", "model_info": {"llama.context_length": 131072}})),
                    ),
                    (
                        "/api/ps",
                        json(json!({"models": [{"name": "m1", "model": "m1", "context_length": 8192}]})),
                    ),
                ],
                Some((8192, "/api/ps")),
            ),
            (
                "Ollama, default",
                vec![
                    ("/v1/models", json(plain.clone())),
                    (
                        "/api/show",
                        json(json!({"model_info": {"llama.context_length": 131072}})),
                    ),
                ],
                Some((4096, "Ollama's default")),
            ),
            (
                "llama-cpp-python",
                vec![("/v1/models", json(plain.clone()))],
                None,
            ),
        ];
        for (kind, routes, want) in cases {
            let server = FileServer::start(routes).await;
            let port: u16 = server.url("").rsplit(':').next().unwrap().parse().unwrap();
            let candidates = [Candidate {
                port,
                server: "test",
                provider: "custom",
            }];
            let found = tokio::task::block_in_place(|| find(&candidates, "127.0.0.1"));
            assert_eq!(found.len(), 1, "{kind}");
            assert_eq!(found[0].model.as_deref(), Some("m1"), "{kind}");
            match (found[0].window, want) {
                (Some(w), Some((tokens, source))) => {
                    assert_eq!(w.tokens, tokens, "{kind}");
                    assert!(w.source.contains(source), "{kind}: {}", w.source);
                    assert!(offer(&found[0]).contains(&tokens.to_string()), "{kind}");
                }
                (None, None) => {}
                (got, want) => panic!("{kind}: got {got:?}, want {want:?}"),
            }
        }
    }
}
