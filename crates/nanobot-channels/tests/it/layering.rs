//! Channels meet the agent only on the bus: this crate must not reach the agent, the providers or any chat SDK, and
//! without the `download` feature it has no HTTP client.

use std::process::Command;

fn normal_deps(package: &str) -> Result<Vec<String>, std::io::Error> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect())
}

#[test]
fn channels_do_not_depend_on_the_agent_providers_or_chat_sdks() {
    let deps = normal_deps("nanobot-channels").unwrap();
    assert!(deps.iter().any(|d| d == "nanobot-bus"), "sanity: {deps:?}");
    for forbidden in [
        "nanobot-core",
        "nanobot-providers",
        "nanobot-tools",
        "teloxide",
        "serenity",
        "slack-morphism",
        "reqwest",
    ] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "nanobot-channels reaches {forbidden}"
        );
    }
}
