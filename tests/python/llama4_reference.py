#!/usr/bin/env python3
"""Independent numpy reference for the Llama 4 text model family.

Written from docs/families/llama4-qwen3next.md section 1 alone (1.1 checkpoint, 1.2
TensorRT-LLM, 1.3 vLLM, 1.4 worked example), without reading the C++ loader.

    Llama4Builder(ck, cfg, lay).build() -> OrderedDict {param_name: reference.Tensor}

gives the parameters one rank holds after the engine's own `load_weights`:

  target vllm   -> section 1.3 (q/k rotary permutation, vocab padded to 64, exact splits,
                   experts `feed_forward.experts.w13_weight` = [gate; up], all-or-nothing EP
                   with the linear expert placement)
  target trtllm -> section 1.2 (no permutation, ceil splits, vocab ceil(V/T) zero-padded,
                   experts `feed_forward.experts.backend.w3_w1_weight` = [up; gate],
                   attention-DP)

Architectures (section 1.1): `Llama4ForConditionalGeneration` (text settings under
`text_config`, checkpoint keys under `language_model.`; `vision_model.*` and
`multi_modal_projector.*` are never read) and `Llama4ForCausalLM` (settings at the top
level, no key prefix).

Every parameter is a byte copy of BF16 checkpoint data (raw uint16), plus zero padding of
the vocabulary; no arithmetic.  Plug into reference.py with
DOC_FAMILIES["Llama4ForConditionalGeneration"] = ("llama4_reference", "Llama4Builder") (and
the same for Llama4ForCausalLM); tests/python must be on sys.path.
"""

from collections import OrderedDict

import numpy as np

from reference import BadInput, Tensor, ceil_div, shard_range, vllm_vocab_split, vocab_split

__all__ = [
    "Llama4Builder",
    "ARCHITECTURES",
    "is_moe_layer",
    "permute_qk_weight_for_rotary",
    "kv_heads",
    "vllm_q_heads",
    "vllm_expert_placement",
    "vllm_expert_columns",
    "trtllm_expert_range",
    "trtllm_expert_columns",
    "vocab_rows_per_rank",
]

CONDITIONAL = "Llama4ForConditionalGeneration"
CAUSAL = "Llama4ForCausalLM"
ARCHITECTURES = (CONDITIONAL, CAUSAL)

# Section 1.1: the checkpoint's text-model key prefix per architecture.
CHECKPOINT_PREFIX = {CONDITIONAL: "language_model.", CAUSAL: ""}


# --------------------------------------------------------------------------------------
# Helpers (each one rule of section 1, testable on its own)
# --------------------------------------------------------------------------------------

def is_moe_layer(i, step):
    """Section 1.1 "MoE layers": both engines use interleave_moe_layer_step; layer i is MoE
    when step > 0 and (i+1) % step == 0 (vLLM's form; TRT-LLM's is_mlp_layer is the
    negation for step > 0)."""
    return step > 0 and (i + 1) % step == 0


def permute_qk_weight_for_rotary(w, n_heads, hd):
    """Section 1.3: vLLM's `permute_qk_weight_for_rotary` on a [n_heads*hd, H] raw array:
    w.view(n, hd/2, 2, H).transpose(1, 2).reshape(n*hd, H), i.e. within a head new row
    j*hd/2 + i = old row 2i + j (the head's even rows, then its odd rows)."""
    if hd % 2:
        raise BadInput("llama4: head_dim %d is odd; the rotary pairs need an even head_dim" % hd)
    rows, cols = w.shape
    if rows != n_heads * hd:
        raise BadInput("llama4: %d rows, expected %d heads x %d" % (rows, n_heads, hd))
    return np.ascontiguousarray(
        w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def kv_heads(nkv, T, r):
    """K/V heads held by attention rank r of T, identical on both engines (section 1.2
    `_duplicate_kv`, section 1.3 QKVParallelLinear): nkv >= T -> contiguous nkv/T heads
    (nkv % T == 0 required); nkv < T -> the single head r // (T/nkv) (T % nkv == 0 required).
    Returns (first head, number of heads)."""
    if nkv >= T:
        if nkv % T:
            raise BadInput("llama4: num_key_value_heads %d not divisible by tp_size %d" % (nkv, T))
        per = nkv // T
        return r * per, per
    if T % nkv:
        raise BadInput("llama4: tp_size %d not a multiple of num_key_value_heads %d "
                       "(KV heads cannot be duplicated evenly)" % (T, nkv))
    return r // (T // nkv), 1


def vllm_q_heads(nh, T, r):
    """Section 1.3: vLLM splits q heads exactly (divisibility asserted).
    Returns (first head, number of heads)."""
    if nh % T:
        raise BadInput("llama4: num_attention_heads %d not divisible by tp_size %d "
                       "(vLLM splits exactly)" % (nh, T))
    return r * (nh // T), nh // T


def vllm_expert_placement(E, T, r):
    """Section 1.3 EP linear placement: rank r holds E//T + (r < E%T) experts, starting at
    r*(E//T) + min(r, E%T).  Returns (first expert, number of experts)."""
    base, extra = divmod(E, T)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


def vllm_expert_columns(I, mt, mtr):
    """Section 1.3: w1 (gate) and w3 (up) rows narrowed at tp_rank*Ip, Ip = I/mt (exact).
    Returned as column ranges of the checkpoint's gate_up_proj[x] [H, 2I] (gate = columns
    [0, I), up = [I, 2I), section 1.1): ((g0, g1), (u0, u1)).  The same [g0, g1) range is
    the row range of down_proj[x] [I, H] (the w2 columns)."""
    if I % mt:
        raise BadInput("llama4: expert intermediate_size %d not divisible by moe tp %d "
                       "(vLLM splits exactly)" % (I, mt))
    Ip = I // mt
    g0, g1 = mtr * Ip, (mtr + 1) * Ip
    return (g0, g1), (I + g0, I + g1)


def trtllm_expert_range(E, P, epr):
    """Section 1.2: local experts [epr*E/P, (epr+1)*E/P); E % P != 0 is refused.
    Returns (first expert, number of experts)."""
    if E % P:
        raise BadInput("llama4: %d experts not divisible by ep_size %d" % (E, P))
    n = E // P
    return epr * n, n


def trtllm_expert_columns(I, mt, mtr):
    """Section 1.2: `_split(gate, 0, mt, mtr)` / `_split(up, 0, mt, mtr)` with the ceil shard
    rule, as column ranges of gate_up_proj[x] [H, 2I]: ((g0, g1), (u0, u1))."""
    a, b = shard_range(I, mt, mtr)
    return (a, b), (I + a, I + b)


def vocab_rows_per_rank(V, T, vllm):
    """Rows of embed_tokens / lm_head per rank: vLLM Vp/T with Vp = 64*ceil(V/64)
    (section 1.3 `vocab_shard`); TRT-LLM ceil(V/T) (section 1.2 `_vocab`)."""
    if vllm:
        Vp = 64 * ceil_div(V, 64)
        if Vp % T:
            raise BadInput("llama4: padded vocabulary %d not divisible by tp_size %d" % (Vp, T))
        return Vp // T
    return ceil_div(V, T)


def _need(c, key, where):
    v = c.get(key)
    if v is None:
        raise BadInput("llama4: config.json: missing %s%s" % (where, key))
    return v


# --------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------

class Llama4Builder:
    """Per-rank parameters of Llama4ForConditionalGeneration / Llama4ForCausalLM (BF16)."""

    def __init__(self, ck, cfg, lay):
        self.ck, self.cfg, self.lay = ck, cfg, lay
        archs = cfg.get("architectures") if isinstance(cfg, dict) else None
        self.arch = archs[0] if isinstance(archs, list) and archs else None
        self.params = OrderedDict()

    # ---- configuration and layout checks ----------------------------------------------

    def setup(self):
        cfg, lay = self.cfg, self.lay
        arch = self.arch
        if arch not in ARCHITECTURES:
            raise BadInput("llama4: architecture %r is not a Llama 4 text model (%s)"
                           % (arch, ", ".join(ARCHITECTURES)))
        # Section 1.1: ConditionalGeneration keeps the text settings under text_config.
        if arch == CONDITIONAL:
            tc = cfg.get("text_config")
            if not isinstance(tc, dict):
                raise BadInput("llama4: config.json of %s has no text_config object" % arch)
            where = "text_config."
        else:
            tc, where = cfg, ""
        self.tc, self.where = tc, where
        self.src = CHECKPOINT_PREFIX[arch]
        # Section 1.3 names keep the checkpoint prefix; section 1.2 names drop it.
        self.dst = self.src if lay.vllm else ""

        self.H = _need(tc, "hidden_size", where)
        self.nh = _need(tc, "num_attention_heads", where)
        self.nkv = _need(tc, "num_key_value_heads", where)
        self.hd = _need(tc, "head_dim", where)
        self.V = _need(tc, "vocab_size", where)
        self.L = _need(tc, "num_hidden_layers", where)
        self.step = _need(tc, "interleave_moe_layer_step", where)
        # Section 1.1 table: lm_head.weight is its own tensor (untied); a tied config is
        # not covered by the rules.
        for c, w in ((cfg, ""), (tc, where)):
            if c.get("tie_word_embeddings"):
                raise BadInput("llama4: %stie_word_embeddings is true; only untied Llama 4 "
                               "checkpoints are covered (section 1.1)" % w)
        # Scope: BF16 checkpoints (document header); quantised ones are not covered.
        for c, w in ((cfg, ""), (tc, where)):
            if c.get("quantization_config") is not None:
                raise BadInput("llama4: %squantization_config present; only BF16 checkpoints "
                               "are covered" % w)
        # Llama 4 has one MoE layout per engine and no MTP layer.
        if lay.moe_backend is not None:
            raise BadInput("llama4: no MoE backend choice for Llama 4 (got %r)" % lay.moe_backend)
        if lay.mtp:
            raise BadInput("llama4: the model has no MTP layer (--mtp-layers %d)" % lay.mtp)
        if lay.vllm:
            if lay.adp:
                raise BadInput("llama4: attention DP is a trtllm layout")
            # Section 1.3: EP is all-or-nothing.
            if lay.P not in (1, lay.T):
                raise BadInput("llama4: vLLM expert parallelism is all-or-nothing: ep_size must "
                               "be 1 or tp_size %d, is %d" % (lay.T, lay.P))
        else:
            # TRT-LLM computes is_mlp_layer = (i+1) % step != 0: step 0 cannot be loaded.
            if self.step <= 0:
                raise BadInput("llama4: interleave_moe_layer_step %d: TensorRT-LLM needs a "
                               "positive step" % self.step)
        self.moe = [is_moe_layer(i, self.step) for i in range(self.L)]
        if any(self.moe):
            self.E = _need(tc, "num_local_experts", where)
            self.I = _need(tc, "intermediate_size", where)
        if not all(self.moe):
            self.I_mlp = _need(tc, "intermediate_size_mlp", where)

    # ---- checkpoint access ------------------------------------------------------------

    def get(self, key, shape):
        """Checkpoint tensor `self.src + key`, checked against the config's shape and BF16."""
        name = self.src + key
        if not self.ck.has(name):
            raise BadInput("llama4: missing checkpoint tensor %s" % name)
        dt, sh = self.ck.dtype_shape(name)
        if tuple(sh) != tuple(shape):
            raise BadInput("llama4: checkpoint tensor %s has shape %s, config implies %s"
                           % (name, list(sh), list(shape)))
        if dt != "BF16":
            raise BadInput("llama4: checkpoint tensor %s is %s; only BF16 is covered" % (name, dt))
        return self.ck.get(name)

    def put(self, key, data):
        """Parameter `self.dst + key` holding raw BF16 data."""
        self.params[self.dst + key] = Tensor("BF16", np.ascontiguousarray(data))

    # ---- build ------------------------------------------------------------------------

    def build(self):
        self.setup()
        lay, H, V = self.lay, self.H, self.V
        if lay.vllm:
            # Section 1.3 "Vocab and lm_head": vocab_shard (pad to 64, Vp/T rows).
            vT, vr = lay.T, lay.r
            vsplit = lambda t, name: vllm_vocab_split(t, vT, vr, name)  # noqa: E731
        else:
            # Section 1.2: ceil(V/T) rows, last block zero-padded; attention DP: full [V, H]
            # (vocab_split with T = 1 is the unpadded tensor).
            vT, vr = lay.aT, lay.ar
            vsplit = lambda t, name: vocab_split(t, vT, vr)  # noqa: E731
        key = "model.embed_tokens.weight"
        self.params[self.dst + key] = vsplit(self.get(key, (V, H)), self.src + key)
        for i in range(self.L):
            self.layer(i)
        # Norms replicated (both engines).
        self.params[self.dst + "model.norm.weight"] = self.get("model.norm.weight", (H,))
        key = "lm_head.weight"
        self.params[self.dst + key] = vsplit(self.get(key, (V, H)), self.src + key)
        return self.params

    def layer(self, i):
        H = self.H
        p = "model.layers.%d." % i
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            self.params[self.dst + p + n] = self.get(p + n, (H,))  # replicated
        if self.lay.vllm:
            self.vllm_attention(p)
        else:
            self.trtllm_attention(p)
        f = p + "feed_forward."
        if self.moe[i]:
            # Router: replicated [E, H] on both engines (vLLM ReplicatedLinear, TRT-LLM Linear
            # without mapping).
            self.params[self.dst + f + "router.weight"] = self.get(f + "router.weight", (self.E, H))
            self.gated_mlp(f + "shared_expert.", self.I)
            if self.lay.vllm:
                self.vllm_experts(f + "experts.")
            else:
                self.trtllm_experts(f + "experts.")
        else:
            self.gated_mlp(f, self.I_mlp)

    # ================================================================================
    # Attention
    # ================================================================================

    def load_qkvo(self, p):
        H, nh, nkv, hd = self.H, self.nh, self.nkv, self.hd
        a = p + "self_attn."
        q = self.get(a + "q_proj.weight", (nh * hd, H)).data
        k = self.get(a + "k_proj.weight", (nkv * hd, H)).data
        v = self.get(a + "v_proj.weight", (nkv * hd, H)).data
        o = self.get(a + "o_proj.weight", (H, nh * hd)).data
        return q, k, v, o

    def vllm_attention(self, p):
        """Section 1.3: qkv_proj = [q rows of this rank's heads (permuted); k rows of its KV
        head(s) (permuted); v rows (plain)]; o_proj = columns of its q heads."""
        T, r, nh, nkv, hd = self.lay.T, self.lay.r, self.nh, self.nkv, self.hd
        q0, qn = vllm_q_heads(nh, T, r)
        k0, kn = kv_heads(nkv, T, r)
        q, k, v, o = self.load_qkvo(p)
        # load_weights maps every q_proj (n = nh) and k_proj (n = nkv) weight through
        # permute_qk_weight_for_rotary before the parameter loaders (NoPE layers too).
        q = permute_qk_weight_for_rotary(q, nh, hd)
        k = permute_qk_weight_for_rotary(k, nkv, hd)
        self.put(p + "self_attn.qkv_proj.weight", np.concatenate([
            q[q0 * hd:(q0 + qn) * hd],
            k[k0 * hd:(k0 + kn) * hd],
            v[k0 * hd:(k0 + kn) * hd]], axis=0))
        self.put(p + "self_attn.o_proj.weight", o[:, q0 * hd:(q0 + qn) * hd])

    def trtllm_attention(self, p):
        """Section 1.2: qkv_proj = [_split(q, 0, T, r); kv-head rows of k; same of v] with no
        permutation; o_proj = _split(o, 1, T, r).  Attention DP: T = 1 (full tensors)."""
        aT, ar, nh, nkv, hd = self.lay.aT, self.lay.ar, self.nh, self.nkv, self.hd
        q, k, v, o = self.load_qkvo(p)
        a, b = shard_range(nh * hd, aT, ar)  # ceil rule on q rows
        k0, kn = kv_heads(nkv, aT, ar)        # contiguous heads or _duplicate_kv
        self.put(p + "self_attn.qkv_proj.weight", np.concatenate([
            q[a:b],
            k[k0 * hd:(k0 + kn) * hd],
            v[k0 * hd:(k0 + kn) * hd]], axis=0))
        a, b = shard_range(nh * hd, aT, ar)
        self.put(p + "self_attn.o_proj.weight", o[:, a:b])

    # ================================================================================
    # Gated MLPs (dense layers and the MoE shared expert)
    # ================================================================================

    def gated_mlp(self, f, inter):
        """gate_up_proj = [gate rows of the rank; up rows of the rank], down_proj = columns of
        the rank.  vLLM (section 1.3, LlamaMLP): exact split over T.  TRT-LLM (section 1.2,
        GatedMLP): ceil `_split` over T, tp 1 under attention DP."""
        lay, H = self.lay, self.H
        g = self.get(f + "gate_proj.weight", (inter, H)).data
        u = self.get(f + "up_proj.weight", (inter, H)).data
        d = self.get(f + "down_proj.weight", (H, inter)).data
        if lay.vllm:
            if inter % lay.T:
                raise BadInput("llama4: %s%sgate_proj width %d not divisible by tp_size %d "
                               "(vLLM splits exactly)" % (self.src, f, inter, lay.T))
            w = inter // lay.T
            a, b = lay.r * w, (lay.r + 1) * w
        else:
            a, b = shard_range(inter, lay.aT, lay.ar)
        self.put(f + "gate_up_proj.weight", np.concatenate([g[a:b], u[a:b]], axis=0))
        self.put(f + "down_proj.weight", d[:, a:b])

    # ================================================================================
    # Routed experts
    # ================================================================================

    def load_experts(self, x):
        E, H, I = self.E, self.H, self.I
        # Section 1.1: fused [E, in, out] tensors, no `.weight` suffix.
        gu = self.get(x + "gate_up_proj", (E, H, 2 * I)).data
        dn = self.get(x + "down_proj", (E, I, H)).data
        return gu, dn

    def vllm_experts(self, x):
        """Section 1.3 load_moe_expert_weights: w13_weight [E_r, 2Ip, H] = per local expert
        [gate rows; up rows] of gate_up_proj[e].T narrowed at the moe tp rank; w2_weight
        [E_r, H, Ip] = down_proj[e].T with its columns narrowed.  EP (P == T > 1): linear
        placement, moe tp 1."""
        lay, E, I = self.lay, self.E, self.I
        if lay.P == 1:
            first, n = 0, E
            mt, mtr = lay.T, lay.r
        else:
            first, n = vllm_expert_placement(E, lay.T, lay.r)
            mt, mtr = 1, 0
        if n == 0:
            raise BadInput("llama4: vLLM EP rank %d would hold no expert (%d experts, ep_size %d)"
                           % (lay.r, E, lay.T))
        (g0, g1), (u0, u1) = vllm_expert_columns(I, mt, mtr)
        gu, dn = self.load_experts(x)
        w13 = np.stack([np.concatenate([gu[e][:, g0:g1].T, gu[e][:, u0:u1].T], axis=0)
                        for e in range(first, first + n)])
        w2 = np.stack([dn[e][g0:g1, :].T for e in range(first, first + n)])
        self.put(x + "w13_weight", w13)
        self.put(x + "w2_weight", w2)

    def trtllm_experts(self, x):
        """Section 1.2 load_expert_w3_w1_weight / load_expert_w2_weight: local experts
        [epr*E/P, (epr+1)*E/P); w3_w1_weight [E/P, 2I/mt, H] = [_split(up); _split(gate)]
        of gate_up_proj[e].T (up first); w2_weight [E/P, H, I/mt] = _split(down_proj[e].T, 1).
        Names under the ConfigurableMoE wrapper `experts.backend.`."""
        lay, E, I = self.lay, self.E, self.I
        first, n = trtllm_expert_range(E, lay.P, lay.moe_ep_rank)
        (g0, g1), (u0, u1) = trtllm_expert_columns(I, lay.moe_tp, lay.moe_tp_rank)
        gu, dn = self.load_experts(x)
        w31 = np.stack([np.concatenate([gu[e][:, u0:u1].T, gu[e][:, g0:g1].T], axis=0)
                        for e in range(first, first + n)])
        w2 = np.stack([dn[e][g0:g1, :].T for e in range(first, first + n)])
        self.put(x + "backend.w3_w1_weight", w31)
        self.put(x + "backend.w2_weight", w2)
