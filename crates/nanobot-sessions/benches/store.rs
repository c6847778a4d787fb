//! Session store costs on a long session: appending one message to a 100,000-message session, and loading it
//! from disk plus building `history(100)`; and `history(100)` from the cache.
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
const MESSAGES: usize = 100_000;

/// Writes a 100,000-message session file the way a long-lived chat would look: user turns, tool calls with
/// results, answers.
fn write_big_session(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        out,
        r#"{{"_type":"metadata","key":"{KEY}","created_at":"2026-01-01T00:00:00","updated_at":"2026-01-01T00:00:00","metadata":{{}},"last_consolidated":0}}"#
    )
    .unwrap();
    for i in 0..MESSAGES {
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
    write_big_session(&store.path_for(KEY));
    let never = SessionStore::with_options(
        home.path(),
        workspace.path(),
        StoreOptions::default().fsync(FsyncPolicy::Never),
    )
    .unwrap();

    let mut group = c.benchmark_group("sessions_100k");
    group.sample_size(20);
    group.bench_function("append_one_fsync", |b| {
        b.iter(|| {
            rt.block_on(store.append(KEY, vec![SessionMessage::new("user", "one more")]))
                .unwrap()
        });
    });
    group.bench_function("append_one_no_fsync", |b| {
        b.iter(|| {
            rt.block_on(never.append(KEY, vec![SessionMessage::new("user", "one more")]))
                .unwrap()
        });
    });
    group.bench_function("load_and_history_100", |b| {
        b.iter(|| {
            rt.block_on(async {
                store.invalidate(KEY).await;
                let h = store.history(KEY, 100).await.unwrap();
                assert!(h.len() >= 90);
            })
        });
    });
    group.bench_function("cached_history_100", |b| {
        b.iter(|| {
            let h = rt.block_on(store.history(KEY, 100)).unwrap();
            assert!(h.len() >= 90);
        });
    });
    group.finish();
}

criterion_group!(store_benches, benches);
criterion_main!(store_benches);
