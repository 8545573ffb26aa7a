"""Mirrors hf/checkpoint_loader.py HfCheckpointLoader (b35ac1b6): registered as "HF", keyword-only
__init__ with default weight and config loaders, the four properties."""
from tensorrt_llm._torch.models.checkpoints.base_checkpoint_loader import BaseCheckpointLoader
from tensorrt_llm._torch.models.checkpoints.hf.config_loader import HfConfigLoader
from tensorrt_llm._torch.models.checkpoints.hf.weight_loader import HfWeightLoader
from tensorrt_llm._torch.models.modeling_utils import register_checkpoint_loader


@register_checkpoint_loader("HF")
class HfCheckpointLoader(BaseCheckpointLoader):
    def __init__(self, *, weight_loader=None, weight_mapper=None, config_loader=None):
        self._weight_loader = weight_loader or self.get_default_weight_loader()
        self._config_loader = config_loader or self.get_default_config_loader()
        self._weight_mapper = weight_mapper
        self._checkpoint_format = "HF"

    def get_default_weight_loader(self):
        return HfWeightLoader()

    def get_default_config_loader(self):
        return HfConfigLoader()

    def cleanup(self):
        self._weight_mapper = None

    @property
    def weight_loader(self):
        return self._weight_loader

    @property
    def weight_mapper(self):
        return self._weight_mapper

    @weight_mapper.setter
    def weight_mapper(self, value):
        self._weight_mapper = value

    @property
    def config_loader(self):
        return self._config_loader

    @property
    def checkpoint_format(self):
        return self._checkpoint_format
