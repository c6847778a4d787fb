//! Finding the keys a config holds but this version does not model.

use serde_json::Value;

use crate::doc::join;
use crate::schema::PROVIDER_SPECIFIC_KEYS;
use crate::*;

/// Collects the dotted paths of unmodelled keys below `path`.
pub(crate) trait Unknown {
    fn unknown(&self, path: &str, out: &mut Vec<String>);
}

fn extra(e: &Extra, path: &str, out: &mut Vec<String>) {
    out.extend(e.keys().map(|k| join(path, k)));
}

/// `impl Unknown` for a struct: its `extra` keys, then the listed typed children (field => JSON key).
macro_rules! walk {
    ($ty:ty $(, $field:ident => $key:literal)* $(,)?) => {
        impl Unknown for $ty {
            fn unknown(&self, path: &str, out: &mut Vec<String>) {
                extra(&self.extra, path, out);
                $( self.$field.unknown(&join(path, $key), out); )*
            }
        }
    };
}

walk!(Config, agents => "agents", channels => "channels", transcription => "transcription",
      providers => "providers", api => "api", gateway => "gateway", tools => "tools");
walk!(AgentsConfig, defaults => "defaults");
walk!(AgentDefaults, dream => "dream", timeouts => "timeouts");
walk!(TimeoutsConfig);
walk!(ServerLimitsConfig);
walk!(DreamConfig);
walk!(TelegramConfig);
walk!(DiscordConfig);
walk!(SlackConfig, dm => "dm");
walk!(SlackDmConfig);
walk!(TranscriptionConfig);
walk!(ApiConfig, limits => "limits");
walk!(GatewayConfig, heartbeat => "heartbeat", limits => "limits", tracing => "tracing");
walk!(TracingConfig);
walk!(HeartbeatConfig);
walk!(ToolsConfig, web => "web", exec => "exec", network => "network", secrets => "secrets", file => "file",
      cli_apps => "cliApps",
      my => "my", image_generation => "imageGeneration", mcp_servers => "mcpServers");
walk!(WebToolsConfig, search => "search", fetch => "fetch");
walk!(WebSearchConfig);
walk!(WebFetchConfig);
walk!(ExecToolConfig);
walk!(NetworkConfig);
walk!(SecretGrantConfig);
walk!(FileToolConfig);
walk!(CliAppsConfig);
walk!(MyToolConfig);
walk!(ImageGenerationConfig);
walk!(McpServerConfig);

impl Unknown for ChannelsConfig {
    fn unknown(&self, path: &str, out: &mut Vec<String>) {
        self.telegram.unknown(&join(path, "telegram"), out);
        self.discord.unknown(&join(path, "discord"), out);
        self.slack.unknown(&join(path, "slack"), out);
        // Any object is a channel block (built-in or plugin); a scalar is a misspelt setting.
        for (name, block) in &self.other.0 {
            if !matches!(block, Value::Object(_)) {
                out.push(join(path, name));
            }
        }
    }
}

impl Unknown for ProvidersConfig {
    fn unknown(&self, path: &str, out: &mut Vec<String>) {
        for (name, p) in self.iter() {
            let p_path = join(path, name);
            out.extend(
                p.extra
                    .keys()
                    .filter(|k| !PROVIDER_SPECIFIC_KEYS.contains(k))
                    .map(|k| join(&p_path, k)),
            );
        }
    }
}

impl<T: Unknown> Unknown for indexmap::IndexMap<String, T> {
    fn unknown(&self, path: &str, out: &mut Vec<String>) {
        for (name, v) in self {
            v.unknown(&join(path, name), out);
        }
    }
}

impl Config {
    /// Dotted paths of the keys this version does not model (`tools.web.fooBar`). They are kept on save; the
    /// loader reports them as warnings.
    pub fn unknown_keys(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.unknown("", &mut out);
        out
    }
}
