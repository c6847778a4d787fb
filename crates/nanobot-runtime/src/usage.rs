//! The usage ledger from `config.json`: `agents.defaults.budget` and `agents.defaults.prices` as the
//! `nanobot-usage` types, the ledger in the data directory, days in the agent's time zone.

use std::sync::Arc;

use nanobot_config::{Config, LimitConfig, LimitsConfig};
use nanobot_usage::{Budget, Limit, Limits, Price, PriceTable, UsageLedger};

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
