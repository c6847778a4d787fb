//! Files the agent sends: which upload API and message type a local file takes, and reading it within Feishu's
//! limits.

use std::path::Path;

use tokio::io::AsyncReadExt;

/// Largest image Feishu takes (`POST /open-apis/im/v1/images`), in bytes.
pub const MAX_IMAGE_UPLOAD_BYTES: u64 = 10 * 1024 * 1024;
/// Largest file Feishu takes (`POST /open-apis/im/v1/files`), in bytes.
pub const MAX_FILE_UPLOAD_BYTES: u64 = 30 * 1024 * 1024;

/// Extensions sent as images (0.3.5's `_IMAGE_EXTS`).
const IMAGE_EXTS: [&str; 9] = ["png", "jpg", "jpeg", "gif", "bmp", "webp", "ico", "tiff", "tif"];
/// Extensions sent as voice messages (0.3.5's `_AUDIO_EXTS`).
const AUDIO_EXTS: [&str; 1] = ["opus"];
/// Extensions sent as videos (0.3.5's `_VIDEO_EXTS`).
const VIDEO_EXTS: [&str; 3] = ["mp4", "mov", "avi"];

/// How a local file goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upload {
    /// An image: uploaded to the images API, sent as `image`.
    Image,
    /// Anything else: uploaded to the files API as `file_type`, sent as `msg_type` (`audio`, `media` or `file`).
    File {
        file_type: &'static str,
        msg_type: &'static str,
    },
}

impl Upload {
    /// By the file's extension (case-insensitive).
    pub(crate) fn of(path: &Path) -> Self {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let ext = ext.as_str();
        if IMAGE_EXTS.contains(&ext) {
            return Self::Image;
        }
        // 0.3.5's `_FILE_TYPE_MAP`; everything else is a `stream`.
        let file_type = match ext {
            "opus" => "opus",
            "mp4" => "mp4",
            "pdf" => "pdf",
            "doc" | "docx" => "doc",
            "xls" | "xlsx" => "xls",
            "ppt" | "pptx" => "ppt",
            _ => "stream",
        };
        let msg_type = if AUDIO_EXTS.contains(&ext) {
            "audio"
        } else if VIDEO_EXTS.contains(&ext) {
            "media"
        } else {
            "file"
        };
        Self::File { file_type, msg_type }
    }

    /// The largest file of this kind Feishu takes.
    pub(crate) fn limit(self) -> u64 {
        match self {
            Self::Image => MAX_IMAGE_UPLOAD_BYTES,
            Self::File { .. } => MAX_FILE_UPLOAD_BYTES,
        }
    }
}

/// Why a local file was not sent.
#[derive(Debug)]
pub(crate) enum Refused {
    NotAFile,
    Empty,
    TooLarge(u64),
    Io(std::io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAFile => f.write_str("not a regular file"),
            Self::Empty => f.write_str("empty file"),
            Self::TooLarge(limit) => write!(f, "larger than {limit} bytes"),
            Self::Io(e) => write!(f, "cannot read: {e}"),
        }
    }
}

/// The bytes of the regular file at `path`, refused when empty or larger than `limit` (checked on the open file,
/// and again while reading, so a file that grows meanwhile is refused too).
pub(crate) async fn read_limited(path: &Path, limit: u64) -> Result<bytes::Bytes, Refused> {
    // Looked at before opening: opening a FIFO for reading would wait for a writer.
    match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(Refused::NotAFile),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refused::NotAFile),
        Err(e) => return Err(Refused::Io(e)),
    }
    let file = tokio::fs::File::open(path).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Refused::NotAFile,
        _ => Refused::Io(e),
    })?;
    let meta = file.metadata().await.map_err(Refused::Io)?;
    if !meta.is_file() {
        return Err(Refused::NotAFile);
    }
    if meta.len() > limit {
        return Err(Refused::TooLarge(limit));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(Refused::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge(limit));
    }
    if bytes.is_empty() {
        return Err(Refused::Empty);
    }
    Ok(bytes.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_extension() {
        assert_eq!(Upload::of(Path::new("/x/a.PNG")), Upload::Image);
        assert_eq!(Upload::of(Path::new("a.tif")), Upload::Image);
        let file = |file_type, msg_type| Upload::File { file_type, msg_type };
        assert_eq!(Upload::of(Path::new("v.opus")), file("opus", "audio"));
        assert_eq!(Upload::of(Path::new("v.mp4")), file("mp4", "media"));
        assert_eq!(Upload::of(Path::new("v.mov")), file("stream", "media"));
        assert_eq!(Upload::of(Path::new("r.docx")), file("doc", "file"));
        assert_eq!(Upload::of(Path::new("r.pdf")), file("pdf", "file"));
        assert_eq!(Upload::of(Path::new("Makefile")), file("stream", "file"));
        assert_eq!(Upload::Image.limit(), MAX_IMAGE_UPLOAD_BYTES);
    }

    #[tokio::test]
    async fn reading_refuses_what_feishu_would() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("a.txt");
        std::fs::write(&ok, b"hello").unwrap();
        assert_eq!(&read_limited(&ok, 5).await.unwrap()[..], b"hello");
        assert!(matches!(read_limited(&ok, 4).await, Err(Refused::TooLarge(4))));
        let empty = dir.path().join("e.txt");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(read_limited(&empty, 4).await, Err(Refused::Empty)));
        assert!(matches!(
            read_limited(dir.path(), 4).await,
            Err(Refused::NotAFile)
        ));
        assert!(matches!(
            read_limited(&dir.path().join("missing"), 4).await,
            Err(Refused::NotAFile)
        ));
    }
}
