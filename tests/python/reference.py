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
  reference.py expect CKPT_DIR --tp-size T --tp-rank R [--ep-size P] [--mtp-layers K] --out F
  reference.py check  CKPT_DIR DUMP.safetensors --tp-size T --tp-rank R [--ep-size P] [--mtp-layers K]
  reference.py list   CKPT_DIR --tp-size T --tp-rank R [...]     (names, dtypes, shapes)

Exit codes: 0 ok/identical, 1 mismatches, 2 bad usage or unusable input.

Families: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
GPT2LMHeadModel, Qwen3MoeForCausalLM, MixtralForCausalLM, DeepseekV3ForCausalLM (BF16 and
FP8 block-quantised), plus compressed-tensors NVFP4 weights for the Llama/MoE families.
"""

import argparse
import glob
import json
import os
import struct
import sys
from collections import OrderedDict

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

class Layout:
    def __init__(self, tp_size, tp_rank, ep_size=1, mtp_layers=None):
        if tp_size < 1 or not 0 <= tp_rank < tp_size:
            raise BadInput("bad layout: tp_size=%d tp_rank=%d" % (tp_size, tp_rank))
        if ep_size < 1 or tp_size % ep_size:
            raise BadInput("bad layout: ep_size=%d must divide tp_size=%d" % (ep_size, tp_size))
        if mtp_layers is not None and mtp_layers < 0:
            raise BadInput("bad layout: mtp_layers=%d" % mtp_layers)
        self.T, self.r, self.P, self.mtp = tp_size, tp_rank, ep_size, mtp_layers
        self.moe_tp = tp_size // ep_size
        self.moe_tp_rank = tp_rank // ep_size
        self.moe_ep_rank = tp_rank % ep_size


def ceil_div(a, b):
    return -(-a // b)


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
        method = qc.get("quant_method")
        if method == "fp8":
            self.mode = "fp8"
            bs = qc.get("weight_block_size") or [128, 128]
            self.block = (int(bs[0]), int(bs[1]))
        elif method == "compressed-tensors":
            # NVFP4 linears are recognised per linear by their `weight_packed` key.
            self.mode = "nvfp4"


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


def load_linear(ck, q, prefix, strict_global=True, with_bias=False):
    """Read the tensors of linear `prefix` (e.g. model.layers.0.self_attn.q_proj)."""
    parts = OrderedDict()
    if q.mode == "nvfp4" and ck.has(prefix + ".weight_packed"):
        if ck.has(prefix + ".weight"):
            raise BadInput("%s.weight_packed renames onto existing key %s.weight" % (prefix, prefix))
        parts["weight"] = (prefix + ".weight_packed", ck.get(prefix + ".weight_packed"))
        parts["weight_scale"] = (prefix + ".weight_scale", ck.get(prefix + ".weight_scale"))
        for src, dst in (("weight_global_scale", "weight_scale_2"), ("input_global_scale", "input_scale")):
            if ck.has(prefix + "." + src):
                if ck.has(prefix + "." + dst):
                    raise BadInput("%s.%s renames onto existing key %s.%s" % (prefix, src, prefix, dst))
                key = prefix + "." + src
                parts[dst] = (key, invert_global_scale(key, ck.get(key), strict_global))
    else:
        parts["weight"] = (prefix + ".weight", ck.get(prefix + ".weight"))
        if q.mode == "fp8" and ck.has(prefix + ".weight_scale_inv"):
            parts["weight_scale_inv"] = (prefix + ".weight_scale_inv", ck.get(prefix + ".weight_scale_inv"))
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


def fuse(pieces, names, what):
    """Concatenate along dim 0 the parts of several split linears into one parameter.
    Global scales (weight_scale_2 / input_scale) must be equal across sources and are kept once."""
    out = OrderedDict()
    suffixes = list(pieces[0].keys())
    for p, n in zip(pieces, names):
        if list(p.keys()) != suffixes:
            raise BadInput("%s: sources %s carry different tensor sets" % (what, ", ".join(names)))
    for s in suffixes:
        ts = [p[s] for p in pieces]
        if s in ("weight_scale_2", "input_scale"):
            first = ts[0].to_bytes()
            for t, n in zip(ts[1:], names[1:]):
                if t.to_bytes() != first or t.shape != ts[0].shape:
                    raise BadInput("%s: global %s differs between %s and %s"
                                   % (what, s, names[0], n))
            out[s] = ts[0]
        else:
            out[s] = concat(ts, 0, what)
    return out


def emit(params, name, parts):
    """Add parameter `name` (e.g. ...qkv_proj) with its parts: weight -> name.weight, etc."""
    for suffix, t in parts.items():
        params[name + "." + suffix] = t


# --------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------

class Builder:
    def __init__(self, ck, cfg, lay):
        self.ck, self.cfg, self.lay = ck, cfg, lay
        self.q = Quant(cfg)
        self.params = OrderedDict()

    # small wrappers
    def rep(self, dst, src=None):
        self.params[dst] = self.ck.get(src or dst)

    def vocab(self, dst, src=None):
        self.params[dst] = vocab_split(self.ck.get(src or dst), self.lay.T, self.lay.r)

    def col(self, dst, src=None):
        self.params[dst] = col_split(self.ck.get(src or dst), self.lay.T, self.lay.r)

    def row(self, dst, src=None):
        self.params[dst] = row_split(self.ck.get(src or dst), self.lay.T, self.lay.r)

    # Llama-style gated MLP: gate_up_proj = concat(gate rows r, up rows r); down row-parallel.
    def gated_mlp(self, dst_pre, src_pre, bias=False, T=None, r=None):
        T = self.lay.T if T is None else T
        r = self.lay.r if r is None else r
        ck, q = self.ck, self.q
        g = load_linear(ck, q, src_pre + ".gate_proj", with_bias=bias)
        u = load_linear(ck, q, src_pre + ".up_proj", with_bias=bias)
        d = load_linear(ck, q, src_pre + ".down_proj", with_bias=bias)
        emit(self.params, dst_pre + ".gate_up_proj",
             fuse([split_linear(g, q, 0, T, r), split_linear(u, q, 0, T, r)],
                  [g.name, u.name], dst_pre + ".gate_up_proj"))
        emit(self.params, dst_pre + ".down_proj", split_linear(d, q, 1, T, r))

    # Routed experts: experts.backend.w3_w1_weight / w2_weight (+ scales).
    def experts(self, dst_pre, src_pre, E, inter, H):
        lay, ck, q = self.lay, self.ck, self.q
        if E % lay.P:
            raise BadInput("%d experts not divisible by ep_size %d" % (E, lay.P))
        per = E // lay.P
        first = lay.moe_ep_rank * per
        w31, w2 = [], []
        for j in range(first, first + per):
            ep = "%s.%d" % (src_pre, j)
            g = load_linear(ck, q, ep + ".gate_proj", strict_global=False)
            u = load_linear(ck, q, ep + ".up_proj", strict_global=False)
            d = load_linear(ck, q, ep + ".down_proj", strict_global=False)
            expect_shape(g.parts["weight"][0], g.parts["weight"][1],
                         (inter, g.parts["weight"][1].shape[1]))
            w31.append(fuse([split_linear(u, q, 0, lay.moe_tp, lay.moe_tp_rank),
                             split_linear(g, q, 0, lay.moe_tp, lay.moe_tp_rank)],
                            [u.name, g.name], dst_pre + ".w3_w1"))
            w2.append(split_linear(d, q, 1, lay.moe_tp, lay.moe_tp_rank))
        for label, lst in (("w3_w1", w31), ("w2", w2)):
            for suffix in lst[0]:
                name = "%s.%s_%s" % (dst_pre, label, suffix)
                self.params[name] = stack([x[suffix] for x in lst], name)


class LlamaBuilder(Builder):
    """Llama, Mistral, Qwen2, Qwen3 (+ the MoE families via MoeBuilder)."""

    arch = None

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

    def attention(self, i):
        ck, q, cfg, lay = self.ck, self.q, self.cfg, self.lay
        src = "model.layers.%d.self_attn" % i
        arch = self.arch
        qkv_bias = arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias"))
        qp = load_linear(ck, q, src + ".q_proj", with_bias=qkv_bias)
        kp = load_linear(ck, q, src + ".k_proj", with_bias=qkv_bias)
        vp = load_linear(ck, q, src + ".v_proj", with_bias=qkv_bias)
        expect_shape(qp.parts["weight"][0], qp.parts["weight"][1],
                     (self.nh * self.hd, qp.parts["weight"][1].shape[1]))
        ka, kb = self.kv_rows(kp.parts["weight"][1], kp.parts["weight"][0])
        va, vb = self.kv_rows(vp.parts["weight"][1], vp.parts["weight"][0])
        emit(self.params, src + ".qkv_proj",
             fuse([split_linear(qp, q, 0, lay.T, lay.r), rows_linear(kp, q, ka, kb),
                   rows_linear(vp, q, va, vb)],
                  [qp.name, kp.name, vp.name], src + ".qkv_proj"))
        if arch == "Qwen3ForCausalLM" or arch == "Qwen3MoeForCausalLM":
            self.rep(src + ".q_norm.weight")
            self.rep(src + ".k_norm.weight")
        op = load_linear(ck, q, src + ".o_proj", with_bias=bool(cfg.get("attention_bias"))
                         and arch != "Qwen2ForCausalLM")
        emit(self.params, src + ".o_proj", split_linear(op, q, 1, lay.T, lay.r))

    def mlp(self, i):
        pre = "model.layers.%d.mlp" % i
        self.gated_mlp(pre, pre, bias=bool(self.cfg.get("mlp_bias")))

    def build(self):
        self.dims()
        self.vocab("model.embed_tokens.weight")
        for i in range(self.L):
            pre = "model.layers.%d" % i
            self.rep(pre + ".input_layernorm.weight")
            self.attention(i)
            self.rep(pre + ".post_attention_layernorm.weight")
            self.mlp(i)
        self.rep("model.norm.weight")
        if self.cfg.get("tie_word_embeddings"):
            self.params["lm_head.weight"] = self.params["model.embed_tokens.weight"]
        else:
            self.vocab("lm_head.weight")
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
            self.rep(pre + ".gate.weight", src + ".gate.weight")
            view = _RenamedCheckpoint(ck, {
                "%s.experts.%d.%s" % (pre, j, new): "%s.experts.%d.%s" % (src, j, old)
                for j in range(E)
                for new, old in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))})
            saved = self.ck
            self.ck = view
            try:
                self.experts(pre + ".experts.backend", pre + ".experts", E, inter, self.H)
            finally:
                self.ck = saved
        else:
            E = need(cfg, "num_experts")
            inter = need(cfg, "moe_intermediate_size")
            self.rep(pre + ".gate.weight")
            self.experts(pre + ".experts.backend", pre + ".experts", E, inter, self.H)


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
    def build(self):
        cfg, lay = self.cfg, self.lay
        self.H = need(cfg, "hidden_size")
        self.nh = need(cfg, "num_attention_heads")
        self.L = need(cfg, "num_hidden_layers")
        self.nope = need(cfg, "qk_nope_head_dim")
        self.vdim = need(cfg, "v_head_dim")
        self.R = need(cfg, "kv_lora_rank")
        if self.nh % lay.T:
            raise BadInput("num_attention_heads %d not divisible by tp_size %d" % (self.nh, lay.T))
        n_mtp = cfg_get(cfg, "num_nextn_predict_layers", 0)
        K = n_mtp if lay.mtp is None else lay.mtp
        if K > 0 and n_mtp <= 0:
            raise BadInput("--mtp-layers %d but the checkpoint has no MTP layer" % K)

        self.vocab("model.embed_tokens.weight")
        for i in range(self.L):
            self.layer(i, i)
        for k in range(K):
            src_i = self.L + k % n_mtp
            dst_i = self.L + k
            d = "model.layers.%d." % dst_i
            s = "model.layers.%d." % src_i
            if self.ck.has(s + "embed_tokens.weight"):
                self.vocab(d + "embed_tokens.weight", s + "embed_tokens.weight")
            else:
                sys.stderr.write("reference: note: %sembed_tokens.weight absent; not a parameter\n" % s)
            self.rep(d + "enorm.weight", s + "enorm.weight")
            self.rep(d + "hnorm.weight", s + "hnorm.weight")
            eh = load_linear(self.ck, self.q, s + "eh_proj")
            emit(self.params, d + "eh_proj", {k2: v[1] for k2, v in eh.parts.items()})
            self.rep(d + "shared_head.norm.weight", s + "shared_head.norm.weight")
            if self.ck.has(s + "shared_head.head.weight"):
                self.vocab(d + "shared_head.head.weight", s + "shared_head.head.weight")
            else:
                sys.stderr.write("reference: note: %sshared_head.head.weight absent; not a parameter\n" % s)
            self.layer(dst_i, src_i)
        self.rep("model.norm.weight")
        if self.cfg.get("tie_word_embeddings"):
            self.params["lm_head.weight"] = self.params["model.embed_tokens.weight"]
        else:
            self.vocab("lm_head.weight")
        return self.params

    def is_moe(self, i):
        cfg = self.cfg
        return (cfg.get("n_routed_experts") is not None
                and i >= cfg_get(cfg, "first_k_dense_replace", 0)
                and i % cfg_get(cfg, "moe_layer_freq", 1) == 0)

    def layer(self, dst_i, src_i):
        ck, q, lay, cfg = self.ck, self.q, self.lay, self.cfg
        d = "model.layers.%d." % dst_i
        s = "model.layers.%d." % src_i
        self.rep(d + "input_layernorm.weight", s + "input_layernorm.weight")
        self.rep(d + "post_attention_layernorm.weight", s + "post_attention_layernorm.weight")
        sa, da = s + "self_attn.", d + "self_attn."
        kva = load_linear(ck, q, sa + "kv_a_proj_with_mqa")
        if cfg.get("q_lora_rank") is None:
            # V2-Lite style: q_proj column-parallel; kv_a_proj_with_mqa alone, replicated.
            emit(self.params, da + "q_proj",
                 split_linear(load_linear(ck, q, sa + "q_proj"), q, 0, lay.T, lay.r))
            emit(self.params, da + "kv_a_proj_with_mqa", {k: v[1] for k, v in kva.parts.items()})
        else:
            # fused_a = concat(q_a_proj, kv_a_proj_with_mqa), replicated.
            qa = load_linear(ck, q, sa + "q_a_proj")
            emit(self.params, da + "fused_a",
                 fuse([{k: v[1] for k, v in qa.parts.items()}, {k: v[1] for k, v in kva.parts.items()}],
                      [qa.name, kva.name], da + "fused_a"))
            self.rep(da + "q_a_layernorm.weight", sa + "q_a_layernorm.weight")
            emit(self.params, da + "q_b_proj",
                 split_linear(load_linear(ck, q, sa + "q_b_proj"), q, 0, lay.T, lay.r))
        self.rep(da + "kv_a_layernorm.weight", sa + "kv_a_layernorm.weight")
        emit(self.params, da + "o_proj",
             split_linear(load_linear(ck, q, sa + "o_proj"), q, 1, lay.T, lay.r))
        self.kv_b(da, sa)
        mp, sm = d + "mlp", s + "mlp"
        if not self.is_moe(src_i):
            self.gated_mlp(mp, sm)
            return
        self.rep(mp + ".gate.weight", sm + ".gate.weight")
        self.rep(mp + ".gate.e_score_correction_bias", sm + ".gate.e_score_correction_bias")
        if cfg_get(cfg, "n_shared_experts", 0):
            self.gated_mlp(mp + ".shared_experts", sm + ".shared_experts")
        E = need(cfg, "n_routed_experts")
        inter = need(cfg, "moe_intermediate_size")
        self.experts(mp + ".experts.backend", sm + ".experts", E, inter, self.H)

    def kv_b(self, da, sa):
        """kv_b_proj [H*(nope+v), R] -> kv_b_proj.weight, k_b_proj_trans, v_b_proj (+ scales)."""
        ck, q, lay = self.ck, self.q, self.lay
        H, nope, vd, R = self.nh, self.nope, self.vdim, self.R
        Hl = H // lay.T
        h0 = lay.r * Hl
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
            y = st.data.reshape(H, n_s + v_s, R_s)[h0:h0 + Hl]
            ks, vs = y[:, :n_s, :], y[:, n_s:, :]
            self.params[da + "kv_b_proj.weight_scale_inv"] = Tensor(st.dtype, np.concatenate(
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


def load_config(ckpt_dir):
    path = os.path.join(ckpt_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput("%s: %s" % (path, e))
    if not isinstance(cfg, dict):
        raise BadInput("%s: not a JSON object" % path)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise BadInput("%s: missing architectures[0]" % path)
    return cfg


def expected_params(ckpt_dir, tp_size, tp_rank, ep_size=1, mtp_layers=None, ck=None):
    """Return OrderedDict {param_name: Tensor} for one rank."""
    if ck is None:
        ck = Checkpoint(ckpt_dir)
    cfg = load_config(ck.dir if os.path.isfile(ckpt_dir) else ckpt_dir)
    arch = cfg["architectures"][0]
    cls = FAMILIES.get(arch)
    if cls is None:
        raise BadInput("config.json: unsupported architecture %s" % arch)
    lay = Layout(tp_size, tp_rank, ep_size, mtp_layers)
    b = cls(ck, cfg, lay)
    b.arch = arch
    params = b.build()
    return params


# Checkpoint keys that are expected and never loaded.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def unused_keys(ck):
    return [n for n in ck.names() if n not in ck.used and not n.endswith(IGNORED_SUFFIXES)]


def expected_summary(ckpt_dir, tp_size, tp_rank, ep_size=1, mtp_layers=None):
    """{param_name: (dtype_name, shape, bytes)}"""
    return {n: (t.dtype, t.shape, t.to_bytes())
            for n, t in expected_params(ckpt_dir, tp_size, tp_rank, ep_size, mtp_layers).items()}


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
                              ck=ck)
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
