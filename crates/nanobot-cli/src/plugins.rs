//! `nanobot plugins list|enable|disable` (0.3.5's "optional features"). In nanobot-rs the channels are compiled
//! in (cargo features; `nanobot_gateway::BUILT_CHANNELS` is what this build has), so enabling a channel only
//! turns on its `channels.<name>.enabled` in `config.json` (0.3.5 also installs its Python packages); a channel
//! this build lacks is refused by name, as are 0.3.5's optional Python features that have no counterpart here.

use std::path::Path;

use serde_json::Value;

use crate::args::ConfigArgs;
use crate::error::CliError;
use crate::setup::CliEnv;

/// 0.3.5's channel names.
const CHANNELS: [&str; 17] = [
    "dingtalk",
    "discord",
    "email",
    "feishu",
    "matrix",
    "mattermost",
    "mochat",
    "msteams",
    "napcat",
    "qq",
    "signal",
    "slack",
    "telegram",
    "websocket",
    "wecom",
    "weixin",
    "whatsapp",
];

/// 0.3.5's optional features that are not channels, and what they are here.
const FEATURES: [(&str, &str); 5] = [
    ("api", "built in: `nanobot serve`, or `nanobot gateway --api`"),
    ("azure", "not in nanobot-rs (use an OpenAI-compatible endpoint)"),
    ("bedrock", "not in nanobot-rs"),
    ("langfuse", "not in nanobot-rs"),
    ("olostep", "not in nanobot-rs"),
];

/// What `plugins enable --logs` prints where 0.3.5 shows its package installer's output.
pub(crate) const NOTHING_TO_INSTALL: &str =
    "Nothing to install: the channels are built into this program (no installer output to show).";

/// `plugins list`.
pub(crate) fn list(env: &CliEnv, args: &ConfigArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let s = crate::setup::load(env, args, false)?;
    let places = crate::status::ChannelPlaces::of(&s, &env.vars);
    let states = crate::status::channel_states(&s.loaded.config, &places.get());
    let enabled = |n: &str| states.iter().any(|(name, on, _)| name == n && *on);
    let mut rows: Vec<(String, &str, String, String)> = CHANNELS
        .iter()
        .map(|n| {
            let built = nanobot_gateway::BUILT_CHANNELS.contains(n);
            (
                (*n).to_owned(),
                "channel",
                if enabled(n) { "yes" } else { "no" }.to_owned(),
                if built { "yes" } else { "no" }.to_owned(),
            )
        })
        .collect();
    rows.extend(FEATURES.iter().map(|(n, what)| {
        let built = what.starts_with("built in");
        (
            (*n).to_owned(),
            "feature",
            if built { "yes" } else { "no" }.to_owned(),
            if built { "yes" } else { "no" }.to_owned(),
        )
    }));
    rows.sort();
    let _ = writeln!(out, "{:<12} {:<8} {:<8} In this build", "Name", "Type", "Enabled");
    for (n, t, e, b) in rows {
        let _ = writeln!(out, "{n:<12} {t:<8} {e:<8} {b}");
    }
    Ok(())
}

/// `plugins enable NAME` / `plugins disable NAME`.
pub(crate) fn set(
    env: &CliEnv,
    args: &ConfigArgs,
    name: &str,
    on: bool,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let name = name.trim().to_lowercase();
    if let Some((_, what)) = FEATURES.iter().find(|(n, _)| *n == name) {
        return if on && what.starts_with("built in") {
            let _ = writeln!(out, "Feature '{name}' is {what}.");
            Ok(())
        } else {
            Err(CliError::Usage(format!(
                "feature '{name}' cannot be {}: {what}",
                if on { "enabled" } else { "disabled" }
            )))
        };
    }
    if !CHANNELS.contains(&name.as_str()) {
        let mut all: Vec<&str> = CHANNELS.to_vec();
        all.extend(FEATURES.iter().map(|(n, _)| *n));
        all.sort_unstable();
        return Err(CliError::Usage(format!(
            "unknown feature '{name}'; known: {}",
            all.join(", ")
        )));
    }
    if on && !nanobot_gateway::BUILT_CHANNELS.contains(&name.as_str()) {
        return Err(CliError::Usage(format!(
            "channel '{name}' is not in this build of nanobot-rs (it has: {})",
            nanobot_gateway::BUILT_CHANNELS.join(", ")
        )));
    }
    let (paths, _) = env.paths(args.config.as_deref());
    let path = paths.config_path().to_path_buf();
    let text = match nanobot_util::read_to_string_bounded(&path, nanobot_util::MAX_READ_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::NoConfig {
                path,
                explicit: args.config.is_some(),
            });
        }
        Err(e) => return Err(CliError::io("read", &path, e)),
    };
    // The file is edited as JSON, so every other key stays as the user wrote it.
    let mut doc: Value = serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(&text))
        .map_err(|e| CliError::Usage(format!("{}: not valid JSON: {e}", path.display())))?;
    let Some(root) = doc.as_object_mut() else {
        return Err(CliError::Usage(format!("{}: not a JSON object", path.display())));
    };
    let channels = root
        .entry("channels")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(channels) = channels.as_object_mut() else {
        return Err(CliError::Usage(format!(
            "{}: `channels` is not an object",
            path.display()
        )));
    };
    let block = channels
        .entry(name.clone())
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(block) = block.as_object_mut() else {
        return Err(CliError::Usage(format!(
            "{}: `channels.{name}` is not an object",
            path.display()
        )));
    };
    block.insert("enabled".into(), Value::Bool(on));
    let new_text = format!("{}\n", serde_json::to_string_pretty(&doc).unwrap_or_default());
    // Never write a config the loader would refuse.
    nanobot_config::load_str(&new_text, &path, &env.vars).map_err(|source| CliError::Config {
        message: format!("{} would be invalid after this change: {source}", path.display()),
        source,
    })?;
    write_private(&path, &new_text)?;
    let _ = writeln!(
        out,
        "{} channel '{name}' in {}",
        if on { "Enabled" } else { "Disabled" },
        path.display()
    );
    if on {
        let _ = writeln!(
            out,
            "Set its credentials and allowFrom in channels.{name} (see `nanobot channels status`)."
        );
    }
    Ok(())
}

/// Replaces `path` with `text` atomically (mode 0600).
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    nanobot_util::write_atomic(path, text.as_bytes()).map_err(|e| CliError::io("write", path, e.into()))
}
