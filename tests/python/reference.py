#!/usr/bin/env python3
"""Independent reference implementation of wmap's per-rank parameter semantics.

Written from docs/DESIGN.md ("Reference semantics") only, in Python + numpy, without
looking at the C++ loader.  Given a Hugging Face safetensors checkpoint directory and a
parallel layout it computes, bit for bit, the parameters one rank must hold:

    {param_name: (dtype_name, shape, bytes)}

Every tensor is handled as raw bytes of its item size (BF16/F16 as uint16, F8_* as uint8,
F32 as uint32, ...): copies, splits, concatenations and transposes never convert values.
The only arithmetic is the NVFP4 global-scale inversion, done in float32 as specified.

CLI:
  reference.py expect CKPT_DIR --tp-size T --tp-rank R [LAYOUT] --out F
  reference.py check  CKPT_DIR DUMP.safetensors --tp-size T --tp-rank R [LAYOUT]
  reference.py list   CKPT_DIR --tp-size T --tp-rank R [LAYOUT]     (names, dtypes, shapes)
LAYOUT: [--ep-size P] [--mtp-layers K] [--target trtllm|vllm] [--attention-dp] [--gpus-per-node G]
        [--pp-size S --pp-rank s [--pp-partition N,N,...]]
Targets (DESIGN.md "Targets"): trtllm (default; TensorRT-LLM PyTorch backend) and vllm (vLLM
load_weights; every family except GPT-2).  --attention-dp is trtllm (DeepSeek-V3) only.

Exit codes: 0 ok/identical, 1 mismatches, 2 bad usage or unusable input.

Targets: trtllm (default) and vllm, each per DESIGN.md ("Reference semantics, target
`trtllm`", "Target `vllm`"); a layout error (e.g. --attention-dp with vllm) exits 2.

Families: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
GPT2LMHeadModel, Qwen3MoeForCausalLM, MixtralForCausalLM, DeepseekV3ForCausalLM (BF16 and
FP8 block-quantised), plus compressed-tensors NVFP4 weights for the Llama/MoE families.
GPT-2 is trtllm only.
"""

import argparse
import glob
import json
import os
import struct
import sys
from collections import OrderedDict
from math import gcd

import numpy as np


class BadInput(Exception):
    """Unusable input (checkpoint, config or layout): exit code 2."""


# --------------------------------------------------------------------------------------
# safetensors I/O (raw bytes only)
# --------------------------------------------------------------------------------------

# dtype name -> item size in bytes.  Data is always held as unsigned integers of that size.
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "F8_E4M3FN": 1, "F8_E5M2FNUZ": 1, "F8_E4M3FNUZ": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}
RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def raw_dtype(dtype_name):
    if dtype_name not in DTYPE_SIZES:
        raise BadInput("unsupported dtype %r" % dtype_name)
    return RAW[DTYPE_SIZES[dtype_name]]


class Tensor:
    """A tensor as (dtype name, raw numpy array of unsigned ints with the tensor's shape)."""
    __slots__ = ("dtype", "data")

    def __init__(self, dtype, data):
        self.dtype = dtype
        self.data = data

    @property
    def shape(self):
        return tuple(int(d) for d in self.data.shape)

    def to_bytes(self):
        return np.ascontiguousarray(self.data).tobytes()


def read_header(path):
    """Parse a safetensors file header. Returns (entries, data_start, file_size)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise BadInput("%s: file shorter than 8 bytes" % path)
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise BadInput("%s: header length %d exceeds file size %d" % (path, n, size))
            raw = f.read(n)
    except OSError as e:
        raise BadInput("%s: %s" % (path, e))
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput("%s: malformed JSON header: %s" % (path, e))
    if not isinstance(hdr, dict):
        raise BadInput("%s: header is not a JSON object" % path)
    data_start = 8 + n
    entries = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        try:
            dtype = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            a, b = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BadInput("%s: %s: malformed header entry" % (path, name))
        item = DTYPE_SIZES.get(dtype)
        if item is None:
            raise BadInput("%s: %s: unsupported dtype %r" % (path, name, dtype))
        if any(d < 0 for d in shape):
            raise BadInput("%s: %s: negative dimension" % (path, name))
        nbytes = item * int(np.prod(shape, dtype=np.int64)) if shape else item
        if a < 0 or b < a or b - a != nbytes or data_start + b > size:
            raise BadInput("%s: %s: bad data_offsets %r for %s %r" % (path, name, [a, b], dtype, shape))
        entries[name] = (dtype, shape, data_start + a, nbytes)
    return entries, data_start, size


class SafetensorsFile:
    def __init__(self, path):
        self.path = path
        self.entries, _, self.size = read_header(path)
        self._mm = None

    def _map(self):
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._mm

    def get(self, name):
        dtype, shape, off, nbytes = self.entries[name]
        raw = raw_dtype(dtype)
        if nbytes == 0:
            return Tensor(dtype, np.zeros(shape, dtype=raw))
        buf = np.array(self._map()[off:off + nbytes])  # copy out of the map
        return Tensor(dtype, buf.view(raw).reshape(shape))


class Checkpoint:
    """Checkpoint directory: index.json when present, else *.safetensors sorted by name."""

    def __init__(self, path):
        self.dir = path
        if os.path.isfile(path) and path.endswith(".safetensors"):
            files = [path]
            self.dir = os.path.dirname(path) or "."
        elif not os.path.isdir(path):
            raise BadInput("%s: not a directory" % path)
        else:
            idx = os.path.join(path, "model.safetensors.index.json")
            if os.path.exists(idx):
                try:
                    with open(idx) as f:
                        wm = json.load(f)["weight_map"]
                    names = sorted(set(wm.values()))
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                    raise BadInput("%s: malformed index: %s" % (idx, e))
                files = []
                for n in names:
                    p = os.path.join(path, n)
                    if not os.path.isfile(p):
                        raise BadInput("%s: shard %s named by the index does not exist" % (idx, n))
                    files.append(p)
            else:
                files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
                sharded = [f for f in files if not os.path.basename(f).startswith("consolidated")]
                if sharded:
                    files = sharded
            if not files:
                raise BadInput("%s: no safetensors shard found" % path)
        self.files = [SafetensorsFile(p) for p in files]
        self.where = {}
        for sf in self.files:
            for name in sf.entries:
                if name in self.where:
                    raise BadInput("%s: duplicate tensor %s (also in %s)"
                                   % (sf.path, name, self.where[name].path))
                self.where[name] = sf
        self.used = set()

    def names(self):
        return sorted(self.where)

    def has(self, name):
        return name in self.where

    def get(self, name):
        sf = self.where.get(name)
        if sf is None:
            raise BadInput("%s: missing checkpoint tensor %s" % (self.dir, name))
        self.used.add(name)
        return sf.get(name)

    def dtype_shape(self, name):
        sf = self.where.get(name)
        if sf is None:
            raise BadInput("%s: missing checkpoint tensor %s" % (self.dir, name))
        dtype, shape, _, _ = sf.entries[name]
        return dtype, tuple(shape)


def write_safetensors(path, params):
    """params: {name: Tensor}. Tensors are written sorted by name."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(params):
        t = params[name]
        b = t.to_bytes()
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


# --------------------------------------------------------------------------------------
# Layout and shard helpers
# --------------------------------------------------------------------------------------

TARGETS = ("trtllm", "vllm")


class Layout:
    """Parallel layout (DESIGN.md "Targets": the target is part of the layout).

    target:        'trtllm' (default) or 'vllm'.
    attention_dp:  TensorRT-LLM's enable_attention_dp (trtllm only): attention, dense MLPs,
                   shared experts, embeddings and lm_head replicated (aT = 1, ar = 0).
    gpus_per_node: G, the node cap of the trtllm DeepSeek dense-MLP gcd rule.
    """

    def __init__(self, tp_size, tp_rank, ep_size=1, mtp_layers=None, target="trtllm",
                 attention_dp=False, gpus_per_node=8, moe_backend=None, pp_size=1, pp_rank=0,
                 pp_partition=None):
        if tp_size < 1 or not 0 <= tp_rank < tp_size:
            raise BadInput("bad layout: tp_size=%d tp_rank=%d" % (tp_size, tp_rank))
        if ep_size < 1 or tp_size % ep_size:
            raise BadInput("bad layout: ep_size=%d must divide tp_size=%d" % (ep_size, tp_size))
        if mtp_layers is not None and mtp_layers < 0:
            raise BadInput("bad layout: mtp_layers=%d" % mtp_layers)
        if target not in TARGETS:
            raise BadInput("bad layout: unknown target %r (known: %s)" % (target, ", ".join(TARGETS)))
        if gpus_per_node < 1:
            raise BadInput("bad layout: gpus_per_node=%d" % gpus_per_node)
        if pp_size < 1 or not 0 <= pp_rank < pp_size:
            raise BadInput("bad layout: pp_size=%d pp_rank=%d" % (pp_size, pp_rank))
        if pp_partition is not None and len(pp_partition) != pp_size:
            raise BadInput("bad layout: pp_partition %s has %d stages, pp_size is %d"
                           % (pp_partition, len(pp_partition), pp_size))
        if target == "vllm":
            if attention_dp:
                raise BadInput("bad layout: --attention-dp is a trtllm layout, not valid with --target vllm")
            if ep_size not in (1, tp_size):
                raise BadInput("bad layout: --target vllm expert parallelism is all-or-nothing: "
                               "ep_size must be 1 or tp_size %d, is %d" % (tp_size, ep_size))
            if mtp_layers:
                raise BadInput("bad layout: --target vllm loads no MTP layer (--mtp-layers %d)" % mtp_layers)
        self.T, self.r, self.P, self.mtp = tp_size, tp_rank, ep_size, mtp_layers
        self.target, self.adp, self.G = target, bool(attention_dp), gpus_per_node
        self.pp, self.pp_rank, self.pp_partition = pp_size, pp_rank, pp_partition
        # The engine's MoE backend whose layout a family produces (None: the family's default
        # for the target; a family with one layout ignores it).
        self.moe_backend = moe_backend
        self.vllm = target == "vllm"
        self.moe_tp = tp_size // ep_size
        self.moe_tp_rank = tp_rank // ep_size
        self.moe_ep_rank = tp_rank % ep_size
        # attention / dense / embedding split (attention-DP: replicated, i.e. tp 1)
        self.aT, self.ar = (1, 0) if self.adp else (tp_size, tp_rank)


def ceil_div(a, b):
    return -(-a // b)


# --------------------------------------------------------------------------------------
# Pipeline parallelism (DESIGN.md "Pipeline stages"): which stage holds which parameter
# --------------------------------------------------------------------------------------

def stage_layers(L, lay):
    """The decoder layers [a, b) of stage lay.pp_rank.  An explicit partition: its counts
    (their sum must be L).  vllm (get_pp_indices): L // pp each, the remainder added to the
    stages before the last, from the last-but-one backwards.  trtllm (Mapping.pp_layers,
    torch.tensor_split): the remainder added to the first stages."""
    pp = lay.pp
    if lay.pp_partition is not None:
        counts = list(lay.pp_partition)
        if sum(counts) != L:
            raise BadInput("bad layout: pp_partition %s adds up to %d layers; the model has %d"
                           % (lay.pp_partition, sum(counts), L))
    else:
        counts = [L // pp] * pp
        extra = L % pp
        if lay.vllm:
            for k in range(extra):
                counts[pp - 2 - k] += 1
        else:
            for k in range(extra):
                counts[k] += 1
    a = sum(counts[:lay.pp_rank])
    return a, a + counts[lay.pp_rank]


def _stage_layer_count(cfg):
    text = cfg.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        return need(text, "num_hidden_layers")
    return need(cfg, "num_hidden_layers")


def keep_stage(params, cfg, lay):
    """The parameters of one pipeline stage.  Decoder layer i ('<...>model.layers.<i>.' or
    gpt-oss trtllm's 'model.block.<i>.') on the stage holding i; layers numbered L or more (MTP)
    on the last stage; the embedding on the first stage, and with tied embeddings under vllm
    also on the last (vLLM builds embed_tokens where its tied lm_head shares it); the final
    norm and lm_head on the last stage.  A name that is none of these is an error."""
    if lay.pp == 1:
        return params
    import re
    L = _stage_layer_count(cfg)
    a, b = stage_layers(L, lay)
    first, last = lay.pp_rank == 0, lay.pp_rank == lay.pp - 1
    tied = bool(cfg.get("tie_word_embeddings"))
    layer = re.compile(r"^(?:language_model\.)?model\.(?:layers|block)\.(\d+)\.")
    embed = re.compile(r"^(?:language_model\.)?model\.(?:embed_tokens|embedding)\.weight$")
    head = re.compile(r"^(?:language_model\.)?(?:model\.norm\.weight|lm_head\.weight)$")
    out = OrderedDict()
    for name, t in params.items():
        m = layer.match(name)
        if m:
            i = int(m.group(1))
            keep = last if i >= L else a <= i < b
        elif embed.match(name):
            keep = first or (last and tied and lay.vllm)
        elif head.match(name):
            keep = last
        else:
            raise BadInput("%s: no pipeline stage known for this parameter" % name)
        if keep:
            out[name] = t
    return out


def shard_range(width, T, r):
    """Shard rule: w = ceil(width/T); rank r gets [r*w, min((r+1)*w, width)) (may be empty)."""
    w = ceil_div(width, T)
    return min(r * w, width), min((r + 1) * w, width)


def _take(t, dim, a, b):
    idx = [slice(None)] * t.data.ndim
    idx[dim] = slice(a, b)
    return Tensor(t.dtype, t.data[tuple(idx)])


def col_split(t, T, r):
    """Column-parallel: split dim 0."""
    a, b = shard_range(t.shape[0], T, r)
    return _take(t, 0, a, b)


def row_split(t, T, r):
    """Row-parallel: split dim 1; a 1-D tensor is not split."""
    if t.data.ndim < 2:
        return t
    a, b = shard_range(t.shape[1], T, r)
    return _take(t, 1, a, b)


def vocab_split(t, T, r):
    """Vocabulary-parallel: T blocks of ceil(V/T) rows; the last block zero-padded."""
    V = t.shape[0]
    blk = ceil_div(V, T)
    a, b = min(r * blk, V), min((r + 1) * blk, V)
    out = np.zeros((blk,) + t.shape[1:], dtype=t.data.dtype)
    out[:b - a] = t.data[a:b]
    return Tensor(t.dtype, out)


def vllm_vocab_split(t, T, r, name):
    """vLLM vocabulary: Vp = 64*ceil(V/64) (also at T = 1), Vp/T rows per rank (Vp % T == 0);
    rank r copies rows [min(r*Vp/T, V), min((r+1)*Vp/T, V)) to its first rows, zero the rest."""
    V = t.shape[0]
    Vp = 64 * ceil_div(V, 64)
    if Vp % T:
        raise BadInput("%s: padded vocabulary %d (V=%d) not divisible by tp_size %d" % (name, Vp, V, T))
    blk = Vp // T
    a, b = min(r * blk, V), min((r + 1) * blk, V)
    out = np.zeros((blk,) + t.shape[1:], dtype=t.data.dtype)
    out[:b - a] = t.data[a:b]
    return Tensor(t.dtype, out)


def concat(ts, dim=0, what="concat"):
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise BadInput("%s: sources have different dtypes %s" % (what, sorted(dtypes)))
    return Tensor(ts[0].dtype, np.concatenate([t.data for t in ts], axis=dim))


def stack(ts, what="stack"):
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise BadInput("%s: sources have different dtypes %s" % (what, sorted(dtypes)))
    shapes = {t.shape for t in ts}
    if len(shapes) != 1:
        raise BadInput("%s: sources have different shapes %s" % (what, sorted(shapes)))
    return Tensor(ts[0].dtype, np.stack([t.data for t in ts]))


def transpose(t, axes=None):
    return Tensor(t.dtype, np.ascontiguousarray(np.transpose(t.data, axes)))


def expect_shape(name, t, shape):
    if tuple(t.shape) != tuple(shape):
        raise BadInput("checkpoint tensor %s has shape %s, config implies %s"
                       % (name, list(t.shape), list(shape)))


def cfg_get(cfg, key, default=None):
    v = cfg.get(key)
    return default if v is None else v


def need(cfg, key):
    v = cfg.get(key)
    if v is None:
        raise BadInput("config.json: missing %s" % key)
    return v


# --------------------------------------------------------------------------------------
# Quantisation helpers (FP8 block scales, NVFP4 compressed-tensors)
# --------------------------------------------------------------------------------------

class Quant:
    """Describes how a linear's companion tensors travel with its weight.

    mode None:    plain weight only.
    mode 'fp8':   `<lin>.weight_scale_inv` (block [b0, b1]) follows the weight when present.
    mode 'nvfp4': compressed-tensors keys `<lin>.weight_packed`, `weight_scale`,
                  `weight_global_scale`, `input_global_scale`.
    """

    def __init__(self, cfg):
        qc = cfg.get("quantization_config") or {}
        self.mode = None
        self.block = (128, 128)
        self.static = False   # per-tensor FP8: an input_scale follows each weight
        self.source = None    # per-tensor / channel FP8: "autofp8", "modelopt", "ct"
        method = qc.get("quant_method")
        if method == "fp8" and qc.get("weight_block_size"):
            self.mode = "fp8"
            bs = qc.get("weight_block_size") or [128, 128]
            self.block = (int(bs[0]), int(bs[1]))
        elif method == "fp8":
            # AutoFP8: one scale per tensor (fp8.md 8.3).
            self.mode, self.source = "fp8t", "autofp8"
            self.static = qc.get("activation_scheme") == "static"
        elif method == "modelopt" and qc.get("quant_algo") == "NVFP4":
            # ModelOpt NVFP4 (int4-nvfp4.md 1(d)): weight U8, weight_scale F8, 0-d weight_scale_2 /
            # input_scale.
            self.mode, self.source = "nvfp4", "modelopt"
        elif method == "modelopt":
            if qc.get("quant_algo") != "FP8":
                raise BadInput("modelopt quant_algo %r is not FP8" % qc.get("quant_algo"))
            self.mode, self.source, self.static = "fp8t", "modelopt", True
        elif method == "compressed-tensors" and qc.get("format") == "float-quantized":
            groups = list((qc.get("config_groups") or {}).values())
            strategies = set(g["weights"]["strategy"] for g in groups)
            if len(strategies) != 1:
                raise BadInput("compressed-tensors: %d weight strategies" % len(strategies))
            strategy = strategies.pop()
            act = groups[0].get("input_activations") or {}
            if strategy == "tensor":
                self.mode, self.source = "fp8t", "ct"
                self.static = bool(act) and not act.get("dynamic", True)
            elif strategy == "channel":
                self.mode, self.source = "fp8c", "ct"
            else:
                raise BadInput("compressed-tensors strategy %r not served" % strategy)
        elif method in ("awq", "gptq") or (method == "compressed-tensors" and qc.get("format") == "pack-quantized"):
            # 4-bit integer W4A16 (int4-nvfp4.md sections 1, 3 to 5): vLLM only.
            self.mode, self.source = "int4", {"awq": "awq", "gptq": "gptq"}.get(method, "ct")
            self.group, self.act, self.sym = qc.get("group_size", 128), False, True
            if method == "awq":
                self.sym = False
            elif method == "gptq":
                if qc.get("sym", True) is False:
                    raise BadInput("asymmetric GPTQ: vLLM refuses it")
                self.act = bool(qc.get("desc_act"))
            else:
                w = list(qc["config_groups"].values())[0]["weights"]
                self.group = w.get("group_size") if w.get("strategy") == "group" else -1
                self.sym = w.get("symmetric", True)
                self.act = w.get("actorder") == "group"
            if self.group == -1:
                self.group = None
        elif method == "compressed-tensors":
            # NVFP4 linears are recognised per linear by their `weight_packed` key; the global
            # scales are stored as 1 / ModelOpt's.
            self.mode, self.source = "nvfp4", "ct"


# FP8 E4M3 ("fn") codes and TensorRT-LLM's per-tensor requantisation (fp8.md section 7), written
# from the format's definition: a table of the 256 codes, nearest-value rounding with ties to the
# even code, and BF16 rounding by comparing the two neighbouring BF16 values in float64.

def _e4m3_table():
    v = np.zeros(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 7
        if e == 0xF and m == 7:
            v[code] = np.nan
        elif e == 0:
            v[code] = sign * (m / 8.0) * 2.0 ** -6
        else:
            v[code] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return v


E4M3 = _e4m3_table()
_E4M3_POS = E4M3[:0x7F]  # codes 0x00..0x7e: 0 .. 448, ascending


def e4m3_encode(x):
    """float32 array -> uint8 E4M3 codes: nearest value, ties to the even code, finite values
    beyond 448 saturate (CUDA's __NV_SATFINITE); the sign (of zero too) kept."""
    x = np.asarray(x, dtype=np.float32)
    if np.any(np.isnan(x)):
        raise BadInput("e4m3_encode: NaN")
    sign = (x.view(np.uint32) >> np.uint32(31)).astype(np.uint8)
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(_E4M3_POS, a), 0, len(_E4M3_POS) - 1)
    lo = np.clip(hi - 1, 0, None)
    dlo, dhi = np.abs(a - _E4M3_POS[lo]), np.abs(_E4M3_POS[hi] - a)
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= 448.0, 0x7E, code)
    return (code.astype(np.uint8) | (sign << np.uint8(7))).astype(np.uint8)


def bf16_round(x):
    """float32 array -> float32 array rounded to BF16 (nearest, ties to an even BF16 mantissa)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    lo = (bits & np.uint64(0xFFFF0000)).astype(np.uint32)
    hi = (lo.astype(np.uint64) + np.uint64(0x10000)).astype(np.uint32)
    vx = x.astype(np.float64)
    vlo, vhi = lo.view(np.float32).astype(np.float64), hi.view(np.float32).astype(np.float64)
    dlo, dhi = np.abs(vx - vlo), np.abs(vhi - vx)
    even_lo = ((lo >> np.uint32(16)) & np.uint32(1)) == 0
    pick_lo = (dlo < dhi) | ((dlo == dhi) & even_lo)
    return np.where(pick_lo, lo, hi).astype(np.uint32).view(np.float32)


def f32_of(t):
    """The float32 value of a 0-d (or [1]) F32 Tensor."""
    return np.float32(t.data.reshape(-1)[0].view(np.float32))


def f32_tensor(values, shape):
    return Tensor("F32", np.asarray(values, dtype=np.float32).reshape(shape).view(np.uint32))


def trt_requant(codes, s, smax):
    """TensorRT-LLM's rescale of F8 `codes` from scale s to smax, with the 0-d CUDA scales loaded
    as BF16: t = bf16(w * bf16(s)); u = bf16(t / bf16(smax)); e4m3(u)."""
    w = E4M3[codes.reshape(-1)]
    if np.any(np.isnan(w)):
        raise BadInput("trt_requant: NaN weight code")
    sb, mb = bf16_round(np.float32(s)), bf16_round(np.float32(smax))
    t = bf16_round(w.astype(np.float32) * sb)
    u = bf16_round(t / mb)
    return e4m3_encode(u).reshape(codes.shape)


# NVFP4 (int4-nvfp4.md section 6), written from its text: the 128x4 block-scale swizzle and
# TensorRT-LLM's global-scale arithmetic in float32, in the engine's operation order.

def swizzle_128x4(codes, pad_rows, pad_cols):
    """uint8 [rows, cols] -> uint8 [pad_rows * pad_cols]: byte (m, k) goes to
    k%4 + (k//4)*512 + (m%32)*16 + ((m%128)//32)*4 + (m//128)*128*pad_cols; the rest zero."""
    rows, cols = codes.shape
    if rows > pad_rows or cols > pad_cols or pad_rows % 128 or pad_cols % 4:
        raise BadInput("swizzle: [%d, %d] does not fit [%d, %d]" % (rows, cols, pad_rows, pad_cols))
    m = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(cols, dtype=np.int64)[None, :]
    at = k % 4 + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (m // 128) * 128 * pad_cols
    out = np.zeros(pad_rows * pad_cols, dtype=np.uint8)
    out[at.reshape(-1)] = codes.reshape(-1)
    return out


def modelopt_global(t, ct, strict, key):
    """A part's global scale as ModelOpt's float32 value: compressed-tensors' reciprocal inverted
    (TensorRT-LLM's compressed_tensors.py rename; x > 0 ? 1/x : 0, strict layers refuse bad ones)."""
    if ct:
        t = invert_global_scale(key, t, strict)
    return np.float32(t.data.reshape(-1)[0].view(np.float32))


def close_f32(a, b):
    """torch.allclose's default: |a - b| <= 1e-8 + 1e-5 * |b|."""
    return abs(float(a) - float(b)) <= 1e-8 + 1e-5 * abs(float(b))


def f32_inv(x):
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return np.float32(np.float32(1.0) / np.float32(x))


def f32_mul(a, b):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.float32(np.float32(a) * np.float32(b))


def as_words(codes, dtype):
    """uint8 bytes (last dim a multiple of the word) viewed as I64 / I32 words."""
    raw = {"I64": np.uint64, "I32": np.uint32}[dtype]
    return Tensor(dtype, np.ascontiguousarray(codes).view(raw))


class Linear:
    """All tensors of one source linear, keyed by canonical suffix ('weight', 'bias',
    'weight_scale_inv', 'weight_scale', 'weight_scale_2', 'input_scale')."""

    def __init__(self, name, parts):
        self.name = name
        self.parts = parts  # suffix -> (source key, Tensor)


def invert_global_scale(key, t, strict):
    """fp32 x -> (x > 0 ? 1/x : 0), NaN/Inf -> 0; strict (dense) layers reject bad values."""
    if t.dtype != "F32":
        raise BadInput("%s: global scale must be F32, is %s" % (key, t.dtype))
    x = t.data.view(np.float32)
    if strict and (not np.all(np.isfinite(x)) or np.any(x <= 0)):
        raise BadInput("%s: non-finite or non-positive global scale" % key)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = np.where(np.isfinite(x) & (x > 0), np.float32(1.0) / x, np.float32(0.0)).astype(np.float32)
    return Tensor("F32", y.view(np.uint32).reshape(t.shape))


def widen_to_f32(key, t):
    """FP8 block scales: both engines hold them as F32 and copy_ the checkpoint's F32, BF16 or F16
    into them, exactly (fp8.md section 4).  BF16 -> F32 is the bits shifted up by 16; F16 -> F32
    by numpy's half-to-float conversion (exact)."""
    if t.dtype == "F32":
        return t
    if t.dtype == "BF16":
        return Tensor("F32", t.data.astype(np.uint32) << np.uint32(16))
    if t.dtype == "F16":
        return Tensor("F32", t.data.view(np.float16).astype(np.float32).view(np.uint32))
    raise BadInput("%s: FP8 block scales stored as %s; expected F32, BF16 or F16" % (key, t.dtype))


def load_linear(ck, q, prefix, with_bias=False):
    """Read the tensors of linear `prefix` (e.g. model.layers.0.self_attn.q_proj)."""
    parts = OrderedDict()
    if q.mode == "nvfp4" and (ck.has(prefix + ".weight_packed") or ck.has(prefix + ".weight_scale")):
        # NVFP4 parts: weight (U8 codes), weight_scale (F8 per 16 values), and the raw global
        # scales "nws2" / "nis" as stored (compressed-tensors: reciprocals of ModelOpt's).
        ct = q.source == "ct"
        wkey = prefix + (".weight_packed" if ct else ".weight")
        if ct and ck.has(prefix + ".weight"):
            raise BadInput("%s.weight_packed renames onto existing key %s.weight" % (prefix, prefix))
        parts["weight"] = (wkey, ck.get(wkey))
        parts["weight_scale"] = (prefix + ".weight_scale", ck.get(prefix + ".weight_scale"))
        for src, dst in ((("weight_global_scale", "nws2"), ("input_global_scale", "nis")) if ct
                         else (("weight_scale_2", "nws2"), ("input_scale", "nis"))):
            key = prefix + "." + src
            t = ck.get(key)
            if t.dtype != "F32" or t.data.size != 1:
                raise BadInput("%s: an NVFP4 global scale is one F32 value, not %s %s" % (key, t.dtype, t.shape))
            parts[dst] = (key, t)
    else:
        parts["weight"] = (prefix + ".weight", ck.get(prefix + ".weight"))
        if q.mode == "fp8" and ck.has(prefix + ".weight_scale_inv"):
            key = prefix + ".weight_scale_inv"
            parts["weight_scale_inv"] = (key, widen_to_f32(key, ck.get(key)))
        if q.mode == "fp8t" and ck.has(prefix + ".weight_scale"):
            for src, dst in (("weight_scale", "wscale"), ("input_scale", "iscale")):
                if dst == "iscale" and not q.static:
                    continue
                key = prefix + "." + src
                t = widen_to_f32(key, ck.get(key))
                if t.data.size != 1:
                    raise BadInput("%s: per-tensor scale of shape %s" % (key, t.shape))
                parts[dst] = (key, Tensor("F32", t.data.reshape(())))
        if q.mode == "fp8c" and ck.has(prefix + ".weight_scale"):
            key = prefix + ".weight_scale"
            parts["cscale"] = (key, widen_to_f32(key, ck.get(key)))
    if with_bias:
        parts["bias"] = (prefix + ".bias", ck.get(prefix + ".bias"))
    return Linear(prefix, parts)


def _scale_range(a, b, block):
    return a // block, ceil_div(b, block) if b > a else a // block


def _split_part(suffix, t, dim, a, b, weight_width, q):
    """Split companion tensor `suffix` along `dim` matching weight range [a, b) of width
    weight_width on that dim."""
    if suffix in ("weight", "bias"):
        if t.data.ndim <= dim:
            return t
        return _take(t, dim, a, b)
    if suffix in ("wscale", "iscale"):  # per-tensor FP8: one value, every rank
        return t
    if suffix == "cscale":  # per-channel FP8 [out, 1]: rows with the weight, whole under a row split
        return _take(t, 0, a, b) if dim == 0 else t
    if suffix == "weight_scale_inv":
        blk = q.block[dim]
        sa, sb = _scale_range(a, b, blk)
        return _take(t, dim, sa, sb)
    if suffix == "weight_scale":  # NVFP4 per-16 scales: same proportional split as packed data
        if t.data.ndim <= dim:
            return t
        n = t.shape[dim]
        if dim == 0:
            return _take(t, dim, a, b)
        # dim 1: packed-byte columns of the weight; scales are one per 16 values = 8 bytes.
        ratio = weight_width // n if n else 1
        return _take(t, dim, a // ratio, ceil_div(b, ratio) if ratio else 0)
    # global scales: replicated
    return t


def split_linear(lin, q, dim, T, r):
    """Shard rule on dim (0 column-parallel, 1 row-parallel) for a Linear's parts."""
    w = lin.parts["weight"][1]
    if dim == 1 and w.data.ndim < 2:
        return {k: v[1] for k, v in lin.parts.items()}
    width = w.shape[dim]
    a, b = shard_range(width, T, r)
    out = OrderedDict()
    for suffix, (key, t) in lin.parts.items():
        if suffix == "bias" and dim == 1:
            out[suffix] = t  # 1-D in a row-parallel layer: not split
        else:
            out[suffix] = _split_part(suffix, t, dim, a, b, width, q)
    return out


def rows_linear(lin, q, a, b):
    """Rows [a, b) of a linear (weight and its scales)."""
    w = lin.parts["weight"][1]
    out = OrderedDict()
    for suffix, (key, t) in lin.parts.items():
        out[suffix] = _split_part(suffix, t, 0, a, b, w.shape[0], q)
    return out


def fuse(pieces, names, what, check_globals=True):
    """Concatenate along dim 0 the parts of several split linears into one parameter.
    Global scales (weight_scale_2 / input_scale) must be equal across sources and are kept once
    (check_globals=False: the caller has checked them; the first source's value is kept)."""
    out = OrderedDict()
    suffixes = list(pieces[0].keys())
    for p, n in zip(pieces, names):
        if list(p.keys()) != suffixes:
            raise BadInput("%s: sources %s carry different tensor sets" % (what, ", ".join(names)))
    for s in suffixes:
        ts = [p[s] for p in pieces]
        if s in ("weight_scale_2", "input_scale"):
            if not check_globals:
                out[s] = ts[0]
                continue
            first = ts[0].to_bytes()
            for t, n in zip(ts[1:], names[1:]):
                if t.to_bytes() != first or t.shape != ts[0].shape:
                    raise BadInput("%s: global %s differs between %s and %s"
                                   % (what, s, names[0], n))
            out[s] = ts[0]
        else:
            out[s] = concat(ts, 0, what)
    return out


# --------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------

def whole(lin):
    """A linear's parts unsplit (replicated)."""
    return OrderedDict((k, v[1]) for k, v in lin.parts.items())


class Builder:
    """Family builders share the target-aware helpers below; each target's rule for a
    helper sits in that helper (vocabulary, splits, fused parameters, names, experts)."""

    def __init__(self, ck, cfg, lay):
        self.ck, self.cfg, self.lay = ck, cfg, lay
        self.q = Quant(cfg)
        self.params = OrderedDict()

    # small wrappers
    def rep(self, dst, src=None):
        self.params[dst] = self.ck.get(src or dst)

    def vocab(self, dst, src=None, T=None, r=None):
        """Vocabulary-parallel parameter: trtllm ceil(V/T) blocks, the last zero-padded;
        vllm Vp = 64*ceil(V/64) padded, Vp/T rows per rank."""
        T = self.lay.T if T is None else T
        r = self.lay.r if r is None else r
        t = self.ck.get(src or dst)
        if self.lay.vllm:
            self.params[dst] = vllm_vocab_split(t, T, r, src or dst)
        else:
            self.params[dst] = vocab_split(t, T, r)

    def lm_head(self, embed="model.embed_tokens.weight", T=None, r=None):
        """lm_head, vocabulary-parallel.  Tied: trtllm lists lm_head.weight with the embedding's
        data (laid out by the lm_head rule); vllm has only model.embed_tokens.weight."""
        if self.cfg.get("tie_word_embeddings"):
            if not self.lay.vllm:
                self.vocab("lm_head.weight", embed, T, r)
        else:
            self.vocab("lm_head.weight", None, T, r)

    def col(self, dst, src=None):
        self.params[dst] = col_split(self.ck.get(src or dst), self.lay.T, self.lay.r)

    def row(self, dst, src=None):
        self.params[dst] = row_split(self.ck.get(src or dst), self.lay.T, self.lay.r)

    # target-aware linear helpers
    def emit(self, name, parts):
        """Parameter `name` with its parts.  FP8 block scales: trtllm names the parameter
        `<linear>.weight_scale`, vllm keeps `<linear>.weight_scale_inv`."""
        if "wscale" in parts or "cscale" in parts:
            parts = self.fp8_scaled([parts])
        if "nws2" in parts:
            parts = self.nvfp4_linear([parts], [name])
        for suffix, t in parts.items():
            if suffix == "weight_scale_inv" and not self.lay.vllm:
                suffix = "weight_scale"
            self.params[name + "." + suffix] = t

    def fp8_scaled(self, pieces):
        """Per-tensor / per-channel FP8 of one (possibly fused) linear from its split parts.
        vllm: raw weight, weight_scale [n] / input_scale [n] (one slot per part), channel
        [rows, 1].  trtllm: fused parts requantised to the largest scale, weight_scale /
        input_scale 0-d maxima, inv_input_scale = 1/input_scale, channel flattened [rows]."""
        out = OrderedDict()
        if "bias" in pieces[0]:
            out["bias"] = concat([p["bias"] for p in pieces], 0, "fp8 bias") if len(pieces) > 1 else pieces[0]["bias"]
        if "cscale" in pieces[0]:
            out["weight"] = concat([p["weight"] for p in pieces], 0, "fp8 channel weight")
            sc = concat([p["cscale"] for p in pieces], 0, "fp8 channel scale")
            out["weight_scale"] = sc if self.lay.vllm else Tensor("F32", sc.data.reshape(-1))
            return out
        s = [f32_of(p["wscale"]) for p in pieces]
        a = [f32_of(p["iscale"]) for p in pieces] if "iscale" in pieces[0] else None
        if self.lay.vllm:
            out["weight"] = concat([p["weight"] for p in pieces], 0, "fp8 weight")
            out["weight_scale"] = f32_tensor(s, (len(s),))
            if a is not None:
                out["input_scale"] = f32_tensor(a, (len(a),))
            return out
        smax = np.float32(max(s))
        if len(pieces) == 1:
            out["weight"] = pieces[0]["weight"]
        else:
            out["weight"] = concat([Tensor("F8_E4M3", trt_requant(p["weight"].data, si, smax))
                                    for p, si in zip(pieces, s)], 0, "fp8 requantised weight")
        out["weight_scale"] = f32_tensor(smax, ())
        if a is not None:
            amax = np.float32(max(a))
            out["input_scale"] = f32_tensor(amax, ())
            out["inv_input_scale"] = f32_tensor(np.float32(1.0) / amax, ())
        return out

    # Whether trtllm refuses block-FP8 parts that cut a block too (the generic Linear of the llama
    # family: ceil-split block scales would be misaligned, fp8.md section 5); DeepSeek's own
    # trtllm splits are checked by its builder.
    trtllm_whole_blocks = False

    def fp8_block_check(self, name, parts, dim, n, what):
        """vllm (and trtllm where trtllm_whole_blocks) + FP8: n rows (dim 0) / columns (dim 1) of
        a split part or a non-final fused part must be a multiple of the 128 block (the config's
        weight_block_size)."""
        if (self.lay.vllm or self.trtllm_whole_blocks) and "weight_scale_inv" in parts and n % self.q.block[dim]:
            raise BadInput("%s: %s %d %s not a multiple of the FP8 block %d (the engine refuses it)"
                           % (name, what, n, "rows" if dim == 0 else "columns", self.q.block[dim]))

    def split(self, lin, dim, T=None, r=None):
        """Shard rule on dim (0 column-, 1 row-parallel).  vllm: every split is exact (width % T
        == 0, else an error naming the tensor and T); FP8 per-rank slices block-aligned (T > 1)."""
        T = self.lay.T if T is None else T
        r = self.lay.r if r is None else r
        w = lin.parts["weight"][1]
        if self.lay.vllm and dim < w.data.ndim:
            width = w.shape[dim]
            if width % T:
                raise BadInput("%s: dim %d width %d not divisible by tp_size %d (vllm splits exactly)"
                               % (lin.parts["weight"][0], dim, width, T))
            if T > 1:
                self.fp8_block_check(lin.name, lin.parts, dim, width // T, "per-rank")
        elif self.trtllm_whole_blocks and dim < w.data.ndim and T > 1:
            a, b = shard_range(w.shape[dim], T, r)
            self.fp8_block_check(lin.name, lin.parts, dim, b - a, "per-rank")
        return split_linear(lin, self.q, dim, T, r)

    def rows(self, lin, a, b):
        """Rows [a, b) (a K/V head slice); vllm + FP8 at T > 1: block-aligned."""
        if self.lay.T > 1:
            self.fp8_block_check(lin.name, lin.parts, 0, b - a, "per-rank")
        return rows_linear(lin, self.q, a, b)

    def fuse(self, pieces, names, what, check_globals=True):
        """Concatenate parts (dim 0).  vllm + FP8: a non-final part's rows must be a multiple of
        128, so part i's scale rows start at ceil(offset_i/128) (plain concatenation)."""
        for p, n in zip(pieces[:-1], names[:-1]):
            self.fp8_block_check(n, p, 0, p["weight"].shape[0], "non-final fused part")
        if "wscale" in pieces[0] or "cscale" in pieces[0]:
            return self.fp8_scaled(pieces)
        if "nws2" in pieces[0]:
            return self.nvfp4_linear(pieces, names)
        return fuse(pieces, names, what, check_globals)

    def nvfp4_linear(self, pieces, names):
        """NVFP4 dense linear from its split parts (int4-nvfp4.md 6.1, 6.3).
        vllm: weight U8 and weight_scale F8 concatenated, weight_scale_2 / input_scale one raw slot
        per part [n] (compressed-tensors: weight_packed, weight_global_scale, input_global_scale).
        trtllm: parts' input/weight_scale_2 equal (ModelOpt values); weight_scale the 128x4
        swizzle of the concatenated scales, U8 [rup(rows,128)*rup(cols,4)]; input_scale [1] =
        1/is; weight_scale_2 [1]; alpha [1] = is*ws2; inv_input_scale [1] = (1/is)*(1/6) on an
        unfused linear only."""
        if "nws2" not in pieces[-1]:
            raise BadInput("%s: NVFP4 and unquantised parts fused" % ", ".join(names))
        for p, n in zip(pieces, names):
            if p["weight"].shape[1] % 8:
                raise BadInput("%s: %d input features a rank are not whole NVFP4 blocks of 16"
                               % (n, 2 * p["weight"].shape[1]))
        out = OrderedDict()
        ct = self.q.source == "ct"
        if "bias" in pieces[0]:
            out["bias"] = concat([p["bias"] for p in pieces], 0, "nvfp4 bias")
        weight = concat([p["weight"] for p in pieces], 0, "nvfp4 weight")
        scales = concat([p["weight_scale"] for p in pieces], 0, "nvfp4 scales")
        if self.lay.vllm:
            n = len(pieces)
            out["weight_packed" if ct else "weight"] = weight
            out["weight_scale"] = scales
            out["weight_global_scale" if ct else "weight_scale_2"] = Tensor(
                "F32", np.array([p["nws2"].data.reshape(-1)[0] for p in pieces], dtype=np.uint32).reshape(n))
            out["input_global_scale" if ct else "input_scale"] = Tensor(
                "F32", np.array([p["nis"].data.reshape(-1)[0] for p in pieces], dtype=np.uint32).reshape(n))
            return out
        for g in ("nws2", "nis"):
            first = pieces[0][g].to_bytes()
            for p, n in zip(pieces[1:], names[1:]):
                if p[g].to_bytes() != first:
                    raise BadInput("%s / %s: NVFP4 %s differ (TensorRT-LLM asserts them equal)"
                                   % (names[0], n, "input scales" if g == "nis" else "weight_scale_2"))
        ws2 = modelopt_global(pieces[0]["nws2"], ct, True,
                              names[0] + (".weight_global_scale" if ct else ".weight_scale_2"))
        isc = modelopt_global(pieces[0]["nis"], ct, True, names[0] + (".input_global_scale" if ct else ".input_scale"))
        rows, cols = scales.shape
        pr, pc = ceil_div(rows, 128) * 128, ceil_div(cols, 4) * 4
        out["weight"] = weight
        out["weight_scale"] = Tensor("U8", swizzle_128x4(scales.data, pr, pc))
        out["input_scale"] = f32_tensor([f32_inv(isc)], (1,))
        out["weight_scale_2"] = f32_tensor([ws2], (1,))
        out["alpha"] = f32_tensor([f32_mul(isc, ws2)], (1,))
        if len(pieces) == 1:
            out["inv_input_scale"] = f32_tensor([f32_mul(f32_inv(isc), f32_inv(np.float32(6.0)))], (1,))
        return out

    def int4_linear(self, dst, parts):
        """vLLM W4A16 linear `dst` from parts (source prefix, out, in, (r0, r1), (c0, c1)): this
        rank's logical rows (outputs) and columns (inputs) of each part (int4-nvfp4.md 3.1, 4.1,
        5.1).  AWQ: qweight [in, out/8], qzeros [G, out/8], scales [G, out] cut and fused along
        their last dim; GPTQ: qweight [in/8, out], g_idx; compressed-tensors: weight_packed
        [out, in/8], weight_scale [out, G], weight_zero_point [out/8, G], weight_shape (the last
        part's), weight_g_idx, fused along dim 0.  A row-parallel rank with activation order (or
        per-channel scales) keeps every group's scales."""
        q, ck, P = self.q, self.ck, self.params
        if not self.lay.vllm:
            raise BadInput("%s: TensorRT-LLM does not load %s W4A16 checkpoints" % (dst, q.source))
        K = parts[0][2]
        c0, c1 = parts[0][4]
        g = q.group or K
        G = ceil_div(K, g)
        full = (c1 - c0) != K and (q.act or not q.group)
        if not full and (c0 % g or (c1 - c0) % g):
            raise BadInput("%s: inputs [%d, %d) are not whole %d-input groups" % (parts[0][0], c0, c1, g))
        if c0 % 8 or (c1 - c0) % 8:
            raise BadInput("%s: inputs [%d, %d) are not whole packed words" % (parts[0][0], c0, c1))
        for p, _, _, (r0, r1), _ in parts:
            if r0 % 8 or (r1 - r0) % 8:
                raise BadInput("%s: outputs [%d, %d) are not whole packed words" % (p, r0, r1))
        s0, s1 = (0, G) if full else (c0 // g, ceil_div(c1, g))

        def cut(suffix, rows, cols, axis):
            ts = [ck.get(p + suffix) for p, *_ in parts]
            arrs = [t.data[rows(pr, pc)[0]:rows(pr, pc)[1], cols(pr, pc)[0]:cols(pr, pc)[1]]
                    for t, (_, _, _, pr, pc) in zip(ts, parts)]
            return Tensor(ts[0].dtype, np.ascontiguousarray(np.concatenate(arrs, axis=axis)))

        def g_idx(suffix):
            last = ck.get(parts[-1][0] + suffix)
            for p, *_ in parts[:-1]:
                if ck.get(p + suffix).to_bytes() != last.to_bytes():
                    raise BadInput("%s%s and %s%s differ (vLLM keeps the last one read)"
                                   % (p, suffix, parts[-1][0], suffix))
            return Tensor("I32", last.data[c0:c1])

        groups = lambda pr, pc: (s0, s1)
        if q.source == "awq":
            P[dst + ".qweight"] = cut(".qweight", lambda pr, pc: pc, lambda pr, pc: (pr[0] // 8, pr[1] // 8), 1)
            P[dst + ".qzeros"] = cut(".qzeros", groups, lambda pr, pc: (pr[0] // 8, pr[1] // 8), 1)
            P[dst + ".scales"] = cut(".scales", groups, lambda pr, pc: pr, 1)
        elif q.source == "gptq":
            P[dst + ".qweight"] = cut(".qweight", lambda pr, pc: (pc[0] // 8, pc[1] // 8), lambda pr, pc: pr, 1)
            P[dst + ".qzeros"] = cut(".qzeros", groups, lambda pr, pc: (pr[0] // 8, pr[1] // 8), 1)
            P[dst + ".scales"] = cut(".scales", groups, lambda pr, pc: pr, 1)
            P[dst + ".g_idx"] = g_idx(".g_idx")
        else:
            P[dst + ".weight_packed"] = cut(".weight_packed", lambda pr, pc: pr,
                                            lambda pr, pc: (pc[0] // 8, pc[1] // 8), 0)
            P[dst + ".weight_scale"] = cut(".weight_scale", lambda pr, pc: pr, groups, 0)
            if not q.sym:
                P[dst + ".weight_zero_point"] = cut(".weight_zero_point", lambda pr, pc: (pr[0] // 8, pr[1] // 8),
                                                    groups, 0)
            P[dst + ".weight_shape"] = ck.get(parts[-1][0] + ".weight_shape")
            if q.act:
                P[dst + ".weight_g_idx"] = g_idx(".weight_g_idx")

    def exact(self, width, name):
        """This rank's [a, b) of `width` under vLLM's exact split."""
        if width % self.lay.T:
            raise BadInput("%s: width %d not divisible by tp_size %d (vllm splits exactly)" % (name, width, self.lay.T))
        return shard_range(width, self.lay.T, self.lay.r)

    # Llama-style gated MLP: gate_up_proj = concat(gate rows r, up rows r); down row-parallel.
    def gated_mlp(self, dst_pre, src_pre, bias=False, T=None, r=None):
        T = self.lay.T if T is None else T
        r = self.lay.r if r is None else r
        ck, q = self.ck, self.q
        if q.mode == "int4":
            H, I = self.H, need(self.cfg, "intermediate_size")
            rows = self.exact(I, src_pre + ".gate_proj")
            self.int4_linear(dst_pre + ".gate_up_proj", [(src_pre + ".gate_proj", I, H, rows, (0, H)),
                                                         (src_pre + ".up_proj", I, H, rows, (0, H))])
            self.int4_linear(dst_pre + ".down_proj", [(src_pre + ".down_proj", H, I, (0, H), rows)])
            return
        g = load_linear(ck, q, src_pre + ".gate_proj", with_bias=bias)
        u = load_linear(ck, q, src_pre + ".up_proj", with_bias=bias)
        d = load_linear(ck, q, src_pre + ".down_proj", with_bias=bias)
        self.emit(dst_pre + ".gate_up_proj",
                  self.fuse([self.split(g, 0, T, r), self.split(u, 0, T, r)],
                            [g.name, u.name], dst_pre + ".gate_up_proj"))
        self.emit(dst_pre + ".down_proj", self.split(d, 1, T, r))

    def experts(self, dst_pre, src_pre, E, inter, H):
        """Routed experts of one layer.  dst_pre is the target's module: trtllm
        `...mlp.experts.backend`, vllm `...mlp.experts` (Mixtral `...block_sparse_moe.experts`)."""
        lay = self.lay
        if lay.vllm:
            # All-or-nothing EP: P == 1 -> all E experts, I split over T; P == T -> MoE tp 1,
            # E % T extra experts on the first ranks.
            if lay.P == 1:
                first, n, mT, mr = 0, E, lay.T, lay.r
            else:
                n = E // lay.T + (1 if lay.r < E % lay.T else 0)
                first = lay.r * (E // lay.T) + min(lay.r, E % lay.T)
                mT, mr = 1, 0
            order, labels = "gate_up", ("w13", "w2")
        else:
            if E % lay.P:
                raise BadInput("%d experts not divisible by ep_size %d" % (E, lay.P))
            n = E // lay.P
            first = lay.moe_ep_rank * n
            mT, mr = lay.moe_tp, lay.moe_tp_rank
            order, labels = "up_gate", ("w3_w1", "w2")
        if n == 0:
            raise BadInput("%s: rank %d holds no expert (%d experts, tp_size %d)" % (src_pre, lay.r, E, lay.T))
        if self.q.mode in ("fp8t", "fp8c"):
            return self.experts_fp8(dst_pre, src_pre, E, inter, first, n, mT, mr, labels)
        if self.q.mode == "nvfp4" and self.ck.has("%s.0.gate_proj.weight_scale" % src_pre):
            # (a layer the exclude list leaves BF16, e.g. R1-FP4's MTP layer, loads as a plain one)
            return self.experts_nvfp4(dst_pre, src_pre, E, inter, first, n, mT, mr, labels)
        if self.q.mode == "int4":
            return self.experts_int4(dst_pre, src_pre, inter, first, n, mT, mr)
        ck, q = self.ck, self.q
        w_in, w2 = [], []
        for j in range(first, first + n):
            ep = "%s.%d" % (src_pre, j)
            g = load_linear(ck, q, ep + ".gate_proj")
            u = load_linear(ck, q, ep + ".up_proj")
            d = load_linear(ck, q, ep + ".down_proj")
            expect_shape(g.parts["weight"][0], g.parts["weight"][1],
                         (inter, g.parts["weight"][1].shape[1]))
            gs, us = self.split(g, 0, mT, mr), self.split(u, 0, mT, mr)
            if order == "gate_up":
                fused = self.fuse([gs, us], [g.name, u.name], dst_pre + "." + labels[0], False)
            else:
                fused = self.fuse([us, gs], [u.name, g.name], dst_pre + "." + labels[0], False)
            w_in.append(fused)
            w2.append(self.split(d, 1, mT, mr))
        for label, lst in zip(labels, (w_in, w2)):
            for suffix in lst[0]:
                name = "%s.%s_%s" % (dst_pre, label, self.expert_suffix(suffix))
                self.params[name] = stack([x[suffix] for x in lst], name)

    def local_experts(self, src_pre, inter, first, n, mT, mr):
        """(gate, up, down, gate split, up split, down split) of experts first..first+n-1: gate
        and up column-split, down row-split over the MoE tp group (mT ranks, this one mr)."""
        out = []
        for j in range(first, first + n):
            ep = "%s.%d" % (src_pre, j)
            g, u, d = (load_linear(self.ck, self.q, ep + p) for p in (".gate_proj", ".up_proj", ".down_proj"))
            expect_shape(g.parts["weight"][0], g.parts["weight"][1], (inter, g.parts["weight"][1].shape[1]))
            out.append((g, u, d, self.split(g, 0, mT, mr), self.split(u, 0, mT, mr), self.split(d, 1, mT, mr)))
        return out

    def experts_fp8(self, dst_pre, src_pre, E, inter, first, n, mT, mr, labels):
        """Per-tensor / per-channel FP8 experts (fp8.md sections 6-8).  vllm: w13 [gate; up] raw,
        w13_weight_scale [n, 2] (channel [n, 2Ip, 1]), w2_weight_scale [n] (channel [n, H, 1]),
        w13_input_scale [n] one slot for gate and up (they must be equal), w2_input_scale [n].
        trtllm (per-tensor only): [up; gate] requantised to each expert's max scale, w2 raw,
        fc31_dequant = max(s_w1, s_w3) * a13, fc2_dequant = s_w2 * a2, fc2_quant = 1/a2,
        fc31_input_dequant = a13, a13 / a2 the max input scales over all E experts."""
        ck, q, lay = self.ck, self.q, self.lay
        if not lay.vllm and q.mode == "fp8c":
            raise BadInput("%s: TensorRT-LLM has no per-channel FP8 MoE method" % src_pre)
        rows = [(g, gs, us, ds) for g, _, _, gs, us, ds in self.local_experts(src_pre, inter, first, n, mT, mr)]
        f, w2 = dst_pre + "." + labels[0], dst_pre + "." + labels[1]
        stacked = lambda ts, name: stack(ts, name)
        if lay.vllm:
            self.params[f + "_weight"] = stacked([concat([gs["weight"], us["weight"]], 0, f) for _, gs, us, _ in rows], f)
            self.params[w2 + "_weight"] = stacked([ds["weight"] for _, _, _, ds in rows], w2)
            if q.mode == "fp8c":
                self.params[f + "_weight_scale"] = stacked(
                    [concat([gs["cscale"], us["cscale"]], 0, f) for _, gs, us, _ in rows], f)
                self.params[w2 + "_weight_scale"] = stacked([ds["cscale"] for _, _, _, ds in rows], w2)
                return
            self.params[f + "_weight_scale"] = f32_tensor(
                [[f32_of(gs["wscale"]), f32_of(us["wscale"])] for _, gs, us, _ in rows], (n, 2))
            self.params[w2 + "_weight_scale"] = f32_tensor([f32_of(ds["wscale"]) for _, _, _, ds in rows], (n,))
            if q.static:
                for g, gs, us, _ in rows:
                    if gs["iscale"].to_bytes() != us["iscale"].to_bytes():
                        raise BadInput("%s: gate and up input scales differ (vLLM keeps one slot)" % g.name)
                self.params[f + "_input_scale"] = f32_tensor([f32_of(gs["iscale"]) for _, gs, _, _ in rows], (n,))
                self.params[w2 + "_input_scale"] = f32_tensor([f32_of(ds["iscale"]) for _, _, _, ds in rows], (n,))
            return
        a13 = a2 = np.float32(0)
        for j in range(E):
            ep = "%s.%d" % (src_pre, j)
            for proj in ("gate_proj", "up_proj"):
                a13 = max(a13, f32_of(ck.get(ep + "." + proj + ".input_scale")))
            a2 = max(a2, f32_of(ck.get(ep + ".down_proj.input_scale")))
        w31, fc31 = [], []
        for _, gs, us, _ in rows:
            sg, su = f32_of(gs["wscale"]), f32_of(us["wscale"])
            m = np.float32(max(sg, su))
            w31.append(Tensor("F8_E4M3", np.concatenate([trt_requant(us["weight"].data, su, m),
                                                         trt_requant(gs["weight"].data, sg, m)], axis=0)))
            fc31.append(np.float32(m * a13))
        self.params[f + "_weight"] = stacked(w31, f)
        self.params[w2 + "_weight"] = stacked([ds["weight"] for _, _, _, ds in rows], w2)
        self.params[dst_pre + ".fc31_dequant"] = f32_tensor(fc31, (n,))
        self.params[dst_pre + ".fc2_dequant"] = f32_tensor(
            [np.float32(f32_of(ds["wscale"]) * a2) for _, _, _, ds in rows], (n,))
        self.params[dst_pre + ".fc2_quant"] = f32_tensor(np.float32(1.0) / a2, ())
        self.params[dst_pre + ".fc31_input_dequant"] = f32_tensor(a13, ())

    def experts_int4(self, dst_pre, src_pre, I, first, n, mT, mr):
        """vLLM AWQ / GPTQ experts (int4-nvfp4.md 3.4, 4.3), Ip = I/mT rows [mr*Ip, (mr+1)*Ip):
        AWQ w13_qweight [n, H, 2Ip/8] = [gate, up] qweight[:, Ip/8 cols] along the last dim,
        w13_qzeros / w13_scales likewise; w2_qweight [n, Ip, H/8] = down.qweight rows;
        w2_scales / w2_qzeros [n, Ip/ag, H] with each row repeated g/ag times first (ag = g halved
        while Ip % ag; Ip < g refused).  GPTQ w13_qweight [n, H/8, 2Ip], w2_qweight [n, Ip/8, H],
        w2_scales / w2_qzeros rows Ip/g (every group with desc_act), w13_g_idx [n, H] = up's (gate's
        must agree), w2_g_idx [n, Ip].  compressed-tensors: experts_int4_ct."""
        q, ck, P, H = self.q, self.ck, self.params, self.H
        if not self.lay.vllm:
            raise BadInput("%s: TensorRT-LLM does not load %s W4A16 checkpoints" % (src_pre, q.source))
        if q.source == "ct":
            return self.experts_int4_ct(dst_pre, src_pre, I, first, n, mT, mr)
        if I % mT:
            raise BadInput("%s: %d not divisible by %d" % (src_pre, I, mT))
        Ip = I // mT
        r0, r1 = mr * Ip, (mr + 1) * Ip
        g13 = q.group or H
        g2 = q.group or I
        if H % g13 or r0 % 8 or Ip % 8:
            raise BadInput("%s: groups or packed words cut" % src_pre)
        awq = q.source == "awq"
        ag, full2 = g2, False
        if awq:
            if Ip < g2:
                raise BadInput("%s: %d expert rows a rank are fewer than the group %d" % (src_pre, Ip, g2))
            while Ip % ag:
                ag //= 2
        elif q.act:
            full2 = True
        elif r0 % g2 or Ip % g2:
            raise BadInput("%s: expert rows a rank are not whole groups (MoeWNA16 fallback)" % src_pre)
        G2 = ceil_div(I, g2)

        def w2_rows(t):
            rep = np.repeat(t.data, g2 // ag, axis=0)
            return rep if full2 else rep[r0 // ag:r1 // ag]

        acc = {k: [] for k in ("w13q", "w13z", "w13s", "w2q", "w2z", "w2s", "g13", "g2")}
        dt = None
        for j in range(first, first + n):
            e = "%s.%d." % (src_pre, j)
            get = lambda k: ck.get(e + k)
            gate, up = "gate_proj", "up_proj"
            if awq:
                acc["w13q"].append(np.concatenate([get(p + ".qweight").data[:, r0 // 8:r1 // 8] for p in (gate, up)], 1))
                acc["w2q"].append(get("down_proj.qweight").data[r0:r1])
            else:
                acc["w13q"].append(np.concatenate([get(p + ".qweight").data[:, r0:r1] for p in (gate, up)], 1))
                acc["w2q"].append(get("down_proj.qweight").data[r0 // 8:r1 // 8])
                if get(gate + ".g_idx").to_bytes() != get(up + ".g_idx").to_bytes():
                    raise BadInput("%s: gate and up g_idx differ (vLLM keeps the last one read)" % e)
                acc["g13"].append(get(up + ".g_idx").data)
                acc["g2"].append(get("down_proj.g_idx").data[r0:r1])
            acc["w13z"].append(np.concatenate([get(p + ".qzeros").data[:, r0 // 8:r1 // 8] for p in (gate, up)], 1))
            acc["w13s"].append(np.concatenate([get(p + ".scales").data[:, r0:r1] for p in (gate, up)], 1))
            dt = get(gate + ".scales").dtype
            acc["w2z"].append(w2_rows(get("down_proj.qzeros")))
            acc["w2s"].append(w2_rows(get("down_proj.scales")))
        f, d = dst_pre + ".w13_", dst_pre + ".w2_"
        for name, key, dtype in ((f + "qweight", "w13q", "I32"), (f + "qzeros", "w13z", "I32"), (f + "scales", "w13s", dt),
                                 (d + "qweight", "w2q", "I32"), (d + "qzeros", "w2z", "I32"), (d + "scales", "w2s", dt),
                                 (f + "g_idx", "g13", "I32"), (d + "g_idx", "g2", "I32")):
            if acc[key]:
                P[name] = Tensor(dtype, np.ascontiguousarray(np.stack(acc[key])))
        if G2 and full2:
            check_rows = P[d + "scales"].shape[1]
            if check_rows != G2:
                raise BadInput("%s: w2 scales %d rows, expected %d" % (src_pre, check_rows, G2))

    def experts_int4_ct(self, dst_pre, src_pre, I, first, n, mT, mr):
        """vLLM compressed-tensors W4A16 experts (int4-nvfp4.md 5.2): every tensor transposed
        before its cut, Ip = I/mT columns [r0, r1) of the transpose.  w13_weight_packed
        [n, H/8, 2Ip] = [gate.T[:, r], up.T[:, r]]; w2_weight_packed [n, Ip/8, H] = down.T rows r/8;
        w13_weight_scale [n, H/g, 2Ip]; w2_weight_scale [n, S2, H] (S2 = Ip/g, or I/g with actorder
        group / per-channel); asymmetric w13/w2_weight_zero_point likewise in units of 8 outputs;
        w13/w2_weight_shape [n, 2] = up's / down's [out, in] in the model dtype; actorder group
        w13_weight_g_idx = up's (gate's must agree), w2_weight_g_idx = down's [r0, r1)."""
        q, ck, P, H = self.q, self.ck, self.params, self.H
        if I % mT:
            raise BadInput("%s: %d not divisible by %d" % (src_pre, I, mT))
        Ip = I // mT
        r0, r1 = mr * Ip, (mr + 1) * Ip
        g13, g2 = q.group or H, q.group or I
        if H % g13 or H % 8 or r0 % 8 or Ip % 8:
            raise BadInput("%s: groups or packed words cut" % src_pre)
        full2 = q.act or not q.group
        if full2 and I % g2:
            raise BadInput("%s: intermediate size %d is not whole groups of %d" % (src_pre, I, g2))
        if not full2 and (r0 % g2 or Ip % g2):
            raise BadInput("%s: expert rows a rank are not whole groups (Scale groups would otherwise cross TP "
                           "shard boundaries)" % src_pre)
        s0, s1 = (0, I // g2) if full2 else (r0 // g2, r1 // g2)
        cfg = self.cfg
        model = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        acc = {k: [] for k in ("w13q", "w13s", "w13z", "w2q", "w2s", "w2z", "sh13", "sh2", "g13", "g2")}
        dt = None
        for j in range(first, first + n):
            e = "%s.%d." % (src_pre, j)
            get = lambda k: ck.get(e + k).data.T
            gu = ("gate_proj", "up_proj")
            acc["w13q"].append(np.concatenate([get(p + ".weight_packed")[:, r0:r1] for p in gu], 1))
            acc["w13s"].append(np.concatenate([get(p + ".weight_scale")[:, r0:r1] for p in gu], 1))
            acc["w2q"].append(get("down_proj.weight_packed")[r0 // 8:r1 // 8])
            acc["w2s"].append(get("down_proj.weight_scale")[s0:s1])
            if not q.sym:
                acc["w13z"].append(np.concatenate([get(p + ".weight_zero_point")[:, r0 // 8:r1 // 8] for p in gu], 1))
                acc["w2z"].append(get("down_proj.weight_zero_point")[s0:s1])
            dt = ck.get(e + "gate_proj.weight_scale").dtype
            acc["sh13"].append(ck.get(e + "up_proj.weight_shape").data.view(np.int64))
            acc["sh2"].append(ck.get(e + "down_proj.weight_shape").data.view(np.int64))
            if q.act:
                if ck.get(e + "gate_proj.weight_g_idx").to_bytes() != ck.get(e + "up_proj.weight_g_idx").to_bytes():
                    raise BadInput("%s: gate and up weight_g_idx differ (vLLM keeps the last one read)" % e)
                acc["g13"].append(ck.get(e + "up_proj.weight_g_idx").data)
                acc["g2"].append(ck.get(e + "down_proj.weight_g_idx").data[r0:r1])
        if {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(model) != dt:
            raise BadInput("%s: scales are %s but torch_dtype is %s" % (src_pre, dt, model))

        def in_model_dtype(values):  # torch's copy_ of int64 into the model dtype, through float32
            f = np.stack(values).astype(np.float32)
            if dt == "BF16":
                return (bf16_round(f).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
            return f.astype(np.float16).view(np.uint16) if dt == "F16" else f.view(np.uint32)

        f, d = dst_pre + ".w13_", dst_pre + ".w2_"
        for name, key, dtype in ((f + "weight_packed", "w13q", "I32"), (f + "weight_scale", "w13s", dt),
                                 (f + "weight_zero_point", "w13z", "I32"), (d + "weight_packed", "w2q", "I32"),
                                 (d + "weight_scale", "w2s", dt), (d + "weight_zero_point", "w2z", "I32"),
                                 (f + "weight_g_idx", "g13", "I32"), (d + "weight_g_idx", "g2", "I32")):
            if acc[key]:
                P[name] = Tensor(dtype, np.ascontiguousarray(np.stack(acc[key])))
        P[f + "weight_shape"] = Tensor(dt, in_model_dtype(acc["sh13"]))
        P[d + "weight_shape"] = Tensor(dt, in_model_dtype(acc["sh2"]))

    def experts_nvfp4(self, dst_pre, src_pre, E, inter, first, n, mT, mr, labels):
        """NVFP4 experts (int4-nvfp4.md 6.2, 6.4).
        vllm ModelOpt: w13_weight [n, 2Ip, H/2] = [gate; up], w13_weight_scale F8, w13_weight_scale_2
        [n, 2] raw per slot, w13_input_scale [n, 2] one value over both slots (gate and up must
        agree), w2_* [n]; compressed-tensors: *_weight_packed, *_weight_global_scale and
        *_input_global_scale, per slot.
        trtllm CUTLASS: A = rup(2 Ipp, 128); w3_w1_weight I64 [n, A, H/16] = [up; gate] bytes with
        zero rows at the end; w2_weight I64 [n, H, A/32] (down's Ipp/2 bytes a row, zero padded);
        w3_w1_weight_scale I32 [n, A, H/64] = per expert swizzle of [up_s; gate_s] padded to [A, H/16];
        w2_weight_scale I32 [n, H, A/128] = swizzle of down_s padded to [H, A/32];
        fc31_input_scale = 1/max over all E experts of w1's input scale (w3's close to it),
        fc2_input_scale likewise of w2's; fc31_alpha[e] = 1/(fc31_input_scale * (1/ws2)), ws2 = w1's
        unless w3's is not close (then the max); fc2_alpha[e] = 1/(fc2_input_scale * (1/ws2_w2))."""
        ck, q, lay = self.ck, self.q, self.lay
        ct = q.source == "ct"
        rows = self.local_experts(src_pre, inter, first, n, mT, mr)
        for g, _, d, gs, _, ds in rows:
            for part, name in ((gs, g.name), (ds, d.name)):
                if part["weight"].shape[1] % 8:
                    raise BadInput("%s: %d input features a rank are not whole NVFP4 blocks"
                                   % (name, 2 * part["weight"].shape[1]))
        f, w2 = dst_pre + "." + labels[0], dst_pre + "." + labels[1]
        raw = lambda t: t.data.reshape(-1)[0]
        P = self.params
        if lay.vllm:
            wn, s2n, isn = ("weight_packed", "weight_global_scale", "input_global_scale") if ct else \
                ("weight", "weight_scale_2", "input_scale")
            P[f + "_" + wn] = stack([concat([gs["weight"], us["weight"]], 0, f) for _, _, _, gs, us, _ in rows], f)
            P[w2 + "_" + wn] = stack([ds["weight"] for *_, ds in rows], w2)
            P[f + "_weight_scale"] = stack(
                [concat([gs["weight_scale"], us["weight_scale"]], 0, f) for _, _, _, gs, us, _ in rows], f)
            P[w2 + "_weight_scale"] = stack([ds["weight_scale"] for *_, ds in rows], w2)
            P[f + "_" + s2n] = Tensor("F32", np.array(
                [[raw(gs["nws2"]), raw(us["nws2"])] for _, _, _, gs, us, _ in rows], dtype=np.uint32).reshape(n, 2))
            P[w2 + "_" + s2n] = Tensor("F32", np.array([raw(ds["nws2"]) for *_, ds in rows], dtype=np.uint32))
            if not ct:
                for g, _, _, gs, us, _ in rows:
                    if gs["nis"].to_bytes() != us["nis"].to_bytes():
                        raise BadInput("%s: gate and up input scales differ (vLLM writes one over both slots)"
                                       % g.name)
            P[f + "_" + isn] = Tensor("F32", np.array(
                [[raw(gs["nis"]), raw(us["nis"])] for _, _, _, gs, us, _ in rows], dtype=np.uint32).reshape(n, 2))
            P[w2 + "_" + isn] = Tensor("F32", np.array([raw(ds["nis"]) for *_, ds in rows], dtype=np.uint32))
            return
        H = self.H
        ipp = rows[0][3]["weight"].shape[0]
        if ipp % 16 or H % 128:
            raise BadInput("%s: %d expert rows a rank / hidden %d do not fit TensorRT-LLM's NVFP4 CUTLASS MoE"
                           % (src_pre, ipp, H))
        A = ceil_div(2 * ipp, 128) * 128
        mo = lambda lin, suffix: modelopt_global(lin.parts[suffix][1], ct, False, lin.parts[suffix][0])
        w31, w2w, s31, s2s, a31, a2 = [], [], [], [], [], []
        fis = f2is = None
        in13, in2 = [], []
        for j in range(E):
            ep = "%s.%d" % (src_pre, j)
            g = load_linear(ck, q, ep + ".gate_proj")
            u = load_linear(ck, q, ep + ".up_proj")
            d = load_linear(ck, q, ep + ".down_proj")
            a1, a3 = mo(g, "nis"), mo(u, "nis")
            if not close_f32(a1, a3) and not close_f32(a3, a1):
                raise BadInput("%s / %s: input scales not close (TensorRT-LLM asserts allclose)" % (g.name, u.name))
            in13.append(a1)
            in2.append(mo(d, "nis"))
        fis = f32_inv(max(in13))
        f2is = f32_inv(max(in2))
        for g, u, d, gs, us, ds in rows:
            wb = np.zeros((A, H // 2), dtype=np.uint8)
            wb[:ipp] = us["weight"].data
            wb[ipp:2 * ipp] = gs["weight"].data
            w31.append(as_words(wb, "I64"))
            db = np.zeros((H, A // 4), dtype=np.uint8)
            db[:, :ipp // 2] = ds["weight"].data
            w2w.append(as_words(db, "I64"))
            sc = np.concatenate([us["weight_scale"].data, gs["weight_scale"].data], axis=0)
            s31.append(as_words(swizzle_128x4(sc, A, H // 16).reshape(A, H // 16), "I32"))
            s2s.append(as_words(swizzle_128x4(ds["weight_scale"].data, H, A // 32).reshape(H, A // 32), "I32"))
            w1s2, w3s2 = mo(g, "nws2"), mo(u, "nws2")
            ws2 = w1s2 if close_f32(w3s2, w1s2) else np.float32(max(w1s2, w3s2))
            a31.append(f32_inv(f32_mul(fis, f32_inv(ws2))))
            a2.append(f32_inv(f32_mul(f2is, f32_inv(mo(d, "nws2")))))
        P[f + "_weight"] = stack(w31, f)
        P[w2 + "_weight"] = stack(w2w, w2)
        P[f + "_weight_scale"] = stack(s31, f)
        P[w2 + "_weight_scale"] = stack(s2s, w2)
        P[dst_pre + ".fc31_input_scale"] = f32_tensor(fis, ())
        P[dst_pre + ".fc2_input_scale"] = f32_tensor(f2is, ())
        P[dst_pre + ".fc31_alpha"] = f32_tensor(a31, (n,))
        P[dst_pre + ".fc2_alpha"] = f32_tensor(a2, (n,))

    def kv_scales(self, src):
        """FP8 KV-cache scales of attention `src` (model.layers.i.self_attn): vllm
        `attn.k_scale` / `attn.v_scale` 0-d; trtllm qkv_proj.kv_scales [1, k, v] and
        inv_kv_scales [1, 1/k, 1/v] (per-tensor FP8 only)."""
        ck = self.ck
        keys = []
        for proj, sc in (("k_proj", "k_scale"), ("v_proj", "v_scale")):
            for k in (src + "." + proj + "." + sc, src + "." + sc):
                if ck.has(k):
                    keys.append(k)
                    break
        if not keys:
            return
        k, v = (f32_of(ck.get(key)) for key in keys)
        if self.lay.vllm:
            self.params[src + ".attn.k_scale"] = f32_tensor(k, ())
            self.params[src + ".attn.v_scale"] = f32_tensor(v, ())
            return
        if self.q.mode != "fp8t":
            raise BadInput("%s: TensorRT-LLM keeps KV-cache scales only on per-tensor FP8 linears" % src)
        self.params[src + ".qkv_proj.kv_scales"] = f32_tensor([1.0, k, v], (3,))
        one = np.float32(1.0)
        self.params[src + ".qkv_proj.inv_kv_scales"] = f32_tensor([one, one / k, one / v], (3,))

    def expert_suffix(self, suffix):
        """FP8 expert block scales: trtllm `<w>_weight_scaling_factor`, vllm `<w>_weight_scale_inv`."""
        if suffix == "weight_scale_inv" and not self.lay.vllm:
            return "weight_scaling_factor"
        return suffix


class LlamaBuilder(Builder):
    """Llama, Mistral, Qwen2, Qwen3 (+ the MoE families via MoeBuilder)."""

    arch = None
    trtllm_whole_blocks = True

    def dims(self):
        cfg = self.cfg
        self.H = need(cfg, "hidden_size")
        self.nh = need(cfg, "num_attention_heads")
        self.kvh = cfg_get(cfg, "num_key_value_heads", self.nh)
        self.hd = cfg_get(cfg, "head_dim", self.H // self.nh)
        self.L = need(cfg, "num_hidden_layers")

    def kv_rows(self, t, name):
        """Rows of the k (or v) projection held by this rank (GQA duplication rule)."""
        T, r, kvh, hd = self.lay.T, self.lay.r, self.kvh, self.hd
        if t.shape[0] != kvh * hd:
            raise BadInput("checkpoint tensor %s has %d rows, config implies %d x %d"
                           % (name, t.shape[0], kvh, hd))
        if kvh >= T:
            if kvh % T:
                raise BadInput("num_key_value_heads %d not divisible by tp_size %d" % (kvh, T))
            per = kvh // T
            return r * per * hd, (r + 1) * per * hd
        if T % kvh:
            raise BadInput("tp_size %d not a multiple of num_key_value_heads %d" % (T, kvh))
        head = r // (T // kvh)
        return head * hd, (head + 1) * hd

    def biases(self):
        """(q/k/v bias, o_proj bias).  trtllm: Qwen2 always q/k/v; others when attention_bias
        (o_proj too, except Qwen2).  vllm: Qwen2 always q/k/v; Llama/Mistral (and Mixtral) when
        attention_bias or bias (o_proj too); Qwen3 (and Qwen3-MoE) q/k/v when attention_bias."""
        cfg, arch = self.cfg, self.arch
        ab = bool(cfg.get("attention_bias"))
        if arch == "Qwen2ForCausalLM":
            return True, False
        if not self.lay.vllm:
            return ab, ab
        if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            return ab, False
        b = ab or bool(cfg.get("bias"))
        return b, b

    def attention(self, i):
        ck, q = self.ck, self.q
        src = "model.layers.%d.self_attn" % i
        arch = self.arch
        qkv_bias, o_bias = self.biases()
        if q.mode == "int4":
            return self.attention_int4(src, qkv_bias)
        qp = load_linear(ck, q, src + ".q_proj", with_bias=qkv_bias)
        kp = load_linear(ck, q, src + ".k_proj", with_bias=qkv_bias)
        vp = load_linear(ck, q, src + ".v_proj", with_bias=qkv_bias)
        expect_shape(qp.parts["weight"][0], qp.parts["weight"][1],
                     (self.nh * self.hd, qp.parts["weight"][1].shape[1]))
        ka, kb = self.kv_rows(kp.parts["weight"][1], kp.parts["weight"][0])
        va, vb = self.kv_rows(vp.parts["weight"][1], vp.parts["weight"][0])
        self.emit(src + ".qkv_proj",
                  self.fuse([self.split(qp, 0), self.rows(kp, ka, kb), self.rows(vp, va, vb)],
                            [qp.name, kp.name, vp.name], src + ".qkv_proj"))
        self.kv_scales(src)
        if arch == "Qwen3ForCausalLM" or arch == "Qwen3MoeForCausalLM":
            self.rep(src + ".q_norm.weight")
            self.rep(src + ".k_norm.weight")
        op = load_linear(ck, q, src + ".o_proj", with_bias=o_bias)
        self.emit(src + ".o_proj", self.split(op, 1))

    def attention_int4(self, src, qkv_bias):
        """W4A16 attention (vLLM): q rows split exactly, this rank's KV heads, o_proj's inputs."""
        H, nh, kvh, hd = self.H, self.nh, self.kvh, self.hd
        qr = self.exact(nh * hd, src + ".q_proj")
        kv = self.kv_rows(Tensor("BF16", np.zeros((kvh * hd, 1), np.uint16)), src + ".k_proj")
        self.int4_linear(src + ".qkv_proj", [(src + ".q_proj", nh * hd, H, qr, (0, H)),
                                             (src + ".k_proj", kvh * hd, H, kv, (0, H)),
                                             (src + ".v_proj", kvh * hd, H, kv, (0, H))])
        if qkv_bias:
            self.params[src + ".qkv_proj.bias"] = concat(
                [Tensor(t.dtype, t.data[a:b]) for t, (a, b) in
                 ((self.ck.get(src + ".q_proj.bias"), qr), (self.ck.get(src + ".k_proj.bias"), kv),
                  (self.ck.get(src + ".v_proj.bias"), kv))], 0, src + ".qkv_proj.bias")
        if self.arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            self.rep(src + ".q_norm.weight")
            self.rep(src + ".k_norm.weight")
        self.int4_linear(src + ".o_proj", [(src + ".o_proj", H, nh * hd, (0, H), self.exact(nh * hd, src + ".o_proj"))])

    def mlp(self, i):
        pre = "model.layers.%d.mlp" % i
        self.gated_mlp(pre, pre, bias=bool(self.cfg.get("mlp_bias")))

    def build(self):
        if self.lay.adp:
            raise BadInput("--attention-dp: not a layout of %s (DeepSeek-V3 only)" % self.arch)
        self.dims()
        # trtllm block FP8: only the Qwen3-MoE weight mapper duplicates a KV head's block scales;
        # with fewer KV heads than ranks the generic mapper leaves ranks without them (fp8.md 5).
        if (self.q.mode == "fp8" and not self.lay.vllm and self.kvh < self.lay.T
                and self.arch != "Qwen3MoeForCausalLM"):
            raise BadInput("trtllm block FP8: %d KV heads under tp_size %d (the %s weight mapper does not "
                           "duplicate block scales)" % (self.kvh, self.lay.T, self.arch))
        # trtllm per-channel: no mapper duplicates a channel scale with its KV head (fp8.md 8.2).
        if self.q.mode == "fp8c" and not self.lay.vllm and self.kvh < self.lay.T:
            raise BadInput("trtllm per-channel FP8: %d KV heads under tp_size %d" % (self.kvh, self.lay.T))
        if self.q.mode == "fp8t" and not self.lay.vllm and self.q.source in ("ct", "autofp8"):
            raise BadInput("trtllm refuses %s per-tensor FP8" % self.q.source)
        self.vocab("model.embed_tokens.weight")
        for i in range(self.L):
            pre = "model.layers.%d" % i
            self.rep(pre + ".input_layernorm.weight")
            self.attention(i)
            self.rep(pre + ".post_attention_layernorm.weight")
            self.mlp(i)
        self.rep("model.norm.weight")
        self.lm_head()
        return self.params


class MoeBuilder(LlamaBuilder):
    """Qwen3-MoE and Mixtral (block_sparse_moe keys read under their original names)."""

    def is_moe(self, i):
        cfg = self.cfg
        if self.arch == "MixtralForCausalLM":
            return True
        if cfg_get(cfg, "num_experts", 0) <= 0:
            return False
        if i in (cfg.get("mlp_only_layers") or []):
            return False
        step = cfg_get(cfg, "decoder_sparse_step", 1)
        return (i + 1) % step == 0

    def mlp(self, i):
        cfg, ck = self.cfg, self.ck
        pre = "model.layers.%d.mlp" % i
        if not self.is_moe(i):
            return LlamaBuilder.mlp(self, i)
        if self.arch == "MixtralForCausalLM":
            E = need(cfg, "num_local_experts")
            inter = need(cfg, "intermediate_size")
            src = "model.layers.%d.block_sparse_moe" % i
            # vllm keeps Mixtral's module name block_sparse_moe; trtllm's is mlp.
            dst = src if self.lay.vllm else pre
            self.rep(dst + ".gate.weight", src + ".gate.weight")
            view = _RenamedCheckpoint(ck, {
                "%s.experts.%d.%s" % (pre, j, new): "%s.experts.%d.%s" % (src, j, old)
                for j in range(E)
                for new, old in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))})
            saved = self.ck
            self.ck = view
            try:
                self.experts(dst + (".experts" if self.lay.vllm else ".experts.backend"),
                             pre + ".experts", E, inter, self.H)
            finally:
                self.ck = saved
        else:
            E = need(cfg, "num_experts")
            inter = need(cfg, "moe_intermediate_size")
            self.rep(pre + ".gate.weight")
            self.experts(pre + (".experts" if self.lay.vllm else ".experts.backend"),
                         pre + ".experts", E, inter, self.H)


class _RenamedCheckpoint:
    """Checkpoint view with prefix renames (canonical prefix -> checkpoint prefix)."""

    def __init__(self, ck, prefix_map):
        self.ck = ck
        self.map = prefix_map

    def _src(self, name):
        for new, old in self.map.items():
            if name.startswith(new + "."):
                return old + name[len(new):]
        return name

    def has(self, name):
        return self.ck.has(self._src(name))

    def get(self, name):
        return self.ck.get(self._src(name))


class Gpt2Builder(Builder):
    def build(self):
        ck, cfg, lay = self.ck, self.cfg, self.lay
        if lay.vllm:
            raise BadInput("GPT2LMHeadModel: not served for target vllm (serves: trtllm)")
        if lay.adp:
            raise BadInput("--attention-dp: not a layout of GPT2LMHeadModel (DeepSeek-V3 only)")
        T, r = lay.T, lay.r
        sp = "transformer." if ck.has("transformer.wte.weight") else ""
        H = cfg_get(cfg, "n_embd", cfg.get("hidden_size"))
        L = cfg_get(cfg, "n_layer", cfg.get("num_hidden_layers"))
        if H is None or L is None:
            raise BadInput("config.json: missing n_embd / n_layer")
        p = self.params
        self.vocab("transformer.wte.weight", sp + "wte.weight")
        self.rep("transformer.wpe.weight", sp + "wpe.weight")
        for i in range(L):
            s = "%sh.%d." % (sp, i)
            d = "transformer.h.%d." % i
            for ln in ("ln_1", "ln_2"):
                self.rep(d + ln + ".weight", s + ln + ".weight")
                self.rep(d + ln + ".bias", s + ln + ".bias")
            # c_attn: Conv1D [H, 3H] -> [3H, H]; q, k, v each column-split then concatenated.
            w = ck.get(s + "attn.c_attn.weight")
            expect_shape(s + "attn.c_attn.weight", w, (H, 3 * H))
            wt = transpose(w)
            bt = ck.get(s + "attn.c_attn.bias")
            expect_shape(s + "attn.c_attn.bias", bt, (3 * H,))
            a, b = shard_range(H, T, r)
            p[d + "attn.qkv_proj.weight"] = concat(
                [Tensor(wt.dtype, wt.data[k * H + a:k * H + b]) for k in range(3)])
            p[d + "attn.qkv_proj.bias"] = concat(
                [Tensor(bt.dtype, bt.data[k * H + a:k * H + b]) for k in range(3)])
            # attn.c_proj: [H, H] Conv1D -> transposed, row-parallel; bias replicated.
            p[d + "attn.o_proj.weight"] = row_split(transpose(ck.get(s + "attn.c_proj.weight")), T, r)
            self.rep(d + "attn.o_proj.bias", s + "attn.c_proj.bias")
            # mlp.c_fc: [H, 4H] -> [4H, H] column-parallel (bias too).
            p[d + "mlp.fc.weight"] = col_split(transpose(ck.get(s + "mlp.c_fc.weight")), T, r)
            p[d + "mlp.fc.bias"] = col_split(ck.get(s + "mlp.c_fc.bias"), T, r)
            # mlp.c_proj: [4H, H] -> [H, 4H] row-parallel; bias replicated.
            p[d + "mlp.proj.weight"] = row_split(transpose(ck.get(s + "mlp.c_proj.weight")), T, r)
            self.rep(d + "mlp.proj.bias", s + "mlp.c_proj.bias")
        self.rep("transformer.ln_f.weight", sp + "ln_f.weight")
        self.rep("transformer.ln_f.bias", sp + "ln_f.bias")
        if cfg_get(cfg, "tie_word_embeddings", True):
            p["lm_head.weight"] = p["transformer.wte.weight"]
        else:
            self.vocab("lm_head.weight")
        return p


class DeepseekV3Builder(Builder):
    """DeepSeek-V3 (and V2-Lite style without q_lora).  Per target:

    trtllm: embed_tokens replicated, lm_head vocabulary-parallel; fused A projection
            `kv_a_proj_with_mqa`; kv_b_proj split into kv_b_proj / k_b_proj_trans / v_b_proj;
            dense MLP and shared experts over the gcd rule; MTP layers with row-parallel eh_proj;
            attention-DP replicates attention, dense MLPs, shared experts, embed, lm_head, eh_proj.
    vllm:   embed_tokens and lm_head vocabulary-parallel (64-padded); `fused_qkv_a_proj`;
            kv_b_proj column-parallel rows; dense MLP and shared experts split over T exactly;
            e_score_correction_bias only with topk_method noaux_tc; no MTP layer.
    """

    # FP8 kv_b_proj under trtllm: the current release's BF16 dequantisation path (no scales).
    trtllm_dequant_kv_b = True

    def build(self):
        cfg, lay = self.cfg, self.lay
        self.H = need(cfg, "hidden_size")
        self.nh = need(cfg, "num_attention_heads")
        self.L = need(cfg, "num_hidden_layers")
        self.attention_dims()
        if self.nh % lay.aT:
            raise BadInput("num_attention_heads %d not divisible by tp_size %d" % (self.nh, lay.aT))
        n_mtp = cfg_get(cfg, "num_nextn_predict_layers", 0)
        if lay.vllm:
            K = 0  # vllm: MTP layers are not loaded (declared skipped)
        else:
            K = n_mtp if lay.mtp is None else lay.mtp
        if K > 0 and n_mtp <= 0:
            raise BadInput("--mtp-layers %d but the checkpoint has no MTP layer" % K)

        if lay.vllm:
            self.vocab("model.embed_tokens.weight")
        else:
            self.rep("model.embed_tokens.weight")  # trtllm: replicated, full [V, hidden]
        for i in range(self.L):
            self.layer(i, i)
        for k in range(K):
            # trtllm MTP: model layer L+k loads checkpoint layer L + k % n_mtp.  Its
            # embed_tokens and shared_head.head are not parameters (model's embed / lm_head).
            src_i = self.L + k % n_mtp
            dst_i = self.L + k
            d = "model.layers.%d." % dst_i
            s = "model.layers.%d." % src_i
            self.rep(d + "enorm.weight", s + "enorm.weight")
            self.rep(d + "hnorm.weight", s + "hnorm.weight")
            eh = load_linear(self.ck, self.q, s + "eh_proj")
            self.emit(d + "eh_proj", self.split(eh, 1, lay.aT, lay.ar))  # row-parallel
            self.rep(d + "shared_head.norm.weight", s + "shared_head.norm.weight")
            self.layer(dst_i, src_i)
        self.rep("model.norm.weight")
        self.lm_head(T=lay.aT, r=lay.ar)
        return self.params

    def attention_dims(self):
        cfg = self.cfg
        self.nope = need(cfg, "qk_nope_head_dim")
        self.vdim = need(cfg, "v_head_dim")
        self.R = need(cfg, "kv_lora_rank")

    def is_moe(self, i):
        cfg = self.cfg
        return (cfg.get("n_routed_experts") is not None
                and i >= cfg_get(cfg, "first_k_dense_replace", 0)
                and i % cfg_get(cfg, "moe_layer_freq", 1) == 0)

    def gcd_block(self):
        """b of the trtllm gcd rule: the FP8 block rows (weight_block_size[0]), 16 for NVFP4, else 1."""
        if self.q.mode == "fp8":
            return self.q.block[0]
        if self.q.mode == "nvfp4":
            return 16
        return 1

    def gcd_tp(self, width, node_cap):
        """trtllm dense / shared-expert MLP split: t = gcd(width / b, T); with the node cap,
        t > G -> t = gcd(t, G).  Returns (t, r % t); attention-DP: (1, 0)."""
        lay = self.lay
        if lay.adp:
            return 1, 0
        t = gcd(width // self.gcd_block(), lay.T)
        if node_cap and t > lay.G:
            t = gcd(t, lay.G)
        return t, lay.r % t

    def layer(self, dst_i, src_i):
        ck, q, lay, cfg = self.ck, self.q, self.lay, self.cfg
        d = "model.layers.%d." % dst_i
        s = "model.layers.%d." % src_i
        aT, ar = lay.aT, lay.ar
        self.rep(d + "input_layernorm.weight", s + "input_layernorm.weight")
        self.rep(d + "post_attention_layernorm.weight", s + "post_attention_layernorm.weight")
        sa, da = s + "self_attn.", d + "self_attn."
        kva = load_linear(ck, q, sa + "kv_a_proj_with_mqa")
        if cfg.get("q_lora_rank") is None:
            # V2-Lite style: q_proj column-parallel; kv_a_proj_with_mqa alone, replicated.
            self.emit(da + "q_proj", self.split(load_linear(ck, q, sa + "q_proj"), 0, aT, ar))
            self.emit(da + "kv_a_proj_with_mqa", whole(kva))
        else:
            # Fused A = concat(q_a_proj, kv_a_proj_with_mqa), replicated:
            # trtllm `kv_a_proj_with_mqa`, vllm `fused_qkv_a_proj`.
            qa = load_linear(ck, q, sa + "q_a_proj")
            fa = da + ("fused_qkv_a_proj" if lay.vllm else "kv_a_proj_with_mqa")
            self.emit(fa, self.fuse([whole(qa), whole(kva)], [qa.name, kva.name], fa))
            self.rep(da + "q_a_layernorm.weight", sa + "q_a_layernorm.weight")
            self.emit(da + "q_b_proj", self.split(load_linear(ck, q, sa + "q_b_proj"), 0, aT, ar))
        self.rep(da + "kv_a_layernorm.weight", sa + "kv_a_layernorm.weight")
        self.emit(da + "o_proj", self.split(load_linear(ck, q, sa + "o_proj"), 1, aT, ar))
        if lay.vllm:
            # vllm: kv_b_proj column-parallel by rows (per-head [nope; v] rows kept).
            kvb = load_linear(ck, q, sa + "kv_b_proj")
            expect_shape(kvb.parts["weight"][0], kvb.parts["weight"][1],
                         (self.nh * (self.nope + self.vdim), self.R))
            self.emit(da + "kv_b_proj", self.split(kvb, 0))
        else:
            self.kv_b(da, sa, aT, ar)
        self.mlp_of(d, s, src_i)

    def mlp_of(self, d, s, src_i):
        """Layer d's MLP from checkpoint layer s: dense, or router + shared + routed experts."""
        lay, cfg = self.lay, self.cfg
        mp, sm = d + "mlp", s + "mlp"
        if not self.is_moe(src_i):
            if lay.vllm:
                self.gated_mlp(mp, sm)
            else:
                t, tr = self.gcd_tp(need(cfg, "intermediate_size"), node_cap=True)
                self.gated_mlp(mp, sm, T=t, r=tr)
            return
        self.router(mp, sm)
        n_shared = cfg_get(cfg, "n_shared_experts", 0)
        E = need(cfg, "n_routed_experts")
        inter = need(cfg, "moe_intermediate_size")
        if n_shared:
            if lay.vllm:
                self.gated_mlp(mp + ".shared_experts", sm + ".shared_experts")
            else:
                t, tr = self.gcd_tp(inter * n_shared, node_cap=False)
                self.gated_mlp(mp + ".shared_experts", sm + ".shared_experts", T=t, r=tr)
        self.experts(mp + (".experts" if lay.vllm else ".experts.backend"), sm + ".experts",
                     E, inter, self.H)

    def router(self, mp, sm):
        self.rep(mp + ".gate.weight", sm + ".gate.weight")
        if not self.lay.vllm or self.cfg.get("topk_method") == "noaux_tc":
            self.rep(mp + ".gate.e_score_correction_bias", sm + ".gate.e_score_correction_bias")

    def kv_b(self, da, sa, T, r):
        """trtllm: kv_b_proj [H*(nope+v), R] -> kv_b_proj.weight, k_b_proj_trans, v_b_proj, over
        T attention ranks (T = 1 under attention-DP); FP8 scales -> kv_b_proj.weight_scale,
        k_b_proj_trans_scale, v_b_proj_scale."""
        ck, q = self.ck, self.q
        H, nope, vd, R = self.nh, self.nope, self.vdim, self.R
        Hl = H // T
        h0 = r * Hl
        key = sa + "kv_b_proj.weight"
        w = ck.get(key)
        expect_shape(key, w, (H * (nope + vd), R))
        x = w.data.reshape(H, nope + vd, R)[h0:h0 + Hl]
        kn, vv = x[:, :nope, :], x[:, nope:, :]
        dt = w.dtype
        self.params[da + "kv_b_proj.weight"] = Tensor(dt, np.concatenate(
            [kn.reshape(Hl * nope, R), vv.reshape(Hl * vd, R)], axis=0))
        self.params[da + "k_b_proj_trans"] = Tensor(dt, np.ascontiguousarray(kn.transpose(0, 2, 1)))
        self.params[da + "v_b_proj"] = Tensor(dt, np.ascontiguousarray(vv))
        skey = sa + "kv_b_proj.weight_scale_inv"
        if q.mode == "fp8" and ck.has(skey):
            b0, b1 = q.block
            if nope % b0 or vd % b0 or R % b1:
                raise BadInput("%s: nope/v/R not multiples of the scale block %s" % (skey, [b0, b1]))
            n_s, v_s, R_s = nope // b0, vd // b0, R // b1
            st = ck.get(skey)
            expect_shape(skey, st, (H * (n_s + v_s), R_s))
            if self.trtllm_dequant_kv_b:
                # Current TensorRT-LLM excludes kv_b_proj from FP8 (fp8.md 12.1): weight_dequant of
                # the whole [H*(nope+v), R] weight (f32 product with its block's scale, then BF16
                # round to nearest even; a NaN becomes 0x7fc0), then the same head split.
                sc = np.repeat(np.repeat(st.data.view(np.float32), b0, axis=0), b1, axis=1)
                with np.errstate(invalid="ignore", over="ignore"):
                    f = (E4M3[w.data.astype(np.int64)].astype(np.float32) * sc).astype(np.float32)
                bits = f.view(np.uint32).astype(np.uint64)
                bf = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
                bf = np.where(np.isnan(f), np.uint16(0x7FC0), bf).reshape(H, nope + vd, R)[h0:h0 + Hl]
                kb, vb = bf[:, :nope, :], bf[:, nope:, :]
                self.params[da + "kv_b_proj.weight"] = Tensor("BF16", np.concatenate(
                    [kb.reshape(Hl * nope, R), vb.reshape(Hl * vd, R)], axis=0))
                self.params[da + "k_b_proj_trans"] = Tensor("BF16", np.ascontiguousarray(kb.transpose(0, 2, 1)))
                self.params[da + "v_b_proj"] = Tensor("BF16", np.ascontiguousarray(vb))
                return
            y = st.data.reshape(H, n_s + v_s, R_s)[h0:h0 + Hl]
            ks, vs = y[:, :n_s, :], y[:, n_s:, :]
            self.params[da + "kv_b_proj.weight_scale"] = Tensor(st.dtype, np.concatenate(
                [ks.reshape(Hl * n_s, R_s), vs.reshape(Hl * v_s, R_s)], axis=0))
            self.params[da + "k_b_proj_trans_scale"] = Tensor(
                st.dtype, np.ascontiguousarray(ks.transpose(0, 2, 1)))
            self.params[da + "v_b_proj_scale"] = Tensor(st.dtype, np.ascontiguousarray(vs))


FAMILIES = {
    "LlamaForCausalLM": LlamaBuilder,
    "MistralForCausalLM": LlamaBuilder,
    "Qwen2ForCausalLM": LlamaBuilder,
    "Qwen3ForCausalLM": LlamaBuilder,
    "Qwen3MoeForCausalLM": MoeBuilder,
    "MixtralForCausalLM": MoeBuilder,
    "GPT2LMHeadModel": Gpt2Builder,
    "DeepseekV3ForCausalLM": DeepseekV3Builder,
}

# Families whose reference is written from docs/families/ alone, each in its own module
# (imported when first needed: the modules import this one).
DOC_FAMILIES = {
    "GptOssForCausalLM": ("gpt_oss_reference", "GptOssBuilder"),
    "Llama4ForConditionalGeneration": ("llama4_reference", "Llama4Builder"),
    "Llama4ForCausalLM": ("llama4_reference", "Llama4Builder"),
    "Phi3ForCausalLM": ("phi3_reference", "Phi3Builder"),
    "Glm4MoeForCausalLM": ("glm4_moe_reference", "Glm4MoeBuilder"),
    "Qwen3NextForCausalLM": ("qwen3_next_reference", "Qwen3NextBuilder"),
    "DeepseekV32ForCausalLM": ("deepseek_v32_reference", "DeepseekV32Builder"),
}


def family_builder(arch):
    if arch in FAMILIES:
        return FAMILIES[arch]
    if arch in DOC_FAMILIES:
        import importlib
        module, name = DOC_FAMILIES[arch]
        return getattr(importlib.import_module(module), name)
    return None


def load_config(ckpt_dir):
    path = os.path.join(ckpt_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput("%s: %s" % (path, e))
    # A ModelOpt export's hf_quant_config.json (legacy {"quantization": {...}} or flat): both
    # engines read it as the quantisation config when config.json has none.
    hq = os.path.join(ckpt_dir, "hf_quant_config.json")
    if isinstance(cfg, dict) and "quantization_config" not in cfg and os.path.isfile(hq):
        with open(hq) as f:
            h = json.load(f)
        q = dict(h.get("quantization", h))
        q.pop("producer", None)
        q["quant_method"] = "modelopt"
        cfg["quantization_config"] = q
    if not isinstance(cfg, dict):
        raise BadInput("%s: not a JSON object" % path)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise BadInput("%s: missing architectures[0]" % path)
    return cfg


def expected_params(ckpt_dir, tp_size, tp_rank, ep_size=1, mtp_layers=None, ck=None,
                    target="trtllm", attention_dp=False, gpus_per_node=8, moe_backend=None,
                    pp_size=1, pp_rank=0, pp_partition=None):
    """Return OrderedDict {param_name: Tensor} for one rank of the given target."""
    if ck is None:
        ck = Checkpoint(ckpt_dir)
    cfg = load_config(ck.dir if os.path.isfile(ckpt_dir) else ckpt_dir)
    arch = cfg["architectures"][0]
    cls = family_builder(arch)
    if cls is None:
        raise BadInput("config.json: unsupported architecture %s" % arch)
    lay = Layout(tp_size, tp_rank, ep_size, mtp_layers, target, attention_dp, gpus_per_node, moe_backend,
                 pp_size, pp_rank, pp_partition)
    b = cls(ck, cfg, lay)
    b.arch = arch
    return keep_stage(b.build(), cfg, lay)


# Checkpoint keys that are expected and never loaded.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def unused_keys(ck):
    return [n for n in ck.names() if n not in ck.used and not n.endswith(IGNORED_SUFFIXES)]


def expected_summary(ckpt_dir, tp_size, tp_rank, ep_size=1, mtp_layers=None, **layout):
    """{param_name: (dtype_name, shape, bytes)}; layout: target, attention_dp, gpus_per_node."""
    return {n: (t.dtype, t.shape, t.to_bytes())
            for n, t in expected_params(ckpt_dir, tp_size, tp_rank, ep_size, mtp_layers,
                                        **layout).items()}


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def compare(expected, dump_path):
    """Compare expected {name: Tensor} against a dump file. Returns (lines, n_checked)."""
    dump = SafetensorsFile(dump_path)
    lines = []
    names = sorted(set(expected) | set(dump.entries))
    for name in names:
        if name not in dump.entries:
            lines.append("%s: missing from dump" % name)
            continue
        if name not in expected:
            lines.append("%s: unexpected in dump (%s %s)"
                         % (name, dump.entries[name][0], dump.entries[name][1]))
            continue
        e = expected[name]
        dtype, shape, _, _ = dump.entries[name]
        diffs = []
        if dtype != e.dtype:
            diffs.append("dtype %s, expected %s" % (dtype, e.dtype))
        if tuple(shape) != e.shape:
            diffs.append("shape %s, expected %s" % (list(shape), list(e.shape)))
        eb = e.to_bytes()
        got = dump.get(name).to_bytes()
        if got != eb:
            n = min(len(got), len(eb))
            a = np.frombuffer(got, dtype=np.uint8, count=n)
            b = np.frombuffer(eb, dtype=np.uint8, count=n)
            nz = np.flatnonzero(a != b)
            off = int(nz[0]) if nz.size else n
            if off < n:
                diffs.append("bytes differ at offset %d (got 0x%02x, expected 0x%02x)"
                             % (off, a[off], b[off]))
            else:
                diffs.append("bytes differ at offset %d (length %d, expected %d)"
                             % (off, len(got), len(eb)))
        if diffs:
            lines.append("%s: %s" % (name, "; ".join(diffs)))
    return lines, len(names)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")

    def layout_args(p):
        p.add_argument("--tp-size", type=int, required=True)
        p.add_argument("--tp-rank", type=int, required=True)
        p.add_argument("--ep-size", type=int, default=1)
        p.add_argument("--mtp-layers", type=int, default=None)
        p.add_argument("--target", choices=TARGETS, default="trtllm")
        p.add_argument("--attention-dp", action="store_true")
        p.add_argument("--gpus-per-node", type=int, default=8)
        p.add_argument("--moe-backend", default=None)
        p.add_argument("--pp-size", type=int, default=1)
        p.add_argument("--pp-rank", type=int, default=0)
        p.add_argument("--pp-partition", default=None,
                       type=lambda text: [int(x) for x in text.split(",")])

    pe = sub.add_parser("expect", help="write the expected parameters as safetensors")
    pe.add_argument("ckpt")
    layout_args(pe)
    pe.add_argument("--out", required=True)
    pc = sub.add_parser("check", help="compare a loader dump against the expectation")
    pc.add_argument("ckpt")
    pc.add_argument("dump")
    layout_args(pc)
    pl = sub.add_parser("list", help="print expected names, dtypes and shapes")
    pl.add_argument("ckpt")
    pl.add_argument("--json", action="store_true",
                    help='as an engine parameter list for `wmap plan --expect`: {name: {"shape", "dtype"}}')
    layout_args(pl)
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if not args.cmd:
        ap.print_usage(sys.stderr)
        return 2
    try:
        ck = Checkpoint(args.ckpt)
        exp = expected_params(args.ckpt, args.tp_size, args.tp_rank, args.ep_size, args.mtp_layers,
                              ck=ck, target=args.target, attention_dp=args.attention_dp,
                              gpus_per_node=args.gpus_per_node, moe_backend=args.moe_backend,
                              pp_size=args.pp_size, pp_rank=args.pp_rank,
                              pp_partition=args.pp_partition)
        unused = unused_keys(ck)
        if unused:
            # Informational: a rank legitimately skips other ranks' experts and MTP layers
            # when --mtp-layers 0.
            sys.stderr.write("reference: note: %d checkpoint tensors not read by this rank "
                             "(first: %s)\n" % (len(unused), unused[0]))
        if args.cmd == "expect":
            write_safetensors(args.out, exp)
            print("%d params written to %s" % (len(exp), args.out))
            return 0
        if args.cmd == "list" and args.json:
            print(json.dumps({n: {"shape": list(t.shape), "dtype": t.dtype} for n, t in exp.items()}))
            return 0
        if args.cmd == "list":
            for n in sorted(exp):
                print("%s %s %s" % (n, exp[n].dtype, list(exp[n].shape)))
            return 0
        lines, n = compare(exp, args.dump)
    except BadInput as e:
        sys.stderr.write("reference: error: %s\n" % e)
        return 2
    except OSError as e:
        sys.stderr.write("reference: error: %s\n" % e)
        return 2
    for line in lines:
        print(line)
    print("%d params checked, %d mismatches" % (n, len(lines)))
    return 0 if not lines else 1


if __name__ == "__main__":
    sys.exit(main())
