#!/usr/bin/env bash
# Benchmark of issue 42: failover under load. Three gateway replicas on NATS JetStream (one home), one loopback
# mock LLM taking 200 ms per call; one replica is killed with `kill -9` a third of the way into the run:
#   - api: CONCURRENCY API clients, each its own session, spread over the replicas; a request cut short on the
#     dead replica is sent again to another with the same Idempotency-Key (as the test's clients do);
#   - ws: one websocket client with CHATS chats asking as fast as they are answered; the replica holding the
#     websocket channel is the one killed, and the client reconnects to the next holder.
# Each with the default timings (ackWaitS 30, leaseTimeS 15) and with short ones (ackWaitS 3, leaseTimeS 2): what
# a user sees is bounded by them, and this measures by how much.
#
# Usage: benches/failover.sh   (env: PROFILE=release SKIP_BUILD=1 RUN_S=45 CONCURRENCY=24 CHATS=8 DELAY_MS=200
#                               MODES="api ws")
# Needs nats-server on PATH (Debian: apt install nats-server).
# Output: $BENCH_OUT/failover.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
PROFILE=${PROFILE:-release}
RUN_S=${RUN_S:-45}
CONCURRENCY=${CONCURRENCY:-24}
CHATS=${CHATS:-8}
DELAY_MS=${DELAY_MS:-200}
KEY=sk-bench
UTIL="python3 $ROOT/benches/bench_util.py"
case "$PROFILE" in dev) BIN=$ROOT/target/debug ;; *) BIN=$ROOT/target/$PROFILE ;; esac
mkdir -p "$OUT"
RESULTS=$OUT/failover.jsonl
: > "$RESULTS"

source "$ROOT/benches/common.sh"
command -v nats-server > /dev/null || { echo "nats-server is not installed (apt install nats-server)" >&2; exit 2; }

echo "== building ($PROFILE)" >&2
[ -n "${SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --profile "$PROFILE" -q -p nanobot-gateway-bin \
  && cargo build --profile "$PROFILE" -q -p nanobot-gateway --example bench_mock_llm --example bench_failover)

echo "== nats-server" >&2
start_nats failover-nats

echo "== mock LLM (${DELAY_MS} ms per call)" >&2
start_mock failover-mock

# run_case NAME MODE TIMINGS: a fresh home, three replicas on it (TIMINGS: extra keys of gateway.bus.nats), the
# load of MODE, one replica killed.
run_case() {
  local name=$1 mode=$2 timings=$3
  local home=$OUT/failover-home-$name ws_port
  rm -rf "$home"; mkdir -p "$home/.nanobot/workspace"
  ws_port=$(free_port)
  local urls="" ops="" pids=() pidlist=""
  for i in 1 2 3; do
    local api gw cfg channels='{}'
    api=$(free_port); gw=$(free_port); cfg=$home/.nanobot/config-$i.json
    [ "$mode" = ws ] && channels="{\"websocket\": {\"enabled\": true, \"host\": \"127.0.0.1\", \"port\": $ws_port, \"token\": \"ws-token\"}}"
    cat > "$cfg" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$home/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}},
  "channels": $channels,
  "gateway": {"host": "127.0.0.1", "port": $gw, "heartbeat": {"enabled": false},
              "bus": {"kind": "nats", "nats": {"url": "$NATS", "stream": "F_$name", "subjectPrefix": "f_$name",
                      "replica": "r$i"$timings}}},
  "api": {"host": "127.0.0.1", "port": $api, "apiKey": "$KEY", "timeout": 120,
          "limits": {"maxConnectionsPerClient": 512}},
  "tools": {"exec": {"enable": false}, "web": {"enable": false}}
}
JSON
    HOME=$home "$BIN/nanobot-gateway" -c "$cfg" > "$OUT/failover-$name-$i.log" 2>&1 &
    pids+=($!); PIDS+=($!)
    pidlist="$pidlist${pidlist:+,}${pids[-1]}"
    urls="$urls${urls:+,}http://127.0.0.1:$api/v1/chat/completions"
    ops="$ops${ops:+,}http://127.0.0.1:$gw"
    $UTIL wait "127.0.0.1:$api" 120
  done
  local result
  case "$mode" in
    api) result=$("$BIN/examples/bench_failover" api "$urls" "$KEY" "$CONCURRENCY" "$RUN_S" "${pids[-1]}") ;;
    ws)  $UTIL wait "127.0.0.1:$ws_port" 120
         result=$("$BIN/examples/bench_failover" ws "$ws_port" ws-token "$CHATS" "$RUN_S" "$ops" "$pidlist") ;;
  esac
  local label="ackWaitS 30, leaseTimeS 15 (default)"
  [ -n "$timings" ] && label="ackWaitS 3, leaseTimeS 2"
  record "$name" "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(timings=sys.argv[2]); print(json.dumps(d))' "$result" "$label")"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}

SHORT=', "ackWaitS": 3, "leaseTimeS": 2'
for mode in ${MODES:-api ws}; do
  echo "== $mode, default timings" >&2
  run_case "${mode}-default" "$mode" ""
  echo "== $mode, ackWaitS 3, leaseTimeS 2" >&2
  run_case "${mode}-short" "$mode" "$SHORT"
done

python3 - "$RESULTS" "$DELAY_MS" "$RUN_S" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"Mock model: {sys.argv[2]} ms per call; {sys.argv[3]} s per run, the kill a third of the way in.\n")
print("| API (3 replicas, one killed) | timings | requests cut | answered after the kill, p50 / max s | req/s before / after | latency after the kill p50 / p99 s | never answered |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r["bench"].startswith("api"):
        print(f"| {r['concurrency']} sessions | {r['timings']} | {r['cut_requests']} | {r['cut_answered_after_s_p50']:.1f} / {r['cut_answered_after_s_max']:.1f} | {r['rps_before']:.1f} / {r['rps_after']:.1f} | {r['after_kill_latency_s_p50']:.2f} / {r['after_kill_latency_s_p99']:.2f} | {r['never_answered']} |")
print("\n| websocket holder killed | timings | reconnected after s | last pending answer after s | asked | answered twice | never answered |")
print("|---|---|---|---|---|---|---|")
fmt = lambda v: "–" if v is None else f"{v:.1f}"
for r in rows:
    if r["bench"].startswith("ws"):
        print(f"| {r['chats']} chats | {r['timings']} | {fmt(r['reconnected_after_s'])} | {fmt(r['pending_at_kill_answered_after_s'])} | {r['asked']} | {r['answered_twice']} | {r['never_answered']} |")
PY
