//! Slash commands: answered without a model call.

use nanobot_testkit::{MockLlm, MockReply, TempHome};

use crate::common::{agent, session_lines};

#[tokio::test]
async fn unknown_command_suggests_and_makes_no_llm_request() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock);
    let a = agent.process_direct("/hepl", "cli:c").await.unwrap();
    assert!(a.contains("Did you mean /help?"), "{a}");
    let b = agent
        .process_direct("/Status@nanobot_bot", "cli:c")
        .await
        .unwrap();
    assert!(b.contains("Model: mock-model"), "{b}");
    let h = agent.process_direct("/HELP", "cli:c").await.unwrap();
    assert!(h.contains("/new") && h.contains("/stop") && h.contains("/compact"));
    assert_eq!(
        agent.process_direct("/stop", "cli:c").await.unwrap(),
        "No active task to stop."
    );
    assert_eq!(mock.request_count(), 0, "commands never reach the model");
}

#[tokio::test]
async fn new_archives_and_starts_fresh() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("noted"));
    let agent = agent(&home, &mock);
    agent
        .process_direct("remember: the cat is called Tom", "cli:n")
        .await
        .unwrap();
    assert_eq!(
        agent.process_direct("/new", "cli:n").await.unwrap(),
        "New session started."
    );
    let lines = session_lines(&agent, "cli:n");
    assert_eq!(lines.len(), 1, "only the metadata line is left");
    // Without a memory service the raw archive is written before /new answers.
    let path = home.workspace().join("memory/history.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("the cat is called Tom"));
}

#[tokio::test]
async fn compact_without_memory_archives_raw_and_moves_the_pointer() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let agent = agent(&home, &mock);
    for i in 0..8 {
        agent
            .process_direct(&format!("message {i}"), "cli:k")
            .await
            .unwrap();
    }
    let before = mock.request_count();
    let out = agent.process_direct("/compact", "cli:k").await.unwrap();
    assert!(out.starts_with("Compacted"), "{out}");
    assert_eq!(mock.request_count(), before);
    let session = agent.sessions().session("cli:k").await.unwrap();
    assert!(session.last_consolidated > 0);
    assert_eq!(session.messages[session.last_consolidated].role(), Some("user"));
    let history = std::fs::read_to_string(home.workspace().join("memory/history.jsonl")).unwrap();
    assert!(history.contains("message 0"));
    // The next turn no longer replays the archived messages.
    agent.process_direct("after", "cli:k").await.unwrap();
    let req = mock.last_request().unwrap();
    assert!(!req.messages().iter().any(|m| m["content"] == "message 0"));
}

#[tokio::test]
async fn history_shows_the_last_messages_as_0_3_5_does() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock);
    assert_eq!(
        agent.process_direct("/history", "cli:h").await.unwrap(),
        "No conversation history yet."
    );
    let long = "x".repeat(300);
    for (q, a) in [
        ("first question", "first answer"),
        ("second question", long.as_str()),
    ] {
        mock.push(MockReply::text(a));
        agent.process_direct(q, "cli:h").await.unwrap();
    }
    let all = agent.process_direct("/history", "cli:h").await.unwrap();
    assert_eq!(
        all,
        format!(
            "Last 4 message(s):\n👤 You: first question\n🤖 Bot: first answer\n👤 You: second question\n🤖 Bot: {}…",
            "x".repeat(200)
        )
    );
    let two = agent.process_direct("/history 2", "cli:h").await.unwrap();
    assert!(
        two.starts_with("Last 2 message(s):\n👤 You: second question\n"),
        "{two}"
    );
    let bad = agent.process_direct("/history lots", "cli:h").await.unwrap();
    assert!(bad.starts_with("Usage: /history [count]"), "{bad}");
    assert_eq!(mock.request_count(), 2, "commands never reach the model");
}

#[tokio::test]
async fn skill_lists_the_skills_with_their_descriptions() {
    let home = TempHome::new();
    home.write_workspace_file(
        "skills/weather/SKILL.md",
        "---\nname: weather\ndescription: Look up the forecast\n---\nUse wttr.in.\n",
    );
    let mock = MockLlm::start().await;
    let builtin = tempfile::tempdir().unwrap();
    let loader = nanobot_skills::SkillsLoader::new(
        &home.workspace(),
        builtin.path(),
        nanobot_skills::RequirementEnv::new(std::collections::BTreeMap::<String, String>::new()),
    )
    .without_builtins();
    let agent =
        nanobot_core::AgentLoop::builder(crate::common::provider(&mock), crate::common::settings(&home))
            .skills(loader)
            .build()
            .unwrap();
    let text = agent.process_direct("/skill", "cli:s").await.unwrap();
    assert!(text.starts_with("Available skills (1):\n"), "{text}");
    assert!(text.contains("\n- **weather** — Look up the forecast"), "{text}");
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn dream_prompt_shows_and_initialises_the_workspace_instructions_without_overwriting() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock);
    let file = home.workspace().join("prompts/dream.md");
    let status = agent.process_direct("/dream-prompt", "cli:d").await.unwrap();
    assert!(
        status.starts_with("Dream memory instructions: nanobot default"),
        "{status}"
    );
    assert_eq!(
        agent.process_direct("/dream-prompt now", "cli:d").await.unwrap(),
        "Usage: /dream-prompt [init]"
    );
    let created = agent.process_direct("/dream-prompt init", "cli:d").await.unwrap();
    assert!(
        created.starts_with("Created Dream memory instructions at `prompts/dream.md`"),
        "{created}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().trim_end(),
        nanobot_memory::DEFAULT_DREAM_PROMPT
    );
    std::fs::write(&file, "My own rules.").unwrap();
    let again = agent.process_direct("/dream-prompt init", "cli:d").await.unwrap();
    assert!(
        again.starts_with("Dream memory instructions already exist"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "My own rules.",
        "never overwritten"
    );
    let status = agent.process_direct("/dream-prompt", "cli:d").await.unwrap();
    assert!(
        status.starts_with("Dream memory instructions: custom for this workspace"),
        "{status}"
    );
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn evaluator_prompt_initialises_the_gates_instructions() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock);
    let status = agent.process_direct("/evaluator-prompt", "cli:e").await.unwrap();
    assert!(
        status.starts_with("Heartbeat evaluator prompt: nanobot default"),
        "{status}"
    );
    let created = agent
        .process_direct("/evaluator-prompt init", "cli:e")
        .await
        .unwrap();
    assert!(
        created.starts_with("Created heartbeat evaluator prompt at `prompts/evaluator.md`")
            && created.contains("evaluate_notification"),
        "{created}"
    );
    let file = home.workspace().join("prompts/evaluator.md");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written
            .starts_with("You decide whether a result of the assistant's background work is worth a message"),
        "{written}"
    );
    let again = agent
        .process_direct("/evaluator-prompt init", "cli:e")
        .await
        .unwrap();
    assert!(
        again.starts_with("Heartbeat evaluator prompt already exists"),
        "{again}"
    );
}
