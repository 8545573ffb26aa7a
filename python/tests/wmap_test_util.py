"""Helpers shared by the Python module's tests (plain scripts run by ctest).

Environment (set by python/CMakeLists.txt): PYTHONPATH=<build>/python, WMAP_CLI (the built
`wmap` binary), WMAP_REFERENCE_DIR (tests/python, for reference.py).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import traceback

SKIP = 77  # ctest SKIP_RETURN_CODE

CLI = os.environ.get("WMAP_CLI", "wmap")
REFERENCE_DIR = os.environ.get("WMAP_REFERENCE_DIR",
                               os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))


def reference():
    """tests/python/reference.py imported as a module."""
    if REFERENCE_DIR not in sys.path:
        sys.path.insert(0, REFERENCE_DIR)
    import reference as ref  # noqa: E402
    return ref


def cli(*args, check=None):
    """Runs the wmap CLI; returns (rc, stdout, stderr). check=N asserts the exit code."""
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check is not None and p.returncode != check:
        raise AssertionError("wmap %s: exit %d, expected %d\n%s" % (" ".join(map(str, args)), p.returncode, check, p.stderr))
    return p.returncode, p.stdout, p.stderr


def synth(out_dir, family="llama", *extra):
    cli("synth", family, out_dir, *extra, check=0)
    return out_dir


class TempDir:
    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="wmap-py-")
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what):
    if got != want:
        raise AssertionError("%s: got %r, expected %r" % (what, got, want))


def module_like(expected, target_dtype, fill=None):
    """A torch module whose parameters are named (nested modules), shaped and typed like `expected`
    ({name: (dtype name, shape, bytes)}, as reference.expected_summary gives): an engine's model as
    its named_parameters() see it. `target_dtype` maps dtype names to torch dtypes; `fill`: a byte
    every parameter is filled with (else uninitialised)."""
    import torch

    root = torch.nn.Module()
    for name, (dtype, shape, _) in expected.items():
        *path, leaf = name.split(".")
        m = root
        for p in path:
            if p not in m._modules:
                m.add_module(p, torch.nn.Module())
            m = m._modules[p]
        t = torch.empty(shape, dtype=target_dtype[dtype])
        if fill is not None:
            t.reshape(-1).view(torch.uint8).fill_(fill)
        m.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
    return root


def tensor_bytes(t):
    """A tensor's bytes as stored (any dtype, any rank, 0-d included)."""
    import torch
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def run_tests(tests):
    """Runs (name, fn) pairs; prints one line each; exits 1 on any failure, 77 when all skipped."""
    failed = skipped = 0
    for name, fn in tests:
        try:
            result = fn()
            if result == "skip":
                skipped += 1
                print("SKIP", name)
            else:
                print("ok  ", name)
        except Exception:  # noqa: BLE001 - report every failure, keep going
            failed += 1
            print("FAIL", name)
            traceback.print_exc()
        sys.stdout.flush()
    if failed:
        print("%d of %d failed" % (failed, len(tests)))
        sys.exit(1)
    if skipped == len(tests):
        sys.exit(SKIP)
    sys.exit(0)
