//! A loopback mock LLM for the benchmarks in `benches/`: answers every OpenAI-format chat completion with a
//! short text (streamed or not), after `BENCH_MOCK_DELAY_MS` milliseconds (default 0: a model that takes its time,
//! as a real one does, is `200`). Prints its base URL (`http://127.0.0.1:PORT/v1`) on stdout, then serves until
//! killed or until stdin closes.
//!
//! `cargo run --release -p nanobot-gateway --example bench_mock_llm`

use std::io::Read;

use nanobot_testkit::{MockLlm, MockReply};

#[tokio::main]
async fn main() {
    nanobot_testkit::install_ring();
    let mock = MockLlm::start().await;
    let delay = std::env::var("BENCH_MOCK_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let mut reply = MockReply::text("Hello! I am a benchmark answer.").with_usage(50, 8);
    if delay > 0 {
        reply = reply.delay(std::time::Duration::from_millis(delay));
    }
    mock.set_fallback(reply);
    println!("{}", mock.openai_base_url());
    // Serve until stdin reaches EOF (or the process is killed).
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await;
}
