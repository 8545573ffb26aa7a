"""wmap.load_into: the rank's parameters written into the caller's own tensors (numpy arrays and a
torch module's parameters, as an engine's load_weights would call it), bit-exact against
tests/python/reference.py under both targets; every destination problem raised at once with
nothing written; and a refit after the checkpoint's shards were rewritten. The torch part is
skipped when torch is not installed (Debian: python3-torch)."""

import os
import shutil

import numpy as np

import wmap
from wmap_test_util import TempDir, check, eq, module_like, reference, run_tests, synth

try:
    import torch
except ImportError:
    torch = None

ref = reference()
BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8}
DS_VLLM = ("--fp8", "--heads", "8", "--intermediate", "512", "--moe-intermediate", "512")
SENTINEL = 0xAB


def numpy_destinations(expected):
    """One sentinel-filled array per expected parameter (none tied here), of its shape and element size."""
    return {name: np.full(shape, SENTINEL, dtype=BY_SIZE[SIZE[dtype]]) for name, (dtype, shape, _) in expected.items()}


def test_numpy_bit_exact_both_targets():
    with TempDir() as d:
        llama = synth(os.path.join(d, "llama"), "llama")
        ds = synth(os.path.join(d, "ds"), "deepseek_v3", "--fp8")
        ds_v = synth(os.path.join(d, "ds_v"), "deepseek_v3", *DS_VLLM)
        for ck, tp, rank, target in ((llama, 2, 1, "trtllm"), (llama, 4, 3, "vllm"), (ds, 2, 0, "trtllm"),
                                     (ds, 4, 3, "trtllm"), (ds_v, 2, 1, "vllm"), (ds_v, 1, 0, "vllm")):
            label = "%s tp %d/%d %s" % (os.path.basename(ck), rank, tp, target)
            expected = ref.expected_summary(ck, tp, rank, target=target)
            dests = numpy_destinations(expected)
            pointers = {n: a.__array_interface__["data"][0] for n, a in dests.items()}
            r = wmap.load_into(ck, dests, tp_size=tp, tp_rank=rank, target=target, quiet=True)
            eq(r["params"], len(dests), label + ": params written")
            eq(r["device"], "host", label + ": device")
            check(r["bytes"] > 0 and r["seconds"] >= 0 and r["gbps"] >= 0, label + ": report %r" % r)
            for name, (dtype, shape, data) in expected.items():
                check(dests[name].tobytes() == data, "%s %s: bytes differ from the reference" % (label, name))
                eq(dests[name].__array_interface__["data"][0], pointers[name], label + " " + name + ": not reallocated")


def test_numpy_fp8_formats_both_targets():
    """Per-tensor and per-channel FP8 into numpy arrays (0-d scales included), bit-exact against the
    reference: TensorRT-LLM's requantised fused weights and reduced scales, vLLM's per-part scales."""
    dims = ("--fp8", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "128",
            "--intermediate", "512", "--experts", "4", "--moe-intermediate", "256")
    with TempDir() as d:
        modelopt = synth(os.path.join(d, "modelopt"), "qwen3_moe", *dims, "--fp8-format", "modelopt", "--kv-scales")
        channel = synth(os.path.join(d, "channel"), "qwen3", *dims[:11], "--fp8-format", "ct-channel",
                        "--no-tie-embeddings")
        for ck, tp, rank, ep, target in ((modelopt, 2, 1, 1, "trtllm"), (modelopt, 4, 2, 2, "trtllm"),
                                         (modelopt, 2, 0, 2, "vllm"), (channel, 2, 1, 1, "trtllm"),
                                         (channel, 4, 3, 1, "vllm")):
            label = "%s tp %d/%d ep %d %s" % (os.path.basename(ck), rank, tp, ep, target)
            expected = ref.expected_summary(ck, tp, rank, ep, target=target)
            dests = numpy_destinations(expected)
            r = wmap.load_into(ck, dests, tp_size=tp, tp_rank=rank, ep_size=ep, target=target, quiet=True)
            eq(r["params"], len(dests), label + ": params written")
            for name, (dtype, shape, data) in expected.items():
                check(dests[name].tobytes() == data, "%s %s: bytes differ from the reference" % (label, name))


def test_problems_raised_at_once_nothing_written():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        expected = ref.expected_summary(ck, 2, 0)
        dests = numpy_destinations(expected)
        del dests["lm_head.weight"]                                            # missing
        dests["model.norm.weight"] = np.full((3,), SENTINEL, np.uint16)        # wrong shape
        dests["model.layers.0.input_layernorm.weight"] = np.full((64,), SENTINEL, np.uint32)  # element size
        dests["model.layers.0.mlp.down_proj.weight"] = np.full((88, 64), SENTINEL, np.uint16).T  # transposed view
        dests["model.extra.weight"] = np.zeros((2,), np.uint16)                # not planned
        try:
            wmap.load_into(ck, dests, tp_size=2, tp_rank=0, quiet=True)
        except wmap.ValidationError as e:
            msg = str(e)
            for want in ("5 problem(s)", "missing: lm_head.weight", "shape: model.norm.weight: destination shape [3]",
                         "dtype: model.layers.0.input_layernorm.weight: destination elements of 4 byte(s)",
                         "model.layers.0.mlp.down_proj.weight: destination is not contiguous",
                         "model.extra.weight: a destination the plan does not fill"):
                check(want in msg, "%r in %s" % (want, msg))
        else:
            raise AssertionError("no ValidationError")
        for name, a in dests.items():
            if name != "model.extra.weight":
                check(bool(np.all(a == SENTINEL)), name + ": written although the load was refused")
        # ignore= lets the caller keep its own; a pattern that does not compile is an error.
        dests = numpy_destinations(expected)
        dests["model.extra.weight"] = np.zeros((2,), np.uint16)
        r = wmap.load_into(ck, dests, tp_size=2, tp_rank=0, ignore=[r"model\.extra\..*"], quiet=True)
        eq(r["ignored"], ["model.extra.weight"], "ignored")
        try:
            wmap.load_into(ck, dests, tp_size=2, tp_rank=0, ignore=[r"lm_head\..*"], quiet=True)
        except wmap.Error as e:
            check("an ignore pattern matches planned parameter 'lm_head.weight'" in str(e), str(e))
        else:
            raise AssertionError("an ignore pattern over a planned parameter was accepted")
        try:
            wmap.load_into(ck, dests, tp_size=2, tp_rank=0, ignore=["(x"], quiet=True)
        except wmap.Error as e:
            check("ignore pattern '(x' does not compile" in str(e), str(e))
        else:
            raise AssertionError("a bad ignore pattern was accepted")
        try:
            wmap.load_into(ck, {"model.norm.weight": [0] * 64}, quiet=True)
        except TypeError as e:
            check("does not export DLPack" in str(e), str(e))
        else:
            raise AssertionError("a list was accepted as a destination")


def test_torch_module_engine_style_and_refit():
    if torch is None:
        return "skip"
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "U8": torch.uint8,
              "F8_E4M3": torch.uint8}  # an engine's float8 parameter, as bytes (torch < 2.1 has no float8)
    same_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
    with TempDir() as d:
        for family, flags, tp, rank, target in (("llama", (), 2, 1, "trtllm"), ("llama", (), 4, 3, "vllm"),
                                                ("qwen3", (), 2, 1, "vllm"), ("deepseek_v3", ("--fp8",), 2, 1, "trtllm"),
                                                ("deepseek_v3", ("--fp8",), 4, 2, "trtllm"), ("deepseek_v3", DS_VLLM, 2, 1, "vllm")):
            ck = synth(os.path.join(d, "%s-%s-%d" % (family, target, tp)), family, *flags)
            expected = ref.expected_summary(ck, tp, rank, target=target)
            model = module_like(expected, dtypes)
            pointers = {n: p.data_ptr() for n, p in model.named_parameters()}
            wmap.load_into(ck, dict(model.named_parameters()), tp_size=tp, tp_rank=rank, target=target, quiet=True)

            def check_against(exp, label):
                for name, p in model.named_parameters():
                    got = p.detach().view(same_int[p.element_size()]).numpy().tobytes()
                    check(got == exp[name][2], "%s %s: bytes differ from the reference" % (label, name))
                    eq(p.data_ptr(), pointers[name], label + " " + name + ": not reallocated")

            check_against(expected, family)
            # Refit: the trainer rewrites the shards; the same tensors are reloaded in place.
            shutil.rmtree(ck)
            synth(ck, family, *flags, "--seed", "9")
            refit = ref.expected_summary(ck, tp, rank, target=target)
            check(any(refit[n][2] != expected[n][2] for n in expected), "the rewritten checkpoint differs")
            r = wmap.load_into(ck, dict(model.named_parameters()), tp_size=tp, tp_rank=rank, target=target, quiet=True)
            eq(r["params"], len(pointers), family + ": refit params")
            check_against(refit, family + " refit")
        # Parameters that require grad are exported through their detached view (same storage).
        ck = os.path.join(d, "llama-trtllm-2")
        expected = ref.expected_summary(ck, 2, 1)
        model = module_like(expected, dtypes)
        for p in model.parameters():
            p.requires_grad_(True)
        wmap.load_into(ck, dict(model.named_parameters()), tp_size=2, tp_rank=1, quiet=True)
        for name, p in model.named_parameters():
            check(p.detach().view(same_int[p.element_size()]).numpy().tobytes() == expected[name][2], name + " (requires_grad)")
        # A float16 tensor does not take BF16 bits: no silent reinterpretation.
        params = dict(model.named_parameters())
        params["model.norm.weight"] = torch.empty(expected["model.norm.weight"][1], dtype=torch.float16)
        try:
            wmap.load_into(ck, params, tp_size=2, tp_rank=1, quiet=True)
        except wmap.ValidationError as e:
            check("dtype: model.norm.weight: destination is F16 but the plan builds BF16" in str(e), str(e))
        else:
            raise AssertionError("a float16 destination took BF16 bits")
        # A transposed torch view is not a destination.
        ck = os.path.join(d, "qwen3-vllm-2")
        expected = ref.expected_summary(ck, 1, 0)
        model = module_like(expected, dtypes)
        params = dict(model.named_parameters())
        params["model.layers.0.mlp.down_proj.weight"] = torch.empty((params["model.layers.0.mlp.down_proj.weight"].shape[1],
                                                                     params["model.layers.0.mlp.down_proj.weight"].shape[0]),
                                                                    dtype=torch.bfloat16).t()
        try:
            wmap.load_into(ck, params, quiet=True)
        except wmap.ValidationError as e:
            check("model.layers.0.mlp.down_proj.weight: destination is not contiguous" in str(e), str(e))
        else:
            raise AssertionError("a transposed view was accepted")


def test_torch_cuda_destinations():
    """CUDA tensors from torch's own allocator (skipped without torch, CUDA torch or a GPU build)."""
    if torch is None or not torch.cuda.is_available():
        return "skip"
    same_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        expected = ref.expected_summary(ck, 2, 1)
        dtypes = {"BF16": torch.bfloat16, "F32": torch.float32}
        params = {n: torch.empty(shape, dtype=dtypes[dt], device="cuda:0") for n, (dt, shape, _) in expected.items()}
        try:
            r = wmap.load_into(ck, params, tp_size=2, tp_rank=1, quiet=True)
        except wmap.Error as e:
            if "CUDA" in str(e) or "cuda" in str(e):
                return "skip"  # a build without the CUDA backend
            raise
        eq(r["device"], "cuda:0", "device")
        for name, (_, _, data) in expected.items():
            got = params[name].cpu().view(same_int[params[name].element_size()]).numpy().tobytes()
            check(got == data, name + ": bytes differ from the reference")


def test_plan_expect_against_a_torch_module():
    if torch is None:
        return "skip"
    import json
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    from dump_engine_params import engine_params
    from wmap_test_util import cli
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "F8_E4M3": torch.uint8}
    with TempDir() as d:
        ck = synth(os.path.join(d, "ds"), "deepseek_v3", *DS_VLLM)
        layout = ["--tp-size", "2", "--tp-rank", "1", "--target", "vllm"]
        model = module_like(ref.expected_summary(ck, 2, 1, target="vllm"), dtypes)
        params = engine_params(model)
        path = os.path.join(d, "params.json")

        def expect(params_json):
            with open(path, "w") as f:
                json.dump(params_json, f)
            return cli("plan", ck, *layout, "--expect", path)

        rc, _, err = expect(params)
        eq(rc, 0, "the engine's own list passes: " + err)
        plan = wmap.plan(ck, tp_size=2, tp_rank=1, target="vllm")
        eq(plan.check_against({n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters()}), [], "check_against")
        # Engine-owned names (vLLM's k_scale) are not the plan's to fill.
        owned = dict(params, **{"model.layers.0.self_attn.attn.k_scale": {"shape": [], "dtype": "float32"}})
        eq(expect(owned)[0], 0, "an engine-owned k_scale is fine")
        renamed = dict(params)
        renamed["model.layers.0.self_attn.qkv_a_proj.weight"] = renamed.pop("model.layers.0.self_attn.fused_qkv_a_proj.weight")
        missing = {n: v for n, v in params.items() if n != "model.norm.weight"}
        reshaped = dict(params, **{"lm_head.weight": {"shape": [1, 128], "dtype": "bfloat16"}})
        retyped = dict(params, **{"model.norm.weight": {"shape": params["model.norm.weight"]["shape"], "dtype": "float16"}})
        for label, p, wants in (
                ("renamed", renamed, ["destination: model.layers.0.self_attn.qkv_a_proj.weight: the engine holds",
                                      "missing: model.layers.0.self_attn.fused_qkv_a_proj.weight: planned"]),
                ("missing", missing, ["missing: model.norm.weight: planned [128] BF16 but the engine has no such parameter"]),
                ("reshaped", reshaped, ["shape: lm_head.weight: the engine's shape is [1, 128] but the plan builds [128, 128]"]),
                ("retyped", retyped, ["dtype: model.norm.weight: the engine holds float16 but the plan builds BF16"])):
            rc, _, err = expect(p)
            eq(rc, 1, label + ": exit code")
            for w in wants:
                check(w in err, "%s: %r in %s" % (label, w, err))
        rc, _, err = expect({"x": {"shape": "nope"}})
        eq(rc, 2, "a malformed list is unusable input")
        check("'x' needs \"shape\"" in err, err)


if __name__ == "__main__":
    run_tests([
        ("numpy destinations: Llama and DeepSeek FP8, both targets, bit-exact", test_numpy_bit_exact_both_targets),
        ("numpy destinations: ModelOpt and per-channel FP8, both targets, bit-exact", test_numpy_fp8_formats_both_targets),
        ("destination problems raised at once, nothing written; ignore=", test_problems_raised_at_once_nothing_written),
        ("a torch module's parameters, engine style, and a refit", test_torch_module_engine_style_and_refit),
        ("CUDA torch tensors as destinations", test_torch_cuda_destinations),
        ("plan --expect and Plan.check_against with a torch module's list", test_plan_expect_against_a_torch_module),
    ])
