use std::collections::HashMap;
use std::fs;

use nanobot_skills::{RequirementEnv, SkillsLoader, builtin_files, builtin_skill, builtin_skill_names};

/// The built-in skills of Python nanobot 0.3.5 (`nanobot/skills/`): nanobot-rs ships the same set.
const EXPECTED: [&str; 11] = [
    "clawhub",
    "cron",
    "github",
    "image-generation",
    "memory",
    "my",
    "skill-creator",
    "summarize",
    "tmux",
    "update-setup",
    "weather",
];

/// What each 0.3.5 built-in declares in its frontmatter: `requires.bins`, `requires.env`, `os`, `always`.
type Declared = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    bool,
);
const PYTHON_0_3_5: [Declared; 11] = [
    ("clawhub", &[], &[], &[], false),
    ("cron", &[], &[], &[], false),
    ("github", &["gh"], &[], &[], false),
    ("image-generation", &[], &[], &[], false),
    ("memory", &[], &[], &[], false),
    ("my", &[], &[], &[], false),
    ("skill-creator", &[], &[], &[], false),
    ("summarize", &["summarize"], &[], &[], false),
    ("tmux", &["tmux"], &[], &["darwin", "linux"], false),
    ("update-setup", &[], &[], &[], false),
    ("weather", &["curl"], &[], &[], false),
];

/// Where nanobot-rs declares something else on purpose, and what: its `weather` reads wttr.in and Open-Meteo
/// with the `web_fetch` tool (curl is optional), and its `summarize` works with the built-in tools instead of
/// the third-party `summarize` program, so neither is hidden on a machine without that program.
const DELIBERATE: [Declared; 2] = [
    ("summarize", &[], &[], &[], false),
    ("weather", &[], &[], &[], false),
];

fn sorted(items: &[impl AsRef<str>]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().map(|s| s.as_ref().to_owned()).collect();
    v.sort();
    v
}

#[test]
fn all_builtins_embedded_and_parse_cleanly() {
    assert_eq!(builtin_skill_names(), EXPECTED);
    let ws = tempfile::tempdir().unwrap();
    let bdir = tempfile::tempdir().unwrap();
    let env =
        RequirementEnv::new(HashMap::from([("PATH".to_owned(), "/nonexistent".to_owned())])).with_os("linux");
    let set = SkillsLoader::new(ws.path(), bdir.path(), env).load();
    assert!(set.warnings().is_empty(), "{:?}", set.warnings());
    let mut loaded: Vec<&str> = set.skills().iter().map(|s| s.name.as_str()).collect();
    loaded.sort_unstable();
    assert_eq!(loaded, EXPECTED);
    for name in EXPECTED {
        let skill = set.get(name).unwrap();
        // 0.3.5's identity rules (`valid_skill_metadata`): the frontmatter names the folder, the name is
        // lowercase words joined by single hyphens, the description is 1 to 1024 characters.
        assert_eq!(skill.frontmatter["name"], name, "frontmatter name of {name}");
        assert!(
            name.len() <= 64
                && !name.contains("--")
                && !name.starts_with('-')
                && !name.ends_with('-')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        assert_eq!(
            skill.frontmatter["description"].as_str(),
            Some(skill.description.as_str()),
            "{name}: description must be a plain string"
        );
        assert!(
            (20..=1024).contains(&skill.description.chars().count()),
            "{name} needs a real description of at most 1024 characters"
        );
        assert!(skill.body.len() > 200, "{name} needs a real body");
    }
    // No built-in is always-on (as in 0.3.5): each is listed in the summary and read when needed.
    assert_eq!(set.always_on().count(), 0);
    assert!(!set.get("github").unwrap().is_available(), "PATH is empty");
    assert!(set.get("my").unwrap().is_available(), "my needs nothing");
}

/// Each built-in declares the requirements 0.3.5's does (programs, variables, systems, always-on), except
/// where [`DELIBERATE`] says otherwise and why.
#[test]
fn builtin_requirements_are_those_of_0_3_5() {
    let ws = tempfile::tempdir().unwrap();
    let bdir = tempfile::tempdir().unwrap();
    let set = SkillsLoader::new(ws.path(), bdir.path(), RequirementEnv::new(HashMap::new())).load();
    assert_eq!(
        PYTHON_0_3_5.iter().map(|d| d.0).collect::<Vec<_>>(),
        EXPECTED,
        "one row per 0.3.5 built-in"
    );
    for python in PYTHON_0_3_5 {
        let name = python.0;
        let expected = DELIBERATE.iter().find(|d| d.0 == name).unwrap_or(&python);
        let skill = set.get(name).unwrap();
        let r = &skill.requirements;
        assert_eq!(sorted(&r.bins), sorted(expected.1), "{name}: requires.bins");
        assert_eq!(sorted(&r.env), sorted(expected.2), "{name}: requires.env");
        assert_eq!(sorted(&r.os), sorted(expected.3), "{name}: os");
        assert_eq!(skill.always, expected.4, "{name}: always");
    }
    // The exceptions are real differences, not stale entries.
    for d in DELIBERATE {
        let python = PYTHON_0_3_5.iter().find(|p| p.0 == d.0).unwrap();
        assert_ne!(python, &d, "{} is listed as deliberate but matches 0.3.5", d.0);
    }
}

#[test]
fn builtins_describe_this_projects_tools() {
    let cron = builtin_skill("cron").unwrap();
    for needle in [
        "`add`",
        "`list`",
        "`remove`",
        "every_seconds",
        "cron_expr",
        "`tz`",
        "`at`",
        "job_id",
    ] {
        assert!(cron.contains(needle), "cron skill lacks {needle}");
    }
    assert!(builtin_skill("github").unwrap().contains("`exec`"));
    assert!(builtin_skill("weather").unwrap().contains("web_fetch"));
    assert!(builtin_skill("nope").is_none());

    // `my` describes this project's `my` tool: its keys, what set may change, and the switch that allows it.
    let my = builtin_skill("my").unwrap();
    for needle in [
        "action: \"check\"",
        "action: \"set\"",
        "model_preset",
        "tool_names",
        "request.chat_id",
        "scratchpad",
        "tools.my.allowSet",
        "tools.my.enable",
        "references/examples.md",
    ] {
        assert!(my.contains(needle), "my skill lacks {needle}");
    }
    // ClawHub installs into the workspace, with npm's cache where exec may write.
    let clawhub = builtin_skill("clawhub").unwrap();
    for needle in [
        "npx --yes clawhub@latest",
        "--workdir <workspace>",
        "npm_config_cache",
        "/confirm-files",
    ] {
        assert!(clawhub.contains(needle), "clawhub skill lacks {needle}");
    }
    // update-setup writes the workspace's update skill for nanobot-rs's own install methods.
    let update = builtin_skill("update-setup").unwrap();
    for needle in [
        "<workspace>/skills/update/SKILL.md",
        "cargo install --locked --path bins/nanobot",
        "maturin build --release",
        "/restart",
        "nanobot gateway restart",
    ] {
        assert!(update.contains(needle), "update-setup skill lacks {needle}");
    }
    assert!(
        !update.contains("nanobot-ai["),
        "nanobot-rs is not installed from PyPI"
    );
    // nanobot-rs has no image generator of its own: the skill says so instead of promising one.
    let image = builtin_skill("image-generation").unwrap();
    assert!(image.contains("no built-in image generator"));
    assert!(image.contains("`message`") && image.contains("`media`"));
}

#[test]
fn materialize_writes_readable_files_at_summary_locations() {
    let ws = tempfile::tempdir().unwrap();
    let bdir = tempfile::tempdir().unwrap();
    let target = bdir.path().join("builtin-skills");
    let env = RequirementEnv::new(HashMap::new());
    let loader = SkillsLoader::new(ws.path(), &target, env);
    assert_eq!(loader.materialize_builtins().unwrap(), target);
    let set = loader.load();
    for skill in set.skills() {
        let on_disk = fs::read_to_string(&skill.location).unwrap();
        assert!(on_disk.contains(skill.body.trim()), "{}", skill.name);
    }
    // every SKILL.md, and the files beside them (`my`'s worked examples)
    let files: Vec<&str> = builtin_files().iter().map(|f| f.path).collect();
    assert_eq!(
        files.iter().filter(|p| p.ends_with("/SKILL.md")).count(),
        EXPECTED.len()
    );
    assert!(files.contains(&"my/references/examples.md"), "{files:?}");
    assert!(
        fs::read_to_string(target.join("my/references/examples.md"))
            .unwrap()
            .contains("my(action=")
    );
    // idempotent, and repairs a modified copy
    fs::write(target.join("cron/SKILL.md"), "tampered").unwrap();
    loader.materialize_builtins().unwrap();
    assert_eq!(
        fs::read_to_string(target.join("cron/SKILL.md")).unwrap(),
        builtin_skill("cron").unwrap()
    );
}
