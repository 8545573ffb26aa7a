"""Mirrors hf/config_loader.py HfConfigLoader: the model config from the checkpoint's config.json
(TensorRT-LLM builds a ModelConfig with transformers; the stand-in keeps the JSON's fields)."""
import json
import os
import types


class HfConfigLoader:
    def load(self, checkpoint_dir, **kwargs):
        with open(os.path.join(checkpoint_dir, "config.json")) as f:
            return types.SimpleNamespace(pretrained_config=json.load(f), **kwargs)
