#!/usr/bin/python3
"""FP8 formats: a warm TP1 load of ~1 GB checkpoints per format and target against `cat`.

For each FP8 format the hub ships (wmap synth --fp8 --fp8-format block|modelopt|autofp8|ct-tensor|
ct-channel) and a dense (qwen3) and MoE (qwen3_moe) model of about 1 GB, one table
(docs/performance.md "FP8 formats"): the best of --runs warm `wmap load` seconds (the load phase,
as `wmap load --json` reports it) against `cat` of the same shards to /dev/null (warm page cache,
the same bytes), their ratio (goal: >= 0.5x cat), the time wmap spent in transforms and
conversions (TensorRT-LLM's per-tensor requantisation of fused q/k/v, gate/up and experts is CPU
work inside its load_weights, so wmap does it while loading), and the peak RSS. Formats a target
refuses are skipped (docs/cli.md "Quantisation formats served").

Usage: bench/fp8_bench.py --wmap build/bin/wmap [--runs 3] [--workdir DIR]
Stdlib only. Not part of ctest.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

FORMATS = ("block", "modelopt", "autofp8", "ct-tensor", "ct-channel")
# ~1 GB each: F8 linears, BF16 embeddings, lm_head and norms.
MODELS = {
    "qwen3": ["--preset", "1g", "--layers", "16"],
    "qwen3_moe": ["--preset", "1g", "--layers", "8", "--experts", "16", "--moe-intermediate", "768"],
}


def trtllm_serves(fmt, family):
    if fmt in ("autofp8", "ct-tensor"):
        return False
    return not (fmt == "ct-channel" and family == "qwen3_moe")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def cat_seconds(files):
    t0 = time.perf_counter()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wmap", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="where the ~1 GB checkpoints are written (default: a temp dir)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="wmap_fp8_", dir=a.workdir)
    print("| model | format | target | GB | wmap load s | cat s | wmap ÷ cat | transforms s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for family, sizes in MODELS.items():
            for fmt in FORMATS:
                ckpt = os.path.join(work, "%s_%s" % (family, fmt))
                run([a.wmap, "-q", "synth", family, ckpt, "--fp8", "--fp8-format", fmt] + sizes)
                files = [os.path.join(ckpt, f) for f in sorted(os.listdir(ckpt)) if f.endswith(".safetensors")]
                total = sum(os.path.getsize(f) for f in files)
                for target in ("trtllm", "vllm"):
                    if target == "trtllm" and not trtllm_serves(fmt, family):
                        continue
                    best = None
                    for _ in range(a.runs):
                        cat_seconds(files)  # warm
                        c = cat_seconds(files)
                        j = json.loads(run([a.wmap, "-q", "load", ckpt, "--json", "--target", target]))
                        row = (j["seconds"], c, j.get("phases", {}).get("transform", 0.0), j["peak_rss"])
                        best = row if best is None else (min(best[0], row[0]), min(best[1], row[1]),
                                                         min(best[2], row[2]), max(best[3], row[3]))
                    print("| %s | %s | %s | %.3f | %.4f | %.4f | %.2f | %.4f | %.0f |" %
                          (family, fmt, target, total / 1e9, best[0], best[1], best[1] / best[0], best[2],
                           best[3] / 2 ** 20))
                    sys.stdout.flush()
                shutil.rmtree(ckpt)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
