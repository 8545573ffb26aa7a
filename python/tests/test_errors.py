"""Errors and plan problems through the Python module match the CLI: the same messages, the
MalformedInputError / ValidationError split following the CLI's exit codes 2 / 1, the same plan
problems, plan JSON and catalog listing, the same stderr report, and nothing on stderr when quiet."""

import json
import os
import shutil
import struct
import subprocess
import sys

import wmap
from wmap_test_util import TempDir, check, cli, eq, run_tests, synth

CLASS_FOR_RC = {2: wmap.MalformedInputError, 1: wmap.ValidationError}


def cli_error(stderr):
    """The message of the CLI's `wmap: error: ...` report (possibly several lines)."""
    at = stderr.rfind("wmap: error: ")
    check(at >= 0, "no 'wmap: error:' in CLI stderr:\n" + stderr)
    return stderr[at + len("wmap: error: "):].rstrip("\n")


def same_error(call, cli_args, what):
    """Python `call()` raises the class of the CLI's exit code, with the CLI's message unchanged."""
    rc, _, err = cli(*cli_args)
    check(rc in CLASS_FOR_RC, "%s: CLI exit %d" % (what, rc))
    try:
        call()
    except wmap.Error as e:
        eq(type(e), CLASS_FOR_RC[rc], what + ": exception class")
        check(isinstance(e, wmap.Error), what + ": a wmap.Error")
        eq(str(e), cli_error(err), what + ": message")
        eq(e.exit_code, rc, what + ": exit_code")
        check(isinstance(e.code, str) and e.code, what + ": code")
        return e
    raise AssertionError(what + ": no exception")


def edit_config(ck, **changes):
    p = os.path.join(ck, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(p, "w") as f:
        json.dump(cfg, f)


def drop_layer(ck, layer):
    """Removes every tensor of one decoder layer from the checkpoint's shards and index (a layer
    missing inside the checkpoint's range: the plan reports its tensors missing; a config asking
    for layers beyond the highest one is refused before planning instead)."""
    prefix = "model.layers.%d." % layer
    for name in os.listdir(ck):
        path = os.path.join(ck, name)
        if name.endswith(".safetensors"):
            with open(path, "rb") as f:
                raw = f.read()
            n = struct.unpack("<Q", raw[:8])[0]
            header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
            kept, chunks, offset = {}, [], 0
            tensors = sorted((t["data_offsets"][0], k, t) for k, t in header.items() if k != "__metadata__")
            for _, key, t in tensors:
                if key.startswith(prefix):
                    continue
                begin, end = t["data_offsets"]
                chunks.append(data[begin:end])
                kept[key] = dict(t, data_offsets=[offset, offset + end - begin])
                offset += end - begin
            if "__metadata__" in header:
                kept["__metadata__"] = header["__metadata__"]
            text = json.dumps(kept).encode()
            text += b" " * (-len(text) % 8)
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
        elif name.endswith(".index.json"):
            with open(path) as f:
                index = json.load(f)
            index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.startswith(prefix)}
            with open(path, "w") as f:
                json.dump(index, f)


def test_hierarchy():
    check(issubclass(wmap.MalformedInputError, wmap.Error), "MalformedInputError < Error")
    check(issubclass(wmap.ValidationError, wmap.Error), "ValidationError < Error")
    check(issubclass(wmap.Error, Exception), "Error < Exception")
    eq(wmap.Error.__module__, "wmap", "exception module")


def test_unusable_input():
    with TempDir() as d:
        missing = os.path.join(d, "nowhere")
        e = same_error(lambda: wmap.load(missing, quiet=True), ["load", missing], "load of a missing dir")
        eq(e.code, "NotFound", "code")
        same_error(lambda: wmap.plan(missing), ["plan", missing], "plan of a missing dir")
        same_error(lambda: wmap.inspect(missing), ["inspect", missing], "inspect of a missing dir")
        same_error(lambda: wmap.plan(), ["plan"], "plan with neither path nor catalog")

        ck = synth(os.path.join(d, "llama"), "llama")
        same_error(lambda: wmap.load(ck, tp_size=2, tp_rank=2, quiet=True),
                   ["load", ck, "--tp-size", 2, "--tp-rank", 2], "tp_rank >= tp_size")
        same_error(lambda: wmap.plan(ck, tp_size=4, ep_size=3), ["plan", ck, "--tp-size", 4, "--ep-size", 3],
                   "ep_size not dividing tp_size")
        same_error(lambda: wmap.plan(ck, tp_size=4, ep_size=2, target="vllm"),
                   ["plan", ck, "--tp-size", 4, "--ep-size", 2, "--target", "vllm"], "vllm's all-or-nothing ep_size")
        same_error(lambda: wmap.load(ck, tp_size=2, attention_dp=True, quiet=True),
                   ["load", ck, "--tp-size", 2, "--attention-dp"], "attention_dp on a dense model")
        try:
            wmap.plan(ck, target="tensorrt")
        except wmap.Error as e:
            eq(str(e), "target 'tensorrt' is not one of trtllm, vllm", "unknown target: the core's words")
        else:
            raise AssertionError("unknown target: no exception")
        same_error(lambda: wmap.load(ck, device="tpu:0", quiet=True), ["load", ck, "--device", "tpu:0"], "bad device")
        rc, _, _ = cli("load", ck, "--device", "cuda:0")
        if rc != 0:  # a build without the CUDA backend refuses it, in both
            same_error(lambda: wmap.load(ck, device="cuda:0", quiet=True), ["load", ck, "--device", "cuda:0"],
                       "cuda without the backend")

        # A malformed shard: a header length past the end of the file.
        bad = os.path.join(d, "bad-header")
        shutil.copytree(ck, bad)
        shard = sorted(f for f in os.listdir(bad) if f.endswith(".safetensors"))[0]
        with open(os.path.join(bad, shard), "r+b") as f:
            f.write(struct.pack("<Q", 1 << 20))
        e = same_error(lambda: wmap.inspect(bad), ["inspect", bad], "malformed header (inspect)")
        check(shard in str(e), "the message names the shard")
        same_error(lambda: wmap.load(bad, quiet=True), ["load", bad], "malformed header (load)")

        # A well-formed config whose architecture nothing serves: a validation failure (exit 1).
        arch = os.path.join(d, "unknown-arch")
        shutil.copytree(ck, arch)
        edit_config(arch, architectures=["NoSuchModelForCausalLM"])
        e = same_error(lambda: wmap.plan(arch), ["plan", arch], "unknown architecture")
        eq(type(e), wmap.ValidationError, "unknown architecture is a ValidationError")

    try:
        wmap.plan("x", tp_sise=2)
    except TypeError as e:
        check("tp_sise" in str(e), "names the unknown keyword")
    else:
        raise AssertionError("an unknown keyword should raise TypeError")


def test_plan_problems_as_cli():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama", "--layers", 3)
        drop_layer(ck, 1)  # layer 1 of 0..2 is not in the checkpoint
        p = wmap.plan(ck)
        check(not p.ok, "plan is not ok")
        rc, out, err = cli("plan", ck)
        eq(rc, 1, "CLI plan exit")
        lines = [l[len("wmap: "):] for l in err.splitlines()
                 if l.startswith("wmap: ") and not l.startswith(("wmap: plan ", "wmap: warning: "))]
        check(len(lines) == 9, "CLI problems: %d" % len(lines))
        eq(p.problems, lines, "problems")
        eq([k for k, _, _ in p.problem_details], ["missing"] * 9, "problem kinds")
        check("plan: %s\n" % p.coverage in out, "coverage as the CLI prints it")
        check("certificate: %s\n" % p.certificate in out, "certificate as the CLI prints it")
        eq(p.to_json(), cli("plan", ck, "--json")[1], "plan JSON")
        json.loads(p.to_json())
        # load refuses it with the CLI's message.
        e = same_error(lambda: wmap.load(ck, quiet=True), ["load", ck], "load of an incomplete plan")
        eq(type(e), wmap.ValidationError, "a ValidationError")
        # Same layouts, same problems: tp 2 rank 1.
        p2 = wmap.plan(ck, tp_size=2, tp_rank=1)
        rc, _, err2 = cli("plan", ck, "--tp-size", 2, "--tp-rank", 1)
        eq(p2.problems, [l[6:] for l in err2.splitlines() if l.startswith("wmap: ") and not l.startswith("wmap: plan ")],
           "problems at tp 1/2")


def test_plan_and_inspect_outputs():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama")
        for layout, args in (({}, []), (dict(tp_size=4, tp_rank=3), ["--tp-size", 4, "--tp-rank", 3]),
                             (dict(tp_size=4, tp_rank=1, max_read_gap=0), ["--tp-size", 4, "--tp-rank", 1,
                                                                            "--max-read-gap", 0])):
            p = wmap.plan(ck, **layout)
            check(p.ok and p.problems == [], "complete plan")
            cert = json.loads(p.to_json())["certificate"]
            check(cert["ok"] and cert["certified"] == cert["params"] > 0, "every parameter certified: %r" % cert)
            check(p.certificate.startswith("certified: every destination byte of %d parameters" % cert["params"]),
                  "the certificate's verdict: " + p.certificate)
            eq(p.to_json(), cli("plan", ck, "--json", *args, check=0)[1], "plan JSON %r" % layout)
            eq(p.architecture, "LlamaForCausalLM", "architecture")
            eq(p.plugin, "llama", "plugin")
            eq(p.num_params, len(wmap.load(ck, quiet=True, **layout)), "params")
        # max_read_gap is the plan's (its schedule and id): a read per row-parallel row at 0.
        at0, default = wmap.plan(ck, tp_size=4, max_read_gap=0), wmap.plan(ck, tp_size=4)
        eq(json.loads(at0.to_json())["schedule"]["max_read_gap"], 0, "max_read_gap in the schedule")
        check(at0.plan_id != default.plan_id, "max_read_gap changes the plan id")
        check(len(json.loads(at0.to_json())["schedule"]["units"]) > len(json.loads(default.to_json())["schedule"]["units"]),
              "no gap read through: more read units")
        for bad, kind in ((-1, wmap.Error), ("4k", TypeError)):
            try:
                wmap.plan(ck, max_read_gap=bad)
                check(False, "max_read_gap=%r accepted" % (bad,))
            except kind:
                pass
        try:
            wmap.load(default, max_read_gap=0)
            check(False, "a Plan with max_read_gap accepted")
        except TypeError as e:
            check("belongs to wmap.plan()" in str(e), str(e))
        eq(wmap.inspect(ck), json.loads(cli("inspect", ck, "--json", check=0)[1]), "inspect listing")
        # Offline: a saved catalog and the config, no weights.
        cat = os.path.join(d, "catalog.json")
        cli("inspect", ck, "--save-catalog", cat, check=0)
        cfg = os.path.join(ck, "config.json")
        p = wmap.plan(catalog=cat, config=cfg, tp_size=2, tp_rank=1)
        check(p.ok, "offline plan ok")
        eq(p.to_json(), cli("plan", "--catalog", cat, "--config", cfg, "--tp-size", 2, "--tp-rank", 1, "--json",
                            check=0)[1], "offline plan JSON")


def python_stderr(code):
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    eq(p.returncode, 0, "python subprocess exit (stderr: %s)" % p.stderr)
    return p.stderr


def test_stderr_report():
    with TempDir() as d:
        ck = synth(os.path.join(d, "llama"), "llama", "--layers", 3)
        drop_layer(ck, 1)
        code = ("import sys, wmap\n"
                "try:\n    wmap.load(%r, quiet=%s)\n"
                "except wmap.ValidationError as e:\n    sys.stderr.write('wmap: error: %%s\\n' %% e)\n")
        # Not quiet: the same report on stderr as `wmap load` (problems, verdict, then the error).
        eq(python_stderr(code % (ck, False)), cli("load", ck)[2], "stderr of a refused load")
        # Quiet: nothing but the error line this script writes itself.
        err = python_stderr(code % (ck, True))
        check(err.startswith("wmap: error: refusing to load") and err.count("\nwmap: ") == 0, "quiet stderr:\n" + err)
        good = synth(os.path.join(d, "good"), "llama")
        eq(python_stderr("import wmap; wmap.load(%r, quiet=True)" % good), "", "quiet load stderr")


if __name__ == "__main__":
    run_tests([
        ("exception classes", test_hierarchy),
        ("unusable input raises what the CLI reports", test_unusable_input),
        ("plan problems as the CLI prints them", test_plan_problems_as_cli),
        ("plan JSON, catalog listing and offline plans as the CLI", test_plan_and_inspect_outputs),
        ("stderr report as the CLI; quiet=True prints nothing", test_stderr_report),
    ])
