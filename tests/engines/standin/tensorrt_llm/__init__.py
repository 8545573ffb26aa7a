"""STAND-IN of TensorRT-LLM's loader plug-in surface for wmap's adapter tests; not TensorRT-LLM
(tests/engines/standin/README.md)."""
STANDIN = True
