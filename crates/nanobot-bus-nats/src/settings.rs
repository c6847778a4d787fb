//! [`NatsBusSettings`]: where the server is and how the streams are laid out.

use std::time::Duration;

use nanobot_util::Secret;

use crate::NatsBusError;

/// The default of [`NatsBusSettings::outbound_max_age`]: a day.
pub const DEFAULT_OUTBOUND_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How to reach NATS and name the streams. [`Default`] is a local server (`nats://127.0.0.1:4222`), streams
/// `NANOBOT_IN`/`NANOBOT_OUT` on subjects `nanobot.in.*`/`nanobot.out.*`, 16 partitions.
#[derive(Clone)]
#[non_exhaustive]
pub struct NatsBusSettings {
    /// Server URL (`nats://host:4222`, `tls://host:4222`; user and password may be in it). TLS trusts the system's
    /// store (`SSL_CERT_FILE`/`SSL_CERT_DIR` honoured).
    pub url: String,
    /// An authentication token, when the server wants one.
    pub token: Option<Secret>,
    /// The stream name prefix (`<stream>_IN`, `<stream>_OUT`): letters, digits, `_` and `-`.
    pub stream: String,
    /// The subject prefix (`<prefix>.in.<partition>`, `<prefix>.out.<channel>`): letters, digits, `_` and `-`.
    pub subject_prefix: String,
    /// How many inbound partitions (1–1024): how many sessions may run at once across all replicas. Changing it
    /// moves sessions between partitions; do it with the gateways stopped and the inbound stream empty.
    pub partitions: u16,
    /// How long a taken message may go without an acknowledgement or progress before it is delivered again (a
    /// replica that died is noticed after this).
    pub ack_wait: Duration,
    /// The window in which a second publish with the same message id is dropped.
    pub duplicate_window: Duration,
    /// How long an unanswered inbound message is kept (zero: until answered).
    pub max_age: Duration,
    /// How long an outbound message waits for the replica holding its channel (zero: until taken). A channel no
    /// replica runs any more (disabled, or its configuration removed) would otherwise keep its replies on the
    /// server for ever. Default: one day.
    pub outbound_max_age: Duration,
    /// The agent's `unifiedSession`: every chat message without a session of its own is put in the unified
    /// session's partition ([`nanobot_bus::InboundMessage::turn_session_key`]), so that session's turns run one
    /// at a time across replicas as any other session's do. Default: off.
    pub unified_session: bool,
    /// Stream replicas in a NATS cluster (1 on a single server).
    pub replicas: usize,
    /// The client name the server shows.
    pub client_name: String,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on each JetStream request and publish acknowledgement.
    pub request_timeout: Duration,
    /// How long a lease (cron, a channel's connection) lasts without renewal: a replica that died gives its roles
    /// up within this time. Renewed every third of it. At least 1 s.
    pub lease_time: Duration,
    /// This process's name among the replicas (lease holder, logs, metrics). Default: `<host name>-<PID>`.
    pub replica: String,
}

impl std::fmt::Debug for NatsBusSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBusSettings")
            .field("url", &self.url_without_credentials())
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("stream", &self.stream)
            .field("subject_prefix", &self.subject_prefix)
            .field("partitions", &self.partitions)
            .field("ack_wait", &self.ack_wait)
            .finish_non_exhaustive()
    }
}

impl Default for NatsBusSettings {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            token: None,
            stream: "NANOBOT".into(),
            subject_prefix: "nanobot".into(),
            partitions: 16,
            ack_wait: Duration::from_secs(30),
            duplicate_window: Duration::from_secs(120),
            max_age: Duration::ZERO,
            outbound_max_age: DEFAULT_OUTBOUND_MAX_AGE,
            unified_session: false,
            replicas: 1,
            client_name: "nanobot".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            lease_time: Duration::from_secs(15),
            replica: default_replica_name(),
        }
    }
}

/// `<host name>-<PID>`: unique among the processes of one machine, readable in logs.
fn default_replica_name() -> String {
    let host = nanobot_util::read_to_string_bounded(std::path::Path::new("/proc/sys/kernel/hostname"), 256)
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "nanobot".into());
    format!("{host}-{}", std::process::id())
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl NatsBusSettings {
    /// Settings for the server at `url`, the rest default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), NatsBusError> {
        if self.url.trim().is_empty() {
            return Err(NatsBusError::Config("url is empty".into()));
        }
        if !is_name(&self.stream) {
            return Err(NatsBusError::Config(format!(
                "stream {:?} must be letters, digits, `_` or `-`",
                self.stream
            )));
        }
        if !is_name(&self.subject_prefix) {
            return Err(NatsBusError::Config(format!(
                "subjectPrefix {:?} must be letters, digits, `_` or `-`",
                self.subject_prefix
            )));
        }
        if !(1..=1024).contains(&self.partitions) {
            return Err(NatsBusError::Config(format!(
                "partitions must be 1 to 1024, not {}",
                self.partitions
            )));
        }
        if self.ack_wait < Duration::from_secs(1) {
            return Err(NatsBusError::Config("ackWait must be at least 1 s".into()));
        }
        if self.lease_time < Duration::from_secs(1) {
            return Err(NatsBusError::Config("leaseTime must be at least 1 s".into()));
        }
        if self.replica.trim().is_empty() {
            return Err(NatsBusError::Config(
                "replica (the replica's name) is empty".into(),
            ));
        }
        Ok(())
    }

    /// The URL with any `user:password@` removed (for logs and errors).
    pub fn url_without_credentials(&self) -> String {
        match self.url.split_once("://") {
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://{host}"),
                None => self.url.clone(),
            },
            None => match self.url.rsplit_once('@') {
                Some((_, host)) => host.to_owned(),
                None => self.url.clone(),
            },
        }
    }

    pub(crate) fn inbound_stream(&self) -> String {
        format!("{}_IN", self.stream)
    }

    pub(crate) fn outbound_stream(&self) -> String {
        format!("{}_OUT", self.stream)
    }

    pub(crate) fn inbound_subjects(&self) -> Vec<String> {
        vec![format!("{}.in.*", self.subject_prefix)]
    }

    pub(crate) fn outbound_subjects(&self) -> Vec<String> {
        vec![format!("{}.out.*", self.subject_prefix)]
    }

    pub(crate) fn partition_subject(&self, p: u16) -> String {
        format!("{}.in.{p}", self.subject_prefix)
    }

    pub(crate) fn partition_consumer(&self, p: u16) -> String {
        format!("{}-in-{p}", self.stream)
    }

    /// The one outbound consumer of version 0.1 (every channel), removed at connect.
    pub(crate) fn legacy_outbound_consumer(&self) -> String {
        format!("{}-out", self.stream)
    }

    /// The durable consumer of `channel`'s outbound messages, pulled by the replica holding the channel.
    pub(crate) fn outbound_consumer(&self, channel: &str) -> String {
        format!("{}-out-{}", self.stream, safe_token(channel))
    }

    /// The key-value bucket of the leases.
    pub(crate) fn lease_bucket(&self) -> String {
        format!("{}_LEASES", self.stream)
    }

    /// The subject of `channel`'s outbound messages (characters NATS gives a meaning to are replaced by `_`).
    pub(crate) fn outbound_subject(&self, channel: &str) -> String {
        format!("{}.out.{}", self.subject_prefix, safe_token(channel))
    }
}

/// `name` as one subject token or consumer-name part: letters, digits, `_` and `-` kept, anything else `_`.
fn safe_token(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() { "_".into() } else { safe }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_and_bad_names_are_named() {
        let s = NatsBusSettings::new("nats://bot:sekrit@nats.internal:4222");
        assert_eq!(s.url_without_credentials(), "nats://nats.internal:4222");
        assert!(!format!("{s:?}").contains("sekrit"));
        let bad = NatsBusSettings {
            stream: "a.b".into(),
            ..NatsBusSettings::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("stream \"a.b\""));
        let bad = NatsBusSettings {
            partitions: 0,
            ..NatsBusSettings::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("partitions"));
        assert_eq!(
            NatsBusSettings::default().outbound_subject("we.b*"),
            "nanobot.out.we_b_"
        );
    }
}
