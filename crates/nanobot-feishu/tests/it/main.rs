//! The Feishu channel against the testkit's fake Feishu (the fake itself is checked by the lark-oapi SDK in the
//! testkit's tests): real HTTP and WebSocket on loopback.

mod e2e;
mod outbound;
