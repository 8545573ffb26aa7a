"""wmap.load, load_into and plan from a remote checkpoint (http:// served by nginx on 127.0.0.1,
started here): the same bytes as the numpy reference of the local files, and clear errors."""

import os
import shutil
import sys

import numpy as np

import wmap
from wmap_test_util import REFERENCE_DIR, TempDir, check, eq, reference, run_tests, synth

sys.path.insert(0, REFERENCE_DIR)
from nginx_server import Nginx  # noqa: E402

ref = reference()


def have_nginx():
    return shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")


def test_load_load_into_and_plan_over_http():
    if not have_nginx():
        print("nginx is not installed (tools/setup.sh installs it)")
        return "skip"
    with TempDir() as d:
        ck = synth(os.path.join(d, "ds"), "deepseek_v3", "--fp8")
        with Nginx(d) as server:
            url = server.url("ds/")
            for tp, rank in ((1, 0), (2, 1)):
                expected = ref.expected_summary(ck, tp, rank)
                params = wmap.load(url, tp_size=tp, tp_rank=rank, quiet=True)
                eq(sorted(params), sorted(expected), "tp %d/%d names" % (rank, tp))
                for name, (dtype, shape, data) in expected.items():
                    check(params[name].numpy().tobytes() == data, "tp %d/%d %s: bytes differ" % (rank, tp, name))
            expected = ref.expected_summary(ck, 2, 0)
            shaped = {}
            for name, (dtype, shape, data) in expected.items():
                raw = {1: np.uint8, 2: np.uint16, 4: np.uint32}[len(data) // max(1, int(np.prod(shape)))]
                shaped[name] = np.zeros(shape, raw)
            r = wmap.load_into(url, shaped, tp_size=2, tp_rank=0, quiet=True)
            eq(r["params"], len(shaped), "load_into params")
            for name, (dtype, shape, data) in expected.items():
                check(shaped[name].tobytes() == data, "load_into %s: bytes differ" % name)
            p = wmap.plan(url, tp_size=2, tp_rank=1)
            check(p.ok, "plan over http: %r" % p)
            before = len(server.entries())
            server.clear()
            wmap.plan(url, tp_size=2, tp_rank=1)
            for rng, status, nbytes, uri in server.entries():
                if uri.endswith(".safetensors"):
                    check(rng == "bytes=0-65535", "plan fetched more than a header: %s %s" % (uri, rng))
            check(before > 0, "no request reached nginx")


def test_missing_object_is_a_clear_error():
    if not have_nginx():
        print("nginx is not installed (tools/setup.sh installs it)")
        return "skip"
    with TempDir() as d:
        synth(os.path.join(d, "ll"), "llama")
        os.remove(os.path.join(d, "ll", "model-00002-of-00002.safetensors"))
        with Nginx(d) as server:
            try:
                wmap.load(server.url("ll/"), quiet=True)
                check(False, "a missing shard loaded")
            except wmap.Error as e:
                check("model-00002-of-00002.safetensors: HTTP 404" in str(e), str(e))


if __name__ == "__main__":
    run_tests([(n, f) for n, f in list(globals().items()) if n.startswith("test_")])
