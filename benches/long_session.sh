#!/usr/bin/env bash
# A real turn on a long session (issue 43), through the release binary against the loopback mock LLM:
# 1. `nanobot agent -m hi -s cli:long` on sessions of 0, 1,000, 10,000 and 100,000 stored messages written as the
#    Python nanobot writes them (one metadata line, then messages; all but the last 20 consolidated, as in a chat
#    whose memory kept up). For each size: the first turn (the file as Python left it) and the median of the later
#    ones, CPU (user + system) and peak RSS from GNU time.
# 2. One session driven through the API (`nanobot gateway`; Python: `nanobot serve`) for GATEWAY_TURNS turns: the
#    server's CPU per turn in each batch of 250 (a cost that grows with the session shows as a rising column).
# The Python nanobot runs the same in the same run when given.
#
# Usage: benches/long_session.sh [PYTHON_NANOBOT]     e.g. benches/long_session.sh .ci/.peers/nanobot-venv/bin/nanobot
# Env:   SIZES="0 1000 10000 100000"  RUNS=5 (later turns per size)  GATEWAY_TURNS=1500 (0: skip)  SKIP_BUILD=1
# Output: $BENCH_OUT/long_session.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
SIZES=${SIZES:-0 1000 10000 100000}
RUNS=${RUNS:-5}
GATEWAY_TURNS=${GATEWAY_TURNS:-1500}
BATCH=250
KEY=sk-bench
UTIL="python3 $ROOT/benches/bench_util.py"
PY=${1:-}
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
TOOLS=${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples
mkdir -p "$OUT"
RESULTS=$OUT/long_session.jsonl
: > "$RESULTS"
[ -z "$PY" ] || [ -x "$PY" ] || { echo "long_session.sh: $PY is not an executable" >&2; exit 1; }
source "$ROOT/benches/common.sh"
require_gnu_time long_session.sh

if [ -z "${SKIP_BUILD:-}" ]; then
  echo "== building the release nanobot (the README's build) and the mock" >&2
  (cd "$ROOT" && cargo build --release --locked -q -p nanobot \
     && cargo build --locked -q -p nanobot-gateway --example bench_mock_llm --example bench_load)
fi

MOCK_IN=$OUT/long-mock.stdin
rm -f "$MOCK_IN" "$OUT/long-mock.url"; mkfifo "$MOCK_IN"
"$TOOLS/bench_mock_llm" < "$MOCK_IN" > "$OUT/long-mock.url" &
PIDS+=($!)
exec 3> "$MOCK_IN"
for _ in $(seq 200); do [ -s "$OUT/long-mock.url" ] && break; sleep 0.05; done
BASE=$(head -1 "$OUT/long-mock.url")

make_home() { # dir [api_port gateway_port]
  rm -rf "$1"; mkdir -p "$1/.nanobot/workspace"
  local servers=""
  [ -z "${2:-}" ] || servers=",
  \"gateway\": {\"host\": \"127.0.0.1\", \"port\": $3, \"heartbeat\": {\"enabled\": false}},
  \"api\": {\"host\": \"127.0.0.1\", \"port\": $2, \"apiKey\": \"$KEY\", \"timeout\": 120}"
  cat > "$1/.nanobot/config.json" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$1/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}}$servers
}
JSON
}

# write_session FILE N: the session `cli:long` with N messages as the Python nanobot writes it.
write_session() {
  python3 - "$1" "$2" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as out:
    out.write(json.dumps({"_type": "metadata", "key": "cli:long", "created_at": "2026-01-01T00:00:00",
                          "updated_at": "2026-01-01T00:00:00", "metadata": {},
                          "last_consolidated": max(n - 20, 0)}) + "\n")
    for i in range(n):
        k = i % 4
        if k == 0:
            m = {"role": "user", "content": f"question number {i}: what is in notes.txt today?"}
        elif k == 1:
            m = {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}]}
        elif k == 2:
            m = {"role": "tool", "tool_call_id": f"call_{i - 1}", "name": "read_file",
                 "content": f"1| buy milk\n2| call Alice\n3| line {i}"}
        else:
            m = {"role": "assistant", "content": f"notes.txt says: buy milk, call Alice (answer {i})."}
        m["timestamp"] = "2026-01-01T00:00:01"
        out.write(json.dumps(m) + "\n")
PY
}

# turn IMPL SIZE PHASE HOME CMD...: one timed turn, recorded as JSON.
turn() {
  local impl=$1 size=$2 phase=$3 home=$4; shift 4
  local t
  t=$(HOME=$home /usr/bin/time -f '%U %S %M' "$@" agent -m hi -s cli:long 2>&1 >/dev/null | tail -1)
  read -r user sys kib <<< "$t"
  record turn "{\"size\": $size, \"phase\": \"$phase\", \"cpu_ms\": $(python3 -c "print(round(($user + $sys) * 1000))"), \"rss_kib\": $kib}" "$impl"
}

measure() { # impl cmd...
  local impl=$1; shift
  for size in $SIZES; do
    local home=$OUT/long-home-$impl-$size
    make_home "$home"
    # The first turn creates the session's folder (the workspace's namespace); the file is then replaced.
    HOME=$home "$@" agent -m warmup -s cli:long > /dev/null 2>&1 || { echo "long_session.sh: $impl agent failed" >&2; exit 1; }
    local file
    file=$(find "$home/.nanobot" -name 'Y2xpOmxvbmc*.jsonl' -path '*sessions*' | head -1)
    [ -n "$file" ] || file=$(find "$home/.nanobot" -name 'cli_long.jsonl' | head -1)
    [ -n "$file" ] || { echo "long_session.sh: no session file for cli:long in $home" >&2; exit 1; }
    write_session "$file" "$size"
    echo "   $impl, $size messages ($(du -h "$file" | cut -f1))" >&2
    turn "$impl" "$size" first "$home" "$@"
    for _ in $(seq "$RUNS"); do turn "$impl" "$size" later "$home" "$@"; done
  done
}

# gateway IMPL CMD...: one session through the API, the gateway's CPU per turn by batch.
gateway() {
  local impl=$1; shift
  local home=$OUT/long-gateway-$impl api gw
  api=$(free_port); gw=$(free_port)
  make_home "$home" "$api" "$gw"
  HOME=$home "$@" > "$OUT/long-gateway-$impl.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  $UTIL wait "127.0.0.1:$api" 120
  local url=http://127.0.0.1:$api/v1/chat/completions done=0
  while [ "$done" -lt "$GATEWAY_TURNS" ]; do
    local before after
    before=$($UTIL cputime "$pid" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu_ms"])')
    "$TOOLS/bench_load" "$url" "$KEY" 1 "$BATCH" long > /dev/null
    after=$($UTIL cputime "$pid" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu_ms"])')
    record gateway "{\"from\": $((done + 1)), \"to\": $((done + BATCH)), \"cpu_ms_per_turn\": $(python3 -c "print(round(($after - $before) / $BATCH, 2))")}" "$impl"
    done=$((done + BATCH))
    echo "   $impl gateway: turns 1-$done" >&2
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "== turns on long sessions" >&2
measure rust "$REL/nanobot"
[ -n "$PY" ] && measure python "$PY"
if [ "$GATEWAY_TURNS" -gt 0 ]; then
  echo "== one session through the gateway's API" >&2
  gateway rust "$REL/nanobot" gateway
  if [ -n "$PY" ]; then
    if "$(dirname "$PY")/python" -c 'import aiohttp' 2>/dev/null; then gateway python "$PY" serve
    else echo "   python: API not measured (nanobot serve needs aiohttp, absent from $(dirname "$PY"))" >&2; fi
  fi
fi

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["bench"] == "turn"]
gw = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["bench"] == "gateway"]
impls = sorted({r["impl"] for r in rows}, key=lambda i: i != "rust")
sizes = sorted({r["size"] for r in rows})
def cell(impl, size, phase):
    xs = [r for r in rows if r["impl"] == impl and r["size"] == size and r["phase"] == phase]
    if not xs:
        return "–"
    cpu = statistics.median(r["cpu_ms"] for r in xs)
    rss = statistics.median(r["rss_kib"] for r in xs) / 1024
    return f"{cpu:.0f} ms, {rss:.1f} MiB"
head = "| messages | " + " | ".join(f"{i} first turn | {i} later turns" for i in impls) + " |"
print(head)
print("|" + "---|" * (1 + 2 * len(impls)))
for s in sizes:
    print(f"| {s:,} | " + " | ".join(f"{cell(i, s, 'first')} | {cell(i, s, 'later')}" for i in impls) + " |")
if gw:
    print()
    gimpls = sorted({r["impl"] for r in gw}, key=lambda i: i != "rust")
    print("| turns of one session (API) | " + " | ".join(f"{i}: gateway CPU per turn" for i in gimpls) + " |")
    print("|" + "---|" * (1 + len(gimpls)))
    for lo in sorted({r["from"] for r in gw}):
        cells = []
        for i in gimpls:
            r = next((r for r in gw if r["impl"] == i and r["from"] == lo), None)
            cells.append(f"{r['cpu_ms_per_turn']:.2f} ms" if r else "–")
        hi = next(r["to"] for r in gw if r["from"] == lo)
        print(f"| {lo:,}–{hi:,} | " + " | ".join(cells) + " |")
PY
