//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while loading skills or writing the built-in set to disk.
///
/// Loading never fails as a whole: a bad skill becomes a [`crate::SkillWarning`] holding one of these
/// and the other skills still load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillsError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file opens a `---` frontmatter block that never closes.
    #[error("{}: frontmatter starts with `---` on line 1 but has no closing `---` line", path.display())]
    UnterminatedFrontmatter {
        /// The SKILL.md file.
        path: PathBuf,
    },
    /// The frontmatter is not valid YAML.
    #[error("{}: invalid YAML frontmatter{}: {source}", path.display(), line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Frontmatter {
        /// The SKILL.md file.
        path: PathBuf,
        /// Line in the file (1-based) where the YAML error was found, when known.
        line: Option<usize>,
        /// The YAML parser's error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// The frontmatter parsed but is not a mapping of keys to values.
    #[error("{}: frontmatter must be a mapping of `key: value` lines, found {found}", path.display())]
    NotAMapping {
        /// The SKILL.md file.
        path: PathBuf,
        /// What was found instead (e.g. "a list").
        found: &'static str,
    },
    /// A field has a value of the wrong shape.
    #[error("{}: frontmatter field `{field}`: {message}", path.display())]
    Field {
        /// The SKILL.md file.
        path: PathBuf,
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
}
