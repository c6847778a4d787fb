//! The user's words out of a Teams message's text, as 0.3.5 takes them: mentions (`<at>…</at>`) removed, HTML
//! entities decoded, and Teams' quoted-reply wrappers turned into "User is replying to: … / User reply: …".

/// The text the agent gets for a message (`text` and whether Teams marked it as a reply). Empty when nothing but
/// mentions was written.
pub(crate) fn user_text(text: &str, is_reply: bool) -> String {
    let text = decode(&without_mentions(text));
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let looks_quoted = first.to_lowercase().starts_with("replying to ") || first.starts_with("Reply wrapper");
    let text = if is_reply || looks_quoted {
        reply_with_quote(&text)
    } else {
        text
    };
    text.trim().to_owned()
}

/// `text` without `<at …>…</at>` mentions (any case), runs of blanks (not newlines) made one space, more than
/// two line breaks in a row made two, trimmed.
fn without_mentions(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find("<at") {
        let start = at + found;
        let tag_ok = lower[start + 3..]
            .chars()
            .next()
            .is_some_and(|c| c == '>' || c.is_whitespace());
        let end = tag_ok
            .then(|| lower[start..].find("</at>"))
            .flatten()
            .map(|e| start + e + "</at>".len());
        match end {
            Some(end) => {
                out.push_str(&text[at..start]);
                out.push(' ');
                at = end;
            }
            None => {
                out.push_str(&text[at..start + 3]);
                at = start + 3;
            }
        }
    }
    out.push_str(&text[at..]);
    let mut squeezed = String::with_capacity(out.len());
    let mut blank = false;
    let mut breaks = 0;
    for c in out.chars() {
        if c == '\n' {
            breaks += 1;
            blank = false;
            if breaks <= 2 {
                squeezed.push('\n');
            }
            continue;
        }
        if c == '\r' {
            continue;
        }
        if c.is_whitespace() {
            if !blank {
                squeezed.push(' ');
            }
            blank = true;
            continue;
        }
        breaks = 0;
        blank = false;
        squeezed.push(c);
    }
    squeezed.trim().to_owned()
}

/// HTML entities decoded (Teams sends `&amp;`, `&nbsp;`, and `&rsquo` without its `;`), no-break spaces made
/// spaces.
fn decode(text: &str) -> String {
    html_escape::decode_html_entities(&text.replace("&rsquo", "’").replace("’;", "’")).replace('\u{a0}', " ")
}

fn quoted(quote: &str, reply: &str) -> String {
    match (quote.trim(), reply.trim()) {
        ("", reply) => reply.to_owned(),
        (quote, "") => quote.to_owned(),
        (quote, reply) => format!("User is replying to: {quote}\nUser reply: {reply}"),
    }
}

/// Teams' wrappers of a quoted reply in the form the agent reads; other text unchanged.
fn reply_with_quote(text: &str) -> String {
    let text = text.trim().replace("\r\n", "\n").replace('\r', "\n");
    if text.is_empty() {
        return text;
    }
    let lines: Vec<&str> = text.lines().map(str::trim).skip_while(|l| l.is_empty()).collect();
    // "Replying to Bob Smith" on its own line, the reply under it.
    if lines.len() >= 2 && lines[0].to_lowercase().starts_with("replying to ") {
        let who = lines[0]["replying to ".len()..].trim_matches([' ', ':']);
        return quoted(who, lines[1..].join("\n").trim());
    }
    if lines.first().is_some_and(|l| l.starts_with("Reply wrapper")) {
        let body = text
            .split_once('\n')
            .map(|(_, b)| b.trim_start())
            .unwrap_or_default();
        // The quote, a blank line, the reply.
        if let Some((quote, reply)) = split_at_blank_line(body) {
            let (quote, reply) = (one_line(quote), one_line(reply));
            if !quote.is_empty() || !reply.is_empty() {
                return quoted(&quote, &reply);
            }
        }
        // The quote's lines, then the reply's one line.
        let body_lines: Vec<&str> = body.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if let Some((reply, quote)) = body_lines.split_last() {
            let quote = quote.join(" ");
            if !quote.trim().is_empty() && !reply.is_empty() {
                return quoted(&quote, reply);
            }
        }
    }
    // Everything on one line after the wrapper: the quote ends at the last sentence end, a short reply follows.
    let compact = one_line(&text);
    if let Some(rest) = compact.strip_prefix("Reply wrapper ") {
        let rest = rest.trim();
        for boundary in [". ", "! ", "? ", "… "] {
            if let Some(i) = rest.rfind(boundary) {
                let (quote, reply) = (&rest[..i + boundary.len() - 1], &rest[i + boundary.len()..]);
                if !quote.trim().is_empty() && !reply.trim().is_empty() && reply.trim().chars().count() <= 160
                {
                    return quoted(quote, reply);
                }
            }
        }
    }
    text
}

fn split_at_blank_line(body: &str) -> Option<(&str, &str)> {
    let mut offset = 0;
    let mut previous_blank_end = None;
    for line in body.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if line.trim().is_empty() && start > 0 {
            previous_blank_end = Some((start, offset));
            break;
        }
    }
    previous_blank_end.map(|(s, e)| (&body[..s], &body[e..]))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::user_text;

    #[test]
    fn mentions_and_entities_are_taken_out() {
        assert_eq!(user_text("<at>nanobot</at> what&#39;s up?", false), "what's up?");
        assert_eq!(
            user_text("<AT id=\"0\">Bot</AT>  hi &amp; bye&nbsp;now", false),
            "hi & bye now"
        );
        assert_eq!(user_text("<at>nanobot</at>", false), "");
        assert_eq!(user_text("a\n\n\n\nb", false), "a\n\nb");
        assert_eq!(user_text("<attachment> stays", false), "<attachment> stays");
        assert_eq!(user_text("it&rsquo;s fine", false), "it’s fine");
        assert_eq!(user_text("unclosed <at>mention", false), "unclosed <at>mention");
    }

    #[test]
    fn quoted_replies_are_given_in_one_shape() {
        assert_eq!(
            user_text("Replying to Bob Smith\nsounds good", true),
            "User is replying to: Bob Smith\nUser reply: sounds good"
        );
        assert_eq!(
            user_text(
                "Reply wrapper\nthe earlier message\nover two lines\n\nmy answer",
                true
            ),
            "User is replying to: the earlier message over two lines\nUser reply: my answer"
        );
        assert_eq!(
            user_text("Reply wrapper\nquoted text\nmy answer", false),
            "User is replying to: quoted text\nUser reply: my answer"
        );
        assert_eq!(
            user_text("Reply wrapper The plan is set. Ship it", true),
            "User is replying to: The plan is set.\nUser reply: Ship it"
        );
        assert_eq!(user_text("plain words", true), "plain words");
    }
}
