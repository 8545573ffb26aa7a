"""Mirrors tensorrt_llm/_torch/models/checkpoints/base_weight_loader.py BaseWeightLoader."""
from abc import ABC, abstractmethod


class BaseWeightLoader(ABC):
    @abstractmethod
    def load_weights(self, checkpoint_dir, mapping, **kwargs):
        raise NotImplementedError
