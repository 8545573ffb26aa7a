#!/usr/bin/python3
"""gpt-oss and Llama 4: what a rank reads, how many reads, plan time, and a warm TP1 load.

One run, one table each (docs/performance.md "gpt-oss and Llama 4"):

  reads   the real layouts (tests/data/layouts/gpt-oss-120b, Llama-4-Maverick-17B-128E) rebuilt as
          sparse files; for rank 3 of TP8/EP8 and TP8/EP1 under both targets, from the plan's own
          schedule (`wmap plan --json`, what a load runs): file bytes the read and copy units
          cover ÷ source bytes the rank keeps, and the number of read units (one pread each, or
          more when a unit is larger than chunk_bytes)
  plan    wmap's catalog + plan seconds (as it prints them) against Python reading every shard
          header (json.loads of each header, nothing else), best of --runs
  load    a warm TP1 `wmap load` of ~1 GB checkpoints of each family (wmap synth gpt_oss|llama4
          --preset small with larger sizes, LOAD_SIZES below; the small presets alone are ~10-20 MB,
          all fixed costs) against `cat` of the same shards (warm page cache) and a memcpy of the
          same bytes, best of --runs

Usage: bench/families_bench.py --wmap build/bin/wmap [--runs 5]
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


def plan_stats(wmap, ckpt, target, tp, rank, ep):
    out = run([wmap, "plan", ckpt, "--json", "--target", target, "--tp-size", str(tp), "--tp-rank", str(rank),
               "--ep-size", str(ep)])
    j = json.loads(out)
    units = [u for u in j["schedule"]["units"] if u[0] in ("read", "copy")]
    read = sum(u[3] - u[2] for u in units)
    return read, j["bytes_to_read"], j["bytes_to_load"], len(units)


def plan_seconds(wmap, ckpt, runs):
    best = None
    for _ in range(runs):
        err = subprocess.run([wmap, "plan", ckpt], capture_output=True, text=True).stdout
        line = [l for l in err.splitlines() if l.startswith("bytes:")][0]
        cat = float(line.split("catalog ")[1].split("s")[0])
        plan = float(line.split("plan ")[1].split("s")[0])
        best = cat + plan if best is None else min(best, cat + plan)
    return best


def python_headers(ckpt, runs):
    files = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        n = 0
        for f in files:
            with open(os.path.join(ckpt, f), "rb") as fh:
                size = struct.unpack("<Q", fh.read(8))[0]
                n += len(json.loads(fh.read(size)))
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, n


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
        print("| layout | target | TP/EP | bytes read ÷ kept | read units | params GB |")
        print("|---|---|---|---|---|---|")
        built = {}
        for layout in ("gpt-oss-120b", "Llama-4-Maverick-17B-128E"):
            out = os.path.join(tmp, layout)
            run([sys.executable, os.path.join(ROOT, "tests/python/sparse_layout.py"),
                 os.path.join(ROOT, "tests/data/layouts", layout), out])
            built[layout] = out
            for target in ("vllm", "trtllm"):
                for ep in (8, 1):
                    read, keep, load, calls = plan_stats(a.wmap, out, target, 8, 3, ep)
                    print("| %s | %s | 8/%d | %.3f | %d | %.2f |" % (layout, target, ep, read / keep, calls, load / 1e9))
        print()
        print("| layout | tensors | wmap catalog+plan s | Python header parse s | Python ÷ wmap |")
        print("|---|---|---|---|---|")
        for layout, out in built.items():
            w = plan_seconds(a.wmap, out, a.runs)
            p, n = python_headers(out, a.runs)
            print("| %s | %d | %.4f | %.4f | %.1f× |" % (layout, n, w, p, p / w))
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
