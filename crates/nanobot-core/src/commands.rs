//! Slash commands: parsing (`/cmd@botname args`, case-insensitive) and "did you mean" for unknown ones.

/// The commands the agent understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// `/new`: archive the session and start fresh.
    New,
    /// `/stop`: cancel the running turn and its subagents.
    Stop,
    /// `/help`: list the commands.
    Help,
    /// `/status`: model, tokens, context use, session size, uptime.
    Status,
    /// `/compact`: consolidate the session into memory now.
    Compact,
    /// `/dream`: run Dream now.
    Dream,
    /// `/dream-log`: recent Dream changes.
    DreamLog,
    /// `/dream-restore`: undo a Dream change.
    DreamRestore,
    /// `/approve ID`: allow a tool call that waits for (or was refused for lack of) the user's yes
    /// (`tools.approval.mode`, nanobot-rs).
    Approve,
    /// `/deny ID`: refuse such a call.
    Deny,
    /// `/confirm-files [yes]`: list the control files the assistant changed that hold scheduled runs back; with
    /// `yes`, confirm them (nanobot-rs).
    ConfirmFiles,
    /// `/history [n]`: the last n (default 10, at most 50) messages of the conversation.
    History,
    /// `/skill`: the skills the agent has (enabled ones, available or not).
    Skill,
    /// `/goal <task>`: work on the task as a sustained goal (the turn may record it with `create_goal`).
    Goal,
    /// `/model [preset]`: show the session's model, or switch the session to a preset of `modelPresets`.
    Model,
    /// `/dream-prompt [init]`: whether Dream follows the workspace's own instructions (`prompts/dream.md`);
    /// `init` writes an editable copy of the default.
    DreamPrompt,
    /// `/restart`: restart the process (the gateway), for the owner.
    Restart,
    /// `/evaluator-prompt [init]`: whether the heartbeat's notification gate follows the workspace's own
    /// instructions (`prompts/evaluator.md`); `init` writes an editable copy of the default.
    EvaluatorPrompt,
    /// `/trigger <name>`: create a local trigger bound to this chat's session (`nanobot trigger <id> "message"`
    /// then sends it a message).
    Trigger,
    /// `/usage`: what this chat and this person spent today and this month, with their limits (nanobot-rs).
    Usage,
}

/// Every command with its one-line description (the `/help` text and the "did you mean" candidates).
pub const COMMANDS: [(&str, Command, &str); 20] = [
    (
        "new",
        Command::New,
        "Start a new conversation (the current one is archived into memory)",
    ),
    ("stop", Command::Stop, "Stop the current task"),
    ("restart", Command::Restart, "Restart nanobot (the owner only)"),
    ("help", Command::Help, "Show available commands"),
    (
        "status",
        Command::Status,
        "Show model, token usage, context use, session size and uptime",
    ),
    (
        "usage",
        Command::Usage,
        "Show what this chat and you spent today and this month, and the limits",
    ),
    (
        "compact",
        Command::Compact,
        "Summarise older messages into memory to free context",
    ),
    (
        "history",
        Command::History,
        "Show the last messages of this conversation (/history [n], default 10)",
    ),
    ("skill", Command::Skill, "List the skills the agent has"),
    (
        "model",
        Command::Model,
        "Show the model, or switch this conversation to a preset (/model [preset])",
    ),
    (
        "goal",
        Command::Goal,
        "Work on a long-running task as a sustained goal (/goal <task>)",
    ),
    (
        "trigger",
        Command::Trigger,
        "Create a named local trigger for this chat (/trigger <name>)",
    ),
    ("dream", Command::Dream, "Run memory consolidation (Dream) now"),
    ("dream-log", Command::DreamLog, "Show recent Dream changes"),
    ("dream-restore", Command::DreamRestore, "Undo a Dream change"),
    (
        "dream-prompt",
        Command::DreamPrompt,
        "Show or set up how Dream organises this workspace's memory (/dream-prompt [init])",
    ),
    (
        "evaluator-prompt",
        Command::EvaluatorPrompt,
        "Show or set up when the heartbeat speaks up (/evaluator-prompt [init])",
    ),
    (
        "approve",
        Command::Approve,
        "Allow a tool call that asked for approval (/approve ID)",
    ),
    (
        "deny",
        Command::Deny,
        "Refuse a tool call that asked for approval (/deny ID)",
    ),
    (
        "confirm-files",
        Command::ConfirmFiles,
        "List files the assistant changed that pause scheduled runs (/confirm-files yes confirms them)",
    ),
];

/// A parsed slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A known command and its argument text.
    Known(Command, String),
    /// An unknown `/word`, with the closest known command if one is close enough.
    Unknown {
        /// The command as typed (lowercased, without `/` and `@bot`).
        name: String,
        /// The closest known command.
        suggestion: Option<&'static str>,
    },
}

/// Parses `text` as a slash command; `None` when it is not one (ordinary text, or a path like `/etc/hosts`).
///
/// ```
/// use nanobot_core::commands::{parse, Command, Parsed};
/// assert_eq!(parse("/HELP@my_bot"), Some(Parsed::Known(Command::Help, String::new())));
/// assert!(matches!(parse("/stauts"), Some(Parsed::Unknown { suggestion: Some("status"), .. })));
/// assert_eq!(parse("hello /help"), None);
/// assert_eq!(parse("/etc/hosts is broken"), None);
/// ```
pub fn parse(text: &str) -> Option<Parsed> {
    let text = text.trim();
    let rest = text.strip_prefix('/')?;
    let (word, args) = match rest.split_once(char::is_whitespace) {
        Some((w, a)) => (w, a.trim()),
        None => (rest, ""),
    };
    let word = word.split('@').next().unwrap_or(word).to_lowercase();
    if word.is_empty() || !word.chars().all(|c| c.is_alphanumeric() || c == '-' || c == '_') {
        return None;
    }
    let canonical = word.replace('_', "-");
    if let Some((_, cmd, _)) = COMMANDS.iter().find(|(n, _, _)| *n == canonical) {
        return Some(Parsed::Known(*cmd, args.to_owned()));
    }
    Some(Parsed::Unknown {
        suggestion: suggest(&canonical),
        name: word,
    })
}

fn suggest(word: &str) -> Option<&'static str> {
    COMMANDS
        .iter()
        .map(|(n, _, _)| (*n, strsim::jaro_winkler(word, n)))
        .filter(|(_, score)| *score >= 0.75)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(n, _)| n)
}

/// The `/help` text.
pub fn help_text() -> String {
    let mut s = String::from("🐈 nanobot commands:\n");
    for (name, _, desc) in COMMANDS {
        s.push_str(&format!("/{name} — {desc}\n"));
    }
    s.trim_end().to_owned()
}

/// The answer to an unknown command.
pub fn unknown_text(name: &str, suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!("Unknown command /{name}. Did you mean /{s}? Type /help for the list."),
        None => format!("Unknown command /{name}. Type /help to see the available commands."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_with_args_and_bot_suffix() {
        assert_eq!(
            parse("  /Dream-Restore@Bot abc "),
            Some(Parsed::Known(Command::DreamRestore, "abc".into()))
        );
        assert_eq!(parse("/new"), Some(Parsed::Known(Command::New, String::new())));
        assert_eq!(
            parse("/dream_log 5"),
            Some(Parsed::Known(Command::DreamLog, "5".into()))
        );
    }

    #[test]
    fn unknown_commands_get_suggestions() {
        assert_eq!(
            parse("/hepl"),
            Some(Parsed::Unknown {
                name: "hepl".into(),
                suggestion: Some("help")
            })
        );
        assert_eq!(
            parse("/sotp"),
            Some(Parsed::Unknown {
                name: "sotp".into(),
                suggestion: Some("stop")
            })
        );
        assert!(matches!(
            parse("/xyzzyq"),
            Some(Parsed::Unknown { suggestion: None, .. })
        ));
        assert!(unknown_text("hepl", Some("help")).contains("Did you mean /help?"));
    }
}
