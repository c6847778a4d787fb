//! `message`: the agent writes to a chat (its own, or one the chat rights allow), with attachments staged from
//! the workspace.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use nanobot_bus::OutboundMessage;
use nanobot_tools::sandbox::{Opened, Sandbox};
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use super::turn_info::turn_info;
use crate::rights::ChatRights;
/// Arguments of `message` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct MessageArgs {
    /// The message text to send.
    pub content: String,
    /// Target channel (telegram, discord, slack, …); defaults to the current one.
    pub channel: Option<String>,
    /// Target chat id; defaults to the current chat.
    pub chat_id: Option<String>,
    /// Local file paths to attach (images, documents).
    pub media: Option<Vec<String>>,
    /// Inline buttons as rows of labels (`[["Yes", "No"]]`); pressing one sends its label back. Channels that
    /// cannot show buttons add them to the text.
    pub buttons: Option<Vec<Vec<String>>>,
}

/// Most buttons one message may carry (rows × labels), and the longest label.
const MAX_BUTTONS: usize = 50;
const MAX_BUTTON_CHARS: usize = 64;

/// Largest attachment the `message` tool sends.
pub(crate) const ATTACHMENT_MAX_BYTES: u64 = 50 * 1024 * 1024;

/// How long a staged attachment copy is kept in the outbox: long enough for a channel's retries to send it,
/// then it is swept (on the next staging and at start-up).
pub(crate) const OUTBOX_KEEP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// At most this many outbox entries are looked at per sweep (the rest wait for the next one).
const OUTBOX_SWEEP_LIMIT: usize = 10_000;

/// Removes the regular files in `outbox` last modified more than `older_than` ago; returns how many. Missing
/// outbox: nothing to do. Errors on single files are logged and skipped.
pub(crate) fn sweep_outbox(outbox: &Path, older_than: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(outbox) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten().take(OUTBOX_SWEEP_LIMIT) {
        // Not followed: only nanobot writes here, and a link is removed as the link.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > older_than);
        if old && !meta.is_dir() {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::debug!(path = %entry.path().display(), error = %e, "outbox: cannot remove")
                }
            }
        }
    }
    removed
}

/// `message`: sends a message to a chat (the current one by default).
///
/// Attachments are opened through a [`Sandbox`] (by handle, like the file tools: `restrictToWorkspace` applies and
/// nanobot's data directory is out of reach) and copied into a private outbox; the channel sends the copy. So
/// what was checked is what is sent: nothing the model's other tools can touch can swap it afterwards.
///
/// Targets other than the turn's own chat must be permitted by [`ChatRights`] (the target channel's
/// `allowFrom`); without rights given, only the own chat (and, from the CLI, any chat) can be reached.
#[derive(Debug, Default, Clone)]
pub(crate) struct MessageTool {
    confine: Option<(Arc<Sandbox>, PathBuf)>,
    rights: Arc<ChatRights>,
}

impl MessageTool {
    /// Attachments are opened through `sandbox` and copied into `outbox` (a directory only nanobot writes, such as
    /// `<data dir>/media/outbox`). Without this, attachments are refused.
    pub(crate) fn confined(sandbox: Sandbox, outbox: impl Into<PathBuf>) -> Self {
        Self {
            confine: Some((Arc::new(sandbox), outbox.into())),
            rights: Arc::default(),
        }
    }

    /// Checks targets against `rights`.
    #[must_use]
    pub(crate) fn with_rights(mut self, rights: ChatRights) -> Self {
        self.rights = Arc::new(rights);
        self
    }
}

/// Opens `raw` through `sandbox` and copies it into `outbox`; returns the copy's path.
fn stage_attachment(sandbox: &Sandbox, outbox: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    let mut file = match sandbox.open_read(raw) {
        Ok(Opened::File(f)) if f.meta.is_file() => f,
        Ok(_) => {
            return Err(ToolError::Failed(format!(
                "attachment {raw} is not a regular file"
            )));
        }
        Err(e) if e.is_not_found() => return Err(ToolError::Failed(format!("attachment not found: {raw}"))),
        Err(e) => return Err(ToolError::Sandbox(e)),
    };
    if file.meta.len() > ATTACHMENT_MAX_BYTES {
        return Err(ToolError::Failed(format!(
            "attachment {raw} is too large ({} bytes, max {ATTACHMENT_MAX_BYTES})",
            file.meta.len()
        )));
    }
    std::fs::create_dir_all(outbox).map_err(|e| ToolError::io("creating", outbox, e))?;
    sweep_outbox(outbox, OUTBOX_KEEP);
    let name = file
        .logical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "attachment".to_owned());
    let dst = outbox.join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&dst)
        .map_err(|e| ToolError::io("writing", &dst, e))?;
    let copied = std::io::copy(&mut (&mut file.file).take(ATTACHMENT_MAX_BYTES), &mut out)
        .and_then(|_| out.sync_all());
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&dst);
        return Err(ToolError::io("writing", &dst, e));
    }
    Ok(dst)
}

#[async_trait]
impl TypedTool for MessageTool {
    type Args = MessageArgs;

    fn name(&self) -> &str {
        "message"
    }

    fn effects(&self, _args: &serde_json::Value) -> nanobot_tools::Effects {
        nanobot_tools::Effects::none().with_send()
    }

    fn description(&self) -> &str {
        "Send a message to the user on a chat channel. Use this only to reach a specific chat or to send files; \
         for a normal answer, just reply with text."
    }

    async fn call(&self, args: MessageArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let info =
            turn_info(ctx).ok_or_else(|| ToolError::Failed("messaging is not available here".into()))?;
        // Everything the heartbeat says passes its notification gate (as in 0.3.5): no message of its own.
        if ctx.session_key == crate::heartbeat::HEARTBEAT_SESSION {
            return Err(ToolError::Failed(
                "the heartbeat does not send messages itself: answer with the text, and it is delivered if it is \
                 worth telling"
                    .into(),
            ));
        }
        let bus = info
            .bus
            .clone()
            .ok_or_else(|| ToolError::Failed("messaging is not available here (no bus)".into()))?;
        let channel = args
            .channel
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| ctx.channel.clone());
        let chat_id = args
            .chat_id
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| ctx.chat_id.clone());
        if channel.is_empty() || chat_id.is_empty() {
            return Err(ToolError::InvalidArguments(
                "no target: give channel and chat_id".into(),
            ));
        }
        self.rights
            .may_send(&ctx.channel, &ctx.chat_id, &channel, &chat_id)
            .map_err(ToolError::Failed)?;
        let mut media = Vec::new();
        for m in args.media.unwrap_or_default() {
            if m.starts_with("http://") || m.starts_with("https://") {
                media.push(m);
                continue;
            }
            let Some((sandbox, outbox)) = self.confine.clone() else {
                return Err(ToolError::Failed("attachments are not available here".into()));
            };
            let staged = tokio::task::spawn_blocking(move || stage_attachment(&sandbox, &outbox, &m))
                .await
                .map_err(|e| ToolError::Failed(format!("attachment task failed: {e}")))??;
            media.push(staged.display().to_string());
        }
        let buttons = args.buttons.unwrap_or_default();
        if buttons.iter().map(Vec::len).sum::<usize>() > MAX_BUTTONS
            || buttons
                .iter()
                .flatten()
                .any(|l| l.trim().is_empty() || l.starts_with('/') || l.chars().count() > MAX_BUTTON_CHARS)
        {
            return Err(ToolError::InvalidArguments(format!(
                "buttons must be rows of labels, each non-empty, not a /command, at most {MAX_BUTTON_CHARS} \
                 characters, {MAX_BUTTONS} in all"
            )));
        }
        let same_chat = channel == ctx.channel && chat_id == ctx.chat_id;
        let mut out = OutboundMessage::reply(&channel, &chat_id, &args.content);
        out.media = media;
        if same_chat {
            out.metadata = info.metadata.clone();
        }
        let rows: Vec<Vec<String>> = buttons.into_iter().filter(|r| !r.is_empty()).collect();
        if !rows.is_empty() {
            out.metadata
                .insert(nanobot_bus::META_BUTTONS.into(), serde_json::json!(rows));
        }
        bus.publish_outbound(out)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        if same_chat {
            info.message_sent.store(true, Ordering::SeqCst);
        }
        Ok(ToolOutput::text(format!("Message sent to {channel}:{chat_id}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_outbox_copies_are_swept_when_an_attachment_is_staged() {
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("workspace");
        let outbox = home.path().join("outbox");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outbox).unwrap();
        std::fs::write(ws.join("new.txt"), "new").unwrap();
        let old = outbox.join("old-report.pdf");
        let recent = outbox.join("recent-report.pdf");
        for p in [&old, &recent] {
            std::fs::write(p, "x").unwrap();
        }
        let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 24 * 3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
        let sandbox = Sandbox::new(&ws, true);
        let staged = stage_attachment(&sandbox, &outbox, "new.txt").unwrap();
        assert!(!old.exists(), "a copy older than a day is swept");
        assert!(recent.exists(), "a recent copy may still be waiting for a retry");
        assert!(staged.exists());
        assert_eq!(sweep_outbox(&home.path().join("missing"), OUTBOX_KEEP), 0);
    }

    #[test]
    fn attachments_are_staged_through_the_sandbox() {
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join(".nanobot");
        let ws = data.join("workspace");
        let outbox = data.join("media").join("outbox");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(data.join("config.json"), "sk-SEKRIT").unwrap();
        std::fs::write(ws.join("report.txt"), "report").unwrap();
        std::os::unix::fs::symlink(data.join("config.json"), ws.join("cfg")).unwrap();
        std::fs::write(home.path().join("outside.txt"), "outside").unwrap();
        for restrict in [true, false] {
            let sandbox = Sandbox::new(&ws, restrict).with_data_dir(Some(data.clone()));
            let staged = stage_attachment(&sandbox, &outbox, "report.txt").unwrap();
            assert!(staged.starts_with(&outbox), "{}", staged.display());
            assert_eq!(std::fs::read_to_string(&staged).unwrap(), "report");
            for bad in [
                "cfg",
                "../config.json",
                &data.join("config.json").display().to_string(),
            ] {
                let err = stage_attachment(&sandbox, &outbox, bad).unwrap_err();
                assert!(!err.to_string().contains("SEKRIT"), "{err}");
            }
            let outside = home.path().join("outside.txt").display().to_string();
            assert_eq!(stage_attachment(&sandbox, &outbox, &outside).is_ok(), !restrict);
        }
        // only the staged copies are in the outbox
        for e in std::fs::read_dir(&outbox).unwrap() {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            assert!(text == "report" || text == "outside", "{text}");
        }
    }
}
