//! The test server of `tests/it/test_server.rs` over stdio, for the stdio edge-case tests
//! (`cargo test` builds it; the tests find it next to their own binary), and the egress bridge of the confinement
//! tests when started as one.

#[path = "../tests/it/test_server.rs"]
mod test_server;

use rmcp::ServiceExt;

fn main() -> anyhow::Result<()> {
    // Also the egress bridge of the confinement tests (as the nanobot programs are).
    nanobot_tools::egress::run_bridge_if_asked();
    serve()
}

#[tokio::main(flavor = "current_thread")]
async fn serve() -> anyhow::Result<()> {
    let server = test_server::TestServer::new()
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}
