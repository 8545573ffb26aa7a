"""wmap: load Hugging Face safetensors checkpoints onto one rank's inference parameters.

    import wmap
    params = wmap.load("/models/llama", tp_size=2, tp_rank=0)       # dict[str, wmap.Tensor]
    w = torch.from_dlpack(params["model.layers.0.self_attn.qkv_proj.weight"])  # no copy

The same loader as the `wmap` command line: same plugins and mapping files (found relative to
libwmap.so, or through plugin_dir/mappings and WMAP_PLUGIN_PATH/WMAP_MAPPINGS_PATH), same plan
validation and messages. See docs/python.md.
"""

import json as _json

from ._wmap import Error, MalformedInputError, ValidationError, Plan, Tensor, cache_clear, cache_info, load, load_into
from . import _wmap

__all__ = ["load", "load_into", "plan", "cache_info", "cache_clear", "inspect", "Tensor", "Plan", "Error", "MalformedInputError", "ValidationError"]

_PLAN_KEYS = ("tp_size", "tp_rank", "ep_size", "mtp_layers", "target", "attention_dp", "gpus_per_node",
              "plugin_dir", "mappings")


def plan(path=None, *, catalog=None, config=None, **layout):
    """Builds and validates one rank's load plan from headers only (no tensor data is read).

    path: a checkpoint directory or .safetensors file; or catalog= (a catalog saved by
    `wmap inspect --save-catalog`) with config= (the checkpoint's config.json) to plan offline.
    layout: tp_size=1, tp_rank=0, ep_size=1, mtp_layers=None, target="trtllm" (or "vllm"),
    attention_dp=False, gpus_per_node=8, and plugin_dir=None, mappings=None as for load(). Returns a wmap.Plan; plan problems are reported in
    Plan.problems (not raised), unusable input raises wmap.Error.
    """
    unknown = sorted(set(layout) - set(_PLAN_KEYS))
    if unknown:
        raise TypeError("wmap.plan() got unexpected keyword argument(s): %s (known: %s)"
                        % (", ".join(unknown), ", ".join(_PLAN_KEYS)))
    return _wmap._plan(path, catalog, config,
                       layout.get("tp_size", 1), layout.get("tp_rank", 0), layout.get("ep_size", 1),
                       layout.get("mtp_layers"), layout.get("target", "trtllm"), layout.get("attention_dp", False),
                       layout.get("gpus_per_node", 8), layout.get("plugin_dir"), layout.get("mappings"))


def inspect(path):
    """The catalog of a checkpoint directory or .safetensors file, from the headers alone.

    Returns the dict `wmap inspect PATH --json` prints: {"format", "version", "content_id",
    "shards": [{"file", "size", "header_bytes", "tensors", ...}], "tensors": [{"name", "dtype",
    "shape", "file", "offset", "nbytes"}]}, tensors sorted by name.
    """
    return _json.loads(_wmap._inspect_json(path))
