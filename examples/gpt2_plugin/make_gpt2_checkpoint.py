#!/usr/bin/env python3
"""Write a small random GPT-2 (GPT2LMHeadModel) checkpoint in Hugging Face layout.

    make_gpt2_checkpoint.py OUT_DIR [--with-prefix | --no-prefix] [--untied] [--dtype F16|F32|BF16]
                            [--n-embd 48] [--n-head 4] [--n-layer 2] [--n-inner N] [--n-positions 24]
                            [--vocab-size 101] [--seed 0]

OUT_DIR gets config.json, model-00001-of-00002.safetensors, model-00002-of-00002.safetensors
and model.safetensors.index.json. Linear layers are Conv1D, stored [in, out]; every layer carries
the causal-mask buffers `attn.bias` (BOOL [1, 1, P, P]) and `attn.masked_bias` (F32 scalar), as
older transformers versions saved them. `--with-prefix` (the default) names tensors
`transformer.*` as GPT2LMHeadModel saves them; `--no-prefix` drops the prefix as GPT2Model (and the
original OpenAI conversion) does. The untied variant also stores `lm_head.weight`.

Only numpy is needed (/usr/bin/python3).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F16": np.float16, "F32": np.float32, "BF16": None}


def values(rng, shape, dtype):
    """Random values of `shape` as (safetensors dtype, raw numpy array)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "BF16":  # truncate float32 to its top 16 bits
        return np.ascontiguousarray((x.view(np.uint32) >> 16).astype(np.uint16))
    return np.ascontiguousarray(x.astype(DTYPES[dtype]))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype name, numpy array); written in the given order."""
    header, blobs, off = {}, [], 0
    for name, dtype, arr in tensors:
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return off


def build(args):
    rng = np.random.default_rng(args.seed)
    H, L, P, V = args.n_embd, args.n_layer, args.n_positions, args.vocab_size
    inner = args.n_inner or 4 * H
    pre = "transformer." if args.with_prefix else ""
    dt = args.dtype
    t = []

    def add(name, shape):
        t.append((pre + name if not name.startswith("lm_head") else name, dt, values(rng, shape, dt)))

    add("wte.weight", (V, H))
    add("wpe.weight", (P, H))
    mask = np.tril(np.ones((P, P), dtype=np.uint8)).reshape(1, 1, P, P)
    for i in range(L):
        h = "h.%d." % i
        add(h + "ln_1.weight", (H,))
        add(h + "ln_1.bias", (H,))
        t.append((pre + h + "attn.bias", "BOOL", mask))
        t.append((pre + h + "attn.masked_bias", "F32", np.array(-1e4, dtype=np.float32)))
        add(h + "attn.c_attn.weight", (H, 3 * H))
        add(h + "attn.c_attn.bias", (3 * H,))
        add(h + "attn.c_proj.weight", (H, H))
        add(h + "attn.c_proj.bias", (H,))
        add(h + "ln_2.weight", (H,))
        add(h + "ln_2.bias", (H,))
        add(h + "mlp.c_fc.weight", (H, inner))
        add(h + "mlp.c_fc.bias", (inner,))
        add(h + "mlp.c_proj.weight", (inner, H))
        add(h + "mlp.c_proj.bias", (H,))
    add("ln_f.weight", (H,))
    add("ln_f.bias", (H,))
    if not args.tied:
        add("lm_head.weight", (V, H))
    return t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--with-prefix", dest="with_prefix", action="store_true", default=True,
                   help="name tensors transformer.* (default)")
    g.add_argument("--no-prefix", dest="with_prefix", action="store_false", help="no transformer. prefix")
    ap.add_argument("--untied", dest="tied", action="store_false", default=True,
                    help="tie_word_embeddings false and a separate lm_head.weight")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="F16")
    ap.add_argument("--n-embd", type=int, default=48)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-inner", type=int, default=None,
                    help="MLP width (default: null in config.json, i.e. 4 * n_embd)")
    ap.add_argument("--n-positions", type=int, default=24)
    ap.add_argument("--vocab-size", type=int, default=101, help="default 101: not a multiple of 4 or 8")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n_embd % args.n_head:
        ap.error("--n-embd must be a multiple of --n-head")

    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": args.n_embd,
        "n_head": args.n_head,
        "n_layer": args.n_layer,
        "n_positions": args.n_positions,
        "n_ctx": args.n_positions,
        "n_inner": args.n_inner,
        "vocab_size": args.vocab_size,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05,
        "tie_word_embeddings": args.tied,
        "torch_dtype": {"F16": "float16", "F32": "float32", "BF16": "bfloat16"}[args.dtype],
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")

    tensors = build(args)
    half = len(tensors) // 2
    shards = [tensors[:half], tensors[half:]]
    names = ["model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))]
    weight_map, total = {}, 0
    for fname, part in zip(names, shards):
        total += write_safetensors(os.path.join(args.out, fname), part)
        for name, _, _ in part:
            weight_map[name] = fname
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    print("wrote %s: %d tensors in %d shards (%s, %s, %s)"
          % (args.out, len(tensors), len(shards), args.dtype,
             "prefix" if args.with_prefix else "no prefix", "tied" if args.tied else "untied"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
