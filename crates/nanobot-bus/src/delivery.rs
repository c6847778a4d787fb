//! [`Delivery`]: a message with the receipt a durable bus needs back, so a message is only forgotten once it has
//! been dealt with: an inbound message once the turn it started has been saved, an outbound one once its channel
//! has sent it ([`OutboundDelivery`]).

use async_trait::async_trait;

use crate::{InboundMessage, OutboundMessage};

/// How a delivered message was dealt with, as far as the bus is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// Dealt with: the turn ran and was saved, or the channel sent the message (or either failed in a way
    /// another try would repeat): forget the message.
    Done,
    /// It could not be dealt with here (this process is stopping): deliver the message again.
    Retry,
}

/// What a bus needs back for one delivered message. Settling consumes it; a receipt dropped unsettled is
/// delivered again by a durable bus once its acknowledgement time runs out.
#[async_trait]
pub trait Receipt: Send {
    /// Settles the delivery.
    async fn settle(self: Box<Self>, how: Settlement);
}

/// A message taken off a bus (inbound by default), with its receipt when the bus keeps messages until they are
/// settled.
pub struct Delivery<M = InboundMessage> {
    /// The message.
    pub msg: M,
    receipt: Option<Box<dyn Receipt>>,
}

/// An outbound message taken off a bus for the channels ([`crate::Bus::consume_outbound_delivery`]), settled once
/// the channel sent it.
pub type OutboundDelivery = Delivery<OutboundMessage>;

impl<M: std::fmt::Debug> std::fmt::Debug for Delivery<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("msg", &self.msg)
            .field("receipt", &self.receipt.is_some())
            .finish()
    }
}

impl<M> Delivery<M> {
    /// A message the bus has already forgotten (nothing to settle).
    pub fn taken(msg: M) -> Self {
        Self { msg, receipt: None }
    }

    /// A message the bus keeps until `receipt` is settled.
    pub fn with_receipt(msg: M, receipt: Box<dyn Receipt>) -> Self {
        Self {
            msg,
            receipt: Some(receipt),
        }
    }

    /// Splits the delivery into its message and its receipt (settle it when the message was dealt with).
    pub fn into_parts(self) -> (M, Option<Box<dyn Receipt>>) {
        (self.msg, self.receipt)
    }
}
