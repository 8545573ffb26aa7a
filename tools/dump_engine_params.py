#!/usr/bin/env python3
"""Dump an engine's parameter list for `wmap plan --expect` (and wmap.Plan.check_against).

    python3 tools/dump_engine_params.py MODULE:FACTORY OUT.json [ARG ...]

imports MODULE, calls FACTORY(*ARGS) to build the engine's torch.nn.Module for one rank (e.g. a
function that builds a vLLM or TensorRT-LLM model with its parallel layout set up), and writes
{name: {"shape": [...], "dtype": "bfloat16"}} for every entry of named_parameters(), as the
engine's load_weights sees them (torch lists a tied parameter once). From Python:

    from dump_engine_params import engine_params
    json.dump(engine_params(model), open("params.json", "w"))

Exit 0 on success, 2 on bad usage.
"""

import importlib
import json
import sys


def engine_params(module):
    """{name: {"shape": [...], "dtype": "..."}} of a torch module's named_parameters()."""
    out = {}
    for name, p in module.named_parameters():
        out[name] = {"shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")}
    return out


def main(argv):
    if len(argv) < 3 or ":" not in argv[1]:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    module_name, factory = argv[1].split(":", 1)
    model = getattr(importlib.import_module(module_name), factory)(*argv[3:])
    with open(argv[2], "w") as f:
        json.dump(engine_params(model), f, indent=1)
    print("%d parameters written to %s" % (len(list(model.named_parameters())), argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
