//! [`Delivery`]: an inbound message with the receipt a durable bus needs back, so a message is only forgotten
//! once the turn it started has been saved.

use async_trait::async_trait;

use crate::InboundMessage;

/// How the turn a delivered message started ended, as far as the bus is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// The turn ran and was saved (or failed in a way another try would repeat): forget the message.
    Done,
    /// The turn could not run here (this process is stopping): deliver the message again.
    Retry,
}

/// What a bus needs back for one delivered message. Settling consumes it; a receipt dropped unsettled is
/// delivered again by a durable bus once its acknowledgement time runs out.
#[async_trait]
pub trait Receipt: Send {
    /// Settles the delivery.
    async fn settle(self: Box<Self>, how: Settlement);
}

/// An inbound message taken off a bus, with its receipt when the bus keeps messages until they are settled.
pub struct Delivery {
    /// The message.
    pub msg: InboundMessage,
    receipt: Option<Box<dyn Receipt>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("msg", &self.msg)
            .field("receipt", &self.receipt.is_some())
            .finish()
    }
}

impl Delivery {
    /// A message the bus has already forgotten (nothing to settle).
    pub fn taken(msg: InboundMessage) -> Self {
        Self { msg, receipt: None }
    }

    /// A message the bus keeps until `receipt` is settled.
    pub fn with_receipt(msg: InboundMessage, receipt: Box<dyn Receipt>) -> Self {
        Self {
            msg,
            receipt: Some(receipt),
        }
    }

    /// Splits the delivery into its message and its receipt (settle it when the turn is over).
    pub fn into_parts(self) -> (InboundMessage, Option<Box<dyn Receipt>>) {
        (self.msg, self.receipt)
    }
}
