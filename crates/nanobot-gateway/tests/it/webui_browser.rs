//! The WebUI in a real browser: headless Debian Chromium driven by playwright-core (tests/webui/browser.mjs)
//! against a gateway whose agent talks to MockLlm. Fails under CI when Chromium or playwright-core is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::peers::{node, require, require_node_package};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{GUARD, options};

/// A 1×1 red PNG.
const RED_DOT: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn write(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webui_chats_streams_switches_stops_uploads_and_reloads_in_chromium() {
    let chromium = Path::new("/usr/bin/chromium");
    let Some(chromium) = require(
        "chromium (/usr/bin/chromium)",
        chromium.exists().then_some(chromium),
    ) else {
        return;
    };
    let Some(playwright) = require_node_package("playwright-core") else {
        return;
    };
    let Some(node) = require("node", node()) else {
        return;
    };

    let home = TempHome::new();
    let ws = home.workspace();
    write(ws.join("memory/MEMORY.md"), "# Memory\n\n- likes green tea\n");
    write(
        ws.join("memory/history.jsonl"),
        "{\"cursor\":1,\"timestamp\":\"2026-11-20 10:00\",\"content\":\"Talked about plants\"}\n",
    );
    let job = json!({"version": 1, "jobs": [{
        "id": "w1", "name": "water the plants", "enabled": true,
        "schedule": {"kind": "every", "atMs": null, "everyMs": 86_400_000, "expr": null, "tz": null},
        "payload": {"kind": "agent_turn", "message": "Water the plants", "deliver": false, "channel": null, "to": null},
        "state": {"nextRunAtMs": null, "lastRunAtMs": null, "lastStatus": null, "lastError": null},
        "createdAtMs": 1_795_000_000_000u64, "updatedAtMs": 1_795_000_000_000u64, "deleteAfterRun": false}]});
    write(ws.join("cron/jobs.json"), &job.to_string());

    let mock = MockLlm::start().await;
    let markdown = "**Hi!** Here is a table:\n\n| name | value |\n|---|---|\n| answer | 42 |\n\n```rust\nfn main() {}\n```\n\nAnd <img src=x onerror=alert(1)> stays text.";
    mock.when_last_user_contains_once(
        "hello there",
        MockReply::tool_call("list_dir", json!({"path": "."})),
    );
    mock.when_last_user_contains_once("hello there", MockReply::text(markdown).chunk_chars(7));
    mock.when_last_user_contains("second chat", MockReply::text("Second answer"));
    mock.when_last_user_contains(
        "long task please",
        MockReply::text("Working on it, this will take a while")
            .chunk_chars(8)
            .stall_after_chunks(1),
    );
    mock.when_last_user_contains("describe the image", MockReply::text("A tiny red dot"));
    mock.set_fallback(MockReply::text("ok"));

    let patch = json!({"channels": {"websocket": {"port": 0}}});
    nanobot_testkit::install_ring();
    let gw = Gateway::start(options(&home, &mock, patch)).await.unwrap();
    let addr = gw.websocket_addr().await.expect("websocket channel listening");

    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("webui");
    std::fs::create_dir_all(&artifacts).unwrap();
    let screenshot = artifacts.join("chat.png");
    let _ = std::fs::remove_file(&screenshot);
    let png = home.home().join("dot.png");
    use base64::Engine as _;
    std::fs::write(
        &png,
        base64::engine::general_purpose::STANDARD.decode(RED_DOT).unwrap(),
    )
    .unwrap();
    let profile = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webui/browser.mjs");

    let run = tokio::process::Command::new(&node)
        .arg(&script)
        .env("BASE_URL", format!("http://127.0.0.1:{}/", addr.port()))
        .env("CHROMIUM", chromium)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("USER_DATA_DIR", profile.path())
        .env("SCREENSHOT", &screenshot)
        .env("IMAGE_PNG", &png)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the browser script finished within its bound")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "browser script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("OK"), "{stdout}");
    assert!(
        screenshot.exists(),
        "screenshot saved at {}",
        screenshot.display()
    );

    // The stop button cancelled the model call of the long turn.
    let cancelled = tokio::time::timeout(GUARD, mock.wait_for_cancelled(1))
        .await
        .unwrap();
    assert!(!cancelled.is_empty());
    // The uploaded image reached the model as an image part.
    let reqs = mock.completion_requests();
    let with_image = reqs.iter().any(|r| {
        r.messages().iter().any(|m| {
            m["role"] == "user"
                && m["content"].as_array().is_some_and(|parts| {
                    parts.iter().any(|p| {
                        p["type"] == "image_url"
                            && p["image_url"]["url"]
                                .as_str()
                                .is_some_and(|u| u.starts_with("data:image/png;base64,"))
                    })
                })
        })
    });
    assert!(with_image, "no request carried the uploaded image");
    tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
}
