#!/usr/bin/python3
"""Writes PyTorch (torch.save) checkpoints for the wmap .bin tests, with PyTorch itself.

  make_torch_checkpoints.py basic DIR        single/ and sharded/ checkpoints + expected/<name>.raw
  make_torch_checkpoints.py convert SRC DST [--views]
                                             a safetensors checkpoint re-saved as pytorch_model-*.bin
                                             shards + pytorch_model.bin.index.json (+ config.json);
                                             --views saves every 2-D tensor as a transposed
                                             (column-major, non-contiguous) view of the same values
  make_torch_checkpoints.py views DIR        non-contiguous views (transpose, column slice, step,
                                             permute, expand, offset) + expected/<name>.raw
  make_torch_checkpoints.py malicious DIR    *.bin whose pickles call os.system / builtins.eval /
                                             subprocess.Popen (each would create DIR/marker-<kind>)
  make_torch_checkpoints.py bad DIR          truncated, compressed, short-storage, non-state-dict,
                                             non-contiguous checkpoints
  make_torch_checkpoints.py torchload FILE   loads FILE with the unrestricted torch.load (control)

Exits 77 when torch cannot be imported (the C++ tests skip).
"""
import builtins
import collections
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"torch unavailable: {e}", file=sys.stderr)
    sys.exit(77)


def raw_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def basic_tensors():
    g = torch.Generator().manual_seed(7)
    sd = collections.OrderedDict()
    sd["bf16.weight"] = torch.randn(5, 7, generator=g).to(torch.bfloat16)
    sd["f16.weight"] = torch.randn(3, 4, 2, generator=g).to(torch.float16)
    sd["f32.bias"] = torch.randn(9, generator=g)
    sd["i64.ids"] = torch.arange(-3, 8, dtype=torch.int64).reshape(1, 11)
    sd["f32.scalar"] = torch.tensor(2.5)
    # Tied weights: one tensor object under two names (one storage, memoized in the pickle).
    emb = torch.randn(6, 4, generator=g)
    sd["model.embed_tokens.weight"] = emb
    sd["lm_head.weight"] = emb
    # Two slices of one storage, at offsets.
    base = torch.randn(40, generator=g)
    sd["slice.a"] = base[3:15].view(3, 4)
    sd["slice.b"] = base[20:36].view(2, 8)
    return sd


def write_expected(root, sd):
    """expected/<name>.raw: each tensor's bytes as .contiguous() gives them."""
    exp = os.path.join(root, "expected")
    os.makedirs(exp, exist_ok=True)
    for k, v in sd.items():
        open(os.path.join(exp, k + ".raw"), "wb").write(raw_bytes(v))
    return exp


def basic(root):
    sd = basic_tensors()
    exp = write_expected(root, sd)
    dtypes = {k: str(v.dtype).replace("torch.", "") for k, v in sd.items()}
    json.dump({k: {"dtype": dtypes[k], "shape": list(v.shape)} for k, v in sd.items()},
              open(os.path.join(exp, "tensors.json"), "w"), indent=1)
    single = os.path.join(root, "single")
    os.makedirs(single, exist_ok=True)
    torch.save(sd, os.path.join(single, "pytorch_model.bin"))
    torch.save(sd, os.path.join(root, "model.pth"))  # a single file given by path
    sharded = os.path.join(root, "sharded")
    os.makedirs(sharded, exist_ok=True)
    names = list(sd)
    # Tied pair in the same shard; the two slices in different shards (each saves the storage).
    parts = [names[:4] + ["slice.a"], names[4:7] + ["slice.b"]]
    weight_map = {}
    for i, part in enumerate(parts):
        fname = f"pytorch_model-{i + 1:05d}-of-{len(parts):05d}.bin"
        torch.save(collections.OrderedDict((k, sd[k]) for k in part), os.path.join(sharded, fname))
        weight_map.update({k: fname for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(sharded, "pytorch_model.bin.index.json"), "w"), indent=1)
    open(os.path.join(sharded, "training_args.bin"), "wb").write(b"not a checkpoint")


ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.int16, "F64": np.float64, "I64": np.int64,
             "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = collections.OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=ST_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
        t = torch.from_numpy(arr)
        if info["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t
    return out


def views_tensors():
    g = torch.Generator().manual_seed(11)
    sd = collections.OrderedDict()
    w = torch.randn(6, 10, generator=g).to(torch.bfloat16)
    sd["w"] = w                                   # contiguous, shares its storage with w.t
    sd["w.t"] = w.t()                             # a transpose of the same storage
    m = torch.randn(8, 8, generator=g)
    sd["cols"] = m[:, 2:6]                        # a column slice: rows 8 elements apart
    sd["step"] = torch.arange(20, dtype=torch.int64)[1::3]
    sd["perm"] = torch.randn(2, 3, 4, generator=g).to(torch.float16).permute(2, 0, 1)
    sd["expand"] = torch.arange(3, dtype=torch.int32).expand(4, 3)   # stride 0
    base = torch.randn(50, generator=g)
    sd["offset.t"] = base[7:37].view(5, 6).t()    # a transpose at a storage offset
    sd["u8.t"] = torch.arange(12, dtype=torch.uint8).reshape(3, 4).t()
    return sd


def views(root):
    sd = views_tensors()
    write_expected(root, sd)
    torch.save(sd, os.path.join(root, "pytorch_model.bin"))
    # The file really holds strided views (torch.load gives them back non-contiguous).
    back = torch.load(os.path.join(root, "pytorch_model.bin"), weights_only=True)
    assert not back["w.t"].is_contiguous() and not back["expand"].is_contiguous()
    assert back["expand"].stride() == (0, 1)


def as_view(t):
    """The same values, stored column-major: a non-contiguous view for torch.save."""
    return t.t().contiguous().t() if t.dim() == 2 and min(t.shape) > 1 else t


def convert(src, dst, shards=2, views=False):
    os.makedirs(dst, exist_ok=True)
    tensors = collections.OrderedDict()
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(src, f)))
        elif f.endswith(".json") and f != "model.safetensors.index.json":
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    names = sorted(tensors)
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part_sd = collections.OrderedDict((k, as_view(tensors[k]) if views else tensors[k]) for k in part)
        torch.save(part_sd, os.path.join(dst, fname))
        weight_map.update({k: fname for k in part})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(dst, "pytorch_model.bin.index.json"), "w"), indent=1)


class Evil:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def malicious(root):
    os.makedirs(root, exist_ok=True)
    cases = {
        "os_system": lambda m: Evil(os.system, (f"touch {m}",)),
        "eval": lambda m: Evil(builtins.eval, (f"__import__('os').system('touch {m}')",)),
        "popen": lambda m: Evil(subprocess.Popen, (["touch", m],)),
    }
    for kind, make in cases.items():
        marker = os.path.join(root, f"marker-{kind}")
        sd = collections.OrderedDict()
        sd["ok.weight"] = torch.ones(2, 2)
        sd["evil"] = make(marker)
        torch.save(sd, os.path.join(root, f"{kind}.bin"))


def rewrite_zip(src, dst, edit):
    """Copies a zip entry by entry; edit(name, data) -> (data, compress_type)."""
    zin = zipfile.ZipFile(src)
    with zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data, ctype = edit(info.filename, zin.read(info.filename))
            zout.writestr(zipfile.ZipInfo(info.filename), data, compress_type=ctype)


def bad(root):
    os.makedirs(root, exist_ok=True)
    good = os.path.join(root, "good.bin")
    torch.save({"w": torch.arange(64, dtype=torch.float32).reshape(8, 8)}, good)
    data = open(good, "rb").read()
    open(os.path.join(root, "truncated.bin"), "wb").write(data[: len(data) // 2])
    rewrite_zip(good, os.path.join(root, "compressed.bin"),
                lambda n, d: (d, zipfile.ZIP_DEFLATED if "/data/" in n else zipfile.ZIP_STORED))
    rewrite_zip(good, os.path.join(root, "short_storage.bin"),
                lambda n, d: (d[: len(d) // 2] if "/data/" in n else d, zipfile.ZIP_STORED))
    torch.save([torch.ones(2)], os.path.join(root, "list.bin"))
    torch.save({"w": torch.ones(2), "step": 3}, os.path.join(root, "not_tensors.bin"))
    # A column slice (32 elements spanning 60) whose storage entry is cut to 40 elements: the
    # element count fits, the strided span does not.
    torch.save({"c": torch.arange(64, dtype=torch.float32).reshape(8, 8)[:, :4]}, os.path.join(root, "short_strided.bin"))
    rewrite_zip(os.path.join(root, "short_strided.bin"), os.path.join(root, "short_strided.bin.tmp"),
                lambda n, d: (d[:160] if "/data/" in n else d, zipfile.ZIP_STORED))
    os.replace(os.path.join(root, "short_strided.bin.tmp"), os.path.join(root, "short_strided.bin"))
    # A rewritten (Python zipfile) archive of a good checkpoint still loads: offsets come from the
    # local headers, whatever their padding.
    rewrite_zip(good, os.path.join(root, "rezipped.bin"), lambda n, d: (d, zipfile.ZIP_STORED))
    # ZIP64 local headers (as torch writes for entries past 4 GiB).
    zin = zipfile.ZipFile(good)
    with zipfile.ZipFile(os.path.join(root, "zip64.bin"), "w") as zout:
        for info in zin.infolist():
            with zout.open(zipfile.ZipInfo(info.filename), "w", force_zip64=True) as f:
                f.write(zin.read(info.filename))
    # A ZIP64 central directory and end records (as for archives past 4 GiB or 65535 entries):
    # lowering zipfile's limits makes it write them for a small file.
    saved = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 0, 0
    try:
        rewrite_zip(good, os.path.join(root, "zip64cd.bin"), lambda n, d: (d, zipfile.ZIP_STORED))
    finally:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = saved
    # Saturate the classic end record so a reader must follow the ZIP64 one.
    path = os.path.join(root, "zip64cd.bin")
    data = bytearray(open(path, "rb").read())
    e = data.rindex(b"PK\x05\x06")
    data[e + 8:e + 20] = b"\xff\xff\xff\xff" + b"\xff\xff\xff\xff" + b"\xff\xff\xff\xff"
    open(path, "wb").write(bytes(data))
    assert zipfile.ZipFile(path).read("good/data/0") == zipfile.ZipFile(good).read("good/data/0")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "basic":
        basic(args[0])
    elif cmd == "convert":
        convert(args[0], args[1], views="--views" in args[2:])
    elif cmd == "views":
        views(args[0])
    elif cmd == "malicious":
        malicious(args[0])
    elif cmd == "bad":
        bad(args[0])
    elif cmd == "torchload":
        try:
            torch.load(args[0], weights_only=False)
        except TypeError:
            torch.load(args[0])
        import time
        time.sleep(0.5)  # Popen runs asynchronously
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
