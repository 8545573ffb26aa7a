#!/usr/bin/env python3
"""Independent reference reader for safetensors files (shares no code with wmap).

Usage: st_reference.py [--digest] PATH [PATH ...]

Each PATH is one .safetensors file, or a checkpoint directory (its
model.safetensors.index.json names the shards when present, else every
*.safetensors file in name order). Prints, on stdout, the same JSON shape as the
tensor list of `wmap inspect --json`:

  {"shards": [{"file", "size", "header_bytes", "tensors"}],
   "tensors": [{"name", "dtype", "shape", "file", "offset", "nbytes"}]}

with `offset` the absolute byte offset of the data (8 + N + begin), tensors sorted
by name. `--digest` adds "sha256" (of the tensor's bytes) to each tensor.
A malformed file prints one line on stderr and exits 2.

The checks follow the format's own reader (huggingface/safetensors tensor.rs),
written from its rules rather than from wmap's code.
"""

import hashlib
import json
import os
import struct
import sys

MAX_HEADER = 100_000_000
BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
    "F64": 64, "I64": 64, "U64": 64,
}
U64_MAX = (1 << 64) - 1


class Malformed(Exception):
    pass


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise Malformed("duplicate key %r in JSON object" % k)
        seen[k] = v
    return seen


def read_file(path, digest):
    with open(path, "rb") as f:
        data = f.read()
    size = len(data)
    if size < 8:
        raise Malformed("file is %d bytes, shorter than 8" % size)
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise Malformed("header length %d over the limit" % n)
    if 8 + n > size:
        raise Malformed("header length %d past the end of a %d-byte file" % (n, size))
    try:
        text = data[8:8 + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise Malformed("header is not UTF-8: %s" % e)
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise Malformed("header is not JSON: %s" % e)
    if not isinstance(header, dict):
        raise Malformed("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise Malformed("__metadata__ is not a map of strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise Malformed("tensor %r is not an object" % name)
        for key in ("dtype", "shape", "data_offsets"):
            if key not in info:
                raise Malformed("tensor %r lacks %s" % (name, key))
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in BITS:
            raise Malformed("tensor %r has unknown dtype %r" % (name, dtype))

        def is_u64(x):
            return type(x) is int and 0 <= x <= U64_MAX

        if not isinstance(shape, list) or not all(is_u64(d) for d in shape):
            raise Malformed("tensor %r has a bad shape %r" % (name, shape))
        if not isinstance(offs, list) or len(offs) != 2 or not all(is_u64(o) for o in offs):
            raise Malformed("tensor %r has bad data_offsets %r" % (name, offs))
        numel = 1
        for d in shape:
            numel *= d
        if numel > U64_MAX or numel * BITS[dtype] > U64_MAX:
            raise Malformed("tensor %r overflows" % name)
        bits = numel * BITS[dtype]
        if bits % 8:
            raise Malformed("tensor %r is not a whole number of bytes" % name)
        entries.append((offs[0], offs[1], name, dtype, shape, bits // 8))
    expected = 0
    for begin, end, name, dtype, shape, nbytes in sorted(entries):
        if begin != expected or end < begin:
            raise Malformed("tensor %r: bad offsets [%d, %d], expected start %d" % (name, begin, end, expected))
        if end - begin != nbytes:
            raise Malformed("tensor %r: span %d != %d bytes" % (name, end - begin, nbytes))
        expected = end
    if 8 + n + expected != size:
        raise Malformed("data ends at %d but the file is %d bytes" % (8 + n + expected, size))
    fname = os.path.basename(path)
    tensors = []
    for begin, end, name, dtype, shape, nbytes in entries:
        t = {"name": name, "dtype": dtype, "shape": shape, "file": fname,
             "offset": 8 + n + begin, "nbytes": nbytes}
        if digest:
            t["sha256"] = hashlib.sha256(data[8 + n + begin:8 + n + end]).hexdigest()
        tensors.append(t)
    shard = {"file": fname, "size": size, "header_bytes": n, "tensors": len(tensors)}
    return shard, tensors


def shard_paths(path):
    if os.path.isfile(path):
        return [path]
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, "r", encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        names = sorted(set(weight_map.values()))
    else:
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    return [os.path.join(path, n) for n in names]


def main(argv):
    digest = "--digest" in argv
    paths = [a for a in argv if a != "--digest"]
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    shards, tensors = [], []
    for p in paths:
        for f in shard_paths(p):
            try:
                shard, ts = read_file(f, digest)
            except (Malformed, OSError) as e:
                print("st_reference: %s: %s" % (f, e), file=sys.stderr)
                return 2
            shards.append(shard)
            tensors.extend(ts)
    tensors.sort(key=lambda t: t["name"].encode("utf-8"))
    for a, b in zip(tensors, tensors[1:]):
        if a["name"] == b["name"]:
            print("st_reference: tensor %r is in %s and %s" % (a["name"], a["file"], b["file"]), file=sys.stderr)
            return 2
    json.dump({"shards": shards, "tensors": tensors}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
