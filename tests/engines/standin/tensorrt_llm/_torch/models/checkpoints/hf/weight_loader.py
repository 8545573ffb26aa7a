"""Stands for hf/weight_loader.py HfWeightLoader (TensorRT-LLM's own safetensors reader): the
stand-in does not load weights itself, so a flow that falls back to it fails loudly."""
from tensorrt_llm._torch.models.checkpoints.base_weight_loader import BaseWeightLoader


class HfWeightLoader(BaseWeightLoader):
    def load_weights(self, checkpoint_dir, mapping, **kwargs):
        raise NotImplementedError("stand-in: TensorRT-LLM's own HF weight loading is not modelled")
