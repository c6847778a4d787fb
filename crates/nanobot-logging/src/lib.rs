//! Where nanobot's log lines go, the same way for both binaries (`nanobot`, `nanobot-gateway`).
//!
//! **Owns:** the log filter's source (`NANOBOT_LOG`, then `RUST_LOG`, then the caller's default), whether
//! stderr gets colour (only on a terminal, never with `NO_COLOR` or `TERM=dumb`), and rotated log files
//! (`<dir>/nanobot.log.YYYY-MM-DD`, daily, the last 7 kept) for modes where stderr is the user's screen; and
//! (feature `otlp`, on by default) the spans of target [`TRACE_TARGET`] exported to an OpenTelemetry collector
//! over OTLP/HTTP when the plan names one ([`TracePlan`]). Those spans never reach the log lines, and log lines
//! never reach the collector.
//!
//! **Must not know:** configuration files or the process environment: the caller passes variables and
//! terminal facts in.
//!
//! ```
//! use std::collections::BTreeMap;
//! use nanobot_logging::{colour, filter_from};
//!
//! let vars = BTreeMap::from([("NO_COLOR".to_string(), "1".to_string())]);
//! let get = |k: &str| vars.get(k).map(String::as_str);
//! assert!(!colour(true, get));
//! assert_eq!(filter_from(get, "warn"), "warn");
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_appender::rolling::{Builder, Rotation};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, Layer, fmt};

#[cfg(feature = "otlp")]
mod otlp;

/// The `tracing` target of the spans that are exported (turns, model calls, tool calls, channel sends). Every
/// crate that makes such a span names this target; log lines never show them.
pub const TRACE_TARGET: &str = "nanobot::trace";

/// The variable naming the log filter (`tracing` `EnvFilter` syntax), honoured by both binaries.
pub const NANOBOT_LOG: &str = "NANOBOT_LOG";
/// The conventional filter variable, used when `NANOBOT_LOG` is unset.
pub const RUST_LOG: &str = "RUST_LOG";
/// Set (to anything but the empty string) to turn colour off (<https://no-color.org>).
pub const NO_COLOR: &str = "NO_COLOR";
/// How many daily log files are kept.
pub const KEPT_FILES: usize = 7;
/// The log files' name prefix.
pub const FILE_PREFIX: &str = "nanobot.log";
/// Lines waiting for the log-file writer thread; past this, new lines are dropped rather than block a turn.
///
/// `tracing-appender`'s default, 128,000, preallocates and touches a 4 MB queue at start: a sixth of an idle
/// gateway's memory (measured in `docs/benchmarks.md`, "Lean and fast"); each line's slot is 32 bytes, so this
/// queue is 32 KiB. The writer thread empties it as lines come; a burst of this many lines before it can is
/// already far past what a person reads.
pub const FILE_QUEUE_LINES: usize = 1024;

/// Where lines go and how they look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPlan {
    /// The `EnvFilter` directive.
    pub filter: String,
    /// Write to stderr.
    pub stderr: bool,
    /// ANSI colour on stderr (see [`colour`]).
    pub colour: bool,
    /// Also write to rotated files in this directory.
    pub dir: Option<PathBuf>,
    /// Export spans to an OpenTelemetry collector (`None`: off, the default).
    pub trace: Option<TracePlan>,
}

/// Where spans go: an OpenTelemetry collector's OTLP/HTTP endpoint (protobuf).
#[derive(Clone)]
pub struct TracePlan {
    /// The traces URL, used as written (`http://localhost:4318/v1/traces`).
    pub endpoint: String,
    /// Headers sent with every export (a collector's API key): never shown by `Debug`.
    pub headers: Vec<(String, String)>,
    /// `service.name` of the resource.
    pub service_name: String,
    /// `service.version` of the resource.
    pub service_version: String,
    /// TLS settings of the HTTP client (`None`: rustls' process-wide default provider must be installed).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for TracePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TracePlan")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("service_name", &self.service_name)
            .field("service_version", &self.service_version)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl PartialEq for TracePlan {
    fn eq(&self, other: &Self) -> bool {
        self.endpoint == other.endpoint
            && self.headers == other.headers
            && self.service_name == other.service_name
            && self.service_version == other.service_version
            && self.tls.is_some() == other.tls.is_some()
    }
}

impl Eq for TracePlan {}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoggingError {
    /// The filter directive is invalid.
    #[error("invalid log filter `{filter}` (from NANOBOT_LOG or RUST_LOG): {message}")]
    Filter {
        /// The directive.
        filter: String,
        /// What is wrong.
        message: String,
    },
    /// The log directory cannot be created or written.
    #[error("cannot write logs to {}: {message}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Spans cannot be exported to the collector named.
    #[error("cannot export traces to {endpoint}: {message}")]
    Traces {
        /// The traces URL.
        endpoint: String,
        /// What is wrong.
        message: String,
    },
    /// A global subscriber was already installed.
    #[error("logging was already set up")]
    AlreadySet,
}

/// Keeps the file writer alive; drop it last (it flushes the lines still queued).
#[derive(Debug)]
#[must_use = "dropping the guard stops file logging"]
pub struct LogGuard {
    _file: Option<WorkerGuard>,
    #[cfg(feature = "otlp")]
    _traces: Option<otlp::Exporting>,
}

/// The W3C `traceparent` of the current span when spans are exported (else `None`): what a message crossing the
/// bus carries so that the span handling it on the other side (a channel's send) has the right parent.
pub fn current_traceparent() -> Option<String> {
    #[cfg(feature = "otlp")]
    {
        otlp::current_traceparent()
    }
    #[cfg(not(feature = "otlp"))]
    {
        None
    }
}

/// Makes the span named by `traceparent` (from [`current_traceparent`]) the parent of `span`, which must not have
/// been entered yet. Nothing happens when spans are not exported or the value is malformed.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    #[cfg(feature = "otlp")]
    otlp::adopt_traceparent(span, traceparent);
    #[cfg(not(feature = "otlp"))]
    let _ = (span, traceparent);
}

/// The filter: `NANOBOT_LOG`, else `RUST_LOG`, else `default` (empty values count as unset).
pub fn filter_from<'a>(get: impl Fn(&str) -> Option<&'a str>, default: &str) -> String {
    [NANOBOT_LOG, RUST_LOG]
        .into_iter()
        .find_map(|k| get(k).map(str::trim).filter(|v| !v.is_empty()))
        .unwrap_or(default)
        .to_owned()
}

/// Colour only when stderr is a terminal, `NO_COLOR` is unset or empty, and `TERM` is not `dumb`.
pub fn colour<'a>(stderr_is_terminal: bool, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    stderr_is_terminal && get(NO_COLOR).is_none_or(str::is_empty) && get("TERM") != Some("dumb")
}

/// Installs the global subscriber for `plan`.
pub fn init(plan: &LogPlan) -> Result<LogGuard, LoggingError> {
    // Each output filters for itself, so that exported spans (`TRACE_TARGET`) never show in log lines.
    let line_filter = || {
        EnvFilter::try_new(format!("{},{LINES_SKIP_SPANS}", plan.filter)).map_err(|e| LoggingError::Filter {
            filter: plan.filter.clone(),
            message: e.to_string(),
        })
    };
    // A bad filter is an error even when no output would use it.
    line_filter()?;
    let (file_layer, guard) = match &plan.dir {
        Some(dir) => {
            let dir_error = |message: String| LoggingError::Dir {
                dir: dir.clone(),
                message,
            };
            let filter = line_filter()?;
            std::fs::create_dir_all(dir).map_err(|e| dir_error(e.to_string()))?;
            let appender = Builder::new()
                .rotation(Rotation::DAILY)
                .filename_prefix(FILE_PREFIX)
                .max_log_files(KEPT_FILES)
                .build(dir)
                .map_err(|e| dir_error(e.to_string()))?;
            let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
                .buffered_lines_limit(FILE_QUEUE_LINES)
                .finish(appender);
            (
                Some(
                    fmt::layer()
                        .with_writer(writer)
                        .with_ansi(false)
                        .with_filter(filter),
                ),
                Some(guard),
            )
        }
        None => (None, None),
    };
    let stderr_layer = match plan.stderr {
        true => Some(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(plan.colour)
                .with_target(false)
                .with_filter(line_filter()?),
        ),
        false => None,
    };
    let registry = tracing_subscriber::registry().with(file_layer).with(stderr_layer);
    #[cfg(feature = "otlp")]
    {
        let (trace_layer, traces) = match &plan.trace {
            Some(t) => {
                let (layer, exporting) = otlp::layer(t)?;
                (Some(layer), Some(exporting))
            }
            None => (None, None),
        };
        registry
            .with(trace_layer)
            .try_init()
            .map_err(|_| LoggingError::AlreadySet)?;
        Ok(LogGuard {
            _file: guard,
            _traces: traces,
        })
    }
    #[cfg(not(feature = "otlp"))]
    {
        if let Some(t) = &plan.trace {
            return Err(LoggingError::Traces {
                endpoint: t.endpoint.clone(),
                message: "this build has no OpenTelemetry export (cargo feature `otlp`)".into(),
            });
        }
        registry.try_init().map_err(|_| LoggingError::AlreadySet)?;
        Ok(LogGuard { _file: guard })
    }
}

/// Added to every log line filter: the exported spans are not log context.
const LINES_SKIP_SPANS: &str = "nanobot::trace=off";

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let none = vars(&[]);
        assert!(colour(true, |k| none.get(k).map(String::as_str)));
        assert!(!colour(false, |k| none.get(k).map(String::as_str)));
        let set = vars(&[("NO_COLOR", "1")]);
        assert!(!colour(true, |k| set.get(k).map(String::as_str)));
        let empty = vars(&[("NO_COLOR", "")]);
        assert!(colour(true, |k| empty.get(k).map(String::as_str)));
        let dumb = vars(&[("TERM", "dumb")]);
        assert!(!colour(true, |k| dumb.get(k).map(String::as_str)));
    }

    #[test]
    fn nanobot_log_wins_over_rust_log_over_the_default() {
        let both = vars(&[("NANOBOT_LOG", "debug"), ("RUST_LOG", "trace")]);
        assert_eq!(filter_from(|k| both.get(k).map(String::as_str), "warn"), "debug");
        let rust = vars(&[("NANOBOT_LOG", " "), ("RUST_LOG", "trace")]);
        assert_eq!(filter_from(|k| rust.get(k).map(String::as_str), "warn"), "trace");
        let none = vars(&[]);
        assert_eq!(filter_from(|k| none.get(k).map(String::as_str), "warn"), "warn");
    }

    #[test]
    fn a_bad_filter_or_directory_is_a_clear_error() {
        let plan = LogPlan {
            filter: "nanobot=[".into(),
            stderr: false,
            colour: false,
            dir: None,
            trace: None,
        };
        let e = init(&plan).unwrap_err();
        assert!(e.to_string().contains("nanobot=["), "{e}");
        let file = tempfile::NamedTempFile::new().unwrap();
        let plan = LogPlan {
            filter: "info".into(),
            stderr: false,
            colour: false,
            dir: Some(file.path().join("logs")),
            trace: None,
        };
        let e = init(&plan).unwrap_err();
        assert!(matches!(e, LoggingError::Dir { .. }), "{e}");
    }
}
