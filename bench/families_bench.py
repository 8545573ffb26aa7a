#!/usr/bin/python3
"""gpt-oss and Llama 4: what a rank reads, how many reads, plan time, and a warm TP1 load.

One run, one table each (docs/performance.md "gpt-oss and Llama 4"):

  reads   the real layouts (tests/data/layouts/gpt-oss-120b, Llama-4-Maverick-17B-128E) rebuilt as
          sparse files; for rank 3 of TP8/EP8 and TP8/EP1 under both targets, from the plan's own
          schedule (`wmap plan --json`, what a load runs): file bytes the read and copy units
          cover ÷ source bytes the rank keeps, and the number of read units (one pread each, or
          more when a unit is larger than chunk_bytes), at the default --max-read-gap (64 KiB)
          and at 4 KiB
  gaps    bench/read_gap.c on a 512 MiB file: a rank keeping RUN of every STRIDE bytes reads
          through the gaps or preads each run, warm and cold (what --max-read-gap chooses)
  plan    catalog + plan: in one process, repeated (bench/plan_bench.cc: the first run, which
          touches every page fresh, and the best warm one) against Python reading and
          json.loads-ing every shard header in one process (first and best); and as whole
          processes (`wmap plan DIR` against `python3 -c <the same parse>`), best of --runs
  load    a warm TP1 `wmap load` of ~1 GB checkpoints of each family (wmap synth gpt_oss|llama4
          --preset small with larger sizes, LOAD_SIZES below; the small presets alone are ~10-20 MB,
          all fixed costs) against `cat` of the same shards (warm page cache) and a memcpy of the
          same bytes, best of --runs

Usage: bench/families_bench.py --wmap build/bin/wmap [--runs 5]
(wmap_plan_bench is taken from beside wmap; read_gap.c is compiled with cc.)
Stdlib + numpy. Not part of ctest.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def plan_stats(wmap, ckpt, target, tp, rank, ep, gap=None):
    cmd = [wmap, "plan", ckpt, "--json", "--target", target, "--tp-size", str(tp), "--tp-rank", str(rank),
           "--ep-size", str(ep)]
    if gap is not None:
        cmd += ["--max-read-gap", str(gap)]
    j = json.loads(run(cmd))
    units = [u for u in j["schedule"]["units"] if u[0] in ("read", "copy")]
    read = sum(u[3] - u[2] for u in units)
    return read, j["bytes_to_read"], j["bytes_to_load"], len(units)


def plan_in_process(plan_bench, ckpt, runs):
    """(first, best) seconds of catalog + plan, one process, --runs repeats."""
    out = run([plan_bench, ckpt, "--runs", str(max(runs, 2) * 4)])
    line = [l for l in out.splitlines() if l.startswith("prepare ")][0].split()
    return float(line[2]), float(line[4])


PY_PARSE = """
import json, os, struct, sys
ck = sys.argv[1]
for f in sorted(os.listdir(ck)):
    if f.endswith(".safetensors"):
        with open(os.path.join(ck, f), "rb") as fh:
            json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
"""


def best_process_seconds(cmd, runs):
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def python_headers(ckpt, runs):
    """(first, best, tensors): Python reading and parsing every header in this process."""
    files = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    times, n = [], 0
    for _ in range(max(runs, 2) * 4):
        t0 = time.perf_counter()
        n = 0
        for f in files:
            with open(os.path.join(ckpt, f), "rb") as fh:
                size = struct.unpack("<Q", fh.read(8))[0]
                n += len(json.loads(fh.read(size)))
        times.append(time.perf_counter() - t0)
    return times[0], min(times), n


LOAD_SIZES = {
    "gpt_oss": ["--hidden", "2048", "--intermediate", "2048", "--experts", "16", "--layers", "8"],
    "llama4": ["--hidden", "2048", "--moe-intermediate", "1024", "--intermediate", "2048", "--experts", "16",
               "--layers", "4"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wmap", required=True)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wmap_families_") as tmp:
        print("| layout | target | TP/EP | read ÷ kept (64 KiB) | read units | read ÷ kept (4 KiB) | read units "
              "| params GB |")
        print("|---|---|---|---|---|---|---|---|")
        built = {}
        for layout in ("gpt-oss-120b", "Llama-4-Maverick-17B-128E"):
            out = os.path.join(tmp, layout)
            run([sys.executable, os.path.join(ROOT, "tests/python/sparse_layout.py"),
                 os.path.join(ROOT, "tests/data/layouts", layout), out])
            built[layout] = out
            for target in ("vllm", "trtllm"):
                for ep in (8, 1):
                    read, keep, load, calls = plan_stats(a.wmap, out, target, 8, 3, ep)
                    read4, _, _, calls4 = plan_stats(a.wmap, out, target, 8, 3, ep, 4096)
                    print("| %s | %s | 8/%d | %.3f | %d | %.3f | %d | %.2f |" %
                          (layout, target, ep, read / keep, calls, read4 / keep, calls4, load / 1e9))
        print()
        gap_bin = os.path.join(tmp, "read_gap")
        run(["cc", "-O2", "-o", gap_bin, os.path.join(HERE, "read_gap.c")])
        data = os.path.join(tmp, "gap.bin")
        with open(data, "wb") as f:
            for _ in range(64):
                f.write(os.urandom(8 << 20))
            f.flush()
            os.fsync(f.fileno())  # clean pages: posix_fadvise(DONTNEED) can then drop them
        print("| keeps RUN of every STRIDE | cache | per-run s | per-run calls | through s | through calls | "
              "per-run ÷ through (time) | storage bytes per-run ÷ through |")
        print("|---|---|---|---|---|---|---|---|")
        for r, st in ((1024, 8192), (4096, 16384), (8192, 65536), (16384, 131072), (32768, 262144)):
            rows = {}
            for line in run([gap_bin, "--runs", str(a.runs), data, str(r), str(st)]).splitlines():
                j = json.loads(line)
                rows[(j["cache"], j["way"])] = j
            for cache in ("warm", "cold"):
                p, t = rows[(cache, "per-run")], rows[(cache, "through")]
                storage = ("%.2f" % (p["storage_bytes"] / t["storage_bytes"])) if t["storage_bytes"] else "n/a"
                print("| %d of %d | %s | %.4f | %d | %.4f | %d | %.2f | %s |" %
                      (r, st, cache, p["seconds"], p["calls"], t["seconds"], t["calls"],
                       p["seconds"] / t["seconds"], storage))
        print()
        plan_bench = os.path.join(os.path.dirname(os.path.abspath(a.wmap)), "wmap_plan_bench")
        print("| layout | tensors | in one process: wmap first / best ms | Python first / best ms | Python ÷ wmap "
              "(best) | processes: wmap plan ms | python3 ms | Python ÷ wmap |")
        print("|---|---|---|---|---|---|---|---|")
        for layout, out in built.items():
            wf, wb = plan_in_process(plan_bench, out, a.runs)
            pf, pb, n = python_headers(out, a.runs)
            wp = best_process_seconds([a.wmap, "plan", out], a.runs)
            pp = best_process_seconds([sys.executable, "-c", PY_PARSE, out], a.runs)
            print("| %s | %d | %.2f / %.2f | %.2f / %.2f | %.2f× | %.1f | %.1f | %.2f× |" %
                  (layout, n, wf * 1e3, wb * 1e3, pf * 1e3, pb * 1e3, pb / wb, wp * 1e3, pp * 1e3, pp / wp))
        for layout, args in (("gpt-oss-120b", ["--tp-size", "8", "--tp-rank", "3", "--target", "vllm"]),):
            wp = best_process_seconds([a.wmap, "plan", built[layout]] + args, a.runs)
            print("\n`wmap plan %s %s`: %.1f ms as a process" % (layout, " ".join(args), wp * 1e3))
        print()
        print("| preset | target | GB | wmap load s | cat s | memcpy s | wmap ÷ cat | wmap ÷ memcpy |")
        print("|---|---|---|---|---|---|---|---|")
        for family in ("gpt_oss", "llama4"):
            ckpt = os.path.join(tmp, family)
            run([a.wmap, "synth", family, ckpt, "--preset", "small"] + LOAD_SIZES[family])
            files = [os.path.join(ckpt, f) for f in sorted(os.listdir(ckpt)) if f.endswith(".safetensors")]
            total = sum(os.path.getsize(f) for f in files)
            src = np.ones(total, dtype=np.uint8)
            dst = np.empty_like(src)
            np.copyto(dst, src)
            for target in ("vllm", "trtllm"):
                best = {"load": None, "cat": None, "memcpy": None}
                for _ in range(a.runs):
                    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL)
                    t0 = time.perf_counter()
                    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL)
                    c = time.perf_counter() - t0
                    j = json.loads(run([a.wmap, "-q", "load", ckpt, "--json", "--target", target]))
                    s = j["seconds"]
                    t0 = time.perf_counter()
                    np.copyto(dst, src)
                    m = time.perf_counter() - t0
                    for k, v in (("load", s), ("cat", c), ("memcpy", m)):
                        best[k] = v if best[k] is None else min(best[k], v)
                print("| %s ~1 GB | %s | %.4f | %.4f | %.4f | %.4f | %.2f | %.2f |" %
                      (family, target, total / 1e9, best["load"], best["cat"], best["memcpy"],
                       best["cat"] / best["load"], best["memcpy"] / best["load"]))


if __name__ == "__main__":
    main()
