//! "Typing": the ticket from `getconfig` (cached as 0.3.5 caches it), `sendtyping` on and off.

use super::*;

/// The typing calls, with what they need, so that they run in tasks of their own.
#[derive(Clone)]
pub(super) struct Typist {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) token: String,
    pub(super) route_tag: Option<String>,
    pub(super) tickets: Arc<Mutex<Map<String, Value>>>,
}

impl Typist {
    pub(super) async fn post(&self, path: &str, body: Value) -> Result<Value, CallError> {
        let target = Target {
            base: &self.base,
            token: Some(&self.token),
            route_tag: self.route_tag.as_deref(),
        };
        let answer = api::post(&self.client, &target, path, body, true, CONFIG_TIMEOUT).await?;
        api::check(path.trim_start_matches("ilink/bot/"), &answer, &[&self.token])?;
        Ok(answer)
    }

    /// The user's typing ticket: the cached one while it is fresh, else asked through `getconfig` (kept for a
    /// random time up to 24 h; after a failure asked again after 2 s, doubling up to 1 h), as 0.3.5.
    pub(super) async fn ticket(&self, user: &str, context_token: &str) -> String {
        let now = now_secs();
        let cached = lock(&self.tickets).get(user).cloned();
        if let Some(entry) = &cached
            && now < entry["next_fetch_at"].as_f64().unwrap_or(0.0)
        {
            return str_at(entry, "ticket").to_owned();
        }
        let ctx = if context_token.is_empty() {
            Value::Null
        } else {
            json!(context_token)
        };
        let answer = self
            .post(
                "ilink/bot/getconfig",
                json!({"ilink_user_id": user, "context_token": ctx}),
            )
            .await;
        let mut tickets = lock(&self.tickets);
        match answer {
            Ok(v) => {
                let ticket = str_at(&v, "typing_ticket").to_owned();
                tickets.insert(
                    user.to_owned(),
                    json!({"ticket": ticket, "ever_succeeded": true,
                           "next_fetch_at": now + rand::random::<f64>() * TICKET_TTL_SECS,
                           "retry_delay_s": TICKET_RETRY_SECS as u64}),
                );
                ticket
            }
            Err(e) => {
                tracing::debug!(error = %e, "weixin: no typing ticket");
                let entry = tickets.entry(user.to_owned()).or_insert_with(|| {
                    json!({"ticket": "", "ever_succeeded": false, "next_fetch_at": 0.0,
                                              "retry_delay_s": TICKET_RETRY_SECS as u64})
                });
                let delay = if cached.is_some() {
                    (entry["retry_delay_s"].as_f64().unwrap_or(TICKET_RETRY_SECS) * 2.0)
                        .min(TICKET_MAX_RETRY_SECS)
                } else {
                    TICKET_RETRY_SECS
                };
                entry["next_fetch_at"] = json!(now + delay);
                entry["retry_delay_s"] = json!(delay);
                str_at(entry, "ticket").to_owned()
            }
        }
    }

    pub(super) async fn send(&self, user: &str, ticket: &str, status: i64) {
        if ticket.is_empty() {
            return;
        }
        let body = json!({"ilink_user_id": user, "typing_ticket": ticket, "status": status});
        if let Err(e) = self.post("ilink/bot/sendtyping", body).await {
            tracing::debug!(error = %e, status, "weixin: typing not changed");
        }
    }
}

/// A user's "typing" task: stopped by `stop`, telling WeChat it stopped when `clear` is set.
pub(super) struct Typing {
    pub(super) stop: CancellationToken,
    pub(super) clear: Arc<AtomicBool>,
}

impl WeixinChannel {
    /// "Typing" from now until the answer is sent (said again every 5 s, at most [`TYPING_MAX`]); when it is
    /// stopped with `clear` (or runs out), WeChat is told it stopped.
    pub(super) fn start_typing(&self, user: &str, ctx: &str) {
        let Some(typist) = self.typist() else {
            return;
        };
        let stop = CancellationToken::new();
        let clear = Arc::new(AtomicBool::new(false));
        let (user_owned, ctx) = (user.to_owned(), ctx.to_owned());
        let (task_stop, task_clear) = (stop.clone(), clear.clone());
        tokio::spawn(async move {
            let ticket = tokio::select! {
                () = task_stop.cancelled() => return,
                t = typist.ticket(&user_owned, &ctx) => t,
            };
            if ticket.is_empty() {
                return;
            }
            typist.send(&user_owned, &ticket, TYPING_ON).await;
            let until = tokio::time::Instant::now() + TYPING_MAX;
            let ran_out = loop {
                tokio::select! {
                    () = task_stop.cancelled() => break false,
                    () = tokio::time::sleep(TYPING_KEEPALIVE) => {
                        if tokio::time::Instant::now() >= until {
                            break true;
                        }
                        typist.send(&user_owned, &ticket, TYPING_ON).await;
                    }
                }
            };
            if ran_out || task_clear.load(Ordering::SeqCst) {
                typist.send(&user_owned, &ticket, TYPING_OFF).await;
            }
        });
        if let Some(old) = lock(&self.typing).insert(user.to_owned(), Typing { stop, clear }) {
            old.stop.cancel();
        }
    }

    /// Stops "typing" for `user`; with `clear`, WeChat is told (status 2) when it was told it started, or, for a
    /// message sent without one (a scheduled message), when a ticket is known.
    pub(super) fn stop_typing(&self, user: &str, clear: bool) {
        if let Some(t) = lock(&self.typing).remove(user) {
            t.clear.store(clear, Ordering::SeqCst);
            t.stop.cancel();
            return;
        }
        if !clear {
            return;
        }
        let ticket = lock(&self.tickets)
            .get(user)
            .map(|t| str_at(t, "ticket").to_owned())
            .unwrap_or_default();
        if ticket.is_empty() {
            return;
        }
        if let Some(typist) = self.typist() {
            let user = user.to_owned();
            tokio::spawn(async move { typist.send(&user, &ticket, TYPING_OFF).await });
        }
    }
}
