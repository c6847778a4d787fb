//! The layering rules of ARCHITECTURE.md, checked on the real dependency graph (`cargo metadata`).
//!
//! - `nanobot-core` never reaches a channel crate or a chat-platform SDK: core and channels meet on the bus.
//! - Channels never reach the agent core or the LLM providers.
//! - `nanobot-bus` and `nanobot-config` never reach an HTTP client.
//! - Nothing in the workspace reaches OpenSSL, native-tls or aws-lc: rustls with ring only.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Package name → names of the packages it depends on as normal or build dependencies (not dev).
fn graph() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
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
    assert_never_reaches(
        &edges,
        "nanobot-core",
        &[
            "nanobot-channels",
            "nanobot-telegram",
            "nanobot-discord",
            "nanobot-slack",
            "teloxide",
            "serenity",
            "slack-morphism",
        ],
    );
}

#[test]
fn channels_never_reach_core_or_providers() {
    let (edges, members) = graph();
    for channel in [
        "nanobot-channels",
        "nanobot-telegram",
        "nanobot-discord",
        "nanobot-slack",
        "nanobot-websocket",
    ] {
        if members.contains(channel) {
            assert_never_reaches(
                &edges,
                channel,
                &["nanobot-core", "nanobot-providers", "nanobot-tools"],
            );
        }
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
fn rustls_with_ring_only() {
    let (edges, members) = graph();
    for member in &members {
        assert_never_reaches(
            &edges,
            member,
            &["openssl-sys", "openssl", "native-tls", "aws-lc-sys", "aws-lc-rs"],
        );
    }
}
