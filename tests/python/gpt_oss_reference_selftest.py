#!/usr/bin/env python3
"""Self-test of tests/python/gpt_oss_reference.py against docs/families/gpt-oss.md.

1. Helpers against the worked numbers of section 5 (H = I = 2880): vLLM rank ranges and
   TRITON param rows, TRT-LLM cutlass padded I and rows per rank, the 128x4 swizzle.
2. End to end on a tiny in-memory fake checkpoint (E=4, H=64, I=96, nh=4, nkv=2, hd=16,
   V=100, 1 layer): every parameter's name, dtype and shape for T in {1, 2, 4} and both
   targets (expected shapes written out by hand from sections 3 and 4), vLLM w2_bias zero on
   ranks r > 0 under TP, TRT-LLM [up; gate] de-interleave, scale swizzle, F32 sinks, EP and
   attention-DP layouts, and the BadInput cases.

Run: /usr/bin/python3 tests/python/gpt_oss_reference_selftest.py   (exit 0 on success)
"""

import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402
import gpt_oss_reference as go  # noqa: E402


# --------------------------------------------------------------------------------------
# 1. Helpers vs section 5 worked numbers
# --------------------------------------------------------------------------------------

class WorkedNumbers(unittest.TestCase):
    H = I = 2880

    def test_vllm_rank_ranges(self):
        # Section 5 column "vLLM rows of I per rank"
        want = {
            1: [(0, 2880)],
            2: [(0, 1440), (1440, 2880)],
            4: [(0, 736), (736, 1472), (1472, 2208), (2208, 2880)],
            8: [(384 * k, 384 * (k + 1)) for k in range(7)] + [(2688, 2880)],
        }
        for T, ranges in want.items():
            got = [go.vllm_moe_rows(self.I, T, r) for r in range(T)]
            self.assertEqual(got, ranges, "T=%d" % T)

    def test_vllm_rank_past_I_is_empty(self):
        # Section 3: a rank past I gets nothing.  I = 96 (3 blocks), T = 4: Ir = 32.
        self.assertEqual([go.vllm_moe_rows(96, 4, r) for r in range(4)],
                         [(0, 32), (32, 64), (64, 96), (96, 96)])

    def test_vllm_param_rows(self):
        # Section 5 column "vLLM w13 param rows (TRITON: 2*rup(I/T,64))"
        for T, rows in ((1, 5760), (2, 2944), (4, 1536), (8, 768)):
            Hp, Ip = go.vllm_triton_padded_sizes(self.H, self.I, T)
            self.assertEqual(Hp, 2880)
            self.assertEqual(2 * Ip, rows, "T=%d" % T)
        # Section 6.4: rank 3 of T = 4 fills 1344 of 1536 rows
        s, e = go.vllm_moe_rows(self.I, 4, 3)
        self.assertEqual(2 * (e - s), 1344)

    def test_cutlass_padded_I(self):
        # Section 5 "TRT cutlass/trtllmgen: padded I, per rank"
        for T, padded, per in ((1, 2944, 2944), (2, 3072, 1536), (4, 3072, 768), (8, 3072, 384)):
            z = go.cutlass_sizes(self.H, self.I, T)
            self.assertEqual(z["I_pad"], padded, "T=%d" % T)
            self.assertEqual(z["shard"], per, "T=%d" % T)
            self.assertEqual(z["Ipad"], per, "T=%d create_weights rup(I/T,128)" % T)
            self.assertEqual(z["Hp"], 2944)
            self.assertEqual(z["scale_shard"], per // 32, "T=%d down scale shard" % T)

    def test_get_weight_alignment(self):
        # Hand-computed: T=4: A0 = lcm(128,32,4) = 128, rup(2880,128)/4 = 736, 736 % 128 = 96
        # -> A = 128 * cdiv(736,128) * 4 = 3072.  T=1: 2944 % 128 == 0 -> A = A0 = 128.
        self.assertEqual(go.get_weight_alignment(128, 32, 4, 2880), 3072)
        self.assertEqual(go.get_weight_alignment(128, 32, 1, 2880), 128)
        # A2 for the down scales (width I/32 = 90), T = 4: rup(90,128)/4 = 32 -> 512.
        self.assertEqual(go.get_weight_alignment(128, 32, 4, 90), 512)
        # non power of two: T = 3: A0 = lcm(128,32,3) = 384, rup(2880,384)/3 = 1024 -> A0.
        self.assertEqual(go.get_weight_alignment(128, 32, 3, 2880), 384)

    def test_swizzle_permutation_and_elements(self):
        rows, cols = 256, 8
        idx = go.block_scale_interleave_index(rows, cols)
        self.assertEqual(sorted(idx.ravel().tolist()), list(range(rows * cols)))
        # Hand-checked: dst(m,k) = k%4 + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + (m/128)*128*8
        self.assertEqual(idx[0, 0], 0)
        self.assertEqual(idx[0, 3], 3)
        self.assertEqual(idx[1, 0], 16)
        self.assertEqual(idx[32, 0], 4)
        self.assertEqual(idx[0, 4], 512)
        self.assertEqual(idx[128, 0], 1024)
        # (37, 5): 1 + 512 + 5*16 + 1*4 + 0 = 597
        self.assertEqual(idx[37, 5], 597)
        # (200, 6): 2 + 512 + (200%32=8)*16 + ((200%128=72)/32=2)*4 + 1*1024 = 1674
        self.assertEqual(idx[200, 6], 1674)
        # applied to data: a matrix holding distinct values lands where the index says
        x = (np.arange(rows * cols) % 251).astype(np.uint8).reshape(rows, cols)
        y = go.block_scale_interleave(x).ravel()
        self.assertEqual(y[597], x[37, 5])
        self.assertEqual(y[1674], x[200, 6])
        self.assertTrue(np.array_equal(y[idx], x))

    def test_swizzle_pads(self):
        # rows padded to 128, cols to 4 (zeros), then the same formula
        x = np.full((3, 3), 7, dtype=np.uint8)
        y = go.block_scale_interleave(x)
        self.assertEqual(y.shape, (128, 4))
        self.assertEqual(int(y.sum()), 7 * 9)
        self.assertEqual(y.ravel()[16 * 2 + 1], 7)  # (m=2, k=1) -> 2*16 + 1

    def test_bf16_widening(self):
        self.assertEqual(go.bf16_to_f32_bits(np.array([0x3F80], np.uint16))[0], 0x3F800000)
        v = go.bf16_to_f32_bits(np.array([0xC040, 0x0001], np.uint16)).view(np.float32)
        self.assertEqual(v[0], -3.0)


# --------------------------------------------------------------------------------------
# 2. Tiny fake checkpoint
# --------------------------------------------------------------------------------------

E, H, I, NH, NKV, HD, V, L = 4, 64, 96, 4, 2, 16, 100, 1
CFG = {
    "architectures": ["GptOssForCausalLM"],
    "hidden_size": H, "intermediate_size": I, "num_local_experts": E,
    "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
    "vocab_size": V, "num_hidden_layers": L, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "mxfp4"},
}


class FakeCheckpoint:
    """In-memory stand-in for reference.Checkpoint: get / has / dtype_shape / names / used."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.t = {}

        def add(name, dtype, shape):
            raw = ref.RAW[ref.DTYPE_SIZES[dtype]]
            info = np.iinfo(raw)
            # nonzero values so that zero padding is distinguishable from data
            a = rng.integers(1, min(int(info.max), 2 ** 16 - 1), size=shape, dtype=np.int64)
            self.t[name] = ref.Tensor(dtype, a.astype(raw))

        add("model.embed_tokens.weight", "BF16", (V, H))
        add("lm_head.weight", "BF16", (V, H))
        add("model.norm.weight", "BF16", (H,))
        for i in range(L):
            p = "model.layers.%d." % i
            add(p + "input_layernorm.weight", "BF16", (H,))
            add(p + "post_attention_layernorm.weight", "BF16", (H,))
            for proj, rows in (("q_proj", NH * HD), ("k_proj", NKV * HD), ("v_proj", NKV * HD)):
                add(p + "self_attn.%s.weight" % proj, "BF16", (rows, H))
                add(p + "self_attn.%s.bias" % proj, "BF16", (rows,))
            add(p + "self_attn.o_proj.weight", "BF16", (H, NH * HD))
            add(p + "self_attn.o_proj.bias", "BF16", (H,))
            add(p + "self_attn.sinks", "BF16", (NH,))
            add(p + "mlp.router.weight", "BF16", (E, H))
            add(p + "mlp.router.bias", "BF16", (E,))
            x = p + "mlp.experts."
            add(x + "gate_up_proj_blocks", "U8", (E, 2 * I, H // 32, 16))
            add(x + "gate_up_proj_scales", "U8", (E, 2 * I, H // 32))
            add(x + "gate_up_proj_bias", "BF16", (E, 2 * I))
            add(x + "down_proj_blocks", "U8", (E, H, I // 32, 16))
            add(x + "down_proj_scales", "U8", (E, H, I // 32))
            add(x + "down_proj_bias", "BF16", (E, H))
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


CK = FakeCheckpoint()


def build(T, r, target, P=1, adp=False, backend=None, ck=None, cfg=None):
    lay = ref.Layout(T, r, ep_size=P, target=target, attention_dp=adp, moe_backend=backend)
    return go.GptOssBuilder(ck or CK, cfg or CFG, lay).build()


def as_u8(t):
    """A parameter's raw bytes as uint8 with the last axis in bytes."""
    a = np.ascontiguousarray(t.data)
    return a.view(np.uint8).reshape(a.shape[:-1] + (-1,))


def vllm_expected(T, P=1):
    """Section 3 table, written out for the tiny model (hand-evaluated sizes)."""
    Vrows = {1: 128, 2: 64, 4: 32}[T]              # Vp = rup(100, 64) = 128, Vp / T
    qkv = {1: 128, 2: 64, 4: 48}[T]                # (nh/T + 2*max(nkv/T,1)) * hd
    El = E if P == 1 else E // P
    Ip = {1: 128, 2: 64, 4: 64}[T] if P == 1 else 128   # rup(I / moe_tp, 64)
    L0 = "model.layers.0."
    X = L0 + "mlp.experts."
    return {
        "model.embedding.weight": ("BF16", (Vrows, H)),
        "lm_head.weight": ("BF16", (Vrows, H)),
        "model.norm.weight": ("BF16", (H,)),
        L0 + "input_layernorm.weight": ("BF16", (H,)),
        L0 + "post_attention_layernorm.weight": ("BF16", (H,)),
        L0 + "attn.qkv_proj.weight": ("BF16", (qkv, H)),
        L0 + "attn.qkv_proj.bias": ("BF16", (qkv,)),
        L0 + "attn.o_proj.weight": ("BF16", (H, 64 // T)),
        L0 + "attn.o_proj.bias": ("BF16", (H,)),
        L0 + "attn.sinks": ("BF16", (NH // T,)),
        L0 + "mlp.router.weight": ("BF16", (E, H)),
        L0 + "mlp.router.bias": ("BF16", (E,)),
        X + "w13_weight": ("U8", (El, 2 * Ip, H // 2)),
        X + "w13_weight_scale": ("U8", (El, 2 * Ip, H // 32)),
        X + "w13_bias": ("BF16", (El, 2 * Ip)),
        X + "w2_weight": ("U8", (El, H, Ip // 2)),
        X + "w2_weight_scale": ("U8", (El, H, Ip // 32)),
        X + "w2_bias": ("BF16", (El, H)),
    }


def trtllm_expected(T, P=1, adp=False):
    """Section 4 table (cutlass), written out for the tiny model: Hp = rup(64,128) = 128,
    Ipad = rup(96 / Tm, 128) = 128 for Tm in {1, 2, 4}."""
    aT = 1 if adp else T
    Vrows = {1: 100, 2: 50, 4: 25}[aT]             # cdiv(V, T)
    El, Hp, Ipad = E // P, 128, 128
    B = "model.block.0."
    X = B + "mlp.experts.backend."
    return {
        "model.embedding.weight": ("BF16", (Vrows, H)),
        "lm_head.weight": ("BF16", (Vrows, H)),
        "model.norm.weight": ("BF16", (H,)),
        B + "input_layernorm.weight": ("BF16", (H,)),
        B + "attn.norm.weight": ("BF16", (H,)),
        B + "post_attention_layernorm.weight": ("BF16", (H,)),
        B + "mlp.norm.weight": ("BF16", (H,)),
        B + "attn.qkv_proj.weight": ("BF16", (128 // aT, H)),   # (nh + 2 nkv) hd / T
        B + "attn.qkv_proj.bias": ("BF16", (128 // aT,)),
        B + "attn.o_proj.weight": ("BF16", (H, 64 // aT)),
        B + "attn.o_proj.bias": ("BF16", (H,)),
        B + "attn.sinks": ("F32", (NH // aT,)),
        B + "mlp.gate.weight": ("BF16", (E, H)),
        B + "mlp.gate.bias": ("BF16", (E,)),
        X + "w3_w1_weight": ("I64", (El, 2 * Ipad, Hp // 16)),
        X + "w3_w1_bias": ("BF16", (El, 2 * Ipad)),
        X + "w2_weight": ("I64", (El, Hp, Ipad // 16)),
        X + "w2_bias": ("BF16", (El, Hp)),
        X + "w3_w1_weight_scale": ("I32", (El, 2 * Ipad, Hp // 128)),
        X + "w2_weight_scale": ("I32", (El, Hp, Ipad // 128)),
        X + "fake_input_scale": ("F32", (El,)),  # W4A8MXFP4MXFP8CutlassFusedMoEMethod: 1.0
    }


class EndToEnd(unittest.TestCase):

    def assertLayout(self, params, want, what):
        self.assertEqual(sorted(params), sorted(want), what + ": parameter names")
        for n, (dt, shape) in want.items():
            t = params[n]
            self.assertEqual((t.dtype, t.shape), (dt, shape), "%s: %s" % (what, n))
            self.assertEqual(t.data.dtype.itemsize, ref.DTYPE_SIZES[dt], "%s: %s item" % (what, n))

    # ---- shapes --------------------------------------------------------------------

    def test_vllm_shapes(self):
        for T in (1, 2, 4):
            for r in range(T):
                self.assertLayout(build(T, r, "vllm"), vllm_expected(T), "vllm T=%d r=%d" % (T, r))
        for T in (2, 4):  # EP: P == T
            for r in range(T):
                self.assertLayout(build(T, r, "vllm", P=T), vllm_expected(T, P=T),
                                  "vllm EP T=%d r=%d" % (T, r))

    def test_trtllm_shapes(self):
        for T in (1, 2):
            for P in sorted({1, T}):
                for r in range(T):
                    self.assertLayout(build(T, r, "trtllm", P=P), trtllm_expected(T, P),
                                      "trtllm T=%d P=%d r=%d" % (T, P, r))
        # T = 4 > nkv = 2: only under attention DP
        for P in (1, 2, 4):
            for r in range(4):
                self.assertLayout(build(4, r, "trtllm", P=P, adp=True),
                                  trtllm_expected(4, P, adp=True),
                                  "trtllm ADP T=4 P=%d r=%d" % (P, r))

    def test_all_checkpoint_keys_read(self):
        for target in ("vllm", "trtllm"):
            ck = FakeCheckpoint()
            build(1, 0, target, ck=ck)
            self.assertEqual(sorted(ck.used), ck.names(), target)

    # ---- vLLM content --------------------------------------------------------------

    def test_vllm_w2_bias_zero_off_rank0(self):
        src = CK.raw("model.layers.0.mlp.experts.down_proj_bias")
        for T in (1, 2, 4):
            for r in range(T):
                b = build(T, r, "vllm")["model.layers.0.mlp.experts.w2_bias"].data
                if r == 0:
                    self.assertTrue(np.array_equal(b, src), "T=%d r=0 full" % T)
                else:
                    self.assertFalse(b.any(), "T=%d r=%d zeros" % (T, r))
        # EP: no zeroing, the rank's experts
        b = build(2, 1, "vllm", P=2)["model.layers.0.mlp.experts.w2_bias"].data
        self.assertTrue(np.array_equal(b, src[2:4]))

    def test_vllm_expert_rows(self):
        X = "model.layers.0.mlp.experts."
        blocks = CK.raw(X + "gate_up_proj_blocks").reshape(E, 2 * I, H // 2)
        down = CK.raw(X + "down_proj_blocks").reshape(E, H, I // 2)
        dscale = CK.raw(X + "down_proj_scales")
        gbias = CK.raw(X + "gate_up_proj_bias")
        # T = 2 rank 1: Ir = 64, rows [64, 96) -> ckpt rows [128, 192), interleave kept
        p = build(2, 1, "vllm")
        w13 = p[X + "w13_weight"].data
        self.assertTrue(np.array_equal(w13[:, :64], blocks[:, 128:192]))
        self.assertFalse(w13[:, 64:].any())
        self.assertTrue(np.array_equal(p[X + "w13_bias"].data[:, :64], gbias[:, 128:192]))
        w2 = p[X + "w2_weight"].data
        self.assertTrue(np.array_equal(w2[:, :, :16], down[:, :, 32:48]))
        self.assertFalse(w2[:, :, 16:].any())
        w2s = p[X + "w2_weight_scale"].data  # [E, H, Ip/32 = 2]
        self.assertTrue(np.array_equal(w2s[:, :, 0], dscale[:, :, 2]))
        self.assertFalse(w2s[:, :, 1].any())
        # T = 4 rank 3: past I -> every expert param all zero
        p = build(4, 3, "vllm")
        for n in ("w13_weight", "w13_weight_scale", "w13_bias", "w2_weight", "w2_weight_scale", "w2_bias"):
            self.assertFalse(p[X + n].data.any(), n)
        # T = 1: everything in place, padded 96 -> 128
        p = build(1, 0, "vllm")
        self.assertTrue(np.array_equal(p[X + "w13_weight"].data[:, :192], blocks))
        self.assertFalse(p[X + "w13_weight"].data[:, 192:].any())

    def test_vllm_attention(self):
        S = "model.layers.0.self_attn."
        q, k, v = (CK.raw(S + n + "_proj.weight") for n in "qkv")
        # T = 4 > nkv = 2: rank 3 -> q head 3, kv head 3 // 2 = 1
        p = build(4, 3, "vllm")
        want = np.concatenate([q[48:64], k[16:32], v[16:32]])
        self.assertTrue(np.array_equal(p["model.layers.0.attn.qkv_proj.weight"].data, want))
        self.assertTrue(np.array_equal(p["model.layers.0.attn.sinks"].data,
                                       CK.raw(S + "sinks")[3:4]))
        self.assertTrue(np.array_equal(p["model.layers.0.attn.o_proj.weight"].data,
                                       CK.raw(S + "o_proj.weight")[:, 48:64]))
        # vocabulary: Vp = 128, T = 2 rank 1 rows [64, 100) then 28 zero rows
        e = build(2, 1, "vllm")["model.embedding.weight"].data
        self.assertTrue(np.array_equal(e[:36], CK.raw("model.embed_tokens.weight")[64:100]))
        self.assertFalse(e[36:].any())

    # ---- TRT-LLM content -----------------------------------------------------------

    def test_trtllm_up_before_gate(self):
        X = "model.layers.0.mlp.experts."
        B = "model.block.0.mlp.experts.backend."
        blocks = CK.raw(X + "gate_up_proj_blocks").reshape(E, 2 * I, H // 2)
        gbias = CK.raw(X + "gate_up_proj_bias")
        p = build(1, 0, "trtllm")
        w = as_u8(p[B + "w3_w1_weight"])           # [E, 256, 64] bytes
        self.assertEqual(w.shape, (E, 256, 64))
        # rows [0, 96) = up (ckpt odd rows), [128, 224) = gate (ckpt even rows)
        self.assertTrue(np.array_equal(w[:, 0:96, :32], blocks[:, 1::2]))
        self.assertTrue(np.array_equal(w[:, 128:224, :32], blocks[:, 0::2]))
        self.assertFalse(w[:, 96:128].any() or w[:, 224:].any() or w[:, :, 32:].any())
        # one element by hand: expert 2, up row 5 = ckpt row 11, byte 7
        self.assertEqual(w[2, 5, 7], blocks[2, 11, 7])
        self.assertEqual(w[2, 128 + 5, 7], blocks[2, 10, 7])
        b = p[B + "w3_w1_bias"].data
        self.assertTrue(np.array_equal(b[:, :96], gbias[:, 1::2]))
        self.assertTrue(np.array_equal(b[:, 128:224], gbias[:, 0::2]))
        # little-endian int64 view: byte 0 of the word is the low byte
        self.assertEqual(int(p[B + "w3_w1_weight"].data[2, 5, 0]) & 0xFF, int(blocks[2, 11, 0]))

    def test_trtllm_split_and_padding(self):
        # Tm = 2: A = 256, gate/up padded 96 -> 256 rows, 128 per rank: rank 0 gets the
        # 96 real rows + 32 zero rows, rank 1 only padding.
        X = "model.layers.0.mlp.experts."
        B = "model.block.0.mlp.experts.backend."
        blocks = CK.raw(X + "gate_up_proj_blocks").reshape(E, 2 * I, H // 2)
        down = CK.raw(X + "down_proj_blocks").reshape(E, H, I // 2)
        p0, p1 = build(2, 0, "trtllm"), build(2, 1, "trtllm")
        w0 = as_u8(p0[B + "w3_w1_weight"])
        self.assertTrue(np.array_equal(w0[:, :96, :32], blocks[:, 1::2]))
        self.assertTrue(np.array_equal(w0[:, 128:224, :32], blocks[:, 0::2]))
        self.assertFalse(as_u8(p1[B + "w3_w1_weight"]).any())
        d0 = as_u8(p0[B + "w2_weight"])             # [E, 128, 64]
        self.assertTrue(np.array_equal(d0[:, :64, :48], down))
        self.assertFalse(d0[:, 64:].any() or d0[:, :, 48:].any())
        self.assertFalse(as_u8(p1[B + "w2_weight"]).any())
        # w2_bias full (padded to 128) on every rank
        db = CK.raw(X + "down_proj_bias")
        for p in (p0, p1):
            self.assertTrue(np.array_equal(p[B + "w2_bias"].data[:, :64], db))
            self.assertFalse(p[B + "w2_bias"].data[:, 64:].any())
        # EP P = 2, T = 2: Tm = 1, rank 1 holds experts 2, 3 with all of I
        pe = build(2, 1, "trtllm", P=2)
        we = as_u8(pe[B + "w3_w1_weight"])
        self.assertTrue(np.array_equal(we[:, :96, :32], blocks[2:4, 1::2]))

    def test_trtllm_scale_swizzle(self):
        X = "model.layers.0.mlp.experts."
        B = "model.block.0.mlp.experts.backend."
        sc = CK.raw(X + "gate_up_proj_scales")      # [E, 192, 2]
        ds = CK.raw(X + "down_proj_scales")         # [E, 64, 3]
        p = build(1, 0, "trtllm")
        got = as_u8(p[B + "w3_w1_weight_scale"]).reshape(E, -1)   # swizzled bytes
        self.assertEqual(got.shape, (E, 256 * 4))
        # unswizzled [up; gate] matrix [256, 4], built independently
        m = np.zeros((E, 256, 4), np.uint8)
        m[:, :96, :2] = sc[:, 1::2]
        m[:, 128:224, :2] = sc[:, 0::2]
        idx = go.block_scale_interleave_index(256, 4)
        self.assertTrue(np.array_equal(got[:, idx], m))
        # by hand: up row 40 (ckpt row 81), col 1 -> 1 + 8*16 + 1*4 + 0 = 133
        self.assertEqual(got[1, 133], sc[1, 81, 1])
        # gate row 0 (ckpt row 0) at m = 128 -> 128 * 4 = 512
        self.assertEqual(got[3, 512], sc[3, 0, 0])
        # down scales [128, 4] (H 64 -> 128 rows, I/32 3 -> 4 cols)
        got2 = as_u8(p[B + "w2_weight_scale"]).reshape(E, -1)
        m2 = np.zeros((E, 128, 4), np.uint8)
        m2[:, :64, :3] = ds
        self.assertTrue(np.array_equal(got2[:, go.block_scale_interleave_index(128, 4)], m2))
        # (m=33, k=2) -> 2 + 1*16 + 1*4 = 22
        self.assertEqual(got2[0, 22], ds[0, 33, 2])

    def test_trtllm_attention(self):
        S = "model.layers.0.self_attn."
        B = "model.block.0."
        q, k, v = (CK.raw(S + n + "_proj.bias") for n in "qkv")
        p = build(2, 1, "trtllm")
        want = np.concatenate([q[32:64], k[16:32], v[16:32]])
        self.assertTrue(np.array_equal(p[B + "attn.qkv_proj.bias"].data, want))
        s = p[B + "attn.sinks"]
        self.assertEqual(s.data.dtype, np.uint32)
        self.assertTrue(np.array_equal(s.data, CK.raw(S + "sinks")[2:4].astype(np.uint32) << 16))
        self.assertIs(p[B + "attn.norm.weight"].data, p[B + "input_layernorm.weight"].data)
        self.assertTrue(np.array_equal(p[B + "mlp.norm.weight"].data,
                                       CK.raw("model.layers.0.post_attention_layernorm.weight")))
        self.assertNotIn(B + "next_layer_layernorm.weight", p)
        # vocab: cdiv(100, 2) = 50 rows; T = 3 is not a layout here, use ADP full
        self.assertTrue(np.array_equal(p["lm_head.weight"].data, CK.raw("lm_head.weight")[50:100]))
        pa = build(4, 2, "trtllm", adp=True)
        self.assertTrue(np.array_equal(pa["lm_head.weight"].data, CK.raw("lm_head.weight")))
        self.assertTrue(np.array_equal(pa[B + "attn.sinks"].data,
                                       CK.raw(S + "sinks").astype(np.uint32) << 16))

    # ---- refusals ------------------------------------------------------------------

    def test_bad_inputs(self):
        with self.assertRaisesRegex(ref.BadInput, "does not duplicate KV heads"):
            build(4, 0, "trtllm")
        with self.assertRaisesRegex(ref.BadInput, "wfp4a16"):
            build(1, 0, "trtllm", backend="wfp4a16")
        with self.assertRaisesRegex(ref.BadInput, "marlin"):
            build(1, 0, "vllm", backend="marlin")
        build(1, 0, "trtllm", backend="cutlass")
        build(1, 0, "vllm", backend="triton")
        cfg = dict(CFG, quantization_config={"quant_method": "fp8"})
        with self.assertRaisesRegex(ref.BadInput, "mxfp4"):
            build(1, 0, "vllm", cfg=cfg)
        cfg = dict(CFG, hidden_size=128)
        with self.assertRaisesRegex(ref.BadInput, "shape"):
            build(1, 0, "trtllm", cfg=cfg)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
