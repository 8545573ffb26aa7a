"""vLLM: `vllm serve MODEL --load-format wmap [--model-loader-extra-config '{"verify": "full"}']`.

The package's entry point (`vllm.general_plugins: wmap = wmap.engines.vllm:register`, run by vLLM
in every process before work starts) registers WmapModelLoader for the load format "wmap". vLLM's
own BaseModelLoader.load_model builds the model, calls load_weights (here: wmap.load_into with
target="vllm" on the model's parameters, vLLM's per-rank checkpoint-format layout), then runs its
own process_weights_after_loading, as for every loader.

Written against vLLM's loader plug-in surface (vllm-project/vllm): model_executor/model_loader/
__init__.py register_model_loader (e9234694: the class must subclass BaseModelLoader; LoadConfig
lower-cases load_format, so the name is lower-case), base_loader.py BaseModelLoader (7679f4d2:
load_model builds the model, then load_weights, then process_weights_after_loading), plugins/
__init__.py load_plugins_by_group (a27dcf13: every `vllm.general_plugins` entry point, filtered by
VLLM_PLUGINS, in every process), distributed/parallel_state.py get_tensor_model_parallel_rank/
_world_size (0c175ae9), config/parallel.py ParallelConfig (840e7972), config/vllm.py VllmConfig and
get_current_vllm_config (09f030ea), config/model.py ModelConfig (18ec6629). Tested against a
stand-in of that surface (tests/engines/standin/vllm, docs/engines.md), never vLLM itself.
"""

import wmap

from .common import UnsupportedLayout, plan_or_refuse, split_keywords
from .options import EngineOptions
from .source import resolve_source

LOAD_FORMAT = "wmap"
# Where the checkpoint's layout is one wmap does not serve, vLLM's own loader does:
FALLBACK = "--load-format safetensors"


def register():
    """The `vllm.general_plugins` entry point: registers --load-format wmap (once per process)."""
    try:
        from vllm.model_executor.model_loader import register_model_loader
    except ImportError:  # not inside vLLM: nothing to register
        return
    register_model_loader(LOAD_FORMAT)(loader_class())


def layout(vllm_config):
    """wmap's layout keywords for this process's rank, from vLLM's parallel state and config."""
    from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

    par = vllm_config.parallel_config
    tp, rank = get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
    pp = getattr(par, "pipeline_parallel_size", 1)
    stage = {}
    if pp > 1:
        # The stage's layers as vLLM's make_layers takes them: get_pp_indices over the pipeline
        # group's rank, with the VLLM_PP_LAYER_PARTITION override (vllm/distributed/utils.py).
        import vllm.envs as envs
        stage = {"pp_size": pp, "pp_rank": get_pp_group().rank_in_group,
                 "pp_partition": getattr(envs, "VLLM_PP_LAYER_PARTITION", None)}
    dp = getattr(par, "data_parallel_size", 1)
    ep = 1
    if getattr(par, "enable_expert_parallel", False):
        # vLLM's expert parallelism spans TP x DP ranks; wmap's vllm layout has experts over the TP
        # group (ep_size 1 or tp_size, docs/cli.md "Targets").
        if dp > 1:
            raise UnsupportedLayout("wmap: expert parallelism over %d data-parallel ranks (EP = TP x DP = %d): wmap's "
                                    "vllm target splits experts over the tensor-parallel group only; use %s"
                                    % (dp, tp * dp, FALLBACK))
        ep = tp
    return dict({"tp_size": tp, "tp_rank": rank, "ep_size": ep, "target": "vllm"}, **stage)


def refuse_unsupported(vllm_config, model_config):
    """What vLLM does inside its own weight_loader calls, which a direct fill bypasses."""
    if getattr(vllm_config, "lora_config", None) is not None:
        raise UnsupportedLayout("wmap: LoRA is enabled: vLLM wraps each linear (…base_layer.weight), names wmap's vllm "
                                "target does not produce; use %s" % FALLBACK)
    quantization = getattr(model_config, "quantization", None)
    hf_config = getattr(model_config, "hf_config", None)
    if quantization and getattr(hf_config, "quantization_config", None) is None:
        raise UnsupportedLayout("wmap: quantization=%r of an unquantised checkpoint is vLLM's online quantisation, "
                                "done in its weight_loader calls, which wmap's direct fill bypasses; use %s"
                                % (quantization, FALLBACK))


def loader_class():
    """WmapModelLoader, a subclass of vLLM's BaseModelLoader (built once vLLM is importable)."""
    global _loader_class
    if _loader_class is not None:
        return _loader_class
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class WmapModelLoader(BaseModelLoader):
        """--load-format wmap. Options: --model-loader-extra-config, the keys of
        wmap.engines.options.KNOWN (verify, manifest, remote, atomic, ...)."""

        def __init__(self, load_config):
            super().__init__(load_config)
            self.options = EngineOptions(getattr(load_config, "model_loader_extra_config", None) or {},
                                         "--model-loader-extra-config")
            self.vllm_config = None
            self.last_report = None

        def download_model(self, model_config):
            # Nothing to download: wmap reads the shards where they are (local, hub cache, hf://,
            # s3://, https://); resolving checks the model names one.
            resolve_source(model_config.model, getattr(model_config, "revision", None))

        def load_model(self, vllm_config, model_config, **kw):
            # Refusals before vLLM builds the model (and before any byte is read).
            refuse_unsupported(vllm_config, model_config)
            layout(vllm_config)
            self.vllm_config = vllm_config
            return super().load_model(vllm_config=vllm_config, model_config=model_config, **kw)

        def load_weights(self, model, model_config):
            vllm_config = self.vllm_config
            if vllm_config is None:
                from vllm.config import get_current_vllm_config
                vllm_config = get_current_vllm_config()
            self.last_report = load_weights(model, model_config, vllm_config, self.options)

    _loader_class = WmapModelLoader
    return WmapModelLoader


_loader_class = None


def fill(model, source, vllm_config, options, atomic=None):
    """Fills `model`'s parameters from `source` with wmap.load_into (target vllm, this rank's
    layout): the plan is checked against the checkpoint's headers first, and load_into checks it
    against the model's parameters, so a checkpoint or model wmap cannot serve fails before any
    byte is read. `atomic`: the default when the options do not say. Returns load_into's report."""
    keywords, into = split_keywords(options, layout(vllm_config))
    if atomic is not None:
        into.setdefault("atomic", atomic)
    plan = plan_or_refuse(source, keywords, "vLLM", FALLBACK)
    # Every tensor the vllm target writes is an nn.Parameter of vLLM's models (weights, biases,
    # scales, the router's correction bias); the model's buffers (rotary caches) are not loaded.
    return wmap.load_into(plan, dict(model.named_parameters()), **into)


def load_weights(model, model_config, vllm_config, options):
    """The initial load: the checkpoint vLLM's model_config names."""
    return fill(model, resolve_source(model_config.model, getattr(model_config, "revision", None)), vllm_config,
                options)


def refit(model, source, options=None):
    """Reloads `model`'s parameters from a new checkpoint (an RL step's), all or nothing: atomic=True
    unless options say otherwise, so a failure half way leaves every parameter as it was. The layout
    is this process's (vllm.distributed and the current vLLM config)."""
    from vllm.config import get_current_vllm_config

    options = options if isinstance(options, EngineOptions) else EngineOptions(options, "refit options")
    return fill(model, resolve_source(source), get_current_vllm_config(), options, atomic=True)
