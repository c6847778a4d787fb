//! Socket Mode (Slack's WebSocket event delivery), with every wait bounded.
//!
//! slack-morphism's own listener reconnects in tasks of its own whose WebSocket handshake has no bound, so a
//! server that accepts a connection and then says nothing would hold the channel forever without anyone
//! noticing. The protocol is small, so the channel speaks it here on tokio-tungstenite and keeps slack-morphism
//! for the Web API and the event types:
//!
//! - `apps.connections.open` (a bounded Web API call, made by the caller) gives a `wss://` URL;
//! - [`open`] connects and waits for the `hello` envelope, each within the bound;
//! - [`serve`] hands every `events_api` and `interactive` envelope to the channel and then acknowledges it
//!   (`{"envelope_id": …}`), pings the server every `ping_every` (each send bounded by it) and gives the
//!   connection up when nothing (not even a pong) has arrived for three intervals;
//! - a `disconnect` envelope (Slack refreshes connections every few hours) ends [`serve`] with
//!   [`Ended::Refresh`]: the caller opens a new connection before dropping the old one.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use slack_morphism::prelude::{
    SlackInteractionBlockActionsEvent, SlackInteractionEvent, SlackPushEventCallback,
};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// An open Socket Mode connection.
pub(crate) type Connection = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What a connection delivers to the channel, in order.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// An Events API event (messages, mentions).
    Push(Box<SlackPushEventCallback>),
    /// A button press (block actions).
    Press(Box<SlackInteractionBlockActionsEvent>),
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// A step got no answer within the bound; names the step.
    Stalled(&'static str),
    /// The connection failed or was closed; says how.
    Failed(String),
}

/// How [`serve`] ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Slack asked for a new connection (`disconnect` envelope).
    Refresh,
    /// The channel stopped taking deliveries.
    Stopped,
    /// The connection is gone; says why.
    Lost(String),
}

/// Connects to `url` and waits for its `hello`, each within `bound`.
pub(crate) async fn open(url: &str, bound: Duration) -> Result<Connection, OpenError> {
    let (mut ws, _) = tokio::time::timeout(bound, tokio_tungstenite::connect_async(url))
        .await
        .map_err(|_| OpenError::Stalled("Socket Mode connection (WebSocket handshake)"))?
        .map_err(|e| OpenError::Failed(format!("Socket Mode connection failed: {e}")))?;
    let hello = async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    if envelope_type(&text).as_deref() == Some("hello") {
                        return Ok(());
                    }
                }
                Some(Ok(Message::Close(_))) | None => {
                    return Err(OpenError::Failed(
                        "the Socket Mode connection was closed before its `hello`".into(),
                    ));
                }
                Some(Err(e)) => return Err(OpenError::Failed(format!("Socket Mode connection failed: {e}"))),
                Some(Ok(_)) => {}
            }
        }
    };
    tokio::time::timeout(bound, hello)
        .await
        .map_err(|_| OpenError::Stalled("Socket Mode connection (no `hello`)"))??;
    Ok(ws)
}

/// Reads envelopes from `ws` until it ends: each delivery is queued on `deliver`, then acknowledged. Pings every
/// `ping_every`; a connection silent for three intervals is [`Ended::Lost`].
pub(crate) async fn serve(
    ws: &mut Connection,
    deliver: &mpsc::Sender<Delivery>,
    ping_every: Duration,
) -> Ended {
    let mut ping = tokio::time::interval(ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            _ = ping.tick() => {
                let silent = heard.elapsed();
                if silent >= ping_every * 3 {
                    return Ended::Lost(format!("nothing from Slack for {silent:?} (not even a pong)"));
                }
                if let Err(why) = send(ws, Message::Ping(Vec::new().into()), ping_every).await {
                    return Ended::Lost(why);
                }
            }
            frame = ws.next() => {
                heard = Instant::now();
                let text = match frame {
                    None | Some(Ok(Message::Close(_))) => return Ended::Lost("closed by Slack".into()),
                    Some(Err(e)) => return Ended::Lost(e.to_string()),
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(_)) => continue,
                };
                match handle(&text, deliver).await {
                    Handled::Ack(id) => {
                        let ack = json!({ "envelope_id": id }).to_string();
                        if let Err(why) = send(ws, Message::text(ack), ping_every).await {
                            return Ended::Lost(why);
                        }
                    }
                    Handled::Nothing => {}
                    Handled::Refresh => return Ended::Refresh,
                    Handled::Stopped => return Ended::Stopped,
                }
            }
        }
    }
}

/// What one text frame asked for.
enum Handled {
    /// Acknowledge this envelope id.
    Ack(String),
    /// Nothing to answer (`hello`, a frame that is not an envelope).
    Nothing,
    /// Slack asked for a new connection.
    Refresh,
    /// The channel stopped taking deliveries.
    Stopped,
}

async fn handle(text: &str, deliver: &mpsc::Sender<Delivery>) -> Handled {
    let Ok(mut frame) = serde_json::from_str::<Value>(text) else {
        tracing::warn!("slack: a Socket Mode frame that is not JSON was ignored");
        return Handled::Nothing;
    };
    let id = frame["envelope_id"].as_str().map(str::to_owned);
    let kind = frame["type"].as_str().unwrap_or_default().to_owned();
    let delivery = match kind.as_str() {
        "disconnect" => {
            tracing::info!(reason = %frame["reason"].as_str().unwrap_or("?"), "slack: Socket Mode refresh requested");
            return Handled::Refresh;
        }
        "events_api" => match serde_json::from_value::<SlackPushEventCallback>(frame["payload"].take()) {
            Ok(event) => Some(Delivery::Push(Box::new(event))),
            Err(e) => {
                tracing::warn!(error = %e, "slack: an Events API envelope could not be read; acknowledged and skipped");
                None
            }
        },
        "interactive" => match serde_json::from_value::<SlackInteractionEvent>(frame["payload"].take()) {
            Ok(SlackInteractionEvent::BlockActions(press)) => Some(Delivery::Press(Box::new(press))),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "slack: an interactive envelope could not be read; acknowledged and skipped");
                None
            }
        },
        // `hello`, slash commands and kinds this version does not know: acknowledged when they carry an id.
        _ => None,
    };
    if let Some(d) = delivery
        && deliver.send(d).await.is_err()
    {
        return Handled::Stopped;
    }
    id.map_or(Handled::Nothing, Handled::Ack)
}

/// Sends `msg` within `bound`.
async fn send(ws: &mut Connection, msg: Message, bound: Duration) -> Result<(), String> {
    match tokio::time::timeout(bound, ws.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("a send to Slack did not finish within {bound:?}")),
    }
}

fn envelope_type(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    v["type"].as_str().map(str::to_owned)
}
