//! Issue 16's costs, measured (results in `docs/benchmarks.md`):
//!
//! 1. `history` of a session whose last message is 16 MiB (cache dropped each time): time and bytes read.
//! 2. The first `history` of a 100,000-message file written by the Python nanobot against a later one, and the
//!    first one after the runtime's background indexing (`SessionStore::index_sessions`): time,
//!    bytes read and peak-memory growth. Each read runs in a fresh child process so that its peak RSS
//!    (`VmHWM`) is its own.
//! 3. A 20-step tool run's checkpoints: syncs per step, time per step and the checkpoint file's size.
//!
//! Run: `cargo bench -p nanobot-sessions --bench bounds`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark")]

use std::path::Path;
use std::time::{Duration, Instant};

use nanobot_sessions::{SessionMessage, SessionStore, StoreOptions};
use serde_json::json;

fn hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn python_file(path: &Path, key: &str, n: usize) {
    use std::io::Write;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        f,
        "{}",
        json!({"_type": "metadata", "key": key, "created_at": "2026-01-01T00:00:00",
        "updated_at": "2026-01-01T00:00:00", "metadata": {}, "last_consolidated": 0})
    )
    .unwrap();
    for i in 0..n {
        let m = match i % 4 {
            0 => {
                json!({"role": "user", "content": format!("question {i}: what is in the file?"), "timestamp": "2026-01-01T00:00:01"})
            }
            1 => {
                json!({"role": "assistant", "content": "", "tool_calls": [{"id": format!("call_{i}"), "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"notes.md\"}"}}], "timestamp": "2026-01-01T00:00:02"})
            }
            2 => json!({"role": "tool", "tool_call_id": format!("call_{}", i - 1), "name": "read_file",
                "content": "line one\nline two\nline three", "timestamp": "2026-01-01T00:00:03"}),
            _ => {
                json!({"role": "assistant", "content": format!("The file has three lines ({i})."), "timestamp": "2026-01-01T00:00:04"})
            }
        };
        writeln!(f, "{m}").unwrap();
    }
}

/// Child mode: one `history(100)` on `dir`'s session (`index`: `index_sessions()` instead, as the runtime runs it in
/// the background at start); prints `micros bytes hwm_growth_kib`.
fn child(home: &str, ws: &str, index: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = SessionStore::new(home, ws).unwrap();
    let before = hwm_kib();
    let t = Instant::now();
    if index {
        assert_eq!(rt.block_on(store.index_sessions()).unwrap(), 1);
    } else {
        assert!(!rt.block_on(store.history("cli:py", 100)).unwrap().is_empty());
    }
    let took = t.elapsed();
    println!(
        "{} {} {}",
        took.as_micros(),
        store.bytes_read(),
        hwm_kib().saturating_sub(before)
    );
}

fn run_child(home: &Path, ws: &Path) -> (Duration, u64, u64) {
    run_mode("--child", home, ws)
}

fn run_mode(mode: &str, home: &Path, ws: &Path) -> (Duration, u64, u64) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([mode, home.to_str().unwrap(), ws.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().unwrap());
    (
        Duration::from_micros(it.next().unwrap()),
        it.next().unwrap(),
        it.next().unwrap(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(mode @ ("--child" | "--index")) = args.get(1).map(String::as_str) {
        child(&args[2], &args[3], mode == "--index");
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();

    // 1. A 16 MiB last message.
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let store = SessionStore::with_options(
        home.path(),
        ws.path(),
        StoreOptions::default().max_message_bytes(usize::MAX),
    )
    .unwrap();
    rt.block_on(async {
        let msgs: Vec<_> = (0..200)
            .map(|i| SessionMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, format!("m{i}")))
            .collect();
        store.append("api:big", msgs).await.unwrap();
        store
            .append("api:big", vec![SessionMessage::new("user", "y".repeat(16 << 20))])
            .await
            .unwrap();
    });
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..7 {
        rt.block_on(store.invalidate("api:big"));
        let b0 = store.bytes_read();
        let t = Instant::now();
        rt.block_on(store.history("api:big", 100)).unwrap();
        times.push(t.elapsed());
        bytes = store.bytes_read() - b0;
    }
    println!(
        "16 MiB last message: history(100) median {:?} (min {:?}), {:.1} MiB read per turn",
        median(times.clone()),
        times.iter().min().unwrap(),
        bytes as f64 / f64::from(1 << 20)
    );

    // 2. First vs later read of a 100,000-message Python-written session.
    let mut firsts = Vec::new();
    let mut laters = Vec::new();
    let mut indexings = Vec::new();
    let mut indexed_firsts = Vec::new();
    for _ in 0..5 {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let store = SessionStore::new(home.path(), ws.path()).unwrap();
        python_file(&store.path_for("cli:py"), "cli:py", 100_000);
        drop(store);
        firsts.push(run_child(home.path(), ws.path()));
        laters.push(run_child(home.path(), ws.path()));
        // The same file again, indexed in the background at start (as the runtime does), then its first turn.
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let store = SessionStore::new(home.path(), ws.path()).unwrap();
        python_file(&store.path_for("cli:py"), "cli:py", 100_000);
        drop(store);
        indexings.push(run_mode("--index", home.path(), ws.path()));
        indexed_firsts.push(run_child(home.path(), ws.path()));
    }
    let show = |name: &str, v: &[(Duration, u64, u64)]| {
        let t = median(v.iter().map(|x| x.0).collect());
        let mut mem: Vec<u64> = v.iter().map(|x| x.2).collect();
        mem.sort_unstable();
        println!(
            "100k-message Python session, {name} read: median {t:?}, {:.1} MiB read, peak RSS growth {} KiB (median)",
            v[0].1 as f64 / f64::from(1 << 20),
            mem[mem.len() / 2]
        );
    };
    show("first (no index: counted inline)", &firsts);
    show("later", &laters);
    show("background indexing at start (off the turn path)", &indexings);
    show("first turn after the background indexing", &indexed_firsts);

    // 3. Checkpoints of a 20-step tool run.
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let store = SessionStore::new(home.path(), ws.path()).unwrap();
    let s0 = store.syncs();
    let t = Instant::now();
    rt.block_on(async {
        let mut messages = Vec::new();
        for step in 0..20 {
            messages.push(json!({"role": "assistant", "content": "", "tool_calls": [{"id": format!("c{step}"),
                "type": "function", "function": {"name": "exec", "arguments": "{\"command\": \"ls\"}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("c{step}"), "content": "x".repeat(4000)}));
            let cp = json!({"phase": "tools_completed", "iteration": step, "assistant_message": messages[messages.len() - 2],
                "completed_tool_results": [], "pending_tool_calls": [], "messages": messages});
            store.write_checkpoint("cli:run", &cp).await.unwrap();
        }
    });
    let took = t.elapsed();
    let size = std::fs::metadata(store.checkpoint_path("cli:run")).unwrap().len();
    println!(
        "checkpoints, 20 tool steps: {} syncs ({:.1} per step), {:?} per step, checkpoint file {:.0} KiB",
        store.syncs() - s0,
        (store.syncs() - s0) as f64 / 20.0,
        took / 20,
        size as f64 / 1024.0
    );
}
