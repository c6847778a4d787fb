//! Attachments sent as base64 data URLs (`{"data_url": "data:image/png;base64,…", "name": "…"}`), checked and
//! written under the media directory.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

use crate::WebSocketError;

/// Most attachments per message.
pub const MAX_ATTACHMENTS: usize = 4;
/// Largest image or document, decoded.
pub const MAX_FILE_BYTES: usize = 6 * 1024 * 1024;

const IMAGES: &[(&str, &str)] = &[
    ("image/png", "png"),
    ("image/jpeg", "jpg"),
    ("image/webp", "webp"),
    ("image/gif", "gif"),
];
const DOCUMENTS: &[(&str, &str)] = &[
    ("application/json", "json"),
    ("application/pdf", "pdf"),
    ("text/csv", "csv"),
    ("text/markdown", "md"),
    ("text/plain", "txt"),
    ("application/yaml", "yaml"),
    ("text/yaml", "yaml"),
    ("application/xml", "xml"),
    ("text/xml", "xml"),
];

fn extension(mime: &str) -> Option<&'static str> {
    IMAGES
        .iter()
        .chain(DOCUMENTS)
        .find(|(m, _)| *m == mime)
        .map(|(_, e)| *e)
}

/// Checks and stores one message's attachments under `dir`, all or nothing. The error carries 0.3.5's reason
/// word (`malformed`, `too_many_attachments`, `mime`, `size`, `decode`).
pub(crate) async fn store(items: &[Value], dir: &Path) -> Result<Vec<String>, WebSocketError> {
    if items.len() > MAX_ATTACHMENTS {
        return Err(WebSocketError::Attachment("too_many_attachments"));
    }
    let mut decoded = Vec::new();
    for item in items {
        let url = item
            .get("data_url")
            .and_then(Value::as_str)
            .ok_or(WebSocketError::Attachment("malformed"))?;
        let rest = url
            .strip_prefix("data:")
            .ok_or(WebSocketError::Attachment("decode"))?;
        let (head, data) = rest.split_once(',').ok_or(WebSocketError::Attachment("decode"))?;
        let mut parts = head.split(';');
        let mime = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        if !head.ends_with(";base64") {
            return Err(WebSocketError::Attachment("decode"));
        }
        let ext = extension(&mime).ok_or(WebSocketError::Attachment("mime"))?;
        // Base64 is 4/3 of the bytes: refuse oversize input before decoding it.
        if data.len() / 4 * 3 > MAX_FILE_BYTES + 3 {
            return Err(WebSocketError::Attachment("size"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| WebSocketError::Attachment("decode"))?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(WebSocketError::Attachment("size"));
        }
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .map(nanobot_channels::safe_file_name)
            .unwrap_or_else(|| "upload".into());
        let stem = name
            .rsplit_once('.')
            .map_or(name.as_str(), |(s, _)| s)
            .to_string();
        decoded.push((format!("{}-{stem}.{ext}", uuid::Uuid::new_v4().simple()), bytes));
    }
    if decoded.is_empty() {
        return Ok(Vec::new());
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|source| WebSocketError::Io {
            path: dir.display().to_string(),
            source,
        })?;
    let mut written: Vec<PathBuf> = Vec::new();
    for (name, bytes) in decoded {
        let path = dir.join(name);
        if let Err(source) = tokio::fs::write(&path, &bytes).await {
            for p in &written {
                let _ = tokio::fs::remove_file(p).await;
            }
            return Err(WebSocketError::Io {
                path: path.display().to_string(),
                source,
            });
        }
        written.push(path);
    }
    Ok(written.into_iter().map(|p| p.display().to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(e: WebSocketError) -> &'static str {
        match e {
            WebSocketError::Attachment(r) => r,
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn attachments_are_checked_and_stored() {
        let dir = tempfile::tempdir().unwrap();
        let png = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(b"\x89PNG....")
        );
        let paths = store(&[json!({"data_url": png, "name": "../../x.png"})], dir.path())
            .await
            .unwrap();
        assert_eq!(paths.len(), 1);
        let p = Path::new(&paths[0]);
        assert_eq!(p.parent().unwrap(), dir.path(), "stays in the media directory");
        assert!(p.extension().unwrap() == "png");
        assert_eq!(std::fs::read(p).unwrap(), b"\x89PNG....");

        let e = store(
            &[json!({"data_url": "data:application/x-sh;base64,AAAA"})],
            dir.path(),
        )
        .await;
        assert_eq!(reason(e.unwrap_err()), "mime");
        let e = store(&[json!({"data_url": "data:image/png;base64,@@@"})], dir.path()).await;
        assert_eq!(reason(e.unwrap_err()), "decode");
        let e = store(&[json!({"name": "x"})], dir.path()).await;
        assert_eq!(reason(e.unwrap_err()), "malformed");
        let big = format!(
            "data:image/png;base64,{}",
            "A".repeat(MAX_FILE_BYTES / 3 * 4 + 64)
        );
        let e = store(&[json!({"data_url": big})], dir.path()).await;
        assert_eq!(reason(e.unwrap_err()), "size");
        let five = vec![json!({"data_url": "data:image/png;base64,AAAA"}); 5];
        assert_eq!(
            reason(store(&five, dir.path()).await.unwrap_err()),
            "too_many_attachments"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "refused batches leave nothing behind"
        );
    }
}
