//! Files the agent sends: which upload API and message type a file takes, and Feishu's limits.

use std::path::Path;

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
}
