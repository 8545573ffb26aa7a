"""Mirrors vllm/plugins/__init__.py (vllm-project/vllm a27dcf13): load_plugins_by_group runs every
entry point of a group, filtered by VLLM_PLUGINS; load_general_plugins does so once per process
for "vllm.general_plugins" (vLLM calls it in every process: API server, engine core, workers)."""
from importlib.metadata import entry_points

from vllm import envs

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group):
    discovered = entry_points(group=group)
    allowed = envs.VLLM_PLUGINS
    plugins = {}
    for plugin in discovered:
        if allowed is None or plugin.name in allowed:
            # vLLM logs and skips a plugin that fails to load; the stand-in raises, so a test sees it.
            plugins[plugin.name] = plugin.load()
    return plugins


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
