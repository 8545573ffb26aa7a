#!/usr/bin/env python3
"""Self-test of tests/python/llama4_reference.py against docs/families/llama4-qwen3next.md §1.

1. Helpers against section 1.4's worked example (Scout, T = 8, r = 3, P = 1): q heads 15-19
   (rows 1920-2559), kv head 3 (rows 384-511), expert columns [3072, 4096) and
   [11264, 12288), w13 / w3_w1 [16, 2048, 5120], 25256 vocabulary rows on both engines.
2. The rotary permutation rule (section 1.3): within a head new row j*hd/2 + i = old row
   2i + j, and q.k unchanged when q and k are permuted alike.
3. End to end on a tiny in-memory fake checkpoint (H=64, nh=4, nkv=2, hd=16, E=4, I=32,
   I_mlp=48, V=100, 2 layers, step 2: layer 0 dense, layer 1 MoE): every parameter's name
   and shape for T in {1, 2, 4} on both targets and both architectures (expected shapes
   written out by hand), KV duplication at T = 4, the vLLM q/k permutation and the
   TRT-LLM [up; gate] order on actual values, EP layouts, attention DP, and BadInput cases.

Run: /usr/bin/python3 tests/python/llama4_reference_selftest.py   (exit 0 on success)
"""

import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402
import llama4_reference as l4  # noqa: E402


# --------------------------------------------------------------------------------------
# 1. Section 1.4 worked example (Scout: H 5120, nh 40, nkv 8, hd 128, I 8192, E 16,
#    V 202048; T = 8, r = 3, P = 1)
# --------------------------------------------------------------------------------------

class WorkedExample(unittest.TestCase):
    H, NH, NKV, HD, I, E, V = 5120, 40, 8, 128, 8192, 16, 202048
    T, R = 8, 3

    def test_q_heads(self):
        # vLLM exact split: heads 15-19 -> rows 1920-2559
        q0, qn = l4.vllm_q_heads(self.NH, self.T, self.R)
        self.assertEqual((q0, q0 + qn - 1), (15, 19))
        self.assertEqual((q0 * self.HD, (q0 + qn) * self.HD - 1), (1920, 2559))
        # TRT-LLM ceil split of q rows: same rows
        self.assertEqual(ref.shard_range(self.NH * self.HD, self.T, self.R), (1920, 2560))

    def test_kv_head(self):
        k0, kn = l4.kv_heads(self.NKV, self.T, self.R)
        self.assertEqual((k0, kn), (3, 1))
        self.assertEqual((k0 * self.HD, (k0 + kn) * self.HD - 1), (384, 511))
        # qkv_proj [640 + 128 + 128, 5120]
        self.assertEqual(5 * self.HD + 2 * kn * self.HD, 896)

    def test_expert_columns(self):
        want = ((3072, 4096), (11264, 12288))
        self.assertEqual(l4.vllm_expert_columns(self.I, self.T, self.R), want)
        self.assertEqual(l4.trtllm_expert_columns(self.I, self.T, self.R), want)
        # w13 / w3_w1 [16, 2048, 5120]: all 16 experts (P = 1), 2 * 1024 rows
        first, n = l4.trtllm_expert_range(self.E, 1, 0)
        self.assertEqual((first, n), (0, 16))
        (g0, g1), (u0, u1) = want
        self.assertEqual((n, (g1 - g0) + (u1 - u0), self.H), (16, 2048, 5120))

    def test_vocab(self):
        self.assertEqual(l4.vocab_rows_per_rank(self.V, self.T, vllm=True), 25256)
        self.assertEqual(l4.vocab_rows_per_rank(self.V, self.T, vllm=False), 25256)
        # Section 1.4 says "202048 is a multiple of 64*8"; it is not (202048 % 512 == 320),
        # but it is a multiple of 64 (no vLLM padding, Vp = V) and of 8, so both engines
        # still hold exactly V/8 = 25256 rows and the last block has no zero rows.
        self.assertEqual(self.V % 64, 0)
        self.assertEqual(self.V % 8, 0)
        self.assertEqual(self.V // 8, 25256)

    def test_moe_layers(self):
        # Scout step 1: all 48 MoE; Maverick step 2: 1, 3, ..., 47
        self.assertTrue(all(l4.is_moe_layer(i, 1) for i in range(48)))
        self.assertEqual([i for i in range(48) if l4.is_moe_layer(i, 2)], list(range(1, 48, 2)))
        self.assertFalse(any(l4.is_moe_layer(i, 0) for i in range(48)))

    def test_vllm_ep_placement(self):
        # rank r holds E//T + (r < E%T) experts from r*(E//T) + min(r, E%T)
        self.assertEqual([l4.vllm_expert_placement(16, 8, r) for r in range(8)],
                         [(2 * r, 2) for r in range(8)])
        self.assertEqual([l4.vllm_expert_placement(5, 4, r) for r in range(4)],
                         [(0, 2), (2, 1), (3, 1), (4, 1)])
        self.assertEqual([l4.vllm_expert_placement(10, 4, r) for r in range(4)],
                         [(0, 3), (3, 3), (6, 2), (8, 2)])
        self.assertEqual(l4.trtllm_expert_range(128, 8, 5), (80, 16))
        with self.assertRaises(ref.BadInput):
            l4.trtllm_expert_range(10, 4, 0)


# --------------------------------------------------------------------------------------
# 2. Rotary permutation (section 1.3)
# --------------------------------------------------------------------------------------

class Permutation(unittest.TestCase):

    def test_rule(self):
        n, hd, H = 3, 8, 5
        w = np.arange(n * hd * H, dtype=np.uint16).reshape(n * hd, H)
        p = l4.permute_qk_weight_for_rotary(w, n, hd)
        for h in range(n):
            for i in range(hd // 2):
                for j in range(2):
                    np.testing.assert_array_equal(p[h * hd + j * hd // 2 + i], w[h * hd + 2 * i + j])
        # hd = 4, one head: rows 0, 2, 1, 3
        w = np.arange(4, dtype=np.uint16).reshape(4, 1)
        self.assertEqual(l4.permute_qk_weight_for_rotary(w, 1, 4).ravel().tolist(), [0, 2, 1, 3])

    def test_qk_dot_unchanged(self):
        # Section 1.3: the same per-head permutation of q and k leaves q.k unchanged.
        rng = np.random.default_rng(1)
        n, hd, H = 2, 16, 8
        wq, wk = rng.standard_normal((n * hd, H)), rng.standard_normal((n * hd, H))
        x = rng.standard_normal(H)
        pq = l4.permute_qk_weight_for_rotary(wq, n, hd)
        pk = l4.permute_qk_weight_for_rotary(wk, n, hd)
        for h in range(n):
            s = slice(h * hd, (h + 1) * hd)
            self.assertAlmostEqual(float((wq[s] @ x) @ (wk[s] @ x)), float((pq[s] @ x) @ (pk[s] @ x)))

    def test_odd_head_dim(self):
        with self.assertRaises(ref.BadInput):
            l4.permute_qk_weight_for_rotary(np.zeros((3, 2), np.uint16), 1, 3)


# --------------------------------------------------------------------------------------
# 3. Tiny fake checkpoint
# --------------------------------------------------------------------------------------

H, NH, NKV, HD, E, I, IM, V, L, STEP = 64, 4, 2, 16, 4, 32, 48, 100, 2, 2
TEXT = {
    "hidden_size": H, "intermediate_size": I, "intermediate_size_mlp": IM,
    "num_local_experts": E, "num_attention_heads": NH, "num_key_value_heads": NKV,
    "head_dim": HD, "vocab_size": V, "num_hidden_layers": L,
    "interleave_moe_layer_step": STEP, "use_qk_norm": True, "tie_word_embeddings": False,
}
CG, CLM = l4.CONDITIONAL, l4.CAUSAL


def make_cfg(arch, **over):
    text = dict(TEXT, **over)
    if arch == CG:
        return {"architectures": [CG], "text_config": text, "tie_word_embeddings": False,
                "vision_config": {"hidden_size": 8}}
    return dict(text, architectures=[CLM])


class FakeCheckpoint:
    """In-memory stand-in for reference.Checkpoint: get / has / dtype_shape / names / used."""

    def __init__(self, arch, step=STEP, seed=0):
        rng = np.random.default_rng(seed)
        self.t = {}
        pre = "language_model." if arch == CG else ""

        def add(name, shape, dtype="BF16"):
            # nonzero values so that zero padding is distinguishable from data
            a = rng.integers(1, 2 ** 16 - 1, size=shape, dtype=np.int64).astype(np.uint16)
            self.t[name] = ref.Tensor(dtype, a)

        add(pre + "model.embed_tokens.weight", (V, H))
        add(pre + "lm_head.weight", (V, H))
        add(pre + "model.norm.weight", (H,))
        for i in range(L):
            p = pre + "model.layers.%d." % i
            add(p + "input_layernorm.weight", (H,))
            add(p + "post_attention_layernorm.weight", (H,))
            add(p + "self_attn.q_proj.weight", (NH * HD, H))
            add(p + "self_attn.k_proj.weight", (NKV * HD, H))
            add(p + "self_attn.v_proj.weight", (NKV * HD, H))
            add(p + "self_attn.o_proj.weight", (H, NH * HD))
            f = p + "feed_forward."
            if l4.is_moe_layer(i, step):
                add(f + "router.weight", (E, H))
                add(f + "experts.gate_up_proj", (E, H, 2 * I))
                add(f + "experts.down_proj", (E, I, H))
                add(f + "shared_expert.gate_proj.weight", (I, H))
                add(f + "shared_expert.up_proj.weight", (I, H))
                add(f + "shared_expert.down_proj.weight", (H, I))
            else:
                add(f + "gate_proj.weight", (IM, H))
                add(f + "up_proj.weight", (IM, H))
                add(f + "down_proj.weight", (H, IM))
        if arch == CG:
            add("vision_model.patch_embedding.linear.weight", (8, 12))
            add("multi_modal_projector.linear_1.weight", (H, 8))
        self.used = set()

    def names(self):
        return sorted(self.t)

    def has(self, name):
        return name in self.t

    def get(self, name):
        if name not in self.t:
            raise ref.BadInput("missing checkpoint tensor %s" % name)
        self.used.add(name)
        return self.t[name]

    def dtype_shape(self, name):
        t = self.t[name]
        return t.dtype, t.shape

    def raw(self, name):
        return self.t[name].data


CKS = {CG: FakeCheckpoint(CG), CLM: FakeCheckpoint(CLM)}


def build(T, r, target, arch=CG, P=1, adp=False, backend=None, mtp=None, ck=None, cfg=None):
    lay = ref.Layout(T, r, ep_size=P, mtp_layers=mtp, target=target, attention_dp=adp,
                     moe_backend=backend)
    return l4.Llama4Builder(ck or CKS[arch], cfg or make_cfg(arch), lay).build()


def expected_shapes(target, arch, T, P=1, adp=False):
    """Section 1.2 / 1.3 tables written out by hand for the tiny model."""
    vllm = target == "vllm"
    D = "language_model." if (vllm and arch == CG) else ""
    aT = 1 if adp else T
    if vllm:
        Vr = {1: 128, 2: 64, 4: 32}[T]            # Vp = 128 (pad to 64), Vp / T
    else:
        Vr = {1: 100, 2: 50, 4: 25}[aT]           # ceil(V / T)
    qkv = {1: 128, 2: 64, 4: 48}[aT]              # (nh/T + 2 * max(nkv/T, 1)) * hd
    mt = T // P
    if vllm:
        El = E if P == 1 else E // T               # EP: E = 4, E % T == 0 for T in {1,2,4}
        Ip = I // T if P == 1 else I
    else:
        El = E // P
        Ip = I // mt
    L0, L1 = D + "model.layers.0.", D + "model.layers.1."
    want = {
        D + "model.embed_tokens.weight": (Vr, H),
        D + "lm_head.weight": (Vr, H),
        D + "model.norm.weight": (H,),
        L0 + "feed_forward.gate_up_proj.weight": (2 * IM // aT, H),
        L0 + "feed_forward.down_proj.weight": (H, IM // aT),
        L1 + "feed_forward.router.weight": (E, H),
        L1 + "feed_forward.shared_expert.gate_up_proj.weight": (2 * I // aT, H),
        L1 + "feed_forward.shared_expert.down_proj.weight": (H, I // aT),
    }
    for Lp in (L0, L1):
        want[Lp + "input_layernorm.weight"] = (H,)
        want[Lp + "post_attention_layernorm.weight"] = (H,)
        want[Lp + "self_attn.qkv_proj.weight"] = (qkv, H)
        want[Lp + "self_attn.o_proj.weight"] = (H, NH * HD // aT)
    if vllm:
        want[L1 + "feed_forward.experts.w13_weight"] = (El, 2 * Ip, H)
        want[L1 + "feed_forward.experts.w2_weight"] = (El, H, Ip)
    else:
        want[L1 + "feed_forward.experts.backend.w3_w1_weight"] = (El, 2 * Ip, H)
        want[L1 + "feed_forward.experts.backend.w2_weight"] = (El, H, Ip)
    return want


def src(arch, name):
    return ("language_model." if arch == CG else "") + name


class EndToEnd(unittest.TestCase):

    def assertLayout(self, params, want, what):
        got = {n: t.shape for n, t in params.items()}
        self.assertEqual(sorted(got), sorted(want), what + ": names")
        for n in want:
            self.assertEqual(got[n], tuple(want[n]), "%s: %s" % (what, n))
            self.assertEqual(params[n].dtype, "BF16", "%s: %s" % (what, n))
            self.assertEqual(params[n].data.dtype, np.uint16, "%s: %s" % (what, n))

    # ---- shapes and names -------------------------------------------------------------

    def test_shapes_tp(self):
        for arch in (CG, CLM):
            for target in ("vllm", "trtllm"):
                for T in (1, 2, 4):
                    want = expected_shapes(target, arch, T)
                    for r in range(T):
                        self.assertLayout(build(T, r, target, arch), want,
                                          "%s %s T=%d r=%d" % (arch, target, T, r))

    def test_shapes_ep(self):
        for arch in (CG, CLM):
            for T in (2, 4):
                for r in range(T):
                    self.assertLayout(build(T, r, "vllm", arch, P=T),
                                      expected_shapes("vllm", arch, T, P=T),
                                      "vllm EP T=%d r=%d" % (T, r))
            for T, P in ((2, 2), (4, 2), (4, 4)):
                for r in range(T):
                    self.assertLayout(build(T, r, "trtllm", arch, P=P),
                                      expected_shapes("trtllm", arch, T, P=P),
                                      "trtllm T=%d P=%d r=%d" % (T, P, r))

    def test_shapes_attention_dp(self):
        for T, P in ((2, 1), (4, 1), (4, 2), (4, 4)):
            for r in range(T):
                self.assertLayout(build(T, r, "trtllm", CG, P=P, adp=True),
                                  expected_shapes("trtllm", CG, T, P=P, adp=True),
                                  "trtllm adp T=%d P=%d r=%d" % (T, P, r))

    def test_naming(self):
        v = build(1, 0, "vllm", CG)
        self.assertTrue(all(n.startswith("language_model.") for n in v))
        self.assertIn("language_model.lm_head.weight", v)
        self.assertIn("language_model.model.layers.1.feed_forward.experts.w13_weight", v)
        v = build(1, 0, "vllm", CLM)
        self.assertIn("lm_head.weight", v)
        self.assertIn("model.layers.1.self_attn.qkv_proj.weight", v)
        self.assertFalse(any(n.startswith("language_model.") for n in v))
        for arch in (CG, CLM):
            t = build(1, 0, "trtllm", arch)
            self.assertFalse(any(n.startswith("language_model.") for n in t))
            self.assertIn("model.embed_tokens.weight", t)
            self.assertIn("model.layers.1.feed_forward.experts.backend.w3_w1_weight", t)
            self.assertIn("model.layers.0.feed_forward.gate_up_proj.weight", t)

    def test_keys_read(self):
        # Every text key read (also by EP ranks: the fused expert tensors hold all experts);
        # vision keys never read.
        for target, P, T in (("vllm", 1, 1), ("vllm", 4, 4), ("trtllm", 1, 2), ("trtllm", 2, 4)):
            ck = FakeCheckpoint(CG)
            build(T, T - 1, target, CG, P=P, ck=ck)
            text = {n for n in ck.names() if n.startswith("language_model.")}
            self.assertEqual(ck.used, text, "%s P=%d" % (target, P))

    def test_step_one_all_moe(self):
        ck = FakeCheckpoint(CLM, step=1)
        p = build(2, 1, "vllm", CLM, ck=ck, cfg=make_cfg(CLM, interleave_moe_layer_step=1))
        self.assertIn("model.layers.0.feed_forward.experts.w13_weight", p)
        self.assertNotIn("model.layers.0.feed_forward.gate_up_proj.weight", p)

    # ---- values: vocabulary ------------------------------------------------------------

    def test_vocab_values(self):
        emb = CKS[CG].raw("language_model.model.embed_tokens.weight")
        # vLLM T = 4: 32 rows per rank, rank 3 holds rows 96..99 then 28 zero rows
        p = build(4, 3, "vllm", CG)["language_model.model.embed_tokens.weight"].data
        np.testing.assert_array_equal(p[:4], emb[96:100])
        self.assertFalse(p[4:].any())
        # TRT-LLM T = 4: 25 rows each, no padding; T = 8 (allowed: ceil split) rank 7: 9 + 4 zero
        p = build(4, 2, "trtllm", CG)["model.embed_tokens.weight"].data
        np.testing.assert_array_equal(p, emb[50:75])
        p = build(8, 7, "trtllm", CG, P=1)["lm_head.weight"].data
        lm = CKS[CG].raw("language_model.lm_head.weight")
        self.assertEqual(p.shape, (13, H))
        np.testing.assert_array_equal(p[:9], lm[91:100])
        self.assertFalse(p[9:].any())
        # attention DP: full, unpadded
        p = build(4, 1, "trtllm", CG, adp=True)["model.embed_tokens.weight"].data
        np.testing.assert_array_equal(p, emb)

    # ---- values: attention ------------------------------------------------------------

    def test_vllm_qkv_permuted(self):
        for arch in (CG, CLM):
            for T in (1, 2, 4):
                for r in range(T):
                    a = src(arch, "model.layers.1.self_attn.")
                    q, k, v = (CKS[arch].raw(a + x + "_proj.weight") for x in "qkv")
                    qkv = build(T, r, "vllm", arch)[a + "qkv_proj.weight"].data
                    qn = NH // T
                    kh = (list(range(r * NKV // T, (r + 1) * NKV // T))
                          if NKV >= T else [r // (T // NKV)])
                    # q: local head h, new row j*hd/2 + i = old row 2i + j of head r*qn + h
                    for h in range(qn):
                        for i in range(HD // 2):
                            for j in range(2):
                                np.testing.assert_array_equal(
                                    qkv[h * HD + j * HD // 2 + i], q[(r * qn + h) * HD + 2 * i + j])
                    off = qn * HD
                    for n, head in enumerate(kh):
                        for i in range(HD // 2):
                            for j in range(2):
                                np.testing.assert_array_equal(
                                    qkv[off + n * HD + j * HD // 2 + i], k[head * HD + 2 * i + j])
                    off += len(kh) * HD
                    # v: not permuted
                    np.testing.assert_array_equal(
                        qkv[off:], np.concatenate([v[h * HD:(h + 1) * HD] for h in kh]))

    def test_kv_duplication_t4(self):
        # nkv = 2 < T = 4: ranks 0, 1 hold kv head 0; ranks 2, 3 hold kv head 1 (both engines)
        a = "language_model.model.layers.0.self_attn."
        k = CKS[CG].raw(a + "k_proj.weight")
        v = CKS[CG].raw(a + "v_proj.weight")
        for r in range(4):
            head = r // 2
            t = build(4, r, "trtllm", CG)["model.layers.0.self_attn.qkv_proj.weight"].data
            np.testing.assert_array_equal(t[16:32], k[head * HD:(head + 1) * HD])
            np.testing.assert_array_equal(t[32:48], v[head * HD:(head + 1) * HD])
            w = build(4, r, "vllm", CG)[a + "qkv_proj.weight"].data
            kh = k[head * HD:(head + 1) * HD]
            np.testing.assert_array_equal(w[16:32], np.concatenate([kh[0::2], kh[1::2]]))
            np.testing.assert_array_equal(w[32:48], v[head * HD:(head + 1) * HD])

    def test_trtllm_qkv_unpermuted(self):
        a = "model.layers.0.self_attn."
        q, k, v, o = (CKS[CLM].raw(a + x + "_proj.weight") for x in "qkvo")
        for T in (1, 2):
            for r in range(T):
                p = build(T, r, "trtllm", CLM)
                rows = NH * HD // T
                kr = NKV * HD // T
                want = np.concatenate([q[r * rows:(r + 1) * rows], k[r * kr:(r + 1) * kr],
                                       v[r * kr:(r + 1) * kr]])
                np.testing.assert_array_equal(p[a + "qkv_proj.weight"].data, want)
                np.testing.assert_array_equal(p[a + "o_proj.weight"].data, o[:, r * rows:(r + 1) * rows])
        # attention DP: whole q, k, v, o
        p = build(4, 3, "trtllm", CLM, adp=True)
        np.testing.assert_array_equal(p[a + "qkv_proj.weight"].data, np.concatenate([q, k, v]))
        np.testing.assert_array_equal(p[a + "o_proj.weight"].data, o)

    def test_vllm_o_proj(self):
        a = "language_model.model.layers.1.self_attn."
        o = CKS[CG].raw(a + "o_proj.weight")
        p = build(4, 2, "vllm", CG)
        np.testing.assert_array_equal(p[a + "o_proj.weight"].data, o[:, 32:48])

    # ---- values: MLPs -----------------------------------------------------------------

    def test_gated_mlps(self):
        for target, arch in (("vllm", CG), ("trtllm", CG), ("vllm", CLM), ("trtllm", CLM)):
            D = "language_model." if (target == "vllm" and arch == CG) else ""
            for f, inter in (("model.layers.0.feed_forward.", IM),
                             ("model.layers.1.feed_forward.shared_expert.", I)):
                g, u, d = (CKS[arch].raw(src(arch, f + x + "_proj.weight")) for x in ("gate", "up", "down"))
                for T in (1, 2, 4):
                    for r in range(T):
                        p = build(T, r, target, arch)
                        w = inter // T
                        s = slice(r * w, (r + 1) * w)
                        np.testing.assert_array_equal(p[D + f + "gate_up_proj.weight"].data,
                                                      np.concatenate([g[s], u[s]]))
                        np.testing.assert_array_equal(p[D + f + "down_proj.weight"].data, d[:, s])
        # attention DP: replicated shared expert and dense MLP
        p = build(4, 3, "trtllm", CG, adp=True)
        f = "model.layers.1.feed_forward.shared_expert."
        g, u = (CKS[CG].raw(src(CG, f + x + "_proj.weight")) for x in ("gate", "up"))
        np.testing.assert_array_equal(p[f + "gate_up_proj.weight"].data, np.concatenate([g, u]))

    def test_router_replicated(self):
        r_ = CKS[CG].raw("language_model.model.layers.1.feed_forward.router.weight")
        for target, pre in (("vllm", "language_model."), ("trtllm", "")):
            p = build(4, 3, target, CG, P=4)
            np.testing.assert_array_equal(p[pre + "model.layers.1.feed_forward.router.weight"].data, r_)

    # ---- values: routed experts -------------------------------------------------------

    def expert_src(self, arch):
        x = src(arch, "model.layers.1.feed_forward.experts.")
        return CKS[arch].raw(x + "gate_up_proj"), CKS[arch].raw(x + "down_proj")

    def test_vllm_experts_gate_up(self):
        # [gate rows; up rows] of gate_up_proj[e].T narrowed at r * I/T (P = 1)
        gu, dn = self.expert_src(CG)
        x = "language_model.model.layers.1.feed_forward.experts."
        for T in (1, 2, 4):
            Ip = I // T
            for r in range(T):
                p = build(T, r, "vllm", CG)
                w13, w2 = p[x + "w13_weight"].data, p[x + "w2_weight"].data
                for e in range(E):
                    for row in range(Ip):
                        np.testing.assert_array_equal(w13[e, row], gu[e, :, r * Ip + row])      # gate
                        np.testing.assert_array_equal(w13[e, Ip + row], gu[e, :, I + r * Ip + row])  # up
                        np.testing.assert_array_equal(w2[e, :, row], dn[e, r * Ip + row, :])

    def test_trtllm_experts_up_first(self):
        # [up rows; gate rows] (w3 first) of gate_up_proj[e].T, split at mtr * I/mt
        gu, dn = self.expert_src(CLM)
        x = "model.layers.1.feed_forward.experts.backend."
        for T, P in ((1, 1), (2, 1), (4, 1), (4, 2), (4, 4), (2, 2)):
            mt, El = T // P, E // P
            Ip = I // mt
            for r in range(T):
                epr, mtr = r % P, r // P
                p = build(T, r, "trtllm", CLM, P=P)
                w31, w2 = p[x + "w3_w1_weight"].data, p[x + "w2_weight"].data
                for le in range(El):
                    e = epr * El + le
                    for row in range(Ip):
                        np.testing.assert_array_equal(w31[le, row], gu[e, :, I + mtr * Ip + row])  # up
                        np.testing.assert_array_equal(w31[le, Ip + row], gu[e, :, mtr * Ip + row])  # gate
                        np.testing.assert_array_equal(w2[le, :, row], dn[e, mtr * Ip + row, :])

    def test_engines_same_blocks_other_order(self):
        # Section 1.4: the two engines hold the same two blocks, in the other order.
        for T in (2, 4):
            for r in range(T):
                v = build(T, r, "vllm", CG)["language_model.model.layers.1.feed_forward.experts.w13_weight"].data
                t = build(T, r, "trtllm", CG)["model.layers.1.feed_forward.experts.backend.w3_w1_weight"].data
                h = v.shape[1] // 2
                np.testing.assert_array_equal(v[:, :h], t[:, h:])
                np.testing.assert_array_equal(v[:, h:], t[:, :h])

    def test_vllm_ep_experts(self):
        # EP (P == T): linear placement, moe tp 1 (all of I)
        gu, dn = self.expert_src(CG)
        x = "language_model.model.layers.1.feed_forward.experts."
        for T in (2, 4):
            for r in range(T):
                first, n = l4.vllm_expert_placement(E, T, r)
                self.assertEqual((first, n), (r * E // T, E // T))
                p = build(T, r, "vllm", CG, P=T)
                w13, w2 = p[x + "w13_weight"].data, p[x + "w2_weight"].data
                for le in range(n):
                    e = first + le
                    np.testing.assert_array_equal(w13[le], np.concatenate([gu[e][:, :I].T, gu[e][:, I:].T]))
                    np.testing.assert_array_equal(w2[le], dn[e].T)

    def test_vllm_ep_uneven(self):
        # E = 6 over T = 4: 2, 2, 1, 1 experts from 0, 2, 4, 5
        cfg = make_cfg(CLM, num_local_experts=6)
        ck = FakeCheckpoint(CLM)
        rng = np.random.default_rng(7)
        for name, shape in (("model.layers.1.feed_forward.router.weight", (6, H)),
                            ("model.layers.1.feed_forward.experts.gate_up_proj", (6, H, 2 * I)),
                            ("model.layers.1.feed_forward.experts.down_proj", (6, I, H))):
            ck.t[name] = ref.Tensor("BF16", rng.integers(1, 60000, size=shape).astype(np.uint16))
        gu = ck.raw("model.layers.1.feed_forward.experts.gate_up_proj")
        for r, (first, n) in enumerate(((0, 2), (2, 2), (4, 1), (5, 1))):
            w13 = build(4, r, "vllm", CLM, P=4, ck=ck, cfg=cfg)[
                "model.layers.1.feed_forward.experts.w13_weight"].data
            self.assertEqual(w13.shape, (n, 2 * I, H))
            for le in range(n):
                np.testing.assert_array_equal(w13[le, :I], gu[first + le][:, :I].T)
        # TRT-LLM refuses E % P != 0
        with self.assertRaisesRegex(ref.BadInput, "not divisible by ep_size"):
            build(4, 0, "trtllm", CLM, P=4, ck=ck, cfg=cfg)

    # ---- BadInput cases ---------------------------------------------------------------

    def test_bad_inputs(self):
        with self.assertRaisesRegex(ref.BadInput, "MoE backend"):
            build(1, 0, "trtllm", backend="cutlass")
        with self.assertRaisesRegex(ref.BadInput, "MoE backend"):
            build(1, 0, "vllm", backend="triton")
        with self.assertRaisesRegex(ref.BadInput, "MTP"):
            build(1, 0, "trtllm", mtp=1)
        # vLLM EP other than 1 or T: a layout error (Layout itself refuses it)
        with self.assertRaises(ref.BadInput):
            build(4, 0, "vllm", P=2)
        # vLLM splits exactly: nh = 4 over T = 3; I_mlp 50 over T = 4; vocab 128 over T = 3
        with self.assertRaisesRegex(ref.BadInput, "not divisible by tp_size 3"):
            build(3, 0, "vllm")
        with self.assertRaisesRegex(ref.BadInput, "num_attention_heads"):
            l4.vllm_q_heads(NH, 3, 0)
        cfg = make_cfg(CLM, intermediate_size_mlp=50)
        ck = FakeCheckpoint(CLM)
        rng = np.random.default_rng(3)
        for n, s in (("gate_proj", (50, H)), ("up_proj", (50, H)), ("down_proj", (H, 50))):
            ck.t["model.layers.0.feed_forward.%s.weight" % n] = ref.Tensor(
                "BF16", rng.integers(1, 60000, size=s).astype(np.uint16))
        with self.assertRaisesRegex(ref.BadInput, "not divisible"):
            build(4, 0, "vllm", CLM, ck=ck, cfg=cfg)
        # ...while TRT-LLM's ceil split loads it: 13, 13, 13, 11 rows of gate (and of up)
        rows = [build(4, r, "trtllm", CLM, ck=ck, cfg=cfg)[
            "model.layers.0.feed_forward.gate_up_proj.weight"].shape[0] for r in range(4)]
        self.assertEqual(rows, [26, 26, 26, 22])
        # KV heads: nkv = 2 over T = 3 (trtllm, q rows ceil-split otherwise fine)
        with self.assertRaisesRegex(ref.BadInput, "num_key_value_heads"):
            build(3, 0, "trtllm")
        # config problems
        with self.assertRaisesRegex(ref.BadInput, "tie_word_embeddings"):
            build(1, 0, "vllm", CLM, cfg=make_cfg(CLM, tie_word_embeddings=True))
        with self.assertRaisesRegex(ref.BadInput, "text_config"):
            build(1, 0, "vllm", CG, cfg={"architectures": [CG]})
        with self.assertRaisesRegex(ref.BadInput, "architecture"):
            build(1, 0, "vllm", CLM, cfg=dict(make_cfg(CLM), architectures=["LlamaForCausalLM"]))
        with self.assertRaisesRegex(ref.BadInput, "shape"):
            build(1, 0, "trtllm", CLM, cfg=make_cfg(CLM, hidden_size=128))
        with self.assertRaisesRegex(ref.BadInput, "positive step"):
            build(1, 0, "trtllm", CLM, cfg=make_cfg(CLM, interleave_moe_layer_step=0))
        # a CausalLM checkpoint read as ConditionalGeneration: prefixed keys missing
        with self.assertRaisesRegex(ref.BadInput, "missing"):
            build(1, 0, "vllm", CG, ck=CKS[CLM])
        # non-BF16 data
        ck = FakeCheckpoint(CLM)
        ck.t["model.norm.weight"] = ref.Tensor("F16", ck.t["model.norm.weight"].data)
        with self.assertRaisesRegex(ref.BadInput, "BF16"):
            build(1, 0, "vllm", CLM, ck=ck)

    def test_step_zero_vllm_all_dense(self):
        # vLLM: step 0 -> no MoE layer (step > 0 condition)
        ck = FakeCheckpoint(CLM, step=0)
        p = build(2, 0, "vllm", CLM, ck=ck, cfg=make_cfg(CLM, interleave_moe_layer_step=0))
        self.assertIn("model.layers.1.feed_forward.gate_up_proj.weight", p)
        self.assertFalse(any("experts" in n for n in p))


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
