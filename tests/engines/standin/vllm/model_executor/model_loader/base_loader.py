"""Mirrors vllm/model_executor/model_loader/base_loader.py BaseModelLoader (7679f4d2): the two
abstract methods and load_model's order (build the model under the model dtype, load_weights, then
process_weights_after_loading; online FP8 quantisation wraps load_weights in a layerwise pass,
which the stand-in does not model)."""
from abc import ABC, abstractmethod

import torch

from vllm.model_executor.model_loader.utils import (initialize_model, process_weights_after_loading,
                                                    set_default_torch_dtype)


class BaseModelLoader(ABC):
    def __init__(self, load_config):
        self.load_config = load_config

    @abstractmethod
    def download_model(self, model_config) -> None:
        raise NotImplementedError

    @abstractmethod
    def load_weights(self, model, model_config) -> None:
        raise NotImplementedError

    def load_model(self, vllm_config, model_config, prefix=""):
        target_device = torch.device(self.load_config.device or "cpu")
        with set_default_torch_dtype(model_config.dtype):
            with target_device if hasattr(target_device, "__enter__") else _nothing():
                model = initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
            self.load_weights(model, model_config)
            process_weights_after_loading(model, model_config, target_device)
        return model.eval()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
