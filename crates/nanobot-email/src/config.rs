//! `channels.email` as nanobot 0.3.5 writes it (camelCase keys; snake_case accepted too).

use nanobot_config::Secret;
use serde::Deserialize;

/// The raw `channels.email` block. The config crate keeps it as JSON; this is its typed reading.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EmailConfig {
    /// Whether the gateway runs the channel.
    pub enabled: bool,
    /// The owner's explicit permission to read and send mail for this account. Nothing happens without it.
    #[serde(alias = "consent_granted")]
    pub consent_granted: bool,
    /// IMAP server host name.
    #[serde(alias = "imap_host")]
    pub imap_host: String,
    /// IMAP port (993 for TLS, 143 for STARTTLS).
    #[serde(alias = "imap_port")]
    pub imap_port: u16,
    /// IMAP user name.
    #[serde(alias = "imap_username")]
    pub imap_username: String,
    /// IMAP password (an app password for Gmail / Fastmail).
    #[serde(alias = "imap_password")]
    pub imap_password: Secret,
    /// Mailbox to watch.
    #[serde(alias = "imap_mailbox")]
    pub imap_mailbox: String,
    /// TLS from the first byte (true) or STARTTLS (false).
    #[serde(alias = "imap_use_ssl")]
    pub imap_use_ssl: bool,
    /// SMTP server host name.
    #[serde(alias = "smtp_host")]
    pub smtp_host: String,
    /// SMTP port (587 for STARTTLS, 465 for TLS).
    #[serde(alias = "smtp_port")]
    pub smtp_port: u16,
    /// SMTP user name.
    #[serde(alias = "smtp_username")]
    pub smtp_username: String,
    /// SMTP password.
    #[serde(alias = "smtp_password")]
    pub smtp_password: Secret,
    /// STARTTLS on a plain connection.
    #[serde(alias = "smtp_use_tls")]
    pub smtp_use_tls: bool,
    /// TLS from the first byte (port 465).
    #[serde(alias = "smtp_use_ssl")]
    pub smtp_use_ssl: bool,
    /// `From` of replies (default: the SMTP user name, then the IMAP user name).
    #[serde(alias = "from_address")]
    pub from_address: String,
    /// Answer received mail automatically (proactive sends are not affected).
    #[serde(alias = "auto_reply_enabled")]
    pub auto_reply_enabled: bool,
    /// Seconds between polls when the server has no IDLE (at least 5).
    #[serde(alias = "poll_interval_seconds")]
    pub poll_interval_seconds: u64,
    /// Mark handled mail `\Seen`.
    #[serde(alias = "mark_seen")]
    pub mark_seen: bool,
    /// `"delete"` or `"move"` handled mail (not supported by this version; a warning is logged).
    #[serde(alias = "post_action")]
    pub post_action: Option<String>,
    /// Target mailbox of `postAction: "move"`.
    #[serde(alias = "post_action_move_mailbox")]
    pub post_action_move_mailbox: Option<String>,
    /// Expunge after `postAction`.
    #[serde(alias = "post_action_expunge")]
    pub post_action_expunge: bool,
    /// Do not apply `postAction` to skipped mail.
    #[serde(alias = "post_action_ignore_skipped")]
    pub post_action_ignore_skipped: bool,
    /// Longest body handed to the agent, in characters.
    #[serde(alias = "max_body_chars")]
    pub max_body_chars: usize,
    /// Prefix of reply subjects.
    #[serde(alias = "subject_prefix")]
    pub subject_prefix: String,
    /// Sender addresses served (`"*"` = everyone; empty = no one).
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Require an aligned `dkim=pass` from a trusted `Authentication-Results` header.
    #[serde(alias = "verify_dkim")]
    pub verify_dkim: bool,
    /// Require an aligned `spf=pass` from a trusted `Authentication-Results` header.
    #[serde(alias = "verify_spf")]
    pub verify_spf: bool,
    /// The authserv-ids (receiving servers) whose `Authentication-Results` are trusted.
    #[serde(alias = "trusted_authserv_ids", deserialize_with = "string_list")]
    pub trusted_authserv_ids: Vec<String>,
    /// MIME types of attachments to save (`"application/pdf"`, `"image/*"`, `"*"`); empty saves none.
    #[serde(alias = "allowed_attachment_types", deserialize_with = "string_list")]
    pub allowed_attachment_types: Vec<String>,
    /// Largest attachment saved (and sent), in bytes.
    #[serde(alias = "max_attachment_size")]
    pub max_attachment_size: u64,
    /// Most attachments saved per message (and sent per reply).
    #[serde(alias = "max_attachments_per_email")]
    pub max_attachments_per_email: usize,
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            consent_granted: false,
            imap_host: String::new(),
            imap_port: 993,
            imap_username: String::new(),
            imap_password: Secret::default(),
            imap_mailbox: "INBOX".into(),
            imap_use_ssl: true,
            smtp_host: String::new(),
            smtp_port: 587,
            smtp_username: String::new(),
            smtp_password: Secret::default(),
            smtp_use_tls: true,
            smtp_use_ssl: false,
            from_address: String::new(),
            auto_reply_enabled: true,
            poll_interval_seconds: 30,
            mark_seen: true,
            post_action: None,
            post_action_move_mailbox: None,
            post_action_expunge: false,
            post_action_ignore_skipped: true,
            max_body_chars: 12_000,
            subject_prefix: "Re: ".into(),
            allow_from: Vec::new(),
            verify_dkim: true,
            verify_spf: true,
            trusted_authserv_ids: Vec::new(),
            allowed_attachment_types: Vec::new(),
            max_attachment_size: 2_000_000,
            max_attachments_per_email: 5,
        }
    }
}

use nanobot_util::de::string_list;
