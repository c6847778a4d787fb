#!/usr/bin/env bash
# Benchmarks of issue 26: gateway replicas on NATS JetStream, against one loopback mock LLM that takes a fixed
# time per call (200 ms, as a real model would), in one run:
#   - /v1/chat/completions throughput and p50/p99 with the in-process bus (one gateway), and with 1, 2 and 3
#     replicas on the NATS bus (one home, as on a shared volume), CONCURRENCY sessions at once; then 1 and 3
#     replicas with a deployment key (every message and lease record sealed, issue 42);
#   - the bus's own latency: one message published, taken and settled, in-process vs NATS (bench_bus).
# All replicas share this machine's cores: the table says how the CPU was shared, docs/benchmarks.md models what
# separate machines would give.
#
# Usage: benches/replicas.sh   (env: PROFILE=release SKIP_BUILD=1 CONCURRENCY=32 REQUESTS=640 DELAY_MS=200
#                               TURNS=8: turns one process runs at once, NANOBOT_MAX_CONCURRENT_REQUESTS)
# Needs nats-server on PATH (Debian: apt install nats-server).
# Output: $BENCH_OUT/replicas.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
PROFILE=${PROFILE:-release}
CONCURRENCY=${CONCURRENCY:-32}
REQUESTS=${REQUESTS:-640}
DELAY_MS=${DELAY_MS:-200}
TURNS=${TURNS:-8}
KEY=sk-bench
UTIL="python3 $ROOT/benches/bench_util.py"
case "$PROFILE" in dev) BIN=$ROOT/target/debug ;; *) BIN=$ROOT/target/$PROFILE ;; esac
mkdir -p "$OUT"
RESULTS=$OUT/replicas.jsonl
: > "$RESULTS"

source "$ROOT/benches/common.sh"
cpu_seconds() { # pid… → user+system CPU seconds of those processes
  python3 - "$@" <<'PY'
import os, sys
hz = os.sysconf("SC_CLK_TCK")
total = 0
for pid in sys.argv[1:]:
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(f[11]) + int(f[12])
    except OSError:
        pass
print(total / hz)
PY
}

command -v nats-server > /dev/null || { echo "nats-server is not installed (apt install nats-server)" >&2; exit 2; }

echo "== building ($PROFILE)" >&2
[ -n "${SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --profile "$PROFILE" -q -p nanobot-gateway-bin \
  && cargo build --profile "$PROFILE" -q -p nanobot-gateway -p nanobot-bus-nats --examples)

echo "== nats-server" >&2
start_nats nats   # a server with a user: an open one is refused

echo "== mock LLM (${DELAY_MS} ms per call)" >&2
start_mock replicas-mock

echo "== bus latency" >&2
"$BIN/examples/bench_bus" "$NATS" 2000 | while read -r line; do record bus "$line"; done

# run_case NAME BUS REPLICAS: a fresh home, REPLICAS gateways on it, the load spread over them.
run_case() {
  local name=$1 bus=$2 n=$3
  local home=$OUT/replicas-home-$name
  rm -rf "$home"; mkdir -p "$home/.nanobot/workspace"
  local urls="" pids=()
  for i in $(seq "$n"); do
    local api gw cfg
    api=$(free_port); gw=$(free_port); cfg=$home/.nanobot/config-$i.json
    local busjson='{"kind": "memory"}'
    [ "$bus" = nats ] && busjson="{\"kind\": \"nats\", \"nats\": {\"url\": \"$NATS\", \"stream\": \"B_$name\", \"subjectPrefix\": \"b_$name\", \"replica\": \"r$i\"}}"
    [ "$bus" = nats-sealed ] && busjson="{\"kind\": \"nats\", \"nats\": {\"url\": \"$NATS\", \"stream\": \"B_$name\", \"subjectPrefix\": \"b_$name\", \"replica\": \"r$i\", \"key\": \"bench deployment key of at least thirty-two characters\"}}"
    cat > "$cfg" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$home/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}},
  "gateway": {"host": "127.0.0.1", "port": $gw, "heartbeat": {"enabled": false}, "bus": $busjson},
  "api": {"host": "127.0.0.1", "port": $api, "apiKey": "$KEY", "timeout": 120,
          "limits": {"maxConnectionsPerClient": 512}},
  "tools": {"exec": {"enable": false}, "web": {"enable": false}}
}
JSON
    HOME=$home NANOBOT_MAX_CONCURRENT_REQUESTS=$TURNS "$BIN/nanobot-gateway" -c "$cfg" > "$OUT/replicas-$name-$i.log" 2>&1 &
    pids+=($!); PIDS+=($!)
    urls="$urls${urls:+,}http://127.0.0.1:$api/v1/chat/completions"
    $UTIL wait "127.0.0.1:$api" 120
  done
  "$BIN/examples/bench_load" "$urls" "$KEY" 4 8 "warm-$name" > /dev/null
  local before after
  before=$(cpu_seconds "${pids[@]}")
  local result
  result=$("$BIN/examples/bench_load" "$urls" "$KEY" "$CONCURRENCY" "$REQUESTS" "$name")
  after=$(cpu_seconds "${pids[@]}")
  record "$name" "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(replicas=int(sys.argv[2]), bus=sys.argv[3], cpu_s=float(sys.argv[5])-float(sys.argv[4]), turns=int(sys.argv[6])); print(json.dumps(d))' "$result" "$n" "$bus" "$before" "$after" "$TURNS")"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}

echo "== in-process bus, one gateway" >&2
run_case memory1 memory 1
for n in 1 2 3; do
  echo "== NATS bus, $n replica(s)" >&2
  run_case "nats$n" nats "$n"
done
for n in 1 3; do
  echo "== NATS bus, sealed, $n replica(s)" >&2
  run_case "sealed$n" nats-sealed "$n"
done

python3 - "$RESULTS" "$DELAY_MS" "$CONCURRENCY" "$TURNS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"Mock model: {sys.argv[2]} ms per call; {sys.argv[3]} sessions at once; {sys.argv[4]} turns at once per process.\n")
print("| case | replicas | requests/s | p50 ms | p99 ms | errors | gateway CPU s |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r["bench"] == "bus":
        continue
    print(f"| {r['bus']} | {r['replicas']} | {r['rps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} | {r['cpu_s']:.2f} |")
print("\n| bus | messages | p50 ms | p99 ms |")
print("|---|---|---|---|")
for r in rows:
    if r["bench"] == "bus":
        print(f"| {r['bus']} | {r['messages']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} |")
PY
