//! The usage ledger from `config.json`: `agents.defaults.budget` and `agents.defaults.prices` as the
//! `nanobot-usage` types, the ledger in the data directory, days in the agent's time zone.

use std::sync::Arc;

use futures::StreamExt as _;
use nanobot_config::{Config, LimitConfig, LimitsConfig};
use std::future::Future;
use std::pin::Pin;

use nanobot_providers::{
    ChatRequest, ChatResponse, EventStream, Provider, ProviderError, StreamEvent, Usage,
};
use nanobot_usage::{Budget, Limit, Limits, Price, PriceTable, UsageLedger, UsageRecord};

use crate::{Environment, RuntimeError};

/// The home's usage ledger with the configured budget and prices (kept in `shared` too when given).
pub fn usage_ledger(
    config: &Config,
    env: &Environment,
    shared: Option<Arc<dyn nanobot_util::SharedFiles>>,
) -> Result<UsageLedger, RuntimeError> {
    let tz = crate::wiring::agent_settings(config, env)?.timezone;
    Ok(ledger_in(config, &env.paths().data_dir(), tz, shared))
}

/// The ledger in `data_dir`, days and months in `tz`.
pub(crate) fn ledger_in(
    config: &Config,
    data_dir: &std::path::Path,
    tz: chrono_tz::Tz,
    shared: Option<Arc<dyn nanobot_util::SharedFiles>>,
) -> UsageLedger {
    let mut ledger = UsageLedger::new(data_dir, tz)
        .with_prices(prices(config))
        .with_budget(budget(config));
    if let Some(files) = shared {
        ledger = ledger.with_shared(files);
    }
    ledger
}

/// `agents.defaults.budget`.
pub fn budget(config: &Config) -> Budget {
    let b = &config.agents.defaults.budget;
    Budget {
        overall: limits(&b.overall),
        per_person: limits(&b.per_person),
        per_chat: limits(&b.per_chat),
    }
}

/// The well-known prices with `agents.defaults.prices` over them.
pub fn prices(config: &Config) -> PriceTable {
    PriceTable::default().with_overrides(config.agents.defaults.prices.iter().map(|(model, p)| {
        let mut price = Price::new(p.input, p.output);
        price.cached_input = p.cached_input;
        (model.clone(), price)
    }))
}

fn limits(l: &LimitsConfig) -> Limits {
    Limits {
        daily: limit(&l.daily),
        monthly: limit(&l.monthly),
    }
}

fn limit(l: &LimitConfig) -> Limit {
    Limit {
        tokens: l.tokens,
        cost: l.cost,
    }
}

/// A provider whose calls are recorded in the usage ledger as the unattended `run` (`memory`: consolidation and
/// Dream, which call the model outside any turn), in the chat `system:<run>`.
#[derive(Debug)]
pub(crate) struct MeteredProvider {
    inner: Arc<dyn Provider>,
    ledger: Arc<UsageLedger>,
    run: &'static str,
}

impl MeteredProvider {
    pub(crate) fn new(inner: Arc<dyn Provider>, ledger: Arc<UsageLedger>, run: &'static str) -> Self {
        Self { inner, ledger, run }
    }
}

impl MeteredProvider {
    /// Records one call's usage on the blocking pool (the ledger's file work blocks); the handle finishes when
    /// it is written.
    fn record(
        ledger: &Arc<UsageLedger>,
        run: &'static str,
        model: &str,
        u: &Usage,
    ) -> tokio::task::JoinHandle<()> {
        let record = UsageRecord {
            run: Some(run.to_owned()),
            input: u.prompt_tokens,
            output: u.completion_tokens,
            cached: u.cache_read_tokens.unwrap_or(0),
            reasoning: u.reasoning_tokens.unwrap_or(0),
            ..UsageRecord::now(run, format!("system:{run}"), model)
        };
        let ledger = ledger.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = ledger.record(&record) {
                tracing::warn!(error = %e, "a model call could not be recorded in the usage ledger");
            }
        })
    }
}

// Written out rather than with `#[async_trait]`: the one async method, `chat`, keeps the inner provider's own
// (it may send a request that does not stream).
impl Provider for MeteredProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let (ledger, run, model) = (self.ledger.clone(), self.run, request.model.clone());
        self.inner
            .stream(request)
            .inspect(move |event| {
                if let Ok(StreamEvent::Usage(u)) = event {
                    // A stream's events are not awaited: the record is written in the background.
                    drop(Self::record(&ledger, run, &model, u));
                }
            })
            .boxed()
    }

    fn chat<'a, 'b>(
        &'a self,
        request: ChatRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ChatResponse, ProviderError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let model = request.model.clone();
            let response = nanobot_core::traced_chat(self.inner.as_ref(), request).await?;
            if let Some(u) = &response.usage {
                let _written = Self::record(&self.ledger, self.run, &model, u).await;
            }
            Ok(response)
        })
    }
}
