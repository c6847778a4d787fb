//! The message bus: how chat channels, cron, the heartbeat and subagents meet the agent.
//!
//! This crate owns the two message types that cross the bus — [`InboundMessage`] (something a user or a
//! scheduler said) and [`OutboundMessage`] (something the agent says back, typed by [`OutboundKind`]) — and the
//! [`Bus`] trait with its in-process implementation, [`InProcessBus`].
//!
//! It knows nothing about LLMs, tools or any chat platform: channels depend on it, the agent depends on it, and
//! they never depend on each other.
//!
//! ```
//! use nanobot_bus::{Bus, InProcessBus, InboundMessage};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! # rt.block_on(async {
//! let bus = InProcessBus::new(16);
//! bus.publish_inbound(InboundMessage::new("cli", "user", "direct", "hello")).await?;
//! let msg = bus.consume_inbound().await.ok_or("bus closed")?;
//! assert_eq!(msg.session_key(), "cli:direct");
//! # Ok(())
//! # })
//! # }
//! ```

mod delivery;
mod lease;
mod memory;
mod message;

pub use delivery::{Delivery, OutboundDelivery, Receipt, Settlement};
pub use lease::{Lease, Leases, Role};

pub use memory::InProcessBus;
pub use message::{
    INTERNAL_CHANNELS, InboundKind, InboundMessage, META_BUTTONS, META_IS_GROUP, META_STREAM_RESUMING,
    OutboundKind, OutboundMessage, Principal, SYSTEM_CHANNEL, UNIFIED_SESSION_KEY, UnattendedRun, buttons,
    buttons_as_text, is_internal_channel,
};

use async_trait::async_trait;

/// Errors from publishing to a bus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// The bus was shut down; the message was not accepted.
    #[error("the message bus is closed")]
    Closed,
    /// A bus on a server (NATS) could not take the message; the text names the server and what failed.
    #[error("the message bus is unavailable: {0}")]
    Unavailable(String),
}

/// A two-way message bus: inbound messages flow to the agent, outbound messages flow to channels.
///
/// Publishing waits when a queue is full (backpressure), so a slow consumer slows producers instead of letting
/// memory grow without bound. After [`Bus::close`], publishing fails with [`BusError::Closed`] while consumers
/// still drain everything that was accepted before, then receive `None`.
#[async_trait]
pub trait Bus: Send + Sync {
    /// Queues a message for the agent, waiting while the inbound queue is full.
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), BusError>;
    /// Takes the next message for the agent; `None` once the bus is closed and drained.
    async fn consume_inbound(&self) -> Option<InboundMessage>;
    /// Takes the next message for the agent with its [`Receipt`], which the dispatcher settles once the turn
    /// the message started has been saved ([`Settlement::Done`]) or could not run here
    /// ([`Settlement::Retry`]: a durable bus delivers it again, to this process or another). A bus that
    /// forgets a message once it is taken (the in-process one) gives no receipt: this default.
    async fn consume_inbound_delivery(&self) -> Option<Delivery> {
        self.consume_inbound().await.map(Delivery::taken)
    }
    /// Queues a message for the channels, waiting while the outbound queue is full. Implementations call
    /// [`OutboundMessage::stamp_trace`] first, so the send is a child of the span that published it.
    async fn publish_outbound(&self, msg: OutboundMessage) -> Result<(), BusError>;
    /// Takes the next message for the channels; `None` once the bus is closed and drained.
    async fn consume_outbound(&self) -> Option<OutboundMessage>;
    /// Takes the next message for the channels with its [`Receipt`], which the channel manager settles once the
    /// channel has sent it ([`Settlement::Done`], also when sending failed for good) or could not send it here
    /// ([`Settlement::Retry`]: this process is stopping; a durable bus delivers it again, to the next holder of the
    /// channel). A process that dies holding it unsettled loses nothing: a durable bus delivers it again once its
    /// acknowledgement time runs out. A bus that forgets a message once it is taken (the in-process one) gives no
    /// receipt: this default.
    async fn consume_outbound_delivery(&self) -> Option<OutboundDelivery> {
        self.consume_outbound().await.map(Delivery::taken)
    }
    /// Number of inbound messages waiting (for metrics).
    fn inbound_len(&self) -> usize;
    /// Number of outbound messages waiting (for metrics).
    fn outbound_len(&self) -> usize;
    /// Stops accepting new messages. Messages already accepted are still delivered.
    fn close(&self);

    /// The leases of the replicas sharing this bus, when it is shared: what only one of them may run (cron, a
    /// channel's connection) is run under a [`Lease`]. `None` (the default, and the in-process bus): this
    /// process is alone and runs everything.
    fn leases(&self) -> Option<std::sync::Arc<dyn Leases>> {
        None
    }

    /// Lets `interceptor` take, at once, messages for a turn running in this process that must not wait behind
    /// it (an answer to the question the turn asks, `/stop`). A partitioned bus hands out a session's next
    /// message only once its running turn is over, so such a message, published by whichever process runs the
    /// channel, is first offered to the process running its session's turn; what the interceptor does not take
    /// is queued as usual. The default (and the in-process bus, whose dispatcher hands every message over at
    /// once): nothing to do.
    fn set_interceptor(&self, interceptor: std::sync::Arc<dyn Interceptor>) {
        let _ = interceptor;
    }

    /// Per-partition figures of a partitioned bus (for metrics): how many messages wait in each partition and
    /// how many this process took from it. Empty (the default, and the in-process bus): not partitioned.
    fn partitions(&self) -> Vec<PartitionStats> {
        Vec::new()
    }
}

/// Takes messages that must not wait in their session's queue (see [`Bus::set_interceptor`]).
pub trait Interceptor: Send + Sync {
    /// Takes `msg` now when it is for a turn running in this process and must not wait behind it; `true`: taken
    /// (it is not queued).
    fn intercept(&self, msg: &InboundMessage) -> bool;
}

/// One partition of a partitioned bus, as [`Bus::partitions`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStats {
    /// The partition's number.
    pub partition: u16,
    /// Messages waiting in it (across all processes), as last read from the server.
    pub waiting: u64,
    /// Messages this process took from it since it started.
    pub taken: u64,
}

impl PartitionStats {
    /// The figures of `partition`.
    pub fn new(partition: u16, waiting: u64, taken: u64) -> Self {
        Self {
            partition,
            waiting,
            taken,
        }
    }
}
