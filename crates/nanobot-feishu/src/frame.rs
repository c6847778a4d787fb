//! The long connection's frame: protobuf `pbbp2.Frame` as the official SDKs declare it (proto2, so the four
//! required scalars are always written).

use prost::Message;

/// Frame `method` of control frames (ping, pong).
pub const METHOD_CONTROL: i32 = 0;
/// Frame `method` of data frames (events, card callbacks).
pub const METHOD_DATA: i32 = 1;

/// One `key`/`value` header of a frame.
#[derive(Clone, PartialEq, Message)]
pub struct Header {
    /// Header name (`type`, `message_id`, `sum`, `seq`, `trace_id`, `biz_rt`).
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Header value.
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// A frame on the long connection.
#[derive(Clone, PartialEq, Message)]
pub struct Frame {
    /// Sequence id.
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    /// Log id.
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    /// The `service_id` of the connection URL.
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    /// [`METHOD_CONTROL`] or [`METHOD_DATA`].
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    /// Headers.
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<Header>,
    /// Payload encoding (unused).
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    /// Payload type (unused).
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    /// Payload: event JSON (data), client config JSON (pong), response JSON (acknowledgement).
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    /// Newer log id.
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl Frame {
    /// The value of header `key`, if present.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }

    /// A ping control frame for `service`.
    pub fn ping(service: i32) -> Self {
        Self {
            service,
            method: METHOD_CONTROL,
            headers: vec![Header {
                key: "type".into(),
                value: "ping".into(),
            }],
            ..Self::default()
        }
    }

    /// The acknowledgement of this data frame: the same frame, with a `biz_rt` header and a response payload
    /// carrying `code` (200 when the event was taken).
    pub fn ack(&self, code: u16, elapsed_ms: u128) -> Self {
        let mut ack = self.clone();
        ack.headers.push(Header {
            key: "biz_rt".into(),
            value: elapsed_ms.to_string(),
        });
        ack.payload = Some(format!("{{\"code\":{code},\"headers\":null,\"data\":null}}").into_bytes());
        ack
    }

    /// Encodes the frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Decodes a frame.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, prost::DecodeError> {
        Self::decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_acknowledges() {
        let frame = Frame {
            seq_id: 3,
            service: 7,
            method: METHOD_DATA,
            headers: vec![Header {
                key: "message_id".into(),
                value: "m1".into(),
            }],
            payload: Some(b"{}".to_vec()),
            ..Frame::default()
        };
        let back = Frame::from_bytes(&frame.to_bytes()).unwrap();
        assert_eq!(back, frame);
        let ack = back.ack(200, 5);
        assert_eq!(ack.header("message_id"), Some("m1"));
        assert_eq!(ack.header("biz_rt"), Some("5"));
        assert!(
            String::from_utf8(ack.payload.unwrap())
                .unwrap()
                .contains("\"code\":200")
        );
        // Required zero scalars are still written (proto2), so the SDKs' parsers accept a ping.
        assert!(Frame::ping(0).to_bytes().len() > 8);
        assert!(Frame::from_bytes(b"\xff\xff").is_err());
    }
}
