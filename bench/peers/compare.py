#!/usr/bin/python3
"""wmap against its peers at equal footing (issue 42): Run:ai Model Streamer's C++ core and HF
safetensors (the Rust crate), driven by bench/peers/runai_harness.cc and
bench/peers/safetensors_harness, which bench/peers.sh builds and then runs this with.

For each synthetic Llama checkpoint (`wmap synth llama --preset 1g|4g`, page cache warm), one
warm-up and then --runs interleaved rounds, each a fresh process per contender:

  fresh  wmap: `wmap -q load DIR --json`'s `seconds` (the executor: header parse, catalog and
         plan excluded, as the peers' harnesses exclude their header parse);
         Run:ai + THP: one malloc'd buffer filled by one request covering every tensor;
         HF 2 threads / 1 thread + THP: every tensor's `data().to_vec()` from the mmap'd shards
  refit  the destination allocated and touched first, untimed: wmap's `load_into` first call into
         touched numpy arrays (bench/refit_bench.py's first_call, which also gives the pread limit
         into other arrays made the same way); Run:ai into a touched buffer; HF 2 threads
         `copy_from_slice` into touched Vecs

Every contender lands the same bytes (asserted equal to wmap's `bytes_loaded`), and the peers
check theirs against a pread. Page size: wmap puts parameter buffers of 2 MiB or more on huge
pages and numpy advises its large arrays MADV_HUGEPAGE; the peers run with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1. Debian 12's glibc 2.36 applies that tunable in only some
processes (it compares the THP mode read from sysfs without NUL-terminating it), so a peer's
process where it did not take effect (the harness reports `malloc_thp`) is rerun; the reruns
are counted. Also measured: a fresh 4 KiB page's fault cost (bench/prefault_bench.py's probe).

Prints medians and best-of per contender and x = peer seconds / wmap seconds (> 1: wmap faster).
--write-docs replaces the block between `<!-- peers.sh table begin -->` and
`<!-- peers.sh table end -->` in docs/performance.md with the table, the date, the peers'
commits and the fault cost.

Usage: bench/peers.sh SRC_DIR [--presets 1g,4g] [--runs 5] [--keep DIR] [--write-docs]
       bench/peers/compare.py --peers-build SRC_DIR/build [--wmap build/bin/wmap] [same options]
Stdlib + numpy (bench/load_bench.py's and bench/refit_bench.py's helpers); the refit rows need
wmap's Python module (--pythonpath, default build/python).
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from load_bench import med, run_wmap, warm  # noqa: E402
from prefault_bench import build_fault_probe  # noqa: E402

PEER_ENV = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
BEGIN, END = "<!-- peers.sh table begin -->", "<!-- peers.sh table end -->"
MAX_TRIES = 20
# What wmap's destinations are on (not measured per run): its own buffers of 2 MiB or more are
# advised MADV_HUGEPAGE (docs/cli.md "Huge pages"); numpy advises arrays of 4 MiB or more itself.
WMAP_PAGES = {"fresh": "THP for buffers >= 2 MiB", "refit": "numpy: THP for arrays >= 4 MiB"}


def thp_mode():
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        text = f.read()
    return text[text.index("[") + 1:text.index("]")]


def run_peer(argv, reruns):
    """The harness's JSON line; where the THP mode is madvise (the tunable's only effect), a
    process in which glibc did not take glibc.malloc.hugetlb=1 is rerun."""
    for attempt in range(MAX_TRIES):
        r = subprocess.run(argv, env=PEER_ENV, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compare.py: {' '.join(argv)} failed ({r.returncode}): {r.stderr}")
        j = json.loads(r.stdout)
        if j["malloc_thp"] or thp_mode() != "madvise":
            name = os.path.basename(argv[0])
            reruns[name] = [a + b for a, b in zip(reruns.get(name, [0, 0]), [attempt, 1])]
            return j
    sys.exit(f"compare.py: glibc.malloc.hugetlb=1 took effect in none of {MAX_TRIES} runs of {' '.join(argv)}")


def refit_worker(d):
    """In a fresh process: wmap's load_into first call into new touched arrays, and the pread
    limit into other arrays made the same way (refit_bench.first_call, one run)."""
    import refit_bench
    import wmap
    plan = wmap.plan(d)
    params = json.loads(plan.to_json())["params"]
    rows = refit_bench.first_call(d, params, plan.bytes_to_load, 1)
    n = plan.bytes_to_load
    print(json.dumps({"seconds": n / rows["first"][0] / 1e9, "limit_seconds": n / rows["limit"][0] / 1e9, "bytes": n}))


def contenders(args, build, d):
    """(key, label, mode, function returning {"seconds", "bytes", ...}) in round order."""
    runai, hf = os.path.join(build, "runai_harness"), os.path.join(build, "safetensors_harness_bin")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [args.pythonpath, os.environ.get("PYTHONPATH")])))
    reruns = args.reruns

    def wmap_fresh():
        j = run_wmap(args.wmap, d)
        return {"seconds": j["seconds"], "bytes": j["bytes_loaded"]}

    def wmap_refit():
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--refit-worker", d], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compare.py: the wmap refit worker failed ({r.returncode}): {r.stderr}")
        return json.loads(r.stdout.splitlines()[-1])

    return [
        ("wmap", "wmap `load` (executor `seconds`)", "fresh", wmap_fresh),
        ("runai", "Run:ai + THP, one buffer", "fresh", lambda: run_peer([runai, d, "fresh"], reruns)),
        ("hf2", "HF safetensors 2 threads + THP, `to_vec`", "fresh", lambda: run_peer([hf, d, "fresh", "2"], reruns)),
        ("hf1", "HF safetensors 1 thread + THP, `to_vec`", "fresh", lambda: run_peer([hf, d, "fresh", "1"], reruns)),
        ("wmap", "wmap `load_into` first call, touched arrays (executor)", "refit", wmap_refit),
        ("runai", "Run:ai + THP, touched buffer", "refit", lambda: run_peer([runai, d, "refit"], reruns)),
        ("hf2", "HF safetensors 2 threads + THP, `copy_from_slice` into touched Vecs", "refit",
         lambda: run_peer([hf, d, "refit", "2"], reruns)),
    ]


def measure(args, build, d):
    cs = contenders(args, build, d)
    warm(d)
    for _, _, _, fn in cs:  # warm-up: page cache, binaries, the harnesses' first faults
        fn()
    times = {(k, m): [] for k, _, m, _ in cs}
    extra = {(k, m): [] for k, _, m, _ in cs}
    for _ in range(args.runs):
        for key, _, mode, fn in cs:
            j = fn()
            times[(key, mode)].append(j["seconds"])
            extra[(key, mode)].append(j)
    want = extra[("wmap", "fresh")][0]["bytes"]
    for (key, mode), js in extra.items():
        for j in js:
            if j["bytes"] != want:
                sys.exit(f"compare.py: {key} {mode} landed {j['bytes']} bytes, wmap's bytes_loaded is {want}")
    limit = [j["limit_seconds"] for j in extra[("wmap", "refit")]]
    huge = {k: med([j["anon_huge_bytes"] / j["bytes"] for j in js]) for k, js in extra.items() if "anon_huge_bytes" in js[0]}
    return [(label, mode, key) for key, label, mode, _ in cs], times, limit, huge, want


def table(results, runs):
    lines = ["| ckpt | mode | contender | median ms | best ms | x median | x best | on THP |",
             "|---|---|---|---|---|---|---|---|"]
    for preset, (rows, times, limit, huge, nbytes) in results:
        for label, mode, key in rows:
            t, w = times[(key, mode)], times[("wmap", mode)]
            x = "" if key == "wmap" else f"{med(t) / med(w):.2f}x"
            xb = "" if key == "wmap" else f"{min(t) / min(w):.2f}x"
            thp = f"{huge[(key, mode)]:.0%}" if (key, mode) in huge else WMAP_PAGES[mode]
            lines.append(f"| {preset} ({nbytes / 1e9:.2f} GB) | {mode} | {label} | {med(t) * 1e3:.1f} | "
                         f"{min(t) * 1e3:.1f} | {x} | {xb} | {thp} |")
        w = times[("wmap", "refit")]
        lines.append(f"| {preset} ({nbytes / 1e9:.2f} GB) | refit | limit: pread by every core into other touched "
                     f"arrays (refit_bench) | {med(limit) * 1e3:.1f} | {min(limit) * 1e3:.1f} | "
                     f"{med(limit) / med(w):.2f}x | {min(limit) / min(w):.2f}x | |")
    lines.append("")
    lines.append(f"Warm page cache; one warm-up, then {runs} interleaved rounds, a fresh process per contender "
                 "per round; x = contender seconds / wmap seconds (> 1: wmap faster); \"on THP\": the median "
                 "share of the landed bytes backed by transparent huge pages (AnonHugePages) in the peer's process.")
    return "\n".join(lines)


def write_docs(block):
    path = os.path.join(ROOT, "docs", "performance.md")
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"compare.py --write-docs: {path} has no '{BEGIN}' ... '{END}' block; add one where the table goes")
    head, rest = text.split(BEGIN, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1])
    print(f"compare.py: wrote the table into {path}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--refit-worker":
        return refit_worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers-build", required=True, help="bench/peers.sh's build folder (harnesses, commits.txt)")
    ap.add_argument("--wmap", default=os.path.join(ROOT, "build", "bin", "wmap"))
    ap.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"), help="where wmap's Python module is")
    ap.add_argument("--presets", default="1g")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", help="write checkpoints here and keep them (default: a /tmp folder, deleted)")
    ap.add_argument("--write-docs", action="store_true", help="replace the marked block in docs/performance.md")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be at least 3")
    if not os.access(args.wmap, os.X_OK):
        ap.error(f"no wmap binary at {args.wmap} (--wmap)")
    build = os.path.abspath(args.peers_build)
    with open(os.path.join(build, "commits.txt")) as f:
        commits = dict(line.split() for line in f if line.strip())
    args.reruns = {}
    root = args.keep or tempfile.mkdtemp(prefix="wmap-peers-", dir="/tmp")
    os.makedirs(root, exist_ok=True)
    results = []
    try:
        fault = json.loads(subprocess.run([build_fault_probe(root)], capture_output=True, text=True, check=True).stdout)
        for preset in args.presets.split(","):
            d = os.path.join(root, preset)
            if not os.path.isdir(d):
                subprocess.run([args.wmap, "-q", "synth", "llama", d, "--preset", preset], check=True)
            results.append((preset, measure(args, build, d)))
            times = results[-1][1][1]
            print(f"  {preset}: " + ", ".join(f"{k} {m} {med(t) * 1e3:.0f} ms" for (k, m), t in times.items()), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    rerun = ", ".join(f"{k} {n} (for {runs} runs)" for k, (n, runs) in sorted(args.reruns.items()))
    header = (f"Measured {datetime.date.today().isoformat()} by `bench/peers.sh SRC_DIR --presets {args.presets} "
              f"--runs {args.runs}`: run-ai/runai-model-streamer {commits['runai-model-streamer'][:7]}, "
              f"huggingface/safetensors {commits['safetensors'][:7]}; {os.cpu_count()} cores, kernel "
              f"{os.uname().release}, THP `{thp_mode()}`. A fresh 4 KiB page costs {fault['touch_4k_us']:.2f} us "
              f"touched, {fault['populate_4k_us']:.2f} us populated; a huge page {fault['touch_huge_us_per_4k']:.2f} us "
              f"per 4 KiB (bench/prefault_bench.py's probe). Peer processes rerun because glibc did not apply "
              f"glibc.malloc.hugetlb=1: {rerun}.")
    block = header + "\n\n" + table(results, args.runs)
    print()
    print(block)
    if args.write_docs:
        write_docs(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
