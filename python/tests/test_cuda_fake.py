"""The Python module's CUDA path through the checking fake CUDA runtime (no GPU needed): review
F1, where device="cuda" exported GPU memory as CPU memory because the module parsed the device
string a second time. The DLPack device and Tensor.device now come from the device object."""

import os
import sys

import wmap
from wmap_test_util import SKIP, TempDir, check, eq, run_tests, synth

sys.path.insert(0, os.environ.get("WMAP_FAKE_CUDA_DIR", ""))
try:
    import _wmap_fake_cuda as fake
except ImportError as e:  # a build without the test extension
    print("skipped: no _wmap_fake_cuda (%s)" % e)
    sys.exit(SKIP)

KDL_CUDA = 2


def test_every_spelling_of_cuda_exports_cuda_memory():
    fake.install(devices=2)
    try:
        with TempDir() as d:
            ck = synth(os.path.join(d, "llama"), "llama")
            for spelling, index in (("cuda", 0), ("cuda:0", 0), ("cuda:1", 1)):
                params = wmap.load(ck, device=spelling, quiet=True)
                check(params, spelling + ": parameters")
                for name, t in params.items():
                    eq(t.device, "cuda:%d" % index, "%s: %s.device" % (spelling, name))
                    eq(t.__dlpack_device__(), (KDL_CUDA, index), "%s: %s.__dlpack_device__()" % (spelling, name))
                    try:
                        t.numpy()
                    except wmap.Error as e:
                        check("needs host memory" in str(e), str(e))
                    else:
                        raise AssertionError("%s: numpy() of device memory did not refuse" % spelling)
                t = next(iter(params.values()))
                cap = t.__dlpack__(max_version=(1, 0))
                del cap  # an unconsumed capsule frees its hold
                del params
            for bad in ("gpu", "cuda:", "cuda:x", "cuda0", "cuda:-1"):
                try:
                    wmap.load(ck, device=bad, quiet=True)
                except wmap.MalformedInputError as e:
                    eq(str(e), "device '%s': expected host, cuda or cuda:N" % bad, "a bad device names the setting")
                else:
                    raise AssertionError("device=%r accepted" % bad)
            try:
                wmap.load(ck, device="cuda:2", quiet=True)
            except wmap.Error as e:
                check("device cuda:2: device 2 of 2 does not exist" in str(e), str(e))
            else:
                raise AssertionError("cuda:2 of 2 accepted")
        check(fake.async_copies() > 0, "the loads went through the fake runtime")
        eq(fake.violations(), [], "the fake saw no misuse")
    finally:
        fake.uninstall()


def test_digests_on_cuda_equal_the_host_load():
    """load(digests=True) on the fake GPU: each parameter copied back and hashed on the host; the
    same XXH3-64 as the host load, NVFP4's host-converted scales included."""
    fake.install(devices=1)
    try:
        with TempDir() as d:
            for family, flags in (("llama", ()), ("qwen3_moe", ("--nvfp4",))):
                ck = synth(os.path.join(d, family), family, *flags)
                host = {n: t.digest for n, t in wmap.load(ck, digests=True, quiet=True).items()}
                gpu = {n: t.digest for n, t in wmap.load(ck, device="cuda", digests=True, quiet=True).items()}
                eq(gpu, host, family + ": digests on cuda vs host")
                check(all(v and len(v) == 16 for v in host.values()), family + ": 16 hex digits each")
        eq(fake.violations(), [], "the fake saw no misuse")
    finally:
        fake.uninstall()


if __name__ == "__main__":
    run_tests([("device='cuda' and 'cuda:N' export CUDA memory (fake runtime)", test_every_spelling_of_cuda_exports_cuda_memory),
               ("digests=True on the fake GPU equal the host load's", test_digests_on_cuda_equal_the_host_load)])
