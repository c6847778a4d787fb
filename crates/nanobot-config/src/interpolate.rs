//! `${VAR}` references in string values, resolved from the environment map at load time.
//!
//! Syntax: `${NAME}` where `NAME` is `[A-Za-z_][A-Za-z0-9_]*`; `$${` writes a literal `${`. A `$` not followed
//! by `{` is kept as is. Keys are never interpolated, only string values (at any depth, arrays included).

use nanobot_util::EnvMap;
use serde_json::Value;

use crate::doc::JsonPath;

/// A string value that contained references: where it is, as written, and as resolved.
#[derive(Debug, Clone)]
pub(crate) struct Interpolated {
    pub(crate) path: JsonPath,
    pub(crate) template: String,
    pub(crate) resolved: String,
    /// The variables the template names.
    pub(crate) vars: Vec<String>,
}

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InterpError {
    Missing { field: String, var: String },
    Malformed { field: String, reason: String },
}

/// Resolves every reference in `root`, in place.
pub(crate) fn interpolate(root: &mut Value, env: &EnvMap) -> Result<Vec<Interpolated>, InterpError> {
    let mut out = Vec::new();
    walk(root, &JsonPath::default(), env, &mut out)?;
    Ok(out)
}

fn walk(
    v: &mut Value,
    path: &JsonPath,
    env: &EnvMap,
    out: &mut Vec<Interpolated>,
) -> Result<(), InterpError> {
    match v {
        Value::String(s) if s.contains('$') => {
            if let Some((resolved, vars)) = resolve(s, path, env)? {
                out.push(Interpolated {
                    path: path.clone(),
                    template: s.clone(),
                    resolved: resolved.clone(),
                    vars,
                });
                *s = resolved;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, &path.child_index(i), env, out)?;
            }
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                walk(item, &path.child_key(k), env, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The resolved string and the variables it names, or `None` if `s` has no reference or escape.
fn resolve(s: &str, path: &JsonPath, env: &EnvMap) -> Result<Option<(String, Vec<String>)>, InterpError> {
    let mut out = String::with_capacity(s.len());
    let mut vars = Vec::new();
    let mut changed = false;
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            // `$${` → literal `${`
            out.push_str("${");
            rest = tail;
            changed = true;
        } else if let Some(tail) = after.strip_prefix('{') {
            let Some(end) = tail.find('}') else {
                return Err(InterpError::Malformed {
                    field: path.to_string(),
                    reason: "`${` without `}`".into(),
                });
            };
            let name = &tail[..end];
            if !is_var_name(name) {
                return Err(InterpError::Malformed {
                    field: path.to_string(),
                    // The text between the braces is not quoted: a pasted key is a common cause.
                    reason: "the text inside `${…}` is not a variable name (letters, digits, `_`)".into(),
                });
            }
            vars.push(name.to_owned());
            match env.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    return Err(InterpError::Missing {
                        field: path.to_string(),
                        var: name.to_owned(),
                    });
                }
            }
            rest = &tail[end + 1..];
            changed = true;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(changed.then_some((out, vars)))
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> EnvMap {
        EnvMap::from_iter([("KEY", "sk-1"), ("HOST", "example.org")])
    }

    #[test]
    fn resolves_nested_strings_and_keeps_other_dollars() {
        let mut v = json!({"a": {"k": "${KEY}", "u": ["https://${HOST}/v1", "$5", "$${KEY}"]}, "n": 1});
        let done = interpolate(&mut v, &env()).unwrap();
        assert_eq!(
            v,
            json!({"a": {"k": "sk-1", "u": ["https://example.org/v1", "$5", "${KEY}"]}, "n": 1})
        );
        assert_eq!(done.len(), 3);
        assert_eq!(done[0].path.to_string(), "a.k");
        assert_eq!(done[0].template, "${KEY}");
    }

    #[test]
    fn missing_variable_names_the_field_and_variable() {
        let mut v = json!({"providers": {"openai": {"apiKey": "${NOPE}"}}});
        let err = interpolate(&mut v, &env()).unwrap_err();
        assert_eq!(
            err,
            InterpError::Missing {
                field: "providers.openai.apiKey".into(),
                var: "NOPE".into()
            }
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for bad in ["${KEY", "${}", "${1A}", "${A-B}"] {
            let mut v = json!({"x": bad});
            assert!(
                matches!(interpolate(&mut v, &env()), Err(InterpError::Malformed { .. })),
                "{bad}"
            );
        }
    }
}
