//! Load generator for `benches/gateway.sh` and `benches/replicas.sh`: POSTs `/v1/chat/completions` with C
//! concurrent clients, each in its own session, N requests in all, and prints one JSON line: throughput and
//! p50/p99 latency. `URL` may be a comma-separated list (gateway replicas): client `w` uses URL `w mod n`.
//!
//! `bench_load URL[,URL…] KEY CONCURRENCY TOTAL [SESSION_PREFIX]`

use std::time::{Duration, Instant};

use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() >= 5,
        "usage: bench_load URL[,URL…] KEY CONCURRENCY TOTAL [SESSION_PREFIX]"
    );
    let urls: Vec<String> = args[1].split(',').map(str::to_owned).collect();
    let key = args[2].clone();
    let conc: usize = args[3].parse()?;
    let total: usize = args[4].parse()?;
    let prefix = args.get(5).cloned().unwrap_or_else(|| "bench".into());
    let client = reqwest::Client::builder().pool_max_idle_per_host(conc).build()?;
    let per = total.div_ceil(conc.max(1));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..conc {
        let (client, url, key) = (client.clone(), urls[w % urls.len()].clone(), key.clone());
        let session = format!("{prefix}-{w}");
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per);
            let mut errors = 0usize;
            for i in 0..per {
                let body = json!({"session_id": session,
                                  "messages": [{"role": "user", "content": format!("hi {i}")}]});
                let t = Instant::now();
                let ok = match client.post(&url).bearer_auth(&key).json(&body).send().await {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    lat.push(t.elapsed());
                } else {
                    errors += 1;
                }
            }
            (lat, errors)
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await?;
        all.extend(lat);
        errors += e;
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return f64::NAN;
        }
        let idx = ((all.len() as f64 - 1.0) * p).round() as usize;
        all[idx].as_secs_f64() * 1000.0
    };
    println!(
        "{}",
        json!({
            "concurrency": conc, "requests": all.len(), "errors": errors,
            "seconds": wall, "rps": all.len() as f64 / wall,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        })
    );
    Ok(())
}
