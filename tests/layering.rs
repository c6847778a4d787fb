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
//! - Above all: every crate has a floor (docs/architecture.md, "Floors", which must say the same) and every edge
//!   points to a lower floor and within the crate's narrower list, but for a short list of decided exceptions;
//!   `crates/README.md` has a line for every crate.
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

/// Every crate of the workspace and its floor (docs/architecture.md, "Floors"): an edge points to a lower
/// floor, never to an equal or higher one, except the few in [`EXCEPTIONS`]. A new crate fails the test until it
/// is given a floor here and in the architecture page.
const FLOORS: &[(&str, u8)] = &[
    ("nanobot-types", 0),
    ("nanobot-util", 0),
    ("nanobot-logging", 0),
    ("nanobot-config", 1),
    ("nanobot-bus", 1),
    ("nanobot-http", 1),
    ("nanobot-ssrf", 1),
    ("nanobot-bus-nats", 2),
    ("nanobot-store-nats", 2),
    ("nanobot-providers", 2),
    ("nanobot-tools", 2),
    ("nanobot-mcp", 2),
    ("nanobot-sessions", 2),
    ("nanobot-memory", 2),
    ("nanobot-skills", 2),
    ("nanobot-cron", 2),
    ("nanobot-usage", 2),
    ("nanobot-core", 3),
    ("nanobot-channels", 3),
    ("nanobot-telegram", 3),
    ("nanobot-discord", 3),
    ("nanobot-slack", 3),
    ("nanobot-feishu", 3),
    ("nanobot-dingtalk", 3),
    ("nanobot-websocket", 3),
    ("nanobot-email", 3),
    ("nanobot-whatsapp", 3),
    ("nanobot-qq", 3),
    ("nanobot-napcat", 3),
    ("nanobot-mattermost", 3),
    ("nanobot-msteams", 3),
    ("nanobot-signal", 3),
    ("nanobot-matrix", 3),
    ("nanobot-wecom", 3),
    ("nanobot-weixin", 3),
    ("nanobot-mochat", 3),
    ("nanobot-runtime", 4),
    ("nanobot-gateway", 5),
    ("nanobot-cli", 5),
    ("nanobot", 6),
    ("nanobot-gateway-bin", 6),
];

/// Crates whose floor allows more than they may use: the crates of ours each may depend on (the architecture's
/// "may depend on" column). Crates not listed may use anything on a lower floor.
const NARROWER: &[(&str, &[&str])] = &[
    ("nanobot-util", &["nanobot-types"]),
    ("nanobot-logging", &["nanobot-types"]),
    ("nanobot-config", &["nanobot-types", "nanobot-util"]),
    ("nanobot-bus", &["nanobot-types", "nanobot-util"]),
    ("nanobot-http", &["nanobot-util"]),
    ("nanobot-ssrf", &["nanobot-util"]),
    ("nanobot-bus-nats", &["nanobot-bus", "nanobot-util"]),
    ("nanobot-store-nats", &["nanobot-bus", "nanobot-util"]),
    (
        "nanobot-providers",
        &["nanobot-types", "nanobot-util", "nanobot-http"],
    ),
    (
        "nanobot-tools",
        &["nanobot-types", "nanobot-util", "nanobot-ssrf"],
    ),
    ("nanobot-mcp", &["nanobot-types", "nanobot-util", "nanobot-tools"]),
    ("nanobot-sessions", &["nanobot-types", "nanobot-util"]),
    ("nanobot-memory", &["nanobot-types", "nanobot-util"]),
    ("nanobot-skills", &["nanobot-types", "nanobot-util"]),
    ("nanobot-cron", &["nanobot-types", "nanobot-util"]),
    ("nanobot-usage", &["nanobot-types", "nanobot-util"]),
    // Channels meet the agent on the bus: never core, providers or tools.
    (
        "nanobot-channels",
        &["nanobot-bus", "nanobot-config", "nanobot-util", "nanobot-ssrf"],
    ),
];

/// The edges the floors alone would refuse, each with the reason it stands. Keep this short: a new entry is a
/// design decision, written in docs/architecture.md too.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "nanobot-mcp",
        "nanobot-tools",
        "an MCP server's tools, prompts and resources are `Tool`s in the one registry",
    ),
    (
        "nanobot-store-nats",
        "nanobot-bus-nats",
        "the shared files travel on the bus's authenticated connection and sealed stream",
    ),
    (
        "nanobot-memory",
        "nanobot-sessions",
        "consolidation reads the part of a session that is not consolidated yet",
    ),
    (
        "nanobot-memory",
        "nanobot-tools",
        "Dream edits the memory files with the built-in file tools, and memory_search is a `Tool`",
    ),
    (
        "nanobot-providers",
        "nanobot-config",
        "the factory builds clients from config.json's provider blocks (not yet typed settings of its own)",
    ),
    (
        "nanobot-telegram",
        "nanobot-http",
        "the webhook receiver is an HTTP listener with the shared bounds",
    ),
    (
        "nanobot-cli",
        "nanobot-gateway",
        "`nanobot gateway` runs the daemon from the command line's library",
    ),
];

fn floor_of(name: &str) -> Option<u8> {
    FLOORS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// What the floors, the narrower lists and the exceptions make of one edge: `None` when it may stand, else why
/// not. A channel adapter (a crate depending on `nanobot-channels`) may use its base and what the base may.
fn refused(from: &str, to: &str, adapters: &[String]) -> Option<String> {
    let adapter = from != "nanobot-channels" && adapters.iter().any(|a| a == from);
    if EXCEPTIONS.iter().any(|(f, t, _)| *f == from && *t == to) || (adapter && to == "nanobot-channels") {
        return None;
    }
    let (Some(ff), Some(tf)) = (floor_of(from), floor_of(to)) else {
        return Some("a crate without a floor".into());
    };
    if tf >= ff {
        return Some(format!("floor {ff} → floor {tf}: an arrow may only point down"));
    }
    let narrower = if adapter {
        NARROWER.iter().find(|(n, _)| *n == "nanobot-channels")
    } else {
        NARROWER.iter().find(|(n, _)| *n == from)
    };
    match narrower {
        Some((_, allowed)) if !allowed.contains(&to) => {
            Some(format!("outside what {from} may use: {allowed:?}"))
        }
        _ => None,
    }
}

#[test]
fn every_crate_has_a_floor_and_every_edge_points_down() {
    let (edges, members) = graph();
    let adapters = channel_crates(&edges, &members);
    let ours = |m: &str| members.contains(m);
    let mut problems = Vec::new();
    for m in &members {
        if m == "nanobot-testkit" {
            continue;
        }
        if floor_of(m).is_none() {
            problems.push(format!(
                "{m} has no floor: give it one in tests/layering.rs (FLOORS) and docs/architecture.md (Floors)"
            ));
        }
    }
    for (from, deps) in edges.iter().filter(|(f, _)| ours(f)) {
        for to in deps.iter().filter(|d| ours(d)) {
            if to == "nanobot-testkit" {
                problems.push(format!(
                    "{from} → nanobot-testkit: the test kit is a dev-dependency only"
                ));
                continue;
            }
            if from == "nanobot-testkit" {
                continue;
            }
            if let Some(why) = refused(from, to, &adapters) {
                problems.push(format!("{from} → {to}: {why}"));
            }
        }
    }
    // Every exception is an edge that exists: one the code no longer has is taken off the list.
    for (from, to, _) in EXCEPTIONS {
        if !edges.get(*from).is_some_and(|d| d.contains(*to)) {
            problems.push(format!("exception {from} → {to} is no edge any more: remove it"));
        }
    }
    assert!(
        problems.is_empty(),
        "the dependency graph leaves the floors of docs/architecture.md:\n  {}",
        problems.join("\n  ")
    );
}

/// The rule itself refuses what the architecture refuses (so the test above can fail).
#[test]
fn the_floor_rule_refuses_edges_up_sideways_and_outside_a_narrower_list() {
    let adapters = vec!["nanobot-telegram".to_string(), "nanobot-channels".to_string()];
    assert!(
        refused("nanobot-config", "nanobot-core", &adapters).is_some(),
        "up"
    );
    assert!(
        refused("nanobot-tools", "nanobot-sessions", &adapters).is_some(),
        "sideways"
    );
    assert!(
        refused("nanobot-mcp", "nanobot-config", &adapters).is_some(),
        "outside mcp's list"
    );
    assert!(
        refused("nanobot-telegram", "nanobot-tools", &adapters).is_some(),
        "a channel reaching tools"
    );
    assert!(
        refused("nanobot-telegram", "nanobot-channels", &adapters).is_none(),
        "its base"
    );
    assert!(
        refused("nanobot-core", "nanobot-tools", &adapters).is_none(),
        "down"
    );
    assert!(
        refused("nanobot-memory", "nanobot-tools", &adapters).is_none(),
        "a listed exception"
    );
    assert!(
        refused("nanobot-new", "nanobot-util", &adapters).is_some(),
        "no floor"
    );
}

/// docs/architecture.md's floor table gives every crate the floor this test gives it.
#[test]
fn the_architecture_page_lists_every_crate_on_its_floor() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md"))
        .expect("read docs/architecture.md");
    let section = page
        .split("\n## Floors")
        .nth(1)
        .expect("docs/architecture.md has a `## Floors` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut listed: BTreeMap<String, u8> = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(Ok(floor)) = cells.get(1).map(|c| c.parse::<u8>()) else {
            continue;
        };
        for name in cells[2].split('`').skip(1).step_by(2) {
            listed.insert(name.to_string(), floor);
        }
    }
    let expected: BTreeMap<String, u8> = FLOORS.iter().map(|(n, f)| (n.to_string(), *f)).collect();
    assert_eq!(
        listed, expected,
        "the Floors table of docs/architecture.md and FLOORS differ"
    );

    // crates/README.md: one line per library crate (the two programs live in bins/).
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../crates/README.md"))
        .expect("read crates/README.md");
    let (_, members) = graph();
    let missing: Vec<&String> = members
        .iter()
        .filter(|m| !["nanobot", "nanobot-gateway-bin"].contains(&m.as_str()))
        .filter(|m| !readme.contains(&format!("| `{m}` |")))
        .collect();
    assert!(missing.is_empty(), "crates/README.md has no line for {missing:?}");
}
