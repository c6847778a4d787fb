//! Sender authentication read from `Authentication-Results` (RFC 8601), as `verifyDkim` / `verifySpf` need.
//!
//! Only a header written by one of the `trustedAuthservIds` counts, and there must be exactly one such header
//! (a header the sender planted with the same id would otherwise be mixed with the real one). A pass counts
//! only when its domain (`smtp.mailfrom` for SPF, `header.d` — else the domain of `header.i` — for DKIM) is
//! aligned with the single `From` address's domain (equal, or one a subdomain of the other).

/// The aligned verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthVerdict {
    /// An aligned `spf=pass`.
    pub spf: bool,
    /// An aligned `dkim=pass`.
    pub dkim: bool,
}

/// One `method=result` with its `ptype.property=value` pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MethodResult {
    method: String,
    result: String,
    props: Vec<(String, String)>,
}

/// Reads the verdicts for mail from `sender` (the single `From` address; pass `None` when the message has no
/// single `From` address, which fails both) out of the raw `Authentication-Results` header values.
pub fn check_authentication_results<'a>(
    raw_headers: impl IntoIterator<Item = &'a str>,
    sender: Option<&str>,
    trusted_ids: &[String],
) -> AuthVerdict {
    let Some(sender_domain) = sender.and_then(address_domain) else {
        return AuthVerdict::default();
    };
    if trusted_ids.is_empty() {
        return AuthVerdict::default();
    }
    let trusted: Vec<Option<Vec<MethodResult>>> = raw_headers
        .into_iter()
        .filter_map(parse_header)
        .filter(|(id, _)| trusted_ids.iter().any(|t| t == id))
        .map(|(_, results)| results)
        .collect();
    let [Some(results)] = trusted.as_slice() else {
        return AuthVerdict::default();
    };
    AuthVerdict {
        spf: aligned(results, "spf", &sender_domain),
        dkim: aligned(results, "dkim", &sender_domain),
    }
}

fn aligned(results: &[MethodResult], method: &str, sender_domain: &str) -> bool {
    results
        .iter()
        .filter(|r| r.method == method && r.result == "pass")
        .any(|r| {
            let prop = |name: &str| r.props.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
            let domain = if method == "spf" {
                prop("smtp.mailfrom").and_then(address_domain)
            } else {
                match prop("header.d") {
                    Some(d) if !d.contains(['@', '<', '>']) => address_domain(d),
                    Some(_) => None,
                    None => prop("header.i")
                        .filter(|i| i.contains('@'))
                        .and_then(address_domain),
                }
            };
            domain.is_some_and(|d| {
                d == sender_domain
                    || d.ends_with(&format!(".{sender_domain}"))
                    || sender_domain.ends_with(&format!(".{d}"))
            })
        })
}

/// The lower-cased domain of an address or bare domain, when it is a valid host name.
fn address_domain(value: &str) -> Option<String> {
    let value = value.trim().trim_matches(['<', '>']);
    let domain = value.rsplit_once('@').map_or(value, |(_, d)| d);
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    let valid = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    valid.then_some(domain)
}

/// `(authserv-id, results)`; results are `None` when the header is malformed (it still counts as a header of
/// that server, so a malformed duplicate cannot be ignored).
fn parse_header(value: &str) -> Option<(String, Option<Vec<MethodResult>>)> {
    let (parts, balanced) = split_top_level(value);
    let mut head = parts.first()?.split_whitespace();
    let id = head.next()?.trim_matches('"').to_ascii_lowercase();
    let id = id.trim_end_matches('.').to_string();
    if id.is_empty()
        || !id.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
    {
        return None;
    }
    let version_ok = matches!((head.next(), head.next()), (None, _) | (Some("1"), None));
    if !version_ok || !balanced {
        return Some((id, None));
    }
    let mut results = Vec::new();
    for part in &parts[1..] {
        if part.trim().eq_ignore_ascii_case("none") && parts.len() == 2 {
            return Some((id, Some(Vec::new())));
        }
        let Some(pairs) = assignments(part) else {
            return Some((id, None));
        };
        let Some(((method, result), rest)) = pairs.split_first() else {
            return Some((id, None));
        };
        let method = method.split('/').next().unwrap_or_default().to_ascii_lowercase();
        if method.is_empty()
            || method.contains('.')
            || !result
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some((id, None));
        }
        let mut props: Vec<(String, String)> = Vec::new();
        for (key, val) in rest {
            let key = key.to_ascii_lowercase();
            if props.iter().any(|(k, _)| *k == key) || (!key.contains('.') && key != "reason") {
                return Some((id, None));
            }
            if key.contains('.') {
                props.push((key, val.clone()));
            }
        }
        results.push(MethodResult {
            method,
            result: result.to_ascii_lowercase(),
            props,
        });
    }
    Some((id, Some(results)))
}

/// Splits on `;` outside quotes and comments, dropping comments; `false` when quotes or comments are
/// unbalanced.
fn split_top_level(value: &str) -> (Vec<String>, bool) {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut depth, mut escaped) = (false, 0u32, false);
    for c in value.chars() {
        if escaped {
            if depth == 0 {
                cur.push(c);
            }
            escaped = false;
        } else if c == '\\' && (quoted || depth > 0) {
            if depth == 0 {
                cur.push(c);
            }
            escaped = true;
        } else if depth > 0 {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
        } else if quoted {
            cur.push(c);
            quoted = c != '"';
        } else {
            match c {
                '"' => {
                    quoted = true;
                    cur.push(c);
                }
                '(' => {
                    depth = 1;
                    cur.push(' ');
                }
                ';' => parts.push(std::mem::take(&mut cur).trim().to_string()),
                _ => cur.push(c),
            }
        }
    }
    parts.push(cur.trim().to_string());
    (parts, !(quoted || depth > 0 || escaped))
}

/// `key=value key=value …` with optional spaces around `=` and quoted values. `None` when malformed.
fn assignments(part: &str) -> Option<Vec<(String, String)>> {
    let chars: Vec<char> = part.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= chars.len() {
            break;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '.' | '/' | '_' | '-'))
        {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        if key.is_empty() || !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return None;
        }
        skip_ws(&mut i);
        if chars.get(i) != Some(&'=') {
            return None;
        }
        i += 1;
        skip_ws(&mut i);
        let mut value = String::new();
        if chars.get(i) == Some(&'"') {
            i += 1;
            let mut closed = false;
            while i < chars.len() {
                let c = chars[i];
                i += 1;
                if c == '\\' {
                    value.push(*chars.get(i)?);
                    i += 1;
                } else if c == '"' {
                    closed = true;
                    break;
                } else {
                    value.push(c);
                }
            }
            if !closed {
                return None;
            }
            // A quoted local part followed by @domain (RFC 8601 pvalue).
            while i < chars.len() && !chars[i].is_whitespace() {
                value.push(chars[i]);
                i += 1;
            }
        } else {
            while i < chars.len() && !chars[i].is_whitespace() {
                value.push(chars[i]);
                i += 1;
            }
        }
        if value.is_empty() && !key.eq_ignore_ascii_case("reason") {
            return None;
        }
        out.push((key, value));
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec!["mx.example.net".to_string()]
    }

    fn check(headers: &[&str], sender: &str) -> AuthVerdict {
        check_authentication_results(headers.iter().copied(), Some(sender), &ids())
    }

    #[test]
    fn aligned_passes_from_the_trusted_server_count() {
        let h = "mx.example.net; spf=pass (sender ok) smtp.mailfrom=alice@example.org; \
                 dkim=pass header.d=example.org header.s=sel";
        assert_eq!(
            check(&[h], "alice@example.org"),
            AuthVerdict {
                spf: true,
                dkim: true
            }
        );
        let sub = "mx.example.net 1; spf=pass smtp.mailfrom=bounce@mail.example.org; dkim=pass header.i=@example.org";
        assert_eq!(
            check(&[sub], "alice@example.org"),
            AuthVerdict {
                spf: true,
                dkim: true
            }
        );
    }

    #[test]
    fn untrusted_duplicated_unaligned_or_failed_results_do_not_count() {
        let good = "mx.example.net; spf=pass smtp.mailfrom=example.org; dkim=pass header.d=example.org";
        assert_eq!(
            check(
                &["evil.example; spf=pass smtp.mailfrom=example.org"],
                "a@example.org"
            ),
            AuthVerdict::default()
        );
        assert_eq!(
            check(&[good, good], "a@example.org"),
            AuthVerdict::default(),
            "two trusted headers"
        );
        assert_eq!(
            check(
                &[
                    good,
                    "mx.example.net; spf=pass smtp.mailfrom=example.org; dkim=(unclosed"
                ],
                "a@example.org"
            ),
            AuthVerdict::default(),
            "a malformed duplicate still counts as a duplicate"
        );
        assert_eq!(
            check(&[good], "a@evil-example.org"),
            AuthVerdict::default(),
            "not aligned"
        );
        let failed = "mx.example.net; spf=fail smtp.mailfrom=example.org; dkim=neutral header.d=example.org";
        assert_eq!(check(&[failed], "a@example.org"), AuthVerdict::default());
        let comment =
            "mx.example.net; spf=softfail (spf=pass smtp.mailfrom=example.org) smtp.mailfrom=x.test";
        assert_eq!(
            check(&[comment], "a@example.org"),
            AuthVerdict::default(),
            "comments are ignored"
        );
        let at_in_d = "mx.example.net; dkim=pass header.d=a@example.org";
        assert!(!check(&[at_in_d], "a@example.org").dkim);
        assert_eq!(
            check_authentication_results([good], None, &ids()),
            AuthVerdict::default(),
            "no single From address"
        );
        assert_eq!(
            check_authentication_results([good], Some("a@example.org"), &[]),
            AuthVerdict::default()
        );
    }

    #[test]
    fn parser_handles_quotes_and_garbage() {
        let (parts, ok) = split_top_level("a; b=\"x;y\"; c (d;e)");
        assert!(ok);
        assert_eq!(parts, ["a", "b=\"x;y\"", "c"]);
        assert!(!split_top_level("a; b=\"x").1);
        assert!(assignments("spf=pass smtp.mailfrom=\"a b\"@example.org").is_some());
        assert!(assignments("=pass").is_none());
        assert!(parse_header("").is_none());
        assert!(parse_header("bad!id; spf=pass").is_none());
        assert_eq!(
            parse_header("mx.example.net extra; spf=pass"),
            Some(("mx.example.net".into(), None))
        );
        let h = "mx.example.net; spf=pass smtp.mailfrom=\"al ice\"@example.org";
        assert!(check(&[h], "x@example.org").spf);
    }
}
