//! Issue 42: an answer to a running turn reaches it whichever replica receives it, instead of queueing behind
//! the turn that waits for it (the owner's `yes` to an approval question never arrived on the NATS bus).

use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use nanobot_bus::{Bus, InboundMessage, Interceptor, Settlement};
use nanobot_bus_nats::NatsBus;
use nanobot_testkit::nats::NatsServer;

use crate::{GUARD, QUIET, msg, next_either, settings};

/// Takes messages saying "yes" (as the agent takes the answer to its open question), and remembers them.
#[derive(Default)]
struct TakesYes(Mutex<Vec<String>>);

impl Interceptor for TakesYes {
    fn intercept(&self, msg: &InboundMessage) -> bool {
        let take = msg.content == "yes";
        if take {
            nanobot_util::lock(&self.0).push(format!("{}:{}", msg.chat_id, msg.content));
        }
        take
    }
}

impl TakesYes {
    fn taken(&self) -> Vec<String> {
        nanobot_util::lock(&self.0).clone()
    }
}

/// Two replicas, each with its interceptor.
async fn two(server: &NatsServer, key: Option<&str>) -> Result<[(NatsBus, Arc<TakesYes>); 2]> {
    let mut out = Vec::new();
    for _ in 0..2 {
        let mut s = settings(server);
        s.key = key.map(Into::into);
        let bus = NatsBus::connect(s).await?;
        let taker = Arc::new(TakesYes::default());
        bus.set_interceptor(taker.clone());
        out.push((bus, taker));
    }
    out.try_into().map_err(|_| anyhow::anyhow!("two replicas"))
}

#[tokio::test]
async fn an_answer_reaches_the_running_turn_on_another_replica_and_the_rest_queues() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let [(a, a_took), (b, b_took)] = two(&server, Some("the replicas' deployment key, 32+ chars")).await?;
    // A turn of chat c1 starts on one replica and stays running (its message unsettled).
    a.publish_inbound(msg("c1", "delete the logs?", 1)).await?;
    let (runs, turn) = next_either(&a, &b).await?;
    let (other, runner_took, other_took) = if runs == 0 {
        (&b, &a_took, &b_took)
    } else {
        (&a, &b_took, &a_took)
    };
    // The owner's answer arrives at the other replica (it holds the channel): the running turn takes it.
    other.publish_inbound(msg("c1", "yes", 2)).await?;
    assert_eq!(runner_took.taken(), ["c1:yes"]);
    assert!(other_took.taken().is_empty());
    // Anything else for c1 queues behind the turn as always, and "yes" in a chat with no running turn (in
    // another partition) is a turn of its own.
    let c2 = (2..64)
        .map(|n| format!("c{n}"))
        .find(|c| a.partition_of(&format!("telegram:{c}")) != a.partition_of("telegram:c1"))
        .context("a chat in another partition")?;
    other.publish_inbound(msg("c1", "and then?", 3)).await?;
    other.publish_inbound(msg(&c2, "yes", 4)).await?;
    let (_, d) = next_either(&a, &b).await?;
    let m = crate::settle(d, Settlement::Done).await;
    assert_eq!((m.chat_id.as_str(), m.content.as_str()), (c2.as_str(), "yes"));
    assert!(
        tokio::time::timeout(QUIET, next_either(&a, &b)).await.is_err(),
        "c1's next message waits for its turn"
    );
    crate::settle(turn, Settlement::Done).await;
    let (_, d) = next_either(&a, &b).await?;
    assert_eq!(crate::settle(d, Settlement::Done).await.content, "and then?");
    // With no turn of c1 running, an answer is no replica's to take: it queues (and runs as a turn).
    other.publish_inbound(msg("c1", "yes", 5)).await?;
    assert_eq!(runner_took.taken().len(), 1);
    let (_, d) = next_either(&a, &b).await?;
    assert_eq!(crate::settle(d, Settlement::Done).await.content, "yes");
    Ok(())
}

#[tokio::test]
async fn an_offer_without_the_key_or_replayed_is_not_taken() -> Result<()> {
    let Some(server) = NatsServer::start().await? else {
        return Ok(());
    };
    let [(a, a_took), (b, b_took)] = two(&server, Some("the replicas' deployment key, 32+ chars")).await?;
    a.publish_inbound(msg("c1", "may I?", 1)).await?;
    let (_, turn) = next_either(&a, &b).await?;
    let side = a.side_subject("telegram:c1");
    let intruder = server.client().await?;
    let mut wire = intruder.subscribe(side.clone()).await?;
    let _ = tokio::time::timeout(GUARD, intruder.request("no-one.answers", "".into())).await;

    // A plain "yes" from a client without the key: declined.
    let forged = serde_json::to_vec(&msg("c1", "yes", 9))?;
    let reply = tokio::time::timeout(GUARD, intruder.request(side.clone(), forged.into())).await??;
    assert_eq!(reply.payload.as_ref(), b"queue");
    // The owner's real "yes", captured on its way, then sent again: taken once.
    b.publish_inbound(msg("c1", "yes", 2)).await?;
    let took = |t: &Arc<TakesYes>| t.taken().len();
    assert_eq!(took(&a_took) + took(&b_took), 1);
    let mut captured = None;
    while let Ok(Some(m)) = tokio::time::timeout(GUARD, wire.next()).await {
        if m.payload.starts_with(b"nbs1") {
            captured = Some(m.payload);
            break;
        }
    }
    let captured = captured.context("the sealed offer went by")?;
    let reply = tokio::time::timeout(GUARD, intruder.request(side, captured)).await??;
    assert_eq!(reply.payload.as_ref(), b"queue", "a replay is refused");
    assert_eq!(took(&a_took) + took(&b_took), 1);
    crate::settle(turn, Settlement::Done).await;
    Ok(())
}
