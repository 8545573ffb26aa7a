"""TensorRT-LLM (PyTorch backend): `LLM(model=DIR, checkpoint_loader=WmapCheckpointLoader(verify="full"))`,
or `checkpoint_format="WMAP"` (also in trtllm-serve's YAML) once this module is imported.

Importing the module registers the format "WMAP" with TensorRT-LLM's three registries (a format
string is looked up in each: checkpoint loader, checkpoint weight loader and config loader,
`_construct_checkpoint_loader`). TensorRT-LLM's ModelLoader calls
`checkpoint_loader.load_weights(checkpoint_dir, mapping=..., model=..., ...)`; WmapWeightLoader fills
`model`'s parameters with wmap.load_into (target trtllm, the rank's layout from `mapping`), returns
{} and WmapCheckpointLoader.is_weights_preloaded() answers True, so the engine skips its own
model.load_weights and runs post_load_weights as usual. The config is read by TensorRT-LLM's own
HfConfigLoader.

A bare format string is resolved in the executor's worker processes, which import nothing of
ours: pass a WmapCheckpointLoader object (pickled into the workers, which imports this module
there), or import wmap.engines.trtllm in each worker before the LLM starts.

Written against TensorRT-LLM's surface (NVIDIA/TensorRT-LLM): _torch/models/modeling_utils.py
register_checkpoint_loader / register_checkpoint_weight_loader / register_config_loader (cb4c622c),
_torch/models/checkpoints/hf/checkpoint_loader.py HfCheckpointLoader and base_checkpoint_loader.py
BaseCheckpointLoader (b35ac1b6), tensorrt_llm/mapping.py Mapping (b35ac1b6), and
_torch/pyexecutor/model_loader.py ModelLoader.load (the load_weights(..., mapping=, model=) call
and is_weights_preloaded()). Tested against a stand-in of that surface (tests/engines/standin),
never TensorRT-LLM itself (docs/engines.md).
"""

import time

import wmap

from .common import UnsupportedLayout, plan_or_refuse, split_keywords
from .options import EngineOptions
from .source import resolve_source

try:
    from tensorrt_llm._torch.models.checkpoints.base_weight_loader import BaseWeightLoader
    from tensorrt_llm._torch.models.checkpoints.hf.checkpoint_loader import HfCheckpointLoader
    from tensorrt_llm._torch.models.checkpoints.hf.config_loader import HfConfigLoader
    from tensorrt_llm._torch.models.modeling_utils import (register_checkpoint_loader,
                                                           register_checkpoint_weight_loader, register_config_loader)
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("wmap.engines.trtllm needs TensorRT-LLM's PyTorch backend (tensorrt_llm._torch): %s" % e) from e

CHECKPOINT_FORMAT = "WMAP"
FALLBACK = "checkpoint_format='HF'"


def layout(mapping):
    """wmap's layout keywords for the rank `mapping` describes (tensorrt_llm.Mapping)."""
    pp = getattr(mapping, "pp_size", 1)
    if getattr(mapping, "cp_size", 1) > 1:
        raise UnsupportedLayout("wmap: cp_size %d: context parallelism is not a layout wmap loads; use %s"
                                % (mapping.cp_size, FALLBACK))
    tp = mapping.tp_size
    ep = mapping.moe_ep_size if getattr(mapping, "moe_ep_size", -1) and mapping.moe_ep_size > 0 else 1
    moe_tp = mapping.moe_tp_size if getattr(mapping, "moe_tp_size", -1) and mapping.moe_tp_size > 0 else tp // ep
    if moe_tp * ep != tp:
        raise UnsupportedLayout("wmap: moe_tp_size %d x moe_ep_size %d is not tp_size %d: wmap's trtllm layout splits "
                                "experts over the tensor-parallel ranks (ep_size divides tp_size)" % (moe_tp, ep, tp))
    return {"tp_size": tp, "tp_rank": mapping.tp_rank, "ep_size": ep, "target": "trtllm",
            "attention_dp": bool(getattr(mapping, "enable_attention_dp", False)),
            "gpus_per_node": getattr(mapping, "gpus_per_node", 8),
            # The stage's layers as Mapping.pp_layers gives them (torch.tensor_split, or pp_partition).
            "pp_size": pp, "pp_rank": mapping.pp_rank if pp > 1 else 0,
            "pp_partition": getattr(mapping, "pp_partition", None) if pp > 1 else None}


class WmapWeightLoader(BaseWeightLoader):
    """Fills the model TensorRT-LLM hands load_weights; returns {} (nothing left to map)."""

    def __init__(self, options=None):
        self.options = options if isinstance(options, EngineOptions) else EngineOptions(options, "WmapCheckpointLoader")
        self.preloaded = False
        self.metrics = {}
        self.last_report = None

    def load_weights(self, checkpoint_dir, mapping=None, model=None, **kwargs):
        if model is None:
            raise UnsupportedLayout("wmap: load_weights(%r) was given no model: wmap fills the engine's own parameters "
                                    "(TensorRT-LLM's ModelLoader passes model=; a speculative-decoding draft model "
                                    "is loaded without one: give it checkpoint_format='HF')" % (checkpoint_dir,))
        if mapping is None:
            raise UnsupportedLayout("wmap: load_weights(%r) was given no mapping: the rank's layout comes from it"
                                    % (checkpoint_dir,))
        self.preloaded = False
        keywords, into = split_keywords(self.options, layout(mapping))
        t0 = time.perf_counter()
        # Headers only: a checkpoint or layout wmap cannot serve is refused before any read.
        plan = plan_or_refuse(resolve_source(checkpoint_dir), keywords, "TensorRT-LLM", FALLBACK)
        t1 = time.perf_counter()
        self.last_report = wmap.load_into(plan, dict(model.named_parameters()), **into)
        t2 = time.perf_counter()
        # TensorRT-LLM's startup metric names (llm.startup_metrics["model_loader"]).
        self.metrics = {"checkpoint_preparation_seconds": t1 - t0, "weight_population_seconds": t2 - t1}
        self.preloaded = True
        return {}

    def refit(self, model, checkpoint_dir, mapping, atomic=True):
        """Reloads `model` from a new checkpoint, all or nothing unless atomic=False (an RL step)."""
        keywords, into = split_keywords(self.options, layout(mapping))
        into.setdefault("atomic", atomic)
        plan = plan_or_refuse(resolve_source(checkpoint_dir), keywords, "TensorRT-LLM", FALLBACK)
        self.last_report = wmap.load_into(plan, dict(model.named_parameters()), **into)
        return self.last_report


class WmapCheckpointLoader(HfCheckpointLoader):
    """checkpoint_format "WMAP": TensorRT-LLM's HF config loading and mappers, wmap's weights.
    Keyword options: wmap.engines.options.KNOWN (verify, manifest, remote, atomic, ...)."""

    def __init__(self, *, weight_loader=None, weight_mapper=None, config_loader=None, **options):
        if weight_loader is None:
            weight_loader = WmapWeightLoader(EngineOptions(options, "WmapCheckpointLoader"))
        elif options:
            raise TypeError("WmapCheckpointLoader: options go to the weight loader it makes; with weight_loader= given, "
                            "give them to WmapWeightLoader")
        super().__init__(weight_loader=weight_loader, weight_mapper=weight_mapper, config_loader=config_loader)
        self._checkpoint_format = CHECKPOINT_FORMAT

    @property
    def checkpoint_format(self):
        return CHECKPOINT_FORMAT

    def get_default_weight_loader(self):
        return WmapWeightLoader()

    def is_weights_preloaded(self):
        return bool(getattr(self.weight_loader, "preloaded", False))

    @property
    def metrics(self):
        return dict(getattr(self.weight_loader, "metrics", {}))


register_checkpoint_loader(CHECKPOINT_FORMAT)(WmapCheckpointLoader)
register_checkpoint_weight_loader(CHECKPOINT_FORMAT)(WmapWeightLoader)
register_config_loader(CHECKPOINT_FORMAT)(HfConfigLoader)
