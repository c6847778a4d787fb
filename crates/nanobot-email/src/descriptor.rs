//! How the e-mail channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;
use std::time::Duration;

use nanobot_channels::descriptor::{enabled_block, on_own_runtime};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{EmailChannel, EmailSettings, NAME, check_imap_login};

/// The e-mail channel's descriptor: `channels.email`, built when enabled; a CA file named by `SSL_CERT_FILE` in
/// the environment the gateway was given is trusted besides the system's. `doctor` also tries the IMAP login.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).threads(true),
    block: Block::Raw,
    // Both mail servers need a password (an app password for Gmail / Fastmail).
    credentials: Credentials::Keys(&["imapPassword", "smtpPassword"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let places = &services.places;
    let mut settings = EmailSettings::from_block(block, places.media_root, places.data_dir)?;
    // The system store honours the process's SSL_CERT_FILE; the environment passed in may name one too.
    if let Some(file) = places
        .vars
        .get("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .filter(|f| f.is_file())
    {
        settings.extra_roots.push(file);
    }
    if !settings.consent_granted {
        tracing::warn!(
            "email: channels.email is enabled but consentGranted is false: no mail is read or sent until the \
             account owner agrees and it is set to true"
        );
    }
    Ok(Arc::new(EmailChannel::new(settings)))
}

/// Consent, the settings the channel validates at start, the anti-spoofing checks, and the IMAP login.
fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let settings = match EmailSettings::from_block(block, "media", "data") {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                format!("email channel: {e}"),
                "complete `channels.email` (IMAP and SMTP host, user name and an app password)",
            )];
        }
    };
    let mut f = Vec::new();
    if settings.consent_granted {
        f.push(Finding::ok(format!(
            "email channel: {} via {} / {}",
            settings.imap.username,
            settings.imap.endpoint(),
            settings.smtp.endpoint()
        )));
    } else {
        f.push(Finding::problem(
            "email channel enabled but `channels.email.consentGranted` is false: it reads and sends nothing",
            "set `channels.email.consentGranted` to true once the mailbox owner agrees",
        ));
    }
    if settings.allow_from.is_empty() {
        f.push(Finding::warn(
            "email channel: `allowFrom` is empty, so every mail is left unanswered",
            "add the sender addresses to serve to `channels.email.allowFrom`",
        ));
    }
    if !settings.verify_dkim && !settings.verify_spf {
        f.push(Finding::warn(
            "email channel: verifyDkim and verifySpf are off, so a forged From address on allowFrom is served",
            "turn them on and set `channels.email.trustedAuthservIds` to your provider's receiving server",
        ));
    }
    if settings.consent_granted {
        let result = imap_login_bounded(&settings, Duration::from_secs(10), Duration::from_secs(20));
        f.push(imap_login_finding(&settings, result));
    }
    f
}

/// Tries the IMAP login (connect, TLS, login, select, log out) with every step bounded by `step` and the whole by
/// `overall`, on a runtime of its own.
fn imap_login_bounded(settings: &EmailSettings, step: Duration, overall: Duration) -> Result<(), String> {
    let mut settings = settings.clone();
    settings.timeout = settings.timeout.min(step);
    let _ = rustls::crypto::ring::default_provider().install_default();
    on_own_runtime(|| async {
        match tokio::time::timeout(overall, check_imap_login(&settings)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "no answer from {} within {} s",
                settings.imap.endpoint(),
                overall.as_secs()
            )),
        }
    })
    .unwrap_or_else(|| Err("the IMAP check could not run".into()))
}

/// The finding of the IMAP login check: names the account and the server, never the password.
fn imap_login_finding(settings: &EmailSettings, result: Result<(), String>) -> Finding {
    let user = &settings.imap.username;
    let server = settings.imap.endpoint();
    match result {
        Ok(()) => Finding::ok(format!(
            "email channel: IMAP login as {user} at {server} works (mailbox {})",
            settings.imap.mailbox
        )),
        Err(e) => {
            // Whatever the error says, the password is not repeated.
            let password = settings.imap.password.expose();
            let e = if password.is_empty() {
                e
            } else {
                e.replace(password, "<password>")
            };
            Finding::problem(
                format!("email channel: IMAP check of {user} at {server} failed: {e}"),
                "check `channels.email.imapHost`, `imapPort`, `imapUseSsl`, `imapUsername` and `imapPassword` \
                 (Gmail and Fastmail need an app password)",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EmailError;

    #[test]
    fn the_imap_login_finding_names_account_and_server_never_the_password() {
        let block = serde_json::json!({
            "enabled": true, "consentGranted": true,
            "imapHost": "127.0.0.1", "imapPort": 993, "imapUseSsl": true,
            "imapUsername": "bot@x.org", "imapPassword": "SECRET-IMAP-PW",
            "smtpHost": "127.0.0.1", "smtpUsername": "bot@x.org", "smtpPassword": "SECRET-SMTP-PW",
            "verifyDkim": false, "verifySpf": false,
        });
        let s = EmailSettings::from_block(&block, "m", "d").unwrap();
        let err = EmailError::Login {
            endpoint: s.imap.endpoint(),
            username: s.imap.username.clone(),
            message: "[AUTHENTICATIONFAILED] bad SECRET-IMAP-PW".into(),
        };
        let x = imap_login_finding(&s, Err(err.to_string()));
        assert_eq!(x.level, nanobot_channels::descriptor::Level::Problem);
        assert!(
            x.what.contains("bot@x.org") && x.what.contains("127.0.0.1:993"),
            "{x:?}"
        );
        assert!(x.what.contains("AUTHENTICATIONFAILED"), "{x:?}");
        assert!(!x.what.contains("SECRET"), "{x:?}");
        assert_eq!(
            imap_login_finding(&s, Ok(())).level,
            nanobot_channels::descriptor::Level::Ok
        );
    }
}
