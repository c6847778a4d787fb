//! `nanobot eval`: every shipped trace passes; failures and bad traces give the right exit codes.

use std::path::PathBuf;

use nanobot_testkit::TempHome;

use crate::support::{run, stderr, stdout};

fn traces() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/traces"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_shipped_trace_passes() {
    let files = traces();
    assert!(files.len() >= 5, "tests/traces holds the trace set: {files:?}");
    let home = TempHome::new();
    for f in files {
        let o = run(home.home(), &["eval", "--trace", f.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}:\n{}\n{}",
            f.display(),
            stdout(&o),
            stderr(&o)
        );
        assert!(stdout(&o).contains("PASS"), "{}", stdout(&o));
        assert!(!stdout(&o).contains('✗'), "{}", stdout(&o));
    }
}

#[test]
fn a_failing_expectation_exits_1_and_says_which() {
    let home = TempHome::new();
    let trace = home.root().join("fail.json");
    std::fs::write(
        &trace,
        r#"{"name": "fails", "turns": [{"user": "hi", "model": [{"content": "hello"}],
            "expect": {"response_contains": ["goodbye"], "tools_used": ["exec"]}}]}"#,
    )
    .unwrap();
    let o = run(home.home(), &["eval", "--trace", trace.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("✗ response contains \"goodbye\""), "{out}");
    assert!(out.contains("✗ tool exec used"), "{out}");
    assert!(out.contains("FAIL"), "{out}");
    assert!(
        stderr(&o).contains("2 of 3 expectations failed"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_malformed_trace_is_a_usage_error_naming_the_field() {
    let home = TempHome::new();
    let trace = home.root().join("bad.json");
    std::fs::write(&trace, r#"{"turns": [{"user": "hi", "expct": {}}]}"#).unwrap();
    let o = run(home.home(), &["eval", "--trace", trace.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expct"), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
}
