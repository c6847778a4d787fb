//! The in-process bus: two bounded tokio channels.

use nanobot_util::{read_lock, write_lock};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use tokio::sync::{Mutex, mpsc};

use crate::{Bus, BusError, InboundMessage, OutboundMessage};

/// One direction of the bus: a bounded queue that can be closed while its receiver drains.
#[derive(Debug)]
struct Lane<T> {
    tx: RwLock<Option<mpsc::Sender<T>>>,
    rx: Mutex<mpsc::Receiver<T>>,
    capacity: usize,
}

impl<T: Send> Lane<T> {
    fn new(capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        Self {
            tx: RwLock::new(Some(tx)),
            rx: Mutex::new(rx),
            capacity,
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<T>> {
        read_lock(&self.tx).clone()
    }

    async fn publish(&self, msg: T) -> Result<(), BusError> {
        let tx = self.sender().ok_or(BusError::Closed)?;
        tx.send(msg).await.map_err(|_| BusError::Closed)
    }

    async fn consume(&self) -> Option<T> {
        self.rx.lock().await.recv().await
    }

    fn len(&self) -> usize {
        self.sender().map_or(0, |tx| self.capacity - tx.capacity())
    }

    fn close(&self) {
        write_lock(&self.tx).take();
    }
}

/// A [`Bus`] inside one process, with a bounded queue in each direction.
///
/// Cloning is cheap and every clone is the same bus. Several tasks may consume the same direction; each message
/// goes to exactly one of them.
#[derive(Debug, Clone)]
pub struct InProcessBus {
    inbound: Arc<Lane<InboundMessage>>,
    outbound: Arc<Lane<OutboundMessage>>,
}

impl InProcessBus {
    /// A bus whose queues each hold at most `capacity` messages (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            inbound: Arc::new(Lane::new(capacity)),
            outbound: Arc::new(Lane::new(capacity)),
        }
    }
}

impl Default for InProcessBus {
    /// A bus with room for 1024 messages each way.
    fn default() -> Self {
        Self::new(1024)
    }
}

#[async_trait]
impl Bus for InProcessBus {
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), BusError> {
        self.inbound.publish(msg).await
    }

    async fn consume_inbound(&self) -> Option<InboundMessage> {
        self.inbound.consume().await
    }

    async fn publish_outbound(&self, mut msg: OutboundMessage) -> Result<(), BusError> {
        msg.stamp_trace();
        self.outbound.publish(msg).await
    }

    async fn consume_outbound(&self) -> Option<OutboundMessage> {
        self.outbound.consume().await
    }

    fn inbound_len(&self) -> usize {
        self.inbound.len()
    }

    fn outbound_len(&self) -> usize {
        self.outbound.len()
    }

    fn close(&self) {
        self.inbound.close();
        self.outbound.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn msg(i: usize) -> InboundMessage {
        InboundMessage::new("cli", "u", "c", i.to_string())
    }

    #[tokio::test]
    async fn delivers_in_order_and_counts_queue_depth() {
        let bus = InProcessBus::new(8);
        for i in 0..5 {
            bus.publish_inbound(msg(i)).await.unwrap();
        }
        assert_eq!(bus.inbound_len(), 5);
        for i in 0..5 {
            assert_eq!(bus.consume_inbound().await.unwrap().content, i.to_string());
        }
        assert_eq!(bus.inbound_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn full_queue_applies_backpressure() {
        let bus = InProcessBus::new(1);
        bus.publish_inbound(msg(0)).await.unwrap();
        // The second publish cannot complete while the queue is full (paused clock: no real waiting).
        let blocked = tokio::time::timeout(Duration::from_secs(60), bus.publish_inbound(msg(1))).await;
        assert!(blocked.is_err(), "publish into a full queue must wait");
        assert_eq!(bus.consume_inbound().await.unwrap().content, "0");
        bus.publish_inbound(msg(2)).await.unwrap();
        assert_eq!(bus.consume_inbound().await.unwrap().content, "2");
    }

    #[tokio::test]
    async fn close_rejects_new_messages_but_drains_accepted_ones() {
        let bus = InProcessBus::new(4);
        bus.publish_inbound(msg(1)).await.unwrap();
        bus.publish_outbound(OutboundMessage::reply("cli", "c", "x"))
            .await
            .unwrap();
        bus.close();
        assert!(matches!(bus.publish_inbound(msg(2)).await, Err(BusError::Closed)));
        assert_eq!(bus.consume_inbound().await.unwrap().content, "1");
        assert!(bus.consume_inbound().await.is_none());
        assert_eq!(bus.consume_outbound().await.unwrap().content, "x");
        assert!(bus.consume_outbound().await.is_none());
    }

    #[tokio::test]
    async fn concurrent_producers_and_consumers_lose_nothing() {
        let bus = InProcessBus::new(3);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let bus = bus.clone();
                tokio::spawn(async move {
                    for i in 0..50 {
                        bus.publish_inbound(msg(p * 1000 + i)).await.unwrap();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let bus = bus.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(m) = bus.consume_inbound().await {
                        got.push(m.content.parse::<usize>().unwrap());
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        bus.close();
        let mut all = Vec::new();
        for c in consumers {
            all.extend(c.await.unwrap());
        }
        all.sort_unstable();
        let mut expected: Vec<usize> = (0..4).flat_map(|p| (0..50).map(move |i| p * 1000 + i)).collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
    }
}
