//! `nanobot usage` and budgets through the programs: turns of `agent -m` recorded and reported, a budget in
//! config.json refusing the next turn with its message, a typo in the budget refused by name.

use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

use crate::support::{onboarded, run, set, stderr, stdout};

#[test]
fn turns_are_reported_by_model_and_chat_and_a_budget_refuses_the_next_turn() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    set(
        &home,
        json!({"agents": {"defaults": {
            "timezone": "UTC",
            "budget": {"perChat": {"daily": {"tokens": 1000}}},
            "prices": {"mock-model": {"input": 1.0, "output": 2.0}}
        }}}),
    );
    mock.push(MockReply::text("one").with_usage(400, 100));
    mock.push(
        MockReply::text("two")
            .with_usage(400, 100)
            .with_reasoning_tokens(60),
    );
    for (question, answer) in [("first", "one\n"), ("second", "two\n")] {
        let o = run(home.home(), &["agent", "-m", question]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        assert_eq!(stdout(&o), answer);
    }
    // 1,000 tokens in this chat today: the third turn is refused, and says why and until when.
    let o = run(home.home(), &["agent", "-m", "third"]);
    let said = stdout(&o);
    assert!(said.contains("daily budget of 1,000 tokens is used up"), "{said}");
    assert!(
        said.contains("agents.defaults.budget.perChat.daily.tokens"),
        "{said}"
    );
    assert_eq!(mock.request_count(), 2, "the refused turn asked no model");
    // Another chat (session) is not held by this chat's limit.
    mock.push(MockReply::text("elsewhere").with_usage(1, 1));
    let o = run(home.home(), &["agent", "-s", "cli:other", "-m", "hi"]);
    assert_eq!(stdout(&o), "elsewhere\n", "stderr: {}", stderr(&o));

    let o = run(home.home(), &["usage", "--by", "chat"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let report = stdout(&o);
    let direct = report
        .lines()
        .find(|l| l.trim_start().starts_with("cli:direct"))
        .unwrap_or_else(|| panic!("{report}"));
    let cols: Vec<&str> = direct.split_whitespace().collect();
    // calls, in, out, cached, reasoning, cost: 800 in at $1 and 200 out at $2 per million = $0.0012.
    assert_eq!(cols[1..7], ["2", "800", "200", "0", "60", "$0.0012"], "{report}");
    let total = report
        .lines()
        .find(|l| l.trim_start().starts_with("TOTAL"))
        .unwrap();
    assert!(total.split_whitespace().nth(1) == Some("3"), "{report}");
    assert!(report.contains("per chat: 1000 tokens a day"), "{report}");

    let o = run(home.home(), &["usage", "--by", "model", "--chat", "cli:other"]);
    let report = stdout(&o);
    assert!(report.contains("mock-model"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.trim_start().starts_with("TOTAL") && l.split_whitespace().nth(1) == Some("1")),
        "{report}"
    );
    let o = run(home.home(), &["usage", "--by", "week"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("use day, model, chat or person"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_misspelt_budget_is_refused_by_name_before_any_turn() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    set(
        &home,
        json!({"agents": {"defaults": {"budget": {"perUser": {"daily": {"tokens": 10}}}}}}),
    );
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("perUser"), "{}", stderr(&o));
    assert_eq!(mock.request_count(), 0);
}

#[test]
fn doctor_shows_the_budget_and_warns_when_a_money_limit_cannot_price_the_model() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let o = run(home.home(), &["doctor"]);
    assert!(stdout(&o).contains("spending: no budget set"), "{}", stdout(&o));
    set(
        &home,
        json!({"agents": {"defaults": {"budget": {"perPerson": {"daily": {"tokens": 5000}}, "overall": {"monthly": {"cost": 10}}}}}}),
    );
    let o = run(home.home(), &["doctor"]);
    let text = stdout(&o);
    assert!(
        text.contains("budget: overall: $10.00 a month; per person: 5000 tokens a day"),
        "{text}"
    );
    assert!(text.contains("the model mock-model has no price"), "{text}");
    assert!(text.contains("agents.defaults.prices.\"mock-model\""), "{text}");
    set(
        &home,
        json!({"agents": {"defaults": {"prices": {"mock-model": {"input": 1, "output": 1}}}}}),
    );
    let o = run(home.home(), &["doctor"]);
    assert!(!stdout(&o).contains("has no price"), "{}", stdout(&o));
}
