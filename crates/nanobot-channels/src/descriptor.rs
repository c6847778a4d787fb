//! [`ChannelDescriptor`]: how a chat adapter plugs in. Each adapter crate exposes one (`DESCRIPTOR`): its name,
//! what it can do, whether the config enables it, how `doctor` checks its block, and how it is built from the
//! config and the services the gateway shares. The gateway lists the descriptors in one place; adding a channel
//! is its own crate and one line there.

use std::path::Path;
use std::sync::Arc;

use nanobot_config::Config;
use nanobot_util::EnvMap;

use crate::{Channel, ChannelError, PairingStore, Transcribe};

/// What a channel can show and take, for `channels status` and the docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// It renders a streamed answer itself (edits a message as it grows).
    pub streaming: bool,
    /// It shows inline buttons.
    pub buttons: bool,
    /// It receives and sends files.
    pub files: bool,
    /// It answers in group chats (by its group policy).
    pub groups: bool,
    /// It answers in threads.
    pub threads: bool,
}

impl Capabilities {
    /// Nothing but text in direct chats.
    pub const TEXT: Self = Self {
        streaming: false,
        buttons: false,
        files: false,
        groups: false,
        threads: false,
    };

    /// With streaming as given.
    #[must_use]
    pub const fn streaming(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }

    /// With buttons as given.
    #[must_use]
    pub const fn buttons(mut self, on: bool) -> Self {
        self.buttons = on;
        self
    }

    /// With files as given.
    #[must_use]
    pub const fn files(mut self, on: bool) -> Self {
        self.files = on;
        self
    }

    /// With groups as given.
    #[must_use]
    pub const fn groups(mut self, on: bool) -> Self {
        self.groups = on;
        self
    }

    /// With threads as given.
    #[must_use]
    pub const fn threads(mut self, on: bool) -> Self {
        self.threads = on;
        self
    }
}

/// How bad a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Checked and fine.
    Ok,
    /// Works, but probably not as meant.
    Warn,
    /// Stops the channel.
    Problem,
}

/// One line of `doctor` about a channel: what was found, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub level: Level,
    /// What was checked and found (never a secret).
    pub what: String,
    /// How to fix it (empty when fine).
    pub fix: String,
}

impl Finding {
    /// A check that passed.
    pub fn ok(what: impl Into<String>) -> Self {
        Self {
            level: Level::Ok,
            what: what.into(),
            fix: String::new(),
        }
    }

    /// Something that works but probably not as meant.
    pub fn warn(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            level: Level::Warn,
            what: what.into(),
            fix: fix.into(),
        }
    }

    /// Something that stops the channel.
    pub fn problem(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            level: Level::Problem,
            what: what.into(),
            fix: fix.into(),
        }
    }
}

/// `doctor`'s warning about a channel whose `allowFrom` is empty (nobody can talk to the bot), with how to fill it.
pub fn nobody_allowed(channel: &str, fix: impl Into<String>) -> Finding {
    Finding::warn(
        format!("{channel} `allowFrom` is empty: nobody can talk to the bot"),
        fix,
    )
}

/// `doctor`'s finding about a bot token: missing (`missing_fix`), not in the platform's format (`malformed`,
/// `malformed_fix`), or fine.
pub fn token_finding(
    channel: &str,
    token: &str,
    looks_valid: fn(&str) -> bool,
    missing_fix: &str,
    malformed: &str,
    malformed_fix: &str,
) -> Finding {
    if token.is_empty() {
        Finding::problem(format!("{channel} is enabled but has no token"), missing_fix)
    } else if !looks_valid(token) {
        Finding::problem(
            format!("{channel} token does not look like a bot token ({malformed})"),
            malformed_fix,
        )
    } else {
        Finding::ok(format!("{channel} token format"))
    }
}

/// Where a channel keeps its files and what environment it was given (for building and for `doctor`).
#[derive(Debug, Clone, Copy)]
pub struct Places<'a> {
    /// The data directory (`~/.nanobot`, beside `config.json`).
    pub data_dir: &'a Path,
    /// `<data dir>/media`: channels keep received files in `<media>/<channel>/`.
    pub media_root: &'a Path,
    /// The agent's workspace.
    pub workspace: &'a Path,
    /// The environment the gateway was given (never the process's own, read here).
    pub vars: &'a EnvMap,
}

/// Where a channel's own server reports the requests it refused: `(server, kind)`.
pub type RefusalSink = Arc<dyn Fn(&'static str, &'static str) + Send + Sync>;

/// The services the gateway shares with the channels it builds, made only when a channel asks.
pub struct Services<'a> {
    /// Files and environment.
    pub places: Places<'a>,
    /// The pairing store strangers' codes are issued from (`<data dir>/pairing.json`).
    pub pairing: &'a dyn Fn() -> Result<Arc<PairingStore>, ChannelError>,
    /// The speech-to-text provider for voice notes, when one is configured.
    pub transcriber: &'a dyn Fn() -> Option<Arc<dyn Transcribe>>,
    /// Told of the requests a channel's own server refused, as `(server, kind)` (the gateway's metrics).
    pub refusals: Option<RefusalSink>,
}

impl std::fmt::Debug for Services<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("places", &self.places)
            .finish_non_exhaustive()
    }
}

/// Where a channel's block lives in the config, and so when it is enabled.
#[derive(Debug, Clone, Copy)]
pub enum Block {
    /// Kept raw under `channels.<name>` (as 0.3.5's plugin channels): enabled when it is an object with
    /// `"enabled": true`.
    Raw,
    /// A typed block of the config schema (Telegram, Discord, Slack): enabled as this says.
    Typed(fn(&Config) -> bool),
}

/// Whether a channel's credentials are set (for `channels status`).
#[derive(Debug, Clone, Copy)]
pub enum Credentials {
    /// It needs none (or they are optional).
    None,
    /// These keys of its raw block are non-empty strings.
    Keys(&'static [&'static str]),
    /// As this says (a typed block, or credentials kept elsewhere, such as a linked device).
    Check(fn(&Config, &Places<'_>) -> bool),
}

/// How a channel is built from the config and the shared services.
pub type Build = fn(&Config, &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError>;

/// How a chat adapter plugs in (see the [module docs](self)).
#[derive(Clone, Copy)]
pub struct ChannelDescriptor {
    /// The channel's name on the bus and the key of its block under `channels`.
    pub name: &'static str,
    /// What it can show and take.
    pub capabilities: Capabilities,
    /// Where its block lives, and so when it is enabled.
    pub block: Block,
    /// What its credentials are.
    pub credentials: Credentials,
    /// `doctor`'s findings about its block when it is enabled (the block read as the channel reads it).
    pub doctor: fn(&Config, &Places<'_>) -> Vec<Finding>,
    /// The channel, built from the config and the shared services (called only when it is enabled); a bad block is
    /// the error naming the key.
    pub build: Build,
}

impl ChannelDescriptor {
    /// Whether the config enables it.
    pub fn enabled(&self, config: &Config) -> bool {
        match self.block {
            Block::Raw => enabled_block(config, self.name).is_some(),
            Block::Typed(enabled) => enabled(config),
        }
    }

    /// Whether its credentials are set (true when it needs none).
    pub fn credentials_set(&self, config: &Config, places: &Places<'_>) -> bool {
        match self.credentials {
            Credentials::None => true,
            Credentials::Keys(keys) => block_keys_set(config, self.name, keys),
            Credentials::Check(check) => check(config, places),
        }
    }
}

impl std::fmt::Debug for ChannelDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelDescriptor")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

/// The raw block `channels.<name>` when it is there and enabled (`"enabled": true`), for the adapters whose
/// blocks the config keeps raw.
pub fn enabled_block<'c>(config: &'c Config, name: &str) -> Option<&'c serde_json::Value> {
    let other = &config.channels.other;
    other.get(name).filter(|_| other.is_enabled(name))
}

/// Whether each of `keys` is a non-empty string in the raw block `channels.<name>`.
pub fn block_keys_set(config: &Config, name: &str, keys: &[&str]) -> bool {
    config.channels.other.get(name).is_some_and(|block| {
        keys.iter().all(|k| {
            block
                .get(*k)
                .and_then(|v| v.as_str())
                .is_some_and(|v| !v.trim().is_empty())
        })
    })
}

/// The SSRF guard of `tools.ssrfWhitelist` that a channel's remote downloads go through; a bad entry is the
/// channel's configuration error.
#[cfg(feature = "download")]
pub fn ssrf_guard(config: &Config, channel: &str) -> Result<crate::download::SsrfGuard, ChannelError> {
    crate::download::SsrfGuard::from_cidrs(&config.tools.ssrf_whitelist).map_err(|e| ChannelError::Config {
        channel: channel.to_owned(),
        message: e.to_string(),
    })
}

/// Runs the future `make` returns on a current-thread runtime of its own, in a scoped thread, so that a check
/// `doctor` makes over the network works whether or not the caller is inside a tokio runtime. `None` when no
/// runtime could be started (or the thread panicked).
pub fn on_own_runtime<F, T>(make: impl FnOnce() -> F + Send) -> Option<T>
where
    F: std::future::Future<Output = T>,
    T: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                let out = rt.block_on(make());
                rt.shutdown_background();
                Some(out)
            })
            .join()
            .ok()
            .flatten()
    })
}
