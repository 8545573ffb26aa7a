"""wmap: load Hugging Face safetensors checkpoints onto one rank's inference parameters.

    import wmap
    params = wmap.load("/models/llama", tp_size=2, tp_rank=0)       # dict[str, wmap.Tensor]
    w = torch.from_dlpack(params["model.layers.0.self_attn.qkv_proj.weight"])  # no copy

    p = wmap.plan("/models/llama", tp_size=2, tp_rank=0)  # headers only: problems, plan_id, layout
    params = wmap.load(p)                                  # exactly that plan, not planned again

load(), load_into() and plan() take the same keywords (tp_size, tp_rank, ep_size, mtp_layers,
target, attention_dp, gpus_per_node, moe_backend, catalog, config, plugin_dir, mappings, quiet,
max_read_gap); they are
parsed once, in the C++ module, with the core's defaults. The same loader as the `wmap` command
line: same plugins and mapping files (found relative to libwmap.so, or through
plugin_dir/mappings and WMAP_PLUGIN_PATH/WMAP_MAPPINGS_PATH), same plan validation and messages.
See docs/python.md.
"""

import json as _json

from ._wmap import (Error, MalformedInputError, ValidationError, Plan, Tensor, cache_clear, cache_info, load, load_into,
                    plan)
from . import _wmap

__all__ = ["load", "load_into", "plan", "cache_info", "cache_clear", "inspect", "Tensor", "Plan", "Error", "MalformedInputError", "ValidationError"]


def inspect(path):
    """The catalog of a checkpoint directory or .safetensors file, from the headers alone.

    Returns the dict `wmap inspect PATH --json` prints: {"format", "version", "content_id",
    "shards": [{"file", "size", "header_bytes", "tensors", ...}], "tensors": [{"name", "dtype",
    "shape", "file", "offset", "nbytes"}]}, tensors sorted by name.
    """
    return _json.loads(_wmap._inspect_json(path))
