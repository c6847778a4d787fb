//! The worker pool: one worker per session key (turns of a session in order, sessions concurrently up to
//! `max_concurrent_sessions`).

#[allow(unused_imports)]
use super::*;

impl LoopInner {
    pub(super) fn enqueue(self: &Arc<Self>, job: Job) {
        let key = match system_target(&job.msg) {
            Some((_, _, key)) => key,
            None => self.session_key(&job.msg),
        };
        let mut workers = lock(&self.workers);
        let job = match workers.get(&key) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // Cannot fail: the receiver is alive.
        let _ = tx.send(job);
        workers.insert(key.clone(), tx);
        drop(workers);
        let this = self.clone();
        tokio::spawn(async move { this.worker(key, rx).await });
    }

    pub(super) async fn worker(self: Arc<Self>, key: String, mut rx: mpsc::UnboundedReceiver<Job>) {
        loop {
            let job = match rx.try_recv() {
                Ok(job) => job,
                Err(_) => {
                    let mut workers = lock(&self.workers);
                    match rx.try_recv() {
                        Ok(job) => job,
                        Err(_) => {
                            workers.remove(&key);
                            return;
                        }
                    }
                }
            };
            let permit = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => None,
                p = self.permits.clone().acquire_owned() => p.ok(),
            };
            let Some(_permit) = permit else {
                if let Some(tx) = job.reply {
                    let _ = tx.send(Err(CoreError::Stopped));
                }
                continue;
            };
            let Job { msg, opts, reply } = job;
            let publish = opts.publish;
            let result = self.handle(&key, &msg, opts).await;
            if publish && let Some(bus) = self.bus() {
                match &result {
                    Ok(r) => self.publish_reply(&bus, &msg, r).await,
                    Err(e) => {
                        tracing::error!(session = %key, error = %e, "turn failed");
                        let out = reply_for(&msg, format!("Sorry, something went wrong: {e}"));
                        let _ = bus.publish_outbound(out).await;
                    }
                }
            }
            if let Some(tx) = reply {
                let _ = tx.send(result);
            }
        }
    }

    pub(super) async fn handle(
        self: &Arc<Self>,
        key: &str,
        msg: &InboundMessage,
        mut opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        self.recover_checkpoint(key).await;
        let scope = self.memory_scope(key, msg, &opts).await;
        // Only a person's text is a command: a cron job, the heartbeat, a trigger or a report saying `/approve`
        // is plain text for the model.
        if msg.speaks_for_person()
            && let Some(Parsed::Known(cmd, args)) = commands::parse(&msg.content)
        {
            // `/goal <task>` is a turn on the whole message that may record the goal (as 0.3.5 runs it).
            if cmd == Command::Goal && !args.is_empty() {
                opts.goal = true;
            } else {
                return self
                    .queued_command(key, msg, cmd, &args, &scope)
                    .await
                    .map(TurnReply::command);
            }
        }
        let (channel, chat_id) = reply_route(msg);
        self.turn(key, msg, &channel, &chat_id, opts, &scope).await
    }
}
