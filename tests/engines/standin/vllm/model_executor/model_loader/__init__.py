"""Mirrors vllm/model_executor/model_loader/__init__.py (e9234694): register_model_loader and
get_model_loader over _LOAD_FORMAT_TO_MODEL_LOADER."""
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

_LOAD_FORMAT_TO_MODEL_LOADER = {}


def register_model_loader(load_format):
    def _wrapper(model_loader_cls):
        if not issubclass(model_loader_cls, BaseModelLoader):
            raise ValueError("The model loader must be a subclass of `BaseModelLoader`.")
        _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = model_loader_cls  # an existing name is overwritten
        return model_loader_cls
    return _wrapper


def get_model_loader(load_config):
    load_format = load_config.load_format
    if load_format not in _LOAD_FORMAT_TO_MODEL_LOADER:
        raise ValueError(f"Load format `{load_format}` is not supported")
    return _LOAD_FORMAT_TO_MODEL_LOADER[load_format](load_config)
