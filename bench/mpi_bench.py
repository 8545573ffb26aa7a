#!/usr/bin/python3
"""Multi-rank loads: storage traffic and speed of each --io-policy at 1, 2 and 4 ranks.

Writes a synthetic Llama checkpoint (`wmap synth llama --preset 1g`, under /tmp, deleted
afterwards unless --keep), then for each rank count and policy evicts the checkpoint from the
page cache (sync + posix_fadvise(DONTNEED), as bench/load_bench.py does) and runs

  mpirun -np N wmap load DIR --tp-size N --io-policy P --json

Each rank reports what it read from the shard files (storage_bytes: its own plan under native,
its stripes of the node's union under rank-striped, its chunks of the job's union under
exchange; page-cache hits included), what the kernel fetched from storage for it
(os_read_bytes, /proc/self/io read_bytes: hits excluded), what it received from other ranks,
and its seconds (policy step + load). The table gives the per-rank spread, totals over ranks
against the union of needed bytes (1.00 = every needed byte read once) and the aggregate GB/s
(parameter bytes of all ranks over the slowest rank's seconds). --runs N keeps the median run
by that GB/s.

Usage: bench/mpi_bench.py --wmap build/bin/wmap [--preset 1g] [--ranks 1,2,4] [--runs 1]
Stdlib only. Not part of ctest (tests/mpi/ checks the same accounting on small checkpoints).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from page_cache import evict, shards

MIB = 1 << 20


def run_ranks(wmap, d, n, policy):
    """One mpirun; each rank's JSON line (its own output file, so lines never interleave)."""
    with tempfile.TemporaryDirectory(prefix="wmap-mpi-bench-") as out:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--output-filename", out, "-np", str(n),
               wmap, "-q", "load", d, "--tp-size", str(n), "--io-policy", policy, "--json"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
        ranks = []
        for root, _, files in os.walk(out):
            if "stdout" in files:
                with open(os.path.join(root, "stdout")) as f:
                    ranks += [json.loads(l) for l in f if l.startswith("{")]
        if r.returncode != 0 or len(ranks) != n:
            sys.exit("mpi_bench: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr[-4000:]))
    return sorted(ranks, key=lambda j: j["rank"]), wall


def summary(ranks, wall):
    secs = max(j["io_policy_seconds"] + j["seconds"] for j in ranks)
    return {
        "effective": ",".join(sorted({j["io_policy"] for j in ranks})),
        "storage": [j["storage_bytes"] for j in ranks],
        "os_read": [j["os_read_bytes"] for j in ranks],
        "received": [j["received_bytes"] for j in ranks],
        "needed": [j["needed_bytes"] for j in ranks],
        "union": max(j["union_bytes"] for j in ranks),
        "policy_s": max(j["io_policy_seconds"] for j in ranks),
        "load_s": max(j["seconds"] for j in ranks),
        "secs": secs,
        "gbps": sum(j["bytes_loaded"] for j in ranks) / secs / 1e9 if secs > 0 else 0.0,
        "wall": wall,
    }


def spread(xs):
    lo, hi = min(xs) / MIB, max(xs) / MIB
    return "%.0f" % lo if round(lo) == round(hi) else "%.0f–%.0f" % (lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wmap", required=True)
    ap.add_argument("--preset", default="1g")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--policies", default="native,rank-striped,exchange")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--keep", help="use (or create) the checkpoint in this folder and keep it")
    args = ap.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("mpi_bench: mpirun not found (apt-get install openmpi-bin)")
    wmap = os.path.abspath(args.wmap)
    d = args.keep or tempfile.mkdtemp(prefix="wmap-mpi-bench-ckpt-")
    try:
        if not shards(d) if os.path.isdir(d) else True:
            subprocess.run([wmap, "-q", "synth", "llama", d, "--preset", args.preset], check=True)
        total = sum(os.path.getsize(p) for p in shards(d))
        print("checkpoint: llama --preset %s, %.0f MiB in %d shards; page cache evicted before every run\n"
              % (args.preset, total / MIB, len(shards(d))))
        print("| ranks | policy (effective) | needed MiB/rank | read MiB/rank | read total / union "
              "| kernel storage reads total / union | received MiB/rank | policy step s | load s | aggregate GB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n in [int(x) for x in args.ranks.split(",")]:
            rows = []
            for policy in args.policies.split(","):
                runs = []
                for _ in range(args.runs):
                    evict(d)
                    runs.append(summary(*run_ranks(wmap, d, n, policy)))
                rows.append((policy, sorted(runs, key=lambda r: r["gbps"])[len(runs) // 2]))
            # Native ranks compute no union: take it from a policy that did (or the needs, at n=1).
            union = max(r["union"] for _, r in rows) or sum(rows[0][1]["needed"])
            for policy, s in rows:
                print("| %d | %s (%s) | %s | %s | %.2f | %.2f | %s | %.2f | %.2f | %.2f |" % (
                    n, policy, s["effective"], spread(s["needed"]), spread(s["storage"]), sum(s["storage"]) / union,
                    sum(s["os_read"]) / union, spread(s["received"]), s["policy_s"], s["load_s"], s["gbps"]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
