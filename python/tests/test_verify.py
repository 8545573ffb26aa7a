"""wmap.load(verify=..., digests=True) and wmap.load_into(..., verify=..., digests=True): shard
SHA-256s checked from the bytes as read, and each parameter's XXH3-64 over its final bytes.
The digests are checked against an independent computation: Debian's libxxhash called through
ctypes over tests/python/reference.py's bytes for the rank, and the CLI's `load --json --digests`."""

import ctypes
import hashlib
import json
import os

import numpy as np

import wmap
from wmap_test_util import TempDir, check, cli, eq, reference, run_tests, synth

ref = reference()
BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}

_xxh = ctypes.CDLL("libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(data):
    return "%016x" % _xxh.XXH3_64bits(data, len(data))


def manifest_for(ckpt, path):
    with open(path, "w") as f:
        for name in sorted(os.listdir(ckpt)):
            if name.endswith(".safetensors"):
                with open(os.path.join(ckpt, name), "rb") as s:
                    f.write("%s  %s\n" % (hashlib.sha256(s.read()).hexdigest(), name))
    return path


def test_digests_equal_across_load_load_into_cli_and_reference():
    with TempDir() as d:
        ck = synth(os.path.join(d, "ds"), "deepseek_v3", "--fp8")
        for tp, rank, target in ((1, 0, "trtllm"), (2, 1, "trtllm"), (1, 0, "vllm")):
            label = "tp %d/%d %s" % (rank, tp, target)
            want = {n: xxh3(b) for n, (_, _, b) in ref.expected_summary(ck, tp, rank, target=target).items()}
            got = wmap.load(ck, tp_size=tp, tp_rank=rank, target=target, digests=True, quiet=True)
            eq({n: t.digest for n, t in got.items()}, want, label + ": load(digests=True) vs the reference's bytes")
            dests = {n: np.zeros(t.nbytes // SIZE[t.dtype], dtype=BY_SIZE[SIZE[t.dtype]]).reshape(t.shape)
                     for n, t in got.items()}
            report = wmap.load_into(ck, dests, tp_size=tp, tp_rank=rank, target=target, digests=True, quiet=True)
            eq(report["digests"], want, label + ": load_into(digests=True)")
            _, out, _ = cli("-q", "load", ck, "--tp-size", tp, "--tp-rank", rank, "--target", target, "--json",
                            "--digests", check=0)
            eq(json.loads(out)["digests"], want, label + ": wmap load --json --digests")
        plain = wmap.load(ck, quiet=True)
        check(all(t.digest is None for t in plain.values()), "no digests unless asked")


def test_verify_catches_a_corrupt_shard_and_reports():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama", "--shards", "2")
        man = manifest_for(ck, os.path.join(d, "SHA256SUMS"))
        wmap.load(ck, verify=True, manifest=man, quiet=True)
        dests = {n: np.zeros(t.nbytes // SIZE[t.dtype], dtype=BY_SIZE[SIZE[t.dtype]]).reshape(t.shape)
                 for n, t in wmap.load(ck, quiet=True).items()}
        report = wmap.load_into(ck, dests, verify=True, manifest=man, quiet=True)
        eq([v["status"] for v in report["verification"]], ["ok", "ok"], "load_into(verify=True) report")
        shard = os.path.join(ck, "model-00002-of-00002.safetensors")
        data = bytearray(open(shard, "rb").read())
        data[len(data) // 2] ^= 0x21
        open(shard, "wb").write(bytes(data))
        for fn in (lambda: wmap.load(ck, verify=True, manifest=man, quiet=True),
                   lambda: wmap.load_into(ck, dests, verify=True, manifest=man, quiet=True)):
            try:
                fn()
                raise AssertionError("a corrupt shard loaded under verify=True")
            except wmap.ValidationError as e:
                check("model-00002-of-00002.safetensors" in str(e) and "SHA-256 mismatch" in str(e), str(e))
        try:
            wmap.load(ck, verify="sometimes")
            raise AssertionError("verify='sometimes' accepted")
        except ValueError as e:
            check("verify must be False, True, 'read', 'full' or 'best-effort'" in str(e), str(e))


if __name__ == "__main__":
    run_tests([
        ("digests: load, load_into, CLI and libxxhash over the reference agree", test_digests_equal_across_load_load_into_cli_and_reference),
        ("verify=True: a corrupt shard raises, naming it; load_into reports each shard", test_verify_catches_a_corrupt_shard_and_reports),
    ])
