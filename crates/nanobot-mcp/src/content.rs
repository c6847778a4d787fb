//! Turning MCP results (content blocks, resource contents, prompt messages) into text + media.

use std::path::{Path, PathBuf};

use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents};
use sha2::{Digest, Sha256};

use crate::McpError;

/// Text and saved media produced from one MCP result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Text parts joined with newlines.
    pub text: String,
    /// Images written to the media directory.
    pub media: Vec<PathBuf>,
}

/// Where binary content goes and how much text is kept.
#[derive(Debug, Clone)]
pub(crate) struct RenderOptions<'a> {
    /// Server name (prefix of saved files).
    pub(crate) server: &'a str,
    /// Directory for images; `None` describes them in text instead of saving.
    pub(crate) media_dir: Option<&'a Path>,
    /// Longest text kept; the rest is cut with a note.
    pub(crate) max_chars: usize,
}

/// Renders a `tools/call` result. The caller decides what `is_error` means.
pub(crate) async fn render_tool_result(
    result: &CallToolResult,
    opts: &RenderOptions<'_>,
) -> Result<Rendered, McpError> {
    let mut out = Parts::default();
    for block in &result.content {
        out.block(block, opts).await?;
    }
    if out.text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        out.text.push(structured.to_string());
    }
    Ok(out.finish(opts.max_chars))
}

/// Renders a `resources/read` result.
pub(crate) async fn render_resource(
    result: &ReadResourceResult,
    opts: &RenderOptions<'_>,
) -> Result<Rendered, McpError> {
    let mut out = Parts::default();
    for contents in &result.contents {
        out.resource(contents, opts).await?;
    }
    Ok(out.finish(opts.max_chars))
}

/// Renders a `prompts/get` result: the messages' contents in order.
pub(crate) async fn render_prompt(
    result: &GetPromptResult,
    opts: &RenderOptions<'_>,
) -> Result<Rendered, McpError> {
    let mut out = Parts::default();
    for message in &result.messages {
        out.block(&message.content, opts).await?;
    }
    Ok(out.finish(opts.max_chars))
}

#[derive(Default)]
struct Parts {
    text: Vec<String>,
    media: Vec<PathBuf>,
}

impl Parts {
    async fn block(&mut self, block: &ContentBlock, opts: &RenderOptions<'_>) -> Result<(), McpError> {
        match block {
            ContentBlock::Text(t) => self.text.push(t.text.clone()),
            ContentBlock::Image(img) => self.binary(&img.data, &img.mime_type, "image", opts).await?,
            ContentBlock::Audio(a) => self.binary(&a.data, &a.mime_type, "audio", opts).await?,
            ContentBlock::Resource(r) => self.resource(&r.resource, opts).await?,
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[Resource link: {} ({})", link.uri, link.name);
                if let Some(d) = &link.description {
                    line.push_str(": ");
                    line.push_str(d);
                }
                line.push(']');
                self.text.push(line);
            }
            other => self.text.push(serde_json::to_string(other).unwrap_or_default()),
        }
        Ok(())
    }

    async fn resource(
        &mut self,
        contents: &ResourceContents,
        opts: &RenderOptions<'_>,
    ) -> Result<(), McpError> {
        match contents {
            ResourceContents::TextResourceContents { text, .. } => self.text.push(text.clone()),
            ResourceContents::BlobResourceContents {
                blob, mime_type, uri, ..
            } => {
                let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                if mime.starts_with("image/") {
                    self.binary(blob, mime, "image", opts).await?;
                } else {
                    let len = decoded_len(blob);
                    self.text
                        .push(format!("[Binary resource {uri}: {mime}, {len} bytes]"));
                }
            }
            other => self.text.push(serde_json::to_string(other).unwrap_or_default()),
        }
        Ok(())
    }

    /// Saves base64 `data` to the media dir (images only) or describes it.
    async fn binary(
        &mut self,
        data: &str,
        mime: &str,
        what: &str,
        opts: &RenderOptions<'_>,
    ) -> Result<(), McpError> {
        let bytes = match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
            Ok(bytes) => bytes,
            Err(_) => {
                self.text
                    .push(format!("[{what} ({mime}) with invalid base64 data]"));
                return Ok(());
            }
        };
        match (what, opts.media_dir) {
            ("image", Some(dir)) => {
                let path = save_media(dir, opts.server, &bytes, mime).await?;
                self.text.push(format!("[image saved: {}]", path.display()));
                self.media.push(path);
            }
            _ => self.text.push(format!("[{what}: {mime}, {} bytes]", bytes.len())),
        }
        Ok(())
    }

    fn finish(self, max_chars: usize) -> Rendered {
        Rendered {
            text: truncate(self.text.join("\n"), max_chars),
            media: self.media,
        }
    }
}

/// Bytes a base64 string decodes to (approximately, without decoding).
fn decoded_len(b64: &str) -> usize {
    let trimmed = b64.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

/// Cuts `text` to at most `max_chars` characters, saying how much was dropped.
pub(crate) fn truncate(text: String, max_chars: usize) -> String {
    let Some((cut, _)) = text.char_indices().nth(max_chars) else {
        return text;
    };
    let dropped = text[cut..].chars().count();
    format!("{}\n... [truncated {dropped} more characters]", &text[..cut])
}

/// File extension for a media type.
fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or(mime).trim() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "image/bmp" => "bmp",
        _ => "bin",
    }
}

/// Writes `bytes` to `dir/mcp_<server>_<hash>.<ext>` (content-addressed, so repeats are free).
async fn save_media(dir: &Path, server: &str, bytes: &[u8], mime: &str) -> Result<PathBuf, McpError> {
    let hash = hex::encode(Sha256::digest(bytes));
    let server = crate::naming::sanitize(server);
    let path = dir.join(format!("mcp_{server}_{}.{}", &hash[..16], extension(mime)));
    let io_err = |source| McpError::Media {
        path: path.clone(),
        source,
    };
    tokio::fs::create_dir_all(dir).await.map_err(io_err)?;
    if tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok(path);
    }
    // Replaced whole (nanobot_util::write_atomic): a reader never sees half a file.
    let (target, bytes) = (path.clone(), bytes.to_vec());
    tokio::task::spawn_blocking(move || nanobot_util::write_atomic(&target, &bytes))
        .await
        .map_err(|e| io_err(std::io::Error::other(e)))?
        .map_err(|e| io_err(e.into()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{PromptMessage, Role};

    fn opts(dir: Option<&Path>) -> RenderOptions<'_> {
        RenderOptions {
            server: "srv",
            media_dir: dir,
            max_chars: 1000,
        }
    }

    #[tokio::test]
    async fn text_is_joined_and_images_saved() {
        let dir = tempfile::tempdir().unwrap();
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
        let result = CallToolResult::success(vec![
            ContentBlock::text("first"),
            ContentBlock::image(png.clone(), "image/png"),
            ContentBlock::text("second"),
        ]);
        let out = render_tool_result(&result, &opts(Some(dir.path())))
            .await
            .unwrap();
        assert_eq!(out.media.len(), 1);
        assert_eq!(std::fs::read(&out.media[0]).unwrap(), b"\x89PNG fake");
        assert!(out.media[0].extension().is_some_and(|e| e == "png"));
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines[0], "first");
        assert!(lines[1].starts_with("[image saved: "));
        assert_eq!(lines[2], "second");

        let out = render_tool_result(&result, &opts(None)).await.unwrap();
        assert!(out.media.is_empty());
        assert!(out.text.contains("[image: image/png, 9 bytes]"), "{}", out.text);
    }

    #[tokio::test]
    async fn structured_content_is_used_when_there_is_no_text() {
        let mut result = CallToolResult::success(vec![]);
        result.structured_content = Some(serde_json::json!({"temperature": 21}));
        let out = render_tool_result(&result, &opts(None)).await.unwrap();
        assert_eq!(out.text, r#"{"temperature":21}"#);
    }

    #[tokio::test]
    async fn resources_and_prompts_render_text() {
        let result = ReadResourceResult::new(vec![
            ResourceContents::text("hello", "demo://a"),
            ResourceContents::BlobResourceContents {
                uri: "demo://b".into(),
                mime_type: Some("application/pdf".into()),
                blob: "AAAA".into(),
                meta: None,
            },
        ]);
        let out = render_resource(&result, &opts(None)).await.unwrap();
        assert_eq!(
            out.text,
            "hello\n[Binary resource demo://b: application/pdf, 3 bytes]"
        );

        let prompt = GetPromptResult::new(vec![
            PromptMessage::new_text(Role::User, "Weather in Paris?"),
            PromptMessage::new_text(Role::Assistant, "Sunny."),
        ]);
        let out = render_prompt(&prompt, &opts(None)).await.unwrap();
        assert_eq!(out.text, "Weather in Paris?\nSunny.");
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("abc".into(), 5), "abc");
        assert_eq!(
            truncate("äbcdef".into(), 2),
            "äb\n... [truncated 4 more characters]"
        );
    }
}
