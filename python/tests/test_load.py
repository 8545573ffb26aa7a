"""wmap.load through .numpy(): bit-exact against tests/python/reference.py, zero-copy, lifetimes,
and how each dtype goes out (numpy dtype, DLPack codes of legacy and versioned capsules)."""

import ctypes
import json
import gc
import os
import weakref

import numpy as np

import wmap
from wmap_test_util import TempDir, check, eq, reference, run_tests, synth

ref = reference()
RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def compare_numpy(params, expected, label):
    eq(sorted(params), sorted(expected), label + ": parameter names")
    for name, (dtype, shape, data) in expected.items():
        t = params[name]
        eq(t.dtype, dtype, "%s %s dtype" % (label, name))
        eq(tuple(t.shape), tuple(shape), "%s %s shape" % (label, name))
        eq(t.nbytes, len(data), "%s %s nbytes" % (label, name))
        a = t.numpy()
        eq(tuple(a.shape), tuple(shape), "%s %s numpy shape" % (label, name))
        if dtype == "BF16":
            eq(a.dtype, np.dtype(np.uint16), "%s %s numpy dtype" % (label, name))
        check(a.tobytes() == data, "%s %s: bytes differ from the reference" % (label, name))


def test_llama_two_layouts():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")  # vocab 250: the last rank's block is padded
        for tp_size, tp_rank in ((1, 0), (4, 3)):
            params = wmap.load(ck, tp_size=tp_size, tp_rank=tp_rank, quiet=True)
            expected = ref.expected_summary(ck, tp_size, tp_rank)
            compare_numpy(params, expected, "llama tp %d/%d" % (tp_rank, tp_size))


def test_tied_embeddings_share_memory():
    with TempDir() as d:
        ck = synth(os.path.join(d, "qwen3"), "qwen3")
        params = wmap.load(ck, tp_size=2, tp_rank=1, quiet=True)
        compare_numpy(params, ref.expected_summary(ck, 2, 1), "qwen3 tp 1/2")
        check("lm_head.weight" in params, "tied lm_head is listed")
        eq(params["lm_head.weight"].data_ptr, params["model.embed_tokens.weight"].data_ptr,
           "tied lm_head shares embed_tokens' buffer")


def test_targets():
    with TempDir() as d:
        ck = synth(os.path.join(d, "qwen3"), "qwen3")  # tied: vLLM lists embed_tokens only
        params = wmap.load(ck, tp_size=2, tp_rank=1, target="vllm", quiet=True)
        compare_numpy(params, ref.expected_summary(ck, 2, 1, target="vllm"), "qwen3 vllm tp 1/2")
        check("lm_head.weight" not in params, "vllm: a tied lm_head is no parameter")
        eq(tuple(params["model.embed_tokens.weight"].shape), (128, 64), "vllm: 250 rows padded to 256, 128 a rank")
        ds = synth(os.path.join(d, "ds"), "deepseek_v3")
        params = wmap.load(ds, tp_size=2, tp_rank=1, ep_size=2, attention_dp=True, quiet=True)
        compare_numpy(params, ref.expected_summary(ds, 2, 1, 2, attention_dp=True), "deepseek trtllm adp 1/2")
        p = wmap.plan(ds, tp_size=4, tp_rank=3, target="vllm")
        check(p.ok, "vllm plan of deepseek_v3 is complete")
        check("target vllm" in repr(p), "the plan's repr names the target: %r" % p)


def capsule_flags(cap, name):
    """The `flags` field of a DLManagedTensorVersioned capsule (after version, manager_ctx, deleter)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ptr = get(cap, name.encode())
    return ctypes.c_uint64.from_address(ptr + 8 + 8 + 8).value


def test_weight_cache():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        wmap.cache_clear()
        first = wmap.load(ck, tp_size=2, tp_rank=1, cache=True, quiet=True)
        eq(wmap.cache_info()["misses"], 1, "first load: a miss")
        second = wmap.load(ck, tp_size=2, tp_rank=1, cache=True, quiet=True)
        info = wmap.cache_info()
        eq((info["hits"], info["entries"], info["max_entries"]), (1, 1, 1), "second load: a hit")
        compare_numpy(second, ref.expected_summary(ck, 2, 1), "cache hit")
        check(first is not second, "a hit returns a fresh dict")
        del second["model.norm.weight"]  # the consumer's dict, not the cache's
        third = wmap.load(ck, tp_size=2, tp_rank=1, cache=True, quiet=True)
        check("model.norm.weight" in third, "dropping an entry from a returned dict leaves the cache's own")
        # Cached tensors are shared with the cache: numpy views are read-only, versioned DLPack
        # capsules say so (legacy ones, which numpy 1.24 and torch 1.13 ask for, cannot).
        name = "model.layers.0.self_attn.qkv_proj.weight"
        check(third[name].read_only and not third[name].numpy().flags.writeable, "a cached tensor's numpy view is read-only")
        try:
            third[name].numpy().flat[0] = 1
        except ValueError:
            pass
        else:
            raise AssertionError("wrote through a read-only numpy view")
        cap = third[name].__dlpack__(max_version=(1, 0))
        check(capsule_flags(cap, "dltensor_versioned") & 1, "the versioned capsule carries DLPACK_FLAG_BITMASK_READ_ONLY")
        plain = wmap.load(ck, tp_size=2, tp_rank=1, quiet=True)
        check(not plain[name].read_only and plain[name].numpy().flags.writeable, "an uncached load stays writeable")
        # One byte changed through a raw pointer (data_ptr, as a C extension or torch would write):
        # the first, a random middle and the last byte of random parameters: every change is
        # detected on the next hit, named, and healed from the files.
        rng = np.random.default_rng(20261201)
        names = sorted(third)
        picked = [names[i] for i in rng.choice(len(names), 3, replace=False)] + [name]
        healed_before = wmap.cache_info()["healed"]
        for pname in picked:
            for which in ("first", "middle", "last"):
                held = wmap.load(ck, tp_size=2, tp_rank=1, cache=True, quiet=True)
                t = held[pname]
                at = {"first": 0, "middle": int(rng.integers(1, max(2, t.nbytes - 1))), "last": t.nbytes - 1}[which]
                byte = ctypes.c_uint8.from_address(t.data_ptr + at)
                byte.value ^= 0x01
                healed = wmap.load(ck, tp_size=2, tp_rank=1, cache=True, quiet=True)
                info = wmap.cache_info()
                eq(info["last_healed"], [pname], "%s byte %s: the heal names it" % (pname, which))
                compare_numpy({pname: healed[pname]}, {pname: ref.expected_summary(ck, 2, 1)[pname]},
                              "%s healed from the files" % pname)
        eq(wmap.cache_info()["healed"] - healed_before, 3 * len(picked), "every change detected")
        # A scale tensor (FP8 block scales) likewise.
        ds = synth(os.path.join(d, "ds"), "deepseek_v3", "--fp8")
        held = wmap.load(ds, cache=True, quiet=True)
        scale = next(n for n in sorted(held) if n.endswith("_scale") and held[n].nbytes > 4)
        ctypes.c_uint8.from_address(held[scale].data_ptr + held[scale].nbytes // 2).value ^= 0x80
        wmap.load(ds, cache=True, quiet=True)
        eq(wmap.cache_info()["last_healed"], [scale], "a changed scale tensor is named")
        os.environ["WMAP_WEIGHT_CACHE_MAX_BYTES"] = "1K"
        eq(wmap.cache_info()["max_bytes"], 1024, "the byte limit is reported")
        wmap.cache_clear()
        wmap.load(ck, cache=True, quiet=True)
        eq(wmap.cache_info()["entries"], 0, "a load over WMAP_WEIGHT_CACHE_MAX_BYTES is not kept")
        del os.environ["WMAP_WEIGHT_CACHE_MAX_BYTES"]
        os.environ["WMAP_WEIGHT_CACHE_MAX_ENTRIES"] = "x"
        try:
            wmap.load(ck, cache=True, quiet=True)
        except wmap.Error as e:
            check("WMAP_WEIGHT_CACHE_MAX_ENTRIES='x'" in str(e), str(e))
        else:
            raise AssertionError("a bad WMAP_WEIGHT_CACHE_MAX_ENTRIES was accepted")
        finally:
            del os.environ["WMAP_WEIGHT_CACHE_MAX_ENTRIES"]
        wmap.cache_clear()


def test_zero_copy_and_lifetime():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        expected = ref.expected_summary(ck, 2, 0)
        params = wmap.load(ck, tp_size=2, tp_rank=0, quiet=True)
        name = "model.layers.0.mlp.gate_up_proj.weight"
        t = params[name]
        a = t.numpy()
        b = t.numpy()
        eq(a.__array_interface__["data"][0], t.data_ptr, "numpy views the Tensor's memory")
        eq(b.__array_interface__["data"][0], t.data_ptr, "a second view too")
        eq(np.asarray(t).__array_interface__["data"][0], t.data_ptr, "np.asarray(tensor)")
        # A write through one view is seen by the other: one memory.
        a[0, 0] ^= 0x5A5A
        eq(int(b[0, 0]), int(a[0, 0]), "write visible through the other view")
        a[0, 0] ^= 0x5A5A
        # The array keeps the Tensor (and its buffer) alive after every other reference is gone.
        alive = weakref.ref(t)
        del t, b, params
        gc.collect()
        check(alive() is not None, "the numpy array keeps its Tensor alive")
        junk = [np.full(1 << 16, 0xFF, np.uint8) for _ in range(64)]  # reuse freed memory, if any
        check(a.tobytes() == expected[name][2], "bytes intact while only the array holds them")
        del a, junk
        gc.collect()
        check(alive() is None, "the Tensor is freed with its last view")


def capsule_tensor(capsule, versioned):
    """Reads (device, ndim, dtype code, bits, lanes, data) from a DLPack capsule (ctypes)."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    name = api.PyCapsule_GetName(capsule)
    eq(name, b"dltensor_versioned" if versioned else b"dltensor", "capsule name")
    p = api.PyCapsule_GetPointer(capsule, name)
    base = p + (32 if versioned else 0)  # version, manager_ctx, deleter, flags precede the DLTensor
    data = ctypes.c_void_p.from_address(base).value
    dev_type, dev_id = (ctypes.c_int32 * 2).from_address(base + 8)
    ndim = ctypes.c_int32.from_address(base + 16).value
    code, bits = (ctypes.c_uint8 * 2).from_address(base + 20)
    lanes = ctypes.c_uint16.from_address(base + 22).value
    version = tuple((ctypes.c_uint32 * 2).from_address(p)) if versioned else None
    return dict(device=(dev_type, dev_id), ndim=ndim, code=code, bits=bits, lanes=lanes, data=data, version=version)


def test_dtype_exports():
    # DeepSeek-V3 FP8: F8_E4M3 weights, F32 scales, BF16 norms.
    with TempDir() as d:
        ck = synth(os.path.join(d, "dsv3"), "deepseek_v3", "--fp8")
        params = wmap.load(ck, quiet=True)
        compare_numpy(params, ref.expected_summary(ck, 1, 0), "deepseek_v3 fp8")
        by_dtype = {}
        for t in params.values():
            by_dtype.setdefault(t.dtype, t)
        check("F8_E4M3" in by_dtype and "BF16" in by_dtype and "F32" in by_dtype, "dtypes present: %s" % sorted(by_dtype))
        want = {  # dtype: (numpy dtype, legacy (code, bits), v1.0 code, v1.1 code)
            "F8_E4M3": (np.uint8, (1, 8), 1, 10),
            "BF16": (np.uint16, (4, 16), 4, 4),
            "F32": (np.float32, (2, 32), 2, 2),
        }
        for dtype, (np_dtype, legacy, v10, v11) in want.items():
            t = by_dtype[dtype]
            eq(t.numpy().dtype, np.dtype(np_dtype), dtype + " numpy dtype")
            eq(t.__dlpack_device__(), (1, 0), dtype + " __dlpack_device__ (kDLCPU)")
            c = capsule_tensor(t.__dlpack__(), versioned=False)
            eq((c["code"], c["bits"], c["lanes"]), legacy + (1,), dtype + " legacy capsule dtype")
            eq(c["data"], t.data_ptr, dtype + " legacy capsule data")
            eq(c["ndim"], len(t.shape), dtype + " ndim")
            c = capsule_tensor(t.__dlpack__(max_version=(1, 0)), versioned=True)
            eq(c["version"], (1, 0), dtype + " v1.0 capsule version")
            eq(c["code"], v10, dtype + " v1.0 capsule code")
            c = capsule_tensor(t.__dlpack__(max_version=(1, 1)), versioned=True)
            eq(c["version"], (1, 1), dtype + " v1.1 capsule version")
            eq(c["code"], v11, dtype + " v1.1 capsule code")
            eq(c["data"], t.data_ptr, dtype + " versioned capsule data")
        # Unconsumed capsules free their context (no leak, no crash); the Tensor stays usable.
        gc.collect()
        t = by_dtype["F32"]
        check(np.array_equal(np.from_dlpack(t), t.numpy()), "numpy.from_dlpack(F32 tensor)")
        eq(np.from_dlpack(t).__array_interface__["data"][0], t.data_ptr, "numpy.from_dlpack shares memory")
        for bad in (dict(dl_device=(2, 0)), dict(copy=True)):
            try:
                t.__dlpack__(**bad)
            except BufferError:
                pass
            else:
                raise AssertionError("__dlpack__(%r) should raise BufferError" % bad)


def test_plan_is_loadable_and_entries_share_arguments():
    """A wmap.Plan loads as it is; plan(), load() and load_into() take the same keywords, parsed
    once (review F4, F8): negative or absurd values are refused with the keyword's name."""
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        p = wmap.plan(ck, tp_size=4, tp_rank=3, mtp_layers=None, quiet=True)
        eq(p.layout, {"tp_size": 4, "tp_rank": 3, "ep_size": 1, "pp_size": 1, "pp_rank": 0, "pp_partition": None,
                      "mtp_layers": None, "target": "trtllm", "attention_dp": False, "gpus_per_node": 8,
                      "moe_backend": None}, "Plan.layout is the one JSON form")
        # A pipeline stage: pp_partition as a list or VLLM_PP_LAYER_PARTITION's string, the same plan.
        staged = wmap.plan(ck, pp_size=2, pp_rank=1, pp_partition=[1, 1], quiet=True)
        eq(staged.plan_id, wmap.plan(ck, pp_size=2, pp_rank=1, pp_partition="1,1", quiet=True).plan_id, "partition forms")
        eq((staged.layout["pp_size"], staged.layout["pp_rank"], staged.layout["pp_partition"]), (2, 1, [1, 1]), "stage")
        compare_numpy(wmap.load(staged, quiet=True), ref.expected_summary(ck, 1, 0, pp_size=2, pp_rank=1,
                                                                          pp_partition=[1, 1]), "pipeline stage 1")
        eq(p.layout, json.loads(p.to_json())["layout"], "Plan.layout as plan --json")
        params = wmap.load(p, quiet=True)
        compare_numpy(params, ref.expected_summary(ck, 4, 3), "wmap.load(plan)")
        into = {n: np.zeros_like(t.numpy()) for n, t in params.items()}
        report = wmap.load_into(p, into, quiet=True)
        eq(report["plan_id"], p.plan_id, "load_into(plan) ran that plan")
        eq(report["layout"], p.layout, "the report's layout")
        for n, t in params.items():
            check(np.array_equal(into[n], t.numpy()), n + ": load_into(plan) as load(plan)")
        try:
            wmap.load(p, tp_size=2)
        except TypeError as e:
            check("a wmap.Plan already fixes" in str(e) and "tp_size" in str(e), str(e))
        else:
            raise AssertionError("a layout keyword with a Plan was accepted")
        same = wmap.plan(ck, tp_size=2, tp_rank=1, catalog=None, config=None, plugin_dir=None, mappings=None)
        eq(same.plan_id, wmap.plan(ck, tp_size=2, tp_rank=1).plan_id, "defaults written once")
        for fn in (lambda **kw: wmap.plan(ck, **kw), lambda **kw: wmap.load(ck, quiet=True, **kw),
                   lambda **kw: wmap.load_into(ck, {}, quiet=True, **kw)):
            for kw, words in (({"mtp_layers": -7}, "mtp_layers -7: expected a non-negative integer"),
                              ({"tp_size": -1}, "tp_size -1: expected a non-negative integer"),
                              ({"gpus_per_node": 1 << 40}, "gpus_per_node 1099511627776: expected a non-negative integer"),
                              ({"tp_size": 0}, "tp_size must be at least 1"),
                              ({"pp_size": 2, "pp_rank": 2}, "pp_rank 2 is not below pp_size 2"),
                              ({"pp_size": 2, "pp_partition": "2,x"}, "pp_partition '2,x': expected layer counts"),
                              ({"pp_size": 2, "pp_partition": [3, 3]}, "pp_partition adds up to 6 layers")):
                try:
                    fn(**kw)
                except wmap.MalformedInputError as e:
                    check(words in str(e), "%r: %s" % (kw, e))
                else:
                    raise AssertionError("%r accepted" % kw)
            try:
                fn(tp_sise=2)
            except TypeError as e:
                check("unexpected keyword argument 'tp_sise'" in str(e) and "tp_size" in str(e), str(e))
            else:
                raise AssertionError("a misspelt keyword was accepted")


if __name__ == "__main__":
    run_tests([
        ("llama at tp 1/1 and 3/4, bit-exact through .numpy()", test_llama_two_layouts),
        ("qwen3 tied embeddings share one buffer", test_tied_embeddings_share_memory),
        ("targets: vllm and trtllm attention-DP bit-exact through .numpy()", test_targets),
        ("the weight cache: hits, fresh dicts, an in-place change healed, a bad limit", test_weight_cache),
        ("zero-copy views and lifetimes", test_zero_copy_and_lifetime),
        ("dtype exports: numpy dtypes and DLPack codes", test_dtype_exports),
        ("a wmap.Plan loads as it is; one set of keywords, parsed once", test_plan_is_loadable_and_entries_share_arguments),
    ])
