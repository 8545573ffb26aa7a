"""Mirrors the fields of vLLM's configs a loader reads (vllm/config/load.py e2ab420c, parallel.py
840e7972, model.py 18ec6629, vllm.py 09f030ea), and set/get_current_vllm_config."""
import contextlib
import dataclasses
import json
import os
import types


@dataclasses.dataclass
class LoadConfig:
    load_format: str = "auto"
    download_dir: str = None
    model_loader_extra_config: dict = dataclasses.field(default_factory=dict)
    device: str = None

    def __post_init__(self):
        self.load_format = self.load_format.lower()  # vLLM's _lowercase_load_format validator


@dataclasses.dataclass
class ParallelConfig:
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False


@dataclasses.dataclass
class ModelConfig:
    model: str = "Qwen/Qwen3-0.6B"
    revision: str = None
    quantization: str = None
    dtype: str = "auto"

    def __post_init__(self):
        # vLLM reads hf_config with transformers; the stand-in keeps config.json's fields.
        cfg = os.path.join(self.model, "config.json")
        d = json.load(open(cfg)) if os.path.isfile(cfg) else {}
        self.hf_config = types.SimpleNamespace(**d)
        if "quantization_config" not in d:
            self.hf_config.quantization_config = None


@dataclasses.dataclass
class VllmConfig:
    model_config: ModelConfig = None
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    load_config: LoadConfig = dataclasses.field(default_factory=LoadConfig)
    lora_config: object = None


_current = None


@contextlib.contextmanager
def set_current_vllm_config(config):
    global _current
    old, _current = _current, config
    try:
        yield
    finally:
        _current = old


def get_current_vllm_config():
    if _current is None:
        raise AssertionError("Current vLLM config is not set.")
    return _current
