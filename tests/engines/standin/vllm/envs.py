"""Mirrors vllm/envs.py: VLLM_PLUGINS (None when unset, else the comma-separated names) and
VLLM_PP_LAYER_PARTITION (the raw string, None when unset), read when asked for, as vLLM's
module-level __getattr__ reads its environment variables."""
import os


def __getattr__(name):
    if name == "VLLM_PLUGINS":
        v = os.environ.get("VLLM_PLUGINS")
        return None if v is None else [p for p in v.split(",") if p]
    if name == "VLLM_PP_LAYER_PARTITION":
        return os.getenv("VLLM_PP_LAYER_PARTITION", None)
    raise AttributeError(name)
