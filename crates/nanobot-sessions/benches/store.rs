//! Session store costs on a long session (100,000 messages): appending one message (with and without fsync),
//! `history(100)` read from the end of the file (cache dropped first) and from the cache, and, for comparison,
//! reading a whole Python-written file.
//!
//! Run: `cargo bench -p nanobot-sessions --bench store`.

#![expect(
    clippy::unwrap_used,
    reason = "benchmark set-up: any failure must abort the run"
)]

use std::io::Write;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use nanobot_sessions::{FsyncPolicy, SessionMessage, SessionStore, StoreOptions};

const KEY: &str = "telegram:100000";
const KEY_APPEND: &str = "telegram:append";
const KEY_PYTHON: &str = "telegram:python";
/// The same shapes on a 1,000-message session, to show the cost does not depend on the length.
const KEY_SMALL: &str = "telegram:1000";
const MESSAGES: usize = 100_000;

/// Writes a 100,000-message session file the way a long-lived chat would look: user turns, tool calls with
/// results, answers.
fn write_big_session(path: &Path, key: &str, messages: usize) {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        out,
        r#"{{"_type":"metadata","key":"{key}","created_at":"2026-01-01T00:00:00","updated_at":"2026-01-01T00:00:00","metadata":{{}},"last_consolidated":0}}"#
    )
    .unwrap();
    for i in 0..messages {
        let line = match i % 4 {
            0 => format!(
                r#"{{"role":"user","content":"question number {i}: what is in notes.txt today?","timestamp":"2026-01-01T00:00:01"}}"#
            ),
            1 => format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{i}","type":"function","function":{{"name":"read_file","arguments":"{{\"path\": \"notes.txt\"}}"}}}}],"timestamp":"2026-01-01T00:00:02"}}"#
            ),
            2 => format!(
                r#"{{"role":"tool","tool_call_id":"call_{}","name":"read_file","content":"1| buy milk\n2| call Alice\n3| line {i}","timestamp":"2026-01-01T00:00:03"}}"#,
                i - 1
            ),
            _ => format!(
                r#"{{"role":"assistant","content":"notes.txt says: buy milk, call Alice (answer {i}).","timestamp":"2026-01-01T00:00:04","latency_ms":1200}}"#
            ),
        };
        writeln!(out, "{line}").unwrap();
    }
    out.flush().unwrap();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let store = SessionStore::new(home.path(), workspace.path()).unwrap();
    let never = SessionStore::with_options(
        home.path(),
        workspace.path(),
        StoreOptions::default().fsync(FsyncPolicy::Never),
    )
    .unwrap();
    // Written as the Python nanobot writes files: one metadata line, then 100,000 messages.
    write_big_session(&store.path_for(KEY), KEY, MESSAGES);
    write_big_session(&store.path_for(KEY_APPEND), KEY_APPEND, MESSAGES);
    write_big_session(&store.path_for(KEY_PYTHON), KEY_PYTHON, MESSAGES);
    write_big_session(&store.path_for(KEY_SMALL), KEY_SMALL, 1_000);

    let mut group = c.benchmark_group("sessions_100k");
    group.sample_size(20);
    group.bench_function("append_one_fsync", |b| {
        b.iter(|| {
            rt.block_on(store.append(KEY_APPEND, vec![SessionMessage::new("user", "one more")]))
                .unwrap()
        });
    });
    group.bench_function("append_one_no_fsync", |b| {
        b.iter(|| {
            rt.block_on(never.append(KEY_APPEND, vec![SessionMessage::new("user", "one more")]))
                .unwrap()
        });
    });
    // First read of a Python-written file goes through it once and leaves a marker at its end.
    rt.block_on(store.history(KEY, 100)).unwrap();
    group.bench_function("cold_history_100", |b| {
        b.iter(|| {
            rt.block_on(async {
                store.invalidate(KEY).await;
                let h = store.history(KEY, 100).await.unwrap();
                assert!(h.len() >= 90);
            })
        });
    });
    group.bench_function("cached_history_100", |b| {
        rt.block_on(store.with_session(KEY, |s| s.messages.len()))
            .unwrap();
        b.iter(|| {
            let h = rt.block_on(store.history(KEY, 100)).unwrap();
            assert!(h.len() >= 90);
        });
    });
    group.finish();

    let mut group = c.benchmark_group("sessions_1k");
    group.sample_size(20);
    group.bench_function("append_one_no_fsync", |b| {
        b.iter(|| {
            rt.block_on(never.append(KEY_SMALL, vec![SessionMessage::new("user", "one more")]))
                .unwrap()
        });
    });
    rt.block_on(store.history(KEY_SMALL, 100)).unwrap();
    group.bench_function("cold_history_100", |b| {
        b.iter(|| {
            rt.block_on(async {
                store.invalidate(KEY_SMALL).await;
                let h = store.history(KEY_SMALL, 100).await.unwrap();
                assert!(h.len() >= 90);
            })
        });
    });
    group.finish();

    let mut group = c.benchmark_group("sessions_100k_whole_file");
    group.sample_size(10);
    group.bench_function("full_load_python_file", |b| {
        b.iter(|| {
            rt.block_on(async {
                never.invalidate(KEY_PYTHON).await;
                let n = never
                    .with_session(KEY_PYTHON, |s| s.messages.len())
                    .await
                    .unwrap();
                assert_eq!(n, MESSAGES);
            })
        });
    });
    group.finish();
}

criterion_group!(store_benches, benches);
criterion_main!(store_benches);
