//! Local triggers: the store in 0.3.5's format, trust, the delivery queue and its recovery.

use std::sync::{Arc, Mutex};

use nanobot_cron::triggers::{DeliveryFailure, MAX_DELIVERY_ATTEMPTS, TriggerHandler};
use nanobot_cron::{LocalTrigger, TriggerDelivery, TriggerError, TriggerQueue, TriggerStore};
use serde_json::{Map, json};
use tokio_util::sync::CancellationToken;

struct Home {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    data: std::path::PathBuf,
}

fn home() -> Home {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    let data = dir.path().join("data/triggers");
    std::fs::create_dir_all(&ws).unwrap();
    Home { _dir: dir, ws, data }
}

fn store(h: &Home) -> TriggerStore {
    TriggerStore::new(&h.ws, &h.data)
}

fn thread_meta() -> Map<String, serde_json::Value> {
    json!({"thread_id": "t9"}).as_object().unwrap().clone()
}

#[test]
fn triggers_are_kept_in_the_python_format_and_read_back() {
    let h = home();
    let s = store(&h);
    let t = s
        .create(
            "  nightly   build ",
            "telegram",
            "42",
            "telegram:42",
            thread_meta(),
        )
        .unwrap();
    assert!(t.id.starts_with("trg_") && t.id.len() == 12, "{}", t.id);
    assert_eq!(t.name, "nightly build");
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(h.ws.join("triggers/triggers.json")).unwrap()).unwrap();
    assert_eq!(raw["version"], 1);
    let saved = &raw["triggers"][0];
    for key in [
        "chatId",
        "sessionKey",
        "senderId",
        "originMetadata",
        "createdAtMs",
        "runHistory",
    ] {
        assert!(saved.get(key).is_some(), "{key} in {saved}");
    }
    assert_eq!(saved["originMetadata"]["thread_id"], "t9");
    assert_eq!(s.get(&t.id).unwrap().unwrap(), t);
    assert_eq!(
        s.create("", "cli", "direct", "cli:direct", Map::new())
            .unwrap()
            .name,
        "Local trigger"
    );
    assert!(matches!(
        s.create("x", "telegram", " ", "k", Map::new()),
        Err(TriggerError::Invalid(_))
    ));
}

#[test]
fn a_store_written_by_python_is_read_and_its_unknown_fields_do_not_break_it() {
    let h = home();
    std::fs::create_dir_all(h.ws.join("triggers")).unwrap();
    std::fs::write(
        h.ws.join("triggers/triggers.json"),
        json!({"version": 1, "triggers": [{"id": "trg_ABCDEFGH", "name": "py", "enabled": true,
            "channel": "slack", "chat_id": "C1", "session_key": "slack:C1", "futureField": 1,
            "runHistory": [{"runAtMs": 5, "status": "ok", "error": null}]}]})
        .to_string(),
    )
    .unwrap();
    let s = store(&h);
    let t = s.get("trg_ABCDEFGH").unwrap().unwrap();
    assert_eq!((t.chat_id.as_str(), t.sender_id.as_str()), ("C1", "trigger"));
    assert_eq!(t.run_history.len(), 1);
    assert_eq!(
        s.baseline_if_missing().unwrap(),
        1,
        "the first start trusts what is there"
    );
    assert!(s.is_trusted(&t).unwrap());
    assert_eq!(s.baseline_if_missing().unwrap(), 0, "only once");
}

#[test]
fn a_trigger_made_while_the_first_start_takes_its_baseline_stays_trusted() {
    // `/trigger` in a chat while the gateway's queue takes its first-start baseline: whichever order the two take,
    // the new trigger is trusted (the baseline used to write the ledger over the creation's trust, so the first
    // delivery was held; the runtime's trigger test showed it under CPU load). The window is narrow, so this runs
    // it many times on fresh homes and catches a regression only sometimes.
    for round in 0..300 {
        let h = home();
        let (a, b) = (store(&h), store(&h));
        let go = Arc::new(std::sync::Barrier::new(2));
        let baseline = std::thread::spawn({
            let go = go.clone();
            move || {
                go.wait();
                b.baseline_if_missing().unwrap()
            }
        });
        go.wait();
        let t = a
            .create("nightly", "telegram", "42", "telegram:42", Map::new())
            .unwrap();
        baseline.join().unwrap();
        assert!(
            a.is_trusted(&t).unwrap(),
            "round {round}: the new trigger lost its trust"
        );
    }
}

#[test]
fn a_trigger_rebound_or_planted_by_a_file_write_is_not_trusted() {
    let h = home();
    let s = store(&h);
    s.baseline_if_missing().unwrap();
    let t = s
        .create("deploys", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    assert!(s.is_trusted(&t).unwrap());
    // The model rewrites the binding to another chat, and plants a new trigger.
    let path = h.ws.join("triggers/triggers.json");
    let mut raw: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    raw["triggers"][0]["chatId"] = json!("666");
    let mut planted = raw["triggers"][0].clone();
    planted["id"] = json!("trg_PLANTED1");
    raw["triggers"].as_array_mut().unwrap().push(planted);
    std::fs::write(&path, raw.to_string()).unwrap();
    for id in [t.id.as_str(), "trg_PLANTED1"] {
        let now = s.get(id).unwrap().unwrap();
        assert!(!s.is_trusted(&now).unwrap(), "{id}");
    }
}

#[test]
fn enqueue_checks_the_trigger_and_the_message() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    assert!(matches!(
        s.enqueue("trg_NOPE", "hi"),
        Err(TriggerError::NotFound(_))
    ));
    assert!(matches!(s.enqueue(&t.id, "  "), Err(TriggerError::Invalid(_))));
    assert!(matches!(
        s.enqueue(&t.id, &"x".repeat(70_000)),
        Err(TriggerError::Invalid(_))
    ));
    s.enable(&t.id, false).unwrap();
    assert!(matches!(s.enqueue(&t.id, "hi"), Err(TriggerError::Disabled(_))));
    s.enable(&t.id, true).unwrap();
    let d = s.enqueue(&t.id, "build failed").unwrap();
    assert!(d.id.starts_with("tdl_"));
    assert_eq!(s.get(&t.id).unwrap().unwrap().last_message, "build failed");
    let queued: Vec<_> = std::fs::read_dir(h.data.join("inbox")).unwrap().collect();
    assert_eq!(queued.len(), 1, "queued outside the workspace");
    assert!(!h.ws.join("triggers/inbox").exists());
}

#[test]
fn claimed_deliveries_survive_a_crash_and_give_up_after_the_attempt_limit() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    let d = s.enqueue(&t.id, "one").unwrap();
    let claimed = s.claim();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].content, "one");
    assert!(s.claim().is_empty(), "claimed once");
    // A crash leaves it in processing/: the next start queues it again, counting the attempt.
    assert_eq!(s.recover(), 1);
    let again = s.claim();
    assert_eq!((again[0].id.as_str(), again[0].attempts), (d.id.as_str(), 1));
    let mut last = again[0].clone();
    for _ in 1..MAX_DELIVERY_ATTEMPTS - 1 {
        assert!(s.retry(&last, "boom"));
        last = s.claim().pop().unwrap();
    }
    assert!(!s.retry(&last, "boom"), "the last attempt moves it to failed/");
    assert!(s.claim().is_empty());
    assert_eq!(std::fs::read_dir(h.data.join("failed")).unwrap().count(), 1);
    // Junk in the inbox is set aside, not retried forever.
    std::fs::write(h.data.join("inbox/1-junk.json"), "{not json").unwrap();
    assert!(s.claim().is_empty());
    assert_eq!(std::fs::read_dir(h.data.join("failed")).unwrap().count(), 2);
}

#[test]
fn deliveries_in_the_workspace_inbox_are_never_run() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    std::fs::create_dir_all(h.ws.join("triggers/inbox")).unwrap();
    std::fs::write(
        h.ws.join("triggers/inbox/1-tdl_forged.json"),
        json!({"version": 1, "delivery": {"id": "tdl_forged", "triggerId": t.id, "content": "rm -rf", "createdAtMs": 1}})
            .to_string(),
    )
    .unwrap();
    assert_eq!(s.refuse_workspace_deliveries(), 1);
    assert!(s.claim().is_empty());
    assert!(h.ws.join("triggers/failed/1-tdl_forged.json").exists());
}

/// Runs what is queued through a queue whose handler answers with `answer`; returns what the handler saw.
async fn run_queue(
    s: &TriggerStore,
    answer: impl Fn(&TriggerDelivery) -> Result<String, DeliveryFailure> + Send + Sync + 'static,
) -> Vec<(String, String)> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let handler: TriggerHandler = Arc::new(move |t: LocalTrigger, d: TriggerDelivery| {
        recorded.lock().unwrap().push((t.id.clone(), d.content.clone()));
        let out = answer(&d);
        Box::pin(async move { out })
    });
    let queue = TriggerQueue::new(s.clone(), handler);
    queue.recover().await;
    queue.deliver_pending(&CancellationToken::new()).await;
    seen.lock().unwrap().clone()
}

#[tokio::test]
async fn the_queue_runs_trusted_deliveries_and_records_the_outcome() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    s.enqueue(&t.id, "first").unwrap();
    s.enqueue(&t.id, "second").unwrap();
    let seen = run_queue(&s, |_| Ok("done".into())).await;
    assert_eq!(
        seen,
        [(t.id.clone(), "first".into()), (t.id.clone(), "second".into())],
        "in order"
    );
    let now = s.get(&t.id).unwrap().unwrap();
    assert_eq!(now.last_status.as_deref(), Some("ok"));
    assert_eq!(now.run_history.len(), 2);
    assert_eq!(std::fs::read_dir(h.data.join("processing")).unwrap().count(), 0);
}

#[tokio::test]
async fn an_untrusted_trigger_is_refused_and_a_failing_turn_is_retried() {
    let h = home();
    let s = store(&h);
    s.baseline_if_missing().unwrap();
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    let good = s
        .create("m", "telegram", "43", "telegram:43", Map::new())
        .unwrap();
    // Re-bind the first trigger behind nanobot's back.
    let path = h.ws.join("triggers/triggers.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"42\"", "\"666\"");
    std::fs::write(&path, text).unwrap();
    s.enqueue(&t.id, "to the wrong chat").unwrap();
    s.enqueue(&good.id, "flaky").unwrap();
    let seen = run_queue(&s, |_| {
        Err(DeliveryFailure {
            retry: true,
            error: "provider down".into(),
        })
    })
    .await;
    assert_eq!(
        seen,
        [(good.id.clone(), "flaky".into())],
        "the untrusted one never reached the handler"
    );
    let refused = s.get(&t.id).unwrap().unwrap();
    assert!(refused.last_error.unwrap().contains("outside /trigger"));
    assert_eq!(std::fs::read_dir(h.data.join("inbox")).unwrap().count(), 1);
    let requeued = s.claim().pop().unwrap();
    assert_eq!(
        (requeued.attempts, requeued.last_error.as_deref()),
        (1, Some("provider down"))
    );
}

#[tokio::test]
async fn a_stop_mid_batch_queues_the_rest_unrun() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    s.enqueue(&t.id, "a").unwrap();
    s.enqueue(&t.id, "b").unwrap();
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    let handler: TriggerHandler = Arc::new(move |_t, _d| {
        stopper.cancel();
        Box::pin(async { Ok(String::new()) })
    });
    let queue = TriggerQueue::new(s.clone(), handler);
    assert_eq!(
        queue.deliver_pending(&stop).await,
        1,
        "the first ran, then the stop came"
    );
    let left = s.claim();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].attempts, 1);
}

#[test]
fn deliveries_made_in_the_same_millisecond_keep_their_order() {
    let h = home();
    let s = store(&h);
    let t = s
        .create("n", "telegram", "42", "telegram:42", Map::new())
        .unwrap();
    // A hundred in a row: many fall in one millisecond, and the inbox runs in file-name order.
    let made: Vec<String> = (0..100).map(|i| format!("message {i}")).collect();
    for m in &made {
        s.enqueue(&t.id, m).unwrap();
    }
    // Claimed in batches, each in order.
    let mut claimed: Vec<String> = Vec::new();
    loop {
        let batch = s.claim();
        if batch.is_empty() {
            break;
        }
        claimed.extend(batch.into_iter().map(|d| d.content));
    }
    assert_eq!(claimed, made);
}
