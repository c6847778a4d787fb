//! Discovery (workspace over built-in), the loaded [`SkillSet`] and what it renders for prompts.

use nanobot_util::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nanobot_util::{ConfinedDir, EntryKind};

use crate::SkillsError;
use crate::builtin::{builtin_skill, builtin_skill_names, materialize_builtins};
use crate::frontmatter::{self, Frontmatter};
use crate::requirements::{Missing, RequirementEnv, Requirements};

/// Where a skill came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkillSource {
    /// `<workspace>/skills/<name>/SKILL.md` (wins over a built-in of the same name).
    Workspace,
    /// Embedded in the binary from the repository's `skills/` folder.
    Builtin,
}

/// One discovered skill.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Skill {
    /// The skill's name: its directory name.
    pub name: String,
    /// `description` from the frontmatter (the name when absent).
    pub description: String,
    /// Workspace or built-in.
    pub source: SkillSource,
    /// Path of the SKILL.md the model reads with `read_file` (for built-ins: under the built-in dir
    /// given to [`SkillsLoader::new`]; see [`SkillsLoader::materialize_builtins`]).
    pub location: PathBuf,
    /// `always: true` (top level or in metadata): loaded in full into every system prompt when available.
    pub always: bool,
    /// Optional emoji from the metadata.
    pub emoji: Option<String>,
    /// What the skill needs.
    pub requirements: Requirements,
    /// What of that is missing here (empty = available).
    pub missing: Vec<Missing>,
    /// The whole frontmatter as JSON (with a JSON-string `metadata` decoded).
    pub frontmatter: serde_json::Value,
    /// The Markdown body, without the frontmatter.
    pub body: String,
}

impl Skill {
    /// Whether every requirement is met.
    pub fn is_available(&self) -> bool {
        self.missing.is_empty()
    }

    /// The unmet requirements as Python nanobot shows them: `CLI: gh, ENV: GITHUB_TOKEN`.
    pub fn missing_summary(&self) -> String {
        self.missing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The block injected into a prompt: `### Skill: <name>\n\n<body>`.
    pub fn prompt_block(&self) -> String {
        format!("### Skill: {}\n\n{}", self.name, self.body.trim())
    }
}

/// A skill that could not be loaded (it is skipped; the others load).
#[derive(Debug)]
#[non_exhaustive]
pub struct SkillWarning {
    /// The skill's directory name.
    pub name: String,
    /// Why it was skipped (names the file and, where known, the line).
    pub error: SkillsError,
}

/// Finds skills in a workspace and in the built-in set.
///
/// The built-in skills are embedded; they are listed at `<builtin_dir>/<name>/SKILL.md`. Call
/// [`SkillsLoader::materialize_builtins`] once at start-up so those files exist, and let `read_file`
/// read `builtin_dir` (Python nanobot adds its built-in skills dir to `read_file`'s extra allowed
/// dirs the same way).
#[derive(Debug, Clone)]
pub struct SkillsLoader {
    /// The workspace: skills are read beneath a handle of it, so a link in `skills/` that leads out of it
    /// (planted by a command) is refused, never followed.
    workspace: ConfinedDir,
    workspace_skills: PathBuf,
    builtin_dir: PathBuf,
    builtins: bool,
    disabled: BTreeSet<String>,
    env: RequirementEnv,
    /// The last [`SkillsLoader::load_cached`] result, shared by clones of this loader.
    cache: Arc<Mutex<Option<CachedSet>>>,
}

/// The workspace's skills folder, relative to the workspace.
const SKILLS_DIR: &str = "skills";

/// How long a cached [`SkillSet`] is reused when no `SKILL.md` changed: requirements (binaries on `PATH`,
/// variables) are checked again after this, so a tool installed while the gateway runs is noticed.
pub const SKILLS_RECHECK_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct CachedSet {
    stamp: Vec<SkillFileStamp>,
    /// The skills folder itself, when it is a real folder (not a link) that had settled when it was listed: while
    /// it is unchanged, so are its entries, and the listing is not made again.
    dir: Option<nanobot_util::FileStamp>,
    built: Instant,
    set: Arc<SkillSet>,
}

/// What is compared to decide whether the workspace skills changed: each skill directory's name and its
/// `SKILL.md`'s length and modification time (`None` when missing or unreadable).
type SkillFileStamp = (std::ffi::OsString, Option<(u64, Option<SystemTime>)>);

impl SkillsLoader {
    /// A loader for `<workspace>/skills`, with built-ins shown under `builtin_dir`, checking
    /// requirements against `env`.
    pub fn new(workspace: &Path, builtin_dir: impl Into<PathBuf>, env: RequirementEnv) -> Self {
        SkillsLoader {
            workspace: ConfinedDir::new(workspace),
            workspace_skills: workspace.join(SKILLS_DIR),
            builtin_dir: builtin_dir.into(),
            builtins: true,
            disabled: BTreeSet::new(),
            env,
            cache: Arc::default(),
        }
    }

    /// Hides these skills everywhere (`agents.defaults.disabledSkills`).
    #[must_use]
    pub fn with_disabled<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disabled = names.into_iter().map(Into::into).collect();
        self.cache = Arc::default();
        self
    }

    /// Leaves the built-in skills out (workspace skills only).
    #[must_use]
    pub fn without_builtins(mut self) -> Self {
        self.builtins = false;
        self.cache = Arc::default();
        self
    }

    /// The directory built-in skills are listed under.
    pub fn builtin_dir(&self) -> &Path {
        &self.builtin_dir
    }

    /// Writes the embedded built-in skills to the built-in dir (idempotent).
    pub fn materialize_builtins(&self) -> Result<PathBuf, SkillsError> {
        materialize_builtins(&self.builtin_dir)
    }

    /// The skills, reused from the previous call (of this loader or a clone of it) while no workspace
    /// `SKILL.md` was added, removed or changed (length or modification time) and for at most
    /// [`SKILLS_RECHECK_AFTER`]; otherwise [`SkillsLoader::load`] runs again. A turn of a long-running gateway
    /// thus stats the skill files instead of re-reading, re-parsing and re-checking requirements (`PATH`
    /// look-ups) every time.
    pub fn load_cached(&self) -> Arc<SkillSet> {
        let started = SystemTime::now();
        let dir = self.dir_stamp();
        let mut cache = lock(&self.cache);
        // The folder unchanged: its entries are the ones listed last time (each `SKILL.md` is still checked).
        let listed = cache
            .as_ref()
            .filter(|c| dir.is_some() && c.dir == dir)
            .map(|c| c.stamp.iter().map(|(name, _)| name.clone()).collect());
        let stamp = self.stamp(listed);
        if let Some(c) = cache.as_ref()
            && c.stamp == stamp
            && c.built.elapsed() < SKILLS_RECHECK_AFTER
        {
            return c.set.clone();
        }
        let set = Arc::new(self.load());
        *cache = Some(CachedSet {
            stamp,
            dir: dir.filter(|d| d.settled_before(started)),
            built: Instant::now(),
            set: set.clone(),
        });
        set
    }

    /// The skills folder's stamp, when it is a real folder (a link is listed through the sandbox every time).
    fn dir_stamp(&self) -> Option<nanobot_util::FileStamp> {
        let m = std::fs::symlink_metadata(&self.workspace_skills).ok()?;
        m.is_dir().then(|| nanobot_util::FileStamp::of(&m))
    }

    /// Each skill folder's `SKILL.md` stamp; the folders are `listed` or listed now through the sandbox.
    fn stamp(&self, listed: Option<Vec<std::ffi::OsString>>) -> Vec<SkillFileStamp> {
        let names = match listed {
            Some(names) => names,
            None => match self.workspace.read_dir(Path::new(SKILLS_DIR)) {
                Ok(Some(entries)) => entries.into_iter().map(|(name, _)| name).collect(),
                _ => return Vec::new(),
            },
        };
        names
            .into_iter()
            .map(|name| {
                let meta = self
                    .workspace
                    .symlink_metadata(&Path::new(SKILLS_DIR).join(&name).join("SKILL.md"))
                    .ok()
                    .flatten()
                    .map(|m| (m.len(), m.modified().ok()));
                (name, meta)
            })
            .collect()
    }

    /// Discovers all skills now. Never fails: unreadable or malformed skills are skipped with a
    /// warning (logged with `tracing` and kept in [`SkillSet::warnings`]).
    pub fn load(&self) -> SkillSet {
        let mut skills: BTreeMap<String, Skill> = BTreeMap::new();
        let mut warnings = Vec::new();
        let mut shadowed = BTreeSet::new();

        match self.workspace.read_dir(Path::new(SKILLS_DIR)) {
            Ok(entries) => {
                // Folders, and links to folders (followed only while they stay inside the workspace).
                let dirs = entries
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, kind)| matches!(kind, EntryKind::Dir | EntryKind::Symlink));
                for (name, kind) in dirs {
                    let Some(name) = name.to_str().map(str::to_owned) else {
                        continue;
                    };
                    if name.starts_with('.') {
                        continue;
                    }
                    let rel = Path::new(SKILLS_DIR).join(&name).join("SKILL.md");
                    let file = self.workspace_skills.join(&name).join("SKILL.md");
                    let text = match self.workspace.read_to_string(&rel) {
                        Ok(Some(t)) => t,
                        Ok(None) => continue,
                        // A link to a file, not a skill folder.
                        Err(e)
                            if kind == EntryKind::Symlink
                                && e.kind() == std::io::ErrorKind::NotADirectory =>
                        {
                            continue;
                        }
                        Err(source) => {
                            let error = SkillsError::Io { path: file, source };
                            tracing::warn!(skill = %name, "skipping skill: {error}");
                            warnings.push(SkillWarning { name, error });
                            continue;
                        }
                    };
                    // A broken workspace skill still hides the built-in of the same name: the user
                    // meant to replace it.
                    shadowed.insert(name.clone());
                    if self.disabled.contains(&name) {
                        continue;
                    }
                    match self.build(&name, &text, file, SkillSource::Workspace) {
                        Ok(skill) => {
                            skills.insert(name, skill);
                        }
                        Err(error) => {
                            tracing::warn!(skill = %name, "skipping skill: {error}");
                            warnings.push(SkillWarning { name, error });
                        }
                    }
                }
            }
            Err(source) => {
                let error = SkillsError::Io {
                    path: self.workspace_skills.clone(),
                    source,
                };
                tracing::warn!("cannot list workspace skills: {error}");
                warnings.push(SkillWarning {
                    name: String::new(),
                    error,
                });
            }
        }

        if self.builtins {
            for name in builtin_skill_names() {
                if shadowed.contains(name) || self.disabled.contains(name) {
                    continue;
                }
                let Some(text) = builtin_skill(name) else { continue };
                let location = self.builtin_dir.join(name).join("SKILL.md");
                match self.build(name, text, location, SkillSource::Builtin) {
                    Ok(skill) => {
                        skills.insert(name.to_owned(), skill);
                    }
                    Err(error) => {
                        tracing::warn!(skill = %name, "skipping built-in skill: {error}");
                        warnings.push(SkillWarning {
                            name: name.to_owned(),
                            error,
                        });
                    }
                }
            }
        }

        SkillSet {
            skills: skills.into_values().collect(),
            warnings,
        }
    }

    fn build(
        &self,
        name: &str,
        text: &str,
        location: PathBuf,
        source: SkillSource,
    ) -> Result<Skill, SkillsError> {
        let split = frontmatter::split(text, &location)?;
        let fm = match split.yaml {
            Some(yaml) => frontmatter::parse(yaml, &location, 2)?,
            None => Frontmatter::default(),
        };
        let requirements = Requirements {
            bins: fm.bins,
            env: fm.env,
            os: fm.os,
        };
        let missing = self.env.missing(&requirements);
        Ok(Skill {
            name: name.to_owned(),
            description: fm.description.unwrap_or_else(|| name.to_owned()),
            source,
            location,
            always: fm.always,
            emoji: fm.emoji,
            requirements,
            missing,
            frontmatter: fm.raw,
            body: split.body.to_owned(),
        })
    }
}

/// The skills found by one [`SkillsLoader::load`], sorted by name.
#[derive(Debug, Default)]
pub struct SkillSet {
    skills: Vec<Skill>,
    warnings: Vec<SkillWarning>,
}

impl SkillSet {
    /// All visible skills (disabled ones are absent), sorted by name.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Skills that were skipped, with the reason.
    pub fn warnings(&self) -> &[SkillWarning] {
        &self.warnings
    }

    /// Always-on skills whose requirements are met (unavailable ones are never loaded in full).
    pub fn always_on(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().filter(|s| s.always && s.is_available())
    }

    /// The `# Active Skills` system-prompt section with the full text of the always-on skills, or
    /// `None` when there are none.
    pub fn always_on_section(&self) -> Option<String> {
        let blocks: Vec<String> = self.always_on().map(Skill::prompt_block).collect();
        (!blocks.is_empty()).then(|| format!("# Active Skills\n\n{}", blocks.join("\n\n---\n\n")))
    }

    /// The XML summary in Python nanobot's format, listing every skill not already loaded in full
    /// (`None` when that leaves nothing):
    ///
    /// ```text
    /// <skills>
    ///   <skill available="true">
    ///     <name>weather</name>
    ///     <description>…</description>
    ///     <location>/…/weather/SKILL.md</location>
    ///   </skill>
    ///   <skill available="false">
    ///     …
    ///     <requires>CLI: gh, ENV: GH_TOKEN</requires>
    ///   </skill>
    /// </skills>
    /// ```
    pub fn summary_xml(&self) -> Option<String> {
        let listed: Vec<&Skill> = self
            .skills
            .iter()
            .filter(|s| !(s.always && s.is_available()))
            .collect();
        if listed.is_empty() {
            return None;
        }
        let mut out = String::from("<skills>\n");
        for s in listed {
            let available = s.is_available();
            out.push_str(&format!("  <skill available=\"{available}\">\n"));
            out.push_str(&format!("    <name>{}</name>\n", escape_xml(&s.name)));
            out.push_str(&format!(
                "    <description>{}</description>\n",
                escape_xml(&s.description)
            ));
            out.push_str(&format!(
                "    <location>{}</location>\n",
                escape_xml(&s.location.to_string_lossy())
            ));
            if !available {
                out.push_str(&format!(
                    "    <requires>{}</requires>\n",
                    escape_xml(&s.missing_summary())
                ));
            }
            out.push_str("  </skill>\n");
        }
        out.push_str("</skills>");
        Some(out)
    }

    /// The `# Skills` system-prompt section: how to use skills, then [`SkillSet::summary_xml`].
    pub fn summary_section(&self) -> Option<String> {
        self.summary_markdown().map(|groups| {
            format!(
                "# Skills\n\nThe following skills extend your capabilities. Each group names its folder; read a skill's \
                 SKILL.md there with `read_file` before you use it. A skill marked unavailable needs what it lists \
                 installed first.\n\n{groups}"
            )
        })
    }

    /// The summary in 0.3.5's Markdown groups: a "Workspace skills" heading naming the `skills` folder and a
    /// "Built-in skills" heading naming the folder they were unpacked to, each skill as a bullet with its name in
    /// bold, its description (and what it lacks, when unavailable) and its `name/SKILL.md` path. Always-on skills
    /// that are available (already in the prompt in full) are left out.
    pub fn summary_markdown(&self) -> Option<String> {
        let mut groups = Vec::new();
        for (label, source) in [
            ("Workspace skills", SkillSource::Workspace),
            ("Built-in skills", SkillSource::Builtin),
        ] {
            let listed: Vec<&Skill> = self
                .skills
                .iter()
                .filter(|s| s.source == source && !(s.always && s.is_available()))
                .collect();
            let Some(first) = listed.first() else { continue };
            let root = match source {
                SkillSource::Workspace => "skills".to_owned(),
                SkillSource::Builtin => first
                    .location
                    .parent()
                    .and_then(Path::parent)
                    .map_or_else(String::new, |p| p.display().to_string()),
            };
            let mut group = format!("### {label} (`{root}`)");
            for s in listed {
                let unavailable = if s.is_available() {
                    String::new()
                } else {
                    format!(" (unavailable: {})", s.missing_summary())
                };
                group.push_str(&format!(
                    "\n- **{}** — {}{unavailable}  `{}/SKILL.md`",
                    s.name, s.description, s.name
                ));
            }
            groups.push(group);
        }
        (!groups.is_empty()).then(|| groups.join("\n\n"))
    }

    /// The skills a user message names as `$skill-name` (known skills only, each once, in order of
    /// first mention). `$5` or `$unknown` are ignored.
    pub fn mentioned(&self, message: &str) -> Vec<&Skill> {
        let mut out: Vec<&Skill> = Vec::new();
        for name in dollar_names(message) {
            if let Some(skill) = self.get(name)
                && !out.iter().any(|s| s.name == skill.name)
            {
                out.push(skill);
            }
        }
        out
    }

    /// Text to inject for this turn for the `$skill-name` mentions in `message` (`None` when there
    /// are none). Skills already loaded in full as always-on are not repeated; a skill whose
    /// requirements are missing is still injected (the user asked for it) with a note saying what is
    /// missing.
    pub fn turn_injection(&self, message: &str) -> Option<String> {
        let blocks: Vec<String> = self
            .mentioned(message)
            .into_iter()
            .filter(|s| !(s.always && s.is_available()))
            .map(|s| {
                if s.is_available() {
                    s.prompt_block()
                } else {
                    format!(
                        "### Skill: {} (requirements missing: {})\n\n{}",
                        s.name,
                        s.missing_summary(),
                        s.body.trim()
                    )
                }
            })
            .collect();
        (!blocks.is_empty()).then(|| {
            format!(
                "# Requested Skills\n\nThe user asked for these skills in this message:\n\n{}",
                blocks.join("\n\n---\n\n")
            )
        })
    }
}

/// `$name` tokens: `$` at the start or after a non-word character, then `[A-Za-z0-9_-]+` starting
/// with a letter.
fn dollar_names(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && (i == 0 || !is_name_byte(bytes[i - 1])) {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && is_name_byte(bytes[end]) {
                end += 1;
            }
            // trailing '-' is punctuation, not part of the name
            while end > start && bytes[end - 1] == b'-' {
                end -= 1;
            }
            if end > start && bytes[start].is_ascii_alphabetic() {
                out.push(&text[start..end]);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_names_found() {
        assert_eq!(
            dollar_names("use $weather, then $skill-creator."),
            vec!["weather", "skill-creator"]
        );
        assert_eq!(dollar_names("costs $5 or US$weather"), Vec::<&str>::new());
        assert_eq!(dollar_names("$github-"), vec!["github"]);
        assert_eq!(dollar_names("($tmux)"), vec!["tmux"]);
    }

    /// Writes `skills/<name>/SKILL.md` under `ws`.
    fn skill(ws: &Path, name: &str, description: &str) {
        let dir = ws.join(SKILLS_DIR).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\ndescription: {description}\n---\nBody.\n"),
        )
        .unwrap();
    }

    #[test]
    fn a_settled_skills_folder_is_not_listed_again_until_it_changes() {
        let ws = tempfile::tempdir().unwrap();
        let builtin = tempfile::tempdir().unwrap();
        skill(ws.path(), "mine", "First");
        let loader = SkillsLoader::new(
            ws.path(),
            builtin.path(),
            RequirementEnv::new(nanobot_util::EnvMap::default()),
        )
        .without_builtins();
        assert!(loader.load_cached().get("mine").is_some());
        // Just written, the folder had not settled: its stamp was not kept.
        assert_eq!(lock(&loader.cache).as_ref().unwrap().dir, None);
        // As a listing two seconds after its last change would keep it (a test cannot age a change time).
        lock(&loader.cache).as_mut().unwrap().dir = loader.dir_stamp();
        let kept = loader.load_cached();
        assert!(Arc::ptr_eq(&kept, &loader.load_cached()));

        // An edit inside a skill folder leaves the skills folder as it was, and is seen all the same.
        skill(ws.path(), "mine", "Second, longer");
        assert_eq!(
            loader.load_cached().get("mine").unwrap().description,
            "Second, longer"
        );
        // A folder added changes the skills folder: listed again.
        lock(&loader.cache).as_mut().unwrap().dir = loader.dir_stamp();
        skill(ws.path(), "added", "New");
        assert!(loader.load_cached().get("added").is_some());
        // The skills folder replaced by a link: its stamp is never kept (its target's changes are not in it).
        let elsewhere = ws.path().join("elsewhere");
        std::fs::rename(ws.path().join(SKILLS_DIR), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ws.path().join(SKILLS_DIR)).unwrap();
        assert_eq!(loader.dir_stamp(), None);
        loader.load_cached();
        assert_eq!(lock(&loader.cache).as_ref().unwrap().dir, None);
    }

    #[test]
    fn xml_escaped() {
        assert_eq!(escape_xml("a<b>&c"), "a&lt;b&gt;&amp;c");
    }
}
