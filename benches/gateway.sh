#!/usr/bin/env bash
# Benchmarks of issue 12, on the release build, against one loopback mock LLM, Rust and Python in the same run:
#   (a) `nanobot --version`
#   (b) `nanobot agent -m hi`
#   (c) gateway throughput and p50/p99 latency of /v1/chat/completions at 1, 16 and 128 concurrent sessions
#   (d) idle gateway RSS
# The Python nanobot (`nanobot-ai` from PyPI) is installed into a venv under $BENCH_OUT on first use.
#
# Usage: benches/gateway.sh            (env: SKIP_BUILD=1 RUNS=20 REQUESTS=400 SKIP_PYTHON=1 NANOBOT_AI_VERSION=0.3.5)
# Output: $BENCH_OUT/results.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
RUNS=${RUNS:-20}
REQUESTS=${REQUESTS:-400}
KEY=sk-bench
UTIL="python3 $ROOT/benches/bench_util.py"
REL=$ROOT/target/release
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"

source "$ROOT/benches/common.sh"

echo "== building (release)" >&2
[ -n "${SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --release -q -p nanobot -p nanobot-gateway-bin && cargo build --release -q -p nanobot-gateway --examples)

PY=""
if [ -z "${SKIP_PYTHON:-}" ]; then
  if [ ! -x "$OUT/py-venv/bin/nanobot" ]; then
    echo "== installing nanobot-ai into $OUT/py-venv" >&2
    python3 -m venv "$OUT/py-venv"
    # aiohttp: the optional dependency of `nanobot serve` (`nanobot plugins enable api`)
    "$OUT/py-venv/bin/pip" install -q "nanobot-ai${NANOBOT_AI_VERSION:+==$NANOBOT_AI_VERSION}" aiohttp
  fi
  PY=$OUT/py-venv/bin/nanobot
  echo "== python nanobot-ai $("$OUT/py-venv/bin/pip" show nanobot-ai | sed -n 's/^Version: //p')" >&2
fi

echo "== mock LLM" >&2
MOCK_IN=$OUT/mock.stdin
rm -f "$MOCK_IN"; mkfifo "$MOCK_IN"
"$REL/examples/bench_mock_llm" < "$MOCK_IN" > "$OUT/mock.url" &
PIDS+=($!)
exec 3> "$MOCK_IN"   # keeps the mock's stdin open until this script ends
for _ in $(seq 100); do [ -s "$OUT/mock.url" ] && break; sleep 0.05; done
BASE=$(head -1 "$OUT/mock.url")
echo "   $BASE" >&2

make_home() { # dir api_port gateway_port
  local home=$1
  rm -rf "$home"; mkdir -p "$home/.nanobot/workspace"
  cat > "$home/.nanobot/config.json" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$home/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}},
  "gateway": {"host": "127.0.0.1", "port": $3, "heartbeat": {"enabled": false}},
  "api": {"host": "127.0.0.1", "port": $2, "apiKey": "$KEY", "timeout": 120}
}
JSON
}

run_impl() { # impl nanobot-exe gateway-cmd...
  local impl=$1 exe=$2; shift 2
  local home=$OUT/home-$impl api=$(free_port) gw=$(free_port)
  make_home "$home" "$api" "$gw"
  export HOME=$home
  echo "== $impl: (a) --version" >&2
  record version "$($UTIL time "$RUNS" -- "$exe" --version)" "$impl"
  echo "== $impl: (b) agent -m hi" >&2
  record agent_hi "$($UTIL time "$(( RUNS / 2 > 3 ? RUNS / 2 : 3 ))" -- "$exe" agent -m hi)" "$impl"

  echo "== $impl: (d) idle gateway RSS" >&2
  local gcmd=("$@")
  "${gcmd[@]}" -c "$home/.nanobot/config.json" > "$OUT/$impl-gateway.log" 2>&1 &
  local gpid=$!; PIDS+=($gpid)
  $UTIL wait "127.0.0.1:$gw" 60 || echo "   (gateway port not opened; measuring anyway)" >&2
  sleep 3
  record idle_rss "$($UTIL rss "$gpid")" "$impl"
  kill "$gpid"; wait "$gpid" 2>/dev/null || true

  echo "== $impl: (c) /v1/chat/completions throughput" >&2
  local scmd
  if [ "$impl" = rust ]; then scmd=("$REL/nanobot-gateway"); else scmd=("$exe" serve); fi
  "${scmd[@]}" -c "$home/.nanobot/config.json" > "$OUT/$impl-serve.log" 2>&1 &
  local spid=$!; PIDS+=($spid)
  $UTIL wait "127.0.0.1:$api" 120
  local url=http://127.0.0.1:$api/v1/chat/completions
  "$REL/examples/bench_load" "$url" "$KEY" 4 8 warmup > /dev/null
  for c in 1 16 128; do
    local n=$REQUESTS; [ "$c" -gt "$n" ] && n=$c
    [ "$c" = 1 ] && n=$(( REQUESTS / 4 ))
    record "api_c$c" "$("$REL/examples/bench_load" "$url" "$KEY" "$c" "$n" "c$c")" "$impl"
  done
  record api_loaded_rss "$($UTIL rss "$spid")" "$impl"
  kill "$spid"; wait "$spid" 2>/dev/null || true
}

run_impl rust "$REL/nanobot" "$REL/nanobot-gateway"
if [ -n "$PY" ]; then
  run_impl python "$PY" "$PY" gateway --foreground
fi

$UTIL table "$RESULTS"
