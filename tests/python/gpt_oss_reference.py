#!/usr/bin/env python3
"""Independent numpy reference for gpt-oss (GptOssForCausalLM, HF MXFP4 experts).

Written from docs/families/gpt-oss.md alone (sections 1, 3, 4 "cutlass", 5), without reading
the C++ loader.  `GptOssBuilder(ck, cfg, lay).build()` returns, for one rank, the
OrderedDict {param_name: reference.Tensor} the engine holds after its own `load_weights`:

  target vllm   -> section 3, MoE backend "triton"  (the only vLLM backend served here)
  target trtllm -> section 4, MoE backend "cutlass" (W4A8MXFP4MXFP8CutlassFusedMoEMethod:
                   MXFP4WeightCutlassFusedMoEMethod's parameters and `fake_input_scale` = 1.0,
                   which its load_quant_scales fills)

Everything is a byte copy of the checkpoint (raw unsigned ints of the item size), plus zero
padding, except TRT-LLM's `attn.sinks`, widened BF16 -> F32 exactly (bits << 16), and its
`fake_input_scale` (F32 1.0, bits 0x3F800000).
I64 / I32 parameters (TRT-LLM cutlass experts) hold the little-endian bytes of the uint8
data, represented as uint64 / uint32 arrays.

Plug into reference.py with FAMILIES["GptOssForCausalLM"] = GptOssBuilder
(the module expects tests/python on sys.path).
"""

from collections import OrderedDict
from math import lcm

import numpy as np

from reference import BadInput, Tensor, ceil_div, need, shard_range, vllm_vocab_split, vocab_split

__all__ = [
    "GptOssBuilder",
    "rup",
    "get_weight_alignment",
    "vllm_moe_rows",
    "vllm_triton_padded_sizes",
    "cutlass_sizes",
    "block_scale_interleave_index",
    "block_scale_interleave",
    "deinterleave",
    "pad_axis",
    "bf16_to_f32_bits",
]

VLLM_MOE_BACKENDS = ("triton",)
TRTLLM_MOE_BACKENDS = ("cutlass",)


# --------------------------------------------------------------------------------------
# Small arithmetic helpers (notation of the document's header)
# --------------------------------------------------------------------------------------

def rup(x, m):
    """rup(x, m): round x up to a multiple of m."""
    return ceil_div(x, m) * m


def pad_axis(a, axis, multiple):
    """Zero-pad numpy array `a` along `axis` to a multiple of `multiple` (at the end)."""
    n = a.shape[axis]
    extra = rup(n, multiple) - n
    if extra == 0:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths)


def pad_axis_to(a, axis, size):
    """Zero-pad numpy array `a` along `axis` to exactly `size` (>= current)."""
    n = a.shape[axis]
    if n == size:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, size - n)
    return np.pad(a, widths)


def deinterleave(a, axis=1):
    """Section 1 "Gate/up interleave": row 2j is gate j, row 2j+1 is up j.
    Returns (gate, up) along `axis`."""
    idx_g = [slice(None)] * a.ndim
    idx_u = [slice(None)] * a.ndim
    idx_g[axis] = slice(0, None, 2)
    idx_u[axis] = slice(1, None, 2)
    return a[tuple(idx_g)], a[tuple(idx_u)]


def bf16_to_f32_bits(u16):
    """Exact BF16 -> F32 widening on raw bits: the 16 BF16 bits become the top half."""
    return (np.asarray(u16).astype(np.uint32) << np.uint32(16)).astype(np.uint32)


def bytes_as(a_u8, le_dtype):
    """View the last axis of a uint8 array as little-endian words (`<u8` / `<u4`)."""
    a = np.ascontiguousarray(a_u8, dtype=np.uint8)
    return a.view(np.dtype(le_dtype))


# --------------------------------------------------------------------------------------
# Section 3 (vLLM, TRITON MoE backend) helpers
# --------------------------------------------------------------------------------------

def vllm_moe_rows(I, T, r):
    """Section 3: rows of I held by MoE tp rank r of T.  Ir = cdiv(I/32, T)*32,
    s = r*Ir, e = min((r+1)*Ir, I); a rank past I gets an empty range (returned as (I, I))."""
    Ir = ceil_div(I // 32, T) * 32
    s = min(r * Ir, I)
    e = min((r + 1) * Ir, I)
    return s, e


def vllm_triton_padded_sizes(H, I, moe_tp):
    """Section 3 "Padding": Ipp = I / moe_tp, TRITON backend -> (Hp, Ip) = (H, rup(Ipp, 64))."""
    Ipp = I // moe_tp
    return H, rup(Ipp, 64)


# --------------------------------------------------------------------------------------
# Section 4 (TRT-LLM, cutlass) helpers
# --------------------------------------------------------------------------------------

def get_weight_alignment(weight_alignment, scaling_vector_size, tp_size, shard_dim_size):
    """Section 4 cutlass, `_get_weight_alignment`: A0 = lcm(wa, svs, Tm); if
    (rup(n, A0) / Tm) % wa != 0 then A = wa * cdiv(rup(n, A0) / Tm, wa) * Tm, else A = A0."""
    A0 = lcm(weight_alignment, scaling_vector_size, tp_size)
    per_rank = rup(shard_dim_size, A0) // tp_size
    if per_rank % weight_alignment != 0:
        return weight_alignment * ceil_div(per_rank, weight_alignment) * tp_size
    return A0


def cutlass_sizes(H, I, Tm):
    """Section 4 cutlass sizes for MoE tp size Tm.

    A       weight alignment of the I axis (pad gate/up rows and down columns to it)
    I_pad   rup(I, A), the padded I before the split
    shard   I_pad / Tm, rows of I per rank after the ceil split
    Ipad    create_weights' rup(I / Tm, 128) (the parameter's I size; must equal shard)
    Hp      rup(H, 128)
    A2      _get_weight_alignment(128, 32, Tm, I/32) (down scales' column alignment, x32)
    scale_shard  rup(I/32, A2/32) / Tm (must equal Ipad/32)
    """
    A = get_weight_alignment(128, 32, Tm, I)
    I_pad = rup(I, A)
    shard = ceil_div(I_pad, Tm)
    Ipad = rup(I // Tm, 128)
    Hp = rup(H, 128)
    A2 = get_weight_alignment(128, 32, Tm, I // 32)
    scale_shard = ceil_div(rup(I // 32, A2 // 32), Tm)
    return {"A": A, "I_pad": I_pad, "shard": shard, "Ipad": Ipad, "Hp": Hp,
            "A2": A2, "scale_shard": scale_shard}


def block_scale_interleave_index(rows, cols):
    """Section 4 cutlass, `block_scale_interleave` (128x4 swizzle): destination byte offset
    of byte (m, k) of a [rows, cols] matrix, rows a multiple of 128, cols of 4:
        k%4 + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + (m/128)*128*rup(cols,4)."""
    m = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(cols, dtype=np.int64)[None, :]
    return (k % 4 + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4
            + (m // 128) * 128 * rup(cols, 4))


def block_scale_interleave(x):
    """Apply the 128x4 swizzle to the last two axes of uint8 array x (zero-padding rows to
    128 and columns to 4 first).  Returns uint8 [..., rup(rows,128), rup(cols,4)] whose
    row-major bytes are the swizzled buffer."""
    x = pad_axis(pad_axis(np.asarray(x, dtype=np.uint8), -2, 128), -1, 4)
    rows, cols = x.shape[-2], x.shape[-1]
    lead = x.shape[:-2]
    dst = block_scale_interleave_index(rows, cols).ravel()
    out = np.zeros(lead + (rows * cols,), dtype=np.uint8)
    out[..., dst] = x.reshape(lead + (rows * cols,))
    return out.reshape(lead + (rows, cols))


# --------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------

class GptOssBuilder:
    """Per-rank parameters of GptOssForCausalLM (HF MXFP4 checkpoint) for vllm / trtllm."""

    arch = "GptOssForCausalLM"

    def __init__(self, ck, cfg, lay):
        self.ck, self.cfg, self.lay = ck, cfg, lay
        self.params = OrderedDict()

    # ---- checkpoint access with shape / dtype checks (section 1) ----------------------

    def get(self, name, shape, dtypes):
        if not self.ck.has(name):
            raise BadInput("gpt-oss: missing checkpoint tensor %s" % name)
        dt, sh = self.ck.dtype_shape(name)
        if tuple(sh) != tuple(shape):
            raise BadInput("gpt-oss: checkpoint tensor %s has shape %s, config implies %s"
                           % (name, list(sh), list(shape)))
        if dt not in dtypes:
            raise BadInput("gpt-oss: checkpoint tensor %s is %s, expected %s (the reference "
                           "only copies bytes)" % (name, dt, "/".join(dtypes)))
        return self.ck.get(name)

    def bf16(self, name, shape):
        # Section 1: non-expert tensors and expert biases are BF16 (the engine params are
        # BF16 too, so a byte copy is exact only for a BF16 source).
        return self.get(name, shape, ("BF16",))

    def u8(self, name, shape):
        return self.get(name, shape, ("U8",))

    def put(self, name, dtype, data):
        self.params[name] = Tensor(dtype, data)

    # ---- config and layout checks ----------------------------------------------------

    def dims(self):
        cfg, lay = self.cfg, self.lay
        self.H = need(cfg, "hidden_size")
        self.I = need(cfg, "intermediate_size")
        self.E = need(cfg, "num_local_experts")
        self.nh = need(cfg, "num_attention_heads")
        self.nkv = need(cfg, "num_key_value_heads")
        self.hd = need(cfg, "head_dim")
        self.V = need(cfg, "vocab_size")
        self.L = need(cfg, "num_hidden_layers")
        qc = cfg.get("quantization_config") or {}
        # Section 2: the MXFP4 path runs when quant_method is "mxfp4" (2026 vLLM normalises
        # it to "gpt_oss_mxfp4"; both spellings accepted).
        if qc.get("quant_method") not in ("mxfp4", "gpt_oss_mxfp4"):
            raise BadInput("gpt-oss: quantization_config.quant_method %r is not mxfp4 (only the "
                           "HF MXFP4 checkpoint is covered)" % qc.get("quant_method"))
        if cfg.get("tie_word_embeddings"):
            raise BadInput("gpt-oss: tie_word_embeddings true is not covered (section 1: untied)")
        if self.H % 32 or self.I % 32:
            raise BadInput("gpt-oss: hidden_size %d and intermediate_size %d must be multiples "
                           "of the MXFP4 block 32" % (self.H, self.I))
        if lay.mtp:
            raise BadInput("gpt-oss: the model has no MTP layer (--mtp-layers %d)" % lay.mtp)
        backend = lay.moe_backend
        if lay.vllm:
            if backend is not None and str(backend).lower() not in VLLM_MOE_BACKENDS:
                raise BadInput("gpt-oss: vLLM MoE backend %r is not served (served: triton)" % backend)
        else:
            if backend is not None and str(backend).lower() not in TRTLLM_MOE_BACKENDS:
                raise BadInput("gpt-oss: TensorRT-LLM MoE backend %r is not served (served: cutlass)"
                               % backend)

    # ---- build ------------------------------------------------------------------------

    def build(self):
        self.dims()
        if self.lay.vllm:
            self.build_vllm()
        else:
            self.build_trtllm()
        return self.params

    # ================================================================================
    # Section 3: vLLM
    # ================================================================================

    def build_vllm(self):
        lay, H, V = self.lay, self.H, self.V
        T, r = lay.T, lay.r
        if self.nh % T:
            raise BadInput("gpt-oss: num_attention_heads %d not divisible by tp_size %d" % (self.nh, T))
        if self.nkv >= T and self.nkv % T:
            raise BadInput("gpt-oss: num_key_value_heads %d not divisible by tp_size %d" % (self.nkv, T))
        if self.nkv < T and T % self.nkv:
            raise BadInput("gpt-oss: tp_size %d not a multiple of num_key_value_heads %d" % (T, self.nkv))
        # Section 3 "Padding": MLPBlock asserts I % world_size == 0 (applied under EP too).
        if self.I % T:
            raise BadInput("gpt-oss: intermediate_size %d not divisible by tp_size %d (vLLM "
                           "MLPBlock asserts it)" % (self.I, T))
        # Vocabulary (P1): Vp = rup(V, 64), Vp/T rows per rank.
        self.params["model.embedding.weight"] = vllm_vocab_split(
            self.bf16("model.embed_tokens.weight", (V, H)), T, r, "model.embed_tokens.weight")
        for i in range(self.L):
            self.vllm_layer(i)
        self.params["model.norm.weight"] = self.bf16("model.norm.weight", (H,))
        self.params["lm_head.weight"] = vllm_vocab_split(
            self.bf16("lm_head.weight", (V, H)), T, r, "lm_head.weight")

    def vllm_kv_heads(self):
        """Section 3 qkv row: K/V heads split when nkv >= T, else head r // (T/nkv)."""
        T, r, nkv = self.lay.T, self.lay.r, self.nkv
        if nkv >= T:
            per = nkv // T
            return r * per, per
        return r // (T // nkv), 1

    def vllm_layer(self, i):
        lay, H, hd, nh, nkv, E, I = self.lay, self.H, self.hd, self.nh, self.nkv, self.E, self.I
        T, r = lay.T, lay.r
        s = "model.layers.%d." % i
        d = "model.layers.%d." % i
        self.params[d + "input_layernorm.weight"] = self.bf16(s + "input_layernorm.weight", (H,))
        self.params[d + "post_attention_layernorm.weight"] = self.bf16(
            s + "post_attention_layernorm.weight", (H,))

        # attention: qkv_proj = cat(q heads of rank, k heads, v heads) (P5), weight and bias
        sa = s + "self_attn."
        qh = nh // T
        k0, kn = self.vllm_kv_heads()
        for suf, tail in (("weight", (H,)), ("bias", ())):
            q = self.bf16(sa + "q_proj." + suf, (nh * hd,) + tail)
            k = self.bf16(sa + "k_proj." + suf, (nkv * hd,) + tail)
            v = self.bf16(sa + "v_proj." + suf, (nkv * hd,) + tail)
            qkv = np.concatenate([q.data[r * qh * hd:(r + 1) * qh * hd],
                                  k.data[k0 * hd:(k0 + kn) * hd],
                                  v.data[k0 * hd:(k0 + kn) * hd]], axis=0)
            self.put(d + "attn.qkv_proj." + suf, "BF16", qkv)
        # o_proj: columns of this rank's heads; bias full (P3)
        o = self.bf16(sa + "o_proj.weight", (H, nh * hd))
        self.put(d + "attn.o_proj.weight", "BF16", o.data[:, r * qh * hd:(r + 1) * qh * hd])
        self.params[d + "attn.o_proj.bias"] = self.bf16(sa + "o_proj.bias", (H,))
        # sinks: narrow(0, r*nh/T, nh/T), BF16
        sk = self.bf16(sa + "sinks", (nh,))
        self.put(d + "attn.sinks", "BF16", sk.data[r * qh:(r + 1) * qh])
        # router: full
        self.params[d + "mlp.router.weight"] = self.bf16(s + "mlp.router.weight", (E, H))
        self.params[d + "mlp.router.bias"] = self.bf16(s + "mlp.router.bias", (E,))
        self.vllm_experts(s + "mlp.experts.", d + "mlp.experts.")

    def vllm_experts(self, src, dst):
        """Section 3 experts, TRITON backend: narrowed data in the top-left corner of
        zero-filled padded params; gate/up interleave kept."""
        lay, H, I, E = self.lay, self.H, self.I, self.E
        T, r, P = lay.T, lay.r, lay.P
        if P == 1:
            # TP: all experts, I split over T (MoE tp rank = r with DP = PCP = 1)
            e0, El, mT = 0, E, T
            s, e = vllm_moe_rows(I, T, r)
        else:
            # EP (P == T): experts [r*E/P, (r+1)*E/P), all of I, MoE tp 1
            if E % P:
                raise BadInput("gpt-oss: %d experts not divisible by ep_size %d" % (E, P))
            El = E // P
            e0, mT = r * El, 1
            s, e = 0, I
        Hp, Ip = vllm_triton_padded_sizes(H, I, mT)
        n = e - s
        if n > Ip:
            raise BadInput("gpt-oss: vLLM rank %d holds %d rows of I, more than the padded %d"
                           % (r, n, Ip))
        ex = slice(e0, e0 + El)

        gu_b = self.u8(src + "gate_up_proj_blocks", (E, 2 * I, H // 32, 16))
        gu_s = self.u8(src + "gate_up_proj_scales", (E, 2 * I, H // 32))
        gu_bias = self.bf16(src + "gate_up_proj_bias", (E, 2 * I))
        dn_b = self.u8(src + "down_proj_blocks", (E, H, I // 32, 16))
        dn_s = self.u8(src + "down_proj_scales", (E, H, I // 32))
        dn_bias = self.bf16(src + "down_proj_bias", (E, H))

        # w13_weight U8 [El, 2Ip, Hp/2]: blocks viewed [E, 2I, H/2], rows [2s, 2e) -> top-left
        w13 = np.zeros((El, 2 * Ip, Hp // 2), dtype=np.uint8)
        w13[:, :2 * n, :H // 2] = gu_b.data.reshape(E, 2 * I, H // 2)[ex, 2 * s:2 * e]
        self.put(dst + "w13_weight", "U8", w13)
        # w13_weight_scale U8 [El, 2Ip, Hp/32]: same rows of the scales
        w13s = np.zeros((El, 2 * Ip, Hp // 32), dtype=np.uint8)
        w13s[:, :2 * n, :H // 32] = gu_s.data[ex, 2 * s:2 * e]
        self.put(dst + "w13_weight_scale", "U8", w13s)
        # w13_bias BF16 [El, 2Ip]: same rows
        w13bias = np.zeros((El, 2 * Ip), dtype=gu_bias.data.dtype)
        w13bias[:, :2 * n] = gu_bias.data[ex, 2 * s:2 * e]
        self.put(dst + "w13_bias", "BF16", w13bias)
        # w2_weight U8 [El, Hp, Ip/2]: blocks viewed [E, H, I/2], cols [s/2, e/2)
        w2 = np.zeros((El, Hp, Ip // 2), dtype=np.uint8)
        w2[:, :H, :n // 2] = dn_b.data.reshape(E, H, I // 2)[ex, :, s // 2:e // 2]
        self.put(dst + "w2_weight", "U8", w2)
        # w2_weight_scale U8 [El, Hp, Ip/32]: cols [s/32, e/32)
        w2s = np.zeros((El, Hp, Ip // 32), dtype=np.uint8)
        w2s[:, :H, :n // 32] = dn_s.data[ex, :, s // 32:e // 32]
        self.put(dst + "w2_weight_scale", "U8", w2s)
        # w2_bias BF16 [El, Hp]: TP -> full on rank 0, zeros elsewhere; EP -> rank's experts
        w2bias = np.zeros((El, Hp), dtype=dn_bias.data.dtype)
        if P > 1 or r == 0:
            w2bias[:, :H] = dn_bias.data[ex]
        self.put(dst + "w2_bias", "BF16", w2bias)

    # ================================================================================
    # Section 4: TRT-LLM (cutlass)
    # ================================================================================

    def build_trtllm(self):
        lay, H, V = self.lay, self.H, self.V
        aT = lay.aT  # attention / vocab tp (1 under attention DP)
        if self.nh % aT:
            raise BadInput("gpt-oss: num_attention_heads %d not divisible by tp_size %d" % (self.nh, aT))
        if aT > self.nkv or self.nkv % aT:
            raise BadInput("TensorRT-LLM does not duplicate KV heads for gpt-oss "
                           "(num_key_value_heads %d, tp_size %d)" % (self.nkv, aT))
        if self.E % lay.P:
            raise BadInput("gpt-oss: %d experts not divisible by ep_size %d" % (self.E, lay.P))
        # Vocabulary: ceil(V/T) rows, last block zero-padded (LMHead COLUMN);
        # attention DP: full [V, H] (vocab_split with T = 1).
        self.params["model.embedding.weight"] = vocab_split(
            self.bf16("model.embed_tokens.weight", (V, H)), aT, lay.ar)
        for i in range(self.L):
            self.trtllm_layer(i)
        self.params["model.norm.weight"] = self.bf16("model.norm.weight", (H,))
        self.params["lm_head.weight"] = vocab_split(self.bf16("lm_head.weight", (V, H)), aT, lay.ar)

    def trtllm_layer(self, i):
        lay, H, hd, nh, nkv, E = self.lay, self.H, self.hd, self.nh, self.nkv, self.E
        aT, ar = lay.aT, lay.ar
        s = "model.layers.%d." % i
        d = "model.block.%d." % i
        # norms: two parameter names each, same source; next_layer_layernorm not loaded
        ln1 = self.bf16(s + "input_layernorm.weight", (H,))
        ln2 = self.bf16(s + "post_attention_layernorm.weight", (H,))
        self.params[d + "input_layernorm.weight"] = ln1
        self.params[d + "attn.norm.weight"] = ln1
        self.params[d + "post_attention_layernorm.weight"] = ln2
        self.params[d + "mlp.norm.weight"] = ln2

        # qkv: cat(q, k, v) each ceil-split by rows (load_weights_fused_qkv_helper)
        sa = s + "self_attn."
        for suf, tail in (("weight", (H,)), ("bias", ())):
            parts = []
            for proj, rows in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
                t = self.bf16(sa + proj + "." + suf, (rows,) + tail)
                a, b = shard_range(rows, aT, ar)
                parts.append(t.data[a:b])
            self.put(d + "attn.qkv_proj." + suf, "BF16", np.concatenate(parts, axis=0))
        # o_proj: ROW split of columns; bias full
        o = self.bf16(sa + "o_proj.weight", (H, nh * hd))
        a, b = shard_range(nh * hd, aT, ar)
        self.put(d + "attn.o_proj.weight", "BF16", o.data[:, a:b])
        self.params[d + "attn.o_proj.bias"] = self.bf16(sa + "o_proj.bias", (H,))
        # sinks: heads [r*nh/T, ...), BF16 -> F32 (exact widening)
        sk = self.bf16(sa + "sinks", (nh,))
        a, b = shard_range(nh, aT, ar)
        self.put(d + "attn.sinks", "F32", bf16_to_f32_bits(sk.data[a:b]))
        # router -> mlp.gate, full
        self.params[d + "mlp.gate.weight"] = self.bf16(s + "mlp.router.weight", (E, H))
        self.params[d + "mlp.gate.bias"] = self.bf16(s + "mlp.router.bias", (E,))
        self.trtllm_cutlass_experts(s + "mlp.experts.", d + "mlp.experts.backend.")

    def trtllm_cutlass_experts(self, src, dst):
        """Section 4 MoE common rules + "cutlass" (MXFP4WeightCutlassFusedMoEMethod)."""
        lay, H, I, E = self.lay, self.H, self.I, self.E
        P, Tm, rm = lay.P, lay.moe_tp, lay.moe_tp_rank
        El = E // P
        e0 = lay.moe_ep_rank * El  # contiguous initial_local_expert_ids
        ex = slice(e0, e0 + El)
        z = cutlass_sizes(H, I, Tm)
        A, Ipad, Hp, A2 = z["A"], z["Ipad"], z["Hp"], z["A2"]
        if z["shard"] != Ipad:
            raise BadInput("gpt-oss cutlass: pre-split padding gives %d rows of I per rank, the "
                           "parameter has %d (I %d, moe tp %d)" % (z["shard"], Ipad, I, Tm))
        if z["scale_shard"] != Ipad // 32:
            raise BadInput("gpt-oss cutlass: down scale shard %d columns, parameter %d (I %d, moe tp %d)"
                           % (z["scale_shard"], Ipad // 32, I, Tm))

        gu_b = self.u8(src + "gate_up_proj_blocks", (E, 2 * I, H // 32, 16))
        gu_s = self.u8(src + "gate_up_proj_scales", (E, 2 * I, H // 32))
        gu_bias = self.bf16(src + "gate_up_proj_bias", (E, 2 * I))
        dn_b = self.u8(src + "down_proj_blocks", (E, H, I // 32, 16))
        dn_s = self.u8(src + "down_proj_scales", (E, H, I // 32))
        dn_bias = self.bf16(src + "down_proj_bias", (E, H))

        def split_rows(x, axis):
            """Ceil split of `axis` over the Tm MoE tp ranks; this rank's block."""
            a, b = shard_range(x.shape[axis], Tm, rm)
            idx = [slice(None)] * x.ndim
            idx[axis] = slice(a, b)
            return x[tuple(idx)]

        # --- w3_w1_weight: de-interleave, pad rows to A and columns to 64 bytes
        #     (maybe_pad_for_mxfp4), ceil-split, cat([up, gate]) -> int64 [El, 2Ipad, Hp/16]
        gate, up = deinterleave(gu_b.data.reshape(E, 2 * I, H // 2)[ex], axis=1)  # [El, I, H/2]
        halves = []
        for x in (up, gate):  # up first
            x = pad_axis(pad_axis(x, 1, A), 2, 64)
            halves.append(split_rows(x, 1))
        w31 = np.concatenate(halves, axis=1)
        assert w31.shape == (El, 2 * Ipad, Hp // 2), w31.shape
        self.put(dst + "w3_w1_weight", "I64", bytes_as(w31, "<u8"))

        # --- w3_w1_bias BF16 [El, 2Ipad]: halves padded to A, split, cat([up, gate])
        gate, up = deinterleave(gu_bias.data[ex], axis=1)  # [El, I]
        w31b = np.concatenate([split_rows(pad_axis(x, 1, A), 1) for x in (up, gate)], axis=1)
        assert w31b.shape == (El, 2 * Ipad), w31b.shape
        self.put(dst + "w3_w1_bias", "BF16", w31b)

        # --- w2_weight: down [H, I/2] bytes, cols padded to A/2, rows to 128, ROW split
        w2 = dn_b.data.reshape(E, H, I // 2)[ex]
        w2 = split_rows(pad_axis(pad_axis(w2, 2, A // 2), 1, 128), 2)
        assert w2.shape == (El, Hp, Ipad // 2), w2.shape
        self.put(dst + "w2_weight", "I64", bytes_as(w2, "<u8"))

        # --- w2_bias BF16 [El, Hp]: padded to 128, full on every rank
        self.put(dst + "w2_bias", "BF16", pad_axis_to(dn_bias.data[ex], 1, Hp))

        # --- w3_w1_weight_scale: scales [I, H/32] padded (cols to 4, rows to A), split,
        #     [up; gate] uint8 [2Ipad, Hp/32], 128x4 swizzle per expert -> int32 [El, 2Ipad, Hp/128]
        gate, up = deinterleave(gu_s.data[ex], axis=1)  # [El, I, H/32]
        sc = np.concatenate([split_rows(pad_axis(pad_axis(x, 2, 4), 1, A), 1) for x in (up, gate)],
                            axis=1)
        assert sc.shape == (El, 2 * Ipad, Hp // 32), sc.shape
        sc = block_scale_interleave(sc)
        assert sc.shape == (El, 2 * Ipad, Hp // 32), sc.shape
        self.put(dst + "w3_w1_weight_scale", "I32", bytes_as(sc, "<u4"))

        # --- w2_weight_scale: down scales [H, I/32], cols padded to A2/32, rows to 128,
        #     ROW split, swizzle -> int32 [El, Hp, Ipad/128]
        s2 = dn_s.data[ex]
        s2 = split_rows(pad_axis(pad_axis(s2, 2, A2 // 32), 1, 128), 2)
        assert s2.shape == (El, Hp, Ipad // 32), s2.shape
        s2 = block_scale_interleave(s2)
        assert s2.shape == (El, Hp, Ipad // 32), s2.shape
        self.put(dst + "w2_weight_scale", "I32", bytes_as(s2, "<u4"))

        # --- fake_input_scale F32 [El] = 1.0: W4A8MXFP4MXFP8CutlassFusedMoEMethod creates it
        #     with torch.empty and fills it with 1.0 in load_quant_scales (section 4).
        self.put(dst + "fake_input_scale", "F32", np.full(El, 0x3F800000, dtype=np.uint32))
