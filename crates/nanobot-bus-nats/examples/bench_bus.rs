//! The bus's own latency, for `benches/replicas.sh`: one message at a time published inbound, taken by the
//! consumer and settled as done (what every channel message costs on top of its turn), on the in-process bus and
//! on the NATS bus. Prints one JSON line per bus: messages, p50 and p99 in milliseconds.
//!
//! `bench_bus NATS_URL [MESSAGES]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use nanobot_bus::{Bus, InProcessBus, InboundMessage, Settlement};
use nanobot_bus_nats::{NatsBus, NatsBusSettings};

async fn measure(name: &str, bus: Arc<dyn Bus>, n: usize) -> anyhow::Result<()> {
    let mut lat: Vec<Duration> = Vec::with_capacity(n);
    for i in 0..n {
        let mut msg = InboundMessage::new("telegram", "1", format!("{}", i % 64), "hello");
        msg.metadata.insert("message_id".into(), serde_json::json!(i));
        let t = Instant::now();
        bus.publish_inbound(msg).await?;
        let delivery = tokio::time::timeout(Duration::from_secs(10), bus.consume_inbound_delivery())
            .await?
            .ok_or_else(|| anyhow::anyhow!("bus closed"))?;
        let (_, receipt) = delivery.into_parts();
        if let Some(r) = receipt {
            r.settle(Settlement::Done).await;
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    println!(
        "{}",
        serde_json::json!({"bus": name, "messages": n, "p50_ms": pct(0.5), "p99_ms": pct(0.99)})
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() >= 2, "usage: bench_bus NATS_URL [MESSAGES]");
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2000);
    measure("in-process", Arc::new(InProcessBus::new(64)), n).await?;
    let mut settings = NatsBusSettings::new(args[1].clone());
    settings.stream = "BENCH".into();
    settings.subject_prefix = "bench".into();
    measure("nats", Arc::new(NatsBus::connect(settings).await?), n).await?;
    Ok(())
}
