use std::collections::HashMap;
use std::fs;

use nanobot_skills::{RequirementEnv, SkillsLoader, builtin_files, builtin_skill, builtin_skill_names};

const EXPECTED: [&str; 7] = [
    "cron",
    "github",
    "memory",
    "skill-creator",
    "summarize",
    "tmux",
    "weather",
];

#[test]
fn all_builtins_embedded_and_parse_cleanly() {
    assert_eq!(builtin_skill_names(), EXPECTED);
    let ws = tempfile::tempdir().unwrap();
    let bdir = tempfile::tempdir().unwrap();
    let env =
        RequirementEnv::new(HashMap::from([("PATH".to_owned(), "/nonexistent".to_owned())])).with_os("linux");
    let set = SkillsLoader::new(ws.path(), bdir.path(), env).load();
    assert!(set.warnings().is_empty(), "{:?}", set.warnings());
    for name in EXPECTED {
        let skill = set.get(name).unwrap();
        assert_eq!(skill.frontmatter["name"], name, "frontmatter name of {name}");
        assert!(skill.description.len() > 20, "{name} needs a real description");
        assert!(skill.body.len() > 200, "{name} needs a real body");
    }
    // requirements declared where the skill needs a program
    assert_eq!(set.get("github").unwrap().requirements.bins, vec!["gh"]);
    assert_eq!(set.get("tmux").unwrap().requirements.bins, vec!["tmux"]);
    assert!(!set.get("github").unwrap().is_available(), "PATH is empty");
    // No built-in is always-on (as in 0.3.5): each is listed in the summary and read when needed.
    assert_eq!(set.always_on().count(), 0);
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
    assert_eq!(builtin_files().len(), EXPECTED.len());
    // idempotent, and repairs a modified copy
    fs::write(target.join("cron/SKILL.md"), "tampered").unwrap();
    loader.materialize_builtins().unwrap();
    assert_eq!(
        fs::read_to_string(target.join("cron/SKILL.md")).unwrap(),
        builtin_skill("cron").unwrap()
    );
}
