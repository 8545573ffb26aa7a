"""The options a user gives wmap inside an engine, one type for both adapters: vLLM's
`--model-loader-extra-config '{...}'` and TensorRT-LLM's `WmapCheckpointLoader(**options)` (or the
`checkpoint_loader` YAML). Each is a wmap.load_into keyword of the same name and meaning
(docs/python.md); an unknown key is refused by name before the engine builds anything."""

import os

# name -> (accepted Python types, what it is)
KNOWN = {
    "verify": ((bool, str), "True/'read', 'full', 'best-effort' or False (wmap.load_into verify=)"),
    "manifest": ((str, os.PathLike), "a sha256sum file of expected shard digests"),
    "digests": ((bool,), "each parameter's XXH3-64 as written, in the loader's last_report['digests']"),
    "max_read_gap": ((int,), "bytes of unneeded data a read may span to join two ranges"),
    "remote": ((dict,), "remote storage settings, e.g. {'stall_seconds': '60'} (wmap.load_into's remote= names)"),
    "plugin_dir": ((str, os.PathLike), "a folder of extra family plugins"),
    "mappings": ((str, os.PathLike), "a folder of rename tables overriding the defaults"),
    "moe_backend": ((str,), "whose expert layout to build (gpt-oss: 'triton' or 'cutlass')"),
    "mtp_layers": ((int,), "multi-token-prediction layers to load"),
    "ignore": ((list, tuple), "regex patterns of parameters the caller fills itself"),
    "atomic": ((bool,), "stage the whole load and change no parameter unless it all succeeded"),
    "catalog": ((str, os.PathLike), "a saved catalog (wmap inspect --save-catalog) to plan from"),
    "quiet": ((bool,), "no progress or plan report on stderr"),
}


class EngineOptions:
    """Validated wmap options from an engine's configuration (`where` names it in errors)."""

    def __init__(self, options=None, where="options"):
        options = dict(options or {})
        for key, value in options.items():
            if key not in KNOWN:
                raise ValueError("wmap: unknown option %r in %s (known: %s)" % (key, where, ", ".join(sorted(KNOWN))))
            types, what = KNOWN[key]
            if isinstance(value, bool) and bool not in types or not isinstance(value, types):
                raise TypeError("wmap: option %r in %s is %s %r; expected %s" %
                                (key, where, type(value).__name__, value, what))
        self._options = options
        self.where = where

    def keywords(self):
        """The wmap.load_into keywords these options give."""
        out = dict(self._options)
        for key in ("manifest", "plugin_dir", "mappings", "catalog"):
            if key in out:
                out[key] = os.fspath(out[key])
        if "ignore" in out:
            out["ignore"] = list(out["ignore"])
        return out

    def get(self, key, default=None):
        return self._options.get(key, default)

    def __repr__(self):
        # Keys only: remote settings may hold credentials, which never reach a log.
        return "EngineOptions(%s)" % ", ".join(sorted(self._options))

    # Pickled into TensorRT-LLM's MPI workers with the loader that holds it.
    def __getstate__(self):
        return {"options": self._options, "where": self.where}

    def __setstate__(self, state):
        self._options = state["options"]
        self.where = state["where"]
