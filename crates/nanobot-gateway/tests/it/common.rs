//! Shared helpers: a gateway started from a real config pointing at MockLlm.

use std::collections::BTreeMap;
use std::time::Duration;

use nanobot_gateway::{Gateway, GatewayOptions};
use nanobot_testkit::{MockLlm, TempHome, WireFormat};
use serde_json::{Value, json};

/// Hang guard for awaits that must complete (a failure, never a timing assertion).
pub(crate) const GUARD: Duration = Duration::from_secs(60);

/// The API key the test gateways use.
pub(crate) const KEY: &str = "sk-gateway-test";

/// A config (as the Python nanobot writes it) for `mock`, random ports, with `patch` merged on top.
pub(crate) fn config_json(home: &TempHome, mock: &MockLlm, patch: Value) -> Value {
    let mut cfg = mock.nanobot_config(WireFormat::OpenAi);
    cfg["agents"]["defaults"]["workspace"] = json!(home.workspace());
    cfg["gateway"] = json!({"host": "127.0.0.1", "port": 0, "heartbeat": {"enabled": false}});
    cfg["api"] = json!({"host": "127.0.0.1", "port": 0, "apiKey": KEY, "timeout": 60});
    merge(&mut cfg, patch);
    cfg
}

fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Options for a full gateway over `home` with `patch` applied to the config.
pub(crate) fn options(home: &TempHome, mock: &MockLlm, patch: Value) -> GatewayOptions {
    let cfg = config_json(home, mock, patch);
    let path = home.write_config(&cfg);
    let loaded = nanobot_config::load_str(&cfg.to_string(), &path, &home.env()).unwrap();
    let mut env = nanobot_runtime::Environment::new(home.home(), home.env());
    env.config_path = Some(path);
    GatewayOptions::gateway(loaded.config, env)
}

/// A started gateway (ops server + API, no channels configured).
/// Why the gateway refuses to start with the `channels` block `channels` ("" when it starts).
pub(crate) async fn start_error(home: &TempHome, mock: &MockLlm, channels: Value) -> String {
    match Gateway::start(options(home, mock, json!({ "channels": channels }))).await {
        Ok(gw) => {
            let _ = tokio::time::timeout(GUARD, gw.shutdown()).await;
            String::new()
        }
        Err(e) => e.to_string(),
    }
}

pub(crate) async fn start(home: &TempHome, mock: &MockLlm) -> Gateway {
    nanobot_testkit::install_ring();
    Gateway::start(options(home, mock, json!({}))).await.unwrap()
}

pub(crate) fn client() -> reqwest::Client {
    nanobot_testkit::install_ring();
    reqwest::Client::new()
}

pub(crate) fn api_url(gw: &Gateway, path: &str) -> String {
    format!("http://{}{path}", gw.api_addr().unwrap())
}

pub(crate) fn ops_url(gw: &Gateway, path: &str) -> String {
    format!("http://{}{path}", gw.http_addr().unwrap())
}

/// Every session file under `HOME/.nanobot/sessions`, by the key in its metadata line, with its messages.
pub(crate) fn sessions(home: &TempHome) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    let root = home.nanobot_dir().join("sessions");
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                let text = std::fs::read_to_string(&p).unwrap();
                let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
                let meta = lines.next().unwrap();
                let key = meta["key"].as_str().unwrap().to_owned();
                out.insert(key, lines.filter(|v| v.get("_type").is_none()).collect());
            }
        }
    }
    out
}

/// The text of the messages with `role` in `messages`.
pub(crate) fn texts(messages: &[Value], role: &str) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == role)
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}
