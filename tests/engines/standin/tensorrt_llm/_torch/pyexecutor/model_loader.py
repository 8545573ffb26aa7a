"""Mirrors tensorrt_llm/_torch/pyexecutor/model_loader.py: _construct_checkpoint_loader (a format
string looked up in the three registries, in the worker) and ModelLoader.load's AUTO path:
load_weights(dir, mapping=, model=, source_identity=), is_weights_preloaded(), the model's own
load_weights only for a non-empty dict, then post_load_weights. The model comes from a factory the
test installs (TensorRT-LLM builds its model class from the config)."""
from tensorrt_llm._torch.models.checkpoints.base_checkpoint_loader import BaseCheckpointLoader
from tensorrt_llm._torch.models.modeling_utils import get_checkpoint_weight_loader, get_config_loader

MODEL_FACTORY = None  # set by the tests: fn(config, mapping) -> torch.nn.Module


def _construct_checkpoint_loader(backend, checkpoint_loader, checkpoint_format):
    if checkpoint_loader is not None:
        return checkpoint_loader
    weight_loader = get_checkpoint_weight_loader(checkpoint_format)()
    config_loader = get_config_loader(checkpoint_format)()
    return BaseCheckpointLoader.get(checkpoint_format=checkpoint_format, weight_loader=weight_loader,
                                    weight_mapper=None, config_loader=config_loader)


class ModelLoader:
    def __init__(self, mapping):
        self.mapping = mapping

    def load(self, checkpoint_dir, checkpoint_loader):
        config = checkpoint_loader.load_config(checkpoint_dir)
        model = MODEL_FACTORY(config, self.mapping)
        weights = checkpoint_loader.load_weights(checkpoint_dir, mapping=self.mapping, model=model,
                                                 source_identity=None)
        preloaded = checkpoint_loader.is_weights_preloaded()
        if weights:
            model.load_weights(weights)  # the engine's own mapping (stand-in models have none)
        elif not preloaded:
            raise RuntimeError("stand-in: the loader returned no weights and did not preload them")
        for module in model.modules():
            hook = getattr(module, "post_load_weights", None)
            if callable(hook):
                hook()
        return model
