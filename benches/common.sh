# Shared by the benchmark scripts (sourced): processes to stop on exit, free ports, results as JSON lines.

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# record BENCH JSON [IMPL]: appends JSON to $RESULTS with `bench` (and `impl`) set.
record() {
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d.update(bench=sys.argv[1]); d.update({"impl": sys.argv[3]} if len(sys.argv) > 3 else {}); print(json.dumps(d))' "$@" >> "$RESULTS"
}
