//! Resolved, validated settings of the e-mail channel (from `channels.email`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nanobot_config::Secret;

use crate::{EmailConfig, EmailError};

/// IMAP side.
#[derive(Debug, Clone, PartialEq)]
pub struct ImapSettings {
    /// Host name (also the name checked in the server's certificate).
    pub host: String,
    /// Port.
    pub port: u16,
    /// User name.
    pub username: String,
    /// Password.
    pub password: Secret,
    /// Mailbox watched.
    pub mailbox: String,
    /// TLS from the first byte (`true`) or STARTTLS (`false`).
    pub implicit_tls: bool,
}

impl ImapSettings {
    /// `host:port`, for messages.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpSecurity {
    /// TLS from the first byte (`smtpUseSsl`).
    Implicit,
    /// STARTTLS, required (`smtpUseTls`).
    StartTls,
    /// No TLS: only allowed to a loopback host.
    None,
}

/// SMTP side.
#[derive(Debug, Clone, PartialEq)]
pub struct SmtpSettings {
    /// Host name.
    pub host: String,
    /// Port.
    pub port: u16,
    /// User name.
    pub username: String,
    /// Password.
    pub password: Secret,
    /// Connection security.
    pub security: SmtpSecurity,
    /// `From` of replies.
    pub from_address: String,
}

impl SmtpSettings {
    /// `host:port`, for messages.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What happens to a handled mail after it is on the bus and marked seen (`postAction`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostAction {
    /// Flag it `\Deleted` and expunge it (UID EXPUNGE where the server offers UIDPLUS).
    Delete,
    /// Move it to this mailbox (UID MOVE, else UID COPY + delete). The mailbox must exist.
    Move(String),
}

/// Everything the e-mail channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct EmailSettings {
    /// `consentGranted`: without it nothing is read or sent.
    pub consent_granted: bool,
    /// IMAP server and account.
    pub imap: ImapSettings,
    /// SMTP server and account.
    pub smtp: SmtpSettings,
    /// `autoReplyEnabled`.
    pub auto_reply: bool,
    /// `pollIntervalSeconds` (servers without IDLE; at least 5 s from the config).
    pub poll_interval: Duration,
    /// Wait for new mail with IDLE when the server offers it (otherwise poll every `poll_interval`).
    pub prefer_idle: bool,
    /// How long one IDLE waits before it is renewed (the channel's heartbeat moves each time).
    pub idle_renew: Duration,
    /// Bound of every single network step (connect, handshake, command, send).
    pub timeout: Duration,
    /// `markSeen`.
    pub mark_seen: bool,
    /// `postAction` (with `postActionMoveMailbox`); `None`: handled mail stays where it is.
    pub post_action: Option<PostAction>,
    /// `postActionExpunge`: expunge the whole mailbox when the server cannot expunge by UID.
    pub post_action_expunge: bool,
    /// `postActionIgnoreSkipped`: mail not served (strangers, unauthenticated) is left alone.
    pub post_action_ignore_skipped: bool,
    /// `maxBodyChars`.
    pub max_body_chars: usize,
    /// `subjectPrefix`.
    pub subject_prefix: String,
    /// `allowFrom`, lower-cased.
    pub allow_from: Vec<String>,
    /// `verifyDkim`.
    pub verify_dkim: bool,
    /// `verifySpf`.
    pub verify_spf: bool,
    /// `trustedAuthservIds`, lower-cased, without a trailing dot.
    pub trusted_authserv_ids: Vec<String>,
    /// `allowedAttachmentTypes` (glob patterns on `type/subtype`).
    pub allowed_attachment_types: Vec<String>,
    /// `maxAttachmentSize` in bytes.
    pub max_attachment_size: u64,
    /// `maxAttachmentsPerEmail`.
    pub max_attachments_per_email: usize,
    /// Largest message downloaded in full; bigger ones are announced by their headers only.
    pub max_message_bytes: u64,
    /// Where attachments are saved (`<media>/email`).
    pub media_dir: PathBuf,
    /// The state file (last UID and UIDVALIDITY per mailbox).
    pub state_path: PathBuf,
    /// Extra PEM files of CA certificates to trust besides the system store (a private CA, a test CA).
    pub extra_roots: Vec<PathBuf>,
    /// Trust the system store (`SSL_CERT_FILE` / `SSL_CERT_DIR` honoured).
    pub system_roots: bool,
}

impl EmailSettings {
    /// Validates a raw `channels.email` block; see [`EmailSettings::from_config`].
    pub fn from_block(
        block: &serde_json::Value,
        media_root: impl AsRef<Path>,
        data_dir: impl AsRef<Path>,
    ) -> Result<Self, EmailError> {
        let config: EmailConfig = serde_json::from_value(block.clone())
            .map_err(|e| EmailError::Config(format!("channels.email: {e}")))?;
        Self::from_config(&config, media_root, data_dir)
    }

    /// Validates `channels.email`; errors name the offending key. Attachments go to `<media_root>/email`, the
    /// state file is `<data_dir>/email/state.json`.
    pub fn from_config(
        config: &EmailConfig,
        media_root: impl AsRef<Path>,
        data_dir: impl AsRef<Path>,
    ) -> Result<Self, EmailError> {
        let mut missing = Vec::new();
        let mut need = |key: &str, value: &str| {
            if value.trim().is_empty() {
                missing.push(format!("channels.email.{key}"));
            }
        };
        need("imapHost", &config.imap_host);
        need("imapUsername", &config.imap_username);
        need("imapPassword", config.imap_password.expose());
        need("smtpHost", &config.smtp_host);
        need("smtpUsername", &config.smtp_username);
        need("smtpPassword", config.smtp_password.expose());
        if (config.verify_dkim || config.verify_spf) && config.trusted_authserv_ids.is_empty() {
            missing.push(
                "channels.email.trustedAuthservIds (needed while verifyDkim or verifySpf is on)".into(),
            );
        }
        if !missing.is_empty() {
            return Err(EmailError::Config(format!("{} not set", missing.join(", "))));
        }
        let mut trusted = Vec::new();
        for raw in &config.trusted_authserv_ids {
            let id = raw.trim().to_lowercase().trim_end_matches('.').to_string();
            if !is_authserv_id(&id) {
                return Err(EmailError::Config(format!(
                    "channels.email.trustedAuthservIds: {raw:?} is not a host name"
                )));
            }
            if !trusted.contains(&id) {
                trusted.push(id);
            }
        }
        let smtp_host = config.smtp_host.trim().to_string();
        let security = if config.smtp_use_ssl {
            SmtpSecurity::Implicit
        } else if config.smtp_use_tls {
            SmtpSecurity::StartTls
        } else if is_loopback(&smtp_host) {
            SmtpSecurity::None
        } else {
            return Err(EmailError::Config(format!(
                "channels.email.smtpUseTls and smtpUseSsl are both false: the password would cross the network \
                 in clear to {smtp_host}; turn one on (clear text is only allowed to a loopback host)"
            )));
        };
        let post_action = match config.post_action.as_deref().map(str::trim).unwrap_or_default() {
            "" => None,
            "delete" => Some(PostAction::Delete),
            "move" => {
                let target = config
                    .post_action_move_mailbox
                    .as_deref()
                    .map(str::trim)
                    .unwrap_or_default();
                if target.is_empty() {
                    return Err(EmailError::Config(
                        "channels.email.postActionMoveMailbox not set (needed while postAction is \"move\")"
                            .into(),
                    ));
                }
                if target.chars().any(char::is_control) {
                    return Err(EmailError::Config(
                        "channels.email.postActionMoveMailbox contains a control character".into(),
                    ));
                }
                Some(PostAction::Move(target.to_string()))
            }
            other => {
                return Err(EmailError::Config(format!(
                    "channels.email.postAction {other:?} must be \"delete\" or \"move\""
                )));
            }
        };
        let from_address = [&config.from_address, &config.smtp_username, &config.imap_username]
            .into_iter()
            .map(|a| a.trim())
            .find(|a| !a.is_empty())
            .unwrap_or_default()
            .to_string();
        Ok(Self {
            consent_granted: config.consent_granted,
            imap: ImapSettings {
                host: config.imap_host.trim().to_string(),
                port: config.imap_port,
                username: config.imap_username.trim().to_string(),
                password: config.imap_password.clone(),
                mailbox: Some(config.imap_mailbox.trim())
                    .filter(|m| !m.is_empty())
                    .unwrap_or("INBOX")
                    .to_string(),
                implicit_tls: config.imap_use_ssl,
            },
            smtp: SmtpSettings {
                host: smtp_host,
                port: config.smtp_port,
                username: config.smtp_username.trim().to_string(),
                password: config.smtp_password.clone(),
                security,
                from_address,
            },
            auto_reply: config.auto_reply_enabled,
            poll_interval: Duration::from_secs(config.poll_interval_seconds.max(5)),
            prefer_idle: true,
            idle_renew: Duration::from_secs(60),
            timeout: Duration::from_secs(30),
            mark_seen: config.mark_seen,
            post_action,
            post_action_expunge: config.post_action_expunge,
            post_action_ignore_skipped: config.post_action_ignore_skipped,
            max_body_chars: config.max_body_chars,
            subject_prefix: config.subject_prefix.clone(),
            allow_from: config
                .allow_from
                .iter()
                .map(|a| a.trim().to_lowercase())
                .filter(|a| !a.is_empty())
                .collect(),
            verify_dkim: config.verify_dkim,
            verify_spf: config.verify_spf,
            trusted_authserv_ids: trusted,
            allowed_attachment_types: config
                .allowed_attachment_types
                .iter()
                .map(|t| t.trim().to_lowercase())
                .filter(|t| !t.is_empty())
                .collect(),
            max_attachment_size: config.max_attachment_size,
            max_attachments_per_email: config.max_attachments_per_email,
            max_message_bytes: 25 * 1024 * 1024,
            media_dir: media_root.as_ref().join("email"),
            state_path: data_dir.as_ref().join("email").join("state.json"),
            extra_roots: Vec::new(),
            system_roots: true,
        })
    }

    /// Whether `sender` (an address) is on `allowFrom` (case-insensitive; `"*"` allows everyone).
    pub fn allows(&self, sender: &str) -> bool {
        let sender = sender.trim().to_lowercase();
        !sender.is_empty() && self.allow_from.iter().any(|a| a == "*" || *a == sender)
    }

    /// The addresses that belong to the bot (mail from them is never answered).
    pub fn own_addresses(&self) -> Vec<String> {
        [&self.smtp.from_address, &self.smtp.username, &self.imap.username]
            .into_iter()
            .map(|a| a.trim().to_lowercase())
            .filter(|a| a.contains('@'))
            .collect()
    }

    /// Whether an attachment of this MIME type may be saved (`allowedAttachmentTypes`).
    pub fn attachment_type_allowed(&self, mime: &str) -> bool {
        let mime = mime.to_lowercase();
        self.allowed_attachment_types.iter().any(|pattern| {
            pattern == "*"
                || *pattern == mime
                || pattern
                    .strip_suffix("/*")
                    .is_some_and(|major| mime.split('/').next() == Some(major))
        })
    }
}

fn is_authserv_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> serde_json::Value {
        serde_json::json!({
            "enabled": true, "consentGranted": true,
            "imapHost": "imap.example.org", "imapUsername": "bot@example.org", "imapPassword": "pw",
            "smtpHost": "smtp.example.org", "smtpUsername": "bot@example.org", "smtpPassword": "pw",
            "verifyDkim": false, "verifySpf": false,
        })
    }

    #[test]
    fn python_defaults_and_snake_case_keys() {
        let s = EmailSettings::from_block(&block(), "/m", "/d").unwrap();
        assert_eq!((s.imap.port, s.smtp.port), (993, 587));
        assert!(s.imap.implicit_tls);
        assert_eq!(s.smtp.security, SmtpSecurity::StartTls);
        assert_eq!(s.imap.mailbox, "INBOX");
        assert_eq!(s.poll_interval, Duration::from_secs(30));
        assert_eq!(s.subject_prefix, "Re: ");
        assert_eq!(s.max_body_chars, 12_000);
        assert_eq!(s.smtp.from_address, "bot@example.org");
        assert_eq!(s.media_dir, Path::new("/m/email"));
        assert_eq!(s.state_path, Path::new("/d/email/state.json"));
        let mut b = block();
        b["poll_interval_seconds"] = 1.into();
        b["imap_use_ssl"] = false.into();
        let s = EmailSettings::from_block(&b, "/m", "/d").unwrap();
        assert_eq!(
            s.poll_interval,
            Duration::from_secs(5),
            "clamped to 5 s like 0.3.5"
        );
        assert!(!s.imap.implicit_tls);
    }

    #[test]
    fn missing_keys_are_all_named() {
        let err = EmailSettings::from_block(&serde_json::json!({}), "/m", "/d")
            .unwrap_err()
            .to_string();
        for key in [
            "imapHost",
            "imapUsername",
            "imapPassword",
            "smtpHost",
            "smtpUsername",
            "smtpPassword",
            "trustedAuthservIds",
        ] {
            assert!(err.contains(&format!("channels.email.{key}")), "{err}");
        }
        let mut b = block();
        b["imapPort"] = "not a port".into();
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(err.contains("channels.email"), "{err}");
        b = block();
        b["verifySpf"] = true.into();
        b["trustedAuthservIds"] = serde_json::json!(["mx.example.org", "bad id!"]);
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(
            err.contains("trustedAuthservIds") && err.contains("bad id!"),
            "{err}"
        );
    }

    #[test]
    fn clear_text_smtp_only_to_loopback() {
        let mut b = block();
        b["smtpUseTls"] = false.into();
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(err.contains("smtpUseTls"), "{err}");
        b["smtpHost"] = "127.0.0.1".into();
        assert_eq!(
            EmailSettings::from_block(&b, "/m", "/d").unwrap().smtp.security,
            SmtpSecurity::None
        );
    }

    #[test]
    fn allow_list_is_exact_and_case_insensitive() {
        let mut b = block();
        b["allowFrom"] = serde_json::json!([" Alice@Example.org "]);
        let s = EmailSettings::from_block(&b, "/m", "/d").unwrap();
        assert!(s.allows("ALICE@example.org"));
        assert!(!s.allows("alice@example.org.evil.net"));
        assert!(!s.allows("example.org"));
        assert!(!s.allows(""));
        b["allowFrom"] = serde_json::json!([]);
        assert!(
            !EmailSettings::from_block(&b, "/m", "/d")
                .unwrap()
                .allows("alice@example.org")
        );
        b["allowFrom"] = serde_json::json!(["*"]);
        assert!(EmailSettings::from_block(&b, "/m", "/d").unwrap().allows("x@y.z"));
    }

    #[test]
    fn attachment_types_match_globs() {
        let mut b = block();
        b["allowedAttachmentTypes"] = serde_json::json!(["application/pdf", "image/*"]);
        let s = EmailSettings::from_block(&b, "/m", "/d").unwrap();
        assert!(s.attachment_type_allowed("image/png"));
        assert!(s.attachment_type_allowed("Application/PDF"));
        assert!(!s.attachment_type_allowed("application/zip"));
        assert!(!s.attachment_type_allowed("imagex/png"));
    }

    #[test]
    fn debug_hides_the_passwords() {
        let mut b = block();
        b["imapPassword"] = "SECRET-IMAP".into();
        b["smtpPassword"] = "SECRET-SMTP".into();
        let shown = format!("{:?}", EmailSettings::from_block(&b, "/m", "/d").unwrap());
        assert!(!shown.contains("SECRET-"), "{shown}");
    }

    #[test]
    fn post_action_values_and_their_mailbox() {
        let s = EmailSettings::from_block(&block(), "/m", "/d").unwrap();
        assert_eq!(s.post_action, None);
        assert!(s.post_action_ignore_skipped);
        let mut b = block();
        b["postAction"] = "delete".into();
        b["post_action_expunge"] = true.into();
        let s = EmailSettings::from_block(&b, "/m", "/d").unwrap();
        assert_eq!(s.post_action, Some(PostAction::Delete));
        assert!(s.post_action_expunge);
        b["postAction"] = "move".into();
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(err.contains("channels.email.postActionMoveMailbox"), "{err}");
        b["postActionMoveMailbox"] = " Archive/Bot ".into();
        let s = EmailSettings::from_block(&b, "/m", "/d").unwrap();
        assert_eq!(s.post_action, Some(PostAction::Move("Archive/Bot".into())));
        b["postActionMoveMailbox"] = "A\r\nB".into();
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(err.contains("control character"), "{err}");
        b["postAction"] = "archive".into();
        let err = EmailSettings::from_block(&b, "/m", "/d").unwrap_err().to_string();
        assert!(err.contains("channels.email.postAction \"archive\""), "{err}");
    }
}
