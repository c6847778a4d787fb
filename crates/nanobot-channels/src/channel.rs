//! The [`Channel`] trait, the [`Heartbeat`] a channel bumps while it is healthy, and the [`Transcribe`] seam.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use nanobot_bus::{Bus, OutboundMessage, Receipt};
use tokio_util::sync::CancellationToken;

use crate::ChannelError;

/// One chat platform adapter.
///
/// [`Channel::run`] receives messages from the platform and publishes them to the bus until `cancel` fires;
/// [`Channel::send`] delivers one outbound message. The [`ChannelManager`](crate::ChannelManager) calls `run`
/// under a supervisor (restarting it with backoff when it fails or stalls) and routes outbound messages to
/// `send` by [`Channel::name`].
#[async_trait]
pub trait Channel: Send + Sync {
    /// The name outbound messages use to address this channel (`telegram`, `discord`, …).
    fn name(&self) -> &str;

    /// Receives messages until `cancel` fires (then returns `Ok`). Returning early, with `Ok` or `Err`, makes the
    /// supervisor restart it after a backoff.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError>;

    /// Delivers one message to the platform.
    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError>;

    /// Delivers one message taken off a bus with its receipt ([`nanobot_bus::Bus::consume_outbound_delivery`]).
    /// A channel that keeps the message to deliver it later (the websocket channel holds an answer until its
    /// client is back) takes the receipt out of `receipt` and settles it once the message is out or given up
    /// ([`nanobot_bus::Settlement::Done`]); dropped unsettled (the channel stopped, or its process), the message
    /// goes back to the bus and to the channel's next holder. The manager settles what is left in `receipt`
    /// once this returns. The default sends and leaves the receipt.
    async fn send_receipted(
        &self,
        msg: &OutboundMessage,
        receipt: &mut Option<Box<dyn Receipt>>,
    ) -> Result<(), ChannelError> {
        let _ = receipt;
        self.send(msg).await
    }

    /// A counter the channel bumps whenever its receive loop makes progress (a poll returned, an event
    /// arrived). When it returns one, the manager's watchdog restarts the channel if the counter stops moving.
    fn heartbeat(&self) -> Option<Heartbeat> {
        None
    }

    /// True when the channel renders [`OutboundKind::StreamDelta`](nanobot_bus::OutboundKind::StreamDelta)
    /// itself (by editing a message). Otherwise the manager drops deltas and delivers the stream's final text as
    /// a reply.
    fn supports_streaming(&self) -> bool {
        false
    }

    /// True when the channel shows an outbound message's inline buttons
    /// ([`META_BUTTONS`](nanobot_bus::META_BUTTONS)) itself. Otherwise the manager adds them to the text.
    fn supports_buttons(&self) -> bool {
        false
    }

    /// For a channel its platform calls (a webhook): the address it listens on, `Some` once it does and `None`
    /// again when it stops. `None` (the default) for channels that only connect out.
    fn listening(&self) -> Option<tokio::sync::watch::Receiver<Option<std::net::SocketAddr>>> {
        None
    }
}

/// A progress counter shared between a channel's receive loop and the manager's watchdog. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat(Arc<AtomicU64>);

impl Heartbeat {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records progress.
    pub fn beat(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times progress was recorded.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a transcription failed (the transcriber's own error, kept as the source).
#[derive(Debug, thiserror::Error)]
#[error("transcription failed")]
pub struct TranscribeError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Turns a voice or audio file into text. The gateway adapts the providers' transcriber to this trait, so
/// channels do not depend on the providers crate.
#[async_trait]
pub trait Transcribe: Send + Sync {
    /// The text spoken in the audio file at `path`.
    async fn transcribe(&self, path: &Path) -> Result<String, TranscribeError>;
}
