//! Validation shared by the channels' settings.

use crate::ChannelError;

/// Reads an optional `channels.<channel>.baseUrl`: blank means "not set" (`Ok(None)`); otherwise it must start
/// with `http://` or `https://` and is returned trimmed, without trailing slashes. The error is a
/// [`ChannelError::Config`] naming the key.
///
/// ```
/// use nanobot_channels::http_base_url;
///
/// assert_eq!(http_base_url("slack", Some(" http://127.0.0.1:4000/api/ ")).unwrap().as_deref(), Some("http://127.0.0.1:4000/api"));
/// assert_eq!(http_base_url("slack", Some("  ")).unwrap(), None);
/// assert!(http_base_url("slack", Some("slack.local")).unwrap_err().to_string().contains("channels.slack.baseUrl"));
/// ```
pub fn http_base_url(channel: &str, base: Option<&str>) -> Result<Option<String>, ChannelError> {
    let Some(base) = base.map(str::trim).filter(|b| !b.is_empty()) else {
        return Ok(None);
    };
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(ChannelError::Config {
            channel: channel.to_string(),
            message: format!("channels.{channel}.baseUrl {base:?} must start with http:// or https://"),
        });
    }
    Ok(Some(base.trim_end_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_trimmed_and_must_be_http() {
        assert_eq!(
            http_base_url("discord", Some("https://d.local/"))
                .unwrap()
                .as_deref(),
            Some("https://d.local")
        );
        assert_eq!(http_base_url("discord", None).unwrap(), None);
        assert_eq!(http_base_url("discord", Some("")).unwrap(), None);
        let err = http_base_url("discord", Some("ftp://d.local")).unwrap_err();
        assert!(matches!(&err, ChannelError::Config { channel, .. } if channel == "discord"));
        assert!(
            err.to_string()
                .contains("channels.discord.baseUrl \"ftp://d.local\""),
            "{err}"
        );
    }
}
