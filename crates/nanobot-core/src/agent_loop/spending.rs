//! The spending part: every model call recorded in the usage ledger with who it was for, the budget checked
//! before a turn starts and after each model call (a turn over a limit stops before its next call), and the
//! `/usage` text. Without a ledger nothing is recorded and nothing is limited.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use nanobot_bus::{InboundMessage, Principal};
use nanobot_providers::Usage;
use nanobot_usage::{BudgetExceeded, Scope, Tally, UsageLedger, UsageRecord};
use nanobot_util::lock;
use tokio_util::sync::CancellationToken;

use crate::error::BoxError;
use crate::hook::{AgentHook, IterationEnd, ToolBatch, Veto};

/// Who a turn's calls are charged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payer {
    /// `channel:chat_id`.
    chat: String,
    /// `channel:user_id` of the person the turn acts for; `None` for unattended work.
    person: Option<String>,
    /// The unattended run (`cron`, `heartbeat`, `trigger`, `report`, `subagent`).
    run: Option<String>,
}

impl Payer {
    /// The payer of a turn of `msg` answering in `channel`/`chat_id`: the person the message speaks for (as
    /// `channel:user_id`, the display name of `id|name` left out), or the unattended run, in that chat.
    pub(super) fn of(msg: &InboundMessage, channel: &str, chat_id: &str) -> Self {
        let (person, run) = match msg.principal {
            Principal::Person => {
                let id = msg.sender_id.split('|').next().unwrap_or(&msg.sender_id);
                (Some(format!("{}:{id}", msg.channel)), None)
            }
            Principal::Unattended { run } => (
                None,
                serde_json::to_value(run)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned)),
            ),
            // A kind of principal this version does not know acts for nobody it could charge.
            _ => (None, Some("unattended".to_owned())),
        };
        Self {
            chat: format!("{channel}:{chat_id}"),
            person,
            run,
        }
    }

    /// `channel:chat_id`.
    pub(super) fn chat(&self) -> &str {
        &self.chat
    }

    /// `channel:user_id` of the person, `None` for unattended work.
    pub(super) fn person(&self) -> Option<&str> {
        self.person.as_deref()
    }

    /// The unattended run, `None` for a person's turn.
    pub(super) fn run(&self) -> Option<&str> {
        self.run.as_deref()
    }

    /// One call of `model` in `session` charged to this payer.
    fn record(&self, session: &str, model: &str, usage: &Usage) -> UsageRecord {
        UsageRecord {
            ts: Utc::now(),
            session: session.to_owned(),
            chat: self.chat.clone(),
            person: self.person.clone(),
            run: self.run.clone(),
            model: model.to_owned(),
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
            cached: usage.cache_read_tokens.unwrap_or(0),
            reasoning: usage.reasoning_tokens.unwrap_or(0),
        }
    }

    /// Unattended work `run` (the heartbeat's own model calls) for the chat `channel:chat_id`.
    pub(crate) fn unattended(chat: String, run: &str) -> Self {
        Self {
            chat,
            person: None,
            run: Some(run.to_owned()),
        }
    }
}

/// The loop's ledger, and who each session's latest turn was for (its subagents are charged to them).
#[derive(Debug, Default)]
pub(crate) struct Spending {
    ledger: Option<Arc<UsageLedger>>,
    payers: Mutex<HashMap<String, Payer>>,
}

impl Spending {
    pub(super) fn new(ledger: Option<Arc<UsageLedger>>) -> Self {
        Self {
            ledger,
            payers: Mutex::default(),
        }
    }

    /// The ledger, if there is one.
    pub(crate) fn ledger(&self) -> Option<&Arc<UsageLedger>> {
        self.ledger.as_ref()
    }

    /// The limit `payer` has reached, if any (a ledger that cannot be read is logged and limits nothing).
    pub(crate) async fn over_budget(&self, payer: &Payer) -> Option<BudgetExceeded> {
        let ledger = self.ledger.clone()?;
        if ledger.budget().is_unlimited() {
            return None;
        }
        over_budget(ledger, payer.clone()).await
    }

    /// Records one model call made outside a run (the heartbeat's decision and its notification gate); a call
    /// the provider reported no usage for is not recorded. A ledger that cannot be written is logged.
    pub(crate) async fn record(&self, session: &str, payer: &Payer, model: &str, usage: Option<Usage>) {
        let (Some(ledger), Some(usage)) = (self.ledger.clone(), usage) else {
            return;
        };
        let record = payer.record(session, model, &usage);
        match tokio::task::spawn_blocking(move || ledger.record(&record)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a model call could not be recorded in the usage ledger")
            }
            Err(e) => tracing::warn!(error = %e, "recording a model call failed"),
        }
    }

    /// The hook that records a turn's calls in `session` for `payer` and stops the turn (`cancel`) once a limit
    /// is reached; `None` without a ledger.
    pub(super) fn turn_hook(
        &self,
        session: &str,
        payer: Payer,
        cancel: CancellationToken,
    ) -> Option<Arc<SpendingHook>> {
        let ledger = self.ledger.clone()?;
        lock(&self.payers).insert(session.to_owned(), payer.clone());
        Some(Arc::new(SpendingHook {
            ledger,
            session: session.to_owned(),
            payer,
            cancel,
            stopped: Mutex::default(),
            deferred: Some(Mutex::default()),
        }))
    }

    /// The hook of a subagent of `parent`: its calls are charged to the chat (and person) of the parent's latest
    /// turn, as a `subagent` run, and it is held by their budget (`cancel`, the run's token, is cancelled before
    /// its next model call once over).
    pub(super) fn subagent_hook(&self, parent: &str, cancel: CancellationToken) -> Option<Arc<SpendingHook>> {
        let ledger = self.ledger.clone()?;
        let mut payer = lock(&self.payers).get(parent).cloned().unwrap_or_else(|| Payer {
            chat: parent.to_owned(),
            person: None,
            run: None,
        });
        payer.run = Some("subagent".to_owned());
        Some(Arc::new(SpendingHook {
            ledger,
            session: parent.to_owned(),
            payer,
            cancel,
            stopped: Mutex::default(),
            deferred: None,
        }))
    }

    /// The `/usage` answer: this chat's and this person's calls, tokens and cost today and this month, with
    /// their limits.
    pub(super) async fn usage_text(&self, payer: &Payer) -> String {
        let Some(ledger) = self.ledger.clone() else {
            return "Usage is not recorded here (no usage ledger is configured).".to_owned();
        };
        let mut scopes = vec![("This chat", Scope::Chat(payer.chat.clone()))];
        if let Some(p) = &payer.person {
            scopes.push(("You", Scope::Person(p.clone())));
        }
        let ledger2 = ledger.clone();
        let read = tokio::task::spawn_blocking(move || {
            scopes
                .into_iter()
                .map(|(label, scope)| {
                    let totals = ledger2.totals(&scope);
                    (label, scope, totals)
                })
                .collect::<Vec<_>>()
        })
        .await;
        let Ok(rows) = read else {
            return "Usage cannot be read right now.".to_owned();
        };
        let mut out = String::from("📊 Usage");
        for (label, scope, totals) in rows {
            let (day, month) = match totals {
                Ok(t) => t,
                Err(e) => return format!("Usage cannot be read: {e}"),
            };
            let limits = ledger.budget().limits(&scope);
            out.push_str(&format!(
                "\n{label}: today {}{}; this month {}{}",
                figures(&day),
                limit_text(&limits.daily),
                figures(&month),
                limit_text(&limits.monthly),
            ));
        }
        out.push_str(&format!(
            "\n(days and months in {}; `nanobot usage` on the host shows more)",
            ledger.time_zone().name()
        ));
        out
    }
}

fn figures(t: &Tally) -> String {
    let cached = match t.cached {
        0 => String::new(),
        n => format!(" ({n} cached)"),
    };
    let reasoning = match t.reasoning {
        0 => String::new(),
        n => format!(", {n} of them reasoning"),
    };
    format!(
        "{} calls, {} tokens ({} in{cached}, {} out{reasoning}), cost {}",
        t.calls,
        t.tokens(),
        t.input,
        t.output,
        t.cost_text()
    )
}

/// ` (limit 1000 tokens)`, or nothing without a limit.
fn limit_text(l: &nanobot_usage::Limit) -> String {
    if l.is_unlimited() {
        String::new()
    } else {
        format!(" (limit {l})")
    }
}

async fn over_budget(ledger: Arc<UsageLedger>, payer: Payer) -> Option<BudgetExceeded> {
    let checked =
        tokio::task::spawn_blocking(move || ledger.check(payer.person.as_deref(), &payer.chat)).await;
    match checked {
        Ok(Ok(verdict)) => verdict.err(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the usage ledger cannot be read; the budget is not checked");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "checking the budget failed");
            None
        }
    }
}

/// Records each model call of a run (a turn or a subagent's) and stops it once over budget.
pub(super) struct SpendingHook {
    ledger: Arc<UsageLedger>,
    session: String,
    payer: Payer,
    cancel: CancellationToken,
    stopped: Mutex<Option<BudgetExceeded>>,
    /// A turn's hook: the record of its last call (the final answer, after which nothing is checked against the
    /// budget in this turn), kept for the turn's save, which writes it in the same trip to the blocking pool
    /// ([`SpendingHook::take_deferred`]). `None` for a subagent's, which records every call as it goes.
    deferred: Option<Mutex<Vec<UsageRecord>>>,
}

/// Usage records kept for a turn's save ([`SpendingHook::take_deferred`]).
pub(super) struct DeferredUsage {
    ledger: Arc<UsageLedger>,
    records: Vec<UsageRecord>,
}

impl DeferredUsage {
    /// Appends the records to the ledger (blocking: run on the blocking pool); a failure is logged.
    pub(super) fn write(self) {
        for record in &self.records {
            if let Err(e) = self.ledger.record(record) {
                tracing::warn!(error = %e, "a model call could not be recorded in the usage ledger");
            }
        }
    }
}

impl SpendingHook {
    /// The limit that stopped the turn, if one did.
    pub(super) fn stopped(&self) -> Option<BudgetExceeded> {
        lock(&self.stopped).clone()
    }

    /// The records kept for the turn's save, if any: the caller writes them ([`DeferredUsage::write`]).
    pub(super) fn take_deferred(&self) -> Option<DeferredUsage> {
        let records = std::mem::take(&mut *lock(self.deferred.as_ref()?));
        (!records.is_empty()).then(|| DeferredUsage {
            ledger: self.ledger.clone(),
            records,
        })
    }

    /// Records one call in the ledger (a call without reported usage is not recorded).
    async fn record(&self, model: &str, usage: Option<Usage>) -> Result<(), BoxError> {
        let Some(usage) = usage else {
            return Ok(());
        };
        let record = self.payer.record(&self.session, model, &usage);
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledger.record(&record))
            .await
            .map_err(|e| -> BoxError { Box::new(e) })??;
        Ok(())
    }
}

#[async_trait]
impl crate::subagent::BudgetWatch for SpendingHook {
    async fn reached(&self) -> Option<String> {
        if self.ledger.budget().is_unlimited() {
            return None;
        }
        let over = over_budget(self.ledger.clone(), self.payer.clone()).await?;
        Some(over.to_string())
    }

    fn stopped(&self) -> Option<String> {
        SpendingHook::stopped(self).map(|o| o.to_string())
    }
}

#[async_trait]
impl AgentHook for SpendingHook {
    /// A call that asked for tools is recorded before they run, so what they start (a subagent) is checked
    /// against figures that include it.
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        self.record(batch.model, batch.usage).await?;
        Ok(Vec::new())
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        // A final answer ends the turn anyway: only a turn that would call the model again is stopped.
        if ctx.tool_calls.is_empty() {
            if let (Some(deferred), Some(usage)) = (&self.deferred, ctx.usage) {
                let record = self.payer.record(&self.session, ctx.model, &usage);
                lock(deferred).push(record);
                return Ok(());
            }
            return self.record(ctx.model, ctx.usage).await;
        }
        if self.ledger.budget().is_unlimited() {
            return Ok(());
        }
        if let Some(over) = over_budget(self.ledger.clone(), self.payer.clone()).await {
            tracing::info!(session = %self.session, limit = %over.config_key(), "a run reached a budget; stopping it before its next model call");
            *lock(&self.stopped) = Some(over);
            self.cancel.cancel();
        }
        Ok(())
    }
}
