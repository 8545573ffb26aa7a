#!/usr/bin/env python3
"""Independent numpy reference for Phi-3 / Phi-3.5-mini / Phi-4-mini (`Phi3ForCausalLM`).

Written from docs/families/glm-dsv32-phi3-kimi.md section 3 alone, without reading the C++
loader:

  3.1 the checkpoint stores `self_attn.qkv_proj.weight` [(nh + 2 nkv) hd, H] with rows
      [q; k; v] and `mlp.gate_up_proj.weight` [2I, H] with rows [gate; up];
  3.2 target vllm: the fused tensors are narrowed at nh*hd and (nh+nkv)*hd (hd = head_dim, or
      H / nh when the config has none) and at I, then every Llama rule applies (KV heads
      duplicated when T > nkv, vocabulary padded to 64, exact splits);
  3.3 target trtllm: hd = H / nh; q = qkv[:H], k = qkv[H : H + nkv hd], v = the rest; then the
      Llama rules *without* KV-head duplication, so nkv % T must be 0 (otherwise the engine's own
      load fails, and so must ours), and nh * hd must be H; attention-DP not served.

    Phi3Builder(ck, cfg, lay).build() -> OrderedDict {param_name: reference.Tensor}

The cut is a view of the checkpoint (UnfusedPhi3Checkpoint): `q_proj`, `k_proj`, `v_proj`,
`gate_proj`, `up_proj` weights are row ranges of the fused tensors, and reference.LlamaBuilder
(written from DESIGN.md's Llama rules) does the rest. Plugged into reference.py through
DOC_FAMILIES["Phi3ForCausalLM"]; tests/python must be on sys.path.
"""

from reference import BadInput, LlamaBuilder, Tensor, cfg_get, need

__all__ = ["Phi3Builder", "UnfusedPhi3Checkpoint", "fused_cuts"]


def fused_cuts(cfg, target):
    """{unfused suffix: (fused suffix, first row, end row)} of one layer (section 3.2 / 3.3)."""
    H = need(cfg, "hidden_size")
    nh = need(cfg, "num_attention_heads")
    nkv = cfg_get(cfg, "num_key_value_heads", nh)
    I = need(cfg, "intermediate_size")
    if target == "trtllm":
        hd = H // nh
        q_end = H  # "q = qkv[:hidden_size]"
    else:
        hd = cfg_get(cfg, "head_dim", H // nh)
        q_end = nh * hd
    return {
        "self_attn.q_proj.weight": ("self_attn.qkv_proj.weight", 0, q_end),
        "self_attn.k_proj.weight": ("self_attn.qkv_proj.weight", q_end, q_end + nkv * hd),
        "self_attn.v_proj.weight": ("self_attn.qkv_proj.weight", q_end + nkv * hd, q_end + 2 * nkv * hd),
        "mlp.gate_proj.weight": ("mlp.gate_up_proj.weight", 0, I),
        "mlp.up_proj.weight": ("mlp.gate_up_proj.weight", I, 2 * I),
    }


class UnfusedPhi3Checkpoint:
    """The checkpoint as a Llama one: unfused names are row ranges of the fused tensors."""

    def __init__(self, ck, cfg, target):
        self.ck = ck
        self.dir = ck.dir
        self.cuts = fused_cuts(cfg, target)

    def _cut(self, name):
        for suffix, cut in self.cuts.items():
            if name.endswith("." + suffix) and name.startswith("model.layers."):
                return name[: -len(suffix)], cut
        return None, None

    def has(self, name):
        pre, cut = self._cut(name)
        return self.ck.has(pre + cut[0]) if cut else self.ck.has(name)

    def get(self, name):
        pre, cut = self._cut(name)
        if not cut:
            return self.ck.get(name)
        fused_name, a, b = pre + cut[0], cut[1], cut[2]
        t = self.ck.get(fused_name)
        if b > t.shape[0]:
            raise BadInput("%s has %d rows; config.json puts %s at rows [%d, %d)" % (fused_name, t.shape[0], name, a, b))
        return Tensor(t.dtype, t.data[a:b])

    def names(self):
        return self.ck.names()


class Phi3Builder(LlamaBuilder):
    """Section 3: unfuse, then the Llama rules (trtllm: without KV-head duplication)."""

    arch = "Phi3ForCausalLM"

    def __init__(self, ck, cfg, lay):
        super().__init__(UnfusedPhi3Checkpoint(ck, cfg, lay.target), cfg, lay)

    def dims(self):
        super().dims()
        cfg = self.cfg
        if "quantization_config" in cfg:
            raise BadInput("quantised Phi-3 checkpoints are out of scope (section 3.3)")
        if self.lay.vllm:
            return
        if self.nh * (self.H // self.nh) != self.H or cfg_get(cfg, "head_dim", self.H // self.nh) != self.H // self.nh:
            raise BadInput("trtllm: Phi-3's q cut at hidden_size assumes num_attention_heads x head_dim == hidden_size")
        self.hd = self.H // self.nh
        if self.kvh % self.lay.T:
            raise BadInput("trtllm: %d KV heads not divisible by tp_size %d (no KV duplication for Phi-3)"
                           % (self.kvh, self.lay.T))

    def build(self):
        # Phi-3 has no biases and the Llama rule's arch-specific branches (Qwen) do not apply.
        self.arch = "Phi3ForCausalLM"
        return super().build()
