//! `edit_file` against the Python nanobot 0.3.5's own `EditFileTool`: the same cases run through both (0.3.5's
//! through `fixtures/edit_file_035_probe.py` in its venv), and each must leave the same file and give the same
//! answer when it applies. The few cases where nanobot-rs differs on purpose (docs/compatibility.md) are checked
//! on both sides too, so that the difference stays the documented one.

use std::process::Stdio;

use nanobot_testkit::peers;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::{ctx, fs_registry};

/// One case: a file (its text before, `None` when missing) and the call's arguments (`path` added).
struct Case {
    name: &'static str,
    file: &'static str,
    content: Option<&'static str>,
    args: Value,
}

fn case(name: &'static str, file: &'static str, content: Option<&'static str>, args: Value) -> Case {
    Case {
        name,
        file,
        content,
        args,
    }
}

/// What a run left: whether the edit applied, the answer, and the file's text afterwards.
#[derive(Debug, PartialEq)]
struct Outcome {
    applied: bool,
    output: String,
    content: Option<String>,
}

fn same_cases() -> Vec<Case> {
    let py = "def f():\n    x = 1\n    y = 2\n    return x + y\n";
    vec![
        case(
            "exact",
            "a.py",
            Some(py),
            json!({"old_text": "x = 1", "new_text": "x = 10"}),
        ),
        case(
            "replace_all",
            "a.txt",
            Some("a b a\nb a\n"),
            json!({"old_text": "a", "new_text": "c", "replace_all": true}),
        ),
        case(
            "crlf_file_lf_old_text",
            "w.txt",
            Some("one\r\ntwo\r\nthree\r\n"),
            json!({"old_text": "two\nthree", "new_text": "2\n3\n4"}),
        ),
        case(
            "crlf_file_crlf_old_text",
            "w.txt",
            Some("one\r\ntwo\r\nthree\r\n"),
            json!({"old_text": "one\r\ntwo", "new_text": "uno\r\ndos"}),
        ),
        case(
            "indentation_ignored_and_taken",
            "a.py",
            Some(py),
            json!({"old_text": "x = 1\ny = 2", "new_text": "x = 3\nif x:\n    y = 4"}),
        ),
        case(
            "indentation_with_blank_line",
            "b.py",
            Some("class A:\n    def f(self):\n        a()\n\n        b()\n"),
            json!({"old_text": "def f(self):\n    a()\n\n    b()", "new_text": "def g(self):\n    c()\n\n    d()"}),
        ),
        case(
            "tabs_against_spaces_not_reindented",
            "t.go",
            Some("func f() {\n\tx := 1\n\ty := 2\n}\n"),
            json!({"old_text": "    x := 1\n    y := 2", "new_text": "    x := 3"}),
        ),
        case(
            "curly_quote_lines",
            "q.txt",
            Some("intro\n  She said \u{201c}hello\u{201d}.\n  It\u{2019}s \u{2018}fine\u{2019}.\nend\n"),
            json!({"old_text": "She said \"hello\".\nIt's 'fine'.", "new_text": "She said \"bye\".\nIt's 'done', isn't it."}),
        ),
        case(
            "curly_quotes_inside_a_line",
            "q.md",
            Some("é: he wrote \u{201c}draft\u{201d} twice, then \u{201c}final\u{201d}.\n"),
            json!({"old_text": "\"final\"", "new_text": "\"last\""}),
        ),
        case(
            "trailing_whitespace_dropped_in_code",
            "a.py",
            Some(py),
            json!({"old_text": "    y = 2\n", "new_text": "    y = 3   \n    z = 4\t\n"}),
        ),
        case(
            "trailing_whitespace_kept_in_markdown",
            "n.MD",
            Some("line one\nline two\n"),
            json!({"old_text": "line one", "new_text": "line one  "}),
        ),
        case(
            "create_missing_file",
            "sub/dir/new.txt",
            None,
            json!({"old_text": "", "new_text": "hello\nworld\n"}),
        ),
        case(
            "create_into_empty_file",
            "empty.txt",
            Some("  \n"),
            json!({"old_text": "", "new_text": "content\n"}),
        ),
        case(
            "create_over_a_non_empty_file_refused",
            "a.py",
            Some(py),
            json!({"old_text": "", "new_text": "x"}),
        ),
        case(
            "missing_file_refused",
            "nope.txt",
            None,
            json!({"old_text": "a", "new_text": "b"}),
        ),
        case(
            "missing_file_named_like_others",
            "notes/todo.mdx",
            None,
            json!({"old_text": "a", "new_text": "b"}),
        ),
        case(
            "same_text_refused",
            "a.py",
            Some(py),
            json!({"old_text": "x = 1", "new_text": "x = 1"}),
        ),
        case(
            "whole_line_deleted_with_its_break",
            "a.py",
            Some(py),
            json!({"old_text": "    y = 2", "new_text": ""}),
        ),
        case(
            "inline_suffix_deleted_keeps_the_break",
            "a.py",
            Some(py),
            json!({"old_text": " + y", "new_text": ""}),
        ),
        case(
            "occurrence_of_a_trimmed_match",
            "r.txt",
            Some("  item\nother\n    item\n"),
            json!({"old_text": "item", "new_text": "thing", "occurrence": 2}),
        ),
        case(
            "line_hint_chooses",
            "r.txt",
            Some("x = 1\ny = 2\nx = 1\n"),
            json!({"old_text": "x = 1", "new_text": "x = 5", "line_hint": 3}),
        ),
        case(
            "ambiguous_refused",
            "r.txt",
            Some("x = 1\ny = 2\nx = 1\n"),
            json!({"old_text": "x = 1", "new_text": "x = 5"}),
        ),
        case(
            "expected_replacements_refused",
            "r.txt",
            Some("x = 1\ny = 2\nx = 1\n"),
            json!({"old_text": "x = 1", "new_text": "x = 5", "replace_all": true, "expected_replacements": 3}),
        ),
        case(
            "not_found_refused",
            "a.py",
            Some(py),
            json!({"old_text": "return x * y", "new_text": "return 0"}),
        ),
        case(
            "no_final_newline",
            "e.txt",
            Some("first\nlast"),
            json!({"old_text": "last", "new_text": "final\nlines"}),
        ),
        case(
            "a_line_added_after_a_last_line_without_break",
            "e.txt",
            Some("first\nlast"),
            json!({"old_text": "last", "new_text": "last\nmore"}),
        ),
        case(
            "multibyte_text",
            "u.txt",
            Some("日本語のテキスト\n  二行目です\n"),
            json!({"old_text": "二行目です", "new_text": "三行目"}),
        ),
    ]
}

/// Cases where nanobot-rs does better than 0.3.5 on purpose: (case, nanobot-rs's text, 0.3.5's text).
fn different_cases() -> Vec<(Case, &'static str, &'static str)> {
    vec![
        (
            // A trimmed match of old_text ending in a line break: 0.3.5 leaves the break and adds new_text's,
            // doubling it.
            case(
                "trimmed_match_with_final_break",
                "a.txt",
                Some("a\n  b\nc\n"),
                json!({"old_text": "a\nb\n", "new_text": "a\nB\n"}),
            ),
            "a\nB\nc\n",
            "a\nB\n\nc\n",
        ),
        (
            // old_text indented deeper than the file: 0.3.5 writes new_text as deep as old_text.
            case(
                "dedented_like_the_file",
                "d.py",
                Some("if a:\n    b()\n    c()\n"),
                json!({"old_text": "        b()\n        c()", "new_text": "        b()\n        d()"}),
            ),
            "if a:\n    b()\n    d()\n",
            "if a:\n        b()\n        d()\n",
        ),
        (
            // Mixed line endings: 0.3.5 writes every line with \r\n; nanobot-rs leaves the lines it did not edit.
            case(
                "mixed_line_endings",
                "m.txt",
                Some("one\r\ntwo\nthree\n"),
                json!({"old_text": "three", "new_text": "3"}),
            ),
            "one\r\ntwo\n3\n",
            "one\r\ntwo\r\n3\r\n",
        ),
    ]
}

async fn python_outcomes(cases: &[&Case]) -> Option<Vec<Outcome>> {
    let python = peers::require_nanobot_python()?;
    let probe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/edit_file_035_probe.py");
    let input: Vec<Value> = cases
        .iter()
        .map(|c| json!({"file": c.file, "content": c.content, "args": c.args}))
        .collect();
    let home = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(python)
        .arg(probe)
        .env("HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(&serde_json::to_vec(&input).unwrap())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the 0.3.5 probe answers within 2 minutes")
        .unwrap();
    assert!(out.status.success(), "the 0.3.5 probe failed: {:?}", out.status);
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    Some(
        results
            .into_iter()
            .map(|r| {
                let output = r["output"].as_str().unwrap().to_owned();
                Outcome {
                    applied: output.starts_with("Patch applied:"),
                    output,
                    content: r["content"].as_str().map(str::to_owned),
                }
            })
            .collect(),
    )
}

async fn our_outcome(c: &Case) -> Outcome {
    let ws = tempfile::tempdir().unwrap();
    let target = ws.path().join(c.file);
    if let Some(content) = c.content {
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, content).unwrap();
    }
    let mut args = c.args.clone();
    args["path"] = json!(c.file);
    let out = fs_registry(ws.path(), true)
        .execute("edit_file", args, &ctx(ws.path()))
        .await;
    Outcome {
        applied: !out.is_error && out.text.starts_with("Patch applied:"),
        output: out.text,
        content: std::fs::read_to_string(&target).ok(),
    }
}

#[tokio::test]
async fn edits_leave_the_same_files_as_0_3_5() {
    let same = same_cases();
    let different = different_cases();
    let all: Vec<&Case> = same.iter().chain(different.iter().map(|(c, ..)| c)).collect();
    let Some(python) = python_outcomes(&all).await else {
        return;
    };
    for (c, theirs) in same.iter().zip(&python) {
        let ours = our_outcome(c).await;
        assert_eq!(ours.content, theirs.content, "{}: the file afterwards", c.name);
        assert_eq!(
            ours.applied, theirs.applied,
            "{}: {ours:?} / 0.3.5: {theirs:?}",
            c.name
        );
        if theirs.applied {
            assert_eq!(ours.output, theirs.output, "{}: the answer", c.name);
        } else {
            assert!(
                ours.content == c.content.map(str::to_owned),
                "{}: refused, unchanged",
                c.name
            );
        }
    }
    for ((c, ours_expected, theirs_expected), theirs) in different.iter().zip(&python[same.len()..]) {
        let ours = our_outcome(c).await;
        assert_eq!(ours.content.as_deref(), Some(*ours_expected), "{}: ours", c.name);
        assert_eq!(
            theirs.content.as_deref(),
            Some(*theirs_expected),
            "{}: 0.3.5's",
            c.name
        );
        assert!(
            ours.applied && theirs.applied,
            "{}: {ours:?} / {theirs:?}",
            c.name
        );
    }
}
