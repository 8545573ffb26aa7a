"""wmap inside inference engines (docs/engines.md):

    vllm serve MODEL --load-format wmap                     # wmap.engines.vllm, via the entry point
    LLM(model=DIR, checkpoint_loader=WmapCheckpointLoader()) # wmap.engines.trtllm

Each adapter fills the engine's own parameters with wmap.load_into (target vllm or trtllm, the
rank's layout taken from the engine) and leaves the engine's post-load processing to run as usual.
Importing this package imports neither engine.
"""

from .options import KNOWN, EngineOptions
from .source import resolve_source

__all__ = ["EngineOptions", "KNOWN", "resolve_source"]
