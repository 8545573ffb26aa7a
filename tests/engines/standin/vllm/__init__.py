"""STAND-IN of vLLM's plug-in surface for wmap's adapter tests; not vLLM (tests/engines/standin/README.md)."""
STANDIN = True
