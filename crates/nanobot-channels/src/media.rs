//! Helpers for media: file names for what channels download next to the workspace, and reading the local files an
//! agent sends ([`read_attachment`]).

use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt;

/// Why a local file was not read for sending.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentError {
    /// Missing, a directory, a FIFO, a device…
    #[error("{}: not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// An empty file (the platforms refuse them).
    #[error("{}: empty file", .0.display())]
    Empty(PathBuf),
    /// Larger than the platform takes.
    #[error("{}: larger than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// Reading failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Reads the regular file at `path` to send it, refusing anything else, an empty file and more than `limit` bytes.
/// The path is looked at before it is opened (opening a FIFO for reading would wait for a writer), the open file is
/// checked again (the path may have changed in between), and the read stops one byte past the limit (a file that
/// grows meanwhile is refused too).
pub async fn read_attachment(path: &Path, limit: u64) -> Result<Vec<u8>, AttachmentError> {
    let not_a_file = || AttachmentError::NotAFile(path.to_owned());
    let io = |source| AttachmentError::Io {
        path: path.to_owned(),
        source,
    };
    let too_large = || AttachmentError::TooLarge {
        path: path.to_owned(),
        limit,
    };
    match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(not_a_file()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_a_file()),
        Err(e) => return Err(io(e)),
    }
    let file = tokio::fs::File::open(path).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => not_a_file(),
        _ => io(e),
    })?;
    let meta = file.metadata().await.map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file());
    }
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .await
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    if bytes.is_empty() {
        return Err(AttachmentError::Empty(path.to_owned()));
    }
    Ok(bytes)
}

/// A file name that cannot leave the media directory: every character other than an alphanumeric, `.`, `-` or
/// `_` becomes `_` (so path separators and control characters are gone), leading dots are dropped, at most 100
/// characters are kept, and an empty result becomes `file`.
///
/// ```
/// use nanobot_channels::safe_file_name;
///
/// assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
/// assert_eq!(safe_file_name(""), "file");
/// ```
pub fn safe_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        "file".to_string()
    } else {
        cleaned.to_string()
    }
}

/// The types [`mime_for_name`] and [`extension_for_mime`] know: `(extension, MIME type)`; the first extension of
/// a type is the one it gets.
const TYPES: &[(&str, &str)] = &[
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("png", "image/png"),
    ("webp", "image/webp"),
    ("gif", "image/gif"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("m4a", "audio/mp4"),
    ("aac", "audio/aac"),
    ("amr", "audio/amr"),
    ("ogg", "audio/ogg"),
    ("oga", "audio/ogg"),
    ("opus", "audio/ogg"),
    ("wav", "audio/wav"),
    ("pdf", "application/pdf"),
    ("txt", "text/plain"),
    ("md", "text/plain"),
    ("log", "text/plain"),
    ("csv", "text/csv"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("json", "application/json"),
    ("zip", "application/zip"),
    (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
    (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
];

/// The MIME type of a file by its name's extension (`application/octet-stream` when unknown).
///
/// ```
/// use nanobot_channels::{extension_for_mime, mime_for_name};
///
/// assert_eq!(mime_for_name("Photo.JPG"), "image/jpeg");
/// assert_eq!(mime_for_name("notes"), "application/octet-stream");
/// assert_eq!(extension_for_mime("image/jpeg; q=1"), Some("jpg"));
/// assert_eq!(extension_for_mime("application/x-unknown"), None);
/// ```
pub fn mime_for_name(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    TYPES
        .iter()
        .find(|(e, _)| *e == ext)
        .map_or("application/octet-stream", |(_, m)| m)
}

/// The usual extension (without the dot) of a MIME type, when known.
pub fn extension_for_mime(mime: &str) -> Option<&'static str> {
    let mime = mime.split(';').next().unwrap_or_default().trim();
    TYPES
        .iter()
        .find(|(_, m)| m.eq_ignore_ascii_case(mime))
        .map(|(e, _)| *e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn attachments_are_regular_non_empty_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("a.txt");
        std::fs::write(&ok, b"hello").unwrap();
        assert_eq!(read_attachment(&ok, 5).await.unwrap(), b"hello");
        assert!(matches!(
            read_attachment(&ok, 4).await,
            Err(AttachmentError::TooLarge { limit: 4, .. })
        ));
        let empty = dir.path().join("e.txt");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(
            read_attachment(&empty, 4).await,
            Err(AttachmentError::Empty(_))
        ));
        for not_a_file in [dir.path().to_owned(), dir.path().join("missing")] {
            let err = read_attachment(&not_a_file, 4).await.unwrap_err();
            assert!(matches!(err, AttachmentError::NotAFile(_)), "{err}");
        }
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        assert!(
            matches!(read_attachment(&fifo, 4).await, Err(AttachmentError::NotAFile(_))),
            "a FIFO is refused without waiting for a writer"
        );
    }

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_file_name("report 2026.pdf"), "report_2026.pdf");
        assert_eq!(safe_file_name("a\nb\0c"), "a_b_c");
        assert_eq!(safe_file_name("..."), "file");
        assert_eq!(safe_file_name(".hidden"), "hidden");
        assert_eq!(safe_file_name(""), "file");
        assert_eq!(safe_file_name(&"a".repeat(300)).len(), 100);
    }
}
