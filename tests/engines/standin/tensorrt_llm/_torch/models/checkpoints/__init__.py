"""As TensorRT-LLM's checkpoints/__init__.py: importing it registers the built-in HF format only."""
from .hf.checkpoint_loader import HfCheckpointLoader  # noqa: F401
