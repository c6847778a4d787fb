//! Rules that typing alone cannot check (ranges, known values).

use crate::{Config, ConfigError, McpTransportKind};

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Validation {
        field: field.into(),
        message: message.into(),
    }
}

impl Config {
    /// Checks ranges and enumerated values that serde does not; the loader runs it, call it again after
    /// changing a config in code. Returns the first problem, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let endpoint = self.gateway.tracing.endpoint.trim();
        if !endpoint.is_empty() {
            let host = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"))
                .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
            if host.is_none_or(|h| h.is_empty() || h.contains(char::is_whitespace)) {
                return Err(invalid(
                    "gateway.tracing.endpoint",
                    "must be an http:// or https:// URL of an OTLP/HTTP collector, such as http://localhost:4318",
                ));
            }
        }
        let d = &self.agents.defaults;
        if d.max_tokens == 0 {
            return Err(invalid("agents.defaults.maxTokens", "must be at least 1"));
        }
        if d.context_window_tokens == 0 {
            return Err(invalid(
                "agents.defaults.contextWindowTokens",
                "must be at least 1",
            ));
        }
        if !(0.0..=2.0).contains(&d.temperature) {
            return Err(invalid("agents.defaults.temperature", "must be between 0 and 2"));
        }
        if d.max_tool_iterations == 0 {
            return Err(invalid("agents.defaults.maxToolIterations", "must be at least 1"));
        }
        if d.max_concurrent_subagents == 0 {
            return Err(invalid(
                "agents.defaults.maxConcurrentSubagents",
                "must be at least 1",
            ));
        }
        if d.dream.interval_h == 0 {
            return Err(invalid("agents.defaults.dream.intervalH", "must be at least 1"));
        }
        let t = &d.timeouts;
        for (name, v) in [
            ("connect", t.connect),
            ("firstByte", t.first_byte),
            ("idle", t.idle),
            ("call", t.call),
            ("turn", Some(t.turn)),
        ] {
            if let Some(v) = v
                && !(0.001..=604_800.0).contains(&v)
            {
                return Err(invalid(
                    format!("agents.defaults.timeouts.{name}"),
                    "must be between 0.001 and 604800 seconds",
                ));
            }
        }
        let b = &d.budget;
        for (scope, limits) in [
            ("overall", &b.overall),
            ("perPerson", &b.per_person),
            ("perChat", &b.per_chat),
        ] {
            for (period, limit) in [("daily", &limits.daily), ("monthly", &limits.monthly)] {
                if let Some(cost) = limit.cost
                    && !(cost.is_finite() && cost >= 0.0)
                {
                    return Err(invalid(
                        format!("agents.defaults.budget.{scope}.{period}.cost"),
                        "must be a number of at least 0",
                    ));
                }
            }
        }
        for (model, price) in &d.prices {
            for (name, v) in [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cachedInput", price.cached_input),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(invalid(
                        format!("agents.defaults.prices.{model}.{name}"),
                        "must be a price per million tokens of at least 0",
                    ));
                }
            }
        }
        for (block, l) in [("api", &self.api.limits), ("gateway", &self.gateway.limits)] {
            for (name, v) in [
                ("headerReadTimeout", l.header_read_timeout),
                ("idleTimeout", l.idle_timeout),
            ] {
                if !(0.001..=86_400.0).contains(&v) {
                    return Err(invalid(
                        format!("{block}.limits.{name}"),
                        "must be between 0.001 and 86400 seconds",
                    ));
                }
            }
            if l.max_connections_per_client == 0 {
                return Err(invalid(
                    format!("{block}.limits.maxConnectionsPerClient"),
                    "must be at least 1",
                ));
            }
            if l.max_body_bytes == 0 || l.max_other_body_bytes == 0 {
                return Err(invalid(
                    format!("{block}.limits.maxBodyBytes"),
                    "body limits must be at least 1 byte",
                ));
            }
        }
        if self.channels.send_max_retries > 10 {
            return Err(invalid("channels.sendMaxRetries", "must be between 0 and 10"));
        }
        if self.gateway.heartbeat.enabled && self.gateway.heartbeat.interval_s == 0 {
            return Err(invalid(
                "gateway.heartbeat.intervalS",
                "must be at least 1 while the heartbeat is enabled",
            ));
        }
        if self.tools.exec.sandbox_mode().is_none() {
            return Err(invalid(
                "tools.exec.sandbox",
                format!(
                    "is {:?}; expected \"\" or \"auto\", \"none\", \"landlock\" or \"bwrap\"",
                    self.tools.exec.sandbox
                ),
            ));
        }
        let network = &self.tools.network;
        for (i, entry) in network.allowed_domains.iter().flatten().enumerate() {
            let bare = entry.trim().trim_start_matches('[').trim_end_matches(']');
            if bare.parse::<std::net::IpAddr>().is_ok() {
                return Err(invalid(
                    format!("tools.network.allowedDomains[{i}]"),
                    format!(
                        "{entry:?} is an address; only domains can be allowed (give a name an address in \
                         tools.network.hosts)"
                    ),
                ));
            }
        }
        for (name, address) in &network.hosts {
            if address.trim().parse::<std::net::IpAddr>().is_err() {
                return Err(invalid(
                    format!("tools.network.hosts.{name}"),
                    format!("{address:?} is not an IP address"),
                ));
            }
        }
        self.validate_secrets()?;
        if !(1..=86_400).contains(&self.tools.approval.timeout_s) {
            return Err(invalid(
                "tools.approval.timeoutS",
                "must be between 1 and 86400 seconds",
            ));
        }
        for (i, entry) in self.tools.approval.approvers.iter().enumerate() {
            let ok = entry
                .split_once(':')
                .is_some_and(|(channel, id)| !channel.trim().is_empty() && !id.trim().is_empty());
            if !ok {
                return Err(invalid(
                    format!("tools.approval.approvers[{i}]"),
                    format!(
                        "is {entry:?}; expected \"<channel>:<sender id>\", for example \"telegram:123456\""
                    ),
                ));
            }
        }
        if self.tools.tool_profile().is_none() {
            return Err(invalid(
                "tools.profile",
                format!(
                    "is {:?}; expected \"full\", \"local\" or \"chat\"",
                    self.tools.profile
                ),
            ));
        }
        for (i, entry) in self.tools.only.iter().enumerate() {
            let name = entry.strip_suffix('*').unwrap_or(entry);
            let ok = !entry.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return Err(invalid(
                    format!("tools.only[{i}]"),
                    format!(
                        "is {entry:?}; expected a tool name such as \"read_file\", or a start of names ending \
                         in `*` such as \"mcp_github_*\""
                    ),
                ));
            }
        }
        if self.tools.exec.timeout == 0 {
            return Err(invalid("tools.exec.timeout", "must be at least 1 second"));
        }
        self.validate_presets()?;
        for (name, server) in &self.tools.mcp_servers {
            let field = format!("tools.mcpServers.{name}");
            match server.r#type {
                Some(McpTransportKind::Stdio) if server.command.is_empty() => {
                    return Err(invalid(field, "has type \"stdio\" but no `command`"));
                }
                Some(McpTransportKind::Sse | McpTransportKind::StreamableHttp) if server.url.is_empty() => {
                    return Err(invalid(field, "has an HTTP type but no `url`"));
                }
                _ => {}
            }
            if server.tool_timeout == 0 {
                return Err(invalid(
                    format!("{field}.toolTimeout"),
                    "must be at least 1 second",
                ));
            }
        }
        Ok(())
    }

    /// `tools.secrets`: each a variable name with a value long enough to be found in outputs, granted to domains
    /// that `tools.network.allowedDomains` (the proxy that puts it in) allows.
    fn validate_secrets(&self) -> Result<(), ConfigError> {
        let allowed = self.tools.network.allowed_domains.as_ref();
        for (name, grant) in &self.tools.secrets {
            let field = format!("tools.secrets.{name}");
            let mut chars = name.chars();
            let is_variable = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !is_variable {
                return Err(invalid(
                    field,
                    "is not an environment variable name (letters, digits and `_`, not starting with a digit)",
                ));
            }
            let Some(allowed) = allowed else {
                return Err(invalid(
                    field,
                    "needs tools.network.allowedDomains: credentials are put into requests by nanobot's egress \
                     proxy, which runs only with that list (add the credential's domains there)",
                ));
            };
            let value = grant.value.expose();
            if value.trim().is_empty() {
                return Err(invalid(
                    format!("{field}.value"),
                    format!(
                        "is empty (write the credential, or \"${{{name}}}\" to read it from the environment)"
                    ),
                ));
            }
            if value.chars().count() < MIN_SECRET_CHARS {
                return Err(invalid(
                    format!("{field}.value"),
                    format!(
                        "is shorter than {MIN_SECRET_CHARS} characters: too short to be kept out of outputs"
                    ),
                ));
            }
            if grant.domains.is_empty() {
                return Err(invalid(
                    format!("{field}.domains"),
                    "is empty: name the domains the credential is sent to",
                ));
            }
            for (i, domain) in grant.domains.iter().enumerate() {
                let d = bare_domain(domain);
                let covered = allowed.iter().any(|a| {
                    let a = bare_domain(a);
                    !a.is_empty() && (d == a || d.ends_with(&format!(".{a}")))
                });
                if d.parse::<std::net::IpAddr>().is_ok() || d.is_empty() {
                    return Err(invalid(
                        format!("{field}.domains[{i}]"),
                        format!("{domain:?} is not a domain"),
                    ));
                }
                if !covered {
                    return Err(invalid(
                        format!("{field}.domains[{i}]"),
                        format!("{domain:?} is not in tools.network.allowedDomains: allow it there too"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Shortest credential value `tools.secrets` takes.
const MIN_SECRET_CHARS: usize = 8;

/// A domain entry as compared: no `*.`, leading or trailing dot, brackets or case.
fn bare_domain(entry: &str) -> String {
    entry
        .trim()
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError, McpServerConfig, McpTransportKind};

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let mut c = Config::default();
        c.channels.send_max_retries = 11;
        let err = c.validate().unwrap_err();
        assert!(matches!(&err, ConfigError::Validation { field, .. } if field == "channels.sendMaxRetries"));

        let mut c = Config::default();
        c.tools.approval.approvers = vec!["telegram:1".into(), "123".into()];
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("tools.approval.approvers[1]") && err.contains("\"123\""),
            "{err}"
        );
        c.tools.approval.approvers = vec!["telegram:1".into()];
        c.validate().unwrap();

        let mut c = Config::default();
        c.tools.profile = "tiny".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("tools.profile") && err.contains("\"tiny\"") && err.contains("\"local\""),
            "{err}"
        );
        c.tools.profile = "Local".into();
        c.validate().unwrap();
        for bad in ["", "read file", "*mcp", "a*b*"] {
            c.tools.only = vec!["exec".into(), bad.into()];
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("tools.only[1]"), "{bad:?}: {err}");
        }
        c.tools.only = vec!["exec".into(), "mcp_github_*".into(), "*".into()];
        c.tools.approval.timeout_s = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("tools.approval.timeoutS")
        );

        let mut c = Config::default();
        c.tools.exec.sandbox = "docker".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("tools.exec.sandbox")
        );

        let mut c = Config::default();
        let server = McpServerConfig {
            r#type: Some(McpTransportKind::Stdio),
            ..Default::default()
        };
        c.tools.mcp_servers.insert("fs".into(), server);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("tools.mcpServers.fs")
        );
    }
}

#[cfg(test)]
mod network_tests {
    use crate::Config;

    #[test]
    fn an_address_in_the_domain_list_or_a_bad_hosts_entry_is_refused_by_name() {
        let mut c = Config::default();
        c.tools.network.allowed_domains = Some(vec!["pypi.org".into(), "10.0.0.1".into()]);
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("tools.network.allowedDomains[1]") && e.contains("tools.network.hosts"),
            "{e}"
        );
        let mut c = Config::default();
        c.tools.network.allowed_domains = Some(vec!["db.internal".into()]);
        c.tools
            .network
            .hosts
            .insert("db.internal".into(), "ten.zero.zero.five".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("tools.network.hosts.db.internal") && e.contains("not an IP address"),
            "{e}"
        );
        c.tools
            .network
            .hosts
            .insert("db.internal".into(), "10.0.0.5".into());
        c.validate().unwrap();
        // Written only when set, read in both spellings.
        let saved = serde_json::to_value(Config::default()).unwrap();
        assert!(saved["tools"].get("network").is_none(), "{saved}");
        let read: crate::NetworkConfig =
            serde_json::from_value(serde_json::json!({"allowed_domains": ["a.example"]})).unwrap();
        assert_eq!(read.allowed_domains, Some(vec!["a.example".to_owned()]));
    }
}

#[cfg(test)]
mod secrets_tests {
    use crate::{Config, Secret, SecretGrantConfig};

    fn grant(value: &str, domains: &[&str]) -> SecretGrantConfig {
        SecretGrantConfig {
            value: Secret::new(value),
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            ..SecretGrantConfig::default()
        }
    }

    #[test]
    fn a_grant_needs_a_name_a_value_and_allowed_domains_and_errors_never_show_the_value() {
        let mut c = Config::default();
        c.tools.secrets.insert(
            "GITHUB_TOKEN".into(),
            grant("ghp_0123456789", &["api.github.com"]),
        );
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("tools.secrets.GITHUB_TOKEN") && e.contains("tools.network.allowedDomains"),
            "{e}"
        );
        c.tools.network.allowed_domains = Some(vec!["*.github.com".into()]);
        c.validate().unwrap();

        for (name, g, field, says) in [
            (
                "1TOKEN",
                grant("ghp_0123456789", &["api.github.com"]),
                "tools.secrets.1TOKEN",
                "variable name",
            ),
            (
                "T",
                grant("", &["api.github.com"]),
                "tools.secrets.T.value",
                "${T}",
            ),
            (
                "T",
                grant("short", &["api.github.com"]),
                "tools.secrets.T.value",
                "shorter than 8",
            ),
            (
                "T",
                grant("ghp_0123456789", &[]),
                "tools.secrets.T.domains",
                "is empty",
            ),
            (
                "T",
                grant("ghp_0123456789", &["github.com.evil"]),
                "tools.secrets.T.domains[0]",
                "allowedDomains",
            ),
            (
                "T",
                grant("ghp_0123456789", &["10.0.0.1"]),
                "tools.secrets.T.domains[0]",
                "not a domain",
            ),
        ] {
            let mut c = c.clone();
            c.tools.secrets.clear();
            c.tools.secrets.insert(name.into(), g);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(says), "{e}");
            assert!(!e.contains("ghp_0123456789"), "{e}");
        }
        // Written only when set; its value never in Debug.
        let saved = serde_json::to_value(Config::default()).unwrap();
        assert!(saved["tools"].get("secrets").is_none(), "{saved}");
        assert!(!format!("{c:?}").contains("ghp_0123456789"));
        let read: crate::ToolsConfig = serde_json::from_value(serde_json::json!({
            "secrets": {"GITHUB_TOKEN": {"value": "v", "domains": ["api.github.com"], "extraKey": 1}}
        }))
        .unwrap();
        assert_eq!(read.secrets["GITHUB_TOKEN"].domains, ["api.github.com"]);
    }
}
