//! The QQ channel against the testkit's fake QQ Bot API (the fake itself is checked by the qq-botpy SDK in the
//! testkit's tests): real HTTP and WebSocket on loopback.

mod e2e;
