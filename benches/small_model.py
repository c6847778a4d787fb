#!/usr/bin/env python3
"""Helpers for benches/small_model.sh and scripts/check-local-schemas (standard library only).

  small_model.py models URL SECS             wait (bounded) until URL/v1/models answers; print the first model id
  small_model.py wait-port PORTFILE SECS     wait (bounded) until PORTFILE holds a port number; print it
  small_model.py wait-lines FILE N SECS     wait (bounded) until FILE has N lines (requests still being answered
                                             when nanobot was stopped are logged once the proxy sees it gone)
  small_model.py proxy UPSTREAM LOG DIR PORTFILE
                                             a recording proxy on a free loopback port (written to PORTFILE):
                                             forwards every request to UPSTREAM (http://host:port) as it comes,
                                             streamed answers included; for each chat completion appends one JSON
                                             line to LOG (stream, tools offered, HTTP status, ms to the first
                                             answer event and to the end, usage, tool calls and text answered) and
                                             keeps the request body as DIR/req-N.json
  small_model.py replay UPSTREAM REQ.json    the request again on a server that just started: ms to the first
                                             streamed event (stream: true, max_tokens: 1) = the cold time to first
                                             token, then once more without streaming for usage.prompt_tokens; JSON
  small_model.py check KIND ANSWER WORKDIR ARG
                                             did prompt KIND (write, read, list, exec, cron) succeed? JSON
  small_model.py fake-llm PORTFILE TOOLS.json
                                             an OpenAI-compatible server that answers every chat completion with
                                             "ok" (plain JSON or `data:` SSE, as asked) and keeps the `tools` of
                                             the requests (by name) in TOOLS.json
  small_model.py schemas UPSTREAM TOOLS.json PID OUT.jsonl
                                             one request per tool to a llama-cpp-python server (tool_choice
                                             "auto", then the tool forced); JSON line per tool: HTTP status, ms,
                                             whether PID (the server) is still alive; stops at the first death
  small_model.py smoke UPSTREAM PID         one plain chat request ("Say hi", 4 tokens): fails when it is refused or
                                             the server (PID) dies on it
  small_model.py table RESULTS.jsonl         the benchmark's results as Markdown tables
"""
import http.client
import http.server
import json
import os
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


def die(msg):
    sys.exit(f"small_model.py: {msg}")


# ---------------------------------------------------------------- waiting (always bounded)

def cmd_models(url, secs):
    deadline = time.time() + float(secs)
    last = "no answer"
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=5) as r:
                data = json.load(r)["data"]
            if data:
                print(data[0]["id"])
                return
            last = "an empty model list"
        except Exception as e:  # not up yet
            last = str(e)
        time.sleep(0.2)
    die(f"{url}/v1/models did not list a model within {secs} s (last: {last})")


def cmd_wait_port(portfile, secs):
    deadline = time.time() + float(secs)
    while time.time() < deadline:
        try:
            port = open(portfile).read().strip()
            if port.isdigit():
                print(port)
                return
        except OSError:
            pass
        time.sleep(0.05)
    die(f"no port in {portfile} within {secs} s")


def cmd_wait_lines(path, n, secs):
    deadline = time.time() + float(secs)
    while time.time() < deadline:
        if sum(1 for _ in open(path)) >= int(n):
            return
        time.sleep(0.1)
    die(f"{path} has fewer than {n} lines after {secs} s")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(handler, portfile):
    srv = Server(("127.0.0.1", 0), handler)
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(tmp, portfile)
    srv.serve_forever()


# ---------------------------------------------------------------- answers (plain JSON or SSE)

def summarize_answer(body, streamed):
    """(text, tool call names, usage, finish reason) of a chat completion answer."""
    text, calls, usage, finish = "", {}, None, None
    if streamed:
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                continue
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue
            usage = chunk.get("usage") or usage
            for ch in chunk.get("choices") or []:
                d = ch.get("delta") or {}
                text += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    slot = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
                finish = ch.get("finish_reason") or finish
    else:
        try:
            data = json.loads(body)
        except ValueError:
            return body[:300].decode("utf-8", "replace"), [], None, None
        usage = data.get("usage")
        for ch in data.get("choices") or []:
            m = ch.get("message") or {}
            text += m.get("content") or ""
            for i, tc in enumerate(m.get("tool_calls") or []):
                fn = tc.get("function") or {}
                calls[i] = {"name": fn.get("name", ""), "arguments": fn.get("arguments", "")}
            finish = ch.get("finish_reason") or finish
    return text, [calls[k] for k in sorted(calls)], usage, finish


# ---------------------------------------------------------------- recording proxy

def cmd_proxy(upstream, log, reqdir, portfile):
    up = urllib.parse.urlsplit(upstream)
    os.makedirs(reqdir, exist_ok=True)
    lock = threading.Lock()
    counter = [0]

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def forward(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            t0 = time.perf_counter()
            chat = self.path.rstrip("/").endswith("/chat/completions") and self.command == "POST"
            req = {}
            streamed_req = b'"stream":true' in body.replace(b" ", b"")
            if chat:
                try:
                    req = json.loads(body)
                except ValueError:
                    req = {}
                with lock:
                    counter[0] += 1
                    idx = counter[0]
                with open(os.path.join(reqdir, f"req-{idx}.json"), "wb") as f:
                    f.write(body)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "content-length", "connection", "accept-encoding")}
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=3600)
            status, got = 502, b""
            first = None
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                status = resp.status
                chunked = resp.getheader("Content-Length") is None
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(k, v)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        piece = resp.read1(65536)
                        if not piece:
                            break
                        got += piece
                        # the first event, not sse_starlette's `: ping` comment (sent every 15 s)
                        if first is None and (b"data:" in got or not streamed_req):
                            first = time.perf_counter()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    data = resp.read()
                    first = time.perf_counter()
                    got = data
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                self.wfile.flush()
            except (ConnectionError, socket.timeout, http.client.HTTPException) as e:
                got = str(e).encode()
                try:
                    self.send_error(502, f"proxy: upstream failed: {e}")
                except OSError:
                    pass
            finally:
                conn.close()
            if chat:
                end = time.perf_counter()
                streamed = bool(req.get("stream"))
                text, calls, usage, finish = summarize_answer(got, streamed and status == 200)
                rec = {"n": idx, "stream": streamed, "status": status,
                       "tools": [t.get("function", {}).get("name") for t in req.get("tools") or []],
                       "messages": len(req.get("messages") or []),
                       "first_event_ms": round((first - t0) * 1000) if first else None,
                       "total_ms": round((end - t0) * 1000),
                       "prompt_tokens": (usage or {}).get("prompt_tokens"),
                       "completion_tokens": (usage or {}).get("completion_tokens"),
                       "finish_reason": finish, "tool_calls": calls, "text": text[:400]}
                if status != 200:
                    rec["error"] = got[:500].decode("utf-8", "replace")
                with lock, open(log, "a") as f:
                    f.write(json.dumps(rec) + "\n")

        do_GET = do_POST = forward

    serve(Proxy, portfile)


# ---------------------------------------------------------------- cold replay

def post(upstream, body, stream):
    up = urllib.parse.urlsplit(upstream)
    conn = http.client.HTTPConnection(up.hostname, up.port, timeout=3600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, data = None, b""
    while True:
        piece = resp.read1(65536) if stream else resp.read()
        if not piece:
            break
        data += piece
        if first is None and (not stream or b"data:" in data):  # not sse_starlette's `: ping` comment
            first = time.perf_counter()
        if not stream:
            break
    end = time.perf_counter()
    conn.close()
    return resp.status, data, (first - t0) * 1000 if first else None, (end - t0) * 1000


def cmd_replay(upstream, reqfile):
    body = json.load(open(reqfile))
    body.pop("stream_options", None)
    body["stream"], body["max_tokens"] = True, 1
    body.pop("max_completion_tokens", None)
    status, data, first_ms, total_ms = post(upstream, body, True)
    out = {"cold_status": status, "cold_ttft_ms": round(first_ms) if first_ms else None, "cold_total_ms": round(total_ms)}
    if status != 200:
        out["cold_error"] = data[:300].decode("utf-8", "replace")
    body["stream"] = False
    status, data, _, _ = post(upstream, body, False)
    try:
        out["prompt_tokens"] = json.loads(data)["usage"]["prompt_tokens"]
    except (ValueError, KeyError, TypeError):
        out["prompt_tokens"] = None
        out["usage_error"] = f"HTTP {status}: " + data[:300].decode("utf-8", "replace")
    print(json.dumps(out))


# ---------------------------------------------------------------- end-state checks

def squash(s):
    return re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", s)).strip()


def cmd_check(kind, answer_file, workdir, arg):
    """workdir is the bench's folder for this run (home and start directory inside); arg depends on kind."""
    answer = squash(open(answer_file, errors="replace").read())
    ok, why = False, ""
    if kind == "write":  # arg: "FILENAME=TEXT"; the file may land in the workspace or the start directory
        name, text = arg.split("=", 1)
        found = []
        for root, _, files in os.walk(workdir):
            if name in files:
                found.append(os.path.join(root, name))
        hits = [p for p in found if text in open(p, errors="replace").read()]
        ok = bool(hits)
        why = f"{name} with the text at {os.path.relpath(hits[0], workdir)}" if hits else \
            (f"{name} without the text at {', '.join(os.path.relpath(p, workdir) for p in found)}" if found
             else f"no file {name} anywhere under the run's folder")
    elif kind in ("read", "exec"):  # arg: the text the answer must contain
        ok = arg in answer
        why = f"answer {'contains' if ok else 'lacks'} {arg!r}"
    elif kind == "list":  # arg: names separated by commas, all must be named
        names = arg.split(",")
        missing = [n for n in names if n not in answer]
        ok = not missing
        why = "answer names " + ", ".join(names) if ok else "answer lacks " + ", ".join(missing)
    elif kind == "cron":  # arg: the cron store (jobs.json)
        jobs = []
        try:
            jobs = json.load(open(arg)).get("jobs") or []
        except (OSError, ValueError):
            pass
        ok = bool(jobs)
        why = f"{len(jobs)} job(s) in {os.path.relpath(arg, workdir)}" + \
            (f": {jobs[0].get('name')!r} {json.dumps(jobs[0].get('schedule'))}" if jobs else "")
    else:
        die(f"unknown check {kind}")
    print(json.dumps({"pass": ok, "why": why}))


# ---------------------------------------------------------------- fake LLM for the tool schemas

def cmd_fake_llm(portfile, toolsfile):
    lock = threading.Lock()
    tools = {}

    class Fake(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body, ctype="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self.reply(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}))
            else:
                self.reply(404, json.dumps({"error": {"message": "not found"}}))

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                return self.reply(400, json.dumps({"error": {"message": "bad json"}}))
            with lock:
                for t in req.get("tools") or []:
                    tools.setdefault(t.get("function", {}).get("name"), t)
                tmp = toolsfile + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(list(tools.values()), f, indent=1)
                os.replace(tmp, toolsfile)
            base = {"id": "chatcmpl-fake", "created": int(time.time()), "model": req.get("model", "fake")}
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            if req.get("stream"):
                chunks = [
                    {**base, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}]},
                    {**base, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
                ]
                body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self.reply(200, body, "text/event-stream")
            else:
                self.reply(200, json.dumps({**base, "object": "chat.completion", "usage": usage, "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))

    serve(Fake, portfile)


# ---------------------------------------------------------------- one request per tool schema

def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped) is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmd_schemas(upstream, toolsfile, pid, out):
    tools = json.load(open(toolsfile))
    pid = int(pid)
    with open(out, "a") as f:
        for tool in tools:
            name = tool["function"]["name"]
            rec = {"tool": name, "schema_chars": len(json.dumps(tool))}
            for mode, choice in (("auto", "auto"), ("forced", {"type": "function", "function": {"name": name}})):
                body = {"model": "x", "max_tokens": 8, "temperature": 0, "tools": [tool], "tool_choice": choice,
                        "messages": [{"role": "user", "content": f"Use the {name} tool."}]}
                try:
                    status, data, _, ms = post(upstream, body, False)
                    err = "" if status == 200 else data[:300].decode("utf-8", "replace")
                except (ConnectionError, socket.timeout, http.client.HTTPException) as e:
                    status, ms, err = None, None, f"{type(e).__name__}: {e}"
                rec[mode] = {"status": status, "ms": round(ms) if ms else None, "alive": alive(pid)}
                if err:
                    rec[mode]["error"] = err
                if not rec[mode]["alive"]:
                    break
            rec["ok"] = all(rec.get(m, {}).get("status") == 200 and rec[m]["alive"] for m in ("auto", "forced"))
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(f"   {name}: " + ", ".join(f"{m} {rec[m]['status']}{'' if rec[m]['alive'] else ' (server died)'}"
                                          for m in ("auto", "forced") if m in rec), file=sys.stderr)
            if not alive(pid):
                return


def cmd_smoke(upstream, pid):
    body = {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "Say hi"}]}
    try:
        status, data, _, _ = post(upstream, body, False)
    except (ConnectionError, socket.timeout, http.client.HTTPException) as e:
        status, data = None, str(e).encode()
    if status != 200 or not alive(int(pid)):
        die(f"a plain chat request got {status or 'no answer'}"
            + ("" if alive(int(pid)) else " and the server died") + f": {data[:200].decode('utf-8', 'replace')}")


# ---------------------------------------------------------------- tables

def cmd_table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    turns = [r for r in rows if r["bench"] == "turn"]
    colds = {r["impl"]: r for r in rows if r["bench"] == "cold"}
    impls = list(dict.fromkeys(r["impl"] for r in turns + list(colds.values())))
    kinds = list(dict.fromkeys(r["prompt"] for r in turns))
    if turns:
        print("| prompt | " + " | ".join(impls) + " |")
        print("|---|" + "---|" * len(impls))
        for k in kinds:
            cells = []
            for i in impls:
                r = next((r for r in turns if r["impl"] == i and r["prompt"] == k), None)
                if r is None:
                    cells.append("–")
                    continue
                verdict = "pass" if r["pass"] else ("timeout" if r.get("timed_out") else "FAIL")
                calls = ", ".join(r.get("tool_calls") or []) or "no tool call"
                cells.append(f"{verdict}, {r['wall_s']:.0f} s, {r['requests']} req ({calls})")
            print(f"| {k} | " + " | ".join(cells) + " |")
        print("| **passed** | " + " | ".join(
            f"**{sum(r['pass'] for r in turns if r['impl'] == i)} / {sum(1 for r in turns if r['impl'] == i)}**"
            for i in impls) + " |")
    if colds:
        print()
        print("| first request after the server started | " + " | ".join(impls) + " |")
        print("|---|" + "---|" * len(impls))
        g = lambda i, k, fmt="{}": fmt.format(colds[i][k]) if i in colds and colds[i].get(k) is not None else "–"
        print("| cold time to first token (replayed, streamed) | " + " | ".join(g(i, "cold_ttft_ms", "{:,} ms") for i in impls) + " |")
        print("| prompt tokens (usage.prompt_tokens) | " + " | ".join(g(i, "prompt_tokens", "{:,}") for i in impls) + " |")
        print("| tools offered | " + " | ".join(g(i, "tools_offered") for i in impls) + " |")
        print("| in the run: stream, first event / total | " + " | ".join(
            (f"{'stream' if colds[i].get('run_stream') else 'no stream'}, {colds[i].get('run_first_event_ms') or 0:,} / "
             f"{colds[i].get('run_total_ms') or 0:,} ms") if i in colds else "–" for i in impls) + " |")


def main():
    cmds = {"models": cmd_models, "wait-port": cmd_wait_port, "wait-lines": cmd_wait_lines, "proxy": cmd_proxy, "replay": cmd_replay,
            "check": cmd_check, "fake-llm": cmd_fake_llm, "schemas": cmd_schemas, "smoke": cmd_smoke,
            "table": cmd_table}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        die("usage: see the docstring (" + ", ".join(cmds) + ")")
    cmds[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
