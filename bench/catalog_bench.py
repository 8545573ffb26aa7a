#!/usr/bin/python3
"""Times `wmap inspect` and `wmap plan` against a minimal Python header reader on DeepSeek-R1's real layout.

Builds the 163-shard, 91,991-tensor DeepSeek-R1 checkpoint as sparse files (real headers, holes
for data; tests/python/sparse_layout.py), then times, end to end as subprocesses (process start
included, output to /dev/null):

  wmap     `wmap inspect DIR`: discovery, every header parsed and validated, the sorted catalog,
           its content id (SHA-256 of the canonical form) and the summary.
  plan     `wmap plan DIR` at TP8/EP8 (rank 0), TP8/EP2 with 3 MTP layers, and TP1: the whole
           run (catalog, plugin, renames, spec, plan, validation). Goal (issue 4): <= 2x python.
  python   `python3 -c ...`: for each shard read the 8-byte length and the header and json.loads
           it. No validation, no sorting, no hashing: a floor for what any Python loader pays.

Each command runs once to warm the page cache, then --runs times; the table shows the median and
minimum wall time, the median CPU time (user + sys, all threads) and the ratios python / wmap.
Stdlib only.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUT = os.path.join(ROOT, "tests", "data", "layouts", "deepseek-r1")
SPARSE = os.path.join(ROOT, "tests", "python", "sparse_layout.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

PY_READER = r"""
import json, os, struct, sys
d = sys.argv[1]
n = 0
for f in sorted(os.listdir(d)):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            h = json.loads(fh.read(size))
            n += len(h) - ("__metadata__" in h)
print(n)
"""


def time_command(argv, runs):
    """Warm-up once, then `runs` timed runs; returns [(wall s, cpu s)], cpu = user + sys of the
    child (all its threads), which a busy machine disturbs far less than the wall time."""
    def once():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            sys.exit(f"catalog_bench: {' '.join(argv)} failed ({r.returncode}): {r.stderr.decode().strip()}")
        return t, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    once()
    return [once() for _ in range(runs)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--wmap", default=os.path.join(ROOT, "build", "bin", "wmap"), help="wmap binary (default build/bin/wmap)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per command after one warm-up (default 7, at least 5)")
    ap.add_argument("--dir", help="build the sparse checkpoint here (kept) instead of a temporary folder")
    ap.add_argument("--layout", default=LAYOUT, help="layout folder (default tests/data/layouts/deepseek-r1)")
    args = ap.parse_args()
    if args.runs < 5:
        ap.error("--runs must be at least 5")
    if not os.access(args.wmap, os.X_OK):
        ap.error(f"{args.wmap} is not an executable (build it, or pass --wmap)")

    with tempfile.TemporaryDirectory(prefix="wmap_bench_") as tmp:
        ckpt = args.dir or os.path.join(tmp, "ckpt")
        t0 = time.perf_counter()
        built = subprocess.run([PYTHON, SPARSE, args.layout, ckpt], capture_output=True, text=True)
        if built.returncode != 0:
            sys.exit(f"catalog_bench: sparse_layout.py failed: {built.stderr.strip()}")
        info = dict(line.split(" ", 1) for line in built.stdout.split("\n") if line)
        print(f"checkpoint: {ckpt}: {info['shards']} shards, {info['tensors']} tensors, "
              f"{int(info['apparent_bytes']) / 1e9:.1f} GB apparent, {int(info['disk_bytes']) / 1e6:.1f} MB on disk "
              f"(built in {time.perf_counter() - t0:.1f} s)")

        wmap = time_command([args.wmap, "-q", "inspect", ckpt], args.runs)
        py = time_command([PYTHON, "-c", PY_READER, ckpt], args.runs)
        plans = [(f"wmap plan {' '.join(flags) or '(tp1)'}", time_command([args.wmap, "-q", "plan", ckpt, *flags], args.runs))
                 for flags in (["--tp-size", "8", "--ep-size", "8", "--tp-rank", "0"],
                               ["--tp-size", "8", "--ep-size", "2", "--tp-rank", "0", "--mtp-layers", "3"], [])]

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'command':<60} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'runs':>5}")
    rows = (("wmap inspect DIR", wmap), ("python3 -c (json.loads headers)", py), *plans)
    med = {}
    for name, times in rows:
        wall = [w for w, _ in times]
        cpu = statistics.median(c for _, c in times)
        med[name] = (statistics.median(wall), cpu)
        print(f"{name:<60} {med[name][0] * 1e3:>10.1f} {min(wall) * 1e3:>8.1f} {cpu * 1e3:>8.1f} {len(times):>5}")
    (w_wall, w_cpu), (p_wall, p_cpu) = med[rows[0][0]], med[rows[1][0]]
    ratio = p_wall / w_wall
    print(f"ratio python / wmap: {ratio:.2f}x wall (medians), {p_cpu / w_cpu:.2f}x cpu  "
          f"(goal >= 4x wall: {'met' if ratio >= 4 else 'MISSED'})")
    for name, _ in plans:
        r = med[name][0] / p_wall
        print(f"{name}: {r:.2f}x python's parse time (goal <= 2x: {'met' if r <= 2 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
