#!/usr/bin/env python3
"""Helpers for benches/gateway.sh (standard library only).

  bench_util.py time RUNS -- CMD...      run CMD RUNS times, print {"median_ms","mean_ms","min_ms"} as JSON
  bench_util.py wait URL|HOST:PORT SECS  wait until an HTTP URL answers (or a TCP port accepts)
  bench_util.py rss PID                  resident set size of PID (and its children) in KiB, as JSON
  bench_util.py table RESULTS.jsonl      print the results as a Markdown table with Rust/Python ratios
"""
import json, os, socket, statistics, subprocess, sys, time, urllib.request


def cmd_time(runs, cmd):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append((time.perf_counter() - t) * 1000)
        if r.returncode != 0:
            print(json.dumps({"error": f"exit {r.returncode}", "cmd": cmd}))
            sys.exit(1)
    print(json.dumps({"median_ms": statistics.median(times), "mean_ms": statistics.mean(times), "min_ms": min(times), "runs": runs}))


def cmd_wait(target, secs):
    deadline = time.time() + float(secs)
    while time.time() < deadline:
        try:
            if target.startswith("http"):
                urllib.request.urlopen(target, timeout=1).read()
            else:
                host, port = target.rsplit(":", 1)
                socket.create_connection((host, int(port)), timeout=1).close()
            return
        except Exception:
            time.sleep(0.05)
    sys.exit(f"timed out waiting for {target}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def children(pid):
    out = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for c in f.read().split():
                out.append(int(c))
                out.extend(children(int(c)))
    except OSError:
        pass
    return out


def cmd_rss(pid):
    pid = int(pid)
    kids = children(pid)
    print(json.dumps({"rss_kib": rss_kib(pid), "rss_with_children_kib": rss_kib(pid) + sum(rss_kib(k) for k in kids), "children": len(kids)}))


def cmd_table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    by = {}
    for r in rows:
        by.setdefault(r["bench"], {})[r["impl"]] = r
    print("| benchmark | metric | Rust | Python | Python / Rust |")
    print("|---|---|---|---|---|")
    for bench, impls in by.items():
        rs, py = impls.get("rust", {}), impls.get("python", {})
        for metric in [k for k in rs if k not in ("bench", "impl")] or [k for k in py if k not in ("bench", "impl")]:
            a, b = rs.get(metric), py.get(metric)
            fmt = lambda v: "not measured" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
            ratio = f"{b / a:.1f}×" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else "—"
            print(f"| {bench} | {metric} | {fmt(a)} | {fmt(b)} | {ratio} |")


if __name__ == "__main__":
    op, args = sys.argv[1], sys.argv[2:]
    if op == "time":
        runs = int(args[0]); cmd = args[args.index("--") + 1:]
        cmd_time(runs, cmd)
    elif op == "wait":
        cmd_wait(args[0], args[1])
    elif op == "rss":
        cmd_rss(args[0])
    elif op == "table":
        cmd_table(args[0])
    else:
        sys.exit(__doc__)
