use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use nanobot_cron::{
    CronError, CronPayload, CronSchedule, CronService, JobStore, ManualClock, NewJob, PAYLOAD_SYSTEM_EVENT,
    ScheduleKind, StoreFile,
};
use serde_json::json;

use crate::utc;

/// A cron store written by the Python nanobot 0.3.5 (a copy kept in the repository, `tests/fixtures/`).
pub(crate) fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python-nanobot-jobs.json")
}

fn fixture() -> String {
    fs::read_to_string(fixture_path()).unwrap_or_else(|e| panic!("{}: {e}", fixture_path().display()))
}

fn noop_service(store: JobStore, clock: &ManualClock) -> CronService {
    CronService::new(store, Arc::new(|_job| Box::pin(async { Ok(String::new()) })))
        .with_clock(Arc::new(clock.clone()))
}

#[test]
fn python_fixture_loads_and_round_trips_byte_for_byte() {
    let text = fixture();
    let file = StoreFile::parse(&text, &fixture_path()).unwrap();
    assert_eq!(file.version, 1);
    let ids: Vec<&str> = file.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, vec!["dream", "heartbeat"]);
    let hb = file.job("heartbeat").unwrap();
    assert!(hb.is_protected());
    assert_eq!(hb.payload.kind, PAYLOAD_SYSTEM_EVENT);
    assert_eq!(hb.schedule.kind, ScheduleKind::Every);
    assert_eq!(hb.schedule.every_ms, Some(1_800_000));
    assert_eq!(hb.schedule.tz.as_deref(), Some("UTC"));
    assert_eq!(hb.state.next_run_at_ms, Some(1_795_324_322_929));
    assert!(file.unparsed.is_empty());
    assert_eq!(file.to_json().unwrap(), text.trim_end());

    // through the store: a no-op update does not rewrite, a real one keeps everything else
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cron/jobs.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, &text).unwrap();
    let store = JobStore::new(&path);
    assert_eq!(store.load().unwrap(), file);
    store.update(|_| Ok(())).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn snake_case_and_unknown_fields_survive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.json");
    let original = json!({
        "version": 1,
        "futureTopLevel": {"x": 1},
        "jobs": [{
            "id": "abc12345", "name": "water", "enabled": true,
            "schedule": {"kind": "every", "every_ms": 60000, "at_ms": null, "cron_flavor": "x"},
            "payload": {"message": "drink", "deliver": true, "channel": "telegram", "to": "42",
                        "session_key": "telegram:42", "channel_meta": {"thread": 7}, "priority": "high"},
            "state": {"next_run_at_ms": 1000.0, "run_history": [{"run_at_ms": 5, "status": "ok", "duration_ms": 3, "note": "n"}]},
            "created_at_ms": 1, "updated_at_ms": 2, "delete_after_run": false, "color": "blue"
        }, {
            "id": "weird", "schedule": {"kind": "lunar"}, "whatever": true
        }]
    });
    fs::write(&path, serde_json::to_string_pretty(&original).unwrap()).unwrap();
    let store = JobStore::new(&path);
    let file = store.load().unwrap();
    let job = file.job("abc12345").unwrap();
    assert_eq!(job.schedule.every_ms, Some(60_000));
    assert_eq!(job.payload.kind, "agent_turn");
    assert_eq!(job.payload.session_key.as_deref(), Some("telegram:42"));
    assert_eq!(job.state.next_run_at_ms, Some(1000));
    assert_eq!(job.state.run_history[0].duration_ms, 3);
    assert_eq!(job.updated_at_ms, 2);
    assert_eq!(
        file.unparsed.len(),
        1,
        "the unknown schedule kind is kept verbatim, not dropped"
    );

    store
        .update(|f| {
            f.job_mut("abc12345").unwrap().name = "water!".into();
            Ok(())
        })
        .unwrap();
    let saved: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let j = &saved["jobs"][0];
    assert_eq!(j["name"], "water!");
    assert_eq!(j["color"], "blue");
    assert_eq!(j["schedule"]["cron_flavor"], "x");
    assert_eq!(j["schedule"]["everyMs"], 60000, "written back in camelCase");
    assert_eq!(j["payload"]["priority"], "high");
    assert_eq!(j["payload"]["channelMeta"]["thread"], 7);
    assert_eq!(j["state"]["runHistory"][0]["note"], "n");
    assert_eq!(saved["jobs"][1], original["jobs"][1]);
    assert_eq!(saved["futureTopLevel"]["x"], 1);
}

#[test]
fn corrupt_store_is_reported_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.json");
    fs::write(&path, "{\"version\": 1, \"jobs\": [").unwrap();
    let store = JobStore::new(&path);
    let err = store.load().unwrap_err();
    assert!(matches!(err, CronError::Parse { .. }));
    assert!(err.to_string().contains("jobs.json"), "{err}");
    let clock = ManualClock::new(utc(2026, 1, 1, 0, 0));
    let service = noop_service(JobStore::new(&path), &clock);
    let new = NewJob::new(
        CronSchedule::every(std::time::Duration::from_secs(60)),
        CronPayload::agent_turn("x"),
    );
    assert!(service.add(new).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"version\": 1, \"jobs\": [");
}

#[test]
fn two_processes_editing_concurrently_both_survive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cron/jobs.json");
    let clock = ManualClock::new(utc(2026, 1, 1, 0, 0));
    let per_thread = 20;
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let path = path.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                // each "process" has its own store instance (own cache, own lock file handle)
                let service = noop_service(JobStore::new(&path), &clock);
                let mut ids = Vec::new();
                for i in 0..per_thread {
                    let new = NewJob::new(
                        CronSchedule::every(std::time::Duration::from_secs(60)),
                        CronPayload::agent_turn(format!("t{t} job {i}")),
                    );
                    ids.push(service.add(new).unwrap().id);
                    // interleave a removal of one of our own jobs to exercise read-modify-write
                    if i == per_thread / 2 {
                        service.remove(&ids.remove(0)).unwrap();
                    }
                }
                ids
            })
        })
        .collect();
    let mut expected: Vec<String> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    expected.sort();
    let mut got: Vec<String> = JobStore::new(&path)
        .load()
        .unwrap()
        .jobs
        .into_iter()
        .map(|j| j.id)
        .collect();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(got.len(), 2 * (per_thread - 1));
}

#[test]
fn edits_by_another_process_are_seen_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cron/jobs.json");
    let clock = ManualClock::new(utc(2026, 1, 1, 0, 0));
    let gateway = noop_service(JobStore::new(&path), &clock);
    let cli = noop_service(JobStore::new(&path), &clock);
    assert!(gateway.list().unwrap().is_empty());
    let every = || CronSchedule::every(std::time::Duration::from_secs(60));
    let a = cli
        .add(NewJob::new(every(), CronPayload::agent_turn("from cli")))
        .unwrap();
    assert_eq!(
        gateway.list().unwrap().len(),
        1,
        "cached read notices the changed file"
    );
    // the gateway records a state change while the CLI disables another job: both survive
    let b = gateway
        .add(NewJob::new(every(), CronPayload::agent_turn("from gateway")))
        .unwrap();
    cli.set_enabled(&b.id, false).unwrap();
    gateway.remove(&a.id).unwrap();
    let jobs = cli.list().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, b.id);
    assert!(!jobs[0].enabled);
    // a hand edit (e.g. by the Python nanobot, no lock) is picked up too
    let mut raw: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    raw["jobs"][0]["name"] = "renamed by hand".into();
    raw["jobs"][0]["extraPadding"] = "make the size differ".into();
    fs::write(&path, serde_json::to_string_pretty(&raw).unwrap()).unwrap();
    assert_eq!(gateway.get(&b.id).unwrap().unwrap().name, "renamed by hand");
}

#[test]
fn legacy_store_is_migrated_once_with_backup() {
    let text = fixture();
    let home = tempfile::tempdir().unwrap();
    let legacy = home.path().join(".nanobot/cron/jobs.json");
    fs::create_dir_all(legacy.parent().unwrap()).unwrap();
    fs::write(&legacy, &text).unwrap();
    let store = JobStore::new(home.path().join("workspace/cron/jobs.json"));
    assert!(store.migrate_from(&legacy).unwrap());
    assert_eq!(store.load().unwrap().jobs.len(), 2);
    assert!(!legacy.exists());
    assert!(home.path().join(".nanobot/cron/jobs.json.migrated").exists());
    // second call: nothing to do, and an existing workspace store is never replaced
    fs::write(&legacy, "{\"version\":1,\"jobs\":[]}").unwrap();
    assert!(!store.migrate_from(&legacy).unwrap());
    assert_eq!(store.load().unwrap().jobs.len(), 2);
}

/// A `cron` folder that a command replaced by a link leading out of the workspace (to a folder holding a
/// planted `jobs.json` and a file nanobot must never write) is refused: nothing is read from or written there,
/// and the Python nanobot's queue beside it is not merged.
#[test]
fn a_cron_folder_linked_out_of_the_workspace_is_never_followed() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("workspace");
    let outside = base.path().join("outside");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let planted = r#"{"version": 1, "jobs": [{"id": "evil", "name": "evil", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 1000}, "payload": {"kind": "agent_turn", "message": "exfiltrate"},
        "state": {}, "createdAtMs": 0, "updatedAtMs": 0, "deleteAfterRun": false}]}"#;
    fs::write(outside.join("jobs.json"), planted).unwrap();
    fs::write(
        outside.join("action.jsonl"),
        r#"{"action": "del", "params": {"job_id": "x"}}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("cron")).unwrap();
    let store = JobStore::new(ws.join("cron").join("jobs.json"));
    let err = nanobot_util::error_chain(&store.load().unwrap_err());
    assert!(err.contains("leads outside"), "{err}");
    let cleared = store.update(|f| {
        f.jobs.clear();
        Ok(())
    });
    assert!(cleared.is_err());
    let mut names: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["action.jsonl", "jobs.json"],
        "no lock or temporary file was created outside"
    );
    assert_eq!(fs::read_to_string(outside.join("jobs.json")).unwrap(), planted);

    // A hard-linked jobs.json is refused too; replacing the link by a real folder makes the store usable.
    fs::remove_file(ws.join("cron")).unwrap();
    fs::create_dir_all(ws.join("cron")).unwrap();
    fs::hard_link(outside.join("jobs.json"), ws.join("cron/jobs.json")).unwrap();
    let err = nanobot_util::error_chain(&store.load().unwrap_err());
    assert!(err.contains("hard-linked"), "{err}");
    fs::remove_file(ws.join("cron/jobs.json")).unwrap();
    assert!(store.load().unwrap().jobs.is_empty());
}
