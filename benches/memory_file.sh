#!/usr/bin/env bash
# A turn's cost against the size of the long-term memory file (issue 43: "no step change in a turn's cost for
# memory files up to 1 MiB"). `nanobot agent -m hi` through the release binary against the loopback mock LLM,
# with `memory/MEMORY.md` of each size (notes as a user's memory holds them), the rest of the workspace as
# `onboard` leaves it. For each size: the median of RUNS turns, CPU (user + system) and peak RSS from GNU time.
# The Python nanobot runs the same in the same run when given.
#
# A memory file is part of every prompt, so past about a quarter of the context window (`contextWindowTokens`,
# 200,000 by default) the prompt's size has to be counted in tokens, not estimated from characters: that is where
# a tokenizer is first loaded, and where a step would show.
#
# Usage: benches/memory_file.sh [PYTHON_NANOBOT]     e.g. benches/memory_file.sh .ci/.peers/nanobot-venv/bin/nanobot
# Env:   SIZES_KIB="0 64 128 256 384 512 768 1024"  RUNS=3  SKIP_BUILD=1
# Output: $BENCH_OUT/memory_file.jsonl (default target/bench) and a Markdown table on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
SIZES_KIB=${SIZES_KIB:-0 64 128 256 384 512 768 1024}
RUNS=${RUNS:-3}
PY=${1:-}
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
mkdir -p "$OUT"
RESULTS=$OUT/memory_file.jsonl
: > "$RESULTS"
[ -z "$PY" ] || [ -x "$PY" ] || { echo "memory_file.sh: $PY is not an executable" >&2; exit 1; }
source "$ROOT/benches/common.sh"
require_gnu_time memory_file.sh

if [ -z "${SKIP_BUILD:-}" ]; then
  echo "== building the release nanobot (the README's build) and the mock" >&2
  (cd "$ROOT" && cargo build --release --locked -q -p nanobot \
     && cargo build --locked -q -p nanobot-gateway --example bench_mock_llm)
fi

DELAY_MS=0
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug
start_mock mock

make_home() { # dir
  rm -rf "$1"; mkdir -p "$1/.nanobot/workspace/memory"
  cat > "$1/.nanobot/config.json" <<JSON
{
  "agents": {"defaults": {"model": "mock-model", "provider": "custom", "workspace": "$1/.nanobot/workspace"}},
  "providers": {"custom": {"apiKey": "sk-mock", "apiBase": "$BASE"}}
}
JSON
}

# write_memory FILE KIB: notes as a memory file holds them, KIB kibibytes.
write_memory() {
  python3 - "$1" "$2" <<'PY'
import sys
path, kib = sys.argv[1], int(sys.argv[2])
topics = ["prefers short answers", "works on the billing service", "has a cat named Miso",
          "meets Alice on Tuesdays", "deploys with `make release`", "uses Python 3.12 and Rust 1.93",
          "the staging database is at db-staging:5432", "writes notes in notes/2026-*.md"]
out, i = [], 0
size = 0
while size < kib * 1024:
    line = f"- ({i}) The user {topics[i % len(topics)]}; noted on day {i // 10} of the project.\n"
    out.append(line); size += len(line); i += 1
with open(path, "w") as f:
    f.write("# Long-term memory\n\n" + "".join(out)[: max(kib * 1024 - 20, 0)] if kib else "")
PY
}

turn() { # impl kib home cmd...: one timed turn; a turn that fails is recorded as failed, with its last words
  local impl=$1 kib=$2 home=$3; shift 3
  local err=$OUT/memfile-$impl-$kib.err ok=true
  HOME=$home /usr/bin/time -f '%U %S %M' "$@" agent -m hi > /dev/null 2> "$err" || ok=false
  read -r user sys rss <<< "$(tail -1 "$err")"
  local why=""
  $ok || why=$(grep -v '^Command exited' "$err" | tail -3 | head -2 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()[:300]))')
  record turn "{\"kib\": $kib, \"ok\": $ok, \"cpu_ms\": $(python3 -c "print(round(($user + $sys) * 1000))"), \"rss_kib\": $rss${why:+, \"error\": $why}}" "$impl"
}

measure() { # impl cmd...
  local impl=$1; shift
  for kib in $SIZES_KIB; do
    local home=$OUT/memfile-home-$impl-$kib
    make_home "$home"
    HOME=$home "$@" agent -m warmup > /dev/null 2>&1 || { echo "memory_file.sh: $impl agent failed" >&2; exit 1; }
    write_memory "$home/.nanobot/workspace/memory/MEMORY.md" "$kib"
    echo "   $impl, MEMORY.md $kib KiB" >&2
    for _ in $(seq "$RUNS"); do turn "$impl" "$kib" "$home" "$@"; done
  done
}

echo "== one-shot turns by memory file size" >&2
measure rust "$REL/nanobot"
[ -n "$PY" ] && measure python "$PY"

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
impls = sorted({r["impl"] for r in rows}, key=lambda i: i != "rust")
sizes = sorted({r["kib"] for r in rows})
def cell(impl, kib):
    rs = [r for r in rows if r["impl"] == impl and r["kib"] == kib]
    if not rs:
        return "—"
    cpu = statistics.median(r["cpu_ms"] for r in rs)
    rss = statistics.median(r["rss_kib"] for r in rs) / 1024
    failed = sum(not r.get("ok", True) for r in rs)
    return f"{cpu:,.0f} ms, {rss:.1f} MiB" + (f" ({failed} of {len(rs)} failed)" if failed else "")
print("| MEMORY.md | " + " | ".join(f"{'nanobot-rs' if i == 'rust' else 'Python nanobot 0.3.5'} (median)" for i in impls) + " |")
print("|---" * (len(impls) + 1) + "|")
for kib in sizes:
    print(f"| {kib} KiB | " + " | ".join(cell(i, kib) for i in impls) + " |")
PY
