//! The e-mail channel for nanobot: IMAP in, SMTP out, usable as a library on its own.
//!
//! [`EmailChannel`] implements [`nanobot_channels::Channel`]. Its receive loop logs in to the IMAP server over TLS
//! (`imapUseSsl: true`, port 993) or STARTTLS (`imapUseSsl: false`; a server without STARTTLS is refused, a
//! password never crosses the network in clear), selects `imapMailbox` and looks for unseen mail newer than the
//! last UID it handled. New mail is then awaited with IMAP IDLE when the server offers it, otherwise by polling
//! every `pollIntervalSeconds`. For each message:
//!
//! - the headers are fetched first (`BODY.PEEK`, nothing is marked read); mail from the bot's own addresses, mail
//!   failing `verifyDkim` / `verifySpf` (read from exactly one `Authentication-Results` header of a
//!   `trustedAuthservIds` server, aligned with the `From` domain) and mail from senders not on `allowFrom` (exact
//!   address, case-insensitive; `"*"` for everyone; empty denies everyone) is left as it was, unseen;
//! - an accepted message is downloaded, its text part preferred (HTML is turned into text), quoted history and
//!   signatures trimmed, cut at `maxBodyChars`; attachments of `allowedAttachmentTypes` within
//!   `maxAttachmentSize` / `maxAttachmentsPerEmail` are saved under `<media>/email/` and handed to the agent as
//!   media;
//! - once the message is on the bus it is marked `\Seen` (`markSeen`) and its UID is written, with the mailbox's
//!   UIDVALIDITY, to a small state file in the data directory, so a message is handled once also across
//!   restarts and reconnects.
//!
//! One session per sender (the chat id is the sender's address), as nanobot 0.3.5 keys it. Replies go out by
//! SMTP (implicit TLS with `smtpUseSsl`, else STARTTLS with `smtpUseTls`; clear text only to a loopback host)
//! with a `Re:` subject (`subjectPrefix`), `In-Reply-To` and `References`, and the Markdown answer rendered
//! as a `text/plain` and a `text/html` part (`multipart/alternative`).
//!
//! Nothing is read or sent unless `consentGranted` is true. A rejected password ends the receive loop with
//! [`ChannelError::Auth`](nanobot_channels::ChannelError::Auth), which the channel manager reports and does not
//! restart; network failures end it with a transient error and the manager reconnects with backoff. Every
//! network wait is bounded ([`EmailSettings::timeout`]).
//!
//! TLS uses rustls with the system's trust store (honouring `SSL_CERT_FILE` / `SSL_CERT_DIR`, loaded once) plus
//! any CA files in [`EmailSettings::extra_roots`]. Nothing here reads `~/.nanobot`: the media and data
//! directories are passed in.
//!
//! ```
//! use nanobot_email::EmailSettings;
//!
//! let block = serde_json::json!({
//!     "enabled": true, "consentGranted": true,
//!     "imapHost": "imap.example.org", "imapUsername": "bot@example.org", "imapPassword": "app-password",
//!     "smtpHost": "smtp.example.org", "smtpUsername": "bot@example.org", "smtpPassword": "app-password",
//!     "allowFrom": ["Alice@Example.org"], "trustedAuthservIds": ["mx.example.org"],
//! });
//! let settings = EmailSettings::from_block(&block, "/tmp/media", "/tmp/data").unwrap();
//! assert_eq!(settings.imap.port, 993);
//! assert!(settings.allows("alice@example.org"));
//! assert!(!settings.allows("mallory@example.org"));
//!
//! let err = EmailSettings::from_block(&serde_json::json!({"enabled": true}), "/tmp/m", "/tmp/d").unwrap_err();
//! assert!(err.to_string().contains("channels.email.imapHost"));
//! ```

mod authres;
mod channel;
mod config;
mod descriptor;
mod error;
mod imap;
mod message;
mod outbound;
mod settings;
mod state;
mod tls;

pub use authres::{AuthVerdict, check_authentication_results};
pub use channel::{EmailChannel, META_MESSAGE_ID, META_REFERENCES, META_SUBJECT};
pub use config::EmailConfig;
pub use descriptor::DESCRIPTOR;
pub use error::EmailError;
pub use message::{Attachment, ParsedMail, html_to_text, parse_mail, trim_reply};
pub use outbound::{render_html, render_text, reply_subject};
pub use settings::{EmailSettings, ImapSettings, PostAction, SmtpSecurity, SmtpSettings};
pub use state::{MailboxState, StateFile};

/// The channel's name on the bus.
pub const NAME: &str = "email";

/// Checks an IMAP login with these settings (connect, TLS, login, select the mailbox, log out): what
/// `nanobot doctor` runs. A rejected password is [`EmailError::Login`].
pub async fn check_imap_login(settings: &EmailSettings) -> Result<(), EmailError> {
    let tls = tls::client_config(&settings.extra_roots, settings.system_roots)?;
    let mut session = imap::connect(settings, tls).await?;
    let result = imap::select(&mut session, settings).await.map(|_| ());
    imap::logout(session, settings.timeout).await;
    result
}
