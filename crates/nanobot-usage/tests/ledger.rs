//! The ledger as its users meet it: totals that add up, budgets that stop and reset, replicas and processes that
//! share one ledger, files it did not write.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use nanobot_usage::{
    Budget, GroupBy, Limit, Limits, Period, PriceTable, Report, Scope, UsageLedger, UsageRecord,
};
use nanobot_util::MemorySharedFiles;

fn call(chat: &str, person: Option<&str>, model: &str, input: u64, output: u64) -> UsageRecord {
    UsageRecord {
        ts: Utc::now(),
        session: chat.to_owned(),
        chat: chat.to_owned(),
        person: person.map(str::to_owned),
        run: person.is_none().then(|| "cron".to_owned()),
        model: model.to_owned(),
        input,
        output,
        cached: 0,
        reasoning: 0,
    }
}

fn utc() -> Tz {
    "UTC".parse().unwrap()
}

fn tokens(n: u64) -> Limit {
    Limit {
        tokens: Some(n),
        cost: None,
    }
}

#[test]
fn totals_add_up_per_chat_person_and_overall() {
    let home = tempfile::tempdir().unwrap();
    let ledger = UsageLedger::new(home.path(), utc());
    ledger
        .record(&call("telegram:1", Some("telegram:7"), "gpt-4o", 100, 10))
        .unwrap();
    ledger
        .record(&call("telegram:1", Some("telegram:8"), "gpt-4o", 200, 20))
        .unwrap();
    ledger
        .record(&call("telegram:2", Some("telegram:7"), "llama3", 300, 30))
        .unwrap();
    ledger.record(&call("telegram:1", None, "gpt-4o", 5, 5)).unwrap();

    let (day, month) = ledger.totals(&Scope::Overall).unwrap();
    assert_eq!((day.calls, day.input, day.output), (4, 605, 65));
    assert_eq!(day, month);
    // llama3 has no price: the overall cost is a lower bound, said so.
    assert_eq!(day.known_cost(), None);
    assert!(day.cost_text().starts_with("at least $"), "{}", day.cost_text());

    let (chat, _) = ledger.totals(&Scope::Chat("telegram:1".into())).unwrap();
    assert_eq!((chat.calls, chat.tokens()), (3, 340));
    // gpt-4o only: a known cost. 305 in at 2.50, 35 out at 10 per million.
    let expected = (305.0 * 2.5 + 35.0 * 10.0) / 1e6;
    assert!((chat.known_cost().unwrap() - expected).abs() < 1e-12);

    let (person, _) = ledger.totals(&Scope::Person("telegram:7".into())).unwrap();
    assert_eq!((person.calls, person.tokens()), (2, 440));

    // Another ledger on the same home (another process) reads the same figures.
    let again = UsageLedger::new(home.path(), utc());
    assert_eq!(again.totals(&Scope::Overall).unwrap().0, day);
}

#[test]
fn a_budget_refuses_once_reached_names_the_limit_and_resets_with_its_period() {
    let home = tempfile::tempdir().unwrap();
    let budget = Budget {
        per_chat: Limits {
            daily: tokens(1_000),
            monthly: Limit::default(),
        },
        ..Budget::default()
    };
    let ledger = UsageLedger::new(home.path(), utc()).with_budget(budget);
    assert_eq!(ledger.check(Some("cli:user"), "cli:direct").unwrap(), Ok(()));
    ledger
        .record(&call("cli:direct", Some("cli:user"), "m", 600, 300))
        .unwrap();
    assert_eq!(ledger.check(Some("cli:user"), "cli:direct").unwrap(), Ok(()));
    ledger
        .record(&call("cli:direct", Some("cli:user"), "m", 90, 10))
        .unwrap();

    let refused = ledger.check(Some("cli:user"), "cli:direct").unwrap().unwrap_err();
    assert_eq!(refused.scope, Scope::Chat("cli:direct".into()));
    assert_eq!(refused.period, Period::Day);
    assert_eq!(refused.spent.tokens(), 1_000);
    let text = refused.to_string();
    assert!(text.contains("daily budget of 1,000 tokens"), "{text}");
    assert!(
        text.contains("agents.defaults.budget.perChat.daily.tokens"),
        "{text}"
    );
    let tomorrow = (Utc::now() + Duration::days(1))
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    assert_eq!(refused.resets_at.with_timezone(&Utc), tomorrow);

    // Unattended work in the same chat is held by the chat's limit too; another chat is not.
    assert!(ledger.check(None, "cli:direct").unwrap().is_err());
    assert_eq!(ledger.check(Some("cli:user"), "telegram:5").unwrap(), Ok(()));
    // The next day starts from zero.
    assert_eq!(
        ledger.check_at(Some("cli:user"), "cli:direct", tomorrow).unwrap(),
        Ok(())
    );
}

#[test]
fn money_budgets_count_priced_calls_and_person_limits_follow_the_person_across_chats() {
    let home = tempfile::tempdir().unwrap();
    let budget = Budget {
        per_person: Limits {
            daily: Limit::default(),
            monthly: Limit {
                tokens: None,
                cost: Some(0.01),
            },
        },
        ..Budget::default()
    };
    let ledger = UsageLedger::new(home.path(), utc()).with_budget(budget);
    // gpt-4o: 1,000 out = $0.01.
    ledger
        .record(&call("slack:a", Some("slack:U1"), "gpt-4o", 0, 600))
        .unwrap();
    assert_eq!(ledger.check(Some("slack:U1"), "slack:b").unwrap(), Ok(()));
    ledger
        .record(&call("slack:b", Some("slack:U1"), "gpt-4o", 0, 400))
        .unwrap();
    let refused = ledger.check(Some("slack:U1"), "slack:c").unwrap().unwrap_err();
    assert_eq!(
        (refused.scope.clone(), refused.period),
        (Scope::Person("slack:U1".into()), Period::Month)
    );
    assert!(
        refused.to_string().contains("perPerson.monthly.cost"),
        "{refused}"
    );
    // Someone else in the same chats is not held by that person's limit.
    assert_eq!(ledger.check(Some("slack:U2"), "slack:b").unwrap(), Ok(()));
}

#[test]
fn replicas_with_their_own_homes_share_one_ledger_through_the_store() {
    let (a_home, b_home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = MemorySharedFiles::new();
    let other = Arc::new(store.sharing());
    let budget = Budget {
        overall: Limits {
            daily: tokens(100),
            monthly: Limit::default(),
        },
        ..Budget::default()
    };
    let a = UsageLedger::new(a_home.path(), utc())
        .with_budget(budget)
        .with_shared(Arc::new(store));
    let b = UsageLedger::new(b_home.path(), utc())
        .with_budget(budget)
        .with_shared(other);
    for i in 0..5 {
        let ledger = if i % 2 == 0 { &a } else { &b };
        ledger.record(&call("api:x", Some("api:k"), "m", 10, 10)).unwrap();
    }
    for ledger in [&a, &b] {
        let (day, _) = ledger.totals(&Scope::Overall).unwrap();
        assert_eq!(
            (day.calls, day.tokens()),
            (5, 100),
            "every replica counts every call once"
        );
        assert!(
            ledger.check(Some("api:k"), "api:x").unwrap().is_err(),
            "the shared limit holds on both"
        );
    }
}

#[test]
fn damaged_lines_are_skipped_and_a_line_being_written_is_not_counted_yet() {
    let home = tempfile::tempdir().unwrap();
    let ledger = UsageLedger::new(home.path(), utc());
    ledger
        .record(&call("cli:direct", Some("cli:user"), "m", 1, 1))
        .unwrap();
    let month = Utc::now().format("%Y-%m").to_string();
    let path = home.path().join("usage").join(format!("{month}.jsonl"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"not json\n{\"ts\":\"2026-");
    std::fs::write(&path, &bytes).unwrap();
    let (day, _) = ledger.totals(&Scope::Overall).unwrap();
    assert_eq!(day.calls, 1);
    // The half line completed by its writer is then counted, once.
    let rest = serde_json::to_string(&call("cli:direct", Some("cli:user"), "m", 5, 5)).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - "{\"ts\":\"2026-".len());
    bytes.extend_from_slice(rest.as_bytes());
    bytes.push(b'\n');
    std::fs::write(&path, &bytes).unwrap();
    let fresh = UsageLedger::new(home.path(), utc());
    assert_eq!(fresh.totals(&Scope::Overall).unwrap().0.calls, 2);
    let report = Report::read(
        &home.path().join("usage"),
        utc(),
        &PriceTable::default(),
        None,
        GroupBy::Model,
        |_| true,
    )
    .unwrap();
    assert_eq!((report.total.calls, report.unreadable), (2, 1));
}

#[test]
fn reports_group_by_day_model_chat_and_person_from_a_time_on() {
    let home = tempfile::tempdir().unwrap();
    let ledger = UsageLedger::new(home.path(), utc());
    let old = "2026-01-15T12:00:00Z".parse::<DateTime<Utc>>().unwrap();
    let mut january = call("cli:direct", Some("cli:user"), "gpt-4o", 1000, 0);
    january.ts = old;
    ledger.record(&january).unwrap();
    ledger
        .record(&call("cli:direct", Some("cli:user"), "gpt-4o", 10, 1))
        .unwrap();
    ledger
        .record(&call("telegram:9", None, "qwen3:8b", 20, 2))
        .unwrap();
    let dir = home.path().join("usage");
    let prices = PriceTable::default();
    let all = Report::read(&dir, utc(), &prices, None, GroupBy::Day, |_| true).unwrap();
    assert_eq!(all.rows.len(), 2);
    assert_eq!(all.rows[0].key, "2026-01-15");
    assert_eq!(all.total.calls, 3);
    let since = Some(Utc::now() - Duration::days(1));
    let by_person = Report::read(&dir, utc(), &prices, since, GroupBy::Person, |_| true).unwrap();
    let keys: Vec<_> = by_person.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["(cron)", "cli:user"]);
    let by_model = Report::read(&dir, utc(), &prices, since, GroupBy::Model, |r| {
        r.chat == "telegram:9"
    })
    .unwrap();
    assert_eq!(by_model.rows.len(), 1);
    assert_eq!(by_model.rows[0].tally.known_cost(), None, "qwen3:8b has no price");
    assert_eq!(
        "week".parse::<GroupBy>().unwrap_err(),
        "cannot group by \"week\": use day, model, chat or person"
    );
}

#[test]
fn observers_see_each_call_this_process_records_once_and_not_what_others_append() {
    let home = tempfile::tempdir().unwrap();
    let ledger = UsageLedger::new(home.path(), utc());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    ledger.on_record(move |r| sink.lock().unwrap().push((r.chat.clone(), r.input)));
    ledger
        .record(&call("telegram:1", Some("telegram:7"), "gpt-4o", 100, 10))
        .unwrap();
    // Another process on the same home appends too: counted in the totals, not told to this one's observers.
    let other = UsageLedger::new(home.path(), utc());
    other.record(&call("telegram:2", None, "gpt-4o", 50, 5)).unwrap();
    ledger.record(&call("telegram:1", None, "gpt-4o", 20, 2)).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [("telegram:1".to_owned(), 100), ("telegram:1".to_owned(), 20)]
    );
    assert_eq!(ledger.totals(&Scope::Overall).unwrap().0.calls, 3);
}

#[test]
fn a_monthly_limit_resets_at_the_first_of_the_next_month_in_the_agents_time_zone() {
    let home = tempfile::tempdir().unwrap();
    let tz: Tz = "Asia/Shanghai".parse().unwrap();
    let budget = Budget {
        per_person: Limits {
            daily: Limit::default(),
            monthly: tokens(500),
        },
        ..Budget::default()
    };
    let ledger = UsageLedger::new(home.path(), tz).with_budget(budget);
    ledger
        .record(&call("telegram:1", Some("telegram:7"), "m", 400, 100))
        .unwrap();
    let refused = ledger
        .check(Some("telegram:7"), "telegram:2")
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.scope, Scope::Person("telegram:7".into()));
    assert_eq!(refused.period, Period::Month);
    // Midnight of the first of next month in Shanghai (16:00 UTC the day before).
    let local_now = Utc::now().with_timezone(&tz);
    let (y, m) = match chrono::Datelike::month(&local_now) {
        12 => (chrono::Datelike::year(&local_now) + 1, 1),
        m => (chrono::Datelike::year(&local_now), m + 1),
    };
    let next_month = chrono::TimeZone::with_ymd_and_hms(&tz, y, m, 1, 0, 0, 0)
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(refused.resets_at.with_timezone(&Utc), next_month);
    let text = refused.to_string();
    assert!(text.contains("monthly budget of 500 tokens"), "{text}");
    assert!(text.contains("Asia/Shanghai"), "{text}");
    // A moment before, still held; from then on, a new month from zero.
    assert!(
        ledger
            .check_at(
                Some("telegram:7"),
                "telegram:2",
                next_month - Duration::seconds(1)
            )
            .unwrap()
            .is_err()
    );
    assert_eq!(
        ledger
            .check_at(Some("telegram:7"), "telegram:2", next_month)
            .unwrap(),
        Ok(())
    );
}
