//! The home's usage ledger: monthly JSONL files, the current totals, budget checks.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use nanobot_util::{SharedFile, SharedFiles, SharedFilesError, lock};

use crate::budget::{Budget, BudgetExceeded, Period, Scope, period_bounds, reached};
use crate::error::UsageError;
use crate::price::PriceTable;
use crate::record::{Tally, UsageRecord};

/// How often a record is appended again after another replica changed the file first.
const ATTEMPTS: usize = 8;

/// The usage ledger of one home. See the [crate docs](crate).
///
/// Its methods block (file work, and the shared store's round trips when there is one): async callers run them
/// on a blocking pool.
pub struct UsageLedger {
    dir: PathBuf,
    tz: Tz,
    prices: PriceTable,
    budget: Budget,
    shared: Option<Arc<dyn SharedFiles>>,
    state: Mutex<State>,
    observers: Mutex<Vec<Observer>>,
}

/// Told of each call this process records.
type Observer = Arc<dyn Fn(&UsageRecord) + Send + Sync>;

impl std::fmt::Debug for UsageLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageLedger")
            .field("dir", &self.dir)
            .field("tz", &self.tz)
            .field("prices", &self.prices)
            .field("budget", &self.budget)
            .field("shared", &self.shared.is_some())
            .field("observers", &lock(&self.observers).len())
            .finish_non_exhaustive()
    }
}

/// What is folded of the current month's file.
#[derive(Debug, Default)]
struct State {
    /// The month file folded (`2026-11`); empty before the first refresh.
    month: String,
    /// Its bytes folded so far (complete lines only).
    offset: u64,
    /// The start of the day the day totals are for.
    day_start: Option<DateTime<Utc>>,
    day: HashMap<Scope, Tally>,
    month_totals: HashMap<Scope, Tally>,
}

impl UsageLedger {
    /// The ledger kept in `<data_dir>/usage/`, with days and months in `tz`, the default prices and no budget.
    pub fn new(data_dir: &Path, tz: Tz) -> Self {
        Self {
            dir: data_dir.join("usage"),
            tz,
            prices: PriceTable::default(),
            budget: Budget::default(),
            shared: None,
            state: Mutex::default(),
            observers: Mutex::default(),
        }
    }

    /// Calls `observer` with each call this process records from now on, once it is stored (not with what other
    /// processes or replicas append): what a process's own counters (the gateway's `/metrics`) are fed from, so
    /// they count every recorded call, in a turn or not.
    pub fn on_record(&self, observer: impl Fn(&UsageRecord) + Send + Sync + 'static) {
        lock(&self.observers).push(Arc::new(observer));
    }

    /// With these prices.
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// With this budget.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Kept in a store shared with other replicas too (`usage/<YYYY-MM>.jsonl` in the store): their calls count
    /// in the totals and against the budgets here.
    pub fn with_shared(mut self, files: Arc<dyn SharedFiles>) -> Self {
        self.shared = Some(files);
        self
    }

    /// The directory of the month files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The time zone of days and months.
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The prices.
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// The budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The file of the month holding `ts`, and its name in the shared store.
    fn month_file(&self, ts: DateTime<Utc>) -> (String, PathBuf) {
        let month = ts.with_timezone(&self.tz).format("%Y-%m").to_string();
        let path = self.dir.join(format!("{month}.jsonl"));
        (month, path)
    }

    /// Appends one call to the ledger (and publishes it to the shared store when there is one).
    pub fn record(&self, record: &UsageRecord) -> Result<(), UsageError> {
        let mut line = serde_json::to_vec(record).map_err(|e| UsageError::Io {
            op: "encode a record for",
            path: self.dir.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        let (month, path) = self.month_file(record.ts);
        let name = format!("usage/{month}.jsonl");
        // Held while appending: one record at a time from this process (the shared store's conflicts assume it).
        let state = lock(&self.state);
        let mut stored = false;
        for _ in 0..ATTEMPTS {
            if let Some(files) = &self.shared {
                files.pull(SharedFile::new(&name, &path))?;
            }
            append(&path, &line)?;
            let Some(files) = &self.shared else {
                stored = true;
                break;
            };
            match files.push(SharedFile::new(&name, &path)) {
                Ok(()) => {
                    stored = true;
                    break;
                }
                // The local copy is the stored one again: append to it anew.
                Err(SharedFilesError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !stored {
            return Err(SharedFilesError::Unavailable {
                name,
                what: "append a record".to_owned(),
                reason: format!("other replicas kept changing it first ({ATTEMPTS} tries)"),
            }
            .into());
        }
        // Counted at the next `check` or `totals`, which read what was appended since: a process that only
        // records (a one-shot turn without a budget) never reads the month's file.
        drop(state);
        let observers = lock(&self.observers).clone();
        for observe in observers {
            observe(record);
        }
        Ok(())
    }

    /// Brings the totals up to what the ledger holds at `now` (a new day or month starts from zero).
    fn refresh(&self, state: &mut State, now: DateTime<Utc>) -> Result<(), UsageError> {
        let (month, path) = self.month_file(now);
        let day_start = period_bounds(now, self.tz, Period::Day).0.with_timezone(&Utc);
        if state.month != month || state.day_start != Some(day_start) {
            *state = State {
                month: month.clone(),
                day_start: Some(day_start),
                ..State::default()
            };
        }
        if let Some(files) = &self.shared {
            files.pull(SharedFile::new(&format!("usage/{month}.jsonl"), &path))?;
        }
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(UsageError::Io {
                    op: "open",
                    path,
                    source,
                });
            }
        };
        let io = |op, source| UsageError::Io {
            op,
            path: path.clone(),
            source,
        };
        let len = file.metadata().map_err(|e| io("read", e))?.len();
        if len < state.offset {
            // Rewritten (another replica's copy replaced this one): count it again from the start.
            state.offset = 0;
            state.day.clear();
            state.month_totals.clear();
        }
        if len == state.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(state.offset))
            .map_err(|e| io("read", e))?;
        // Line by line, up to what the file held when looked at: memory follows one line, not the month.
        let mut reader = BufReader::new(file.take(len - state.offset));
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| io("read", e))?;
            // The end, or a line another process is still appending: folded next time.
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            let at = state.offset;
            state.offset += n as u64;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<UsageRecord>(&line) {
                Ok(record) => self.fold(state, &record),
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    byte = at,
                    error = %e,
                    "a usage record cannot be read; it is not counted"
                ),
            }
        }
        Ok(())
    }

    fn fold(&self, state: &mut State, record: &UsageRecord) {
        let cost = self.prices.cost(record);
        let today = state.day_start.is_some_and(|start| record.ts >= start);
        for scope in scopes(record.person.as_deref(), &record.chat) {
            state
                .month_totals
                .entry(scope.clone())
                .or_default()
                .add(record, cost);
            if today {
                state.day.entry(scope).or_default().add(record, cost);
            }
        }
    }

    /// What `scope` spent today and this month.
    pub fn totals(&self, scope: &Scope) -> Result<(Tally, Tally), UsageError> {
        let mut state = lock(&self.state);
        self.refresh(&mut state, Utc::now())?;
        Ok((
            state.day.get(scope).copied().unwrap_or_default(),
            state.month_totals.get(scope).copied().unwrap_or_default(),
        ))
    }

    /// Whether a turn for `person` (none: unattended work) in `chat` may go on now: the first limit reached, if
    /// any, checked per day before per month, overall, then the chat's, then the person's.
    pub fn check(&self, person: Option<&str>, chat: &str) -> Result<Result<(), BudgetExceeded>, UsageError> {
        self.check_at(person, chat, Utc::now())
    }

    /// [`UsageLedger::check`] at `now`.
    pub fn check_at(
        &self,
        person: Option<&str>,
        chat: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<(), BudgetExceeded>, UsageError> {
        if self.budget.is_unlimited() {
            return Ok(Ok(()));
        }
        let mut state = lock(&self.state);
        self.refresh(&mut state, now)?;
        for period in [Period::Day, Period::Month] {
            for scope in scopes(person, chat) {
                let limit = *self.budget.limits(&scope).of(period);
                if limit.is_unlimited() {
                    continue;
                }
                let totals = match period {
                    Period::Day => &state.day,
                    Period::Month => &state.month_totals,
                };
                let spent = totals.get(&scope).copied().unwrap_or_default();
                if reached(&limit, &spent) {
                    return Ok(Err(BudgetExceeded {
                        scope,
                        period,
                        limit,
                        spent,
                        resets_at: period_bounds(now, self.tz, period).1,
                    }));
                }
            }
        }
        Ok(Ok(()))
    }
}

/// The scopes a call counts in: overall, its chat, and its person when it has one.
fn scopes(person: Option<&str>, chat: &str) -> impl Iterator<Item = Scope> {
    [
        Some(Scope::Overall),
        Some(Scope::Chat(chat.to_owned())),
        person.map(|p| Scope::Person(p.to_owned())),
    ]
    .into_iter()
    .flatten()
}

/// One write at the end of the file (a line is never interleaved with another process's); the folder is made
/// the first time.
fn append(path: &Path, line: &[u8]) -> Result<(), UsageError> {
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(path);
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path
            .parent()
            .map_or(Err(e), std::fs::create_dir_all)
            .and_then(|()| open()),
        other => other,
    };
    file.and_then(|mut f| f.write_all(line))
        .map_err(|source| UsageError::Io {
            op: "append to",
            path: path.to_owned(),
            source,
        })
}
