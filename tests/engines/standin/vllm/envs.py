"""Mirrors vllm/envs.py VLLM_PLUGINS: None when unset, else the comma-separated names."""
import os

_v = os.environ.get("VLLM_PLUGINS")
VLLM_PLUGINS = None if _v is None else [p for p in _v.split(",") if p]
