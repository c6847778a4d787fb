//! Replies: subject, threading headers, Markdown rendered as text and HTML, attachments, SMTP delivery.

use std::path::Path;

use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use pulldown_cmark::{Event, Options, Parser};

use crate::settings::{EmailSettings, SmtpSecurity};
use crate::{EmailError, tls};

/// `prefix + subject`, unless the subject already starts with `Re:` (any case); an empty subject becomes
/// `nanobot reply`.
///
/// ```
/// assert_eq!(nanobot_email::reply_subject("Lunch?", "Re: "), "Re: Lunch?");
/// assert_eq!(nanobot_email::reply_subject("RE: Lunch?", "Re: "), "RE: Lunch?");
/// assert_eq!(nanobot_email::reply_subject("  ", ""), "Re: nanobot reply");
/// ```
pub fn reply_subject(subject: &str, prefix: &str) -> String {
    let subject = Some(subject.trim())
        .filter(|s| !s.is_empty())
        .unwrap_or("nanobot reply");
    let prefix = if prefix.is_empty() { "Re: " } else { prefix };
    if subject.to_lowercase().starts_with("re:") {
        subject.to_string()
    } else {
        format!("{prefix}{subject}")
    }
}

/// The Markdown answer as plain text.
pub fn render_text(markdown: &str) -> String {
    nanobot_channels::strip_markdown(markdown)
}

/// The Markdown answer as an HTML document. Raw HTML in the answer is shown as text, never rendered.
///
/// ```
/// let html = nanobot_email::render_html("**hi** <script>x</script>");
/// assert!(html.contains("<strong>hi</strong>"));
/// assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
/// ```
pub fn render_html(markdown: &str) -> String {
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    )
    .map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, parser);
    format!("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head><body>\n{body}</body></html>\n")
}

/// What a reply threads onto.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Thread {
    pub(crate) subject: String,
    pub(crate) message_id: Option<String>,
    pub(crate) references: Vec<String>,
}

/// Builds the reply to `to`. `attachments` are local files (checked against the size and count limits; a file
/// that cannot go is named in the text instead).
pub(crate) fn compose(
    settings: &EmailSettings,
    to: &str,
    subject: &str,
    thread: Option<&Thread>,
    content: &str,
    attachments: &[String],
) -> Result<Message, EmailError> {
    let to: Mailbox = to
        .parse()
        .map_err(|e| EmailError::Compose(format!("recipient {to:?}: {e}")))?;
    let from: Mailbox = settings.smtp.from_address.parse().map_err(|e| {
        EmailError::Config(format!(
            "channels.email.fromAddress {:?}: {e}",
            settings.smtp.from_address
        ))
    })?;
    let mut notes = Vec::new();
    let mut files = Vec::new();
    for path in attachments {
        let p = Path::new(path);
        let name = p
            .file_name()
            .map_or_else(|| "attachment".to_string(), |n| n.to_string_lossy().into_owned());
        if files.len() >= settings.max_attachments_per_email {
            notes.push(format!("[attachment: {name} - too many attachments]"));
            continue;
        }
        match std::fs::metadata(p) {
            Ok(m) if m.is_file() && m.len() <= settings.max_attachment_size => match std::fs::read(p) {
                Ok(data) => files.push((name, data)),
                Err(e) => {
                    tracing::warn!(path, error = %e, "email: attachment not readable; skipped");
                    notes.push(format!("[attachment: {name} - send failed]"));
                }
            },
            Ok(m) if m.is_file() => notes.push(format!("[attachment: {name} - too large]")),
            _ => notes.push(format!("[attachment: {name} - send failed]")),
        }
    }
    let mut markdown = content.trim_end().to_string();
    if !notes.is_empty() {
        if !markdown.is_empty() {
            markdown.push_str("\n\n");
        }
        markdown.push_str(&notes.join("\n"));
    }
    let alternative = MultiPart::alternative()
        .singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .body(render_text(&markdown)),
        )
        .singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_HTML)
                .body(render_html(&markdown)),
        );
    let mut builder = Message::builder()
        .from(from)
        .to(to)
        .subject(subject)
        .message_id(None);
    if let Some(thread) = thread
        && let Some(id) = &thread.message_id
    {
        let mut refs = thread.references.clone();
        if !refs.contains(id) {
            refs.push(id.clone());
        }
        builder = builder.in_reply_to(id.clone()).references(refs.join(" "));
    }
    let built = if files.is_empty() {
        builder.multipart(alternative)
    } else {
        let mut mixed = MultiPart::mixed().multipart(alternative);
        for (name, data) in files {
            let ct = ContentType::parse(nanobot_channels::mime_for_name(&name)).unwrap_or(
                ContentType::parse("application/octet-stream")
                    .map_err(|e| EmailError::Compose(e.to_string()))?,
            );
            mixed = mixed.singlepart(Attachment::new(name).body(data, ct));
        }
        builder.multipart(mixed)
    };
    let mut msg = built.map_err(|e| EmailError::Compose(e.to_string()))?;
    msg.headers_mut().insert_raw(HeaderValue::new(
        HeaderName::new_from_ascii_str("Auto-Submitted"),
        "auto-replied".to_string(),
    ));
    Ok(msg)
}

/// The SMTP transport for these settings.
pub(crate) fn transport(settings: &EmailSettings) -> Result<AsyncSmtpTransport<Tokio1Executor>, EmailError> {
    let s = &settings.smtp;
    let params = || -> Result<TlsParameters, EmailError> {
        let mut b = TlsParameters::builder(s.host.clone()).certificate_store(CertificateStore::None);
        for der in tls::trusted_roots(&settings.extra_roots, settings.system_roots)? {
            let cert = Certificate::from_der(der.to_vec()).map_err(|e| EmailError::Tls(e.to_string()))?;
            b = b.add_root_certificate(cert);
        }
        b.build_rustls().map_err(|e| EmailError::Tls(e.to_string()))
    };
    let tls = match s.security {
        SmtpSecurity::Implicit => Tls::Wrapper(params()?),
        SmtpSecurity::StartTls => Tls::Required(params()?),
        SmtpSecurity::None => Tls::None,
    };
    Ok(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(s.host.clone())
            .port(s.port)
            .tls(tls)
            .credentials(Credentials::new(
                s.username.clone(),
                s.password.expose().to_string(),
            ))
            .timeout(Some(settings.timeout))
            .build(),
    )
}

/// The password and the forms AUTH PLAIN and AUTH LOGIN send it in (base64), for cleaning server replies.
fn auth_forms(s: &crate::settings::SmtpSettings) -> Vec<String> {
    use base64::Engine as _;
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let (user, pass) = (s.username.as_str(), s.password.expose());
    vec![
        pass.to_owned(),
        b64(pass),
        b64(&format!("\0{user}\0{pass}")),
        b64(&format!("{user}\0{user}\0{pass}")),
    ]
}

/// Sends `msg`, bounded by the settings' timeout (lettre bounds each step; this bounds the whole).
pub(crate) async fn send(
    transport: &AsyncSmtpTransport<Tokio1Executor>,
    settings: &EmailSettings,
    msg: Message,
) -> Result<(), EmailError> {
    let endpoint = settings.smtp.endpoint();
    let limit = settings.timeout * 3;
    match tokio::time::timeout(limit, transport.send(msg)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => {
            let forms = auth_forms(&settings.smtp);
            let forms: Vec<&str> = forms.iter().map(String::as_str).collect();
            Err(EmailError::smtp(endpoint, &source, &forms))
        }
        Err(_) => Err(EmailError::Timeout {
            endpoint,
            what: "sending the message",
            limit,
        }),
    }
}

#[cfg(test)]
mod smtp_secret_tests {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    /// An SMTP server on loopback that offers AUTH and refuses it with a 535 reply quoting the AUTH line it got
    /// (and, for AUTH LOGIN, each line after it), as a broken or hostile server might.
    async fn quoting_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut lines = BufReader::new(r).lines();
                    let _ = w.write_all(b"220 quoting.test ESMTP\r\n").await;
                    let mut seen = String::new();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let upper = line.to_uppercase();
                        let reply = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                            "250-quoting.test\r\n250 AUTH PLAIN LOGIN\r\n".to_owned()
                        } else if upper == "AUTH LOGIN" {
                            "334 VXNlcm5hbWU6\r\n".to_owned()
                        } else if upper.starts_with("QUIT") {
                            "221 bye\r\n".to_owned()
                        } else {
                            seen.push_str(&line);
                            seen.push(' ');
                            format!("535 5.7.8 credentials rejected, you sent: {seen}\r\n")
                        };
                        if w.write_all(reply.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn a_server_quoting_the_auth_exchange_never_puts_the_password_in_the_error() {
        let port = quoting_server().await;
        let dir = tempfile::tempdir().unwrap();
        let mut block = serde_json::json!({
            "enabled": true, "consentGranted": true,
            "imapHost": "127.0.0.1", "imapUsername": "bot@example.org", "imapPassword": "pw",
            "smtpHost": "127.0.0.1", "smtpPort": port, "smtpUsername": "bot@example.org",
            "smtpPassword": "SEKRIT-smtp-pass", "smtpUseTls": false, "smtpUseSsl": false,
            "verifyDkim": false, "verifySpf": false,
        });
        block["fromAddress"] = "bot@example.org".into();
        let settings = EmailSettings::from_block(&block, dir.path(), dir.path()).unwrap();
        let transport = transport(&settings).unwrap();
        let msg = compose(&settings, "alice@example.org", "hi", None, "hello", &[]).unwrap();
        let err = send(&transport, &settings, msg).await.unwrap_err();
        let text = format!("{err}\n{err:?}\n{}", nanobot_util::error_chain(&err));
        assert!(text.contains("535") && text.contains("[REDACTED]"), "{text}");
        for form in auth_forms(&settings.smtp) {
            assert!(!text.contains(&form), "the error shows {form:?}: {text}");
        }
        assert!(!text.contains("SEKRIT"), "{text}");
        assert!(
            matches!(
                err,
                EmailError::Smtp {
                    auth_failure: true,
                    permanent: true,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
