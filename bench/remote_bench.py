#!/usr/bin/python3
"""Remote checkpoints over loopback: wmap against the same load from local files and against curl.

Starts nginx on 127.0.0.1 (an ephemeral port, its access log recording each request's Range)
serving a page-cached synthetic llama checkpoint (--preset, default 1g) and DeepSeek-R1's real
layout as sparse files (163 shards, tests/python/sparse_layout.py), then reports, in one run:

  local      `wmap -q load DIR --json` (TP1, host), whole process, best of --runs
  http       the same load from http://127.0.0.1:PORT/DIR/: goal >= 0.8x local's speed (issue 42)
  curl       `curl --parallel --parallel-max C` fetching the byte ranges wmap's http load asked
             for (read from nginx's log; checked against its log of curl's own requests) to /dev/null, whole process: goal wmap >= 1.0x curl
  TCP        one loopback TCP stream between two threads (no HTTP, no file): the wire's limit
  r1 plan    `wmap plan http://.../r1/ --tp-size 8 --ep-size 8 --tp-rank R`: goal < 1 s with every
             header fetched; requests and bytes fetched, and the bytes the plan reads per rank
             against the bytes the rank keeps (goal: within 5%, plus headers)
  exchange   `mpirun -np 4 wmap load http://... --tp-size 4 --io-policy exchange` on the llama
             checkpoint: the job's bytes fetched (every rank's "remote" bytes) against the union
             of the ranks' needs (goal 1.0x, plus each rank's header probes)

Ratios are what matters on a shared machine. Stdlib only; needs nginx and curl (tools/setup.sh).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import socket
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from nginx_server import Nginx  # noqa: E402


def run(cmd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return dt, p.stdout


def loopback_tcp_limit(nbytes=1 << 30):
    """GB/s of one TCP stream over 127.0.0.1 between two threads (sendall / recv_into of 1 MiB):
    what any HTTP transfer on this machine is bounded by, before HTTP or files."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def send():
        c, _ = srv.accept()
        m = memoryview(bytes(1 << 20))
        sent = 0
        while sent < nbytes:
            c.sendall(m)
            sent += len(m)
        c.close()

    t = threading.Thread(target=send)
    t.start()
    cl = socket.create_connection(srv.getsockname())
    buf = memoryview(bytearray(1 << 20))
    got = 0
    t0 = time.perf_counter()
    while True:
        n = cl.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.perf_counter() - t0
    t.join()
    cl.close()
    srv.close()
    return got / dt / 1e9


def warm(path):
    for dirpath, _, names in os.walk(path):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                while f.read(1 << 24):
                    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wmap", default=os.path.join(ROOT, "build", "bin", "wmap"))
    ap.add_argument("--preset", default="1g")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4, help="ranks of the exchange run")
    ap.add_argument("--keep", help="folder to keep the checkpoints in (reused when there)")
    args = ap.parse_args()
    wmap = args.wmap
    base = args.keep or tempfile.mkdtemp(prefix="wmap-remote-bench.")
    os.makedirs(base, exist_ok=True)
    ck = os.path.join(base, "llama")
    if not os.path.exists(os.path.join(ck, "config.json")):
        run([wmap, "-q", "synth", "llama", ck, "--preset", args.preset])
    r1 = os.path.join(base, "r1")
    if not os.path.exists(os.path.join(r1, "config.json")):
        run([PYTHON, os.path.join(ROOT, "tests/python/sparse_layout.py"),
             os.path.join(ROOT, "tests/data/layouts/deepseek-r1"), r1])
    work = tempfile.mkdtemp(prefix="wmap-nginx.")
    nginx = Nginx(base, work)
    try:
        warm(ck)
        size = sum(os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck))
        url = nginx.url("llama/")
        local_t = min(run([wmap, "-q", "load", ck, "--json"])[0] for _ in range(args.runs))
        http_runs = []
        for _ in range(args.runs):
            nginx.clear()
            dt, out = run([wmap, "-q", "load", url, "--json"])
            http_runs.append((dt, json.loads(out[out.index("{"):]), nginx.entries()))
        http_t, http_json, entries = min(http_runs, key=lambda r: r[0])
        # The same ranges with curl, as many in flight as wmap keeps (its read workers).
        conc = http_json["read_workers"]["effective"]
        cfg = os.path.join(work, "curl.cfg")
        with open(cfg, "w") as f:
            # One option group per transfer: `next` ends a group, so each URL keeps its own range
            # (without it, `range` is one option for the whole command and the last one wins).
            for i, (rng, status, nbytes, uri) in enumerate(entries):
                if i:
                    f.write("next\n")
                f.write(f'url = "{nginx.url(uri.lstrip("/"))}"\noutput = "/dev/null"\nsilent\nshow-error\n')
                if rng != "-":
                    f.write(f'range = "{rng.split("=", 1)[1]}"\n')
        fetched = sum(e[2] for e in entries)
        curl_runs = []
        for _ in range(args.runs):
            nginx.clear()
            curl_runs.append(run(["curl", "--parallel", "--parallel-max", str(conc), "-K", cfg])[0])
            # The same work: curl must have asked for exactly the ranges (and bytes) wmap did.
            got = nginx.entries()
            if sorted((e[0], e[3]) for e in got) != sorted((e[0], e[3]) for e in entries) or \
                    sum(e[2] for e in got) != fetched:
                raise SystemExit(f"curl did not fetch wmap's ranges: {len(got)} requests, "
                                 f"{sum(e[2] for e in got)} bytes against {len(entries)} and {fetched}")
        curl_t = min(curl_runs)
        print(f"checkpoint: llama --preset {args.preset}, {size / 1e9:.2f} GB, page cache warm; nginx on 127.0.0.1")
        print(f"  local load   {local_t:.3f} s  {size / local_t / 1e9:.2f} GB/s")
        print(f"  http load    {http_t:.3f} s  {size / http_t / 1e9:.2f} GB/s   {len(entries)} requests, "
              f"{fetched / 1e6:.1f} MB fetched, {http_json['remote']['retries']} retries, {conc} read workers")
        print(f"  curl         {curl_t:.3f} s  (--parallel-max {conc}, the same {len(entries)} ranges)")
        tcp = max(loopback_tcp_limit() for _ in range(args.runs))
        print(f"  loopback TCP {tcp:.2f} GB/s  (one stream between two threads, no HTTP, no file: the wire's limit here)")
        print(f"  http / local {local_t / http_t:.2f}x (goal >= 0.8)   http / curl {curl_t / http_t:.2f}x (goal >= 1.0)   "
              f"http / loopback TCP {size / http_t / 1e9 / tcp:.2f}x")

        # DeepSeek-R1 over HTTP: plan time with every header fetched; bytes per rank.
        for rank in (0, 3):
            cmd = [wmap, "-q", "plan", nginx.url("r1/"), "--tp-size", "8", "--ep-size", "8", "--tp-rank", str(rank),
                   "--json"]
            runs = []
            for _ in range(args.runs):
                nginx.clear()
                dt, out = run(cmd)
                runs.append((dt, out, nginx.entries()))
            dt, out, ent = min(runs, key=lambda r: r[0])
            plan = json.loads(out)
            units = plan["schedule"]["units"]
            keep, read = plan["bytes_to_load"], plan["bytes_to_read"]
            headers = sum(e[2] for e in ent)
            print(f"r1 plan rank {rank}/8 (EP8) over http: {dt:.3f} s (goal < 1 s); {len(ent)} requests, "
                  f"{headers / 1e6:.1f} MB of headers; a load would make {len(units)} data requests for "
                  f"{read / 1e9:.2f} GB against {keep / 1e9:.2f} GB kept: {(read + headers) / keep:.4f}x")

        # Exchange: each byte once per job.
        if shutil.which("mpirun"):
            nginx.clear()
            outdir = os.path.join(work, "mpi-out")  # one file per rank: a shared pipe interleaves lines
            dt, _ = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--output-filename", outdir, "-np",
                         str(args.ranks), wmap, "-q", "load", url, "--tp-size", str(args.ranks), "--io-policy",
                         "exchange", "--json"])
            lines = []
            for dirpath, _, names in os.walk(outdir):
                if "stdout" in names:
                    with open(os.path.join(dirpath, "stdout")) as f:
                        lines += [json.loads(l) for l in f if l.startswith("{")]
            job = sum(j["remote"]["bytes"] for j in lines)
            union = lines[0]["union_bytes"]
            needed = sum(j["needed_bytes"] for j in lines)
            served = sum(e[2] for e in nginx.entries())
            print(f"exchange, {args.ranks} ranks over http: job fetched {job / 1e6:.1f} MB (nginx sent "
                  f"{served / 1e6:.1f} MB) for a union of {union / 1e6:.1f} MB needed ({needed / 1e6:.1f} MB summed "
                  f"over ranks): {job / union:.3f}x the union, in {dt:.2f} s")
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
