"""Where an engine's `model` argument says the checkpoint is, as a wmap source, without downloading:
a local folder or file as it is; a Hugging Face repo id as its snapshot in the local hub cache when
the revision is there, else `hf://org/name@revision` (read over HTTP, range by range); s3://,
http(s):// and hf:// URLs unchanged."""

import os
import re
import urllib.parse

_REMOTE = ("s3://", "http://", "https://", "hf://")
# The hub's repo-id grammar (huggingface_hub validate_repo_id): one optional namespace.
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def hub_cache_dir():
    """huggingface_hub's cache folder: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub
    (huggingface_hub constants.py)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                     os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(home, "hub")


def cached_snapshot(repo_id, revision=None):
    """The snapshot folder of repo_id at revision in the local hub cache, or None. A branch or tag
    is resolved through the cache's refs/ (as huggingface_hub's snapshot_download(local_files_only=True))."""
    repo = os.path.join(hub_cache_dir(), "models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    ref = os.path.join(repo, "refs", rev)
    if os.path.isfile(ref):
        with open(ref) as f:
            rev = f.read().strip()
    snapshot = os.path.join(repo, "snapshots", rev)
    if os.path.isdir(snapshot) and any(n.endswith(".safetensors") for n in os.listdir(snapshot)):
        return snapshot
    return None


def resolve_source(model, revision=None):
    """The wmap source for an engine's model argument (see the module's docstring)."""
    model = os.fspath(model)
    if model.startswith(_REMOTE):
        return model
    if os.path.exists(model):
        return model
    if _REPO_ID.match(model) and ".." not in model:
        snapshot = cached_snapshot(model, revision)
        if snapshot:
            return snapshot
        # A revision with slashes (refs/pr/1) is percent-encoded, as hf:// wants (docs/cli.md).
        return "hf://" + model + ("@" + urllib.parse.quote(revision, safe="") if revision else "")
    raise FileNotFoundError("wmap: model %r is neither a local path, a Hugging Face repo id nor an "
                            "s3://, http(s):// or hf:// URL" % model)


def redacted(source):
    """`source` as messages may print it: a URL without its user:password@ and query (a presigned
    signature), as wmap's own messages name remote locations (docs/cli.md "Secrets")."""
    source = os.fspath(source)
    if not source.startswith(_REMOTE):
        return source
    u = urllib.parse.urlsplit(source)
    host = u.hostname or ""
    if u.port:
        host += ":%d" % u.port
    return urllib.parse.urlunsplit((u.scheme, host, u.path, "", ""))
