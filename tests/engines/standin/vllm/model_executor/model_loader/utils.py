"""Mirrors vllm/model_executor/model_loader/utils.py initialize_model and
process_weights_after_loading. vLLM builds the architecture's model class; the stand-in calls the
factory a test installs (a module whose named_parameters() are vLLM's names and shapes), and
process_weights_after_loading calls each module's hook, as vLLM's quant methods run theirs."""
import contextlib

import torch

MODEL_FACTORY = None  # set by the tests: fn(vllm_config) -> torch.nn.Module


def initialize_model(vllm_config, model_config=None, prefix=""):
    if MODEL_FACTORY is None:
        raise RuntimeError("stand-in: no MODEL_FACTORY installed")
    return MODEL_FACTORY(vllm_config)


def process_weights_after_loading(model, model_config, target_device):
    for module in model.modules():
        hook = getattr(module, "process_weights_after_loading", None)
        if callable(hook):
            hook()


@contextlib.contextmanager
def set_default_torch_dtype(dtype):
    old = torch.get_default_dtype()
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)
