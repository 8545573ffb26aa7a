"""wmap: load Hugging Face safetensors checkpoints onto one rank's inference parameters.

    import wmap
    params = wmap.load("/models/llama", tp_size=2, tp_rank=0)       # dict[str, wmap.Tensor]
    w = torch.from_dlpack(params["model.layers.0.self_attn.qkv_proj.weight"])  # no copy

    p = wmap.plan("/models/llama", tp_size=2, tp_rank=0)  # headers only: problems, plan_id, layout
    params = wmap.load(p)                                  # exactly that plan, not planned again
    p = p.refresh()                                        # refit: the same plan over the new shards

load(), load_into() and plan() take the same keywords (tp_size, tp_rank, ep_size, pp_size, pp_rank,
pp_partition, mtp_layers, target, attention_dp, gpus_per_node, moe_backend, catalog, config, plugin_dir, mappings, quiet,
max_read_gap, remote); they are
parsed once, in the C++ module, with the core's defaults. The same loader as the `wmap` command
line: same plugins and mapping files (found relative to libwmap.so, or through
plugin_dir/mappings and WMAP_PLUGIN_PATH/WMAP_MAPPINGS_PATH), same plan validation and messages.
See docs/python.md.
"""

import json as _json

from ._wmap import (Error, MalformedInputError, ValidationError, Plan, Tensor, cache_clear, cache_info, load_into,
                    plan)
from . import _wmap

__all__ = ["load", "load_into", "plan", "cache_info", "cache_clear", "inspect", "Tensor", "Plan", "LoadResult", "Error",
           "MalformedInputError", "ValidationError"]


class LoadResult(dict):
    """What wmap.load returns: {name: wmap.Tensor} in plan order (a dict, as before), and what the
    load did.

    verified      "off", "best-effort", "read" or "full": the verification the load ran (a weight-cache
                  hit: the one its entry was made with)
    verification  one dict per shard, as `wmap verify --json` prints them ([] when verified is "off")
    report        the rest: bytes, bytes_read, reads, seconds, gbps, device, io_path, cache, layout, plan_id
    """

    __slots__ = ("verified", "verification", "report")


def load(source, **keywords):
    params, report = _wmap._load(source, **keywords)
    out = LoadResult(params)
    out.verified = report["verified"]
    out.verification = report["verification"]
    out.report = report
    return out


load.__doc__ = _wmap._load.__doc__.replace("wmap.load wraps them in a LoadResult", "returned as a wmap.LoadResult")


def inspect(path):
    """The catalog of a checkpoint directory or .safetensors file, from the headers alone.

    Returns the dict `wmap inspect PATH --json` prints: {"format", "version", "content_id",
    "shards": [{"file", "size", "header_bytes", "tensors", ...}], "tensors": [{"name", "dtype",
    "shape", "file", "offset", "nbytes"}]}, tensors sorted by name.
    """
    return _json.loads(_wmap._inspect_json(path))
