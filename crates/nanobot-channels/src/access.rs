//! Who may talk to the agent through a channel: `allowFrom`, pairing and `groupPolicy`.

use std::sync::Arc;

use chrono::Utc;
pub use nanobot_config::GroupPolicy;

use crate::{PairingError, PairingRequest, PairingStore};

/// The owner's command for pairing (`/pairing list`, `approve CODE`, `deny CODE`, `revoke ID`).
pub const PAIRING_COMMAND: &str = "/pairing";

/// A channel's `allowFrom` list.
///
/// A sender matches when an entry equals the whole sender id or either part of `id|username`; `"*"` matches
/// everyone; an empty list matches no one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<String>,
}

impl AllowList {
    /// A list of the given entries (surrounding whitespace and a leading `@` on usernames are ignored).
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries = entries
            .into_iter()
            .map(|e| e.as_ref().trim().trim_start_matches('@').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        Self { entries }
    }

    /// True when the list is `"*"`-open.
    pub fn allows_everyone(&self) -> bool {
        self.entries.iter().any(|e| e == "*")
    }

    /// True when the list names no one (and so denies everyone).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `sender_id` (`12345` or `12345|alice`) may talk to the agent.
    pub fn allows(&self, sender_id: &str) -> bool {
        self.allows_everyone() || self.names(sender_id)
    }

    /// Whether the list names `sender_id` explicitly (`"*"` does not count): such senders are owners.
    pub fn names(&self, sender_id: &str) -> bool {
        let sender_id = sender_id.trim();
        if sender_id.is_empty() {
            return false;
        }
        self.entries.iter().any(|e| {
            e == sender_id
                || sender_id
                    .split('|')
                    .any(|part| !part.is_empty() && part.trim_start_matches('@') == e)
        })
    }
}

/// What the access check needs to know about one inbound message.
#[derive(Debug, Clone, Copy)]
pub struct InboundContext<'a> {
    /// Sender id (`12345|alice`).
    pub sender_id: &'a str,
    /// Chat id.
    pub chat_id: &'a str,
    /// True in group chats, false in direct messages.
    pub is_group: bool,
    /// True when the message mentions the bot or replies to one of its messages.
    ///
    /// Group messages always need an allowed sender; then `groupPolicy` `open` takes every message, `mention`
    /// only mentions, and `allowlist` only senders or group chat ids named explicitly on `allowFrom`.
    pub mentioned: bool,
    /// The message text (checked for `/pairing` commands).
    pub text: &'a str,
}

/// The outcome of an access check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessDecision {
    /// Forward the message to the agent.
    Allow,
    /// A denied direct message: tell the sender this pairing code (see [`AccessControl::pairing_message`]).
    PairingRequired(PairingRequest),
    /// An owner's `/pairing` command was handled here: send `reply` back and do not forward the message.
    Handled {
        /// Text to send back to the owner.
        reply: String,
    },
    /// Drop the message silently.
    Ignore,
}

/// Access control for one channel: its allow-list, its group policy and the shared pairing store.
#[derive(Debug, Clone)]
pub struct AccessControl {
    channel: String,
    allow: AllowList,
    group_policy: GroupPolicy,
    pairing: Option<Arc<PairingStore>>,
}

impl AccessControl {
    /// Access control for `channel`. Without a pairing store, denied direct messages are ignored.
    pub fn new(
        channel: impl Into<String>,
        allow: AllowList,
        group_policy: GroupPolicy,
        pairing: Option<Arc<PairingStore>>,
    ) -> Self {
        Self {
            channel: channel.into(),
            allow,
            group_policy,
            pairing,
        }
    }

    /// The allow-list.
    pub fn allow_list(&self) -> &AllowList {
        &self.allow
    }

    /// True when `sender_id` is on the allow-list or was approved through pairing.
    pub fn is_allowed(&self, sender_id: &str) -> bool {
        self.allow.allows(sender_id)
            || self
                .pairing
                .as_ref()
                .is_some_and(|p| p.is_approved(&self.channel, sender_id))
    }

    /// Decides what to do with one inbound message.
    pub fn check(&self, msg: &InboundContext<'_>) -> Result<AccessDecision, PairingError> {
        if let Some(args) = pairing_command_args(msg.text)
            && self.allow.names(msg.sender_id)
        {
            return Ok(AccessDecision::Handled {
                reply: self.run_pairing_command(args),
            });
        }
        let allowed = self.is_allowed(msg.sender_id);
        if msg.is_group {
            let pass = allowed
                && match self.group_policy {
                    GroupPolicy::Open => true,
                    GroupPolicy::Mention => msg.mentioned,
                    GroupPolicy::Allowlist => {
                        self.allow.names(msg.sender_id) || self.allow.names(msg.chat_id)
                    }
                };
            return Ok(if pass {
                AccessDecision::Allow
            } else {
                AccessDecision::Ignore
            });
        }
        if allowed {
            return Ok(AccessDecision::Allow);
        }
        match &self.pairing {
            Some(store) => {
                let request = store.request(&self.channel, msg.sender_id, msg.chat_id)?;
                tracing::info!(channel = %self.channel, sender = %msg.sender_id, "access denied; pairing code issued");
                Ok(AccessDecision::PairingRequired(request))
            }
            None => {
                tracing::info!(channel = %self.channel, sender = %msg.sender_id, "access denied");
                Ok(AccessDecision::Ignore)
            }
        }
    }

    /// The text sent to a denied sender with their pairing code.
    pub fn pairing_message(request: &PairingRequest) -> String {
        format!(
            "You are not on this bot's allow-list yet.\n\nYour pairing code: {code}\n\nAsk the owner to send \
             `/pairing approve {code}` to the bot within 10 minutes.",
            code = request.code
        )
    }

    fn run_pairing_command(&self, args: &str) -> String {
        match &self.pairing {
            Some(store) => pairing_command(store, &self.channel, args),
            None => "Pairing is not enabled for this channel.".to_string(),
        }
    }
}

/// Runs `/pairing ARGS` sent on `channel` by its owner (0.3.5's subcommands): `list` (also with no argument),
/// `approve CODE`, `deny CODE`, `revoke USER` (on `channel`) or `revoke CHANNEL USER`. Returns the reply.
pub fn pairing_command(store: &PairingStore, channel: &str, args: &str) -> String {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        [] | ["list"] => {
            let pending = store.pending_at(Utc::now());
            if pending.is_empty() {
                "No pending pairing requests.".to_string()
            } else {
                let mut lines = vec!["Pending pairing requests:".to_string()];
                lines.extend(pending.iter().map(|r| {
                    let left = (r.expires_at - Utc::now()).num_minutes().max(0);
                    format!(
                        "- {} | {} | {} | expires in {left} min",
                        r.code, r.channel, r.sender_id
                    )
                }));
                lines.join("\n")
            }
        }
        ["approve", code] => match store.approve(code) {
            Ok(req) => format!(
                "Approved {} on {} (code {}).",
                req.sender_id, req.channel, req.code
            ),
            Err(e) => format!("Could not approve: {e}"),
        },
        ["deny", code] => match store.deny(code) {
            Ok(req) => format!("Denied {} on {} (code {}).", req.sender_id, req.channel, req.code),
            Err(e) => format!("Could not deny: {e}"),
        },
        ["revoke", sender] => revoke(store, channel, sender),
        ["revoke", on, sender] => revoke(store, on, sender),
        _ => "Usage: /pairing [list] | /pairing approve CODE | /pairing deny CODE | /pairing revoke [CHANNEL] USER"
            .to_string(),
    }
}

fn revoke(store: &PairingStore, channel: &str, sender: &str) -> String {
    match store.revoke(channel, sender) {
        Ok(true) => format!("Revoked {sender} on {channel}."),
        Ok(false) => format!("{sender} was not approved on {channel}."),
        Err(e) => format!("Could not revoke: {e}"),
    }
}

/// The arguments of a `/pairing` command (`"/pairing approve X"` or `"/pairing@bot approve X"` → `"approve X"`),
/// `None` when `text` is not one.
pub fn pairing_command_args(text: &str) -> Option<&str> {
    let text = text.trim();
    let (first, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let command = first.split('@').next().unwrap_or(first);
    (command.eq_ignore_ascii_case(PAIRING_COMMAND)).then_some(rest.trim())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_table() {
        let cases: &[(&[&str], &str, bool)] = &[
            (&[], "42", false),
            (&[], "42|alice", false),
            (&["*"], "anyone|x", true),
            (&["42"], "42", true),
            (&["42"], "42|alice", true),
            (&["alice"], "42|alice", true),
            (&["@alice"], "42|alice", true),
            (&["alice"], "43|bob", false),
            (&["4"], "42|alice", false),
            (&["42|alice"], "42|alice", true),
            (&["42"], "", false),
            (&["ali"], "42|alice", false),
        ];
        for (entries, sender, want) in cases {
            assert_eq!(
                AllowList::new(entries.iter()).allows(sender),
                *want,
                "{entries:?} vs {sender:?}"
            );
        }
        assert!(
            !AllowList::new(["*"]).names("42"),
            "\"*\" does not make everyone an owner"
        );
    }

    fn ctx<'a>(
        sender: &'a str,
        chat: &'a str,
        group: bool,
        mentioned: bool,
        text: &'a str,
    ) -> InboundContext<'a> {
        InboundContext {
            sender_id: sender,
            chat_id: chat,
            is_group: group,
            mentioned,
            text,
        }
    }

    #[test]
    fn group_policies() {
        let open = AccessControl::new("t", AllowList::new(["1"]), GroupPolicy::Open, None);
        let mention = AccessControl::new("t", AllowList::new(["1"]), GroupPolicy::Mention, None);
        let listed = AccessControl::new(
            "t",
            AllowList::new(["*", "7", "-100"]),
            GroupPolicy::Allowlist,
            None,
        );
        let d = |a: &AccessControl, s, c, m| a.check(&ctx(s, c, true, m, "hi")).unwrap();
        assert_eq!(d(&open, "1", "-5", false), AccessDecision::Allow);
        assert_eq!(
            d(&open, "2", "-5", true),
            AccessDecision::Ignore,
            "denied senders are ignored in groups"
        );
        assert_eq!(d(&mention, "1", "-5", false), AccessDecision::Ignore);
        assert_eq!(d(&mention, "1", "-5", true), AccessDecision::Allow);
        // allowlist: the sender or the group must be named explicitly ("*" is not enough); no mention needed.
        assert_eq!(d(&listed, "1", "-5", true), AccessDecision::Ignore);
        assert_eq!(d(&listed, "1", "-100", false), AccessDecision::Allow);
        assert_eq!(d(&listed, "7|bob", "-5", false), AccessDecision::Allow);
    }

    #[test]
    fn denied_direct_message_gets_code_that_owner_approves() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PairingStore::in_config_dir(dir.path()).unwrap());
        let acl = AccessControl::new(
            "telegram",
            AllowList::new(["1|owner"]),
            GroupPolicy::Mention,
            Some(store),
        );
        let AccessDecision::PairingRequired(req) =
            acl.check(&ctx("9|eve", "9", false, false, "hello")).unwrap()
        else {
            panic!("expected a pairing code")
        };
        assert!(AccessControl::pairing_message(&req).contains(&req.code));
        // Eve cannot approve herself.
        let self_approve = format!("/pairing approve {}", req.code);
        assert!(matches!(
            acl.check(&ctx("9|eve", "9", false, false, &self_approve))
                .unwrap(),
            AccessDecision::PairingRequired(_)
        ));
        // A denied group message gets no code.
        assert_eq!(
            acl.check(&ctx("9|eve", "-1", true, true, "hi")).unwrap(),
            AccessDecision::Ignore
        );

        let cmd = format!("/pairing@nanobot approve {}", req.code.to_lowercase());
        let AccessDecision::Handled { reply } = acl.check(&ctx("1|owner", "1", false, false, &cmd)).unwrap()
        else {
            panic!("owner command must be handled")
        };
        assert!(reply.starts_with("Approved 9|eve"), "{reply}");
        assert_eq!(
            acl.check(&ctx("9|eve", "9", false, false, "hello")).unwrap(),
            AccessDecision::Allow
        );
        let AccessDecision::Handled { reply } = acl
            .check(&ctx("1|owner", "1", false, false, "/pairing approve NOPE-NOPE"))
            .unwrap()
        else {
            panic!()
        };
        assert!(reply.contains("no pending pairing request"), "{reply}");

        // The owner may deny a request instead (0.3.5's `/pairing deny`): its sender stays out.
        let AccessDecision::PairingRequired(req) =
            acl.check(&ctx("8|mallory", "8", false, false, "hello")).unwrap()
        else {
            panic!("expected a pairing code")
        };
        let deny = format!("/pairing deny {}", req.code);
        let AccessDecision::Handled { reply } = acl.check(&ctx("1|owner", "1", false, false, &deny)).unwrap()
        else {
            panic!("owner command must be handled")
        };
        assert!(reply.starts_with("Denied 8|mallory"), "{reply}");
        assert!(matches!(
            acl.check(&ctx("8|mallory", "8", false, false, "hello")).unwrap(),
            AccessDecision::PairingRequired(_)
        ));
    }

    #[test]
    fn without_pairing_store_denied_messages_are_ignored() {
        let acl = AccessControl::new("t", AllowList::default(), GroupPolicy::Open, None);
        assert_eq!(
            acl.check(&ctx("1", "1", false, false, "hi")).unwrap(),
            AccessDecision::Ignore
        );
    }
}
