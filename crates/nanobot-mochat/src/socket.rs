//! A small Socket.IO v5 client over Engine.IO v4's WebSocket transport (JSON parser, default namespace): what
//! the channel needs and no more. `rust_socketio` 0.6 was the first choice, but its engine.io crate depends on
//! native-tls (OpenSSL) unconditionally, which this project does not link.
//!
//! Frames: Engine.IO `0` open (handshake JSON), `1` close, `2` ping (answered `3`), `4` message; Socket.IO inside a
//! message: `0` connect (with the auth object), `1` disconnect, `2` event `[name, data]`, `3` ack, `4` connect
//! error. Every wait is bounded: the handshake by the connect timeout, reads by the server's ping interval plus
//! ping timeout, acknowledgements by [`ACK_TIMEOUT`].

use std::collections::VecDeque;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Bound of waiting for the acknowledgement of an emitted event.
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Something the server sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// An event: name and first argument.
    Event(String, Value),
    /// The server ended the connection (Engine.IO close or Socket.IO disconnect).
    Closed(String),
}

/// A parsed Socket.IO packet (inside an Engine.IO message).
#[derive(Debug, Clone, PartialEq)]
enum Packet {
    Connect(Value),
    Disconnect,
    Event(Option<u64>, Value),
    Ack(u64, Value),
    ConnectError(Value),
    Unsupported,
}

fn parse_packet(s: &str) -> Packet {
    let mut chars = s.chars();
    let Some(kind) = chars.next() else {
        return Packet::Unsupported;
    };
    let mut rest = chars.as_str();
    // A namespace other than "/" comes first as "/nsp,"; only the default namespace is used.
    if rest.starts_with('/')
        && let Some(comma) = rest.find(',')
    {
        rest = &rest[comma + 1..];
    }
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let id = rest[..digits].parse::<u64>().ok();
    let data: Value = serde_json::from_str(&rest[digits..]).unwrap_or(Value::Null);
    match kind {
        '0' => Packet::Connect(data),
        '1' => Packet::Disconnect,
        '2' => Packet::Event(id, data),
        '3' => id.map_or(Packet::Unsupported, |id| Packet::Ack(id, data)),
        '4' => Packet::ConnectError(data),
        _ => Packet::Unsupported,
    }
}

/// The WebSocket URL of an Engine.IO v4 server at `base` (http/https) under `path`.
pub(crate) fn ws_url(base: &str, path: &str) -> String {
    let base = base.trim_end_matches('/');
    let base = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_string()
    };
    format!("{base}{path}/?EIO=4&transport=websocket")
}

/// A connected Socket.IO client.
pub(crate) struct Socket {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    silence_limit: Duration,
    next_id: u64,
    pending: VecDeque<Incoming>,
}

impl Socket {
    /// Connects, completes the Engine.IO handshake and joins the default namespace with `auth`, within `timeout`.
    pub(crate) async fn connect(url: &str, auth: &Value, timeout: Duration) -> Result<Self, String> {
        tokio::time::timeout(timeout, Self::connect_inner(url, auth))
            .await
            .map_err(|_| format!("no Socket.IO connection within {timeout:?}"))?
    }

    async fn connect_inner(url: &str, auth: &Value) -> Result<Self, String> {
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| format!("WebSocket: {e}"))?;
        let open = loop {
            match ws.next().await {
                Some(Ok(Ws::Text(t))) => break t.to_string(),
                Some(Ok(Ws::Close(_))) | None => return Err("closed during the Engine.IO handshake".into()),
                Some(Err(e)) => return Err(format!("WebSocket: {e}")),
                Some(Ok(_)) => {}
            }
        };
        let handshake: Value = open
            .strip_prefix('0')
            .and_then(|j| serde_json::from_str(j).ok())
            .ok_or("the server did not open an Engine.IO v4 session")?;
        let ping_interval = handshake["pingInterval"].as_u64().unwrap_or(25_000);
        let ping_timeout = handshake["pingTimeout"].as_u64().unwrap_or(20_000);
        let mut socket = Self {
            ws,
            silence_limit: Duration::from_millis(ping_interval + ping_timeout),
            next_id: 0,
            pending: VecDeque::new(),
        };
        socket.send_raw(format!("40{auth}")).await?;
        loop {
            match socket.read_packet().await? {
                Some(Packet::Connect(_)) => return Ok(socket),
                Some(Packet::ConnectError(data)) => {
                    let why = data["message"]
                        .as_str()
                        .map_or_else(|| data.to_string(), str::to_string);
                    return Err(format!("the server refused to connect: {why}"));
                }
                Some(Packet::Disconnect) => return Err("disconnected while joining".into()),
                _ => {}
            }
        }
    }

    async fn send_raw(&mut self, text: String) -> Result<(), String> {
        self.ws
            .send(Ws::Text(text.into()))
            .await
            .map_err(|e| format!("WebSocket send: {e}"))
    }

    /// Reads one Socket.IO packet, answering pings; `None` for Engine.IO frames that carry none. Bounded by the
    /// server's ping interval plus ping timeout.
    async fn read_packet(&mut self) -> Result<Option<Packet>, String> {
        let msg = tokio::time::timeout(self.silence_limit, self.ws.next())
            .await
            .map_err(|_| format!("no ping from the server within {:?}", self.silence_limit))?;
        let text = match msg {
            Some(Ok(Ws::Text(t))) => t.to_string(),
            Some(Ok(Ws::Close(_))) | None => return Err("closed by the server".into()),
            Some(Err(e)) => return Err(format!("WebSocket: {e}")),
            Some(Ok(_)) => return Ok(None),
        };
        match text.chars().next() {
            Some('2') => {
                self.send_raw("3".into()).await?;
                Ok(None)
            }
            Some('1') => Err("the server closed the Engine.IO session".into()),
            Some('4') => Ok(Some(parse_packet(&text[1..]))),
            _ => Ok(None),
        }
    }

    /// The next event, or why the connection ended.
    pub(crate) async fn next(&mut self) -> Incoming {
        if let Some(ev) = self.pending.pop_front() {
            return ev;
        }
        loop {
            match self.read_packet().await {
                Err(why) => return Incoming::Closed(why),
                Ok(Some(Packet::Event(_, data))) => {
                    if let Some(ev) = event(data) {
                        return ev;
                    }
                }
                Ok(Some(Packet::Disconnect)) => return Incoming::Closed("disconnected by the server".into()),
                Ok(_) => {}
            }
        }
    }

    /// Emits `name` with `data` and waits (bounded by [`ACK_TIMEOUT`]) for its acknowledgement's first argument.
    /// Events arriving meanwhile are kept for [`next`](Self::next).
    pub(crate) async fn call(&mut self, name: &str, data: &Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send_raw(format!("42{id}{}", json!([name, data]))).await?;
        let wait = async {
            loop {
                match self.read_packet().await? {
                    Some(Packet::Ack(got, args)) if got == id => {
                        return Ok(args.get(0).cloned().unwrap_or(Value::Null));
                    }
                    Some(Packet::Event(_, data)) => {
                        if let Some(ev) = event(data) {
                            self.pending.push_back(ev);
                        }
                    }
                    Some(Packet::Disconnect) => return Err("disconnected by the server".to_string()),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(ACK_TIMEOUT, wait)
            .await
            .map_err(|_| format!("{name}: no acknowledgement within {ACK_TIMEOUT:?}"))?
    }

    /// Leaves politely (Socket.IO disconnect, then the WebSocket close).
    pub(crate) async fn close(mut self) {
        let _ = self.send_raw("41".into()).await;
        let _ = self.ws.close(None).await;
    }
}

fn event(data: Value) -> Option<Incoming> {
    let mut items = match data {
        Value::Array(items) => items.into_iter(),
        _ => return None,
    };
    let name = items.next()?.as_str()?.to_string();
    Some(Incoming::Event(name, items.next().unwrap_or(Value::Null)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_packets() {
        assert_eq!(
            parse_packet(r#"0{"sid":"x"}"#),
            Packet::Connect(json!({"sid": "x"}))
        );
        assert_eq!(
            parse_packet(r#"2["a",{"b":1}]"#),
            Packet::Event(None, json!(["a", {"b": 1}]))
        );
        assert_eq!(
            parse_packet(r#"312[{"result":true}]"#),
            Packet::Ack(12, json!([{"result": true}]))
        );
        assert_eq!(
            parse_packet(r#"2/admin,5["a"]"#),
            Packet::Event(Some(5), json!(["a"]))
        );
        assert_eq!(
            parse_packet(r#"4{"message":"no"}"#),
            Packet::ConnectError(json!({"message": "no"}))
        );
        assert_eq!(parse_packet("1"), Packet::Disconnect);
        assert_eq!(parse_packet("3"), Packet::Unsupported, "an ack without an id");
        assert_eq!(parse_packet(""), Packet::Unsupported);
        assert_eq!(
            event(json!(["x"])),
            Some(Incoming::Event("x".into(), Value::Null))
        );
        assert_eq!(event(json!([1])), None);
    }

    #[test]
    fn builds_the_websocket_url() {
        assert_eq!(
            ws_url("https://mochat.io/", "/socket.io"),
            "wss://mochat.io/socket.io/?EIO=4&transport=websocket"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:5", "/s"),
            "ws://127.0.0.1:5/s/?EIO=4&transport=websocket"
        );
    }
}
