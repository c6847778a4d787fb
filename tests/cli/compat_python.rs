//! Drop-in both ways: the real Python nanobot 0.3.5 and this `nanobot` take turns on one home, against the
//! same MockLlm, and each continues what the other left (session history, cron jobs, the session namespace
//! marker). One chain test: the Python nanobot takes seconds to start.
//!
//! The Python nanobot is `.ci/.peers/nanobot-venv/bin/nanobot` (installed by `scripts/install-peers.sh`);
//! missing, the test skips, or fails under `CI`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nanobot_testkit::peers;
use nanobot_testkit::{MockLlm, MockReply, RecordedRequest, TempHome, WireFormat};
use serde_json::{Value, json};

use crate::support::{run, stderr, stdout};

/// Bound on one run of either program.
const RUN_LIMIT: Duration = Duration::from_secs(180);

pub(crate) fn python_nanobot() -> Option<PathBuf> {
    let exe = peers::peers_dir()?
        .join("nanobot-venv")
        .join("bin")
        .join("nanobot");
    exe.is_file().then_some(exe)
}

/// Runs `cmd` to completion within [`RUN_LIMIT`] (killed past it).
pub(crate) fn bounded(mut cmd: Command, what: &str) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish within {RUN_LIMIT:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn py(exe: &Path, home: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env("TERM", "dumb")
        .current_dir(home)
        .args(args);
    let o = bounded(cmd, "python nanobot");
    assert!(
        o.status.success(),
        "python nanobot {args:?} failed ({:?})\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    let err = stderr(&o);
    assert!(!err.contains("Traceback"), "python nanobot {args:?}: {err}");
    o
}

fn rs(home: &Path, args: &[&str]) -> Output {
    let o = run(home, args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "nanobot {args:?}\nstdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    o
}

/// The texts of the user and assistant messages of a request, in order (tool traffic left out).
fn dialogue(req: &RecordedRequest) -> Vec<(String, String)> {
    req.messages()
        .iter()
        .filter_map(|m| {
            let role = m.get("role")?.as_str()?;
            if role != "user" && role != "assistant" {
                return None;
            }
            let text = match m.get("content")? {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return None,
            };
            (!text.is_empty()).then(|| (role.to_owned(), text))
        })
        .collect()
}

/// Asserts that `req`'s history holds each `(role, needle)` in this order.
fn assert_history(req: &RecordedRequest, expected: &[(&str, &str)], who: &str) {
    let got = dialogue(req);
    let mut at = 0;
    for (role, needle) in expected {
        match got[at..]
            .iter()
            .position(|(r, t)| r == role && t.contains(needle))
        {
            Some(i) => at += i + 1,
            None => panic!("{who}: history lacks {role} {needle:?} (in order); history: {got:#?}"),
        }
    }
}

fn new_requests(mock: &MockLlm, seen: &mut usize) -> Vec<RecordedRequest> {
    let all = mock.completion_requests();
    let out = all[*seen..].to_vec();
    *seen = all.len();
    out
}

fn session_dirs(home: &TempHome) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(home.nanobot_dir().join("sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn jobs(home: &TempHome) -> Vec<Value> {
    let path = home.workspace().join("cron/jobs.json");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    if text.trim().is_empty() {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    v["jobs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn python_rust_python_rust_on_one_home() {
    let Some(pyexe) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("Noted."));
    let home = TempHome::new();
    let h = home.home();
    home.write_config(&mock.nanobot_config(WireFormat::OpenAi));
    let mut seen = 0;

    // 1. Python: a turn that schedules a job through the cron tool (agent mode: queued in action.jsonl).
    mock.when_once(
        |r| r.last_user_text().is_some_and(|t| t.contains("remind me hourly")) && !r.ends_with_tool_result(),
        MockReply::tool_call(
            "cron",
            json!({"action": "add", "name": "water", "message": "drink water", "every_seconds": 3600}),
        ),
    );
    mock.when_once(
        |r| r.ends_with_tool_result(),
        MockReply::text("Scheduled the water reminder."),
    );
    let o = py(&pyexe, h, &["agent", "-m", "remind me hourly to drink water"]);
    assert!(
        stdout(&o).contains("Scheduled the water reminder."),
        "{}",
        stdout(&o)
    );
    let reqs = new_requests(&mock, &mut seen);
    assert!(reqs.iter().any(|r| r.ends_with_tool_result()), "{reqs:#?}");
    let python_first = reqs[0].clone();
    let dirs = session_dirs(&home);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let marker = std::fs::read_to_string(dirs[0].join(".workspace")).unwrap();
    let queue = std::fs::read_to_string(home.workspace().join("cron/action.jsonl")).unwrap_or_default();
    assert!(
        queue.contains("drink water") || jobs(&home).len() == 1,
        "the python agent queued no job"
    );

    // 2. Rust: sees the job (merged from the queue) and continues the conversation.
    let o = rs(h, &["status"]);
    assert!(stdout(&o).contains("Cron jobs: 1 (1 enabled)"), "{}", stdout(&o));
    let o = rs(h, &["cron", "list"]);
    assert!(stdout(&o).contains("water"), "{}", stdout(&o));
    let js = jobs(&home);
    assert_eq!(js.len(), 1, "{js:#?}");
    let job_id = js[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(js[0]["payload"]["sessionKey"], "cli:direct");
    assert_eq!(js[0]["payload"]["deliver"], false);
    assert_eq!(js[0]["payload"]["channel"], Value::Null);
    mock.when_once(
        |r| r.last_user_text().is_some_and(|t| t.contains("what did I ask")),
        MockReply::text("You asked for a water reminder."),
    );
    let o = rs(h, &["agent", "-m", "what did I ask?"]);
    assert_eq!(stdout(&o), "You asked for a water reminder.\n");
    let reqs = new_requests(&mock, &mut seen);
    assert_history(
        &reqs[0],
        &[
            ("user", "remind me hourly to drink water"),
            ("assistant", "Scheduled the water reminder."),
            ("user", "what did I ask?"),
        ],
        "rust after python",
    );
    // The same agent: the tools offered on the same home, compared; every difference is explained in
    // docs/compatibility.md (issue 18).
    assert_tool_differences_are_documented(&python_first, &reqs[0]);
    assert_prompt_differences_are_documented(&python_first, &reqs[0]);
    assert_request_differences_are_documented(
        (&python_first, "remind me hourly to drink water"),
        (&reqs[0], "what did I ask?"),
    );
    // Same namespace, marker unchanged: the Python nanobot will accept it.
    assert_eq!(session_dirs(&home), dirs);
    assert_eq!(
        std::fs::read_to_string(dirs[0].join(".workspace")).unwrap(),
        marker
    );

    // 3. Python again: reads Rust's turn, lists the job through its cron tool.
    mock.when_once(
        |r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("list my reminders"))
                && !r.ends_with_tool_result()
        },
        MockReply::tool_call("cron", json!({"action": "list"})),
    );
    mock.when_once(
        |r| r.ends_with_tool_result(),
        MockReply::text("One reminder: water."),
    );
    let o = py(&pyexe, h, &["agent", "-m", "list my reminders"]);
    assert!(stdout(&o).contains("One reminder: water."), "{}", stdout(&o));
    let reqs = new_requests(&mock, &mut seen);
    let first = reqs
        .iter()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("list my reminders"))
        })
        .expect("python asked the model");
    assert_history(
        first,
        &[
            ("user", "remind me hourly to drink water"),
            ("user", "what did I ask?"),
            ("assistant", "You asked for a water reminder."),
            ("user", "list my reminders"),
        ],
        "python after rust",
    );
    let listed = reqs
        .iter()
        .flat_map(|r| r.tool_results())
        .find(|t| t.content.contains(&job_id))
        .unwrap_or_else(|| panic!("python's cron list did not show job {job_id}: {reqs:#?}"));
    assert!(listed.content.contains("water"), "{listed:?}");
    assert_eq!(session_dirs(&home), dirs);

    // 4. Rust again: the whole conversation is there, the job still once.
    mock.when_once(
        |r| r.last_user_text().is_some_and(|t| t.contains("anything else")),
        MockReply::text("That is all."),
    );
    let o = rs(h, &["agent", "-m", "anything else?"]);
    assert_eq!(stdout(&o), "That is all.\n");
    let reqs = new_requests(&mock, &mut seen);
    assert_history(
        &reqs[0],
        &[
            ("user", "remind me hourly to drink water"),
            ("user", "what did I ask?"),
            ("user", "list my reminders"),
            ("assistant", "One reminder: water."),
            ("user", "anything else?"),
        ],
        "rust after python again",
    );
    let js = jobs(&home);
    assert_eq!(js.len(), 1, "{js:#?}");
    assert_eq!(js[0]["id"], job_id.as_str());
    let o = rs(h, &["cron", "list"]);
    assert!(stdout(&o).contains(&job_id), "{}", stdout(&o));

    // 5. Python's /status shows the last request Rust stored (`_last_usage`, which 0.3.5 reads only in its own
    // layout: otherwise "0 in / 0 out").
    let o = py(&pyexe, h, &["agent", "-m", "/status"]);
    let text = stdout(&o);
    let tokens = text
        .lines()
        .find(|l| l.contains("Tokens: "))
        .unwrap_or_else(|| panic!("no token line in 0.3.5's /status: {text}"));
    assert!(!tokens.contains("Tokens: 0 in / 0 out"), "{text}");
}

#[test]
fn python_accepts_a_home_written_by_older_nanobot_rs() {
    // Older nanobot-rs wrote `sessions/<id>/` without the `.workspace` marker; this build adds it at start,
    // and the Python nanobot then runs on the home instead of refusing it.
    let Some(pyexe) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("Noted."));
    let home = TempHome::new();
    let h = home.home();
    home.write_config(&mock.nanobot_config(WireFormat::OpenAi));
    let id = "00112233445566778899aabbccddeeff";
    home.write_workspace_file(".nanobot/workspace-id", format!("{id}\n"));
    let line = |v: Value| serde_json::to_string(&v).unwrap();
    // Recent timestamps, so that neither program compacts the session as idle.
    let date = Command::new("date")
        .args(["+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    let now = String::from_utf8(date.stdout).unwrap().trim().to_owned();
    let old = [
        line(
            json!({"_type": "metadata", "key": "cli:direct", "created_at": now,
            "updated_at": now, "metadata": {}, "last_consolidated": 0}),
        ),
        line(json!({"role": "user", "content": "my cat is called Tom", "timestamp": now})),
        line(json!({"role": "assistant", "content": "Nice name.", "timestamp": now})),
    ]
    .join("\n")
        + "\n";
    home.write_home_file(format!(".nanobot/sessions/{id}/Y2xpOmRpcmVjdA.jsonl"), old);
    rs(h, &["agent", "-m", "hello"]);
    assert_history(
        &mock.completion_requests()[0],
        &[("user", "my cat is called Tom"), ("user", "hello")],
        "nanobot-rs on its own older home",
    );
    let marker = home.nanobot_dir().join(format!("sessions/{id}/.workspace"));
    let recorded = std::fs::read_to_string(&marker).expect("marker added at start");
    assert_eq!(
        PathBuf::from(recorded.trim()),
        std::fs::canonicalize(home.workspace()).unwrap()
    );
    py(&pyexe, h, &["agent", "-m", "what is my cat called?"]);
    let reqs = mock.completion_requests();
    let req = reqs
        .iter()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains("cat called")))
        .expect("python asked the model");
    assert_history(
        req,
        &[("user", "my cat is called Tom"), ("assistant", "Nice name.")],
        "python on an old nanobot-rs home",
    );
}

#[test]
fn enabled_channels_this_build_cannot_run_are_refused_and_reported() {
    let mock = MockLlm::start_background();
    let home = crate::support::onboarded(&mock);
    let h = home.home();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    // A 0.3.5 plugin channel (a third-party package there): no adapter here.
    config["channels"]["myplugin"] = json!({"enabled": true, "token": "x"});
    config["channels"]["otherplugin"] = json!({"enabled": false});
    config["gateway"]["port"] = peers::free_port().unwrap().into();
    config["api"]["port"] = peers::free_port().unwrap().into();
    home.write_config(&config);

    let mut cmd = crate::support::nanobot(h);
    cmd.arg("gateway");
    let o = bounded(cmd, "nanobot gateway");
    assert!(!o.status.success(), "the gateway started with myplugin enabled");
    let err = stderr(&o);
    assert!(err.contains("myplugin: ") || err.contains("myplugin;"), "{err}");
    assert!(
        !err.contains("otherplugin"),
        "a disabled block is not named: {err}"
    );
    assert!(err.contains("NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS"), "{err}");

    let o = run(h, &["channels", "status"]);
    let out = stdout(&o);
    assert!(out.contains("not supported by this build"), "{out}");
    let o = run(h, &["status"]);
    assert!(stdout(&o).contains("myplugin (✗ not supported"), "{}", stdout(&o));
    let o = run(h, &["doctor"]);
    assert!(!o.status.success(), "doctor found no problem");
    assert!(
        stdout(&o).contains("channel `myplugin` is enabled but this build cannot run it"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn one_shot_new_archives_before_exiting() {
    // `agent -m /new` resets the session and archives it in the background; the process must not exit
    // before the archive reached memory/history.jsonl.
    let mock = MockLlm::start_background();
    let home = crate::support::onboarded(&mock);
    let h = home.home();
    mock.set_fallback(MockReply::text("The user's dog is called Rex."));
    rs(h, &["agent", "-m", "my dog is called Rex"]);
    let o = rs(h, &["agent", "-m", "/new"]);
    assert!(stdout(&o).contains("New session"), "{}", stdout(&o));
    let history = std::fs::read_to_string(home.workspace().join("memory/history.jsonl"))
        .unwrap_or_else(|e| panic!("no memory/history.jsonl after `agent -m /new`: {e}"));
    assert!(history.contains("Rex"), "{history}");
}

#[test]
fn memory_archives_follow_one_protocol_both_ways() {
    // Both programs archive a session by a prompt after the conversation and store the model's text answer in
    // memory/history.jsonl; neither edits MEMORY.md (only Dream does). Python → Rust → Python on one home.
    let Some(pyexe) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("Noted."));
    // 0.3.5's archive prompt and ours both ask for a "checkpoint" in the last user message.
    let is_archive = |r: &RecordedRequest| {
        r.last_user_text()
            .is_some_and(|t| t.contains("checkpoint") && t.contains("(nothing)"))
    };
    let home = TempHome::new();
    let h = home.home();
    home.write_config(&mock.nanobot_config(WireFormat::OpenAi));
    let history = || -> Vec<Value> {
        std::fs::read_to_string(home.workspace().join("memory/history.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let memory_md = || std::fs::read_to_string(home.workspace().join("memory/MEMORY.md")).unwrap_or_default();

    // 1. Python: a turn, then /new archives it.
    py(&pyexe, h, &["agent", "-m", "my cat is called Miso"]);
    let memory_before = memory_md();
    mock.when_once(
        move |r| is_archive(r),
        MockReply::text("- [permanent] The user's cat is called Miso."),
    );
    py(&pyexe, h, &["agent", "-m", "/new"]);
    let entries = history();
    assert_eq!(entries.len(), 1, "python archived on /new: {entries:#?}");
    assert!(entries[0]["content"].as_str().unwrap().contains("Miso"));

    // 2. Rust: continues the cursors, archives by the same contract, leaves MEMORY.md alone.
    rs(h, &["agent", "-m", "my dog is called Rex"]);
    mock.when_once(
        move |r| is_archive(r),
        MockReply::text("- [permanent] The user's dog is called Rex."),
    );
    rs(h, &["agent", "-m", "/new"]);
    let entries = history();
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_eq!(entries[0]["cursor"], 1);
    assert_eq!(entries[1]["cursor"], 2);
    assert_eq!(
        entries[1]["content"],
        "- [permanent] The user's dog is called Rex."
    );
    let archives: Vec<RecordedRequest> = mock
        .completion_requests()
        .into_iter()
        .filter(|r| is_archive(r))
        .collect();
    assert_eq!(archives.len(), 2, "one archive request from each program");
    assert!(
        archives[1]
            .last_user_text()
            .unwrap()
            .contains("my dog is called Rex"),
        "rust's archive carries the conversation"
    );
    assert_eq!(memory_md(), memory_before, "neither archive edits MEMORY.md");

    // 3. Python again: runs on the home without error, and its next archive takes cursor 3.
    py(&pyexe, h, &["agent", "-m", "my bird is called Kiwi"]);
    mock.when_once(
        move |r| is_archive(r),
        MockReply::text("- [permanent] The user's bird is called Kiwi."),
    );
    py(&pyexe, h, &["agent", "-m", "/new"]);
    let entries = history();
    assert_eq!(entries.len(), 3, "{entries:#?}");
    assert_eq!(entries[2]["cursor"], 3);
    assert_eq!(memory_md(), memory_before);
}

#[test]
fn a_session_summary_written_by_rust_is_shown_by_python() {
    // Rust archives the old part of a long session and keeps the checkpoint where 0.3.5 keeps its own
    // (`_last_summary`); the Python nanobot then shows it in its system prompt, as after its own compaction.
    let Some(pyexe) = peers::require("python nanobot (nanobot-ai 0.3.5)", python_nanobot()) else {
        return;
    };
    let mock = MockLlm::start_background();
    mock.set_fallback(MockReply::text("Noted."));
    let home = TempHome::new();
    let h = home.home();
    let mut cfg = mock.nanobot_config(WireFormat::OpenAi);
    cfg["agents"]["defaults"]["contextWindowTokens"] = json!(10000);
    cfg["agents"]["defaults"]["maxTokens"] = json!(1000);
    home.write_config(&cfg);
    mock.when(
        |r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("checkpoint") && t.contains("(nothing)"))
        },
        MockReply::text("- [durable] The user's garden has twelve tomato plants."),
    );
    let filler = "The tomatoes need water every morning. ".repeat(40);
    for i in 0..4 {
        rs(h, &["agent", "-m", &format!("garden note {i}: {filler}")]);
    }
    let dirs = session_dirs(&home);
    let file = std::fs::read_dir(&dirs[0])
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("a session file");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("_last_summary") && text.contains("twelve tomato plants"),
        "rust kept no summary: {}",
        &text[..text.len().min(2000)]
    );

    // 0.3.5's own prompt and tools do not fit in the small window used to make Rust archive early.
    cfg["agents"]["defaults"]["contextWindowTokens"] = json!(200000);
    home.write_config(&cfg);
    let before = mock.completion_requests().len();
    py(&pyexe, h, &["agent", "-m", "what about the garden?"]);
    let reqs = mock.completion_requests();
    let turn = reqs[before..]
        .iter()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("what about the garden?"))
        })
        .expect("python asked the model");
    let system = turn.system_text().unwrap_or_default();
    assert!(
        system.contains("[Archived Context Summary]") && system.contains("twelve tomato plants"),
        "python does not show rust's summary: {system}"
    );
}

/// The tools of a request by name: (property names, required names, whether unknown parameters are refused).
fn tool_shapes(req: &RecordedRequest) -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>, bool)> {
    let names = |v: Option<&Value>| -> BTreeSet<String> {
        match v {
            Some(Value::Object(m)) => m.keys().cloned().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            _ => BTreeSet::new(),
        }
    };
    req.tools()
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            let params = f.get("parameters")?;
            Some((
                f.get("name")?.as_str()?.to_owned(),
                (
                    names(params.get("properties")),
                    names(params.get("required")),
                    params.get("additionalProperties") == Some(&Value::Bool(false)),
                ),
            ))
        })
        .collect()
}

/// The differences between the tools 0.3.5 offers (`python`) and ours (`rust`), one line each, in the form
/// `docs/compatibility.md` lists them.
fn tool_differences(python: &RecordedRequest, rust: &RecordedRequest) -> BTreeSet<String> {
    let (py, rs) = (tool_shapes(python), tool_shapes(rust));
    let list = |set: BTreeSet<&String>| {
        if set.is_empty() {
            return "nothing".to_owned();
        }
        set.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = BTreeSet::new();
    for name in py.keys().filter(|n| !rs.contains_key(*n)) {
        out.insert(format!("`{name}`: only in 0.3.5"));
    }
    for name in rs.keys().filter(|n| !py.contains_key(*n)) {
        out.insert(format!("`{name}`: only in nanobot-rs"));
    }
    for (name, (pp, preq, pclosed)) in &py {
        let Some((rp, rreq, rclosed)) = rs.get(name) else {
            continue;
        };
        let only_py: BTreeSet<&String> = pp.difference(rp).collect();
        if !only_py.is_empty() {
            out.insert(format!("`{name}`: parameters only in 0.3.5: {}", list(only_py)));
        }
        let only_rs: BTreeSet<&String> = rp.difference(pp).collect();
        if !only_rs.is_empty() {
            out.insert(format!(
                "`{name}`: parameters only in nanobot-rs: {}",
                list(only_rs)
            ));
        }
        if preq != rreq {
            out.insert(format!(
                "`{name}`: required {} in 0.3.5, {} in nanobot-rs",
                list(preq.iter().collect()),
                list(rreq.iter().collect())
            ));
        }
        if pclosed != rclosed {
            let which = if *pclosed { "0.3.5" } else { "nanobot-rs" };
            out.insert(format!("`{name}`: only {which} refuses unknown parameters"));
        }
    }
    out
}

/// Every difference in the tools is listed in docs/compatibility.md (between the `tool-differences` markers, one
/// `- <difference> — <why>` line each), and every listed one is still a difference.
fn assert_tool_differences_are_documented(python: &RecordedRequest, rust: &RecordedRequest) {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/compatibility.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let block = doc
        .split("<!-- tool-differences:start -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- tool-differences:end -->").next())
        .expect("docs/compatibility.md has the tool-differences block");
    let listed: BTreeSet<String> = block
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.split(" — ").next().unwrap_or(l).trim().to_owned())
        .collect();
    let actual = tool_differences(python, rust);
    let unexplained: Vec<&String> = actual.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&actual).collect();
    assert!(
        unexplained.is_empty() && stale.is_empty(),
        "docs/compatibility.md's tool differences are out of date.\nnot listed: {unexplained:#?}\nno longer true: {stale:#?}"
    );
}

/// The differences between a turn's first request from 0.3.5 (`python`) and from nanobot-rs (`rust`) on the same
/// home and model, beyond tools and prompt: the body's top-level keys, whether it streams, the roles of its
/// messages, and whether the user's message is sent as typed. One line each, as docs/compatibility.md lists them.
fn request_differences(python: (&RecordedRequest, &str), rust: (&RecordedRequest, &str)) -> BTreeSet<String> {
    let keys = |r: &RecordedRequest| -> BTreeSet<String> {
        r.body
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (pk, rk) = (keys(python.0), keys(rust.0));
    let mut out = BTreeSet::new();
    for k in pk.difference(&rk) {
        out.insert(format!("`{k}`: only in 0.3.5's requests"));
    }
    for k in rk.difference(&pk) {
        out.insert(format!("`{k}`: only in nanobot-rs's requests"));
    }
    for k in ["stream", "stream_options", "tool_choice"] {
        if pk.contains(k) && rk.contains(k) && python.0.body[k] != rust.0.body[k] {
            out.insert(format!(
                "`{k}`: {} in 0.3.5, {} in nanobot-rs",
                python.0.body[k], rust.0.body[k]
            ));
        }
    }
    let roles = |r: &RecordedRequest| -> Vec<String> {
        r.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["role"].as_str().unwrap_or("?").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // The first turn of each: a system message, then the user's (history differs by design: it is the other's).
    let (pr, rr) = (roles(python.0), roles(rust.0));
    if pr.first() != rr.first() || pr.last() != rr.last() {
        out.insert(format!("message roles: {pr:?} in 0.3.5, {rr:?} in nanobot-rs"));
    }
    for (who, (req, typed)) in [("0.3.5", python), ("nanobot-rs", rust)] {
        if req.last_user_text().as_deref() != Some(typed) {
            out.insert(format!("the user's message is not sent as typed by {who}"));
        }
    }
    out
}

/// Every request difference is listed in docs/compatibility.md (between the `request-differences` markers, one
/// `- <difference> — <why>` line each), and every listed one is still a difference.
fn assert_request_differences_are_documented(
    python: (&RecordedRequest, &str),
    rust: (&RecordedRequest, &str),
) {
    let listed = documented_block("request-differences");
    let actual = request_differences(python, rust);
    let unexplained: Vec<&String> = actual.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&actual).collect();
    assert!(
        unexplained.is_empty() && stale.is_empty(),
        "docs/compatibility.md's request differences are out of date.\nnot listed: {unexplained:#?}\nno longer true: {stale:#?}"
    );
}

/// The `- <item> — <why>` lines between `<!-- NAME:start -->` and `<!-- NAME:end -->` of docs/compatibility.md, as
/// their items.
fn documented_block(name: &str) -> BTreeSet<String> {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/compatibility.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let block = doc
        .split(&format!("<!-- {name}:start -->"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("<!-- {name}:end -->")).next())
        .unwrap_or_else(|| panic!("docs/compatibility.md has no {name} block"));
    block
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.split(" — ").next().unwrap_or(l).trim().to_owned())
        .collect()
}

/// The headings of a request's system prompt (lines starting with `#`), as a set. A folder named in a heading
/// (`### Built-in skills (`<folder>`)`) is where that install keeps it, so it is left out of the comparison.
fn prompt_headings(req: &RecordedRequest) -> BTreeSet<String> {
    req.system_text()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            let l = l.trim();
            match (l.find("(`"), l.ends_with("`)")) {
                (Some(at), true) => format!("{}(`…`)", &l[..at]),
                _ => l.to_owned(),
            }
        })
        .collect()
}

/// The listed lines of a `<!-- NAME:start -->` … `<!-- NAME:end -->` block of docs/compatibility.md (each
/// `- <difference> — <why>`), without their reasons.
fn documented(block: &str) -> BTreeSet<String> {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/compatibility.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    doc.split(&format!("<!-- {block}:start -->"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("<!-- {block}:end -->")).next())
        .unwrap_or_else(|| panic!("docs/compatibility.md has no {block} block"))
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.split(" — ").next().unwrap_or(l).trim().to_owned())
        .collect()
}

/// Every heading only one program's system prompt has (on the same home, so the workspace files are the same) is
/// listed in docs/compatibility.md, and every listed one is still a difference.
fn assert_prompt_differences_are_documented(python: &RecordedRequest, rust: &RecordedRequest) {
    let (py, rs) = (prompt_headings(python), prompt_headings(rust));
    let mut actual = BTreeSet::new();
    for h in py.difference(&rs) {
        actual.insert(format!("`{h}`: only in 0.3.5"));
    }
    for h in rs.difference(&py) {
        actual.insert(format!("`{h}`: only in nanobot-rs"));
    }
    let listed = documented("prompt-differences");
    let unexplained: Vec<&String> = actual.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&actual).collect();
    assert!(
        unexplained.is_empty() && stale.is_empty(),
        "docs/compatibility.md's system-prompt differences are out of date.\nnot listed: {unexplained:#?}\nno longer true: {stale:#?}"
    );
}
