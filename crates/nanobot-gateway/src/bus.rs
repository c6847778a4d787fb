//! [`GatewayBus`]: the gateway's bus (in-process, or one shared by replicas such as the NATS bus) with one gateway
//! concern on top: it can stop taking inbound messages while outbound delivery goes on (the first step of a
//! graceful shutdown). Where the heartbeat reports is the agent's to know (`nanobot-core`'s routes), not the
//! bus's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use nanobot_bus::{Bus, BusError, InProcessBus, InboundMessage, OutboundMessage};

/// Channels whose messages never make a chat the heartbeat's target (the bus's one list).
pub use nanobot_bus::INTERNAL_CHANNELS;

/// The gateway's bus (see the module docs).
#[derive(Clone)]
pub struct GatewayBus {
    inner: Arc<dyn Bus>,
    inbound_closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for GatewayBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayBus")
            .field("shared", &self.inner.leases().is_some())
            .field("inbound_closed", &self.inbound_closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl GatewayBus {
    /// An in-process bus holding up to `capacity` messages each way.
    pub fn new(capacity: usize) -> Self {
        Self::over(Arc::new(InProcessBus::new(capacity)))
    }

    /// The gateway's concerns over another bus (the NATS bus of replicas).
    pub fn over(inner: Arc<dyn Bus>) -> Self {
        Self {
            inner,
            inbound_closed: Arc::default(),
        }
    }

    /// Refuses further inbound messages ([`BusError::Closed`]); queued ones can still be consumed and outbound
    /// messages still flow.
    pub fn close_inbound(&self) {
        self.inbound_closed.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Bus for GatewayBus {
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), BusError> {
        if self.inbound_closed.load(Ordering::SeqCst) {
            return Err(BusError::Closed);
        }
        self.inner.publish_inbound(msg).await
    }

    async fn consume_inbound(&self) -> Option<InboundMessage> {
        self.inner.consume_inbound().await
    }

    async fn consume_inbound_delivery(&self) -> Option<nanobot_bus::Delivery> {
        self.inner.consume_inbound_delivery().await
    }

    async fn publish_outbound(&self, msg: OutboundMessage) -> Result<(), BusError> {
        self.inner.publish_outbound(msg).await
    }

    async fn consume_outbound(&self) -> Option<OutboundMessage> {
        self.inner.consume_outbound().await
    }

    async fn consume_outbound_delivery(&self) -> Option<nanobot_bus::OutboundDelivery> {
        self.inner.consume_outbound_delivery().await
    }

    fn inbound_len(&self) -> usize {
        self.inner.inbound_len()
    }

    fn outbound_len(&self) -> usize {
        self.inner.outbound_len()
    }

    fn close(&self) {
        self.close_inbound();
        self.inner.close();
    }

    fn leases(&self) -> Option<Arc<dyn nanobot_bus::Leases>> {
        self.inner.leases()
    }

    fn partitions(&self) -> Vec<nanobot_bus::PartitionStats> {
        self.inner.partitions()
    }

    fn set_interceptor(&self, interceptor: Arc<dyn nanobot_bus::Interceptor>) {
        self.inner.set_interceptor(interceptor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_inbound_after_close_and_still_delivers() {
        let bus = GatewayBus::new(8);
        bus.publish_inbound(InboundMessage::new("telegram", "u", "42", "hi"))
            .await
            .unwrap();
        bus.publish_inbound(InboundMessage::new("api", "u", "default", "hi"))
            .await
            .unwrap();
        assert_eq!(bus.inbound_len(), 2);
        bus.close_inbound();
        assert!(matches!(
            bus.publish_inbound(InboundMessage::new("telegram", "u", "42", "late"))
                .await,
            Err(BusError::Closed)
        ));
        // Queued messages are still delivered, and outbound still flows.
        assert_eq!(bus.consume_inbound().await.unwrap().content, "hi");
        bus.publish_outbound(OutboundMessage::reply("telegram", "42", "ok"))
            .await
            .unwrap();
        assert_eq!(bus.outbound_len(), 1);
    }
}
