//! Attachments of a Telegram message: what to download and how to name it.

use teloxide::types::{FileId, Message};

/// What kind of attachment a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaKind {
    Image,
    Voice,
    Audio,
    Document,
}

impl MediaKind {
    /// The label used in the message text the agent sees (`[image: /path]`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Voice => "voice",
            Self::Audio => "audio",
            Self::Document => "file",
        }
    }

    pub(crate) fn transcribable(self) -> bool {
        matches!(self, Self::Voice | Self::Audio)
    }
}

/// One attachment to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attachment {
    pub(crate) kind: MediaKind,
    pub(crate) file_id: FileId,
    /// Local file name: a prefix of the file id plus an extension.
    pub(crate) file_name: String,
}

/// The attachment of `msg`, if it has one we handle (the largest photo size for photos).
pub(crate) fn attachment(msg: &Message) -> Option<Attachment> {
    if let Some(photo) = msg.photo().and_then(|sizes| {
        sizes
            .iter()
            .max_by_key(|p| u64::from(p.width) * u64::from(p.height))
    }) {
        return Some(make(MediaKind::Image, &photo.file.id, None, ".jpg"));
    }
    if let Some(voice) = msg.voice() {
        return Some(make(MediaKind::Voice, &voice.file.id, None, ".ogg"));
    }
    if let Some(audio) = msg.audio() {
        return Some(make(
            MediaKind::Audio,
            &audio.file.id,
            audio.file_name.as_deref(),
            ".mp3",
        ));
    }
    if let Some(doc) = msg.document() {
        return Some(make(
            MediaKind::Document,
            &doc.file.id,
            doc.file_name.as_deref(),
            "",
        ));
    }
    None
}

fn make(kind: MediaKind, id: &FileId, original_name: Option<&str>, default_ext: &str) -> Attachment {
    let ext = original_name
        .and_then(|n| n.rsplit_once('.').map(|(_, e)| e))
        .filter(|e| !e.is_empty() && e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map_or_else(
            || default_ext.to_string(),
            |e| format!(".{}", e.to_ascii_lowercase()),
        );
    Attachment {
        kind,
        file_id: id.clone(),
        file_name: format!("{}{ext}", safe_stem(&id.0)),
    }
}

/// The first 16 characters of a file id, keeping only characters safe in a file name.
fn safe_stem(id: &str) -> String {
    let stem: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(16)
        .collect();
    if stem.is_empty() { "file".to_string() } else { stem }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_keep_known_extensions() {
        let a = make(
            MediaKind::Document,
            &FileId("../../etc/passwd-XYZ".into()),
            Some("report.PDF"),
            "",
        );
        assert_eq!(a.file_name, "etcpasswd-XYZ.pdf");
        let b = make(
            MediaKind::Document,
            &FileId("AgACAgIAAxkBAAIBcWZ".into()),
            Some("weird.name.<sh>"),
            "",
        );
        assert_eq!(b.file_name, "AgACAgIAAxkBAAIB");
        let c = make(MediaKind::Voice, &FileId("".into()), None, ".ogg");
        assert_eq!(c.file_name, "file.ogg");
    }
}
