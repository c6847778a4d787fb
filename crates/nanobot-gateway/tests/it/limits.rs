//! Connection limits of the HTTP servers: slow-header and stalled-body clients are closed after the configured
//! time while others are still served, over-cap connections are refused, oversized bodies get 413, and each
//! refusal is counted. Tiny configured bounds; the assertions are on outcomes and counters, never on time
//! (each wait below has a generous guard so a broken bound fails instead of hanging).

use nanobot_gateway::Gateway;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{GUARD, KEY, api_url, client, ops_url, options};

async fn gateway(home: &TempHome, mock: &MockLlm, limits: serde_json::Value) -> Gateway {
    nanobot_testkit::install_ring();
    let patch = json!({"api": {"limits": limits.clone()}, "gateway": {"limits": limits}});
    Gateway::start(options(home, mock, patch)).await.unwrap()
}

/// Reads until the server closes the connection; what it sent.
async fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(GUARD, s.read_to_end(&mut out))
        .await
        .expect("the server must close the connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn slow_header_clients_are_closed_while_others_are_served() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("served"));
    let gw = gateway(&home, &mock, json!({"headerReadTimeout": 0.2, "idleTimeout": 30})).await;
    let metrics = gw.metrics().clone();
    let addr = gw.api_addr().unwrap();
    let mut slow = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A request head that never ends.
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: 1")
            .await
            .unwrap();
        slow.push(s);
    }
    // Normal clients are served meanwhile, on both servers.
    let c = client();
    let r = c
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(c.get(ops_url(&gw, "/health")).send().await.unwrap().status(), 200);
    for s in &mut slow {
        let got = read_to_close(s).await;
        assert!(!got.contains("200 OK"), "{got}");
    }
    // A connection that never sends a byte is closed too.
    let mut silent = TcpStream::connect(gw.http_addr().unwrap()).await.unwrap();
    read_to_close(&mut silent).await;
    tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(metrics.refusals("api", "header_timeout") >= 5);
    assert!(metrics.refusals("gateway", "header_timeout") >= 1);
    assert!(
        metrics
            .render(&Default::default())
            .contains("nanobot_http_refused_total{server=\"api\",kind=\"header_timeout\"}")
    );
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_closed_at_the_idle_bound() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = gateway(&home, &mock, json!({"headerReadTimeout": 30, "idleTimeout": 0.3})).await;
    let metrics = gw.metrics().clone();
    let mut s = TcpStream::connect(gw.api_addr().unwrap()).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\": "
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let got = read_to_close(&mut s).await;
    assert!(!got.contains("200 OK"), "{got}");
    assert_eq!(mock.request_count(), 0, "no turn ran on half a body");
    tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(metrics.refusals("api", "idle_timeout") >= 1);
}

#[tokio::test]
async fn connections_over_the_per_client_cap_are_refused() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = gateway(
        &home,
        &mock,
        json!({"headerReadTimeout": 30, "idleTimeout": 30, "maxConnectionsPerClient": 3}),
    )
    .await;
    let metrics = gw.metrics().clone();
    let addr = gw.api_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Each held connection is proven accepted: it is served.
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(GUARD, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let mut over = TcpStream::connect(addr).await.unwrap();
    let got = read_to_close(&mut over).await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    let r = client().get(api_url(&gw, "/health")).send().await;
    assert!(
        r.map(|r| r.status() == 503).unwrap_or(true),
        "a fourth client is refused"
    );
    drop(held);
    tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(metrics.refusals("api", "per_client_cap") >= 1);
}

#[tokio::test]
async fn body_limits_are_per_route_and_counted() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let gw = gateway(
        &home,
        &mock,
        json!({"maxBodyBytes": 4096, "maxOtherBodyBytes": 16}),
    )
    .await;
    let metrics = gw.metrics().clone();
    let c = client();
    let big = "x".repeat(8192);
    let r = c
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "mock-model", "messages": [{"role": "user", "content": big}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = c
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "mock-model", "messages": [{"role": "user", "content": "small"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "under the chat route's limit");
    assert_eq!(mock.request_count(), 1);
    tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(metrics.refusals("api", "body_too_large") >= 1);
}
