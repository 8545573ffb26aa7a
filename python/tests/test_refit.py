"""Refit as a trainer and a serving engine do it (docs/python.md "Refit"): plan, load_into, the
trainer publishes the next step's shards, load again. A plan whose shards changed is refused
naming the shard (review F1: it used to read the new files at the old offsets, silently), its
refresh() fails when the offsets moved, and planning again gives the new weights bit for bit.
"""

import json
import os
import struct

import numpy as np

import wmap
from wmap_test_util import TempDir, check, eq, reference, run_tests, synth

ref = reference()


def shard_names(ck):
    return sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))


def publish(src, dst, metadata=None):
    """dst replaced by src's bytes (write, then rename), with `metadata` added to __metadata__."""
    with open(src, "rb") as f:
        data = f.read()
    if metadata:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        header.setdefault("__metadata__", {}).update(metadata)
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        data = struct.pack("<Q", len(text)) + text + data[8 + n:]
    with open(dst + ".tmp", "wb") as f:
        f.write(data)
    os.replace(dst + ".tmp", dst)


BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8}


def numpy_destinations(expected):
    """One 0x5A-filled array per expected parameter, of its shape and element size."""
    return {n: np.full(shape, 0x5A, dtype=BY_SIZE[SIZE[dtype]]) for n, (dtype, shape, _) in expected.items()}


def test_a_plan_reused_after_a_rewrite_is_refused():
    with TempDir() as d:
        ck = synth(os.path.join(d, "ck"), "llama", "--seed", "1")
        nxt = synth(os.path.join(d, "next"), "llama", "--seed", "2")
        plan = wmap.plan(ck, tp_size=2, tp_rank=1, quiet=True)
        expected = ref.expected_summary(ck, 2, 1)
        bufs = numpy_destinations(expected)
        wmap.load_into(plan, bufs, quiet=True)
        for n in bufs:
            eq(bufs[n].tobytes(), expected[n][2], "step 1 " + n)
        for s in shard_names(nxt):
            publish(os.path.join(nxt, s), os.path.join(ck, s), {"step": "2000"})
        before = {n: b.tobytes() for n, b in bufs.items()}
        try:
            wmap.load_into(plan, bufs, quiet=True)
            raise AssertionError("load_into(plan) read rewritten shards at the plan's offsets")
        except wmap.ValidationError as e:
            msg = str(e)
            check(shard_names(ck)[0] in msg and "changed since it was planned" in msg and "plan again" in msg, msg)
        for n in bufs:
            eq(bufs[n].tobytes(), before[n], "a refused refit left " + n + " as it was")
        try:
            wmap.load(plan, quiet=True)
            raise AssertionError("load(plan) read rewritten shards at the plan's offsets")
        except wmap.ValidationError as e:
            check("changed since it was planned" in str(e), str(e))
        try:
            plan.refresh()
            raise AssertionError("refresh() kept a plan whose offsets moved")
        except wmap.ValidationError as e:
            check("headers changed since the plan was made" in str(e) and "data offset" in str(e), str(e))
        # Plan each step (headers only): the new weights, bit for bit.
        step2 = ref.expected_summary(ck, 2, 1)
        check(any(step2[n][2] != expected[n][2] for n in expected), "the next step differs")
        wmap.load_into(wmap.plan(ck, tp_size=2, tp_rank=1, quiet=True), bufs, quiet=True)
        for n in bufs:
            eq(bufs[n].tobytes(), step2[n][2], "step 2 " + n)


def test_refresh_keeps_a_plan_whose_headers_are_unchanged():
    with TempDir() as d:
        ck = synth(os.path.join(d, "ck"), "llama", "--seed", "1")
        nxt = synth(os.path.join(d, "next"), "llama", "--seed", "3")
        plan = wmap.plan(ck, tp_size=2, tp_rank=0, quiet=True)
        for s in shard_names(nxt):
            publish(os.path.join(nxt, s), os.path.join(ck, s))
        fresh = plan.refresh()
        eq(fresh.plan_id, plan.plan_id, "same offsets: the same plan")
        got = wmap.load(fresh, quiet=True)
        want = ref.expected_summary(ck, 2, 0)
        for n, t in got.items():
            eq(t.numpy().view(np.uint8).tobytes(), want[n][2], n)


if __name__ == "__main__":
    run_tests([
        ("a plan reused after the shards were rewritten is refused, naming the shard", test_a_plan_reused_after_a_rewrite_is_refused),
        ("refresh() keeps a plan whose headers are unchanged", test_refresh_keeps_a_plan_whose_headers_are_unchanged),
    ])
