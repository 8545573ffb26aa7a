#!/usr/bin/env python3
"""Independent numpy reference for GLM-4.5 / 4.6 / 4.5-Air (`Glm4MoeForCausalLM`).

Written from docs/families/glm-dsv32-phi3-kimi.md section 1 alone, without reading the C++
loader. GLM is DeepSeek-V3's MoE (router with e_score_correction_bias, shared experts, dense
layers below first_k_dense_replace, MTP layers) with Llama-style attention:

  1.2 target trtllm: embed_tokens replicated, lm_head vocabulary-parallel; qkv_proj =
      [split(q); dupkv(k); dupkv(v)] for weight *and bias* (head-wise, section 1.3), q/k norms
      only with use_qk_norm, o_proj row-parallel without bias; dense MLP and shared experts by
      the DeepSeek gcd rule; experts [up; gate]; MTP layers as DeepSeek's; attention-DP
      replicates attention (dupkv with tp 1), dense MLPs, shared experts, lm_head, eh_proj.
      Refused: nh % T, nkv % T (nkv >= T), T % nkv (nkv < T), E % P, tied embeddings.
  1.4 target vllm: embed_tokens and lm_head vocabulary-parallel (pad 64); qkv as Qwen2's;
      mlp.gate.weight held in **F32** (BF16 widened exactly); e_score_correction_bias always;
      dense and shared MLPs split over T exactly; experts [gate; up], all-or-nothing EP; MTP
      layers skipped. GLM FP8 checkpoints: refused (not read).

    Glm4MoeBuilder(ck, cfg, lay).build() -> OrderedDict {param_name: reference.Tensor}

Plugged into reference.py through DOC_FAMILIES["Glm4MoeForCausalLM"]; tests/python must be on
sys.path.
"""

import numpy as np

from reference import BadInput, DeepseekV3Builder, Tensor, cfg_get, load_linear, need, rows_linear

__all__ = ["Glm4MoeBuilder", "widen_bf16"]


def widen_bf16(t):
    """BF16 -> F32 exactly (the bits moved to the high half), as torch's copy_ does."""
    if t.dtype != "BF16":
        raise BadInput("expected a BF16 router weight, got %s" % t.dtype)
    return Tensor("F32", t.data.astype(np.uint32) << np.uint32(16))


class Glm4MoeBuilder(DeepseekV3Builder):
    arch = "Glm4MoeForCausalLM"

    def attention_dims(self):
        cfg, lay = self.cfg, self.lay
        if "quantization_config" in cfg:
            raise BadInput("quantised GLM checkpoints are refused (their layout was not read)")
        self.nkv = cfg_get(cfg, "num_key_value_heads", self.nh)
        self.hd = cfg_get(cfg, "head_dim", self.H // self.nh)
        T = lay.aT
        if not lay.vllm and cfg.get("tie_word_embeddings") and lay.T > 1 and not lay.adp:
            raise BadInput("trtllm: tied embeddings (replicated embed_tokens vs vocabulary-parallel lm_head)")
        if self.nkv >= T and self.nkv % T:
            raise BadInput("num_key_value_heads %d not divisible by tp_size %d" % (self.nkv, T))
        if self.nkv < T and T % self.nkv:
            raise BadInput("tp_size %d not a multiple of num_key_value_heads %d" % (T, self.nkv))

    def kv_range(self):
        """Rows of k (and v) this rank holds: nkv/T whole heads, or head r // (T/nkv) repeated."""
        T, r, hd = self.lay.aT, self.lay.ar, self.hd
        if self.nkv >= T:
            per = self.nkv // T
            return r * per * hd, (r + 1) * per * hd
        head = r // (T // self.nkv)
        return head * hd, (head + 1) * hd

    def layer(self, dst_i, src_i):
        ck, q, lay, cfg = self.ck, self.q, self.lay, self.cfg
        d = "model.layers.%d." % dst_i
        s = "model.layers.%d." % src_i
        aT, ar = lay.aT, lay.ar
        self.rep(d + "input_layernorm.weight", s + "input_layernorm.weight")
        self.rep(d + "post_attention_layernorm.weight", s + "post_attention_layernorm.weight")
        sa, da = s + "self_attn.", d + "self_attn."
        bias = bool(cfg.get("attention_bias"))
        qp = load_linear(ck, q, sa + "q_proj", with_bias=bias)
        kp = load_linear(ck, q, sa + "k_proj", with_bias=bias)
        vp = load_linear(ck, q, sa + "v_proj", with_bias=bias)
        a, b = self.kv_range()
        self.emit(da + "qkv_proj", self.fuse([self.split(qp, 0, aT, ar), rows_linear(kp, q, a, b),
                                              rows_linear(vp, q, a, b)],
                                             [qp.name, kp.name, vp.name], da + "qkv_proj"))
        if cfg.get("use_qk_norm"):
            self.rep(da + "q_norm.weight", sa + "q_norm.weight")
            self.rep(da + "k_norm.weight", sa + "k_norm.weight")
        self.emit(da + "o_proj", self.split(load_linear(ck, q, sa + "o_proj"), 1, aT, ar))
        self.mlp_of(d, s, src_i)

    def router(self, mp, sm):
        if self.lay.vllm:
            self.params[mp + ".gate.weight"] = widen_bf16(self.ck.get(sm + ".gate.weight"))
            self.rep(mp + ".gate.e_score_correction_bias", sm + ".gate.e_score_correction_bias")
        else:
            self.rep(mp + ".gate.weight", sm + ".gate.weight")
            self.rep(mp + ".gate.e_score_correction_bias", sm + ".gate.e_score_correction_bias")

    def build(self):
        need(self.cfg, "n_routed_experts")
        return super().build()
