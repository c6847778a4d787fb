//! The file tools open by handle: races, pre-existing links, magic links and nanobot's data directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ToolRegistry, builtin};
use serde_json::json;

use super::ctx;

const OUTSIDE: &str = "OUTSIDE-CANARY-7f3a";
const DATA: &str = "sk-DATA-CANARY-91c2";

fn registry(sandbox: &Sandbox) -> ToolRegistry {
    let reg = ToolRegistry::default();
    builtin::register_fs_tools(&reg, sandbox);
    reg
}

/// Every file below `dir` with its content (symlinks listed, not followed).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_symlink() {
                out.push((
                    e.path(),
                    std::fs::read_link(e.path())
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                ));
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A thread that keeps swapping `ws/flip` between a real directory and a symlink to `target` with
/// `renameat2(RENAME_EXCHANGE)` (so `flip` always exists, as one or the other), until `stop` is set.
fn flipper(
    ws: &Path,
    target: &Path,
    stop: Arc<AtomicBool>,
    flips: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::fs::create_dir_all(ws.join("flip")).unwrap();
    std::fs::write(ws.join("flip/inside.txt"), "INSIDE\n").unwrap();
    std::os::unix::fs::symlink(target, ws.join("parked")).unwrap();
    let ws = ws.to_path_buf();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                ws.join("flip"),
                rustix::fs::CWD,
                ws.join("parked"),
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .unwrap();
            flips.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Runs every file tool through `flip` while it is swapped, at least 200 rounds and 200 swaps; returns how many
/// reads of the inside file succeeded.
async fn attack_through_flip(
    reg: &ToolRegistry,
    ws: &Path,
    flips: &AtomicUsize,
    canary: &str,
    pattern: &str,
) -> usize {
    let c = ctx(ws);
    let mut ok_reads = 0;
    let mut round = 0usize;
    while round < 200 || (flips.load(Ordering::Relaxed) < 200 && round < 200_000) {
        let out = reg
            .execute("read_file", json!({"path": "flip/inside.txt"}), &c)
            .await;
        assert!(
            !out.text.contains(canary),
            "round {round}: read leaked: {}",
            out.text
        );
        if out.text.contains("INSIDE") {
            ok_reads += 1;
        }
        let out = reg
            .execute("read_file", json!({"path": "flip/canary.txt"}), &c)
            .await;
        assert!(
            !out.text.contains(canary),
            "round {round}: read leaked: {}",
            out.text
        );
        let out = reg
            .execute(
                "write_file",
                json!({"path": format!("flip/new-{round}.txt"), "content": "pwned"}),
                &c,
            )
            .await;
        assert!(!out.text.contains(canary), "{}", out.text);
        let out = reg
            .execute(
                "write_file",
                json!({"path": "flip/written.txt", "content": "pwned"}),
                &c,
            )
            .await;
        assert!(!out.text.contains(canary), "{}", out.text);
        let out = reg
            .execute(
                "edit_file",
                json!({"path": "flip/canary.txt", "old_text": canary, "new_text": "pwned"}),
                &c,
            )
            .await;
        assert!(!out.text.contains(canary), "{}", out.text);
        let out = reg.execute("list_dir", json!({"path": "flip"}), &c).await;
        assert!(
            !out.text.contains("canary.txt"),
            "round {round}: listing leaked: {}",
            out.text
        );
        let out = reg
            .execute(
                "grep",
                json!({"pattern": pattern, "path": "flip", "output_mode": "content"}),
                &c,
            )
            .await;
        assert!(
            !out.text.contains(canary),
            "round {round}: grep leaked: {}",
            out.text
        );
        let out = reg
            .execute("grep", json!({"pattern": pattern, "output_mode": "content"}), &c)
            .await;
        assert!(
            !out.text.contains(canary),
            "round {round}: grep leaked: {}",
            out.text
        );
        let out = reg.execute("glob", json!({"pattern": "**/canary*"}), &c).await;
        assert!(
            !out.text.contains("canary.txt"),
            "round {round}: glob leaked: {}",
            out.text
        );
        round += 1;
    }
    ok_reads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_raced_into_a_symlink_never_leads_outside() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("canary.txt"), OUTSIDE).unwrap();
    std::fs::write(outside.join("inside.txt"), OUTSIDE).unwrap();
    let before = snapshot(&outside);

    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let t = flipper(&ws, &outside, stop.clone(), flips.clone());
    let reg = registry(&Sandbox::new(&ws, true));
    let ok = attack_through_flip(&reg, &ws, &flips, OUTSIDE, "OUTSIDE-CANARY-[0-9a-f]{4}").await;
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();

    assert_eq!(
        snapshot(&outside),
        before,
        "something outside the workspace changed"
    );
    assert!(ok > 0, "no read through the real folder succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrestricted_a_folder_raced_into_the_data_dir_never_reaches_it() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join(".nanobot");
    let ws = data.join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(data.join("config.json"), format!("{{\"apiKey\": \"{DATA}\"}}")).unwrap();
    std::fs::write(data.join("canary.txt"), DATA).unwrap();
    std::fs::write(data.join("inside.txt"), DATA).unwrap();
    let before = snapshot(&data)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&ws))
        .collect::<Vec<_>>();

    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let t = flipper(&ws, &data, stop.clone(), flips.clone());
    let sandbox = Sandbox::new(&ws, false)
        .with_home(Some(root.path().to_path_buf()))
        .with_data_dir(Some(data.clone()));
    let reg = registry(&sandbox);
    let ok = attack_through_flip(&reg, &ws, &flips, DATA, "DATA-CANARY-[0-9a-f]{4}").await;
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();

    let after: Vec<_> = snapshot(&data)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&ws))
        .collect();
    assert_eq!(after, before, "something in the data directory changed");
    assert!(ok > 0, "no read through the real folder succeeded");
}

fn links_fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), OUTSIDE).unwrap();
    std::fs::write(outside.join("hard.txt"), OUTSIDE).unwrap();
    std::fs::write(ws.join("real.txt"), "real\n").unwrap();
    fn sym(target: impl AsRef<Path>, link: PathBuf) -> std::io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }
    sym(&outside, ws.join("dir_abs")).unwrap();
    sym("../outside", ws.join("dir_rel")).unwrap();
    sym("../../outside", ws.join("sub/dir_rel2")).unwrap();
    sym(outside.join("secret.txt"), ws.join("file_abs")).unwrap();
    sym("../outside/secret.txt", ws.join("file_rel")).unwrap();
    sym("/proc/self/root", ws.join("magic")).unwrap();
    std::fs::hard_link(outside.join("hard.txt"), ws.join("hard.txt")).unwrap();
    // links that stay inside keep working
    sym("real.txt", ws.join("inner_link")).unwrap();
    sym(ws.join("sub"), ws.join("inner_dir_abs")).unwrap();
    (root, ws, outside)
}

#[tokio::test]
async fn pre_existing_links_and_magic_paths_are_refused() {
    let (root, ws, outside) = links_fixture();
    let before = snapshot(&outside);
    let reg = registry(&Sandbox::new(&ws, true).with_home(Some(outside.clone())));
    let c = ctx(&ws);
    let outside_abs = outside.join("secret.txt").display().to_string();
    let attempts = [
        "dir_abs/secret.txt".to_owned(),
        "dir_rel/secret.txt".to_owned(),
        "sub/dir_rel2/secret.txt".to_owned(),
        "file_abs".to_owned(),
        "file_rel".to_owned(),
        "hard.txt".to_owned(),
        format!("magic{outside_abs}"),
        format!("/proc/self/root{outside_abs}"),
        format!("/proc/{}/root{outside_abs}", std::process::id()),
        "/proc/self/cwd/../outside/secret.txt".to_owned(),
        "../outside/secret.txt".to_owned(),
        "sub/../../outside/secret.txt".to_owned(),
        outside_abs.clone(),
        "~/secret.txt".to_owned(),
        format!("{}/../outside/secret.txt", ws.display()),
    ];
    for a in &attempts {
        let out = reg.execute("read_file", json!({"path": a}), &c).await;
        assert!(
            out.is_error && !out.text.contains(OUTSIDE),
            "read {a}: {}",
            out.text
        );
        let out = reg
            .execute("write_file", json!({"path": a, "content": "pwned"}), &c)
            .await;
        assert!(out.is_error, "write {a}: {}", out.text);
        let out = reg
            .execute(
                "edit_file",
                json!({"path": a, "old_text": OUTSIDE, "new_text": "pwned"}),
                &c,
            )
            .await;
        assert!(out.is_error, "edit {a}: {}", out.text);
        let out = reg
            .execute("grep", json!({"pattern": "CANARY", "path": a}), &c)
            .await;
        assert!(!out.text.contains(OUTSIDE), "grep {a}: {}", out.text);
    }
    for dir in ["dir_abs", "dir_rel", "sub/dir_rel2", "magic"] {
        let out = reg.execute("list_dir", json!({"path": dir}), &c).await;
        assert!(
            out.is_error && !out.text.contains("secret.txt"),
            "list {dir}: {}",
            out.text
        );
        let out = reg
            .execute("glob", json!({"pattern": "*", "path": dir}), &c)
            .await;
        assert!(
            out.is_error && !out.text.contains("secret.txt"),
            "glob {dir}: {}",
            out.text
        );
    }
    // a whole-workspace search does not follow the links either
    let out = reg
        .execute("grep", json!({"pattern": "CANARY", "output_mode": "content"}), &c)
        .await;
    assert!(!out.text.contains(OUTSIDE), "{}", out.text);
    let out = reg
        .execute("list_dir", json!({"path": ".", "recursive": true}), &c)
        .await;
    assert!(!out.text.contains("secret.txt"), "{}", out.text);
    // the hard link is refused with a reason
    let out = reg.execute("read_file", json!({"path": "hard.txt"}), &c).await;
    assert!(out.text.contains("hard-linked"), "{}", out.text);
    assert_eq!(snapshot(&outside), before);
    assert!(ws.join("hard.txt").exists(), "the refused hard link was replaced");

    // links that stay inside the workspace still work
    let out = reg.execute("read_file", json!({"path": "inner_link"}), &c).await;
    assert_eq!(out.text, "1| real");
    let out = reg
        .execute(
            "write_file",
            json!({"path": "inner_dir_abs/new.txt", "content": "ok"}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(std::fs::read_to_string(ws.join("sub/new.txt")).unwrap(), "ok");
    drop(root);
}

#[tokio::test]
async fn unrestricted_follows_links_but_never_into_the_data_dir() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().to_path_buf();
    let data = home.join(".nanobot");
    let ws = data.join("workspace");
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    std::fs::create_dir_all(data.join("sessions")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(data.join("config.json"), format!("{{\"apiKey\": \"{DATA}\"}}")).unwrap();
    std::fs::write(data.join("sessions/cli.jsonl"), DATA).unwrap();
    std::fs::write(ws.join("memory/MEMORY.md"), "note\n").unwrap();
    std::fs::write(elsewhere.join("ok.txt"), "elsewhere\n").unwrap();
    std::os::unix::fs::symlink(&data, ws.join("up_abs")).unwrap();
    std::os::unix::fs::symlink("..", ws.join("up_rel")).unwrap();
    std::os::unix::fs::symlink(&data, elsewhere.join("to_data")).unwrap();
    std::os::unix::fs::symlink(data.join("config.json"), elsewhere.join("cfg")).unwrap();
    let before = snapshot(&data);

    let sandbox = Sandbox::new(&ws, false)
        .with_home(Some(home.clone()))
        .with_data_dir(Some(data.clone()));
    let reg = registry(&sandbox);
    let c = ctx(&ws);
    let cfg = data.join("config.json").display().to_string();
    let attempts = [
        cfg.clone(),
        "../config.json".to_owned(),
        "~/.nanobot/config.json".to_owned(),
        "~/.nanobot/sessions/cli.jsonl".to_owned(),
        "up_abs/config.json".to_owned(),
        "up_rel/config.json".to_owned(),
        format!("{}/to_data/config.json", elsewhere.display()),
        format!("{}/cfg", elsewhere.display()),
        format!("/proc/self/root{cfg}"),
        format!("{}/workspace/../config.json", data.display()),
    ];
    for a in &attempts {
        let out = reg.execute("read_file", json!({"path": a}), &c).await;
        assert!(out.is_error && !out.text.contains(DATA), "read {a}: {}", out.text);
        let out = reg
            .execute("write_file", json!({"path": a, "content": "pwned"}), &c)
            .await;
        assert!(out.is_error, "write {a}: {}", out.text);
        let out = reg
            .execute(
                "edit_file",
                json!({"path": a, "old_text": DATA, "new_text": "pwned"}),
                &c,
            )
            .await;
        assert!(out.is_error, "edit {a}: {}", out.text);
    }
    let out = reg.execute("read_file", json!({"path": cfg}), &c).await;
    assert!(out.text.contains("data directory"), "{}", out.text);
    for dir in [
        "~/.nanobot",
        "~/.nanobot/sessions",
        "up_rel",
        "~/elsewhere/to_data",
    ] {
        let out = reg.execute("list_dir", json!({"path": dir}), &c).await;
        assert!(
            out.is_error && !out.text.contains("config.json"),
            "list {dir}: {}",
            out.text
        );
    }
    let out = reg
        .execute(
            "write_file",
            json!({"path": "~/.nanobot/new.txt", "content": "x"}),
            &c,
        )
        .await;
    assert!(out.is_error, "{}", out.text);
    let out = reg
        .execute(
            "write_file",
            json!({"path": "~/.nanobot/newdir/x.txt", "content": "x"}),
            &c,
        )
        .await;
    assert!(out.is_error, "{}", out.text);
    // searching from the home directory skips the data directory
    let out = reg
        .execute(
            "grep",
            json!({"pattern": "DATA-CANARY-[0-9a-f]+", "path": "~", "output_mode": "content"}),
            &c,
        )
        .await;
    assert!(!out.text.contains(DATA), "{}", out.text);
    let out = reg
        .execute("glob", json!({"pattern": "*.json*", "path": "~"}), &c)
        .await;
    assert!(
        !out.text.contains("config.json") && !out.text.contains("cli.jsonl"),
        "{}",
        out.text
    );
    let out = reg
        .execute("list_dir", json!({"path": "~", "recursive": true}), &c)
        .await;
    assert!(!out.text.contains("config.json"), "{}", out.text);
    assert_eq!(snapshot(&data), before, "the data directory changed");

    // the workspace inside the data directory, and everything else, stay reachable
    let out = reg
        .execute("read_file", json!({"path": "memory/MEMORY.md"}), &c)
        .await;
    assert_eq!(out.text, "1| note");
    let out = reg
        .execute("read_file", json!({"path": "~/elsewhere/ok.txt"}), &c)
        .await;
    assert_eq!(out.text, "1| elsewhere");
    let out = reg
        .execute(
            "write_file",
            json!({"path": "~/elsewhere/new/deep.txt", "content": "x"}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("new/deep.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn restricted_workspace_holding_the_data_dir_still_hides_it() {
    // `"workspace": "~"`: the data directory lies inside the workspace.
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join(".nanobot");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("config.json"), DATA).unwrap();
    std::fs::write(home.path().join("notes.txt"), "notes\n").unwrap();
    let sandbox = Sandbox::new(home.path(), true).with_data_dir(Some(data.clone()));
    let reg = registry(&sandbox);
    let c = ctx(home.path());
    let out = reg
        .execute("read_file", json!({"path": ".nanobot/config.json"}), &c)
        .await;
    assert!(out.is_error && !out.text.contains(DATA), "{}", out.text);
    let out = reg
        .execute(
            "write_file",
            json!({"path": ".nanobot/config.json", "content": "{}"}),
            &c,
        )
        .await;
    assert!(out.is_error, "{}", out.text);
    let out = reg
        .execute(
            "grep",
            json!({"pattern": "DATA-CANARY-[0-9a-f]+", "output_mode": "content"}),
            &c,
        )
        .await;
    assert!(!out.text.contains(DATA), "{}", out.text);
    assert_eq!(std::fs::read_to_string(data.join("config.json")).unwrap(), DATA);
    let out = reg.execute("read_file", json!({"path": "notes.txt"}), &c).await;
    assert_eq!(out.text, "1| notes");
}

#[tokio::test]
async fn atomic_write_leaves_no_temp_files_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let ws = tempfile::tempdir().unwrap();
    let reg = registry(&Sandbox::new(ws.path(), true));
    let c = ctx(ws.path());
    for content in ["one", "two", "three"] {
        let out = reg
            .execute("write_file", json!({"path": "d/f.txt", "content": content}), &c)
            .await;
        assert!(!out.is_error, "{}", out.text);
    }
    std::fs::set_permissions(ws.path().join("d/f.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = reg
        .execute(
            "edit_file",
            json!({"path": "d/f.txt", "old_text": "three", "new_text": "four"}),
            &c,
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    let names: Vec<String> = std::fs::read_dir(ws.path().join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["f.txt"]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("d/f.txt")).unwrap(),
        "four"
    );
    let mode = std::fs::metadata(ws.path().join("d/f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // a directory in the way is reported, not replaced
    let out = reg
        .execute("write_file", json!({"path": "d", "content": "x"}), &c)
        .await;
    assert!(
        out.is_error && out.text.contains("is a directory"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn fifos_and_devices_are_refused_without_blocking() {
    let ws = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(ws.path().join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let reg = registry(&Sandbox::new(ws.path(), false));
    let c = ctx(ws.path());
    let out = reg.execute("read_file", json!({"path": "pipe"}), &c).await;
    assert!(
        out.is_error && out.text.contains("not a regular file"),
        "{}",
        out.text
    );
    let out = reg.execute("read_file", json!({"path": "/dev/zero"}), &c).await;
    assert!(out.is_error, "{}", out.text);
    let out = reg
        .execute("grep", json!({"pattern": "x", "path": "pipe"}), &c)
        .await;
    assert!(out.is_error, "{}", out.text);
}

/// The layout `onboard` writes (0.3.5's): the workspace `~/.nanobot/workspace` inside the data directory
/// `~/.nanobot`. Every file tool reaches the workspace itself, by any name of it, in both modes; the data
/// directory around it stays out of reach.
#[tokio::test]
async fn onboard_layout_every_file_tool_reaches_the_workspace_in_both_modes() {
    for restrict in [false, true] {
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join(".nanobot");
        let ws = data.join("workspace");
        std::fs::create_dir_all(ws.join("memory")).unwrap();
        std::fs::write(data.join("config.json"), format!("{{\"apiKey\": \"{DATA}\"}}")).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha needle\n").unwrap();
        std::fs::write(ws.join("memory/MEMORY.md"), "note needle\n").unwrap();
        let sandbox = Sandbox::new(&ws, restrict)
            .with_home(Some(home.path().to_path_buf()))
            .with_data_dir(Some(data.clone()));
        let reg = registry(&sandbox);
        let c = ctx(&ws);
        let mode = if restrict { "restricted" } else { "unrestricted" };
        let ws_abs = ws.display().to_string();
        for dir in [
            ".",
            "./",
            "",
            "~/.nanobot/workspace",
            ws_abs.as_str(),
            "memory/..",
        ] {
            let ok = |name: &str, out: &nanobot_tools::ToolOutput| {
                assert!(!out.is_error, "{mode}: {name} {dir:?}: {}", out.text);
                assert!(out.text.contains("a.txt"), "{mode}: {name} {dir:?}: {}", out.text);
                assert!(!out.text.contains(DATA), "{mode}: {name} {dir:?}: {}", out.text);
            };
            if !dir.is_empty() {
                ok(
                    "list_dir",
                    &reg.execute("list_dir", json!({"path": dir}), &c).await,
                );
            }
            let out = reg
                .execute("glob", json!({"pattern": "*", "path": dir}), &c)
                .await;
            ok("glob", &out);
            let out = reg.execute("find_files", json!({"path": dir}), &c).await;
            ok("find_files", &out);
            let out = reg
                .execute("grep", json!({"pattern": "needle", "path": dir}), &c)
                .await;
            ok("grep", &out);
            assert!(
                out.text.contains("MEMORY.md"),
                "{mode}: grep {dir:?}: {}",
                out.text
            );
        }
        let out = reg.execute("glob", json!({"pattern": "*"}), &c).await;
        assert!(
            out.text.contains("a.txt"),
            "{mode}: glob without a path: {}",
            out.text
        );
        for path in ["a.txt", "~/.nanobot/workspace/a.txt", &format!("{ws_abs}/a.txt")] {
            let out = reg.execute("read_file", json!({"path": path}), &c).await;
            assert!(
                out.text.contains("alpha"),
                "{mode}: read_file {path}: {}",
                out.text
            );
        }
        let out = reg
            .execute(
                "write_file",
                json!({"path": "~/.nanobot/workspace/b.txt", "content": "beta\n"}),
                &c,
            )
            .await;
        assert!(!out.is_error, "{mode}: write_file: {}", out.text);
        assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "beta\n");
        let out = reg
            .execute(
                "edit_file",
                json!({"path": "b.txt", "old_text": "beta", "new_text": "BETA"}),
                &c,
            )
            .await;
        assert!(!out.is_error, "{mode}: edit_file: {}", out.text);
        let edits = json!([{"path": format!("{ws_abs}/b.txt"), "action": "add", "new_text": "gamma"}]);
        let out = reg.execute("apply_patch", json!({"edits": edits}), &c).await;
        assert!(!out.is_error, "{mode}: apply_patch: {}", out.text);
        let b = std::fs::read_to_string(ws.join("b.txt")).unwrap();
        assert!(b.starts_with("BETA\n") && b.contains("gamma"), "{mode}: {b}");

        // The control: the data directory around the workspace is still refused, by every name of it.
        for dir in ["..", "~/.nanobot", "memory/../.."] {
            let out = reg.execute("list_dir", json!({"path": dir}), &c).await;
            assert!(
                out.is_error && !out.text.contains("config.json"),
                "{mode}: list {dir}: {}",
                out.text
            );
            let out = reg
                .execute("grep", json!({"pattern": "DATA", "path": dir}), &c)
                .await;
            assert!(!out.text.contains(DATA), "{mode}: grep {dir}: {}", out.text);
        }
        for path in ["../config.json", "~/.nanobot/config.json"] {
            let out = reg.execute("read_file", json!({"path": path}), &c).await;
            assert!(
                out.is_error && !out.text.contains(DATA),
                "{mode}: read {path}: {}",
                out.text
            );
            let out = reg
                .execute("write_file", json!({"path": path, "content": "x"}), &c)
                .await;
            assert!(out.is_error, "{mode}: write {path}: {}", out.text);
        }
        assert!(
            std::fs::read_to_string(data.join("config.json"))
                .unwrap()
                .contains(DATA)
        );
    }
}
