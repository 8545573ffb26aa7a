#!/usr/bin/python3
"""When to fault fresh parameter pages in before the bytes land (issue 42, item 1).

For each synthetic Llama checkpoint (`wmap synth llama --preset 1g|4g`, page cache warm), times
whole-process `wmap -q load DIR` with parameter buffers on 4 KiB pages (WMAP_HUGE_PAGES=0) and on
transparent huge pages (the default), each with `--prefault on`, `off` and `auto` (the default),
interleaved, --runs rounds, medians and minima; next to them the fresh-memory pread limit
(bench/pread_limit.c, built here with cc: pread on every core into one fresh buffer, faulted
inside pread / populated first / huge pages) on the same files in the same rounds. Before that,
the machine's page-fault regime: what a fresh 4 KiB page costs when touched and when populated
(MADV_POPULATE_WRITE), and a huge page when touched, measured here by a small C program.

The table says, per page size, which prefault choice was fastest and whether `auto` picked it.

Usage: bench/prefault_bench.py [--wmap build/bin/wmap] [--presets 1g,4g] [--runs 7] [--keep DIR]
Stdlib + numpy (load_bench's helpers). Not part of ctest.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from load_bench import build_pread_limit, wall, warm  # noqa: E402

FAULT_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double run(size_t n, int huge, int populate) {
  char *raw = mmap(0, n + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *a = (char *)(((unsigned long)raw + (2u << 20) - 1) & ~((2ul << 20) - 1));
  madvise(a, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  double t = now();
  if (populate) madvise(a, n, 23 /* MADV_POPULATE_WRITE */);
  else for (size_t i = 0; i < n; i += 4096) a[i] = 1;
  t = now() - t;
  munmap(raw, n + (2u << 20));
  return t * 1e6 / (n / 4096);
}
int main(void) {
  size_t n = 128u << 20;
  double best[3] = {1e9, 1e9, 1e9};
  for (int r = 0; r < 5; ++r) {
    double v[3] = {run(n, 0, 0), run(n, 0, 1), run(n, 1, 0)};
    for (int i = 0; i < 3; ++i) if (v[i] < best[i]) best[i] = v[i];
  }
  printf("{\"touch_4k_us\": %.3f, \"populate_4k_us\": %.3f, \"touch_huge_us_per_4k\": %.3f}\n", best[0], best[1], best[2]);
  return 0;
}
"""

PAGES = (("4 KiB", {"WMAP_HUGE_PAGES": "0"}), ("huge", {"WMAP_HUGE_PAGES": "1"}))
CHOICES = ("on", "off", "auto")
LIMITS = (("pread", []), ("populate+pread", ["--populate"]), ("huge+pread", ["--huge"]))


def build_fault_probe(tmp):
    src, exe = os.path.join(tmp, "fault.c"), os.path.join(tmp, "fault")
    with open(src, "w") as f:
        f.write(FAULT_C)
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


def decision(wmap, d, env):
    out = subprocess.run([wmap, "-q", "load", d, "--json"], env=env, capture_output=True, text=True, check=True).stdout
    j = json.loads(out[out.index("{"):])
    return j["prefault_decision"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wmap", default=os.path.join(ROOT, "build", "bin", "wmap"))
    ap.add_argument("--presets", default="1g,4g")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keep", help="write checkpoints here and keep them (default: a /tmp folder, deleted)")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be at least 3")
    root = args.keep or tempfile.mkdtemp(prefix="wmap-prefault-", dir="/tmp")
    os.makedirs(root, exist_ok=True)
    try:
        fault = json.loads(subprocess.run([build_fault_probe(root)], capture_output=True, text=True,
                                          check=True).stdout)
        limit = build_pread_limit(root)
        print(f"machine: {os.cpu_count()} cores, kernel {os.uname().release}; fresh 4 KiB page: touched "
              f"{fault['touch_4k_us']:.2f} us, populated {fault['populate_4k_us']:.2f} us; huge page touched "
              f"{fault['touch_huge_us_per_4k']:.2f} us per 4 KiB (best of 5, 128 MiB)", flush=True)
        tables = []
        for preset in args.presets.split(","):
            d = os.path.join(root, preset)
            if not os.path.isdir(d):
                subprocess.run([args.wmap, "-q", "synth", "llama", d, "--preset", preset], check=True)
            files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))
            size = sum(os.path.getsize(f) for f in files)
            warm(d)
            variants = []
            for page, penv in PAGES:
                env = dict(os.environ, **penv)
                for c in CHOICES:
                    variants.append((f"wmap {page} --prefault {c}", [args.wmap, "-q", "load", d, "--prefault", c], env))
            for name, flags in LIMITS:
                variants.append((f"limit {name}", [limit, *flags, *files], None))
            times = {name: [] for name, _, _ in variants}
            for _ in range(args.runs):
                for name, argv, env in variants:
                    times[name].append(wall(argv, env))
            auto = {page: decision(args.wmap, d, dict(os.environ, **penv)) for page, penv in PAGES}
            tables.append((preset, size, times, auto))
            print(f"  {preset}: " + ", ".join(f"{n} {statistics.median(t) * 1e3:.0f} ms" for n, t in times.items()),
                  flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print()
    print(f"whole processes, page cache warm, {args.runs} interleaved rounds: median ms (min)")
    for preset, size, times, auto in tables:
        print(f"\n{preset} ({size / 1e9:.2f} GB)\n")
        print("| buffers | --prefault on | off | auto | fastest | auto picked | auto's decision |")
        print("|---|---|---|---|---|---|---|")
        for page, _ in PAGES:
            med = {c: statistics.median(times[f"wmap {page} --prefault {c}"]) for c in CHOICES}
            mins = {c: min(times[f"wmap {page} --prefault {c}"]) for c in CHOICES}
            fastest = min(("on", "off"), key=lambda c: med[c])
            picked = "on" if "buffers on" in auto[page] and page == "4 KiB" else "off"
            cells = " | ".join(f"{med[c] * 1e3:.0f} ({mins[c] * 1e3:.0f})" for c in CHOICES)
            print(f"| {page} | {cells} | {fastest} ({max(med.values()) / med[fastest]:.2f}x the slower) | "
                  f"{picked}{' (= fastest)' if picked == fastest else ' (NOT the fastest)'} | {auto[page]} |")
        lim = " ".join(f"{n} {statistics.median(times['limit ' + n]) * 1e3:.0f} ms;" for n, _ in LIMITS)
        print(f"\nfresh-memory pread limit (medians): {lim}")


if __name__ == "__main__":
    sys.exit(main())
