#!/usr/bin/python3
"""Times `wmap inspect` and `wmap plan` against a minimal Python header reader on DeepSeek-R1's real layout.

Builds the 163-shard, 91,991-tensor DeepSeek-R1 checkpoint as sparse files (real headers, holes
for data; tests/python/sparse_layout.py), then times, end to end as subprocesses (process start
included, output to /dev/null), one warm-up each and then --runs interleaved rounds:

  wmap     `wmap inspect DIR`: discovery, the index and every header parsed and validated, the
           sorted catalog and the summary. Goal (issue 17): >= 4x faster than python.
  python   `python3 -c ...`: for each shard read the 8-byte length and the header and json.loads
           it. No index, no validation, no sorting: a floor for what any Python loader pays.
  start    `wmap --help`: wmap's process start alone (its shared libraries, the CLI's set-up).
  floor    bench/catalog_floor.cc (built here with c++ and the system's simdjson): every header,
           then also the index, read and parsed on all cores and nothing kept, with glibc's
           huge-page malloc. What any C++ reader of the same bytes pays on this machine.
  plan     `wmap plan DIR` at TP8/EP8 (rank 0), TP8/EP2 with 3 MTP layers, and TP1: the whole
           run (catalog, plugin, renames, spec, plan, validation). Goal (issue 4): <= 2x python.

The table shows the median and minimum wall time and the median CPU time (user + sys, all
threads), then the ratios.

Then the scale curve (issue 17; --curve-experts '' skips it): the same DeepSeek-V3 architecture
with 256 (R1's real layout), 576 and 1,152 routed experts (~92k, ~207k, ~409k tensors; the larger
ones in 200 and 400 equal sparse shards), timing `wmap plan --tp-size 8 --tp-rank 3 --ep-size 8`
interleaved with the Python header parse, medians of --runs, with each process's peak RSS
(wait4). The plan's cost per tensor shows whether it grows linearly. Goal: plan faster than
Python's parse at ~410k tensors, peak RSS <= 400 MB.
Stdlib only.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUT = os.path.join(ROOT, "tests", "data", "layouts", "deepseek-r1")
SPARSE = os.path.join(ROOT, "tests", "python", "sparse_layout.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

PY_NAME = "python3 -c (json.loads headers)"
FLOOR_HEADERS = "floor: headers only, simdjson, all cores (huge-page malloc)"
FLOOR_INDEX = "floor: headers + index.json, simdjson, all cores (huge-page malloc)"

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


def run_once(argv, env=None):
    """(wall s, cpu s, peak RSS bytes) of one run of argv (with `env` added to the environment),
    its output discarded."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **env} if env else None)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    t = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"catalog_bench: {' '.join(argv)} failed ({proc.returncode}): {err.decode().strip()}")
    return t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def scaled_layout(base, experts, shard_count, out):
    """A layout folder: `base`'s config with `experts` routed experts and `shard_count` equal shards."""
    import json
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    cfg["n_routed_experts"] = experts
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "shard_sizes.tsv"), "w") as f:
        f.write("file\tlfs_size_bytes\tlfs_sha256\n")
        for i in range(shard_count):
            f.write(f"model-{i + 1:05d}-of-{shard_count:06d}.safetensors\t1000000000\t-\n")


def build_sparse(layout, ckpt):
    built = subprocess.run([PYTHON, SPARSE, layout, ckpt], capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"catalog_bench: sparse_layout.py failed: {built.stderr.strip()}")
    return dict(line.split(" ", 1) for line in built.stdout.split("\n") if line)


def scale_curve(wmap, layout, experts_list, runs, tmp):
    """Rows (experts, shards, tensors, plan median s, python median s, plan peak RSS, python peak RSS)."""
    rows = []
    for experts in experts_list:
        if experts == 256:
            lay, shard_count = layout, None
        else:
            shard_count = round(400 * experts / 1152)
            lay = os.path.join(tmp, f"layout-{experts}")
            scaled_layout(layout, experts, shard_count, lay)
        ckpt = os.path.join(tmp, f"ckpt-{experts}")
        info = build_sparse(lay, ckpt)
        plan = [wmap, "-q", "plan", ckpt, "--tp-size", "8", "--tp-rank", "3", "--ep-size", "8"]
        py = [PYTHON, "-c", PY_READER, ckpt]
        run_once(plan), run_once(py)  # warm the page cache
        p, q = [], []
        for _ in range(runs):
            p.append(run_once(plan))
            q.append(run_once(py))
        rows.append((experts, int(info["shards"]), int(info["tensors"]), statistics.median(w for w, _, _ in p),
                     statistics.median(w for w, _, _ in q), max(r for _, _, r in p), max(r for _, _, r in q)))
        print(f"  {experts} experts: {info['tensors']} tensors in {info['shards']} shards, plan {rows[-1][3] * 1e3:.0f} ms, "
              f"python {rows[-1][4] * 1e3:.0f} ms", flush=True)
    return rows


def build_floor(tmp):
    """bench/catalog_floor.cc, built with the system's simdjson; None (with a note) when it cannot be."""
    exe = os.path.join(tmp, "catalog_floor")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog_floor.cc")
    r = subprocess.run(["c++", "-O2", "-std=c++20", "-pthread", "-o", exe, src, "-lsimdjson"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"catalog_bench: building {src} failed, no floor rows: {r.stderr.strip()}")
        return None
    return exe


def interleaved(commands, runs):
    """{name: [(wall s, cpu s, peak RSS)]}: each command once to warm up, then `runs` rounds, each
    round running every command once in turn (so drift on a shared machine hits all alike)."""
    for _, argv, env in commands:
        run_once(argv, env)
    out = {name: [] for name, _, _ in commands}
    for _ in range(runs):
        for name, argv, env in commands:
            out[name].append(run_once(argv, env))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--wmap", default=os.path.join(ROOT, "build", "bin", "wmap"), help="wmap binary (default build/bin/wmap)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per command after one warm-up (default 7, at least 5)")
    ap.add_argument("--dir", help="build the sparse checkpoint here (kept) instead of a temporary folder")
    ap.add_argument("--layout", default=LAYOUT, help="layout folder (default tests/data/layouts/deepseek-r1)")
    ap.add_argument("--curve-experts", default="256,576,1152",
                    help="routed-expert counts of the scale curve (default 256,576,1152; '' skips it)")
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

        floor = build_floor(tmp)
        huge = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
        commands = [("wmap inspect DIR", [args.wmap, "-q", "inspect", ckpt], None),
                    (PY_NAME, [PYTHON, "-c", PY_READER, ckpt], None),
                    ("wmap --help (process start only)", [args.wmap, "--help"], None)]
        if floor:
            commands += [(FLOOR_HEADERS, [floor, ckpt], huge), (FLOOR_INDEX, [floor, ckpt, "--index"], huge)]
        commands += [(f"wmap plan {' '.join(flags) or '(tp1)'}", [args.wmap, "-q", "plan", ckpt, *flags], None)
                     for flags in (["--tp-size", "8", "--ep-size", "8", "--tp-rank", "0"],
                                   ["--tp-size", "8", "--ep-size", "2", "--tp-rank", "0", "--mtp-layers", "3"], [])]
        times = interleaved(commands, args.runs)
        experts = [int(e) for e in args.curve_experts.split(",") if e.strip()]
        curve = scale_curve(args.wmap, args.layout, experts, args.runs, tmp) if experts else []

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"R1 layout, whole processes, {args.runs} interleaved rounds:")
    print(f"{'command':<64} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'runs':>5}")
    med = {}
    for name, _, _ in commands:
        wall = [w for w, _, _ in times[name]]
        cpu = statistics.median(c for _, c, _ in times[name])
        med[name] = statistics.median(wall)
        print(f"{name:<64} {med[name] * 1e3:>10.1f} {min(wall) * 1e3:>8.1f} {cpu * 1e3:>8.1f} {len(wall):>5}")
    w, p = med["wmap inspect DIR"], med[PY_NAME]
    print(f"ratio python / wmap inspect: {p / w:.2f}x wall (medians)  (goal >= 4x: {'met' if p / w >= 4 else 'MISSED'})")
    if floor:
        f = med[FLOOR_INDEX]
        print(f"4x python is {p / 4 * 1e3:.1f} ms; the bare parse of what inspect reads (headers + index) takes "
              f"{f * 1e3:.1f} ms, plus wmap's own process start {med['wmap --help (process start only)'] * 1e3:.1f} ms; "
              f"wmap inspect / that floor: {w / f:.2f}x")
    for name, _, _ in commands[-3:]:
        r = med[name] / p
        print(f"{name}: {r:.2f}x python's parse time (goal <= 2x: {'met' if r <= 2 else 'MISSED'})")
    if curve:
        print()
        print("scale curve: `wmap plan --tp-size 8 --tp-rank 3 --ep-size 8` vs python's header parse, "
              f"medians of {args.runs} interleaved runs, whole processes")
        print("| routed experts | shards | tensors | plan ms | python ms | python / plan | plan us per tensor | plan peak RSS MB | python peak RSS MB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for e, sh, n, p, q, rp, rq in curve:
            print(f"| {e} | {sh} | {n} | {p * 1e3:.0f} | {q * 1e3:.0f} | {q / p:.2f} | {p / n * 1e6:.2f} | {rp / 1e6:.0f} | {rq / 1e6:.0f} |")
        e, sh, n, p, q, rp, rq = curve[-1]
        print(f"{n} tensors: plan {q / p:.2f}x python's parse speed (goal >= 1: {'met' if q >= p else 'MISSED'}), "
              f"peak RSS {rp / 1e6:.0f} MB (goal <= 400: {'met' if rp <= 400e6 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
