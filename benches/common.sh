# Shared by the benchmark scripts (sourced): processes to stop on exit, free ports, results as JSON lines.

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# require_gnu_time SCRIPT: peak RSS comes from GNU time; says so and stops when it is missing.
require_gnu_time() {
  [ -x /usr/bin/time ] || { echo "$1: needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 1; }
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# record BENCH JSON [IMPL]: appends JSON to $RESULTS with `bench` (and `impl`) set.
record() {
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d.update(bench=sys.argv[1]); d.update({"impl": sys.argv[3]} if len(sys.argv) > 3 else {}); print(json.dumps(d))' "$@" >> "$RESULTS"
}

# start_nats NAME: a nats-server with JetStream and a user (an open one is refused), its store and log under $OUT
# named NAME; sets NATS to its URL with the credentials. Needs UTIL (bench_util.py).
start_nats() {
  local name=$1 port
  port=$(free_port)
  rm -rf "$OUT/$name-store"
  nats-server -js -sd "$OUT/$name-store" -a 127.0.0.1 -p "$port" --user bench --pass bench-pw > "$OUT/$name.log" 2>&1 &
  PIDS+=($!)
  $UTIL wait "127.0.0.1:$port" 30
  NATS=nats://bench:bench-pw@127.0.0.1:$port
}

# start_mock NAME: the benchmarks' mock LLM ($BIN/examples/bench_mock_llm, DELAY_MS per call), serving while file
# descriptor 3 (its stdin) stays open; sets BASE to its URL.
start_mock() {
  local name=$1
  local stdin=$OUT/$name.stdin url=$OUT/$name.url
  rm -f "$stdin" "$url"; mkfifo "$stdin"
  BENCH_MOCK_DELAY_MS=$DELAY_MS "$BIN/examples/bench_mock_llm" < "$stdin" > "$url" &
  PIDS+=($!)
  exec 3> "$stdin"
  for _ in $(seq 100); do [ -s "$url" ] && break; sleep 0.05; done
  BASE=$(head -1 "$url")
}
