#!/usr/bin/env python3
"""Independent numpy reference for DeepSeek-V3.2 (`DeepseekV32ForCausalLM`).

Written from docs/families/glm-dsv32-phi3-kimi.md section 2 (and DESIGN.md's decision for it)
alone, without reading the C++ loader. V3.2 is DeepSeek-V3 (reference.DeepseekV3Builder) plus:

  2.1 every RMSNorm weight (input/post_attention, q_a/kv_a layernorm, model.norm, enorm, hnorm,
      shared_head.norm) is F32 in the checkpoint; every layer (the MTP layer too) has an indexer:
      wq_b (FP8 + scale), wk (FP8 + [1, H/128] scale), k_norm weight and bias (F32),
      weights_proj (BF16, never quantised).
  2.2 vllm: norms BF16 = RNE(F32); indexer.wq_b.weight (+ weight_scale_inv) replicated;
      indexer.wk_weights_proj.weight [d + n, H] BF16 = [RNE_bf16(f32(wk) * scale broadcast over
      128 x 128 blocks); weights_proj]; k_norm weight and bias F32; MTP skipped.
  2.3 trtllm: norms BF16 = RNE(F32); wq_b + `weight_scale`; indexer.wk.weight F32 = f32(wk) *
      scale (the fix of issue #18658, DESIGN.md); indexer.weights_proj.weight F32 (exact
      widening); k_norm kept F32 (its engine dtype is unverified).

F8_E4M3 ("fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
(m/8 * 2^-6); S.1111.111 is NaN; no infinities. BF16 rounding: nearest, ties to even; NaN ->
0x7fc0 (torch's canonical NaN).

    DeepseekV32Builder(ck, cfg, lay).build() -> OrderedDict {param_name: reference.Tensor}

Plugged into reference.py through DOC_FAMILIES["DeepseekV32ForCausalLM"].
"""

import math

import numpy as np

from reference import BadInput, DeepseekV3Builder, Tensor, need

__all__ = ["DeepseekV32Builder", "e4m3_values", "bf16_rne", "dequant"]

NORM_SUFFIXES = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_a_layernorm.weight",
                 "kv_a_layernorm.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight")


def e4m3_values():
    """F8_E4M3 code -> float32, as torch's .float() gives it: NaN codes become the bits
    0x7ff00000 / 0xfff00000 (c10 fp8e4m3fn_to_fp32_value shifts the code's 7 bits under an
    all-ones exponent)."""
    out = np.zeros(256, dtype=np.float32)
    bits = out.view(np.uint32)
    for v in range(256):
        sign, exp, man = v >> 7, (v >> 3) & 15, v & 7
        if exp == 15 and man == 7:
            bits[v] = (0x80000000 if sign else 0) | 0x7FF00000
            continue
        elif exp == 0:
            x = math.ldexp(man / 8.0, -6)
        else:
            x = math.ldexp(1.0 + man / 8.0, exp - 7)
        out[v] = -x if sign else x
    return out


E4M3 = e4m3_values()


def bf16_rne(x):
    """float32 array -> uint16 BF16 bits, round to nearest even, NaN -> 0x7fc0."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def dequant(w, s, block):
    """F8_E4M3 codes [rows, cols] x F32 scales per block -> float32 [rows, cols]."""
    rows, cols = w.shape
    scale = s.view(np.float32)
    full = np.repeat(np.repeat(scale, block[0], axis=0), block[1], axis=1)[:rows, :cols]
    # A NaN weight keeps its payload (torch on the host: the first NaN operand), a NaN scale its own.
    with np.errstate(over="ignore", invalid="ignore"):
        return (E4M3[w.astype(np.int64)] * full).astype(np.float32)


class DeepseekV32Builder(DeepseekV3Builder):
    arch = "DeepseekV32ForCausalLM"

    def rep(self, dst, src=None):
        t = self.ck.get(src or dst)
        if dst == "model.norm.weight" or dst.endswith(NORM_SUFFIXES):
            if t.dtype != "F32":
                raise BadInput("%s: DeepSeek-V3.2 norms are F32 in the checkpoint, not %s" % (src or dst, t.dtype))
            t = Tensor("BF16", bf16_rne(t.data.view(np.float32)))
        self.params[dst] = t

    def layer(self, dst_i, src_i):
        super().layer(dst_i, src_i)
        self.indexer("model.layers.%d.self_attn.indexer." % dst_i, "model.layers.%d.self_attn.indexer." % src_i)

    def indexer(self, d, s):
        ck, lay, q = self.ck, self.lay, self.q
        self.params[d + "wq_b.weight"] = ck.get(s + "wq_b.weight")
        if ck.has(s + "wq_b.weight_scale_inv"):
            scale_name = "weight_scale_inv" if lay.vllm else "weight_scale"
            self.params[d + "wq_b." + scale_name] = ck.get(s + "wq_b.weight_scale_inv")
        wk = ck.get(s + "wk.weight")
        proj = ck.get(s + "weights_proj.weight")
        if wk.dtype == "F8_E4M3":
            wk_f32 = dequant(wk.data, ck.get(s + "wk.weight_scale_inv").data, q.block)
        else:
            wk_f32 = (wk.data.astype(np.uint32) << np.uint32(16)).view(np.float32)
        if lay.vllm:
            top = bf16_rne(wk_f32) if wk.dtype == "F8_E4M3" else wk.data
            self.params[d + "wk_weights_proj.weight"] = Tensor("BF16", np.concatenate([top, proj.data], axis=0))
        else:
            self.params[d + "wk.weight"] = Tensor("F32", wk_f32.view(np.uint32))
            self.params[d + "weights_proj.weight"] = Tensor("F32", proj.data.astype(np.uint32) << np.uint32(16))
        self.params[d + "k_norm.weight"] = ck.get(s + "k_norm.weight")
        self.params[d + "k_norm.bias"] = ck.get(s + "k_norm.bias")

    def build(self):
        need(self.cfg, "index_n_heads")
        return super().build()
