"""Mirrors tensorrt_llm/_torch/models/modeling_utils.py (cb4c622c): the three registries a
checkpoint format string is looked up in, and their getters."""
CHECKPOINT_LOADER_FORMAT_DEFAULT_MAPPING = {}
MODEL_CLASS_CHECKPOINT_WEIGHT_LOADER_DEFAULT_MAPPING = {}
MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING = {}


def register_checkpoint_loader(name):
    def decorator(cls):
        CHECKPOINT_LOADER_FORMAT_DEFAULT_MAPPING[name] = cls
        return cls
    return decorator


def register_checkpoint_weight_loader(name):
    def decorator(cls):
        MODEL_CLASS_CHECKPOINT_WEIGHT_LOADER_DEFAULT_MAPPING[name] = cls
        return cls
    return decorator


def register_config_loader(name):
    def decorator(cls):
        MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING[name] = cls
        return cls
    return decorator


def get_checkpoint_weight_loader(name):
    if name not in MODEL_CLASS_CHECKPOINT_WEIGHT_LOADER_DEFAULT_MAPPING:
        raise ValueError(f"Checkpoint weight loader {name} is not registered")
    return MODEL_CLASS_CHECKPOINT_WEIGHT_LOADER_DEFAULT_MAPPING[name]


def get_config_loader(name):
    if name not in MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING:
        raise ValueError(f"Config loader {name} is not registered")
    return MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING[name]
