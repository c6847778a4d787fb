//! Messages in: who gets through, the items rendered as 0.3.5 renders them, media downloaded from the CDN and
//! deciphered.

use super::*;

/// The kind of a received media item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Image,
    Voice,
    File,
    Video,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Voice => "voice",
            Kind::File => "file",
            Kind::Video => "video",
        }
    }

    /// 0.3.5's extension for a file saved without a name.
    pub(super) fn extension(self) -> &'static str {
        match self {
            Kind::Image => ".jpg",
            Kind::Voice => ".silk",
            Kind::Video => ".mp4",
            Kind::File => "",
        }
    }
}

impl WeixinChannel {
    /// The message's id as 0.3.5 takes it: `message_id`, else `seq`, else `<from>_<create_time_ms>`.
    pub(super) fn message_id(msg: &Value, from: &str) -> String {
        let id = |v: &Value| match v {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) if n.as_f64() != Some(0.0) => Some(n.to_string()),
            _ => None,
        };
        id(&msg["message_id"])
            .or_else(|| id(&msg["seq"]))
            .unwrap_or_else(|| {
                let at = match &msg["create_time_ms"] {
                    Value::Null => String::new(),
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                format!("{from}_{at}")
            })
    }

    /// One message of the long poll. A repeat (by message id) is dropped; the id is remembered once the message
    /// is handled (published, a pairing code sent, ignored, empty), never when handling it failed (a bus
    /// error ends the poll before its cursor moves, and the message, polled again, is handled then).
    pub(super) async fn on_message(&self, bus: &Arc<dyn Bus>, msg: &Value) -> Result<(), ChannelError> {
        if api::int_at(msg, "message_type") == MESSAGE_TYPE_BOT {
            return Ok(());
        }
        let from = str_at(msg, "from_user_id").trim();
        if from.is_empty() {
            return Ok(());
        }
        let message_id = Self::message_id(msg, from);
        if !message_id.is_empty() && self.seen.contains(&message_id) {
            tracing::debug!(message_id, "weixin: a repeated message was dropped");
            return Ok(());
        }
        let handled = self.handle_message(bus, msg, from, &message_id).await;
        if handled.is_ok() && !message_id.is_empty() {
            self.seen.insert(&message_id);
        }
        handled
    }

    async fn handle_message(
        &self,
        bus: &Arc<dyn Bus>,
        msg: &Value,
        from: &str,
        message_id: &str,
    ) -> Result<(), ChannelError> {
        let ctx = str_at(msg, "context_token").trim();
        let items = msg["item_list"].as_array().cloned().unwrap_or_default();
        let first_text = items
            .iter()
            .find(|i| api::int_at(i, "type") == ITEM_TEXT)
            .map_or("", |i| i["text_item"]["text"].as_str().unwrap_or_default());
        let is_group = from.ends_with("@chatroom");
        if !is_group && !self.access.is_allowed(from) && ctx.is_empty() {
            tracing::warn!(
                sender = from,
                "weixin: a stranger wrote without a context token; no pairing code can be sent"
            );
            return Ok(());
        }
        match self.access.check(&InboundContext {
            sender_id: from,
            chat_id: from,
            is_group,
            mentioned: true,
            text: first_text,
        })? {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                // Sent on the stranger's own context token, which is not kept.
                let text = AccessControl::pairing_message(&request);
                let mut delivery = Delivery::new();
                let sent = self.send_text(from, &text, ctx, &mut delivery, "").await;
                lock(&self.contexts).sends.remove(ctx);
                if let Err(e) = sent {
                    tracing::warn!(error = ?e, "weixin: the pairing code was not sent");
                }
                return Ok(());
            }
            AccessDecision::Handled { reply } => {
                self.remember_context(from, ctx).await;
                let mut delivery = Delivery::new();
                if let Err(e) = self.send_text(from, &reply, ctx, &mut delivery, "").await {
                    tracing::warn!(error = ?e, "weixin: the answer to a command was not sent");
                }
                return Ok(());
            }
            _ => return Ok(()),
        }
        self.remember_context(from, ctx).await;
        let (content, media) = self.read_items(&items).await;
        if content.is_empty() {
            return Ok(());
        }
        tracing::info!(
            from,
            items = %items.iter().map(|i| api::int_at(i, "type").to_string()).collect::<Vec<_>>().join(","),
            chars = content.chars().count(),
            "weixin: message"
        );
        self.start_typing(from, ctx);
        let mut inbound = InboundMessage::new(NAME, from, from, content)
            .with_streaming(self.settings.streaming)
            .with_metadata(META_MESSAGE_ID, message_id.to_owned())
            .with_metadata(nanobot_bus::META_IS_GROUP, is_group);
        inbound.media = media;
        if let Err(e) = bus.publish_inbound(inbound).await {
            self.stop_typing(from, false);
            return Err(e.into());
        }
        Ok(())
    }

    /// Keeps `ctx` as the user's latest context token (a new one starts its send count), saves the state, and
    /// sends the replies kept for the user.
    pub(super) async fn remember_context(&self, user: &str, ctx: &str) {
        if ctx.is_empty() {
            return;
        }
        {
            let mut c = lock(&self.contexts);
            let previous = c.tokens.insert(user.to_owned(), json!(ctx));
            c.at.insert(user.to_owned(), Instant::now());
            let previous = previous.and_then(|p| p.as_str().map(str::to_owned));
            if previous.as_deref() != Some(ctx) {
                if let Some(p) = previous {
                    c.sends.remove(&p);
                }
                c.sends.insert(ctx.to_owned(), 0);
            }
        }
        self.save().await;
        self.retry_deferred(user).await;
    }

    /// The message's items as 0.3.5 renders them, joined with `\n`, and the files saved.
    pub(super) async fn read_items(&self, items: &[Value]) -> (String, Vec<String>) {
        let mut parts: Vec<String> = Vec::new();
        let mut media: Vec<String> = Vec::new();
        let mut own_media = false;
        let has_locator = |m: &Value| {
            !str_at(m, "encrypt_query_param").is_empty() || !str_at(m, "full_url").trim().is_empty()
        };
        for item in items {
            match api::int_at(item, "type") {
                ITEM_TEXT => {
                    let text = str_at(&item["text_item"], "text");
                    if text.is_empty() {
                        continue;
                    }
                    let quote = &item["ref_msg"];
                    let quoted = &quote["message_item"];
                    // A quote of media gives the text only (the media may be fetched below).
                    if quote.as_object().is_none_or(|q| q.is_empty())
                        || MEDIA_ITEMS.contains(&api::int_at(quoted, "type"))
                    {
                        parts.push(text.to_owned());
                    } else {
                        let mut said: Vec<&str> = Vec::new();
                        if let Some(title) = quote["title"].as_str().filter(|t| !t.is_empty()) {
                            said.push(title);
                        }
                        if let Some(q) = quoted["text_item"]["text"].as_str().filter(|t| !t.is_empty()) {
                            said.push(q);
                        }
                        parts.push(if said.is_empty() {
                            text.to_owned()
                        } else {
                            format!("[引用: {}]\n{text}", said.join(" | "))
                        });
                    }
                }
                ITEM_IMAGE => {
                    let image = &item["image_item"];
                    own_media |= has_locator(&image["media"]);
                    parts.push(
                        self.media_part(image, Kind::Image, None, &mut media)
                            .await
                            .unwrap_or_else(|| "[image]".into()),
                    );
                }
                ITEM_VOICE => {
                    let voice = &item["voice_item"];
                    let said = str_at(voice, "text");
                    if !said.is_empty() {
                        parts.push(format!("[voice] {said}"));
                    } else {
                        own_media |= has_locator(&voice["media"]);
                        parts.push(
                            self.media_part(voice, Kind::Voice, None, &mut media)
                                .await
                                .unwrap_or_else(|| "[voice]".into()),
                        );
                    }
                }
                ITEM_FILE => {
                    let file = &item["file_item"];
                    own_media |= has_locator(&file["media"]);
                    let name = file["file_name"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or("unknown");
                    parts.push(
                        self.media_part(file, Kind::File, Some(name), &mut media)
                            .await
                            .unwrap_or_else(|| format!("[file: {name}]")),
                    );
                }
                ITEM_VIDEO => {
                    let video = &item["video_item"];
                    own_media |= has_locator(&video["media"]);
                    parts.push(
                        self.media_part(video, Kind::Video, None, &mut media)
                            .await
                            .unwrap_or_else(|| "[video]".into()),
                    );
                }
                _ => {}
            }
        }
        // No media of its own: the quoted media is fetched instead (0.3.5, as openclaw-weixin).
        if media.is_empty() && !own_media {
            let quoted = items
                .iter()
                .filter(|i| api::int_at(i, "type") == ITEM_TEXT)
                .map(|i| &i["ref_msg"]["message_item"])
                .find(|q| MEDIA_ITEMS.contains(&api::int_at(q, "type")));
            if let Some(q) = quoted {
                let part = match api::int_at(q, "type") {
                    ITEM_IMAGE => {
                        self.media_part(&q["image_item"], Kind::Image, None, &mut media)
                            .await
                    }
                    ITEM_VOICE => {
                        self.media_part(&q["voice_item"], Kind::Voice, None, &mut media)
                            .await
                    }
                    ITEM_FILE => {
                        let file = &q["file_item"];
                        let name = file["file_name"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .unwrap_or("unknown");
                        self.media_part(file, Kind::File, Some(name), &mut media).await
                    }
                    _ => {
                        self.media_part(&q["video_item"], Kind::Video, None, &mut media)
                            .await
                    }
                };
                parts.extend(part);
            }
        }
        (parts.join("\n"), media)
    }

    /// One media item downloaded: the line 0.3.5 writes for it (`None`: not downloaded).
    pub(super) async fn media_part(
        &self,
        item: &Value,
        kind: Kind,
        name: Option<&str>,
        media: &mut Vec<String>,
    ) -> Option<String> {
        let path = match self.download(item, kind, name).await {
            Ok(Some(p)) => p,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(kind = kind.name(), error = %nanobot_util::error_chain(&e), "weixin: media not downloaded");
                return None;
            }
        };
        media.push(path.clone());
        Some(match kind {
            Kind::Image => format!("[image]\n[Image: source: {path}]"),
            Kind::File => format!("[file: {}]\n[File: source: {path}]", name.unwrap_or("unknown")),
            Kind::Video => format!("[video]\n[Video: source: {path}]"),
            Kind::Voice => match self.transcribe(&path).await {
                Some(words) => format!("[voice] {words}"),
                None => format!("[voice]\n[Audio: source: {path}]"),
            },
        })
    }

    pub(super) async fn transcribe(&self, path: &str) -> Option<String> {
        let t = self.transcriber.as_ref()?;
        match t.transcribe(Path::new(path)).await {
            Ok(words) if !words.trim().is_empty() => Some(words.trim().to_owned()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %nanobot_util::error_chain(&e), "weixin: a voice was not transcribed");
                None
            }
        }
    }

    pub(super) async fn fetch(&self, client: &reqwest::Client, url: &str) -> Result<Vec<u8>, ChannelError> {
        let resp = client
            .get(url)
            .timeout(MEDIA_TIMEOUT)
            .send()
            .await
            .map_err(|e| api::transport(e).into_channel("media download"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(CallError::Status(status.as_u16()).into_channel("media download"));
        }
        nanobot_channels::download::read_body(NAME, "a media file", resp, MAX_MEDIA_BYTES).await
    }

    /// Downloads and deciphers one media item into the media directory; its path. `Ok(None)`: nothing to fetch
    /// (no locator; no key for a voice, file or video), as 0.3.5.
    pub(super) async fn download(
        &self,
        item: &Value,
        kind: Kind,
        name: Option<&str>,
    ) -> Result<Option<String>, ChannelError> {
        let media = &item["media"];
        let param = str_at(media, "encrypt_query_param");
        let full = str_at(media, "full_url").trim();
        if param.is_empty() && full.is_empty() {
            return Ok(None);
        }
        // image_item.aeskey (hex) is preferred; else media.aes_key (base64 of the bytes or of their hex).
        let hex_key = str_at(item, "aeskey");
        let b64_key = str_at(media, "aes_key");
        let key = if !hex_key.is_empty() {
            Some(
                crypto::parse_hex_key(hex_key)
                    .ok_or_else(|| rejected(format!("{}: aeskey is not 32 hex digits", kind.name())))?,
            )
        } else if !b64_key.is_empty() {
            match crypto::parse_aes_key(b64_key) {
                Ok(k) => Some(k),
                Err(e) => {
                    tracing::warn!(error = %e, "weixin: the media key is unreadable; the file is saved as received");
                    None
                }
            }
        } else {
            None
        };
        if kind != Kind::Image && hex_key.is_empty() && b64_key.is_empty() {
            return Ok(None);
        }
        let built = (!param.is_empty()).then(|| {
            format!(
                "{}/download?encrypted_query_param={}",
                self.settings.cdn_base_url,
                quote(param)
            )
        });
        let mut data = None;
        if !full.is_empty() {
            let fallback = built.as_deref().filter(|b| *b != full);
            match self.guard.check_str(full).await {
                Err(e) if fallback.is_some() => {
                    tracing::warn!(error = %e, "weixin: the media's full_url was refused; using cdnBaseUrl");
                }
                Err(e) => return Err(rejected(format!("{}: full_url refused: {e}", kind.name()))),
                Ok(_) => match self.fetch(self.guarded()?, full).await {
                    Ok(d) => data = Some(d),
                    Err(e) if fallback.is_some() && e.is_retryable() => {
                        tracing::warn!(error = %nanobot_util::error_chain(&e), "weixin: full_url failed; using cdnBaseUrl");
                    }
                    Err(e) => return Err(e),
                },
            }
        }
        let mut data = match (data, &built) {
            (Some(d), _) => d,
            (None, Some(url)) => self.fetch(self.http()?, url).await?,
            (None, None) => return Ok(None),
        };
        if let Some(key) = key
            && !data.is_empty()
        {
            data = tokio::task::spawn_blocking(move || crypto::decrypt(&key, &data))
                .await
                .map_err(|e| transient(format!("decryption did not finish: {e}")))?
                .map_err(|e| rejected(format!("{}: {e}", kind.name())))?;
        }
        if data.is_empty() {
            return Ok(None);
        }
        let file_name = match name {
            Some(n) => {
                let base = Path::new(n)
                    .file_name()
                    .map_or_else(|| n.to_owned(), |b| b.to_string_lossy().into_owned());
                safe_file_name(&base)
            }
            None => {
                let seed = if param.is_empty() { full } else { param };
                let digest = Sha256::digest(seed.as_bytes());
                let n = u64::from_be_bytes(std::array::from_fn(|i| digest[i])) % 100_000;
                let secs = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                format!("{}_{secs}_{n}{}", kind.name(), kind.extension())
            }
        };
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| ChannelError::Io { path, source }
        };
        tokio::fs::create_dir_all(&self.media_dir)
            .await
            .map_err(io(&self.media_dir))?;
        let dest = free_path(&self.media_dir, &file_name);
        tokio::fs::write(&dest, &data).await.map_err(io(&dest))?;
        Ok(Some(dest.display().to_string()))
    }
}

/// `dir/name`, or `dir/<stem>_<n>.<ext>` when that file exists already (a file of an earlier message is never
/// overwritten).
pub(super) fn free_path(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if !first.exists() {
        return first;
    }
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, format!(".{e}")),
        _ => (name, String::new()),
    };
    (2..)
        .map(|n| dir.join(format!("{stem}_{n}{ext}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_taken_as_0_3_5_takes_them() {
        let id = |v: Value| WeixinChannel::message_id(&v, "u");
        assert_eq!(
            id(json!({"message_id": 7_400_000_000_000_000_001u64, "seq": 3})),
            "7400000000000000001"
        );
        assert_eq!(id(json!({"message_id": 0, "seq": 3})), "3");
        assert_eq!(id(json!({"message_id": "", "create_time_ms": 12})), "u_12");
        assert_eq!(id(json!({})), "u_");
    }

    #[test]
    fn received_files_never_overwrite_each_other() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(free_path(dir.path(), "a.txt"), dir.path().join("a.txt"));
        std::fs::write(dir.path().join("a.txt"), "1").unwrap();
        assert_eq!(free_path(dir.path(), "a.txt"), dir.path().join("a_2.txt"));
        std::fs::write(dir.path().join("a_2.txt"), "2").unwrap();
        assert_eq!(free_path(dir.path(), "a.txt"), dir.path().join("a_3.txt"));
        std::fs::write(dir.path().join("noext"), "1").unwrap();
        assert_eq!(free_path(dir.path(), "noext"), dir.path().join("noext_2"));
    }
}
