//! Files out: what a media reference is (a local path, a `file://` URL, a remote URL), how DingTalk classifies it
//! (upload type, file type, content type), reading it within DingTalk's size limits, and zipping HTML (DingTalk
//! refuses raw HTML uploads).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use nanobot_channels::ChannelError;

use crate::NAME;

/// Extensions uploaded as `image` (and sent as `sampleImageMsg`).
const IMAGE_EXTS: [&str; 6] = ["jpg", "jpeg", "png", "gif", "bmp", "webp"];
/// Extensions uploaded as `voice`.
const AUDIO_EXTS: [&str; 6] = ["amr", "mp3", "wav", "ogg", "m4a", "aac"];
/// Extensions uploaded as `video`.
const VIDEO_EXTS: [&str; 5] = ["mp4", "mov", "avi", "mkv", "webm"];
/// Extensions zipped before upload.
const ZIP_EXTS: [&str; 2] = ["htm", "html"];

/// DingTalk's upload limits (`/media/upload`): image, video and file 20 MB, voice 2 MB.
const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
const MAX_VOICE_BYTES: u64 = 2 * 1024 * 1024;
const MAX_VIDEO_BYTES: u64 = 20 * 1024 * 1024;
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Where an outbound attachment comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A local file (a path, or a `file://` URL).
    Local(PathBuf),
    /// An `http://` or `https://` URL.
    Remote(url::Url),
}

/// DingTalk's upload type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Image,
    Voice,
    Video,
    File,
}

impl Kind {
    /// The `type` query parameter of `/media/upload`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Voice => "voice",
            Self::Video => "video",
            Self::File => "file",
        }
    }

    /// The largest upload DingTalk takes of this type.
    pub(crate) fn max_bytes(self) -> u64 {
        match self {
            Self::Image => MAX_IMAGE_BYTES,
            Self::Voice => MAX_VOICE_BYTES,
            Self::Video => MAX_VIDEO_BYTES,
            Self::File => MAX_FILE_BYTES,
        }
    }

    /// The upload type of a file with this extension (lowercase, no dot).
    pub(crate) fn of_extension(ext: &str) -> Self {
        if IMAGE_EXTS.contains(&ext) {
            Self::Image
        } else if AUDIO_EXTS.contains(&ext) {
            Self::Voice
        } else if VIDEO_EXTS.contains(&ext) {
            Self::Video
        } else {
            Self::File
        }
    }

    /// The file name of an attachment whose reference names none.
    fn default_name(self) -> &'static str {
        match self {
            Self::Image => "image.jpg",
            Self::Voice => "audio.amr",
            Self::Video => "video.mp4",
            Self::File => "file.bin",
        }
    }
}

impl Source {
    /// Reads a media reference; `None` for an empty one or a URL of another scheme (or unusable).
    pub(crate) fn parse(reference: &str) -> Option<Self> {
        let reference = reference.trim();
        if reference.is_empty() {
            return None;
        }
        let lower = reference.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return url::Url::parse(reference).ok().map(Self::Remote);
        }
        if lower.starts_with("file:") {
            return url::Url::parse(reference)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .map(Self::Local);
        }
        Some(Self::Local(PathBuf::from(reference)))
    }

    /// The file name the reference names (the last segment of a URL's path, percent-decoded), if any.
    fn named(&self) -> Option<String> {
        match self {
            Self::Local(path) => path.file_name().map(|n| n.to_string_lossy().into_owned()),
            Self::Remote(url) => url
                .path_segments()
                .and_then(|mut s| s.next_back())
                .map(percent_decode),
        }
        // Control characters (a newline in a file name) would break the upload's part header and log lines.
        .map(|n| {
            n.chars()
                .map(|c| if c.is_control() { '_' } else { c })
                .collect::<String>()
        })
        .filter(|n| !n.trim().is_empty() && n != "." && n != "..")
    }

    /// The upload type, by the extension of the path (of the URL's path for a remote reference).
    pub(crate) fn kind(&self) -> Kind {
        self.named()
            .map_or(Kind::File, |name| Kind::of_extension(&extension(&name)))
    }

    /// The file name shown for this attachment (the reference's, or a default for its type).
    pub(crate) fn file_name(&self) -> String {
        self.named()
            .unwrap_or_else(|| self.kind().default_name().to_string())
    }
}

/// Decodes `%XX` escapes (invalid UTF-8 replaced; a `%` without two hex digits kept as is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The extension of a file name, lowercase and without the dot (empty when none).
pub(crate) fn extension(name: &str) -> String {
    Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Content types by extension (the common ones; anything else is `application/octet-stream`).
const MIME_TYPES: [(&str, &str); 34] = [
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("png", "image/png"),
    ("gif", "image/gif"),
    ("bmp", "image/bmp"),
    ("webp", "image/webp"),
    ("amr", "audio/amr"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/x-wav"),
    ("ogg", "audio/ogg"),
    ("m4a", "audio/mp4"),
    ("aac", "audio/aac"),
    ("mp4", "video/mp4"),
    ("mov", "video/quicktime"),
    ("avi", "video/x-msvideo"),
    ("mkv", "video/x-matroska"),
    ("webm", "video/webm"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("rar", "application/vnd.rar"),
    ("doc", "application/msword"),
    (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    ("xls", "application/vnd.ms-excel"),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
    ("ppt", "application/vnd.ms-powerpoint"),
    (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("json", "application/json"),
    ("xml", "application/xml"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("svg", "image/svg+xml"),
];

/// The content type of a file name, by its extension.
pub(crate) fn mime_of(name: &str) -> Option<&'static str> {
    let ext = extension(name);
    MIME_TYPES.iter().find(|(e, _)| *e == ext).map(|(_, m)| *m)
}

/// The extension of a content type (the first of [`MIME_TYPES`] with it).
fn extension_of_mime(mime: &str) -> Option<&'static str> {
    MIME_TYPES.iter().find(|(_, m)| *m == mime).map(|(e, _)| *e)
}

/// A file ready to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payload {
    /// The bytes uploaded.
    pub(crate) data: Vec<u8>,
    /// The file name uploaded and shown.
    pub(crate) file_name: String,
    /// The content type of the `media` part.
    pub(crate) mime: String,
    /// `fileType` of a `sampleFile` message: the extension without the dot, `jpeg` as `jpg`.
    pub(crate) file_type: String,
}

impl Payload {
    /// The payload of these bytes: HTML (by extension or content type) is zipped into `<stem>.zip`; the content
    /// type is the given one (parameters dropped), else the extension's.
    pub(crate) fn new(
        data: Vec<u8>,
        file_name: String,
        content_type: Option<&str>,
    ) -> Result<Self, ChannelError> {
        let content_type = content_type
            .and_then(|c| c.split(';').next())
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty());
        let (data, file_name, content_type) = if ZIP_EXTS.contains(&extension(&file_name).as_str())
            || content_type.as_deref() == Some("text/html")
        {
            tracing::info!(file = %file_name, "dingtalk: DingTalk refuses raw HTML; zipping it before upload");
            let (zipped, zip_name) = zip_one(&file_name, &data)?;
            (zipped, zip_name, Some("application/zip".to_string()))
        } else {
            (data, file_name, content_type)
        };
        let mime = content_type
            .or_else(|| mime_of(&file_name).map(str::to_string))
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let mut file_type = extension(&file_name);
        if file_type.is_empty() {
            file_type = extension_of_mime(&mime).unwrap_or("bin").to_string();
        }
        if file_type == "jpeg" {
            file_type = "jpg".to_string();
        }
        Ok(Self {
            data,
            file_name,
            mime,
            file_type,
        })
    }
}

/// A zip archive (deflated) holding `data` as `name`, and the archive's name, `<stem>.zip`.
pub(crate) fn zip_one(name: &str, data: &[u8]) -> Result<(Vec<u8>, String), ChannelError> {
    let stem = Path::new(name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "attachment".to_string());
    let entry = if name.is_empty() { "attachment.bin" } else { name };
    let fail = |e: &dyn std::fmt::Display| ChannelError::rejected(NAME, format!("cannot zip {name}: {e}"));
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    archive.start_file(entry, options).map_err(|e| fail(&e))?;
    archive.write_all(data).map_err(|e| fail(&e))?;
    let cursor = archive.finish().map_err(|e| fail(&e))?;
    Ok((cursor.into_inner(), format!("{stem}.zip")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn references_are_classified_like_nanobot() {
        let img = Source::parse(" /tmp/a/Photo.JPEG ").unwrap();
        assert_eq!(img, Source::Local(PathBuf::from("/tmp/a/Photo.JPEG")));
        assert_eq!(
            (img.kind(), img.file_name().as_str()),
            (Kind::Image, "Photo.JPEG")
        );
        let url = Source::parse("file:///tmp/my%20voice.mp3").unwrap();
        assert_eq!(url, Source::Local(PathBuf::from("/tmp/my voice.mp3")));
        assert_eq!(url.kind(), Kind::Voice);
        let remote = Source::parse("https://example.com/x/clip.mp4?sig=1").unwrap();
        assert_eq!(
            (remote.kind(), remote.file_name().as_str()),
            (Kind::Video, "clip.mp4")
        );
        let bare = Source::parse("https://example.com/").unwrap();
        assert_eq!((bare.kind(), bare.file_name().as_str()), (Kind::File, "file.bin"));
        assert_eq!(
            Source::parse("https://example.com/a%20b+c%zz%+1.png")
                .unwrap()
                .file_name(),
            "a b+c%zz%+1.png"
        );
        assert_eq!(Source::parse("/tmp/a\nb.txt").unwrap().file_name(), "a_b.txt");
        assert!(Source::parse("  ").is_none());
        assert!(
            Source::parse("file://remote-host/x").is_none(),
            "not a local path"
        );
        assert_eq!(Source::parse("/x/report.pdf").unwrap().kind(), Kind::File);
        assert_eq!(Kind::Voice.max_bytes(), 2 * 1024 * 1024);
    }

    #[test]
    fn payloads_name_their_type() {
        let p = Payload::new(b"x".to_vec(), "a.jpeg".into(), None).unwrap();
        assert_eq!((p.mime.as_str(), p.file_type.as_str()), ("image/jpeg", "jpg"));
        let p = Payload::new(b"x".to_vec(), "README".into(), Some("application/pdf; q=1")).unwrap();
        assert_eq!(
            (p.mime.as_str(), p.file_type.as_str()),
            ("application/pdf", "pdf")
        );
        let p = Payload::new(b"x".to_vec(), "blob".into(), None).unwrap();
        assert_eq!(
            (p.mime.as_str(), p.file_type.as_str()),
            ("application/octet-stream", "bin")
        );
        let p = Payload::new(
            b"<p>hi</p>".to_vec(),
            "page".into(),
            Some("text/html; charset=utf-8"),
        )
        .unwrap();
        assert_eq!(
            (p.file_name.as_str(), p.mime.as_str(), p.file_type.as_str()),
            ("page.zip", "application/zip", "zip")
        );
    }

    #[test]
    fn html_is_zipped_into_its_stem() {
        let (zipped, name) = zip_one("report.html", b"<h1>hello</h1>").unwrap();
        assert_eq!(name, "report.zip");
        assert!(zipped.starts_with(b"PK\x03\x04"));
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zipped)).unwrap();
        assert_eq!(archive.len(), 1);
        let mut entry = archive.by_index(0).unwrap();
        assert_eq!(entry.name().unwrap(), "report.html");
        assert_eq!(entry.compression(), zip::CompressionMethod::Deflated);
        let mut out = Vec::new();
        entry.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"<h1>hello</h1>");
    }
}
