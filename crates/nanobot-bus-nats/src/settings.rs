//! [`NatsBusSettings`]: where the server is and how the streams are laid out.

use std::path::PathBuf;
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
    /// A user name, with [`password`](Self::password) (instead of putting both in the URL).
    pub user: Option<String>,
    /// The password of [`user`](Self::user).
    pub password: Option<Secret>,
    /// An NKey seed (`SU…`): the client signs the server's challenge with it, and the server knows only the
    /// public key.
    pub nkey_seed: Option<Secret>,
    /// A credentials file (`.creds`: a user JWT and its NKey seed), for servers in operator mode (`nsc`).
    pub creds_file: Option<PathBuf>,
    /// A client certificate (PEM) presented over TLS, with [`tls_key`](Self::tls_key).
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of [`tls_cert`](Self::tls_cert).
    pub tls_key: Option<PathBuf>,
    /// Certificate authorities (PEM) that sign the server's certificate, used instead of the system's store.
    pub tls_ca_file: Option<PathBuf>,
    /// Run even when the server lets a client without credentials publish on the bus's subjects (anyone who
    /// reaches it could then act as any user). Default `false`: [`NatsBus::connect`](crate::NatsBus::connect)
    /// refuses such a server.
    pub allow_anonymous: bool,
    /// The deployment key the replicas share (at least [`MIN_KEY_CHARS`](crate::MIN_KEY_CHARS) characters):
    /// every message on the bus is then sealed with it ([`DeploymentKey`](crate::DeploymentKey)), so a client
    /// that reaches the server without it can neither read nor make one a replica accepts. Every replica must
    /// have the same key, or none.
    pub key: Option<Secret>,
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
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("nkey_seed", &self.nkey_seed.as_ref().map(|_| "…"))
            .field("creds_file", &self.creds_file)
            .field("tls_cert", &self.tls_cert)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("allow_anonymous", &self.allow_anonymous)
            .field("key", &self.key.as_ref().map(|_| "…"))
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
            user: None,
            password: None,
            nkey_seed: None,
            creds_file: None,
            tls_cert: None,
            tls_key: None,
            tls_ca_file: None,
            allow_anonymous: false,
            key: None,
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
        self.deployment_key()?;
        self.validate_credentials()
    }

    /// The deployment key, when one is set (an error names a key too short).
    pub fn deployment_key(&self) -> Result<Option<crate::DeploymentKey>, NatsBusError> {
        self.key
            .as_ref()
            .map(|k| crate::DeploymentKey::new(k.expose()))
            .transpose()
    }

    /// One way to authenticate at most, each complete, and a seed that is one (never echoed).
    fn validate_credentials(&self) -> Result<(), NatsBusError> {
        if self.user.is_some() != self.password.is_some() {
            return Err(NatsBusError::Config(
                "user and password go together: give both or neither".into(),
            ));
        }
        let given: Vec<&str> = [
            ("credentials in the url", self.url_credentials().is_some()),
            ("token", self.token.is_some()),
            ("user and password", self.user.is_some()),
            ("nkeySeed", self.nkey_seed.is_some()),
            ("credsFile", self.creds_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if given.len() > 1 {
            return Err(NatsBusError::Config(format!(
                "give one way to authenticate, not {}",
                given.join(" and ")
            )));
        }
        if let Some(seed) = &self.nkey_seed
            && nkeys::KeyPair::from_seed(seed.expose().trim()).is_err()
        {
            return Err(NatsBusError::Config(
                "nkeySeed is not an NKey seed (it starts with `S`, as `nsc` or `nk -gen user` print it)"
                    .into(),
            ));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(NatsBusError::Config(
                "tlsCert and tlsKey go together: give both or neither".into(),
            ));
        }
        for (field, path) in [
            ("credsFile", &self.creds_file),
            ("tlsCert", &self.tls_cert),
            ("tlsKey", &self.tls_key),
            ("tlsCaFile", &self.tls_ca_file),
        ] {
            if let Some(path) = path
                && let Err(e) = std::fs::metadata(path)
            {
                return Err(NatsBusError::Config(format!("{field} {}: {e}", path.display())));
            }
        }
        Ok(())
    }

    /// The credentials written into the URL, decoded: `nats://user:password@host` (a user and password) or
    /// `nats://token@host` (a token), as NATS clients read them.
    pub(crate) fn url_credentials(&self) -> Option<UrlCredentials> {
        let rest = self
            .url
            .split_once("://")
            .map_or(self.url.as_str(), |(_, rest)| rest);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let (userinfo, _) = authority.rsplit_once('@')?;
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        match userinfo.split_once(':') {
            Some((user, password)) => {
                Some(UrlCredentials::User(decode(user), Secret::from(decode(password))))
            }
            None if userinfo.is_empty() => None,
            None => Some(UrlCredentials::Token(Secret::from(decode(userinfo)))),
        }
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

/// Credentials written into the server URL.
pub(crate) enum UrlCredentials {
    /// `user:password@`.
    User(String, Secret),
    /// `token@`.
    Token(Secret),
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
        let s = NatsBusSettings::new("nats://bot:sek%40rit@nats.internal:4222");
        assert_eq!(s.url_without_credentials(), "nats://nats.internal:4222");
        assert!(
            matches!(s.url_credentials(), Some(UrlCredentials::User(u, p)) if u == "bot" && p.expose() == "sek@rit")
        );
        let t = NatsBusSettings::new("tls://t0k3n@nats.internal:4222/");
        assert!(matches!(t.url_credentials(), Some(UrlCredentials::Token(t)) if t.expose() == "t0k3n"));
        assert!(NatsBusSettings::new("nats://h:4222").url_credentials().is_none());
        let both = NatsBusSettings {
            token: Some(Secret::from("x")),
            ..NatsBusSettings::new("nats://bot:pw@h:4222")
        };
        assert!(
            both.validate()
                .unwrap_err()
                .to_string()
                .contains("credentials in the url and token")
        );
        assert!(!format!("{s:?}").contains("rit"));
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

    #[test]
    fn credentials_are_one_complete_way_and_a_bad_seed_is_not_echoed() {
        let error = |s: NatsBusSettings| s.validate().unwrap_err().to_string();
        let user_only = NatsBusSettings {
            user: Some("bot".into()),
            ..NatsBusSettings::default()
        };
        assert!(error(user_only).contains("user and password go together"));
        let two = NatsBusSettings {
            token: Some(Secret::from("t0ken")),
            nkey_seed: Some(Secret::from(nkeys::KeyPair::new_user().seed().unwrap())),
            ..NatsBusSettings::default()
        };
        assert!(error(two).contains("not token and nkeySeed"));
        let bad_seed = NatsBusSettings {
            nkey_seed: Some(Secret::from("SUnotaseedatall-sekrit")),
            ..NatsBusSettings::default()
        };
        let e = error(bad_seed);
        assert!(
            e.contains("nkeySeed is not an NKey seed") && !e.contains("sekrit"),
            "{e}"
        );
        let good_seed = NatsBusSettings {
            nkey_seed: Some(Secret::from(nkeys::KeyPair::new_user().seed().unwrap())),
            ..NatsBusSettings::default()
        };
        good_seed.validate().unwrap();
        let half_tls = NatsBusSettings {
            tls_cert: Some("/etc/hostname".into()),
            ..NatsBusSettings::default()
        };
        assert!(error(half_tls).contains("tlsCert and tlsKey go together"));
        let missing = NatsBusSettings {
            creds_file: Some("/nonexistent/bot.creds".into()),
            ..NatsBusSettings::default()
        };
        assert!(error(missing).contains("credsFile /nonexistent/bot.creds"));
    }
}
