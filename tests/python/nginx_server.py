"""nginx on 127.0.0.1 for the Python-side remote tests and bench/remote_bench.py (the C++ tests
have tests/remote/remote_servers.h): an ephemeral port, a private prefix, an access log with each
request's Range. Stdlib only; nginx from tools/setup.sh."""

import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving `root` on 127.0.0.1, logging "range status bytes path" per request."""

    def __init__(self, root, work=None):
        self.own_work = work is None
        work = work or tempfile.mkdtemp(prefix="wmap-nginx.")
        self.work = work
        self.port = free_port()
        self.log = os.path.join(work, "access.log")
        temps = "".join(f'  {t}_temp_path "{work}/{t}";\n' for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = (f'daemon off;\nmaster_process off;\nworker_processes 1;\npid "{work}/nginx.pid";\n'
                f'error_log "{work}/error.log" warn;\nevents {{ worker_connections 1024; }}\nhttp {{\n'
                f"  log_format ranges '$http_range $status $body_bytes_sent $uri';\n"
                f'  access_log "{self.log}" ranges;\n{temps}  sendfile on;\n  keepalive_timeout 60;\n'
                f'  keepalive_requests 100000;\n'
                f'  server {{\n    listen 127.0.0.1:{self.port};\n    root "{root}";\n    etag on;\n  }}\n}}\n')
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx.conf"), "-e",
                                      os.path.join(work, "error.log")], stderr=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.01)
        raise SystemExit("nginx did not start")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def entries(self):
        """(range, status, bytes, uri) of each request since the last clear()."""
        out = []
        with open(self.log) as f:
            for line in f:
                rng, status, nbytes, uri = line.split(" ", 3)
                out.append((rng, int(status), int(nbytes), uri.strip()))
        return out

    def clear(self):
        open(self.log, "w").close()
        os.kill(self.proc.pid, 10)  # SIGUSR1: reopen the log

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        if self.own_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


