//! Leases: what only one process among several replicas on one shared bus may do at a time.
//!
//! On the in-process bus there is one process, so nothing is leased ([`crate::Bus::leases`] is `None`) and
//! everything runs. A bus shared by replicas (NATS) hands out [`Lease`]s: the replica holding
//! [`Role::Scheduler`] runs cron, the system jobs and the local trigger queue; the one holding
//! [`Role::Channel`] keeps that chat channel's connection (Telegram polling, a Slack socket, IMAP IDLE…) and
//! receives its outbound messages.

use async_trait::async_trait;

use crate::BusError;

/// Something one replica at a time does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// Cron, the system jobs (heartbeat, Dream) and the local trigger queue.
    Scheduler,
    /// A chat channel's connection, by channel name, and the delivery of that channel's outbound messages.
    Channel(String),
    /// A session whose turn runs outside the bus's queue (an HTTP API request, answered by the replica that
    /// received it), by session key: one such turn at a time across the replicas.
    Session(String),
}

impl Role {
    /// A stable name for the role (`scheduler`, `channel.<name>`), for lease keys, logs and metrics.
    pub fn key(&self) -> String {
        match self {
            Self::Scheduler => "scheduler".to_owned(),
            Self::Channel(name) => format!("channel.{name}"),
            Self::Session(key) => format!("session.{key}"),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

/// Hands out [`Lease`]s among the replicas sharing a bus.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Waits until this process holds `role` (for as long as another replica holds it and keeps it alive).
    /// Dropping the future gives up waiting. Fails only when the bus is closed.
    async fn acquire(&self, role: Role) -> Result<Box<dyn Lease>, BusError>;

    /// This process's name among the replicas (in logs and metrics).
    fn holder(&self) -> &str;

    /// How many times, since this process started, a [`Role::Session`] it asked for was held by another replica
    /// and it waited. A session's next turn normally finds the lease let go (its previous turn releases it
    /// before answering), so a count that grows outside a replica's death is a stall the user feels.
    fn session_waits(&self) -> u64 {
        0
    }
}

/// A held role. It is renewed in the background while it lives; dropping it releases it at once, so another
/// replica can take over without waiting for it to expire.
#[async_trait]
pub trait Lease: Send + Sync + std::fmt::Debug {
    /// The role held.
    fn role(&self) -> &Role;

    /// Resolves when the lease is lost against this process's will: it could not be renewed in time (the server
    /// was unreachable) and may now be held by another replica. Whoever acts under the lease must stop then.
    async fn lost(&self);

    /// Releases the lease and returns once another replica can take it (bounded by the lease's own timeouts).
    /// Dropping a lease releases it too, in the background: call this when the next holder may already be waiting
    /// (the same chat's next API request, say), so it does not wait for the release. The default drops it.
    async fn release(self: Box<Self>) {}
}
