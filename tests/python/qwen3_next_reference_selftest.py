#!/usr/bin/env python3
"""Self-test of tests/python/qwen3_next_reference.py against docs/families/llama4-qwen3next.md §2.4.

The worked example: the real model's linear-attention sizes (nk 16, nv 32, dk = dv = 128: a
group of in_proj_qkvz is 768 rows, conv1d 8192 rows) at T = 4, rank 1: vLLM holds rows
3072-6143 as they are; TensorRT-LLM rows {3072 + 768 j + [0,128)} (Q of groups 4-7), then
+[128,256) (K), +[256,512) (V), +[512,768) (Z); conv1d rows [512,1024) + [2560,3072) +
[5120,6144) on both (3-D on vLLM, 2-D on TRT-LLM); A_log/dt_bias elements 8-15 (TRT-LLM both
float32, vLLM A_log float32 and dt_bias bf16). Checked on a fake checkpoint whose every row
holds its own index, with hidden size 2.

Run: /usr/bin/python3 tests/python/qwen3_next_reference_selftest.py   (exit 0 on success)
"""

import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402
import qwen3_next_reference as q3n  # noqa: E402

NK, NV, DK, DV, KERNEL, H = 16, 32, 128, 128, 4, 2
P = "model.layers.0.linear_attn."


class FakeCheckpoint:
    """Rows numbered: element (i, ...) of each tensor is i (as BF16 bits)."""

    def __init__(self):
        rows = {"in_proj_qkvz.weight": (2 * NK * DK + 2 * NV * DV, H), "in_proj_ba.weight": (2 * NV, H),
                "conv1d.weight": (2 * NK * DK + NV * DV, 1, KERNEL), "A_log": (NV,), "dt_bias": (NV,),
                "norm.weight": (DV,), "out_proj.weight": (H, NV * DV)}
        self.t = {}
        for name, shape in rows.items():
            idx = np.arange(shape[0], dtype=np.uint16).reshape((shape[0],) + (1,) * (len(shape) - 1))
            self.t[P + name] = ref.Tensor("BF16", np.broadcast_to(idx, shape).copy())

    def get(self, name):
        return self.t[name]

    def has(self, name):
        return name in self.t


def build(target):
    cfg = {"hidden_size": H, "linear_num_key_heads": NK, "linear_num_value_heads": NV, "linear_key_head_dim": DK,
           "linear_value_head_dim": DV}
    b = q3n.Qwen3NextBuilder(FakeCheckpoint(), cfg, ref.Layout(4, 1, target=target))
    b.nk, b.nv, b.dk, b.dv = NK, NV, DK, DV
    b.linear_attention("model.layers.0.")
    return b.params


def rows_of(t):
    return list(t.data.reshape(t.data.shape[0], -1)[:, 0].astype(int))


class WorkedExample(unittest.TestCase):
    def test_vllm_keeps_the_groups(self):
        p = build("vllm")
        self.assertEqual(rows_of(p[P + "in_proj_qkvz.weight"]), list(range(3072, 6144)))

    def test_trtllm_reorders_to_dense(self):
        p = build("trtllm")
        want = []
        for lo, hi in ((0, 128), (128, 256), (256, 512), (512, 768)):
            for j in range(4):
                want += list(range(3072 + 768 * j + lo, 3072 + 768 * j + hi))
        self.assertEqual(rows_of(p[P + "in_proj_qkvz.weight"]), want)
        # ba: group g is [b_g (2) | a_g (2)]; rank 1 holds groups 4-7: b rows then a rows
        self.assertEqual(rows_of(p[P + "in_proj_ba.weight"]),
                         [16, 17, 20, 21, 24, 25, 28, 29, 18, 19, 22, 23, 26, 27, 30, 31])

    def test_conv1d_rows_on_both(self):
        want = list(range(512, 1024)) + list(range(2560, 3072)) + list(range(5120, 6144))
        v, t = build("vllm")[P + "conv1d.weight"], build("trtllm")[P + "conv1d.weight"]
        self.assertEqual(v.shape, (2048, 1, KERNEL))
        self.assertEqual(t.shape, (2048, KERNEL))
        self.assertEqual(rows_of(v), want)
        self.assertEqual(rows_of(t), want)

    def test_a_log_and_dt_bias(self):
        v, t = build("vllm"), build("trtllm")
        for params, a_dtype, dt_dtype in ((v, "F32", "BF16"), (t, "F32", "F32")):
            self.assertEqual(params[P + "A_log"].dtype, a_dtype)
            self.assertEqual(params[P + "dt_bias"].dtype, dt_dtype)
            for name in ("A_log", "dt_bias"):
                x = params[P + name].data.astype(np.uint32)
                if params[P + name].dtype == "F32":
                    x = x >> 16  # exact widening: the BF16 bits in the high half
                self.assertEqual(list(x), list(range(8, 16)))


if __name__ == "__main__":
    unittest.main()
