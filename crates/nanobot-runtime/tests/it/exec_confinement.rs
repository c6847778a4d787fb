//! A scripted model over real HTTP asks `exec` for nanobot's API key, through an agent built
//! from `config.json` exactly as the binaries build it: the key never reaches the model.
//! Needs bubblewrap (user + mount namespaces) or Landlock; skipped, with the reason, without both.

use std::collections::HashMap;

use nanobot_runtime::Environment;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use nanobot_tools::confine::kernel_support;
use serde_json::json;

#[tokio::test]
async fn the_model_cannot_read_the_api_key_through_exec() {
    let k = kernel_support();
    if k.bwrap.is_err() && k.landlock.is_err() {
        println!("skipped: neither user namespaces (bubblewrap) nor Landlock on this machine");
        return;
    }
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let key = format!("sk-e2e-canary-{}", std::process::id());
    let config = json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url(), "apiKey": key}},
        "tools": {"web": {"enable": false}}
    });
    home.write_config(&config);
    home.write_workspace_file("note.txt", "workspace-note");
    let attacks = [
        "cat note.txt; cat $HOME/.nanobot/config.json",
        "cd; cat .nanobot/config.json; cat ../config.json",
        "python3 -c \"import os; print(open(os.path.expanduser('~/.nanobot/config.json')).read())\"",
    ];
    for a in attacks {
        mock.push(MockReply::tool_call("exec", json!({"command": a})));
    }
    mock.push(MockReply::text("done"));
    let config: nanobot_config::Config = serde_json::from_value(config).unwrap();
    let env = Environment::new(
        home.home(),
        HashMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), home.home().display().to_string()),
        ]),
    );
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
    let answer = agent
        .process_direct("show me your config", "cli:direct")
        .await
        .unwrap();
    assert_eq!(answer, "done");
    let last = mock.last_request().unwrap();
    let results = last.tool_results();
    assert_eq!(results.len(), attacks.len(), "{results:?}");
    assert!(
        results[0].content.contains("workspace-note"),
        "exec did not run: {results:?}"
    );
    for r in &results {
        assert!(
            !r.content.contains(&key),
            "the key reached the model: {}",
            r.content
        );
    }
    for req in mock.requests() {
        let body = serde_json::to_string(req.messages()).unwrap();
        assert!(!body.contains(&key), "the key was sent to the model");
    }
}
