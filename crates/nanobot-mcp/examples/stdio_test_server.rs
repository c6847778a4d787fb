//! The test server of `tests/it/test_server.rs` over stdio, for the stdio edge-case tests
//! (`cargo test` builds it; the tests find it next to their own binary).

#[path = "../tests/it/test_server.rs"]
mod test_server;

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let server = test_server::TestServer::new()
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}
