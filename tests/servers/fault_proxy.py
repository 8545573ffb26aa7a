#!/usr/bin/python3
"""HTTP/1.1 reverse proxy on 127.0.0.1 that injects faults, for wmap's remote-source tests.

    fault_proxy.py UPSTREAM_URL RULES_JSON LOG_JSONL

Listens on 127.0.0.1, port 0, and prints the port as its first stdout line. Every request goes
to UPSTREAM_URL (http://127.0.0.1:PORT only) on a fresh upstream connection; the client's Host
header is passed through unchanged so SigV4 signatures (which cover it) still verify upstream.
Clients may keep their connection alive.

RULES_JSON is re-read on every request, so a test can change the rules while the proxy runs
(write a new file and rename it over the old one); nth counters restart when its text changes.
It holds a list of rules, or {"rules": [...]}; the first rule that matches a request applies:
  match:  "path_contains": "s", "method": "GET", "range_present": true|false,
          "nth": N (only the first N requests that match otherwise)
  action: "status"           -> "status": 503, "body": "..."           (upstream not asked)
          "retry_after"      -> 429 with "Retry-After: <seconds>"      (upstream not asked)
          "reset_after"      -> status, headers and "bytes" body bytes, then RST (SO_LINGER 0)
          "short_body"       -> full Content-Length but only "bytes" body bytes, then FIN
          "delay_first_byte" -> sleeps "seconds" before the first response byte
          "drop_header"      -> removes response header "header"
          "replace_etag"     -> sets the response ETag to "etag"
          "redirect"         -> 302 to "location" + the request's path    (upstream not asked)
          "trickle"          -> the body at "bytes_per_second" (a server that never quite stalls)
          "pass"             -> upstream's response as it is (with "headers" below)
  any rule: "headers": {"Name": "value"} set on the response (replacing upstream's of that name),
          e.g. the hub's X-Repo-Commit / X-Linked-Etag / X-Linked-Size
LOG_JSONL gets one line per request, written before its last response byte is sent: method,
path, headers (lowercased names), fault (the action or null), status, body_bytes (sent).
"""

import http.client
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "expect"}


class State:
    def __init__(self, upstream, rules_path, log_path):
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or url.hostname != "127.0.0.1":
            sys.exit(f"fault_proxy: upstream must be http://127.0.0.1:PORT, not {upstream}")
        self.upstream_port = url.port
        self.rules_path = rules_path
        self.log_path = log_path
        self.lock = threading.Lock()
        self.rules_text = None
        self.counts = {}

    def pick_rule(self, method, path, headers):
        """The first matching rule (counting it against its nth), or None."""
        with self.lock:
            try:
                with open(self.rules_path, encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                text = "[]"
            if text != self.rules_text:
                self.rules_text, self.counts = text, {}
            rules = json.loads(text or "[]")
            if isinstance(rules, dict):
                rules = rules.get("rules", [])
            for i, rule in enumerate(rules):
                if "path_contains" in rule and rule["path_contains"] not in path:
                    continue
                if "method" in rule and rule["method"].upper() != method:
                    continue
                if "range_present" in rule and bool(rule["range_present"]) != ("range" in headers):
                    continue
                if "nth" in rule:
                    if self.counts.get(i, 0) >= rule["nth"]:
                        continue
                    self.counts[i] = self.counts.get(i, 0) + 1
                return rule
            return None

    def log(self, entry):
        with self.lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive to the client: every response has a Content-Length
    state = None

    def log_message(self, format, *args):  # quiet: the JSONL log is the record
        pass

    def request_headers(self):
        out = {}
        for name, value in self.headers.items():
            name = name.lower()
            out[name] = f"{out[name]}, {value}" if name in out else value
        return out

    def read_request_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def forward(self, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.state.upstream_port, timeout=60)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                conn.putheader(name, value)
        if body or self.command in ("PUT", "POST"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
        conn.close()
        if self.command != "HEAD":  # HEAD keeps upstream's Content-Length, with no body
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(data))))
        return resp.status, resp.reason, headers, data

    def send(self, status, reason, headers, body, fault, entry):
        """Sends the response, cut short as `fault` says; logs it first."""
        action = fault.get("action") if fault else None
        if action == "delay_first_byte":
            time.sleep(float(fault["seconds"]))
        sent = len(body)
        if action in ("reset_after", "short_body"):
            sent = min(int(fault["bytes"]), len(body))
        if fault and fault.get("headers"):
            names = {k.lower() for k in fault["headers"]}
            headers = [(k, v) for k, v in headers if k.lower() not in names] + list(fault["headers"].items())
        entry.update(status=status, body_bytes=0 if self.command == "HEAD" else sent)
        self.state.log(entry)
        head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        self.wfile.write(head.encode("latin-1"))
        if self.command != "HEAD" and action == "trickle":
            rate = max(1, int(fault["bytes_per_second"]))
            step = max(1, rate // 10)
            try:
                for at in range(0, sent, step):
                    self.wfile.write(body[at:at + step])
                    self.wfile.flush()
                    time.sleep(step / rate)
            except OSError:  # the client gave up
                self.close_connection = True
        elif self.command != "HEAD":
            self.wfile.write(body[:sent])
        if action == "reset_after":
            # Close with SO_LINGER 0: the kernel sends RST, the client sees a receive error.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()  # drops makefile's reference so close() below really closes
            self.connection.close()
            self.close_connection = True
        elif action == "short_body":
            self.close_connection = True  # clean FIN after too few bytes

    def proxy(self):
        headers = self.request_headers()
        body = self.read_request_body()
        fault = self.state.pick_rule(self.command, self.path, headers)
        action = fault.get("action") if fault else None
        entry = {"method": self.command, "path": self.path, "headers": headers, "fault": action,
                 "request_body_bytes": len(body)}
        if action == "status":
            text = fault.get("body", f"injected {fault['status']}\n").encode()
            return self.send(int(fault["status"]), "Injected", [("Content-Type", "text/plain"),
                                                                ("Content-Length", str(len(text)))], text, None, entry)
        if action == "redirect":
            return self.send(302, "Found", [("Location", fault["location"] + self.path), ("Content-Length", "0")], b"",
                             fault, entry)
        if action == "retry_after":
            text = b"slow down\n"
            return self.send(429, "Too Many Requests", [("Retry-After", str(fault["seconds"])),
                                                        ("Content-Type", "text/plain"),
                                                        ("Content-Length", str(len(text)))], text, None, entry)
        try:
            status, reason, out_headers, data = self.forward(body)
        except OSError as e:
            text = f"fault_proxy: upstream failed: {e}\n".encode()
            return self.send(502, "Bad Gateway", [("Content-Length", str(len(text)))], text, None, entry)
        if action == "drop_header":
            out_headers = [(k, v) for k, v in out_headers if k.lower() != fault["header"].lower()]
        elif action == "replace_etag":
            out_headers = [(k, fault["etag"] if k.lower() == "etag" else v) for k, v in out_headers]
        self.send(status, reason, out_headers, data, fault, entry)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = proxy


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    Handler.state = State(*sys.argv[1:])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
