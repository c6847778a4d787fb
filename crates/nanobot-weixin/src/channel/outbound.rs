//! Answers out: context tokens and their budget, replies kept for the user's next message, files uploaded to the
//! CDN, tool hints, block streaming.

use super::*;

/// How a file is sent, by its extension (0.3.5's lists): `(getuploadurl media_type, item type, item key)`.
pub(super) fn upload_kind(name: &str) -> (i64, i64, &'static str) {
    let ext = Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jpg" | "jpeg" | "png" | "gif" | "bmp" | "webp" | "tiff" | "ico" | "svg" => {
            (1, ITEM_IMAGE, "image_item")
        }
        "mp4" | "avi" | "mov" | "mkv" | "webm" | "flv" => (2, ITEM_VIDEO, "video_item"),
        "mp3" | "wav" | "amr" | "silk" | "ogg" | "m4a" | "aac" | "flac" => (4, ITEM_VOICE, "voice_item"),
        _ => (3, ITEM_FILE, "file_item"),
    }
}

/// The parts of one outbound message already sent, so that sending it again skips them.
pub(super) struct Delivery {
    pub(super) id: String,
    pub(super) created: Instant,
    pub(super) done: HashSet<String>,
    /// Each file part's AES key, reused when the part is sent again.
    pub(super) keys: HashMap<String, [u8; 16]>,
}

/// The AES keys are left out.
impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("created", &self.created)
            .field("done", &self.done)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Delivery {
    pub(super) fn new() -> Self {
        Self {
            id: new_id(),
            created: Instant::now(),
            done: HashSet::new(),
            keys: HashMap::new(),
        }
    }
}

/// A reply kept until the user writes again.
#[derive(Debug)]
pub(super) struct Deferred {
    pub(super) key: String,
    pub(super) delivery: Delivery,
    pub(super) content: String,
    pub(super) media: Vec<String>,
}

/// A streamed answer sent in blocks (`blockStreaming`).
#[derive(Debug)]
pub(super) struct BlockStream {
    /// When it last grew (a stream neither growing nor ending is forgotten).
    pub(super) touched: Instant,
    /// The order it last grew in, among the streams followed (the least recent is forgotten first).
    pub(super) order: u64,
    /// Everything streamed so far.
    pub(super) raw: String,
    /// Bytes of `raw` already sent in blocks.
    pub(super) consumed: usize,
    pub(super) sent: u32,
    /// A `-2` stopped the blocks of this stream.
    pub(super) disabled: bool,
    /// The last block closed a code fence that the next text reopens.
    pub(super) reopen_fence: bool,
    pub(super) run_id: String,
}

impl BlockStream {
    fn new() -> Self {
        Self {
            touched: Instant::now(),
            order: 0,
            raw: String::new(),
            consumed: 0,
            sent: 0,
            disabled: false,
            reopen_fence: false,
            run_id: String::new(),
        }
    }
}

fn stream_key(chat: &str, stream_id: &str) -> String {
    format!("{chat}\0{stream_id}")
}

/// Why a send did not go out.
#[derive(Debug)]
pub(super) enum SendFail {
    /// The context token cannot send (none, the local budget, or `-2`): kept for the user's next message.
    Quota(String),
    /// `-14`.
    Auth(String),
    /// Anything else, as the manager acts on it.
    Other(ChannelError),
}

impl From<CallError> for SendFail {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Quota(why) => SendFail::Quota(why),
            CallError::Auth(why) => SendFail::Auth(why),
            e => SendFail::Other(e.into_channel("sendmessage")),
        }
    }
}

/// Why a file was not sent.
pub(super) enum FileFail {
    /// As the whole message fails.
    Send(SendFail),
    /// Named in a text instead (`[Failed to send: <name>]`), as 0.3.5 does.
    Failed(String),
}

impl FileFail {
    pub(super) fn of(e: CallError) -> Self {
        match e {
            CallError::Quota(_) | CallError::Auth(_) => FileFail::Send(e.into()),
            e if e.retryable() => FileFail::Send(SendFail::Other(e.into_channel("sending a file"))),
            e => FileFail::Failed(e.to_string()),
        }
    }
}

impl WeixinChannel {
    /// The user's context token to send on (`None`: none yet). One older than a minute is first refreshed
    /// through `getconfig`, as 0.3.5 does (no server is known to answer a new one there).
    pub(super) async fn context_for(&self, user: &str) -> Option<String> {
        let (ctx, fresh) = {
            let c = lock(&self.contexts);
            let ctx = c.tokens.get(user)?.as_str()?.to_owned();
            let fresh =
                c.at.get(user)
                    .is_some_and(|at| at.elapsed() < CONTEXT_TOKEN_MAX_AGE);
            (ctx, fresh)
        };
        if fresh || ctx.is_empty() {
            return Some(ctx);
        }
        match self
            .call(
                "ilink/bot/getconfig",
                json!({"ilink_user_id": user, "context_token": ctx}),
                CONFIG_TIMEOUT,
            )
            .await
        {
            Ok(v) => {
                let new = str_at(&v, "context_token");
                if !new.is_empty() && new != ctx {
                    {
                        let mut c = lock(&self.contexts);
                        c.tokens.insert(user.to_owned(), json!(new));
                        c.at.insert(user.to_owned(), Instant::now());
                    }
                    tracing::info!(user, "weixin: the context token was refreshed");
                    self.save().await;
                    return Some(new.to_owned());
                }
            }
            Err(e) => tracing::debug!(error = %e, "weixin: getconfig did not refresh the context token"),
        }
        Some(ctx)
    }

    fn budget_spent(&self) -> CallError {
        CallError::Quota(format!(
            "the local budget of {} sends for this context token is spent; waiting for the user to write again",
            self.settings.context_message_budget
        ))
    }

    /// The local budget: `used + 1 + reserve` sends on `ctx` at most `contextMessageBudget` (nothing counted).
    pub(super) fn check_budget(&self, ctx: &str, reserve: u32) -> Result<(), CallError> {
        let used = lock(&self.contexts).sends.get(ctx).copied().unwrap_or(0);
        if used + 1 + reserve <= self.settings.context_message_budget {
            Ok(())
        } else {
            Err(self.budget_spent())
        }
    }

    /// [`check_budget`](Self::check_budget), and the send counted at once, under one lock (the poll's task and
    /// the sends' task may send on one token together); [`unreserve`](Self::unreserve) gives it back.
    pub(super) fn reserve(&self, ctx: &str, reserve: u32) -> Result<(), CallError> {
        let mut c = lock(&self.contexts);
        let used = c.sends.get(ctx).copied().unwrap_or(0);
        if used + 1 + reserve > self.settings.context_message_budget {
            return Err(self.budget_spent());
        }
        c.sends.insert(ctx.to_owned(), used + 1);
        Ok(())
    }

    /// Gives back a send [`reserve`](Self::reserve)d that did not go out.
    pub(super) fn unreserve(&self, ctx: &str) {
        if let Some(used) = lock(&self.contexts).sends.get_mut(ctx) {
            *used = used.saturating_sub(1);
        }
    }

    /// One `sendmessage` of one item on `ctx`, counted against its budget (counted before the call, given back
    /// when it fails).
    pub(super) async fn send_item(
        &self,
        to: &str,
        item: Value,
        ctx: &str,
        client: &str,
        run_id: &str,
        reserve: u32,
    ) -> Result<(), CallError> {
        self.reserve(ctx, reserve)?;
        let mut msg = json!({
            "from_user_id": "", "to_user_id": to, "client_id": client, "message_type": MESSAGE_TYPE_BOT,
            "message_state": MESSAGE_STATE_FINISH, "item_list": [item], "context_token": ctx,
        });
        if !run_id.is_empty() {
            msg["run_id"] = json!(run_id);
        }
        match self
            .call("ilink/bot/sendmessage", json!({"msg": msg}), API_TIMEOUT)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                self.unreserve(ctx);
                Err(e)
            }
        }
    }

    /// `text` split as 0.3.5 splits it, each piece its own message on `ctx` (pieces already sent skipped).
    pub(super) async fn send_text(
        &self,
        to: &str,
        text: &str,
        ctx: &str,
        delivery: &mut Delivery,
        run_id: &str,
    ) -> Result<(), SendFail> {
        if ctx.is_empty() {
            return Err(SendFail::Quota(format!("no context token for {to} yet")));
        }
        for (i, piece) in split_text(text, MAX_MESSAGE_CHARS).iter().enumerate() {
            let part = format!("text:{i}");
            if delivery.done.contains(&part) {
                continue;
            }
            self.send_item(
                to,
                text_item(piece),
                ctx,
                &client_id(&delivery.id, &part),
                run_id,
                0,
            )
            .await?;
            delivery.done.insert(part);
        }
        Ok(())
    }

    /// A reply's files (each its own message, a failed one named in a text instead), then its text, on `ctx`,
    /// the user's latest context token ([`context_for`](Self::context_for); `None`: none yet).
    pub(super) async fn send_parts(
        &self,
        to: &str,
        ctx: Option<&str>,
        content: &str,
        media: &[String],
        delivery: &mut Delivery,
        run_id: &str,
    ) -> Result<(), SendFail> {
        let Some(ctx) = ctx.filter(|c| !c.is_empty()) else {
            return Err(SendFail::Quota(format!("no context token for {to} yet")));
        };
        for (i, path) in media
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .enumerate()
        {
            let part = format!("media:{i}");
            if delivery.done.contains(&part) {
                continue;
            }
            match self.send_file(to, path, ctx, delivery, &part, run_id).await {
                Ok(()) => {}
                Err(FileFail::Send(e)) => return Err(e),
                Err(FileFail::Failed(why)) => {
                    let name = Path::new(path)
                        .file_name()
                        .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned());
                    tracing::warn!(file = %name, error = %why, "weixin: a file was not sent");
                    let fallback = format!("{part}:fallback");
                    let text = format!("[Failed to send: {name}]");
                    self.send_item(
                        to,
                        text_item(&text),
                        ctx,
                        &client_id(&delivery.id, &fallback),
                        run_id,
                        0,
                    )
                    .await?;
                }
            }
            delivery.done.insert(part);
        }
        self.send_text(to, content, ctx, delivery, run_id).await
    }

    /// One file: uploaded to the CDN enciphered (AES-128-ECB under a key of its own, kept for the part), then
    /// sent as an image, video, voice or file item by its extension (0.3.5's protocol).
    pub(super) async fn send_file(
        &self,
        to: &str,
        path: &str,
        ctx: &str,
        delivery: &mut Delivery,
        part: &str,
        run_id: &str,
    ) -> Result<(), FileFail> {
        let local = Path::new(path.strip_prefix("file://").unwrap_or(path));
        let name = local
            .file_name()
            .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
        let data = read_attachment(local, MAX_UPLOAD_BYTES)
            .await
            .map_err(|e| FileFail::Failed(e.to_string()))?;
        self.check_budget(ctx, 0).map_err(FileFail::of)?;
        let key = *delivery.keys.entry(part.to_owned()).or_insert_with(rand::random);
        let (media_type, item_type, item_key) = upload_kind(&name);
        let filekey = to_hex(&Sha256::digest(format!("{}:{part}:file", delivery.id)))[..32].to_owned();
        let raw_size = data.len() as u64;
        let (sealed, md5) =
            tokio::task::spawn_blocking(move || (crypto::encrypt(&key, &data), to_hex(&Md5::digest(&data))))
                .await
                .map_err(|e| {
                    FileFail::Send(SendFail::Other(transient(format!(
                        "encryption did not finish: {e}"
                    ))))
                })?;
        let filesize = sealed.len() as u64;
        let body = json!({
            "filekey": filekey, "media_type": media_type, "to_user_id": to, "rawsize": raw_size,
            "rawfilemd5": md5, "filesize": filesize, "no_need_thumb": true, "aeskey": to_hex(&key),
        });
        let answer = self
            .call("ilink/bot/getuploadurl", body, API_TIMEOUT)
            .await
            .map_err(FileFail::of)?;
        let full = str_at(&answer, "upload_full_url").trim();
        let param = str_at(&answer, "upload_param");
        let built = (!param.is_empty()).then(|| {
            format!(
                "{}/upload?encrypted_query_param={}&filekey={}",
                self.settings.cdn_base_url,
                quote(param),
                quote(&filekey)
            )
        });
        let other = |e: ChannelError| FileFail::Send(SendFail::Other(e));
        let (client, url) = if !full.is_empty() && self.guard.check_str(full).await.is_ok() {
            (self.guarded().map_err(other)?, full.to_owned())
        } else if let Some(url) = built {
            if !full.is_empty() {
                tracing::warn!("weixin: the upload_full_url was refused; using cdnBaseUrl");
            }
            (self.http().map_err(other)?, url)
        } else if full.is_empty() {
            return Err(FileFail::Failed("getuploadurl answered no upload URL".into()));
        } else {
            return Err(FileFail::Failed(
                "the upload_full_url was refused (an internal address)".into(),
            ));
        };
        let resp = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(sealed)
            .timeout(MEDIA_TIMEOUT)
            .send()
            .await
            .map_err(|e| FileFail::of(api::transport(e)))?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            return Err(FileFail::of(CallError::Status(status)));
        }
        let download = resp
            .headers()
            .get("x-encrypted-param")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                FileFail::Failed(format!("the CDN answered no x-encrypted-param (HTTP {status})"))
            })?;
        let mut media_item = json!({"media": {"encrypt_query_param": download, "aes_key": crypto::media_key(&key),
                                              "encrypt_type": 1}});
        match item_type {
            ITEM_IMAGE => media_item["mid_size"] = json!(filesize),
            ITEM_VIDEO => media_item["video_size"] = json!(filesize),
            ITEM_FILE => {
                media_item["file_name"] = json!(name);
                media_item["len"] = json!(raw_size.to_string());
            }
            _ => {}
        }
        let item = json!({"type": item_type, item_key: media_item});
        self.send_item(to, item, ctx, &client_id(&delivery.id, part), run_id, 0)
            .await
            .map_err(FileFail::of)
    }

    /// The delivery `key` names, resumed when it was tried moments ago (the manager's retry), else a new one.
    pub(super) fn take_delivery(&self, key: &str) -> Delivery {
        let mut all = lock(&self.deliveries);
        all.retain(|(_, d)| d.created.elapsed() < DELIVERY_TTL);
        match all.iter().position(|(k, _)| k == key) {
            Some(i) => all.swap_remove(i).1,
            None => Delivery::new(),
        }
    }

    pub(super) fn keep_delivery(&self, key: String, delivery: Delivery) {
        let mut all = lock(&self.deliveries);
        all.push((key, delivery));
        if all.len() > MAX_DELIVERIES {
            all.remove(0);
        }
    }

    /// Keeps a reply for the user's next message (at most three a chat; the oldest is dropped). `used` is the
    /// context token the send was refused on (empty: none): when the user's message brought a newer one
    /// meanwhile (its kept replies already sent), the replies kept are sent at once.
    pub(super) async fn defer(&self, to: &str, deferred: Deferred, used: &str) {
        {
            let mut all = lock(&self.deferred);
            let list = all.entry(to.to_owned()).or_default();
            list.retain(|d| d.key != deferred.key);
            list.push(deferred);
            while list.len() > MAX_DEFERRED_PER_CHAT {
                list.remove(0);
                tracing::warn!(
                    chat = to,
                    "weixin: the oldest kept reply was dropped ({MAX_DEFERRED_PER_CHAT} are kept)"
                );
            }
        }
        // Kept first, then the token read: a message handled after this finds the reply kept, one handled
        // before left its token to be seen here.
        let newer = lock(&self.contexts)
            .tokens
            .get(to)
            .and_then(Value::as_str)
            .is_some_and(|current| !current.is_empty() && current != used);
        if newer {
            tracing::info!(
                chat = to,
                "weixin: a newer context token came meanwhile; the kept replies are sent now"
            );
            self.retry_deferred(to).await;
        }
    }

    /// Sends the replies kept for `user` on their new context token, in order; one refused for the quota again
    /// stays (with those after it), one failing otherwise is dropped.
    pub(super) async fn retry_deferred(&self, user: &str) {
        let pending = lock(&self.deferred).remove(user).unwrap_or_default();
        if pending.is_empty() {
            return;
        }
        tracing::info!(
            chat = user,
            n = pending.len(),
            "weixin: sending the replies kept for the user's next message"
        );
        let mut keep = Vec::new();
        let mut stopped = false;
        for mut d in pending {
            if stopped {
                keep.push(d);
                continue;
            }
            let ctx = self.context_for(user).await;
            match self
                .send_parts(user, ctx.as_deref(), &d.content, &d.media, &mut d.delivery, "")
                .await
            {
                Ok(()) => {}
                Err(SendFail::Quota(_)) => {
                    stopped = true;
                    keep.push(d);
                }
                Err(SendFail::Auth(why)) => {
                    self.expire(&why);
                    tracing::warn!(error = %why, "weixin: a kept reply was not sent: the login expired");
                }
                Err(SendFail::Other(e)) => {
                    tracing::warn!(error = %nanobot_util::error_chain(&e), "weixin: a kept reply failed and was dropped");
                }
            }
        }
        if !keep.is_empty() {
            let mut all = lock(&self.deferred);
            let list = all.entry(user.to_owned()).or_default();
            keep.append(list);
            *list = keep;
        }
    }

    /// The tool hints gathered for `chat`, sent as one message before the next visible one (failures logged).
    pub(super) async fn flush_hints(&self, chat: &str) {
        let Some(hints) = lock(&self.hints).remove(chat).filter(|h| !h.is_empty()) else {
            return;
        };
        let Some(ctx) = self.context_for(chat).await else {
            tracing::warn!(
                chat,
                n = hints.len(),
                "weixin: tool hints dropped: no context token"
            );
            return;
        };
        let mut delivery = Delivery::new();
        match self
            .send_text(chat, &hints.join("\n\n"), &ctx, &mut delivery, "")
            .await
        {
            Ok(()) => {}
            Err(SendFail::Auth(why)) => self.expire(&why),
            Err(e) => tracing::warn!(error = ?e, "weixin: tool hints not sent"),
        }
    }

    /// One streamed delta: with `blockStreaming`, a block is sent once `blockStreamingMinChars` have gathered, at
    /// most `blockStreamingMaxMessages` − 1 per answer (one send is left for the end); a `-2` stops the blocks.
    /// Failures are logged: what was not sent goes with the end.
    pub(super) async fn stream_delta(&self, chat: &str, stream_id: &str, delta: &str) {
        if !self.settings.block_streaming {
            return;
        }
        let key = stream_key(chat, stream_id);
        let min = self.settings.block_streaming_min_chars;
        let (piece, consumed, reopen, run_id, sent) = {
            let mut streams = lock(&self.streams);
            if !streams.contains_key(&key) {
                // Streams whose end never came (their turns failed) are forgotten: the stale ones, then the
                // least recently grown while too many are followed.
                streams.retain(|_, st| st.touched.elapsed() < STREAM_TTL);
                while streams.len() >= MAX_STREAMS {
                    let Some(oldest) = streams
                        .iter()
                        .min_by_key(|(_, st)| st.order)
                        .map(|(k, _)| k.clone())
                    else {
                        break;
                    };
                    streams.remove(&oldest);
                }
            }
            let order = streams.values().map(|st| st.order).max().unwrap_or(0) + 1;
            let st = streams.entry(key.clone()).or_insert_with(BlockStream::new);
            st.touched = Instant::now();
            st.order = order;
            st.raw.push_str(delta);
            if st.disabled || st.sent + 1 >= self.settings.block_streaming_max_messages {
                return;
            }
            let pending: Vec<char> = st.raw[st.consumed..].chars().collect();
            if pending.len() < min {
                return;
            }
            let prefix = if st.reopen_fence { 4 } else { 0 };
            let cut = cut_index(&pending, min.saturating_sub(prefix + 4).max(1));
            let skip = pending[cut..].iter().take_while(|c| c.is_whitespace()).count();
            let consumed: usize = pending[..cut + skip].iter().map(|c| c.len_utf8()).sum();
            if st.run_id.is_empty() {
                st.run_id = new_id();
            }
            (
                pending[..cut].iter().collect::<String>(),
                consumed,
                st.reopen_fence,
                st.run_id.clone(),
                st.sent,
            )
        };
        let Some(ctx) = self.context_for(chat).await else {
            return;
        };
        let open = reopen ^ leaves_fence_open(&piece);
        let mut text = if reopen {
            format!("```\n{}", piece.trim_end())
        } else {
            piece.trim_end().to_owned()
        };
        if open {
            text.push_str("\n```");
        }
        let delivery_id = format!("stream-{}", to_hex(&Sha256::digest(key.as_bytes())));
        let mut result = Ok(());
        for (j, block) in split_text(&text, MAX_MESSAGE_CHARS).iter().enumerate() {
            let part = format!("block:{sent}:{j}");
            result = self
                .send_item(
                    chat,
                    text_item(block),
                    &ctx,
                    &client_id(&delivery_id, &part),
                    &run_id,
                    1,
                )
                .await;
            if result.is_err() {
                break;
            }
        }
        let mut streams = lock(&self.streams);
        let Some(st) = streams.get_mut(&key) else {
            return;
        };
        match result {
            Ok(()) => {
                st.consumed += consumed;
                st.sent += 1;
                st.reopen_fence = open;
            }
            Err(CallError::Quota(why)) => {
                st.disabled = true;
                tracing::warn!(chat, error = %why, "weixin: blocks stopped for this answer (the context token's quota)");
            }
            Err(CallError::Auth(why)) => {
                drop(streams);
                self.expire(&why);
            }
            Err(e) => tracing::warn!(chat, error = %e, "weixin: a block was not sent; it goes with the end"),
        }
    }

    /// The end of a streamed answer: the text not yet sent in blocks, and the run id the blocks shared. The
    /// stream is kept (a retry of the end finds it) until [`forget_stream`](Self::forget_stream).
    pub(super) fn stream_end(&self, chat: &str, stream_id: &str, full: &str) -> (String, String) {
        let streams = lock(&self.streams);
        let Some(st) = streams.get(&stream_key(chat, stream_id)) else {
            return (full.to_owned(), String::new());
        };
        if st.consumed == 0 {
            return (full.to_owned(), st.run_id.clone());
        }
        let rest = if full.starts_with(&st.raw[..st.consumed]) {
            &full[st.consumed..]
        } else {
            // The final text differs from the deltas: skip as many characters as the blocks took.
            let n = st.raw[..st.consumed].chars().count();
            full.char_indices().nth(n).map_or("", |(i, _)| &full[i..])
        };
        let rest = if st.reopen_fence && !rest.trim().is_empty() {
            format!("```\n{rest}")
        } else {
            rest.to_owned()
        };
        (rest, st.run_id.clone())
    }

    /// Forgets a streamed answer whose end was sent (or kept for the user's next message, or failed for good).
    pub(super) fn forget_stream(&self, chat: &str, stream_id: &str) {
        lock(&self.streams).remove(&stream_key(chat, stream_id));
    }
}

/// What names an outbound message across the manager's retries: its chat, kind, text and files.
pub(super) fn delivery_key(chat: &str, kind: &str, content: &str, media: &[String]) -> String {
    let mut h = Sha256::new();
    for part in [chat, kind, content] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for m in media {
        h.update(m.as_bytes());
        h.update([0]);
    }
    to_hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_sent_by_their_extension_as_0_3_5() {
        assert_eq!(upload_kind("a.PNG"), (1, ITEM_IMAGE, "image_item"));
        assert_eq!(upload_kind("a.mov"), (2, ITEM_VIDEO, "video_item"));
        assert_eq!(upload_kind("a.silk"), (4, ITEM_VOICE, "voice_item"));
        assert_eq!(upload_kind("a.pdf"), (3, ITEM_FILE, "file_item"));
        assert_eq!(upload_kind("README"), (3, ITEM_FILE, "file_item"));
    }

    #[test]
    fn client_ids_are_0_3_5s_shape_and_stable_per_part() {
        let a = client_id("d1", "text:0");
        assert!(a.starts_with("nanobot-") && a.len() == 28, "{a}");
        assert_eq!(a, client_id("d1", "text:0"));
        assert_ne!(a, client_id("d1", "text:1"));
        assert_ne!(a, client_id("d2", "text:0"));
    }

    #[tokio::test]
    async fn the_local_budget_keeps_one_send_in_reserve_when_asked() {
        let s = WeixinSettings::from_block(&json!({"contextMessageBudget": 2})).unwrap();
        let ch = WeixinChannel::new(s, std::env::temp_dir(), std::env::temp_dir());
        assert!(ch.check_budget("c", 0).is_ok());
        assert!(ch.check_budget("c", 1).is_ok());
        lock(&ch.contexts).sends.insert("c".into(), 1);
        assert!(ch.check_budget("c", 0).is_ok());
        assert!(matches!(ch.check_budget("c", 1), Err(CallError::Quota(_))));
        lock(&ch.contexts).sends.insert("c".into(), 2);
        assert!(matches!(ch.check_budget("c", 0), Err(CallError::Quota(_))));
    }

    #[test]
    fn a_delivery_never_shows_its_keys() {
        let mut delivery = Delivery::new();
        delivery.keys.insert("media:0".into(), [0xAB; 16]);
        delivery.done.insert("media:0".into());
        let shown = format!("{delivery:?}");
        assert!(!shown.contains("171, 171"), "{shown}");
        assert!(shown.contains("keys: 1") && shown.contains("media:0"), "{shown}");
        let kept = Deferred {
            key: "k".into(),
            delivery,
            content: "c".into(),
            media: vec![],
        };
        assert!(!format!("{kept:?}").contains("171, 171"));
    }

    #[tokio::test]
    async fn only_the_least_recently_grown_streams_are_forgotten() {
        let s = WeixinSettings::from_block(&json!({"blockStreaming": true, "blockStreamingMinChars": 200}))
            .unwrap();
        let ch = WeixinChannel::new(s, std::env::temp_dir(), std::env::temp_dir());
        // Short deltas: nothing is sent (no call is made).
        for i in 0..MAX_STREAMS {
            ch.stream_delta("a", &format!("s{i}"), "x").await;
        }
        ch.stream_delta("a", "s0", "y").await;
        ch.stream_delta("a", "new", "z").await;
        {
            let streams = lock(&ch.streams);
            assert_eq!(streams.len(), MAX_STREAMS);
            assert!(
                !streams.contains_key(&stream_key("a", "s1")),
                "s1 grew least recently"
            );
            assert_eq!(streams[&stream_key("a", "s0")].raw, "xy", "the others are kept");
            assert_eq!(streams[&stream_key("a", "new")].raw, "z");
        }
        // The end of a stream leaves it for a retry until it is forgotten.
        assert_eq!(ch.stream_end("a", "s0", "xy"), ("xy".to_owned(), String::new()));
        assert!(lock(&ch.streams).contains_key(&stream_key("a", "s0")));
        ch.forget_stream("a", "s0");
        assert!(!lock(&ch.streams).contains_key(&stream_key("a", "s0")));
    }

    #[test]
    fn delivery_keys_name_chat_kind_text_and_files() {
        let k = delivery_key("a", "reply", "hi", &[]);
        assert_eq!(k, delivery_key("a", "reply", "hi", &[]));
        assert_ne!(k, delivery_key("b", "reply", "hi", &[]));
        assert_ne!(k, delivery_key("a", "progress", "hi", &[]));
        assert_ne!(k, delivery_key("a", "reply", "hi", &["f".into()]));
    }
}
