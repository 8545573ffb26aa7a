"""wmap.load, load_into and plan from a remote checkpoint (http:// served by nginx on 127.0.0.1,
started here): the same bytes as the numpy reference of the local files, and clear errors."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

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


SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def publish(src_dir, dst_dir):
    """dst_dir's files replaced by src_dir's (write, then rename), a second after the last change:
    nginx's ETag holds the mtime in seconds."""
    time.sleep(1.1)
    for f in os.listdir(src_dir):
        shutil.copyfile(os.path.join(src_dir, f), os.path.join(dst_dir, f + ".tmp"))
        os.replace(os.path.join(dst_dir, f + ".tmp"), os.path.join(dst_dir, f))


def same_bytes(params, expected, what):
    eq(sorted(params), sorted(expected), what + ": names")
    for name, (_, _, data) in expected.items():
        check(params[name].numpy().tobytes() == data, "%s: %s differs" % (what, name))


def test_a_changed_remote_checkpoint_reloads_in_the_same_process():
    """Review F2: remote metadata outlived its objects (a cached load returned the old weights with
    no request; an uncached one failed with HTTP 412 until the process restarted)."""
    if not have_nginx():
        return "skip"
    with TempDir() as d:
        ck = synth(os.path.join(d, "ll"), "llama", "--seed", "1")
        v1 = synth(os.path.join(d, "v1"), "llama", "--seed", "1")
        v2 = synth(os.path.join(d, "v2"), "llama", "--seed", "2")
        with Nginx(d) as server:
            url = server.url("ll/")
            wmap.cache_clear()
            first = wmap.load(url, cache=True, quiet=True)
            same_bytes(first, ref.expected_summary(v1, 1, 0), "step 1")
            publish(v2, ck)
            server.clear()
            cached = wmap.load(url, cache=True, quiet=True)
            same_bytes(cached, ref.expected_summary(v2, 1, 0), "step 2, cache=True")
            eq(cached.report["cache"], "miss", "a changed checkpoint misses the cache")
            check(len(server.entries()) > 0, "the changed checkpoint was not asked for")
            same_bytes(wmap.load(url, quiet=True), ref.expected_summary(v2, 1, 0), "step 2, no cache")
            # A plan reused after the remote shards changed is refused; refresh() re-plans them.
            plan = wmap.plan(url, tp_size=2, tp_rank=1, quiet=True)
            expected = ref.expected_summary(v1, 2, 1)
            dests = {n: np.zeros(shape, {1: np.uint8, 2: np.uint16, 4: np.uint32}[len(data) // max(1, int(np.prod(shape)))])
                     for n, (_, shape, data) in expected.items()}
            wmap.load_into(plan, dests, quiet=True)
            publish(v1, ck)
            try:
                wmap.load_into(plan, dests, quiet=True)
                raise AssertionError("load_into(plan) read remote shards that changed since the plan")
            except wmap.ValidationError as e:
                check("changed since it was planned" in str(e) and "model-0000" in str(e), str(e))
            wmap.load_into(plan.refresh(), dests, quiet=True)
            for name, (_, _, data) in expected.items():
                check(dests[name].tobytes() == data, "after refresh(): %s differs" % name)


def start_fault_proxy(upstream, rules, work):
    with open(os.path.join(work, "rules.json"), "w") as f:
        json.dump(rules, f)
    proc = subprocess.Popen([sys.executable, os.path.join(SOURCE_DIR, "tests", "servers", "fault_proxy.py"), upstream,
                             os.path.join(work, "rules.json"), os.path.join(work, "log.jsonl")],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    return proc, "http://127.0.0.1:%d" % port


def test_ctrl_c_ends_a_stalled_remote_load():
    """Review F5: a load from a server that stalls ran on the calling thread with the GIL released,
    so SIGINT was seen only when it returned (40 s and more)."""
    if not have_nginx():
        return "skip"
    with TempDir() as d:
        synth(os.path.join(d, "ll"), "llama")
        with Nginx(d) as server:
            # The shards' probes pass; every data request waits ten minutes before its first byte.
            proxy, url = start_fault_proxy(
                server.url("").rstrip("/"),
                [{"path_contains": "-of-", "nth": 2, "action": "pass"},
                 {"path_contains": "-of-", "action": "delay_first_byte", "seconds": 600}], d)
            try:
                env = dict(os.environ, WMAP_REMOTE_TIMEOUT="300")
                child = subprocess.Popen([sys.executable, "-c", "import wmap; wmap.load(%r, quiet=True)" % (url + "/ll/")],
                                         env=env, stderr=subprocess.PIPE, text=True)
                log = os.path.join(d, "log.jsonl")
                deadline = time.time() + 20
                while time.time() < deadline:  # until a data request is held
                    if os.path.exists(log) and sum(1 for line in open(log) if "-of-" in line) >= 2:
                        break
                    time.sleep(0.05)
                time.sleep(0.5)
                if child.poll() is not None:
                    raise AssertionError("the load ended before it stalled: %s" % child.stderr.read())
                t0 = time.time()
                child.send_signal(signal.SIGINT)
                try:
                    _, err = child.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    raise AssertionError("still running 10 s after SIGINT")
                took = time.time() - t0
                check(child.returncode != 0 and "KeyboardInterrupt" in err, "exit %d: %s" % (child.returncode, err))
                check(took < 3, "ended %.1f s after SIGINT" % took)
            finally:
                proxy.kill()
                proxy.wait()


if __name__ == "__main__":
    run_tests([(n, f) for n, f in list(globals().items()) if n.startswith("test_")])
