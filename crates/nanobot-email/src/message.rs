//! Reading a received message: sender, threading headers, the text to hand to the agent, attachments.

use mail_parser::{MessageParser, MimeHeaders, PartType};

/// What the channel needs from one received message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedMail {
    /// The sender's address, lower-cased, when the message has exactly one `From` header with one address.
    pub from: Option<String>,
    /// `Subject` (decoded).
    pub subject: String,
    /// `Message-ID`, with angle brackets.
    pub message_id: Option<String>,
    /// `References`, with angle brackets, oldest first.
    pub references: Vec<String>,
    /// `Date` as written.
    pub date: String,
    /// The raw values of every `Authentication-Results` header.
    pub auth_results: Vec<String>,
    /// The text part (or the HTML part turned into text), quoted history and signature trimmed.
    pub body: String,
    /// Attachments: file name, MIME type, contents.
    pub attachments: Vec<Attachment>,
}

/// One attachment of a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The file name the sender gave (not sanitised).
    pub name: String,
    /// `type/subtype`, lower-cased.
    pub mime: String,
    /// The decoded contents.
    pub data: Vec<u8>,
}

/// Parses a message (or only its header block). Never fails: a message that cannot be parsed has no sender
/// and is therefore not served.
pub fn parse_mail(raw: &[u8]) -> ParsedMail {
    let Some(msg) = MessageParser::default().parse(raw) else {
        return ParsedMail::default();
    };
    let from_headers = msg
        .headers()
        .iter()
        .filter(|h| h.name().eq_ignore_ascii_case("from"))
        .count();
    let from = msg
        .from()
        .filter(|a| from_headers == 1 && a.iter().count() == 1)
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(|a| a.trim().to_lowercase())
        .filter(|a| a.contains('@') && !a.chars().any(char::is_whitespace));
    let bracket = |id: &str| format!("<{}>", id.trim().trim_matches(['<', '>']));
    let references = match msg.references() {
        mail_parser::HeaderValue::Text(t) => vec![bracket(t)],
        mail_parser::HeaderValue::TextList(list) => list.iter().map(|t| bracket(t)).collect(),
        _ => Vec::new(),
    };
    let auth_results = msg
        .headers_raw()
        .filter(|(name, _)| name.eq_ignore_ascii_case("authentication-results"))
        .map(|(_, value)| value.trim().to_string())
        .collect();
    let body = pick_body(&msg);
    let attachments = msg
        .attachments()
        .filter_map(|part| {
            let data = match &part.body {
                PartType::Binary(b) | PartType::InlineBinary(b) => b.to_vec(),
                PartType::Text(t) | PartType::Html(t) => t.as_bytes().to_vec(),
                PartType::Message(m) => m.raw_message().to_vec(),
                PartType::Multipart(_) => return None,
            };
            let mime = part.content_type().map_or_else(
                || "application/octet-stream".to_string(),
                |ct| match ct.subtype() {
                    Some(sub) => format!("{}/{}", ct.ctype(), sub),
                    None => ct.ctype().to_string(),
                },
            );
            Some(Attachment {
                name: part.attachment_name().unwrap_or("attachment").to_string(),
                mime: mime.to_lowercase(),
                data,
            })
        })
        .collect();
    ParsedMail {
        from,
        subject: msg.subject().unwrap_or_default().trim().to_string(),
        message_id: msg.message_id().map(bracket),
        references,
        date: msg.header_raw("Date").unwrap_or_default().trim().to_string(),
        auth_results,
        body,
        attachments,
    }
}

/// The text part when there is one, else the HTML part as text; then [`trim_reply`].
fn pick_body(msg: &mail_parser::Message<'_>) -> String {
    let texts: Vec<String> = msg
        .text_bodies()
        .filter_map(|p| match &p.body {
            PartType::Text(t) => Some(t.to_string()),
            _ => None,
        })
        .collect();
    let text = if texts.is_empty() {
        let htmls: Vec<String> = msg
            .html_bodies()
            .filter_map(|p| match &p.body {
                PartType::Html(h) => Some(html_to_text(h)),
                _ => None,
            })
            .collect();
        htmls.join("\n\n")
    } else {
        texts.join("\n\n")
    };
    trim_reply(&text)
}

/// HTML → readable text (Markdown-like; scripts, styles and the head are dropped).
pub fn html_to_text(html: &str) -> String {
    dom_query::Document::from(html)
        .md(Some(&["script", "style", "head", "title", "meta"]))
        .trim()
        .to_string()
}

/// Drops quoted history (`>` lines, "On … wrote:", Outlook's "-----Original Message-----" and underscore
/// rule) and the signature (after a `-- ` line). Returns the text unchanged if nothing would remain.
///
/// ```
/// let mail = "Sounds good.\n\nOn Mon, 1 Jan 2026, Bot <bot@x.org> wrote:\n> old answer\n\n-- \nAlice";
/// assert_eq!(nanobot_email::trim_reply(mail), "Sounds good.");
/// ```
pub fn trim_reply(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_end();
        let next = lines.get(i + 1).map_or("", |l| l.trim_end());
        let attribution = (t.starts_with("On ") && t.ends_with("wrote:"))
            || (t.starts_with("On ")
                && !t.ends_with('.')
                && next.ends_with("wrote:")
                && !next.starts_with('>'));
        if t == "-- "
            || t == "--"
            || t.starts_with("-----Original Message-----")
            || t.starts_with("________________________________")
            || attribution
        {
            break;
        }
        if t.starts_with('>') {
            continue;
        }
        kept.push(t);
    }
    let trimmed = kept.join("\n").trim().to_string();
    if trimmed.is_empty() {
        text.trim().to_string()
    } else {
        trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_preferred_and_history_trimmed() {
        let raw = b"From: Alice <Alice@Example.org>\r\nTo: bot@example.net\r\nSubject: =?UTF-8?Q?Caf=C3=A9?=\r\n\
Message-ID: <m2@example.org>\r\nReferences: <m0@example.net> <m1@example.org>\r\nDate: Mon, 23 Nov 2026 10:00:00 +0000\r\n\
Authentication-Results: mx.example.net; spf=pass smtp.mailfrom=example.org\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n\
--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello there\r\n\r\nOn Sun, Bot wrote:\r\n> earlier\r\n\r\n--b\r\n\
Content-Type: text/html\r\n\r\n<p>HTML version</p>\r\n--b--\r\n";
        let m = parse_mail(raw);
        assert_eq!(m.from.as_deref(), Some("alice@example.org"));
        assert_eq!(m.subject, "Café");
        assert_eq!(m.message_id.as_deref(), Some("<m2@example.org>"));
        assert_eq!(m.references, ["<m0@example.net>", "<m1@example.org>"]);
        assert_eq!(m.body, "Hello there");
        assert_eq!(m.auth_results.len(), 1);
        assert!(m.date.contains("2026"));
    }

    #[test]
    fn html_only_becomes_text_without_scripts() {
        let raw =
            b"From: a@example.org\r\nContent-Type: text/html\r\n\r\n<html><head><style>p{}</style></head>\
<body><p>Hi <b>there</b></p><script>alert(1)</script><p>Line &amp; two</p></body></html>\r\n";
        let m = parse_mail(raw);
        assert!(m.body.contains("Hi **there**"), "{}", m.body);
        assert!(m.body.contains("Line & two"), "{}", m.body);
        assert!(!m.body.contains("alert") && !m.body.contains("p{}"), "{}", m.body);
    }

    #[test]
    fn attachments_are_decoded() {
        let raw = b"From: a@example.org\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n\
Content-Type: text/plain\r\n\r\nsee file\r\n--x\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\n\
Content-Disposition: attachment; filename=\"../r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQ=\r\n--x--\r\n";
        let m = parse_mail(raw);
        assert_eq!(m.body, "see file");
        assert_eq!(m.attachments.len(), 1);
        assert_eq!(m.attachments[0].mime, "application/pdf");
        assert_eq!(m.attachments[0].name, "../r.pdf");
        assert_eq!(m.attachments[0].data, b"%PDF-1.4");
    }

    #[test]
    fn ambiguous_senders_have_no_address() {
        assert_eq!(parse_mail(b"From: a@x.org, b@x.org\r\n\r\nhi").from, None);
        assert_eq!(parse_mail(b"From: a@x.org\r\nFrom: b@x.org\r\n\r\nhi").from, None);
        assert_eq!(parse_mail(b"Subject: none\r\n\r\nhi").from, None);
        assert_eq!(parse_mail(b"").from, None);
    }

    #[test]
    fn trimming_keeps_something() {
        assert_eq!(trim_reply("> only quoted"), "> only quoted");
        assert_eq!(trim_reply("Hi\n-----Original Message-----\nFrom: x"), "Hi");
        assert_eq!(
            trim_reply("Hi\nOn Mon, 1 Jan 2026 at 10:00, Bot\n<bot@x.org> wrote:\n> q"),
            "Hi"
        );
        assert_eq!(trim_reply("Hi\n\nthanks\n--\nAlice\nCEO"), "Hi\n\nthanks");
    }
}
