//! The DingTalk channel against the testkit's fake DingTalk (the fake itself is checked by the dingtalk-stream
//! SDK in the testkit's tests): real HTTP and WebSocket on loopback.

mod e2e;
mod files_out;
