//! SKILL.md frontmatter: splitting the `---` block off and reading it leniently.
//!
//! Accepted shapes (all seen in Python nanobot / openclaw skills):
//!
//! ```yaml
//! ---
//! name: github
//! description: "Work with GitHub through the gh CLI"
//! always: false
//! metadata: {"nanobot": {"emoji": "🐙", "requires": {"bins": ["gh"]}, "os": ["linux", "darwin"]}}
//! requires:            # also accepted at the top level
//!   env: [GITHUB_TOKEN]
//! ---
//! ```
//!
//! `metadata` may be a mapping or a string holding JSON; its requirements live under a `nanobot` or
//! `openclaw` key, or directly in it. Strings are accepted where lists are expected (`bins: gh`).

use std::path::Path;

use serde_json::{Map, Value};

use crate::SkillsError;

/// A SKILL.md split into its frontmatter text and body.
pub(crate) struct Split<'a> {
    /// The YAML between the `---` lines, if the file has a frontmatter block.
    pub(crate) yaml: Option<&'a str>,
    /// The Markdown after the frontmatter (leading blank lines trimmed).
    pub(crate) body: &'a str,
}

/// Splits a SKILL.md into frontmatter and body.
pub(crate) fn split<'a>(text: &'a str, path: &Path) -> Result<Split<'a>, SkillsError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return Ok(Split {
            yaml: None,
            body: text,
        });
    };
    if first.trim_end() != "---" {
        return Ok(Split {
            yaml: None,
            body: text,
        });
    }
    let start = first.len();
    let mut offset = start;
    for line in lines {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let yaml = &text[start..offset];
            let body = text[offset + line.len()..].trim_start_matches(['\n', '\r']);
            return Ok(Split {
                yaml: Some(yaml),
                body,
            });
        }
        offset += line.len();
    }
    Err(SkillsError::UnterminatedFrontmatter {
        path: path.to_path_buf(),
    })
}

/// The frontmatter fields nanobot uses, read leniently.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Frontmatter {
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) always: bool,
    pub(crate) emoji: Option<String>,
    pub(crate) bins: Vec<String>,
    pub(crate) env: Vec<String>,
    pub(crate) os: Vec<String>,
    /// The whole frontmatter as JSON (metadata strings already decoded).
    pub(crate) raw: Value,
}

/// Parses frontmatter YAML. `yaml_first_line` is the file line the YAML starts on (for error messages).
pub(crate) fn parse(yaml: &str, path: &Path, yaml_first_line: usize) -> Result<Frontmatter, SkillsError> {
    let value: Value = if yaml.trim().is_empty() {
        Value::Null
    } else {
        serde_yaml_ng::from_str(yaml).map_err(|source| SkillsError::Frontmatter {
            path: path.to_path_buf(),
            line: source.location().map(|l| l.line() + yaml_first_line - 1),
            source,
        })?
    };
    let mut map = match value {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        other => {
            return Err(SkillsError::NotAMapping {
                path: path.to_path_buf(),
                found: kind(&other),
            });
        }
    };

    // metadata: a mapping, or a string holding JSON (the Python built-ins write it on one line).
    if let Some(Value::String(s)) = map.get("metadata") {
        let decoded = serde_json::from_str::<Value>(s)
            .ok()
            .or_else(|| serde_yaml_ng::from_str::<Value>(s).ok());
        match decoded {
            Some(v @ Value::Object(_)) => {
                map.insert("metadata".into(), v);
            }
            _ => {
                tracing::warn!(path = %path.display(), "skill frontmatter: `metadata` is not a JSON object; ignored")
            }
        }
    }
    let meta: Map<String, Value> = match map.get("metadata") {
        Some(Value::Object(m)) => match (m.get("nanobot"), m.get("openclaw")) {
            (Some(Value::Object(n)), _) | (None, Some(Value::Object(n))) => n.clone(),
            _ => m.clone(),
        },
        _ => Map::new(),
    };

    let mut fm = Frontmatter {
        name: scalar_string(map.get("name")),
        description: scalar_string(map.get("description")),
        always: truthy(map.get("always")) || truthy(meta.get("always")),
        emoji: scalar_string(meta.get("emoji")).or_else(|| scalar_string(map.get("emoji"))),
        ..Frontmatter::default()
    };
    for source in [&map, &meta] {
        if let Some(req) = source.get("requires") {
            let req = match req {
                Value::Object(r) => r,
                _ => {
                    return Err(SkillsError::Field {
                        path: path.to_path_buf(),
                        field: "requires",
                        message: format!("expected a mapping with `bins`/`env`, found {}", kind(req)),
                    });
                }
            };
            extend_unique(&mut fm.bins, string_list(req.get("bins")));
            extend_unique(&mut fm.env, string_list(req.get("env")));
        }
        extend_unique(&mut fm.os, string_list(source.get("os")));
    }
    fm.raw = Value::Object(map);
    Ok(fm)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn scalar_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "true" | "yes" | "on" | "1"
        ),
        Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n != 0),
        _ => false,
    }
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => s
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(Value::Array(items)) => items.iter().filter_map(|i| scalar_string(Some(i))).collect(),
        _ => Vec::new(),
    }
}

fn extend_unique(into: &mut Vec<String>, items: Vec<String>) {
    for item in items {
        if !into.contains(&item) {
            into.push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("skills/x/SKILL.md")
    }

    #[test]
    fn splits_frontmatter_and_body() {
        let s = split("---\nname: x\n---\n\n# Body\n", p()).unwrap();
        assert_eq!(s.yaml, Some("name: x\n"));
        assert_eq!(s.body, "# Body\n");
        let s = split("# no frontmatter\n", p()).unwrap();
        assert!(s.yaml.is_none());
        assert_eq!(s.body, "# no frontmatter\n");
        let s = split("---\r\nname: x\r\n---\r\nbody", p()).unwrap();
        assert_eq!(s.yaml, Some("name: x\r\n"));
        assert_eq!(s.body, "body");
    }

    #[test]
    fn unterminated_frontmatter_is_an_error_naming_the_file() {
        let err = split("---\nname: x\n# body", p()).err().unwrap();
        assert!(err.to_string().contains("skills/x/SKILL.md"), "{err}");
        assert!(matches!(err, SkillsError::UnterminatedFrontmatter { .. }));
    }

    #[test]
    fn python_style_metadata_json_string() {
        let yaml = r#"name: github
description: "Interact with GitHub using the `gh` CLI."
metadata: '{"nanobot":{"emoji":"🐙","requires":{"bins":["gh"],"env":["GH_TOKEN"]},"os":["linux"]}}'
"#;
        let fm = parse(yaml, p(), 2).unwrap();
        assert_eq!(fm.name.as_deref(), Some("github"));
        assert_eq!(fm.bins, vec!["gh"]);
        assert_eq!(fm.env, vec!["GH_TOKEN"]);
        assert_eq!(fm.os, vec!["linux"]);
        assert_eq!(fm.emoji.as_deref(), Some("🐙"));
        assert!(!fm.always);
    }

    #[test]
    fn flow_mapping_metadata_openclaw_and_top_level_requires() {
        let yaml = "description: d\nalways: \"true\"\nmetadata: {\"openclaw\": {\"requires\": {\"bins\": \"tmux\"}}}\nrequires:\n  env: [A, B]\n";
        let fm = parse(yaml, p(), 2).unwrap();
        assert!(fm.always);
        assert_eq!(fm.bins, vec!["tmux"]);
        assert_eq!(fm.env, vec!["A", "B"]);
    }

    #[test]
    fn metadata_without_namespace_and_always_inside_metadata() {
        let fm = parse(
            "metadata:\n  always: true\n  requires:\n    bins: [curl]\n",
            p(),
            2,
        )
        .unwrap();
        assert!(fm.always);
        assert_eq!(fm.bins, vec!["curl"]);
        assert!(fm.description.is_none());
    }

    #[test]
    fn bad_yaml_reports_file_and_line() {
        let err = parse("name: x\ndescription: [unclosed\n", p(), 2).err().unwrap();
        match &err {
            SkillsError::Frontmatter { line, .. } => assert!(line.is_some_and(|l| l >= 2)),
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("skills/x/SKILL.md"));
    }

    #[test]
    fn non_mapping_frontmatter_rejected() {
        let err = parse("- a\n- b\n", p(), 2).err().unwrap();
        assert!(matches!(err, SkillsError::NotAMapping { found: "a list", .. }));
        let err = parse("requires: gh\n", p(), 2).err().unwrap();
        assert!(matches!(
            err,
            SkillsError::Field {
                field: "requires",
                ..
            }
        ));
    }
}
