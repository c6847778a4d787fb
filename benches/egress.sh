#!/usr/bin/env bash
# What egress by domain (tools.network.allowedDomains, docs/security.md) costs a request: the `egress_bench` example
# of nanobot-tools, release build, with the release `nanobot` program as the bridge. One curl fetches N URLs from a
# loopback server straight, then the same inside a bubblewrap sandbox without network through the bridge and the
# proxy; the sandbox's start with its bridge is timed apart and subtracted. Medians of ROUNDS.
#
# Usage: benches/egress.sh        Env: REQUESTS=500 ROUNDS=7 SKIP_BUILD=1
# Output: $BENCH_OUT/egress.jsonl (default target/bench) and the JSON line on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
mkdir -p "$OUT"
if [ -z "${SKIP_BUILD:-}" ]; then
    cargo build --release --locked -p nanobot >&2
    cargo build --release --locked -p nanobot-tools --example egress_bench >&2
fi
line=$("$REL/examples/egress_bench" "$REL/nanobot" "${REQUESTS:-500}" "${ROUNDS:-7}")
echo "$line" | tee -a "$OUT/egress.jsonl"
