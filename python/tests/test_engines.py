"""The engine adapters (wmap.engines.vllm, wmap.engines.trtllm) through STAND-INS of vLLM's and
TensorRT-LLM's plug-in surfaces (tests/engines/standin: registration, base classes, rank getters,
the load flow that calls a loader, then the engine's post-load step; not the engines). Each load
goes through the engine's own flow and is compared bit for bit with the independent numpy
reference (tests/python/reference.py) for Llama, Qwen3-MoE, DeepSeek-V3 and gpt-oss at TP 1/2/4
and EP; every refusal is checked to happen before anything is written; an atomic refit that fails
half way (a digest mismatch) changes no parameter.

With WMAP_EXPECT_INSTALLED=1 (the pip stage of tools/test.sh) wmap must come from an installed
package and --load-format wmap must be discovered through its `vllm.general_plugins` entry point."""

import hashlib
import glob
import importlib.metadata
import os
import pickle
import shutil
import sys

from wmap_test_util import REFERENCE_DIR, TempDir, check, eq, module_like, reference, run_tests, synth, tensor_bytes

try:
    import torch
except ImportError:
    torch = None

STANDIN = os.environ.get("WMAP_STANDIN_DIR", os.path.join(REFERENCE_DIR, "..", "engines", "standin"))
sys.path.insert(0, os.path.abspath(STANDIN))

import wmap  # noqa: E402

ref = reference()
SENTINEL = 0xAB
DS_VLLM = ("--fp8", "--heads", "8", "--intermediate", "512", "--moe-intermediate", "512")
# (family, synth flags per target, layouts: (tp, rank, ep) per target)
FAMILIES = {
    "llama": ({}, [(1, 0, 1), (2, 1, 1), (4, 2, 1), (4, 3, 1)]),
    "qwen3_moe": ({}, [(1, 0, 1), (2, 1, 1), (2, 0, 2), (4, 2, 1), (4, 3, 4)]),
    "deepseek_v3": ({"trtllm": ("--fp8",), "vllm": DS_VLLM}, [(1, 0, 1), (2, 1, 1), (4, 2, 1), (4, 1, 4)]),
    # 4 KV heads: TensorRT-LLM does not duplicate gpt-oss's KV heads, so TP 4 needs 4 of them.
    "gpt_oss": ({"trtllm": ("--kv-heads", "4"), "vllm": ("--kv-heads", "4")}, [(1, 0, 1), (2, 1, 1), (2, 0, 2),
                                                                            (4, 3, 1), (4, 2, 4)]),
}


def dtypes():
    return {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "U8": torch.uint8,
            "F8_E4M3": torch.uint8,  # an engine's float8 parameter as bytes (Debian's torch 1.13 has no float8)
            "I32": torch.int32, "I64": torch.int64}


class Checkpoints:
    """One synthetic checkpoint per (family, target flags), made once."""

    def __init__(self, root):
        self.root, self.made = root, {}

    def get(self, family, target):
        flags = FAMILIES[family][0].get(target, ())
        key = (family, flags)
        if key not in self.made:
            self.made[key] = synth(os.path.join(self.root, "%s-%d" % (family, len(self.made))), family, *flags)
        return self.made[key]


def engine_model(expected, post_hook_name, seen):
    """The engine's model for one rank, sentinel-filled, whose post-load hook records what it saw."""
    model = module_like(expected, dtypes(), fill=SENTINEL)

    def hook():
        seen.append({n: tensor_bytes(p) for n, p in model.named_parameters()})

    setattr(model, post_hook_name, hook)
    return model


def same_as(model, expected, label):
    names = {n for n, _ in model.named_parameters()}
    eq(names, set(expected), label + ": parameter names")
    for name, p in model.named_parameters():
        check(tensor_bytes(p) == expected[name][2], "%s %s: bytes differ from the reference" % (label, name))


# ----------------------------------------------------------------------------------------------
# vLLM
# ----------------------------------------------------------------------------------------------

def vllm_register():
    """--load-format wmap registered as vLLM would: through the installed entry point when there is
    one (required with WMAP_EXPECT_INSTALLED=1), else by calling the entry point's function."""
    import vllm.plugins
    from vllm.model_executor import model_loader as ml
    eps = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "wmap"]
    if os.environ.get("WMAP_EXPECT_INSTALLED") == "1":
        check(eps, "no `wmap` entry point in group vllm.general_plugins: is wmap pip-installed?")
        eq(eps[0].value, "wmap.engines.vllm:register", "entry point")
    if eps:
        vllm.plugins.load_general_plugins()
    else:
        print("  (build tree: no installed entry point; calling wmap.engines.vllm.register directly)")
        import wmap.engines.vllm as wv
        wv.register()
    check("wmap" in ml._LOAD_FORMAT_TO_MODEL_LOADER, "load format 'wmap' registered")
    return ml


def vllm_configs(ck, tp, ep, extra=None, **kw):
    from vllm.config import LoadConfig, ModelConfig, ParallelConfig, VllmConfig
    mc = ModelConfig(model=ck, dtype=torch.bfloat16, quantization=kw.pop("quantization", None))
    par = ParallelConfig(tensor_parallel_size=tp, enable_expert_parallel=ep > 1,
                         pipeline_parallel_size=kw.pop("pp", 1), data_parallel_size=kw.pop("dp", 1))
    load = LoadConfig(load_format="WMAP", model_loader_extra_config=dict({"quiet": True}, **(extra or {})))
    return mc, VllmConfig(model_config=mc, parallel_config=par, load_config=load, **kw)


def vllm_load(ck, tp, rank, ep, expected, extra=None, built=None, stage=(1, 0), **kw):
    """One rank loaded through the stand-in's flow: get_model_loader, download_model, load_model.
    stage: (pipeline_parallel_size, this rank's stage)."""
    import vllm.distributed
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader, utils
    vllm.distributed._set_ranks(tp, rank, *stage)
    if stage[0] > 1:
        kw["pp"] = stage[0]
    seen = []
    built = built if built is not None else []
    utils.MODEL_FACTORY = lambda cfg: built.append(engine_model(expected, "process_weights_after_loading", seen)) or \
        built[-1]
    mc, vc = vllm_configs(ck, tp, ep, extra, **kw)
    loader = get_model_loader(vc.load_config)
    loader.download_model(mc)
    with set_current_vllm_config(vc):
        model = loader.load_model(vllm_config=vc, model_config=mc)
    eq(len(seen), 1, "process_weights_after_loading ran once")
    check(seen[0] == {n: expected[n][2] for n in expected}, "process_weights_after_loading saw the loaded weights")
    return model, loader


def test_vllm_every_family_bit_exact():
    if torch is None:
        return "skip"
    vllm_register()
    with TempDir() as d:
        cks = Checkpoints(d)
        for family, (_, layouts) in FAMILIES.items():
            ck = cks.get(family, "vllm")
            for tp, rank, ep in layouts:
                if ep not in (1, tp):
                    continue  # vLLM's expert parallelism is all or nothing
                label = "vllm %s tp %d rank %d ep %d" % (family, tp, rank, ep)
                expected = ref.expected_summary(ck, tp, rank, ep_size=ep, target="vllm")
                model, loader = vllm_load(ck, tp, rank, ep, expected)
                same_as(model, expected, label)
                eq(loader.last_report["layout"]["target"], "vllm", label)
                eq(loader.last_report["params"], len(expected), label + ": params written")


def test_vllm_refusals_before_anything_is_written():
    if torch is None:
        return "skip"
    vllm_register()
    from vllm.model_executor.model_loader import get_model_loader
    from wmap.engines.common import UnsupportedLayout
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        expected = ref.expected_summary(ck, 2, 1, target="vllm")
        _, vc = vllm_configs(ck, 2, 1, {"bogus": 1})
        try:
            get_model_loader(vc.load_config)
        except ValueError as e:
            check("unknown option 'bogus' in --model-loader-extra-config" in str(e) and "verify" in str(e), str(e))
        else:
            raise AssertionError("an unknown extra-config key was accepted")
        _, vc = vllm_configs(ck, 2, 1, {"verify": 3})
        try:
            get_model_loader(vc.load_config)
        except TypeError as e:
            check("option 'verify' in --model-loader-extra-config is int 3" in str(e), str(e))
        else:
            raise AssertionError("verify=3 was accepted")
        cases = [
            ("dp expert parallel", dict(dp=2, ep=2), "expert parallelism over 2 data-parallel ranks"),
            ("lora", dict(lora_config=object()), "LoRA is enabled"),
            ("online quant", dict(quantization="fp8"), "quantization='fp8' of an unquantised checkpoint"),
        ]
        for label, kw, want in cases:
            built = []
            ep = kw.pop("ep", 1)
            try:
                vllm_load(ck, 2, 1, ep, expected, built=built, **kw)
            except UnsupportedLayout as e:
                check(want in str(e) and "--load-format safetensors" in str(e), "%s: %s" % (label, e))
            else:
                raise AssertionError(label + ": accepted")
            for m in built:
                check(all(set(tensor_bytes(p)) == {SENTINEL} for p in m.parameters()), label + ": a parameter was written")
        # A checkpoint wmap cannot plan: a config the shards contradict (malformed input), and one
        # whose shapes disagree with the config (plan problems, each named); nothing written.
        import json
        for label, edit, want in (("layers", ("num_hidden_layers", 1), "num_hidden_layers: 3 layers"),
                                  ("shapes", ("intermediate_size", 8), "shape: 'model.layers.0.mlp.down_proj.weight'")):
            bad = os.path.join(d, "bad-" + label)
            shutil.copytree(ck, bad)
            cfg = os.path.join(bad, "config.json")
            c = json.load(open(cfg))
            c[edit[0]] += edit[1]
            json.dump(c, open(cfg, "w"))
            built = []
            try:
                vllm_load(bad, 2, 1, 1, expected, built=built)
            except UnsupportedLayout as e:
                check("wmap cannot load" in str(e) and want in str(e) and "--load-format safetensors" in str(e),
                      "%s: %s" % (label, e))
            else:
                raise AssertionError(label + ": a checkpoint wmap cannot plan was accepted")
            for m in built:
                check(all(set(tensor_bytes(p)) == {SENTINEL} for p in m.parameters()), label + ": a parameter was written")
        # A model parameter the plan does not fill (the engine's model and the checkpoint disagree).
        extra = dict(expected)
        extra["model.layers.0.self_attn.extra.weight"] = ("BF16", (4,), b"")
        built = []
        try:
            vllm_load(ck, 2, 1, 1, extra, built=built)
        except wmap.ValidationError as e:
            check("model.layers.0.self_attn.extra.weight: a destination the plan does not fill" in str(e), str(e))
        else:
            raise AssertionError("an unplanned parameter was accepted")
        for m in built:
            check(all(set(tensor_bytes(p)) == {SENTINEL} for p in m.parameters()), "a parameter was written")


# Pipeline stages: 3 layers (uneven over 2 stages), so a stage that took the other engine's split
# (vLLM: get_pp_indices, extra layers before the last stage; TensorRT-LLM: tensor_split, on the
# first stages) or the other partition fails; vLLM's model holds only its stage's parameters
# (PPMissingLayer elsewhere), TensorRT-LLM's likewise.
PP_FAMILIES = {
    "llama": ("--layers", "3"),
    "qwen3": ("--layers", "3", "--tie-embeddings"),
    "qwen3_moe": ("--layers", "3"),
    "deepseek_v3": ("--layers", "3", "--fp8", "--heads", "8", "--intermediate", "512", "--moe-intermediate", "512"),
    "gpt_oss": ("--layers", "3", "--kv-heads", "4"),
}


def pp_layouts():
    """(tp, rank, pp, stage, partition) rank layouts every family is loaded at."""
    out = [(1, 0, 2, s, None) for s in range(2)] + [(2, r, 2, s, None) for r in range(2) for s in range(2)]
    return out + [(1, 0, 3, s, None) for s in range(3)] + [(1, 0, 2, s, "1,2") for s in range(2)]


def test_vllm_pipeline_stages_bit_exact():
    if torch is None:
        return "skip"
    vllm_register()
    with TempDir() as d:
        n = 0
        for family, flags in PP_FAMILIES.items():
            ck = synth(os.path.join(d, family), family, *flags)
            for tp, rank, pp, s, partition in pp_layouts():
                label = "vllm %s tp %d rank %d pp %d stage %d partition %s" % (family, tp, rank, pp, s, partition)
                expected = ref.expected_summary(ck, tp, rank, target="vllm", pp_size=pp, pp_rank=s,
                                                pp_partition=partition and [int(x) for x in partition.split(",")])
                if partition:
                    os.environ["VLLM_PP_LAYER_PARTITION"] = partition
                try:
                    model, loader = vllm_load(ck, tp, rank, 1, expected, stage=(pp, s))
                finally:
                    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
                same_as(model, expected, label)
                lay = loader.last_report["layout"]
                eq((lay["pp_size"], lay["pp_rank"]), (pp, s), label)
                eq(lay["pp_partition"], partition and [int(x) for x in partition.split(",")], label)
                n += 1
        print("  %d vLLM stage loads bit-exact" % n)


def test_vllm_plugins_filter():
    """VLLM_PLUGINS names the plugins vLLM loads: without 'wmap' in it, the format is not registered."""
    eps = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "wmap"]
    if not eps:
        print("  (no installed entry point: the filter is checked in the pip stage)")
        return "skip"
    import subprocess
    probe = ("import vllm.plugins; from vllm.model_executor import model_loader as ml; "
             "vllm.plugins.load_general_plugins(); print('wmap' in ml._LOAD_FORMAT_TO_MODEL_LOADER)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(STANDIN)] + sys.path[1:]))
    for plugins, want in (("other", "False"), ("other,wmap", "True")):
        env["VLLM_PLUGINS"] = plugins
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
        eq(r.stdout.strip(), want, "VLLM_PLUGINS=%s (stderr: %s)" % (plugins, r.stderr))


# ----------------------------------------------------------------------------------------------
# TensorRT-LLM
# ----------------------------------------------------------------------------------------------

def trtllm_load(ck, tp, rank, ep, expected, loader, stage=(1, 0), partition=None):
    from tensorrt_llm._torch.pyexecutor import model_loader as ml
    from tensorrt_llm.mapping import Mapping
    seen = []
    ml.MODEL_FACTORY = lambda config, mapping: engine_model(expected, "post_load_weights", seen)
    pp, s = stage
    # MpiTopology numbers ranks stage-major: rank = pp_rank * tp_size + tp_rank.
    mapping = Mapping(world_size=tp * pp, rank=s * tp + rank, tp_size=tp, pp_size=pp, moe_ep_size=ep,
                      moe_tp_size=tp // ep, pp_partition=partition)
    model = ml.ModelLoader(mapping).load(ck, loader)
    eq(len(seen), 1, "post_load_weights ran once")
    check(seen[0] == {n: expected[n][2] for n in expected}, "post_load_weights saw the loaded weights")
    return model


def test_trtllm_every_family_bit_exact():
    if torch is None:
        return "skip"
    import wmap.engines.trtllm as wt
    from tensorrt_llm._torch.pyexecutor import model_loader as ml
    with TempDir() as d:
        cks = Checkpoints(d)
        n = 0
        for family, (_, layouts) in FAMILIES.items():
            ck = cks.get(family, "trtllm")
            for tp, rank, ep in layouts:
                if tp % ep:
                    continue
                label = "trtllm %s tp %d rank %d ep %d" % (family, tp, rank, ep)
                expected = ref.expected_summary(ck, tp, rank, ep_size=ep, target="trtllm")
                # Both ways a user selects it: the format string (looked up in the three registries, as
                # in a worker) and a loader object pickled into the worker with its options.
                if n % 2 == 0:
                    loader = ml._construct_checkpoint_loader("pytorch", None, "WMAP")
                else:
                    loader = pickle.loads(pickle.dumps(wt.WmapCheckpointLoader(quiet=True, verify="best-effort")))
                n += 1
                check(isinstance(loader, wt.WmapCheckpointLoader), label + ": loader type")
                model = trtllm_load(ck, tp, rank, ep, expected, loader)
                same_as(model, expected, label)
                check(loader.is_weights_preloaded(), label + ": is_weights_preloaded")
                m = loader.metrics
                check(m["checkpoint_preparation_seconds"] >= 0 and m["weight_population_seconds"] > 0, "%s: %r" % (label, m))
                eq(loader.weight_loader.last_report["layout"]["target"], "trtllm", label)


def test_trtllm_pipeline_stages_bit_exact():
    if torch is None:
        return "skip"
    import wmap.engines.trtllm as wt
    with TempDir() as d:
        n = 0
        for family, flags in PP_FAMILIES.items():
            ck = synth(os.path.join(d, family), family, *flags)
            for tp, rank, pp, s, partition in pp_layouts():
                label = "trtllm %s tp %d rank %d pp %d stage %d partition %s" % (family, tp, rank, pp, s, partition)
                counts = partition and [int(x) for x in partition.split(",")]
                expected = ref.expected_summary(ck, tp, rank, target="trtllm", pp_size=pp, pp_rank=s,
                                                pp_partition=counts)
                loader = wt.WmapCheckpointLoader(quiet=True)
                model = trtllm_load(ck, tp, rank, 1, expected, loader, stage=(pp, s), partition=counts)
                same_as(model, expected, label)
                lay = loader.weight_loader.last_report["layout"]
                eq((lay["pp_size"], lay["pp_rank"], lay["pp_partition"]), (pp, s, counts), label)
                n += 1
        print("  %d TensorRT-LLM stage loads bit-exact" % n)


def test_trtllm_refusals():
    if torch is None:
        return "skip"
    import wmap.engines.trtllm as wt
    from tensorrt_llm.mapping import Mapping
    from wmap.engines.common import UnsupportedLayout
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        for label, mapping, want in (
                ("cp", Mapping(world_size=4, rank=0, tp_size=2, cp_size=2), "cp_size 2"),
                ("moe split", Mapping(world_size=4, rank=0, tp_size=4, moe_tp_size=1, moe_ep_size=2),
                 "moe_tp_size 1 x moe_ep_size 2 is not tp_size 4")):
            model = module_like(ref.expected_summary(ck, 2, 0), dtypes(), fill=SENTINEL)
            try:
                wt.WmapCheckpointLoader(quiet=True).load_weights(ck, mapping=mapping, model=model)
            except UnsupportedLayout as e:
                check(want in str(e), "%s: %s" % (label, e))
            else:
                raise AssertionError(label + ": accepted")
            check(all(set(tensor_bytes(p)) == {SENTINEL} for p in model.parameters()), label + ": written")
        try:
            wt.WmapCheckpointLoader(quiet=True).load_weights(ck, mapping=Mapping())
        except UnsupportedLayout as e:
            check("was given no model" in str(e), str(e))
        else:
            raise AssertionError("load_weights without a model was accepted")
        try:
            wt.WmapCheckpointLoader(nonsense=1)
        except ValueError as e:
            check("unknown option 'nonsense' in WmapCheckpointLoader" in str(e), str(e))
        else:
            raise AssertionError("an unknown option was accepted")


# ----------------------------------------------------------------------------------------------
# Refit, all or nothing
# ----------------------------------------------------------------------------------------------

def manifest(ck, path, corrupt=None):
    """A sha256sum manifest of ck's shards; `corrupt`: the shard whose digest is given wrong."""
    with open(path, "w") as out:
        for f in sorted(glob.glob(os.path.join(ck, "*.safetensors"))):
            h = hashlib.sha256(open(f, "rb").read()).hexdigest()
            if os.path.basename(f) == corrupt:
                h = ("0" if h[0] != "0" else "1") + h[1:]
            out.write("%s  %s\n" % (h, os.path.basename(f)))
    return path


def test_atomic_refit_changes_nothing_on_failure():
    if torch is None:
        return "skip"
    vllm_register()
    import wmap.engines.trtllm as wt
    import wmap.engines.vllm as wv
    from tensorrt_llm.mapping import Mapping
    from vllm.config import set_current_vllm_config
    with TempDir() as d:
        step1 = synth(os.path.join(d, "step1"), "llama", "--shards", "3")
        step2 = synth(os.path.join(d, "step2"), "llama", "--shards", "3", "--seed", "2")
        shards = sorted(os.path.basename(f) for f in glob.glob(os.path.join(step2, "*.safetensors")))
        eq(len(shards), 3, "shards")
        bad = manifest(step2, os.path.join(d, "bad.sha256"), corrupt=shards[-1])
        good = manifest(step2, os.path.join(d, "good.sha256"))
        e1 = ref.expected_summary(step1, 2, 1, target="vllm")
        e2 = ref.expected_summary(step2, 2, 1, target="vllm")
        check(all(e1[n][2] != e2[n][2] for n in e1 if len(e1[n][2]) > 16), "the two steps differ")
        model, _ = vllm_load(step1, 2, 1, 1, e1)
        _, vc = vllm_configs(step1, 2, 1)
        with set_current_vllm_config(vc):
            # atomic (the refit default): the digest mismatch of the last shard changes no parameter.
            try:
                wv.refit(model, step2, {"verify": "full", "manifest": bad, "quiet": True})
            except wmap.Error as e:
                check("no destination was changed" in str(e) and shards[-1] in str(e), str(e))
            else:
                raise AssertionError("a digest mismatch was accepted")
            same_as(model, e1, "after a failed atomic refit")
            # Without atomic the same failure leaves the parameters it wrote changed (what atomic prevents).
            try:
                wv.refit(model, step2, {"verify": "full", "manifest": bad, "quiet": True, "atomic": False})
            except wmap.Error as e:
                written = getattr(e, "written", [])
                check(written, "the non-atomic failure names what it wrote: %s" % e)
            else:
                raise AssertionError("a digest mismatch was accepted")
            changed = [n for n, p in model.named_parameters() if tensor_bytes(p) != e1[n][2]]
            check(changed, "a failed non-atomic refit changed parameters (mixed weights)")
            # Staging beyond the limit is refused up front.
            os.environ["WMAP_ATOMIC_MAX_BYTES"] = "1K"
            try:
                wv.refit(model, step2, {"quiet": True})
            except wmap.ValidationError as e:
                check("more than the limit of 1.00 KiB" in str(e) and "nothing was read or written" in str(e), str(e))
            else:
                raise AssertionError("a refit over WMAP_ATOMIC_MAX_BYTES was accepted")
            finally:
                del os.environ["WMAP_ATOMIC_MAX_BYTES"]
            r = wv.refit(model, step2, {"verify": "full", "manifest": good, "quiet": True})
            same_as(model, e2, "after a good atomic refit")
            check(r["atomic"] and r["staged_bytes"] == sum(len(v[2]) for v in e2.values()), "report %r" % r)
            check(r["verified"] == "full", "verified: %r" % r["verified"])
        # TensorRT-LLM's refit path: the same all-or-nothing contract.
        t1 = ref.expected_summary(step1, 2, 0, target="trtllm")
        t2 = ref.expected_summary(step2, 2, 0, target="trtllm")
        loader = wt.WmapCheckpointLoader(quiet=True, verify="full", manifest=bad)
        tmodel = module_like(t1, dtypes(), fill=SENTINEL)
        mapping = Mapping(world_size=2, rank=0, tp_size=2)
        wt.WmapCheckpointLoader(quiet=True).load_weights(step1, mapping=mapping, model=tmodel)
        same_as(tmodel, t1, "trtllm step 1")
        try:
            loader.weight_loader.refit(tmodel, step2, mapping)
        except wmap.Error as e:
            check("no destination was changed" in str(e), str(e))
        else:
            raise AssertionError("a digest mismatch was accepted")
        same_as(tmodel, t1, "trtllm after a failed atomic refit")
        wt.WmapCheckpointLoader(quiet=True, verify="full", manifest=good).weight_loader.refit(tmodel, step2, mapping)
        same_as(tmodel, t2, "trtllm after a good refit")


def test_messages_never_carry_url_secrets():
    """An adapter's refusal names the source as wmap does: no user:password@, no query."""
    from wmap.engines.source import redacted
    eq(redacted("https://alice:pw-not-to-print@host:8443/ck/?X-Amz-Signature=sig"), "https://host:8443/ck/", "https")
    eq(redacted("s3://bucket/llama/"), "s3://bucket/llama/", "s3")
    eq(redacted("/models/llama"), "/models/llama", "a local path")


def test_installed_package():
    """Under WMAP_EXPECT_INSTALLED=1: wmap, its extension, libwmap, plugins and mappings all come
    from the installed package, and the `wmap` console script runs the packaged CLI."""
    if os.environ.get("WMAP_EXPECT_INSTALLED") != "1":
        return "skip"
    import subprocess
    import sysconfig
    pkg = os.path.dirname(os.path.realpath(wmap.__file__))
    site = os.path.realpath(sysconfig.get_paths()["platlib"])
    check(pkg.startswith(site), "wmap imported from %s, not the environment's site-packages %s" % (pkg, site))
    check(os.path.realpath(wmap._wmap.__file__).startswith(pkg), "extension " + wmap._wmap.__file__)
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        p = wmap.plan(ck, tp_size=2, tp_rank=1)
        check(p.ok and os.path.realpath(p.mapping).startswith(pkg), "mapping from the package: %s" % p.mapping)
        maps = open("/proc/self/maps").read()
        libs = sorted({l.split()[-1] for l in maps.splitlines() if "libwmap" in l and "/" in l})
        check(libs and all(os.path.realpath(l).startswith(pkg) for l in libs), "libwmap from the package: %s" % libs)
        script = os.path.join(os.path.dirname(sys.executable), "wmap")  # the environment's bin/
        check(os.access(script, os.X_OK), "no wmap console script beside %s" % sys.executable)
        r = subprocess.run([script, "plan", ck, "--tp-size", "2", "--tp-rank", "1"], capture_output=True, text=True)
        eq(r.returncode, 0, "wmap plan through the console script (stderr %s)" % r.stderr)


if __name__ == "__main__":
    run_tests([("vLLM --load-format wmap: every family bit-exact through the stand-in flow",
                test_vllm_every_family_bit_exact),
               ("vLLM: refusals before anything is written", test_vllm_refusals_before_anything_is_written),
               ("vLLM: pipeline stages (get_pp_indices, VLLM_PP_LAYER_PARTITION) bit-exact",
                test_vllm_pipeline_stages_bit_exact),
               ("vLLM: VLLM_PLUGINS filters the entry point", test_vllm_plugins_filter),
               ("TensorRT-LLM checkpoint_format WMAP: every family bit-exact", test_trtllm_every_family_bit_exact),
               ("TensorRT-LLM: pipeline stages (Mapping.pp_layers, pp_partition) bit-exact",
                test_trtllm_pipeline_stages_bit_exact),
               ("TensorRT-LLM: refusals", test_trtllm_refusals),
               ("atomic refit: a failure half way changes nothing", test_atomic_refit_changes_nothing_on_failure),
               ("refusals name a URL without its secrets", test_messages_never_carry_url_secrets),
               ("the installed package is self-contained", test_installed_package)])
