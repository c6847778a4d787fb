use serde_json::json;

use crate::{ctx, fs_registry};

#[tokio::test]
async fn read_file_numbers_and_pages() {
    let ws = tempfile::tempdir().unwrap();
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.path().join("a.txt"), body).unwrap();
    let r = fs_registry(ws.path(), true);
    let c = ctx(ws.path());
    let out = r
        .execute(
            "read_file",
            json!({"path": "a.txt", "offset": "3", "limit": 2}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("3| line 3\n4| line 4"), "{}", out.text);
    assert!(out.text.contains("Use offset=5 to continue"));
    let out = r.execute("read_file", json!({"path": "missing.txt"}), &c).await;
    assert!(out.is_error && out.text.contains("File not found"));
}

#[tokio::test]
async fn read_file_returns_images_as_media_and_refuses_devices() {
    let ws = tempfile::tempdir().unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    std::fs::write(ws.path().join("p.png"), png).unwrap();
    let r = fs_registry(ws.path(), false);
    let c = ctx(ws.path());
    let out = r.execute("read_file", json!({"path": "p.png"}), &c).await;
    assert_eq!(out.media.len(), 1, "{}", out.text);
    assert!(out.text.contains("image/png"));
    for dev in ["/dev/zero", "/dev/random", "/dev/stdin", "/dev/urandom"] {
        let out = r.execute("read_file", json!({"path": dev}), &c).await;
        assert!(
            out.is_error && out.text.contains("blocked"),
            "{dev}: {}",
            out.text
        );
    }
}

#[tokio::test]
async fn write_and_edit() {
    let ws = tempfile::tempdir().unwrap();
    let r = fs_registry(ws.path(), true);
    let c = ctx(ws.path());
    let out = r
        .execute(
            "write_file",
            json!({"path": "d/e/f.txt", "content": "alpha\nbeta\nbeta\ngamma\n"}),
            &c,
        )
        .await;
    assert!(out.text.contains("Successfully wrote 22 bytes"), "{}", out.text);
    let out = r
        .execute(
            "edit_file",
            json!({"path": "d/e/f.txt", "old_text": "beta", "new_text": "B"}),
            &c,
        )
        .await;
    assert!(
        out.is_error && out.text.contains("appears 2 times"),
        "{}",
        out.text
    );
    let out = r
        .execute(
            "edit_file",
            json!({"path": "d/e/f.txt", "old_text": "gamma", "new_text": "G"}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    let out = r
        .execute(
            "edit_file",
            json!({"path": "d/e/f.txt", "old_text": "beta", "new_text": "B", "replace_all": "true"}),
            &c,
        )
        .await;
    assert_eq!(out.text, "Patch applied:\n- update d/e/f.txt (+2/-2)");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("d/e/f.txt")).unwrap(),
        "alpha\nB\nB\nG\n"
    );
    // 0.3.5's selectors: occurrence, line_hint, expected_replacements; refused together; unknown parameters named.
    std::fs::write(ws.path().join("sel.txt"), "x = 1\ny = 2\nx = 1\nx = 1\n").unwrap();
    let edit = |extra: serde_json::Value| {
        let mut args = json!({"path": "sel.txt", "old_text": "x = 1", "new_text": "x = 9"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    let read = || std::fs::read_to_string(ws.path().join("sel.txt")).unwrap();
    let out = r.execute("edit_file", edit(json!({"occurrence": 2})), &c).await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(read(), "x = 1\ny = 2\nx = 9\nx = 1\n");
    let out = r.execute("edit_file", edit(json!({"line_hint": 4})), &c).await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(read(), "x = 1\ny = 2\nx = 9\nx = 9\n");
    for (extra, needle) in [
        (json!({"line_hint": 2}), "line_hint 2 does not match"),
        (json!({"occurrence": 5}), "occurrence 5 is out of range"),
        (
            json!({"occurrence": 1, "line_hint": 1}),
            "line_hint cannot be used with occurrence",
        ),
        (
            json!({"replace_all": true, "occurrence": 1}),
            "occurrence cannot be used with replace_all",
        ),
        (
            json!({"replace_all": true, "expected_replacements": 3}),
            "expected 3 replacements but would make 1",
        ),
        (json!({"occurrence": 0}), "occurrence must be >= 1"),
        (json!({"count": 1}), "unexpected parameter count"),
    ] {
        let out = r.execute("edit_file", edit(extra.clone()), &c).await;
        assert!(out.is_error && out.text.contains(needle), "{extra}: {}", out.text);
    }
    assert_eq!(
        read(),
        "x = 1\ny = 2\nx = 9\nx = 9\n",
        "refused edits change nothing"
    );
    // A match spanning lines covers each of its lines.
    let out = r
        .execute(
            "edit_file",
            json!({"path": "sel.txt", "old_text": "x = 9\nx = 9", "new_text": "z", "line_hint": 4}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(read(), "x = 1\ny = 2\nz\n");
    // not found: the closest region comes back as a diff
    let out = r
        .execute(
            "edit_file",
            json!({"path": "d/e/f.txt", "old_text": "alpah\nB", "new_text": "x"}),
            &c,
        )
        .await;
    assert!(out.is_error);
    assert!(out.text.contains("Best match"), "{}", out.text);
    assert!(
        out.text.contains("-alpah") && out.text.contains("+alpha"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("Possible cause"), "{}", out.text);
    // only the letter case differs: said before the diff
    let out = r
        .execute(
            "edit_file",
            json!({"path": "d/e/f.txt", "old_text": "Alpha\nB", "new_text": "x"}),
            &c,
        )
        .await;
    assert!(out.is_error);
    assert!(
        out.text
            .contains("Possible cause: letter case differs.\nBest match"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn list_glob_grep() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::create_dir_all(p.join("src/deep")).unwrap();
    std::fs::create_dir_all(p.join("node_modules/x")).unwrap();
    std::fs::create_dir_all(p.join("target")).unwrap();
    std::fs::write(p.join("src/a.rs"), "fn main() {}\n// TODO one\n").unwrap();
    std::fs::write(p.join("src/deep/b.rs"), "// todo two\nlet x = 1;\n").unwrap();
    std::fs::write(p.join("node_modules/x/c.rs"), "TODO hidden\n").unwrap();
    std::fs::write(p.join("target/d.rs"), "TODO hidden\n").unwrap();
    std::fs::write(p.join("bin.dat"), b"TODO\0\x01\x02").unwrap();
    let r = fs_registry(p, true);
    let c = ctx(p);

    let out = r
        .execute("list_dir", json!({"path": ".", "recursive": true}), &c)
        .await;
    assert!(out.text.contains("src/deep/b.rs"), "{}", out.text);
    assert!(
        !out.text.contains("node_modules") && !out.text.contains("target"),
        "{}",
        out.text
    );

    let out = r.execute("glob", json!({"pattern": "*.rs"}), &c).await;
    let mut lines: Vec<&str> = out.text.lines().collect();
    lines.sort();
    assert_eq!(lines, ["src/a.rs", "src/deep/b.rs"]);
    let out = r.execute("glob", json!({"pattern": "src/*.rs"}), &c).await;
    assert_eq!(out.text, "src/a.rs");

    let out = r
        .execute(
            "grep",
            json!({"pattern": "todo", "case_insensitive": true, "output_mode": "files_with_matches"}),
            &c,
        )
        .await;
    let mut lines: Vec<&str> = out.text.lines().collect();
    lines.sort();
    assert_eq!(lines, ["src/a.rs", "src/deep/b.rs"], "{}", out.text);
    let out = r
        .execute(
            "grep",
            json!({"pattern": "TODO", "output_mode": "content", "context_lines": 1}),
            &c,
        )
        .await;
    assert_eq!(out.text, "src/a.rs-1- fn main() {}\nsrc/a.rs:2: // TODO one");
    let out = r
        .execute(
            "grep",
            json!({"pattern": "(?i)todo", "output_mode": "count", "glob": "*.rs"}),
            &c,
        )
        .await;
    assert_eq!(out.text, "src/a.rs: 1\nsrc/deep/b.rs: 1");
    let out = r
        .execute(
            "grep",
            json!({"pattern": "(?i)todo", "output_mode": "content", "head_limit": 1, "context_before": 0, "context_after": 0}),
            &c,
        )
        .await;
    assert!(
        out.text
            .starts_with("src/a.rs:2: // TODO one\n\n(showing 1 to 1 of 2 results; use offset=1"),
        "{}",
        out.text
    );
    // 0.3.5's parameters: the default is content with 5 lines of context; offset pages; fixed strings; types.
    let out = r.execute("grep", json!({"pattern": "TODO one"}), &c).await;
    assert_eq!(
        out.text, "src/a.rs-1- fn main() {}\nsrc/a.rs:2: // TODO one",
        "{}",
        out.text
    );
    let out = r
        .execute(
            "grep",
            json!({"pattern": "(?i)todo", "output_mode": "count", "offset": 1}),
            &c,
        )
        .await;
    assert_eq!(out.text, "src/deep/b.rs: 1", "{}", out.text);
    let out = r
        .execute("grep", json!({"pattern": "(?i)todo", "fixed_strings": true}), &c)
        .await;
    assert!(
        out.text.starts_with("No matches"),
        "a literal, not a regex: {}",
        out.text
    );
    let out = r
        .execute(
            "grep",
            json!({"pattern": "todo", "case_insensitive": true, "type": "md"}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("No matches"), "{}", out.text);
    let out = r
        .execute(
            "grep",
            json!({"pattern": "todo", "case_insensitive": true, "type": "rust", "output_mode": "count"}),
            &c,
        )
        .await;
    assert_eq!(out.text, "src/a.rs: 1\nsrc/deep/b.rs: 1", "{}", out.text);
    // A type ripgrep does not know matches by extension, as in 0.3.5.
    let out = r
        .execute("grep", json!({"pattern": "TODO", "type": "dat"}), &c)
        .await;
    assert!(
        out.text.starts_with("No matches"),
        "binary files stay skipped: {}",
        out.text
    );
    let out = r
        .execute("grep", json!({"pattern": "x", "pages": "1-2"}), &c)
        .await;
    assert!(out.is_error && out.text.contains("PDF"), "{}", out.text);
    let out = r.execute("grep", json!({"pattern": "nothing-here"}), &c).await;
    assert!(out.text.starts_with("No matches"));
    let out = r
        .execute("grep", json!({"pattern": "(", "output_mode": "nope"}), &c)
        .await;
    assert!(
        out.is_error && out.text.contains("output_mode must be one of"),
        "{}",
        out.text
    );
}

/// Escape attempts against the path sandbox: every one must be refused, by every file tool.
#[tokio::test]
async fn sandbox_escape_table() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s3cret").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("file_link")).unwrap();
    let sandbox = nanobot_tools::sandbox::Sandbox::new(&ws, true).with_home(Some(outside.clone()));
    let reg = nanobot_tools::ToolRegistry::default();
    nanobot_tools::builtin::register_fs_tools(&reg, &sandbox);
    let c = ctx(&ws);
    let secret_abs = outside.join("secret.txt").display().to_string();
    let attempts = [
        "../outside/secret.txt".to_owned(),
        "sub/../../outside/secret.txt".to_owned(),
        "~/secret.txt".to_owned(),
        secret_abs.clone(),
        "link/secret.txt".to_owned(),
        "file_link".to_owned(),
        "/etc/passwd".to_owned(),
        "./link/../link/secret.txt".to_owned(),
    ];
    for a in &attempts {
        let out = reg.execute("read_file", json!({"path": a}), &c).await;
        assert!(
            out.is_error && out.text.contains("outside allowed directory"),
            "read {a}: {}",
            out.text
        );
        let out = reg
            .execute("write_file", json!({"path": a, "content": "pwn"}), &c)
            .await;
        assert!(out.is_error, "write {a}: {}", out.text);
        let out = reg.execute("list_dir", json!({"path": a}), &c).await;
        assert!(out.is_error, "list {a}: {}", out.text);
    }
    let out = reg
        .execute("grep", json!({"pattern": "s3cret", "path": "link"}), &c)
        .await;
    assert!(out.is_error, "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "s3cret"
    );
    // inside the workspace, a dotdot that stays inside is fine
    let out = reg
        .execute("write_file", json!({"path": "a/../b.txt", "content": "ok"}), &c)
        .await;
    assert!(!out.is_error, "{}", out.text);
    // the built-in skills folder stays readable, but not writable
    let skills = root.path().join("skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(skills.join("SKILL.md"), "# skill").unwrap();
    let sandbox = nanobot_tools::sandbox::Sandbox::new(&ws, true).with_read_root(&skills);
    let reg = nanobot_tools::ToolRegistry::default();
    nanobot_tools::builtin::register_fs_tools(&reg, &sandbox);
    let p = skills.join("SKILL.md").display().to_string();
    let out = reg.execute("read_file", json!({"path": p}), &c).await;
    assert_eq!(out.text, "1| # skill");
    let out = reg
        .execute("write_file", json!({"path": p, "content": "x"}), &c)
        .await;
    assert!(out.is_error);
}

/// `apply_patch` (0.3.5's tool): several edits checked together, written together, or nothing written.
#[tokio::test]
async fn apply_patch_is_all_or_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::write(p.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(p.join("crlf.txt"), "x\r\ny\r\n").unwrap();
    let r = fs_registry(p, true);
    let c = ctx(p);
    let read = |name: &str| std::fs::read_to_string(p.join(name)).ok();

    // A dry run checks and summarises, and writes nothing.
    let edits = json!([
        {"path": "a.txt", "action": "replace", "old_text": "two", "new_text": "TWO"},
        {"path": "a.txt", "action": "add", "new_text": "three"},
        {"path": "new/b.txt", "action": "add", "new_text": "fresh"},
        {"path": "crlf.txt", "action": "replace", "old_text": "y\n", "new_text": "Y\n"}
    ]);
    let out = r
        .execute("apply_patch", json!({"edits": edits, "dry_run": true}), &c)
        .await;
    assert_eq!(
        out.text,
        "Patch dry-run succeeded:\n- update a.txt (+2/-1)\n- add new/b.txt (+1/-0)\n- update crlf.txt (+1/-1)",
        "{}",
        out.text
    );
    assert_eq!(read("a.txt").as_deref(), Some("one\ntwo\n"));
    assert!(read("new/b.txt").is_none());

    let out = r.execute("apply_patch", json!({"edits": edits}), &c).await;
    assert!(out.text.starts_with("Patch applied:\n"), "{}", out.text);
    assert_eq!(read("a.txt").as_deref(), Some("one\nTWO\nthree\n"));
    assert_eq!(read("new/b.txt").as_deref(), Some("fresh\n"));
    assert_eq!(read("crlf.txt").as_deref(), Some("x\r\nY\r\n"), "line ends kept");

    // One bad edit: nothing is written, and the error says which and why.
    for (bad, needle) in [
        (
            json!({"path": "a.txt", "action": "replace", "old_text": "nope", "new_text": "x"}),
            "old_text not found in a.txt",
        ),
        (
            json!({"path": "missing.txt", "action": "replace", "old_text": "a", "new_text": "b"}),
            "file to update does not exist",
        ),
        (
            json!({"path": "a.txt", "action": "replace", "old_text": "", "new_text": "b"}),
            "old_text required for replace",
        ),
        (
            json!({"path": "a.txt", "action": "add"}),
            "new_text required for add",
        ),
        (
            json!({"path": "../outside.txt", "action": "add", "new_text": "x"}),
            "outside",
        ),
    ] {
        let edits = json!([{"path": "a.txt", "action": "add", "new_text": "four"}, bad]);
        let out = r.execute("apply_patch", json!({"edits": edits}), &c).await;
        assert!(
            out.is_error && out.text.to_lowercase().contains(needle),
            "{bad}: {}",
            out.text
        );
        assert_eq!(read("a.txt").as_deref(), Some("one\nTWO\nthree\n"), "{bad}");
    }
    std::fs::write(p.join("dup.txt"), "z z\n").unwrap();
    let out = r
        .execute(
            "apply_patch",
            json!({"edits": [{"path": "dup.txt", "action": "replace", "old_text": "z", "new_text": "q"}]}),
            &c,
        )
        .await;
    assert!(
        out.is_error && out.text.contains("appears multiple times"),
        "{}",
        out.text
    );
    let out = r.execute("apply_patch", json!({"edits": []}), &c).await;
    assert!(out.is_error, "{}", out.text);
    let out = r
        .execute(
            "apply_patch",
            json!({"edits": [{"path": "a.txt", "action": "delete"}]}),
            &c,
        )
        .await;
    assert!(out.is_error && out.text.contains("action"), "{}", out.text);
}

/// `find_files` (0.3.5's tool): name terms, glob, type, directories, sorting and paging.
#[tokio::test]
async fn find_files_by_terms_glob_and_type() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    for f in [
        "src/main.rs",
        "src/util/Helpers.rs",
        "tests/test_main.py",
        "README.md",
        "node_modules/x/y.js",
    ] {
        std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
        std::fs::write(p.join(f), "x\n").unwrap();
    }
    let r = fs_registry(p, true);
    let c = ctx(p);
    let find = |args: serde_json::Value| {
        let (r, c) = (&r, &c);
        async move { r.execute("find_files", args, c).await.text }
    };
    assert_eq!(
        find(json!({})).await,
        "README.md\nsrc/main.rs\nsrc/util/Helpers.rs\ntests/test_main.py",
        "sorted by path, dependency folders skipped"
    );
    assert_eq!(find(json!({"query": "HELP src"})).await, "src/util/Helpers.rs");
    assert_eq!(
        find(json!({"glob": "tests/**/test_*.py"})).await,
        "tests/test_main.py"
    );
    assert_eq!(
        find(json!({"type": "rust"})).await,
        "src/main.rs\nsrc/util/Helpers.rs"
    );
    assert_eq!(find(json!({"type": "md"})).await, "README.md");
    assert_eq!(
        find(json!({"query": "util", "include_dirs": true})).await,
        "src/util/\nsrc/util/Helpers.rs"
    );
    assert_eq!(find(json!({"path": "src", "query": "main"})).await, "src/main.rs");
    let page = find(json!({"head_limit": 2, "offset": 1})).await;
    assert!(
        page.starts_with("src/main.rs\nsrc/util/Helpers.rs\n\n(showing 2 to 3 of 4; use offset=3"),
        "{page}"
    );
    assert_eq!(
        find(json!({"query": "nothing-like-this"})).await,
        "No files found"
    );
    let out = r.execute("find_files", json!({"path": "../"}), &c).await;
    assert!(out.is_error, "{}", out.text);
    let out = r.execute("find_files", json!({"sort": "size"}), &c).await;
    assert!(out.is_error && out.text.contains("sort"), "{}", out.text);
}

/// A tree past the walk's bound (200 000 entries): `glob`, `grep` and `find_files` say that their answer may be
/// missing files, with or without matches, instead of passing a partial answer off as whole.
#[tokio::test]
async fn searches_past_the_walk_bound_say_they_stopped() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::write(p.join("a-needle.txt"), "needle\n").unwrap();
    let many = p.join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..200_001 {
        std::fs::File::create(many.join(format!("f{i:06}"))).unwrap();
    }
    let r = fs_registry(p, true);
    let c = ctx(p);
    let stopped = "the search stopped after 200000 entries, so files may be missing";
    for (tool, args) in [
        ("glob", json!({"pattern": "*.nothing"})),
        ("glob", json!({"pattern": "*.txt"})),
        ("grep", json!({"pattern": "nothing-like-this"})),
        ("grep", json!({"pattern": "needle"})),
        ("find_files", json!({"glob": "*.nothing"})),
    ] {
        let out = r.execute(tool, args.clone(), &c).await.text;
        assert!(out.contains(stopped), "{tool} {args}: {out}");
    }
    let found = r.execute("grep", json!({"pattern": "needle"}), &c).await.text;
    assert!(found.contains("a-needle.txt"), "{found}");
}

/// A call's `HiddenPaths` (another conversation's memory): the file tools refuse paths into a hidden folder, by
/// name and through a link, their walks skip it, and a shown folder inside it stays reachable.
#[tokio::test]
async fn hidden_folders_are_out_of_reach_and_shown_ones_inside_them_are_not() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("memory/scopes/mine")).unwrap();
    std::fs::create_dir_all(ws.join("memory/scopes/theirs")).unwrap();
    std::fs::write(ws.join("memory/scopes/mine/MEMORY.md"), "MINE-NOTE").unwrap();
    std::fs::write(ws.join("memory/scopes/theirs/MEMORY.md"), "THEIR-SECRET").unwrap();
    std::os::unix::fs::symlink("memory/scopes/theirs", ws.join("shortcut")).unwrap();
    for restrict in [true, false] {
        let reg = crate::fs_registry(&ws, restrict);
        let mut ctx = crate::ctx(&ws);
        ctx.extensions.insert(nanobot_tools::HiddenPaths::new(
            vec![ws.join("memory/scopes")],
            vec![ws.join("memory/scopes/mine")],
        ));
        let run = |tool: &'static str, args: serde_json::Value| {
            let (reg, ctx) = (&reg, &ctx);
            async move { reg.execute(tool, args, ctx).await.text }
        };
        for (tool, args) in [
            ("read_file", json!({"path": "memory/scopes/theirs/MEMORY.md"})),
            ("read_file", json!({"path": "shortcut/MEMORY.md"})),
            ("list_dir", json!({"path": "memory/scopes"})),
            (
                "write_file",
                json!({"path": "memory/scopes/theirs/MEMORY.md", "content": "x"}),
            ),
            (
                "write_file",
                json!({"path": "memory/scopes/new/MEMORY.md", "content": "x"}),
            ),
        ] {
            let out = run(tool, args.clone()).await;
            assert!(
                out.contains("another conversation's memory"),
                "{restrict} {tool} {args}: {out}"
            );
        }
        let grepped = run("grep", json!({"pattern": "SECRET|NOTE"})).await;
        assert!(!grepped.contains("THEIR-SECRET"), "{grepped}");
        let found = run("glob", json!({"pattern": "**/MEMORY.md"})).await;
        assert!(!found.contains("theirs"), "{found}");
        // The shown folder, by name, for reading, listing, searching and writing.
        assert!(
            run("read_file", json!({"path": "memory/scopes/mine/MEMORY.md"}))
                .await
                .contains("MINE-NOTE")
        );
        assert!(
            run("list_dir", json!({"path": "memory/scopes/mine"}))
                .await
                .contains("MEMORY.md")
        );
        assert!(
            run("grep", json!({"pattern": "NOTE", "path": "memory/scopes/mine"}))
                .await
                .contains("MINE-NOTE")
        );
        let wrote = run(
            "write_file",
            json!({"path": "memory/scopes/mine/MEMORY.md", "content": "MINE-NOTE 2"}),
        )
        .await;
        assert!(wrote.starts_with("Successfully"), "{wrote}");
        // Without the extension, the same registry reaches everything (the control).
        let plain = reg
            .execute(
                "read_file",
                json!({"path": "memory/scopes/theirs/MEMORY.md"}),
                &crate::ctx(&ws),
            )
            .await
            .text;
        assert!(plain.contains("THEIR-SECRET"), "{plain}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("memory/scopes/theirs/MEMORY.md")).unwrap(),
        "THEIR-SECRET"
    );
}

/// An empty `old_text` creates a file (as 0.3.5), through the same confinement as any write.
#[tokio::test]
async fn edit_file_creates_files_only_where_writes_are_allowed() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let r = fs_registry(&ws, true);
    let c = ctx(&ws);
    let create = |path: &str| json!({"path": path, "old_text": "", "new_text": "made\n"});
    let out = r.execute("edit_file", create("sub/new.txt"), &c).await;
    assert_eq!(out.text, "Patch applied:\n- add sub/new.txt (+1/-0)");
    assert_eq!(std::fs::read_to_string(ws.join("sub/new.txt")).unwrap(), "made\n");
    for outside in ["../out.txt", root.path().join("out2.txt").to_str().unwrap()] {
        let out = r.execute("edit_file", create(outside), &c).await;
        assert!(out.is_error, "{outside}: {}", out.text);
    }
    std::os::unix::fs::symlink(root.path(), ws.join("up")).unwrap();
    let out = r.execute("edit_file", create("up/out3.txt"), &c).await;
    assert!(out.is_error, "through a symlink: {}", out.text);
    let left: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["ws"], "nothing written outside the workspace");
    // An existing file with text is not replaced by a "create".
    let out = r.execute("edit_file", create("sub/new.txt"), &c).await;
    assert!(
        out.is_error && out.text.contains("already exists and is not empty"),
        "{}",
        out.text
    );
}

/// A missing file named like files beside it: the answer names them, most alike first (0.3.5's "Did you mean").
#[tokio::test]
async fn edit_file_on_a_missing_file_names_similar_ones() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("notes")).unwrap();
    for name in ["todo.md", "todo.txt", "shopping.md"] {
        std::fs::write(ws.path().join("notes").join(name), "x\n").unwrap();
    }
    std::fs::create_dir(ws.path().join("notes/todo.d")).unwrap();
    let r = fs_registry(ws.path(), true);
    let c = ctx(ws.path());
    let edit = |path: &str| json!({"path": path, "old_text": "x", "new_text": "y"});
    let out = r.execute("edit_file", edit("notes/todo.mdx"), &c).await;
    assert!(out.is_error, "{}", out.text);
    assert!(
        out.text
            .contains("File not found: notes/todo.mdx\nDid you mean: notes/todo.md, notes/todo.txt?\n"),
        "{}",
        out.text
    );
    let out = r.execute("edit_file", edit("nothing-like-it.rs"), &c).await;
    assert!(out.is_error && !out.text.contains("Did you mean"), "{}", out.text);
}
