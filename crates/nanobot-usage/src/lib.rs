//! What the assistant spends, and the limits it keeps to.
//!
//! - [`UsageRecord`]: one model call as the provider reported it (tokens in, out, served from the cache), with who
//!   it was for: the session, the chat, the person (the message's principal) or the unattended run (cron, the
//!   heartbeat, a subagent), and the model.
//! - [`PriceTable`]: prices per million tokens by model, well-known defaults a user can override; a model without
//!   a price has an unknown cost, never a zero one.
//! - [`Budget`]: limits per person, per chat and overall, per day and per month, in tokens or money.
//! - [`UsageLedger`]: the home's ledger (`<data dir>/usage/<YYYY-MM>.jsonl`, one JSON line per call, months in the
//!   agent's time zone). It keeps the current day's and month's totals as lines are appended (by this process,
//!   another process on the same home, or other replicas through a [`nanobot_util::SharedFiles`] store) and
//!   [`UsageLedger::check`]s a budget before a turn and before each model call: [`BudgetExceeded`] names the limit
//!   and when it resets.
//! - [`Report`]: totals grouped by day, model, chat or person, for `/usage` and `nanobot usage`.

mod budget;
mod error;
mod ledger;
mod price;
mod record;
mod report;

pub use budget::{Budget, BudgetExceeded, Limit, Limits, Period, Scope};
pub use error::UsageError;
pub use ledger::UsageLedger;
pub use price::{Price, PriceTable};
pub use record::{Tally, UsageRecord};
pub use report::{GroupBy, Report, ReportRow};
