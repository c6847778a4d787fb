#!/usr/bin/env python3
"""Helpers for benches/gateway.sh (standard library only).

  bench_util.py time RUNS -- CMD...      run CMD RUNS times, print {"median_ms","mean_ms","min_ms"} as JSON
  bench_util.py wait URL|HOST:PORT SECS  wait until an HTTP URL answers (or a TCP port accepts)
  bench_util.py rss PID                  resident set size of PID (and its children) in KiB, as JSON
  bench_util.py table RESULTS.jsonl      print the results as a Markdown table with Rust/Python ratios
  bench_util.py interleave RUNS SPEC.json  run the commands of SPEC (a JSON list of {"label","cmd","env"}) in
                                         turn, RUNS rounds; print one JSON line per label: median/min wall ms
                                         and median/max peak RSS KiB (the child's own, from wait4)
  bench_util.py cputime PID              user+system CPU ms PID has used so far (all its threads), as JSON
  bench_util.py lean-table LEAN.jsonl    print benches/lean.sh's results as issue 22's table (with the goals)
  bench_util.py resident PID [UNSTRIPPED] where PID's resident memory is: per kind of mapping (the program's code,
                                         its relocated read-only data, read-only data, libraries, heap and other
                                         anonymous memory), and, given an unstripped copy of the program, the
                                         crates whose code pages are resident (what start-up touched)
  bench_util.py code-size UNSTRIPPED [N] the N (default 30) crates with the most machine code in a program
                                         (function symbols' sizes, as cargo-bloat --crates counts them)
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


GNU_TIME = "/usr/bin/time"


def run_once(cmd, env):
    """Wall ms and peak RSS KiB of one run. The peak comes from GNU time (Debian package `time`): a child's
    ru_maxrss also counts the memory of the process that forked it, which for this Python script is ~20 MiB,
    while GNU time's is under 1 MiB (less than any measured program's own)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = f"/tmp/bench_util_time.{os.getpid()}"
    t = time.perf_counter()
    r = subprocess.run([GNU_TIME, "-f", "%M", "-o", out, *cmd], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=full_env)
    wall = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        sys.exit(f"{cmd} exited with {r.returncode}")
    with open(out) as f:
        rss = int(f.read().split()[-1])
    os.unlink(out)
    return wall, rss


def cmd_interleave(runs, spec_path):
    spec = json.load(open(spec_path))
    walls = {s["label"]: [] for s in spec}
    rss = {s["label"]: [] for s in spec}
    for _ in range(runs):
        for s in spec:
            w, r = run_once(s["cmd"], s.get("env"))
            walls[s["label"]].append(w)
            rss[s["label"]].append(r)
    for s in spec:
        l = s["label"]
        print(json.dumps({"label": l, "median_ms": statistics.median(walls[l]), "min_ms": min(walls[l]),
                          "max_ms": max(walls[l]), "median_rss_kib": statistics.median(rss[l]),
                          "max_rss_kib": max(rss[l]), "runs": runs}))


def cmd_cputime(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))
    print(json.dumps({"cpu_ms": ticks * 1000 / os.sysconf("SC_CLK_TCK")}))


def cmd_lean_table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    get = lambda bench, label: next((r for r in rows if r["bench"] == bench and r["label"] == label), None)
    mib = lambda kib: f"{kib / 1024:.1f} MiB"
    na = "not measured"
    t, rv, pv = get("version", "true"), get("version", "rust"), get("version", "python")
    ra, pa = get("agent_hi", "rust"), get("agent_hi", "python")
    ri, pi = get("idle_gateway", "rust"), get("idle_gateway", "python")
    rc, pc = get("api_turn", "rust"), get("api_turn", "python")
    sizes = {r["label"]: r["bytes"] for r in rows if r["bench"] == "size"}
    out = [("metric", "Rust", "Python", "goal")]
    if rv:
        net = rv["median_ms"] - (t["median_ms"] if t else 0)
        out.append(("`--version` peak RSS / wall (net of the harness)",
                    f"{mib(rv['median_rss_kib'])} / {net:.1f} ms (raw {rv['median_ms']:.1f}, `true` {t['median_ms']:.1f})",
                    f"{mib(pv['median_rss_kib'])} / {pv['median_ms'] - t['median_ms']:.0f} ms" if pv else na,
                    "≤ 5 MiB / ≤ 2 ms"))
    if ra:
        ratio = f"{pa['median_ms'] / ra['median_ms']:.0f}× faster (worst Rust run vs best Python: {pa['min_ms'] / ra['max_ms']:.0f}×)" if pa else na
        out.append(("`agent -m hi` wall (median of rounds)", f"{ra['median_ms']:.1f} ms (max {ra['max_ms']:.1f})",
                    f"{pa['median_ms']:.0f} ms" if pa else na, "≥ 150× faster, every run"))
        out.append(("`agent -m hi` wall ratio", ratio, "", ""))
        out.append(("`agent -m hi` peak RSS", mib(ra["median_rss_kib"]), mib(pa["median_rss_kib"]) if pa else na,
                    "≤ 12 MiB (≥ 10× less)"))
    if ri:
        out.append(("idle gateway RSS", mib(ri["rss_kib"]), mib(pi["rss_kib"]) if pi else na, "≤ 10 MiB"))
    if sizes:
        out.append(("release binary, all channels (stripped)",
                    ", ".join(f"`{k}` {v / 1048576:.1f} MiB" for k, v in sizes.items()), "—",
                    "≤ 20 MiB; core-only ≤ 10 MiB"))
    if rc:
        fmt = lambda r: f"{r['cpu_ms_per_turn']:.2f} ms at 1 session"\
            + (f", {r['cpu_ms_per_turn_c16']:.2f} ms at 16" if "cpu_ms_per_turn_c16" in r else "")\
            + f"; p99 {r['c1']['p99_ms']:.1f} ms at 1 session, {r['c128']['p99_ms']:.0f} ms at 128"\
            + (f" ({r['c128']['errors']} of {r['c128']['requests'] + r['c128']['errors']} failed)" if r['c128'].get('errors') else "")
        out.append(("server CPU per API turn (instant mock)", fmt(rc), fmt(pc) if pc else na,
                    "≤ 0.5 ms at 16 sessions; framework p99 ≤ 1 ms at 128 sessions"))
    for i, r in enumerate(out):
        print("| " + " | ".join(r) + " |")
        if i == 0:
            print("|---|---|---|---|")


def crate_of(symbol):
    """The crate a demangled Rust symbol belongs to, roughly: the first path segment of the item (or, for
    `<T as Trait>::f` and `drop_in_place<T>`, of the type T)."""
    s = symbol.strip()
    for prefix in ("core::ptr::drop_in_place<", "<"):
        while s.startswith(prefix):
            s = s[len(prefix):]
    for noise in ("&", "mut ", "dyn ", "*const ", "*mut ", "["):
        while s.startswith(noise):
            s = s[len(noise):]
    head = s.split("::", 1)[0]
    return head if head and head.replace("_", "").isalnum() else "(other)"


def cmd_resident(pid, unstripped=None):
    page = os.sysconf("SC_PAGE_SIZE")
    exe = os.path.realpath(f"/proc/{pid}/exe")
    kinds, text = {}, None
    maps, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = {"lo": lo, "hi": hi, "perm": head[1], "off": int(head[2], 16),
                       "name": head[5] if len(head) > 5 else "", "rss": 0, "anon": 0}
                maps.append(cur)
            elif head[0] == "Rss:":
                cur["rss"] = int(head[1])
            elif head[0] == "Anonymous:":
                cur["anon"] = int(head[1])
    for m in maps:
        if m["name"] == exe:
            kind = {"r-xp": "program code", "rw-p": "program data"}.get(
                m["perm"], "program relocated read-only data" if m["anon"] else "program read-only data")
            if m["perm"] == "r-xp":
                text = m
        elif m["name"].startswith("/"):
            kind = "shared libraries"
        elif m["name"] == "[heap]":
            kind = "heap"
        elif m["name"] == "[stack]":
            kind = "main stack"
        else:
            kind = "other anonymous (thread stacks, allocator arenas, large allocations)"
        kinds[kind] = kinds.get(kind, 0) + m["rss"]
    out = {"pid": int(pid), "rss_kib": sum(kinds.values()), "kinds_kib": dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}
    if unstripped and text:
        present = []
        with open(f"/proc/{pid}/pagemap", "rb") as f:
            f.seek(text["lo"] // page * 8)
            raw = f.read((text["hi"] - text["lo"]) // page * 8)
        for i in range(len(raw) // 8):
            if int.from_bytes(raw[i * 8:i * 8 + 8], "little") >> 63:
                present.append(text["lo"] + i * page)
        # The program is position-independent: file offset = address - mapping start + mapping offset, and the
        # symbol table gives virtual addresses of the linked file (the code's first byte at its offset's address).
        syms = []
        nm = subprocess.run(["nm", "-n", "-C", "--defined-only", unstripped], capture_output=True, text=True, check=True)
        for line in nm.stdout.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
        import bisect
        addrs = [a for a, _ in syms]
        # Linked address of the mapping's start: its file offset moved by the code segment's vaddr - offset.
        delta = 0
        ph = subprocess.run(["readelf", "-lW", unstripped], capture_output=True, text=True, check=True).stdout
        for line in ph.splitlines():
            f = line.split()
            if f and f[0] == "LOAD" and "E" in "".join(f[6:-1]):
                delta = int(f[2], 16) - int(f[1], 16)
        base = text["off"] + delta
        crates = {}
        for p in present:
            linked = p - text["lo"] + base
            i = bisect.bisect_right(addrs, linked + page - 1) - 1
            j = bisect.bisect_right(addrs, linked) - 1
            names = [syms[k][1] for k in range(max(j, 0), max(i, 0) + 1)] or ["(unknown)"]
            for n in names:
                c = crate_of(n)
                crates[c] = crates.get(c, 0) + page / 1024 / len(names)
        out["code_kib_by_crate"] = {k: round(v) for k, v in sorted(crates.items(), key=lambda kv: -kv[1])[:40]}
    print(json.dumps(out, indent=1))


def cmd_code_size(unstripped, top=30):
    nm = subprocess.run(["nm", "-S", "-C", "--defined-only", unstripped], capture_output=True, text=True, check=True)
    crates, total = {}, 0
    for line in nm.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in "tTwW":
            size = int(parts[1], 16)
            total += size
            c = crate_of(parts[3])
            crates[c] = crates.get(c, 0) + size
    rows = sorted(crates.items(), key=lambda kv: -kv[1])[:int(top)]
    print(json.dumps({"code_kib": round(total / 1024),
                      "by_crate_kib": {k: round(v / 1024) for k, v in rows}}, indent=1))


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
    elif op == "interleave":
        cmd_interleave(int(args[0]), args[1])
    elif op == "cputime":
        cmd_cputime(args[0])
    elif op == "lean-table":
        cmd_lean_table(args[0])
    elif op == "resident":
        cmd_resident(*args[:2])
    elif op == "code-size":
        cmd_code_size(*args[:2])
    else:
        sys.exit(__doc__)
