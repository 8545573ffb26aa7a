"""wmap.load through torch.from_dlpack: bit-exact against tests/python/reference.py at two layouts,
zero-copy (numpy's data pointer == torch's data_ptr() == Tensor.data_ptr), and the buffer kept
alive by torch alone. Skipped (exit 77) when torch is not installed (Debian: python3-torch)."""

import gc
import os
import sys
import weakref

import numpy as np

import wmap
from wmap_test_util import SKIP, TempDir, check, eq, reference, run_tests, synth

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed (apt-get install python3-torch)")
    sys.exit(SKIP)

ref = reference()
SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
TORCH_DTYPE = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "U8": torch.uint8,
               "F8_E4M3": torch.uint8, "F8_E5M2": torch.uint8}  # F8: uint8 bit patterns (legacy DLPack)


def torch_bytes(x):
    """The raw bytes of a torch tensor, through a same-size integer view (no value conversion)."""
    return x.view(SAME_SIZE_INT[x.element_size()]).numpy().tobytes()


def test_llama_two_layouts():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        for tp_size, tp_rank in ((1, 0), (4, 3)):
            label = "llama tp %d/%d" % (tp_rank, tp_size)
            params = wmap.load(ck, tp_size=tp_size, tp_rank=tp_rank, quiet=True)
            expected = ref.expected_summary(ck, tp_size, tp_rank)
            eq(sorted(params), sorted(expected), label + ": parameter names")
            for name, (dtype, shape, data) in expected.items():
                t = params[name]
                x = torch.from_dlpack(t)
                eq(x.dtype, TORCH_DTYPE[dtype], "%s %s torch dtype" % (label, name))
                eq(tuple(x.shape), tuple(shape), "%s %s torch shape" % (label, name))
                eq(x.device.type, "cpu", "%s %s device" % (label, name))
                check(x.is_contiguous(), "%s %s contiguous" % (label, name))
                check(torch_bytes(x) == data, "%s %s: bytes differ from the reference" % (label, name))


def test_zero_copy_same_pointer():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        expected = ref.expected_summary(ck, 2, 1)
        params = wmap.load(ck, tp_size=2, tp_rank=1, quiet=True)
        for name in ("model.embed_tokens.weight", "model.layers.1.self_attn.qkv_proj.weight", "model.norm.weight"):
            t = params[name]
            a = t.numpy()
            x = torch.from_dlpack(t)
            eq(a.__array_interface__["data"][0], t.data_ptr, name + ": numpy pointer")
            eq(x.data_ptr(), t.data_ptr, name + ": torch pointer")
            # One memory: a write through torch is seen by numpy.
            flat = x.view(torch.int16).view(-1)
            flat[0] ^= 0x1234
            eq(int(a.reshape(-1)[0]), int(flat[0]) & 0xFFFF, name + ": torch write seen by numpy")
            flat[0] ^= 0x1234
            check(a.tobytes() == expected[name][2], name + ": restored")
        # torch alone keeps the buffer alive once the Tensor and the dict are gone.
        name = "model.layers.0.mlp.down_proj.weight"
        t = params[name]
        x = torch.from_dlpack(t)
        ptr = t.data_ptr
        gone = weakref.ref(t)
        del t, params
        gc.collect()
        check(gone() is None, "the wmap.Tensor itself is freed")
        junk = [torch.full((1 << 16,), 7, dtype=torch.uint8) for _ in range(64)]
        eq(x.data_ptr(), ptr, "same memory")
        check(torch_bytes(x) == expected[name][2], "bytes intact while only torch holds them")
        del junk, x
        gc.collect()


if __name__ == "__main__":
    print("torch", torch.__version__, "numpy", np.__version__)
    run_tests([
        ("llama at tp 1/1 and 3/4, bit-exact through torch.from_dlpack", test_llama_two_layouts),
        ("zero-copy: numpy, torch and Tensor share one pointer; torch keeps it alive", test_zero_copy_same_pointer),
    ])
