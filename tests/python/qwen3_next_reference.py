#!/usr/bin/env python3
"""Independent numpy reference for Qwen3-Next (`Qwen3NextForCausalLM`).

Written from docs/families/llama4-qwen3next.md section 2 alone, without reading the C++ loader.
nk/nv key/value heads of the gated-delta layers, rho = nv/nk, dk/dv head dims, Kd = nk*dk,
Vd = nv*dv; a group g of in_proj_qkvz is [q_g (dk) | k_g (dk) | v_g (rho*dv) | z_g (rho*dv)], of
in_proj_ba [b_g (rho) | a_g (rho)]. Rank r of T holds key heads (groups) [r*nk/T, (r+1)*nk/T) and
value heads [r*nv/T, ...):

  2.3 vllm:   in_proj_qkvz / in_proj_ba = the rank's groups as one contiguous row range
              (grouped); conv1d [Q rows r; K rows r; V rows r] (3-D, [.., 1, K]); A_log float32
              (newer GDN layer), dt_bias model dtype; norm replicated; out_proj column split by
              value heads; full attention: qkv_proj = [whole (q_h | gate_h) pairs; kv-dup k; kv-dup
              v], o_proj row split, q/k norms replicated; MoE: router, shared_expert_gate
              replicated, shared_expert [gate_r; up_r] / down row split (TP even under EP),
              experts w13 [gate; up] with all-or-nothing EP; vocab padded to 64; mtp.* skipped.
  2.2 trtllm: in_proj rows reordered per rank to dense [Q_r | K_r | V_r | Z_r] and [b_r | a_r];
              conv1d the same rows as vLLM but 2-D [.., K]; A_log and dt_bias float32; experts
              `experts.backend` w3_w1 [up; gate]; vocab ceil(V/T) zero-padded; MTP not loaded
              (its fc split is unverified: K > 0 refused).

    Qwen3NextBuilder(ck, cfg, lay).build() -> OrderedDict {param_name: reference.Tensor}

BF16 -> F32 is exact (bits << 16). Plugged into reference.py through
DOC_FAMILIES["Qwen3NextForCausalLM"]; tests/python must be on sys.path.
"""

import numpy as np

from reference import BadInput, Builder, Tensor, cfg_get, col_split, need, row_split

__all__ = ["Qwen3NextBuilder"]


def f32(t):
    if t.dtype != "BF16":
        raise BadInput("expected BF16, got %s" % t.dtype)
    return Tensor("F32", t.data.astype(np.uint32) << np.uint32(16))


class Qwen3NextBuilder(Builder):
    arch = "Qwen3NextForCausalLM"

    def build(self):
        cfg, lay = self.cfg, self.lay
        if "quantization_config" in cfg:
            raise BadInput("quantised Qwen3-Next is refused until read")
        if lay.adp:
            raise BadInput("attention-DP: not served for Qwen3-Next")
        if lay.mtp:
            raise BadInput("MTP layers: not loaded (vLLM draft model; trtllm fc split unverified)")
        if cfg_get(cfg, "decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
            raise BadInput("dense Qwen3-Next layers are refused")
        T = lay.T
        self.H = need(cfg, "hidden_size")
        self.nk, self.nv = need(cfg, "linear_num_key_heads"), need(cfg, "linear_num_value_heads")
        self.dk, self.dv = need(cfg, "linear_key_head_dim"), need(cfg, "linear_value_head_dim")
        self.nh, self.nkv, self.hd = need(cfg, "num_attention_heads"), need(cfg, "num_key_value_heads"), \
            need(cfg, "head_dim")
        if self.nk % T or self.nh % T or (self.nkv >= T and self.nkv % T) or (self.nkv < T and T % self.nkv):
            raise BadInput("heads do not split over tp_size %d" % T)
        self.vocab("model.embed_tokens.weight")
        interval = need(cfg, "full_attention_interval")
        for i in range(need(cfg, "num_hidden_layers")):
            p = "model.layers.%d." % i
            self.rep(p + "input_layernorm.weight")
            if (i + 1) % interval == 0:
                self.full_attention(p)
            else:
                self.linear_attention(p)
            self.rep(p + "post_attention_layernorm.weight")
            self.moe(p)
        self.rep("model.norm.weight")
        self.lm_head()
        return self.params

    def linear_attention(self, p):
        lay, ck = self.lay, self.ck
        a = p + "linear_attn."
        T, r = lay.T, lay.r
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        rho = nv // nk
        ng = nk // T
        g0 = r * ng
        G = 2 * dk + 2 * rho * dv
        qkvz = ck.get(a + "in_proj_qkvz.weight")
        x = qkvz.data.reshape(nk, G, -1)[g0:g0 + ng]
        if lay.vllm:
            out = x.reshape(ng * G, -1)
        else:
            parts = [(0, dk), (dk, 2 * dk), (2 * dk, 2 * dk + rho * dv), (2 * dk + rho * dv, G)]
            out = np.concatenate([x[:, a0:a1, :].reshape(-1, x.shape[2]) for a0, a1 in parts], axis=0)
        self.params[a + "in_proj_qkvz.weight"] = Tensor(qkvz.dtype, out)
        ba = ck.get(a + "in_proj_ba.weight")
        y = ba.data.reshape(nk, 2 * rho, -1)[g0:g0 + ng]
        if lay.vllm:
            out = y.reshape(ng * 2 * rho, -1)
        else:
            out = np.concatenate([y[:, :rho, :].reshape(-1, y.shape[2]), y[:, rho:, :].reshape(-1, y.shape[2])], axis=0)
        self.params[a + "in_proj_ba.weight"] = Tensor(ba.dtype, out)
        Kd, Vd = nk * dk, nv * dv
        conv = ck.get(a + "conv1d.weight")
        c = conv.data
        kl, vl = Kd // T, Vd // T
        rows = np.concatenate([c[r * kl:(r + 1) * kl], c[Kd + r * kl:Kd + (r + 1) * kl],
                               c[2 * Kd + r * vl:2 * Kd + (r + 1) * vl]], axis=0)
        if not lay.vllm:
            rows = rows.reshape(rows.shape[0], rows.shape[2])  # squeeze(1)
        self.params[a + "conv1d.weight"] = Tensor(conv.dtype, rows)
        hv = nv // T
        for name, wide in (("A_log", True), ("dt_bias", not lay.vllm)):
            t = ck.get(a + name)
            cut = Tensor(t.dtype, t.data[r * hv:(r + 1) * hv])
            self.params[a + name] = f32(cut) if wide else cut
        self.rep(a + "norm.weight")
        self.params[a + "out_proj.weight"] = row_split(ck.get(a + "out_proj.weight"), T, r)  # dim 1

    def full_attention(self, p):
        lay, ck = self.lay, self.ck
        a = p + "self_attn."
        T, r, hd = lay.T, lay.r, self.hd
        q = ck.get(a + "q_proj.weight")  # [2 nh hd, H]: (q_h | gate_h) per head
        per = self.nh // T
        qr = q.data[r * per * 2 * hd:(r + 1) * per * 2 * hd]
        if self.nkv >= T:
            k0, k1 = r * (self.nkv // T) * hd, (r + 1) * (self.nkv // T) * hd
        else:
            head = r // (T // self.nkv)
            k0, k1 = head * hd, (head + 1) * hd
        k, v = ck.get(a + "k_proj.weight"), ck.get(a + "v_proj.weight")
        self.params[a + "qkv_proj.weight"] = Tensor(q.dtype, np.concatenate([qr, k.data[k0:k1], v.data[k0:k1]], axis=0))
        self.rep(a + "q_norm.weight")
        self.rep(a + "k_norm.weight")
        self.params[a + "o_proj.weight"] = row_split(ck.get(a + "o_proj.weight"), T, r)  # dim 1

    def moe(self, p):
        lay, ck, cfg = self.lay, self.ck, self.cfg
        m = p + "mlp."
        self.rep(m + "gate.weight")
        self.rep(m + "shared_expert_gate.weight")
        T, r = lay.T, lay.r
        s = m + "shared_expert."
        if lay.vllm:
            for name in ("gate_proj", "up_proj"):
                if ck.get(s + name + ".weight").shape[0] % T:
                    raise BadInput("vllm: shared expert not divisible by tp_size")
        g, u = col_split(ck.get(s + "gate_proj.weight"), T, r), col_split(ck.get(s + "up_proj.weight"), T, r)  # dim 0
        self.params[s + "gate_up_proj.weight"] = Tensor(g.dtype, np.concatenate([g.data, u.data], axis=0))
        self.params[s + "down_proj.weight"] = row_split(ck.get(s + "down_proj.weight"), T, r)  # dim 1
        self.experts(m + ("experts" if lay.vllm else "experts.backend"), m + "experts", need(cfg, "num_experts"),
                     need(cfg, "moe_intermediate_size"), self.H)
