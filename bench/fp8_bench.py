#!/usr/bin/python3
"""Quantised formats: a warm TP1 load of ~1 GB checkpoints per format and target against `cat`.

For each FP8 format the hub ships (wmap synth --fp8 --fp8-format block|modelopt|autofp8|ct-tensor|
ct-channel), and with --four-bit the 4-bit ones (--nvfp4 --nvfp4-format ct|modelopt, --int4
awq|gptq|ct), and a dense (qwen3) and MoE (qwen3_moe) model of about 1 GB, one table
(docs/performance.md "FP8 formats", "4-bit formats"): the best of --runs warm `wmap load` seconds (the load phase,
as `wmap load --json` reports it) against `cat` of the same shards to /dev/null (warm page cache,
the same bytes), their ratio (goal: >= 0.5x cat), the time wmap spent in transforms and
conversions (TensorRT-LLM's per-tensor requantisation of fused q/k/v, gate/up and experts is CPU
work inside its load_weights, so wmap does it while loading), and the peak RSS. Formats a target
refuses are skipped (docs/cli.md "Quantisation formats served").

Usage: bench/fp8_bench.py --wmap build/bin/wmap [--runs 3] [--workdir DIR] [--four-bit] [--formats F,...]
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

# format -> synth flags
FORMATS = {f: ["--fp8", "--fp8-format", f] for f in ("block", "modelopt", "autofp8", "ct-tensor", "ct-channel")}
FOUR_BIT = {"nvfp4-ct": ["--nvfp4"], "nvfp4-modelopt": ["--nvfp4", "--nvfp4-format", "modelopt"],
            "awq": ["--int4", "awq"], "gptq-act-order": ["--int4", "gptq", "--int4-act-order"],
            "ct-w4a16": ["--int4", "ct"]}
# ~1 GB each: F8 linears, BF16 embeddings, lm_head and norms.
MODELS = {
    "qwen3": ["--preset", "1g", "--layers", "16"],
    "qwen3_moe": ["--preset", "1g", "--layers", "8", "--experts", "16", "--moe-intermediate", "768"],
}


def serves(target, fmt, family):
    if fmt in ("awq", "gptq-act-order", "ct-w4a16"):  # vLLM only
        return target == "vllm"
    if target == "vllm":
        return True
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
    ap.add_argument("--four-bit", action="store_true", help="the 4-bit formats (NVFP4, AWQ, GPTQ, W4A16) instead")
    ap.add_argument("--formats", default=None, help="comma-separated subset of the formats (e.g. awq,ct-w4a16)")
    a = ap.parse_args()
    formats = FOUR_BIT if a.four_bit else FORMATS
    if a.formats:
        unknown = sorted(set(a.formats.split(",")) - set(formats))
        if unknown:
            sys.exit("unknown formats %s (these: %s)" % (", ".join(unknown), ", ".join(formats)))
        formats = {f: v for f, v in formats.items() if f in a.formats.split(",")}
    if a.four_bit:  # two values a byte: twice the layers for about the same bytes
        MODELS["qwen3"][3] = "32"
        MODELS["qwen3_moe"][3] = "16"
    work = tempfile.mkdtemp(prefix="wmap_fp8_", dir=a.workdir)
    print("| model | format | target | GB | wmap load s | cat s | wmap ÷ cat | transforms s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for family, sizes in MODELS.items():
            for fmt, flags in formats.items():
                if not any(serves(t, fmt, family) for t in ("trtllm", "vllm")):
                    continue
                ckpt = os.path.join(work, "%s_%s" % (family, fmt))
                run([a.wmap, "-q", "synth", family, ckpt] + flags + sizes)
                files = [os.path.join(ckpt, f) for f in sorted(os.listdir(ckpt)) if f.endswith(".safetensors")]
                total = sum(os.path.getsize(f) for f in files)
                for target in ("trtllm", "vllm"):
                    if not serves(target, fmt, family):
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
