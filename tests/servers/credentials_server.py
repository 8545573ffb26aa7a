#!/usr/bin/python3
"""The three AWS credential services a process on AWS asks, on 127.0.0.1, for wmap's tests.

    credentials_server.py CONFIG_JSON LOG_JSONL

Listens on 127.0.0.1, port 0, and prints the port as its first stdout line. CONFIG_JSON:
  {"access_key": "...", "secret_key": "...", "session_token": "...",   # what every service hands out
   "expiration": "2030-01-01T00:00:00Z",
   "web_identity_token": "...", "role_arn": "arn:aws:iam::1:role/r",   # STS checks both
   "container_token": "...",                                           # the ECS endpoint's Authorization
   "imds_role": "wmap-role"}

Served, as AWS documents them (each answer is what a real service sends, trimmed to what a
client reads):
  STS      POST / (form body) or GET /?..., Action=AssumeRoleWithWebIdentity, Version=2011-06-15,
           RoleArn, RoleSessionName, WebIdentityToken: the XML AssumeRoleWithWebIdentityResponse;
           a wrong token or role is 400/403 with an <Error><Code> body, as STS answers.
  ECS      GET /ecs/credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI): needs Authorization equal to
           container_token; JSON {AccessKeyId, SecretAccessKey, Token, Expiration}.
  IMDSv2   PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds -> a session token;
           GET /latest/meta-data/iam/security-credentials/ and .../<role> with
           X-aws-ec2-metadata-token (401 without it) -> the role name, then the JSON (Code "Success").
LOG_JSONL gets one line per request: method, path, headers (lowercased names), body, status.
"""

import http.server
import json
import sys
import urllib.parse

IMDS_TOKEN = "imds-session-token-7"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    config = {}
    log_path = ""

    def log_message(self, format, *args):
        pass

    def reply(self, status, body, content_type="text/plain", request_body=""):
        data = body.encode()
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "headers": {k.lower(): v for k, v in self.headers.items()},
                                "body": request_body, "status": status}) + "\n")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def credentials_json(self):
        c = self.config
        return json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": c["access_key"],
                           "SecretAccessKey": c["secret_key"], "Token": c["session_token"],
                           "Expiration": c.get("expiration", "2030-01-01T00:00:00Z")})

    def sts(self, params, body):
        c = self.config

        def error(status, code, message):
            return self.reply(status, "<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message>"
                              "</Error></ErrorResponse>" % (code, message), "text/xml", body)

        if params.get("Action") != "AssumeRoleWithWebIdentity" or params.get("Version") != "2011-06-15":
            return error(400, "InvalidAction", "unsupported action")
        if params.get("WebIdentityToken") != c.get("web_identity_token"):
            return error(400, "InvalidIdentityToken", "the token is not valid")
        if params.get("RoleArn") != c.get("role_arn"):
            return error(403, "AccessDenied", "not authorized to perform sts:AssumeRoleWithWebIdentity")
        if not params.get("RoleSessionName"):
            return error(400, "ValidationError", "RoleSessionName is required")
        xml = ("<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
               "<AssumeRoleWithWebIdentityResult><Credentials>"
               "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken>"
               "<Expiration>%s</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
               "</AssumeRoleWithWebIdentityResponse>" % (c["access_key"], c["secret_key"], c["session_token"],
                                                         c.get("expiration", "2030-01-01T00:00:00Z")))
        return self.reply(200, xml, "text/xml", body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length", 0) or 0)
        body = self.rfile.read(length).decode() if length else ""
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/" and self.command in ("GET", "POST"):
            params = dict(urllib.parse.parse_qsl(url.query))
            params.update(urllib.parse.parse_qsl(body))
            return self.sts(params, body)
        if url.path == "/ecs/credentials" and self.command == "GET":
            if self.headers.get("Authorization") != self.config.get("container_token"):
                return self.reply(401, "unauthorized", request_body=body)
            return self.reply(200, self.credentials_json(), "application/json", body)
        if url.path == "/latest/api/token" and self.command == "PUT":
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.reply(400, "missing ttl", request_body=body)
            return self.reply(200, IMDS_TOKEN, request_body=body)
        if url.path.startswith("/latest/meta-data/iam/security-credentials/") and self.command == "GET":
            if self.headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
                return self.reply(401, "", request_body=body)
            role = url.path[len("/latest/meta-data/iam/security-credentials/"):]
            if not role:
                return self.reply(200, self.config.get("imds_role", "wmap-role"), request_body=body)
            if role != self.config.get("imds_role", "wmap-role"):
                return self.reply(404, "", request_body=body)
            return self.reply(200, self.credentials_json(), "text/plain", body)
        return self.reply(404, "not found", request_body=body)

    do_GET = do_PUT = do_POST = handle_any


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        Handler.config = json.load(f)
    Handler.log_path = sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
