//! Skills for nanobot: `SKILL.md` files that teach the agent how to do something.
//!
//! This crate owns discovery (`<workspace>/skills/<name>/SKILL.md` wins over the built-in skill of the
//! same name), the YAML frontmatter (`name`, `description`, `always`, `metadata` with
//! `requires.bins` / `requires.env` / `os`, in Python nanobot's and openclaw's shapes), requirement
//! checks, `disabledSkills`, and the text that goes into prompts: the `# Active Skills` section
//! (always-on skills in full), the `<skills>` summary (name, description, availability, location) and
//! `$skill-name` injection for one turn. The built-in skills are embedded from the repository's
//! top-level `skills/` folder.
//!
//! It knows nothing of the agent loop, tools, config files or the process environment: the caller
//! passes the workspace, the directory built-ins are shown under, `PATH` and the environment as
//! values. Loading never fails as a whole; a malformed skill is skipped with a warning naming its file.
//!
//! ## How the core uses it
//!
//! At start-up: build a [`SkillsLoader`], call [`SkillsLoader::materialize_builtins`] so the built-in
//! SKILL.md files exist on disk, and allow `read_file` to read [`SkillsLoader::builtin_dir`]. Per turn:
//! [`SkillsLoader::load_cached`] (re-reads only when a `SKILL.md` changed), then put [`SkillSet::always_on_section`] and [`SkillSet::summary_section`]
//! into the system prompt and [`SkillSet::turn_injection`] (for the user's message) into the turn.
//! The model loads other skills itself with `read_file` at the `<location>` shown.
//!
//! ```
//! use std::collections::HashMap;
//! use nanobot_skills::{RequirementEnv, SkillsLoader};
//!
//! let workspace = tempfile::tempdir().unwrap();
//! let builtins = tempfile::tempdir().unwrap();
//! std::fs::create_dir_all(workspace.path().join("skills/hello")).unwrap();
//! std::fs::write(
//!     workspace.path().join("skills/hello/SKILL.md"),
//!     "---\ndescription: Say hello nicely\n---\n# Hello\nGreet the user by name.\n",
//! ).unwrap();
//!
//! let env = RequirementEnv::new(HashMap::from([("PATH".into(), "/usr/bin:/bin".into())]));
//! let loader = SkillsLoader::new(workspace.path(), builtins.path(), env).with_disabled(["tmux"]);
//! loader.materialize_builtins().unwrap();
//! let skills = loader.load();
//!
//! assert!(skills.get("hello").is_some_and(|s| s.is_available()));
//! assert!(skills.get("tmux").is_none()); // disabled
//! let summary = skills.summary_xml().unwrap();
//! assert!(summary.contains("<name>hello</name>"));
//! assert!(skills.turn_injection("please use $hello").unwrap().contains("Greet the user"));
//! ```

mod builtin;
mod error;
mod frontmatter;
mod loader;
mod requirements;

pub use builtin::{BuiltinFile, builtin_files, builtin_skill, builtin_skill_names, materialize_builtins};
pub use error::SkillsError;
pub use loader::{SKILLS_RECHECK_AFTER, Skill, SkillSet, SkillSource, SkillWarning, SkillsLoader};
pub use requirements::{Missing, RequirementEnv, Requirements};
