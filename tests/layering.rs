//! The layering rules of ARCHITECTURE.md, checked on the real dependency graph (`cargo metadata`).
//!
//! - `nanobot-core` never reaches a channel crate or a chat-platform SDK: core and channels meet on the bus.
//! - `nanobot-core` never depends on `nanobot-config`: `nanobot-runtime` (the composition root) wires the config;
//!   nothing below the runtime reaches it.
//! - Channels never reach the agent core or the LLM providers.
//! - `nanobot-bus` and `nanobot-config` never reach an HTTP client.
//! - `nanobot-bus-nats` (a bus on NATS) is a bus and nothing more: it never reaches the agent, the providers, the
//!   config or a channel.
//! - The storage crates (sessions, cron, memory) never reach NATS: replicas' shared files come to them through the
//!   `nanobot_util::SharedFiles` trait; `nanobot-store-nats`, which implements it, reaches neither the agent, the
//!   providers, the config nor a channel.
//! - `nanobot-types` (the bottom floor) reaches no other crate of ours and no HTTP client.
//! - Tools, sessions, memory, MCP, skills and cron never reach `nanobot-providers`: they see models only
//!   through the conversation types and the `Provider` trait in `nanobot-types`. (Tools and MCP do use an
//!   HTTP client of their own, for `web_fetch`/`web_search` and MCP's HTTP transports.)
//! - Nothing in the workspace reaches OpenSSL, native-tls or aws-lc: rustls with ring only.
//!
//! The layering rules are checked on the host platform's graph (`--filter-platform`), which needs only the
//! sources a build of the tests has already fetched. The TLS rule is checked for every platform, which needs
//! every platform's sources: `scripts/test` runs `cargo fetch --locked` first; without them the test says so.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Which platforms' dependencies a graph covers.
#[derive(Clone, Copy)]
enum Platforms {
    /// The platform the tests run on: its sources are present once the tests are built.
    Host,
    /// Every platform in `Cargo.lock`: needs `cargo fetch --locked` on a fresh machine.
    All,
}

/// The host target triple, as `rustc -vV` reports it.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("run rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV prints the host triple")
        .trim()
        .to_string()
}

/// Package name → names of the packages it depends on as normal or build dependencies (not dev).
fn graph_for(platforms: Platforms) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--locked", "--offline"]);
    if let Platforms::Host = platforms {
        cmd.args(["--filter-platform", &host_triple()]);
    }
    let out = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed (for every platform's graph, run `cargo fetch --locked` first, as scripts/test \
         does): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let members: BTreeSet<String> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| name_of[id.as_str().unwrap()].to_string())
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let from = name_of[node["id"].as_str().unwrap()].to_string();
        let set = edges.entry(from).or_default();
        for dep in node["deps"].as_array().unwrap() {
            let runtime = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if runtime {
                set.insert(name_of[dep["pkg"].as_str().unwrap()].to_string());
            }
        }
    }
    (edges, members)
}

/// The host platform's graph: what the layering rules are about.
fn graph() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    graph_for(Platforms::Host)
}

/// Workspace members that are chat-channel adapters: the channels base and every member that depends on it
/// directly, except the crates that compose everything (gateway, CLI, runtime).
fn channel_crates(edges: &BTreeMap<String, BTreeSet<String>>, members: &BTreeSet<String>) -> Vec<String> {
    const COMPOSERS: &[&str] = &[
        "nanobot-gateway",
        "nanobot-cli",
        "nanobot-runtime",
        "nanobot",
        "nanobot-gateway-bin",
    ];
    members
        .iter()
        .filter(|m| {
            m.as_str() == "nanobot-channels"
                || (!COMPOSERS.contains(&m.as_str())
                    && edges
                        .get(*m)
                        .is_some_and(|deps| deps.contains("nanobot-channels")))
        })
        .cloned()
        .collect()
}

fn reachable(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(name) = stack.pop() {
        for dep in edges.get(&name).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                stack.push(dep.clone());
            }
        }
    }
    seen
}

fn assert_never_reaches(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, forbidden: &[&str]) {
    let reach = reachable(edges, from);
    let bad: Vec<_> = forbidden.iter().filter(|f| reach.contains(**f)).collect();
    assert!(
        bad.is_empty(),
        "{from} must not depend on {bad:?} (see ARCHITECTURE.md, layering)"
    );
}

#[test]
fn core_never_reaches_channels() {
    let (edges, members) = graph();
    assert!(
        members.contains("nanobot-core"),
        "nanobot-core is a workspace member"
    );
    let mut forbidden = channel_crates(&edges, &members);
    forbidden.extend(["teloxide", "serenity", "slack-morphism"].map(String::from));
    let forbidden: Vec<&str> = forbidden.iter().map(String::as_str).collect();
    assert_never_reaches(&edges, "nanobot-core", &forbidden);
}

/// The composition root: `nanobot-core` takes typed settings and never depends on the `config.json` schema
/// itself; `nanobot-runtime` turns the config into an agent (it depends on core and config); the gateway and
/// the CLI compose over the runtime; nothing below the runtime reaches it.
#[test]
fn runtime_is_the_composition_root_and_core_knows_no_config() {
    let (edges, members) = graph();
    assert!(
        members.contains("nanobot-runtime"),
        "nanobot-runtime is a workspace member"
    );
    assert!(
        !edges["nanobot-core"].contains("nanobot-config"),
        "nanobot-core must not depend on nanobot-config (it takes typed settings; nanobot-runtime wires the \
         config)"
    );
    for dep in ["nanobot-core", "nanobot-config"] {
        assert!(
            edges["nanobot-runtime"].contains(dep),
            "nanobot-runtime composes {dep}"
        );
    }
    for top in ["nanobot-gateway", "nanobot-cli"] {
        assert!(
            edges[top].contains("nanobot-runtime"),
            "{top} runs the agent through nanobot-runtime"
        );
    }
    const ABOVE: &[&str] = &[
        "nanobot-runtime",
        "nanobot-gateway",
        "nanobot-cli",
        "nanobot",
        "nanobot-gateway-bin",
    ];
    for m in members.iter().filter(|m| !ABOVE.contains(&m.as_str())) {
        assert_never_reaches(&edges, m, &["nanobot-runtime"]);
    }
}

#[test]
fn channels_never_reach_core_or_providers() {
    let (edges, members) = graph();
    let channels = channel_crates(&edges, &members);
    for known in [
        "nanobot-channels",
        "nanobot-telegram",
        "nanobot-discord",
        "nanobot-slack",
        "nanobot-websocket",
    ] {
        assert!(
            channels.iter().any(|c| c == known),
            "{known} is found as a channel crate"
        );
    }
    for channel in &channels {
        assert_never_reaches(
            &edges,
            channel,
            &["nanobot-core", "nanobot-providers", "nanobot-tools"],
        );
    }
}

#[test]
fn bus_and_config_never_reach_an_http_client() {
    let (edges, members) = graph();
    for base in ["nanobot-bus", "nanobot-config"] {
        assert!(members.contains(base), "{base} is a workspace member");
        assert_never_reaches(&edges, base, &["reqwest", "hyper", "nanobot-providers"]);
    }
}

#[test]
fn the_nats_bus_is_only_a_bus() {
    let (edges, members) = graph();
    assert!(
        members.contains("nanobot-bus-nats"),
        "nanobot-bus-nats is a workspace member"
    );
    assert_never_reaches(
        &edges,
        "nanobot-bus-nats",
        &[
            "nanobot-core",
            "nanobot-providers",
            "nanobot-config",
            "nanobot-channels",
            "reqwest",
        ],
    );
}

#[test]
fn storage_never_reaches_nats_and_the_shared_files_are_only_files() {
    let (edges, members) = graph();
    assert!(
        members.contains("nanobot-store-nats"),
        "nanobot-store-nats is a workspace member"
    );
    for storage in ["nanobot-sessions", "nanobot-cron", "nanobot-memory"] {
        assert_never_reaches(
            &edges,
            storage,
            &["async-nats", "nanobot-bus-nats", "nanobot-store-nats"],
        );
    }
    assert_never_reaches(
        &edges,
        "nanobot-store-nats",
        &[
            "nanobot-core",
            "nanobot-providers",
            "nanobot-config",
            "nanobot-channels",
            "nanobot-sessions",
            "reqwest",
        ],
    );
}

#[test]
fn types_are_the_bottom_floor() {
    let (edges, members) = graph();
    assert!(
        members.contains("nanobot-types"),
        "nanobot-types is a workspace member"
    );
    let ours: Vec<&str> = members
        .iter()
        .map(String::as_str)
        .filter(|m| *m != "nanobot-types")
        .collect();
    assert_never_reaches(&edges, "nanobot-types", &ours);
    assert_never_reaches(&edges, "nanobot-types", &["reqwest", "hyper", "rustls"]);
}

#[test]
fn lower_floors_never_reach_providers() {
    let (edges, members) = graph();
    for lower in [
        "nanobot-tools",
        "nanobot-sessions",
        "nanobot-memory",
        "nanobot-mcp",
        "nanobot-skills",
        "nanobot-cron",
    ] {
        assert!(members.contains(lower), "{lower} is a workspace member");
        assert_never_reaches(&edges, lower, &["nanobot-providers"]);
    }
    for user in ["nanobot-tools", "nanobot-memory"] {
        assert!(
            edges[user].contains("nanobot-types"),
            "{user} takes the conversation types from nanobot-types"
        );
    }
}

#[test]
fn rustls_with_ring_only() {
    // Every platform: a TLS stack pulled in only on macOS or Windows is still a TLS stack we ship.
    let (edges, members) = graph_for(Platforms::All);
    for member in &members {
        assert_never_reaches(
            &edges,
            member,
            &["openssl-sys", "openssl", "native-tls", "aws-lc-sys", "aws-lc-rs"],
        );
    }
}
