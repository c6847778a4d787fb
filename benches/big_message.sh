#!/usr/bin/env bash
# One very large message through `nanobot serve` (issue 46): a ~19 MB user message (just under the API's 20 MiB
# body limit) POSTed to /v1/chat/completions against the loopback mock LLM, as prose and as one long run of a single
# letter (the case byte-pair tokenizers are slowest on). Reports the wall time of the request and the server's CPU.
#
# Usage: benches/big_message.sh        (env: SKIP_BUILD=1)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}/big-message
REL=$ROOT/target/release
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
source "$ROOT/benches/common.sh"

[ -n "${SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --release -q -p nanobot && cargo build --release -q -p nanobot-gateway --examples)

exec 3> >("$REL/examples/bench_mock_llm" > "$OUT/mock.url")
for _ in $(seq 100); do [ -s "$OUT/mock.url" ] && break; sleep 0.1; done
BASE=$(head -1 "$OUT/mock.url")

for kind in prose one-letter; do
  home=$OUT/home-$kind; rm -rf "$home"; mkdir -p "$home/.nanobot/workspace"
  port=$(free_port)
  cat > "$home/.nanobot/config.json" <<JSON
{"agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$home/.nanobot/workspace"}},
 "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}},
 "api": {"host": "127.0.0.1", "port": $port, "timeout": 300}}
JSON
  HOME=$home "$REL/nanobot" serve -c "$home/.nanobot/config.json" > "$OUT/serve-$kind.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  python3 "$ROOT/benches/bench_util.py" wait "127.0.0.1:$port" 60
  secs=$(python3 - "$port" "$kind" <<'PY'
import json, sys, time, urllib.request
port, kind = sys.argv[1], sys.argv[2]
if kind == "prose":
    parts, n, size = [], 0, 0
    while size < 19_000_000:
        s = f"the quick brown fox jumps over the lazy dog {n} "
        parts.append(s); size += len(s); n += 1
    text = "".join(parts)
else:
    text = "x" * 19_000_000
body = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
t = time.time()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                             headers={"content-type": "application/json"})
urllib.request.urlopen(req, timeout=600).read()
print(f"{time.time() - t:.2f}")
PY
)
  cpu=$(python3 "$ROOT/benches/bench_util.py" cputime "$pid")
  record "big_message_$kind" "{\"wall_s\": $secs, \"server_cpu\": $cpu}"
  echo "$kind: ${secs} s wall, server CPU $cpu" >&2
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
cat "$RESULTS"
