#!/usr/bin/env bash
# The table of issue 22 ("Lean and fast") in one run, the release build against the Python nanobot, both talking
# to one loopback mock LLM (the `bench_mock_llm` example; `bench_load` drives the API):
#   --version peak RSS and wall      agent -m hi wall and peak RSS      idle gateway RSS
#   release binary sizes             server CPU per API turn at 1 and 16 sessions (and p99 at 128 sessions)
# Timed commands run interleaved (Rust, Python, Rust, ...) and the medians are reported. Peak RSS comes from GNU
# time (Debian package `time`). Wall times include the harness's fork/exec; the `true` row measures that
# overhead, and "net" rows subtract it.
#
# Usage: benches/lean.sh [PYTHON_NANOBOT]     e.g. benches/lean.sh /work/pyref/bin/nanobot (no argument: Rust only)
# Env:   RUNS=15 (timed rounds)  TURNS=400 (API turns for the CPU figure)  SKIP_BUILD=1
#        REL_DIR=dir (measure the nanobot and nanobot-gateway binaries in dir instead, e.g. an older build)
#        TOOLS_PROFILE=dev (profile of the mock and load-generator examples: dev reuses the test build; the
#        mock's own speed is outside every figure but the wall times, where Rust and Python pay it alike)
# Output: $BENCH_OUT/lean.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
RUNS=${RUNS:-15}
TURNS=${TURNS:-400}
TOOLS_PROFILE=${TOOLS_PROFILE:-dev}
PY=${1:-}
KEY=sk-bench
UTIL="python3 $ROOT/benches/bench_util.py"
REL=${REL_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
if [ "$TOOLS_PROFILE" = dev ]; then TOOLS=${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples; else TOOLS=$REL/examples; fi
# The gateway: the nanobot-gateway binary when built (same code as `nanobot gateway`), else `nanobot gateway`.
if [ -x "$REL/nanobot-gateway" ] && [ ! "$REL/nanobot-gateway" -ot "$REL/nanobot" ]; then GW=("$REL/nanobot-gateway")
else GW=("$REL/nanobot" gateway); fi
mkdir -p "$OUT"
RESULTS=$OUT/lean.jsonl
: > "$RESULTS"
[ -z "$PY" ] || [ -x "$PY" ] || { echo "lean.sh: $PY is not an executable" >&2; exit 1; }

source "$ROOT/benches/common.sh"
require_gnu_time lean.sh
emit() { echo "$1" >> "$RESULTS"; }

if [ -z "${SKIP_BUILD:-}" ]; then
  echo "== building release binaries and the $TOOLS_PROFILE bench tools" >&2
  (cd "$ROOT" && cargo build --release --locked -q -p nanobot -p nanobot-gateway-bin \
     && cargo build --profile "$TOOLS_PROFILE" --locked -q -p nanobot-gateway --example bench_mock_llm --example bench_load)
fi

echo "== mock LLM" >&2
MOCK_IN=$OUT/lean-mock.stdin
rm -f "$MOCK_IN"; mkfifo "$MOCK_IN"
"$TOOLS/bench_mock_llm" < "$MOCK_IN" > "$OUT/lean-mock.url" &
PIDS+=($!)
exec 3> "$MOCK_IN"
for _ in $(seq 200); do [ -s "$OUT/lean-mock.url" ] && break; sleep 0.05; done
BASE=$(head -1 "$OUT/lean-mock.url")

make_home() { # dir api_port gateway_port
  rm -rf "$1"; mkdir -p "$1/.nanobot/workspace"
  cat > "$1/.nanobot/config.json" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$1/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}},
  "gateway": {"host": "127.0.0.1", "port": $3, "heartbeat": {"enabled": false}},
  "api": {"host": "127.0.0.1", "port": $2, "apiKey": "$KEY", "timeout": 120}
}
JSON
}
RH=$OUT/lean-home-rust; PH=$OUT/lean-home-python
R_API=$(free_port); R_GW=$(free_port); P_API=$(free_port); P_GW=$(free_port)
make_home "$RH" "$R_API" "$R_GW"; make_home "$PH" "$P_API" "$P_GW"
# 128 load-generator connections come from one address: raise nanobot-rs's per-client cap (64 by default, a
# nanobot-rs key that 0.3.5 does not have) so the 128-session figure measures turns, not refusals.
python3 - "$RH/.nanobot/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
c["api"]["limits"] = {"maxConnectionsPerClient": 512}
json.dump(c, open(p, "w"), indent=2)
PY

spec() { # label home cmd... -> one JSON object
  python3 -c 'import json,sys; print(json.dumps({"label": sys.argv[1], "env": {"HOME": sys.argv[2]}, "cmd": sys.argv[3:]}))' "$@"
}
interleave() { # name spec-lines...
  local name=$1; shift
  printf '%s\n' "$@" | python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin]))' > "$OUT/lean-$name.json"
  $UTIL interleave "$RUNS" "$OUT/lean-$name.json" | while read -r line; do
    emit "$(python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["bench"]=sys.argv[1]; print(json.dumps(d))' "$name" "$line")"
  done
}

echo "== --version ($RUNS interleaved rounds)" >&2
lines=("$(spec true "$RH" true)" "$(spec rust "$RH" "$REL/nanobot" --version)")
[ -n "$PY" ] && lines+=("$(spec python "$PH" "$PY" --version)")
interleave version "${lines[@]}"

echo "== agent -m hi ($RUNS interleaved rounds)" >&2
HOME=$RH "$REL/nanobot" agent -m warmup > /dev/null 2>&1 || { echo "lean.sh: rust agent failed; see: HOME=$RH $REL/nanobot agent -m hi" >&2; exit 1; }
lines=("$(spec rust "$RH" "$REL/nanobot" agent -m hi)")
[ -n "$PY" ] && lines+=("$(spec python "$PH" "$PY" agent -m hi)")
interleave agent_hi "${lines[@]}"

idle_rss() { # impl home cmd... ; RSS 3 s after the gateway port opened
  local impl=$1 home=$2; shift 2
  HOME=$home "$@" > "$OUT/lean-$impl-gateway.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  local port; port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gateway"]["port"])' "$home/.nanobot/config.json")
  $UTIL wait "127.0.0.1:$port" 60 || echo "   ($impl gateway port not opened; measuring anyway)" >&2
  sleep 3
  local kib; kib=$($UTIL rss "$pid" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rss_kib"])')
  [ "$impl" = rust ] && $UTIL resident "$pid" > "$OUT/lean-resident.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$kib"
}
echo "== idle gateway RSS (3 rounds)" >&2
r=(); p=()
for _ in 1 2 3; do
  r+=("$(idle_rss rust "$RH" "${GW[@]}" -c "$RH/.nanobot/config.json")")
  [ -n "$PY" ] && p+=("$(idle_rss python "$PH" "$PY" gateway --foreground)")
done
med() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
emit "{\"bench\": \"idle_gateway\", \"label\": \"rust\", \"rss_kib\": $(med "${r[@]}")}"
[ -n "$PY" ] && emit "{\"bench\": \"idle_gateway\", \"label\": \"python\", \"rss_kib\": $(med "${p[@]}")}"

echo "== binary sizes" >&2
for b in nanobot nanobot-gateway; do
  [ -f "$REL/$b" ] || continue
  emit "{\"bench\": \"size\", \"label\": \"$b\", \"bytes\": $(stat -c %s "$REL/$b")}"
done

api_cpu() { # impl home cmd... ; server CPU per turn at 1 session, and p99 at 128 sessions
  local impl=$1 home=$2; shift 2
  local api; api=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api"]["port"])' "$home/.nanobot/config.json")
  HOME=$home "$@" > "$OUT/lean-$impl-serve.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  $UTIL wait "127.0.0.1:$api" 120
  local url=http://127.0.0.1:$api/v1/chat/completions
  "$TOOLS/bench_load" "$url" "$KEY" 4 40 warm > /dev/null
  local before after load
  before=$($UTIL cputime "$pid")
  load=$("$TOOLS/bench_load" "$url" "$KEY" 1 "$TURNS" c1)
  after=$($UTIL cputime "$pid")
  # The goal's figure: 16 sessions at once (each client its own session), same number of turns.
  local before16 after16 load16
  before16=$($UTIL cputime "$pid")
  load16=$("$TOOLS/bench_load" "$url" "$KEY" 16 "$TURNS" c16)
  after16=$($UTIL cputime "$pid")
  local c128; c128=$("$TOOLS/bench_load" "$url" "$KEY" 128 "$(( TURNS > 128 ? TURNS : 128 ))" c128)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  emit "$(python3 -c '
import json, sys
b, a, l, c, b16, a16, l16 = (json.loads(x) for x in sys.argv[3:10])
n = int(sys.argv[2])
print(json.dumps({"bench": "api_turn", "label": sys.argv[1], "turns": n,
                  "cpu_ms_per_turn": (a["cpu_ms"] - b["cpu_ms"]) / n,
                  "cpu_ms_per_turn_c16": (a16["cpu_ms"] - b16["cpu_ms"]) / n,
                  "c1": l, "c16": l16, "c128": c}))' \
    "$impl" "$TURNS" "$before" "$after" "$load" "$c128" "$before16" "$after16" "$load16")"
}
echo "== server CPU per API turn ($TURNS turns, 1 session; $TURNS over 16 sessions; then 128 sessions)" >&2
api_cpu rust "$RH" "${GW[@]}" -c "$RH/.nanobot/config.json"
if [ -n "$PY" ]; then
  if "$(dirname "$PY")/python" -c 'import aiohttp' 2>/dev/null; then
    api_cpu python "$PH" "$PY" serve
  else
    echo "   python: not measured (nanobot serve needs aiohttp, absent from $(dirname "$PY"))" >&2
  fi
fi

$UTIL lean-table "$RESULTS"
echo
echo "Idle gateway (Rust), resident memory by kind of mapping (KiB):"
python3 -c 'import json,sys; [print(f"- {k}: {v}") for k, v in json.load(open(sys.argv[1]))["kinds_kib"].items()]' "$OUT/lean-resident.json"
