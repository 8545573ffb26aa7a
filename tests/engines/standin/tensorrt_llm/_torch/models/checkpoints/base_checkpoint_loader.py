"""Mirrors tensorrt_llm/_torch/models/checkpoints/base_checkpoint_loader.py BaseCheckpointLoader
(b35ac1b6): abstract members, load_config, load_weights delegating to the weight loader, get()."""
from abc import ABC, abstractmethod

from tensorrt_llm._torch.models.modeling_utils import CHECKPOINT_LOADER_FORMAT_DEFAULT_MAPPING


class BaseCheckpointLoader(ABC):
    @abstractmethod
    def get_default_weight_loader(self):
        ...

    @abstractmethod
    def get_default_config_loader(self):
        ...

    @abstractmethod
    def cleanup(self):
        ...

    @property
    @abstractmethod
    def weight_loader(self):
        ...

    @property
    @abstractmethod
    def weight_mapper(self):
        ...

    @property
    @abstractmethod
    def config_loader(self):
        ...

    @property
    @abstractmethod
    def checkpoint_format(self):
        ...

    def load_config(self, checkpoint_dir, **kwargs):
        return self.config_loader.load(checkpoint_dir, **kwargs)

    def load_weights(self, checkpoint_dir, **kwargs):
        return self.weight_loader.load_weights(checkpoint_dir, **kwargs)

    @classmethod
    def get(cls, checkpoint_format, **kwargs):
        try:
            return CHECKPOINT_LOADER_FORMAT_DEFAULT_MAPPING[checkpoint_format](**kwargs)
        except KeyError as e:
            raise ValueError(f"Checkpoint loader for format {checkpoint_format} is not registered; available: "
                             f"{list(CHECKPOINT_LOADER_FORMAT_DEFAULT_MAPPING)}") from e
