//! Where the spans of turns go (`gateway.tracing`, or the standard `OTEL_EXPORTER_OTLP_*` variables), for the
//! commands that run turns, and the hooks that let a message on the bus name the span that sent it.

use nanobot_config::TracingConfig;
use nanobot_logging::TracePlan;

use crate::args::ConfigArgs;
use crate::setup::{self, CliEnv};

/// `service.name` when neither the config nor `OTEL_SERVICE_NAME` names one.
const DEFAULT_SERVICE: &str = "nanobot";

/// The collector for a command run with `config`: `gateway.tracing.endpoint`, else
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as written), else `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces`
/// added); none when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. A config that does not load gives
/// none here: the command itself reports why.
pub(crate) fn trace_plan(env: &CliEnv, config: &ConfigArgs) -> Option<TracePlan> {
    let tracing = setup::load_and_keep(env, config)
        .map(|s| s.loaded.config.gateway.tracing)
        .unwrap_or_default();
    plan_for(env, &tracing)
}

/// [`trace_plan`] for an already loaded `gateway.tracing`.
pub(crate) fn plan_for(env: &CliEnv, tracing: &TracingConfig) -> Option<TracePlan> {
    let var = |k: &str| env.vars.get(k).map(str::trim).filter(|v| !v.is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return None;
    }
    let endpoint = TracingConfig::traces_url(&tracing.endpoint)
        .or_else(|| var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").map(str::to_owned))
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT").and_then(TracingConfig::traces_url))?;
    let service_name = Some(tracing.service_name.trim())
        .filter(|s| !s.is_empty())
        .or_else(|| var("OTEL_SERVICE_NAME"))
        .unwrap_or(DEFAULT_SERVICE)
        .to_owned();
    let headers = tracing
        .headers
        .iter()
        .flat_map(|h| h.iter())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    // The shared TLS settings (the HTTP client needs them even for plain HTTP); they read the system's
    // certificates only when an https collector is first reached.
    let tls = nanobot_providers::tls_config().ok();
    Some(TracePlan {
        endpoint,
        headers,
        service_name,
        service_version: env!("CARGO_PKG_VERSION").to_owned(),
        tls,
    })
}

/// What `doctor` says about traces: where spans go, or how to turn them on.
pub(crate) fn doctor_line(env: &CliEnv, tracing: &TracingConfig) -> String {
    match plan_for(env, tracing) {
        Some(p) => {
            let headers: Vec<&str> = p.headers.iter().map(|(k, _)| k.as_str()).collect();
            let with = if headers.is_empty() {
                String::new()
            } else {
                format!(", headers {}", headers.join(", "))
            };
            format!(
                "traces: spans of turns, model calls, tool calls and sends go to {} (OTLP/HTTP, service {}{with}; \
                 never message text)",
                p.endpoint, p.service_name
            )
        }
        None => "traces: off (set gateway.tracing.endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT, to an OTLP/HTTP \
                 collector)"
            .to_owned(),
    }
}

/// Lets a message published during a span carry it across the bus (`nanobot_util::trace`).
pub(crate) fn install_hooks() {
    nanobot_util::trace::install(nanobot_util::trace::TraceHooks {
        current: nanobot_logging::current_traceparent,
        adopt: nanobot_logging::adopt_traceparent,
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(dir: &std::path::Path, vars: &[(&str, &str)]) -> CliEnv {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        CliEnv::for_home(dir, vars)
    }

    fn write_config(dir: &std::path::Path, tracing: &str) {
        let home = dir.join(".nanobot");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("config.json"),
            format!(r#"{{"gateway": {{"tracing": {tracing}}}}}"#),
        )
        .unwrap();
    }

    #[test]
    fn off_unless_the_config_or_the_standard_variables_name_a_collector() {
        let dir = tempfile::tempdir().unwrap();
        assert!(trace_plan(&env(dir.path(), &[]), &ConfigArgs::default()).is_none());
        let base = env(
            dir.path(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")],
        );
        let plan = trace_plan(&base, &ConfigArgs::default()).unwrap();
        assert_eq!(plan.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(plan.service_name, "nanobot");
        assert!(plan.tls.is_some());
        let full = env(
            dir.path(),
            &[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "https://otel.example/ingest",
                ),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_SERVICE_NAME", "assistant"),
            ],
        );
        let plan = trace_plan(&full, &ConfigArgs::default()).unwrap();
        assert_eq!(plan.endpoint, "https://otel.example/ingest");
        assert_eq!(plan.service_name, "assistant");
        assert!(plan.tls.is_some());
        let disabled = env(
            dir.path(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ],
        );
        assert!(trace_plan(&disabled, &ConfigArgs::default()).is_none());
    }

    #[test]
    fn the_config_wins_and_its_headers_are_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        write_config(
            dir.path(),
            r#"{"endpoint": "http://collector:4318", "serviceName": "home", "headers": {"x-api-key": "${KEY}"}}"#,
        );
        let e = env(
            dir.path(),
            &[
                ("KEY", "sk-trace-secret"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            ],
        );
        let plan = trace_plan(&e, &ConfigArgs::default()).unwrap();
        assert_eq!(plan.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(plan.service_name, "home");
        assert_eq!(
            plan.headers,
            [("x-api-key".to_owned(), "sk-trace-secret".to_owned())]
        );
        assert!(!format!("{plan:?}").contains("sk-trace-secret"), "{plan:?}");
        let line = doctor_line(
            &e,
            &setup::load(&e, &ConfigArgs::default(), true)
                .unwrap()
                .loaded
                .config
                .gateway
                .tracing,
        );
        assert!(
            line.contains("http://collector:4318/v1/traces") && line.contains("x-api-key"),
            "{line}"
        );
        assert!(!line.contains("sk-trace-secret"), "{line}");
    }
}
