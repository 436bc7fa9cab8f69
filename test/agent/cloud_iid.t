#!/usr/bin/python3
"""cloud_iid.t: cloud machines join through the gateway on their cloud's word.

A metadata stand-in on 127.0.0.1 (Python http.server) serves what AWS's
IMDSv2, GCP's and Azure's metadata services serve, signed by local
stand-ins for the clouds' keys (test/lib/cloudfix.py): AWS only after the
PUT of a session token and with it; GCP the identity token for the audience
asked (it signs what bcd asked for, so the CSR binding is bcd's doing);
Azure the attested document for the nonce asked.  bcd run --once
--attestor cloud-iid --cloud aws|gcp|azure --metadata-url joins each through
the real gateway; the same instance with a wiped state directory is refused
(exit 2, cloud-iid:already-admitted) until bc_join.reset_cloud_instance, then
comes back as the same node; a cloud an operator registered in SQL only
(acmecloud: Azure's document format with its own root, domain and member
names, test/lib/cloudfix.py) joins with --cloud acmecloud --cloud-protocol
azure, and without --cloud-protocol or --metadata-url bcd says what is
missing; a --metadata-url to another host or over https is refused (the metadata mode of core/transport.c is plain HTTP to the
metadata service's own address only); usage errors are legible.
"""
import base64
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import agentlib  # noqa: E402
import cloudfix  # noqa: E402


class Metadata(ThreadingHTTPServer):
    daemon_threads = True


def stand_in(cl):
    """The metadata stand-in: one server, the three clouds' paths."""
    aws_doc = cl.aws_document(instance="i-0aaaaaaaaaaaaaaa1")
    aws_rsa = cl.aws_rsa2048(cl.aws_pkcs7(aws_doc))
    seen = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def send(self, code, body, ctype="text/plain"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self):
            seen.append(("PUT", self.path, dict(self.headers)))
            if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.send(200, b"imds-session-token")
            self.send(403, b"")

        def do_GET(self):
            seen.append(("GET", self.path, dict(self.headers)))
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            if u.path.startswith("/latest/"):
                if self.headers.get("X-aws-ec2-metadata-token") != "imds-session-token":
                    return self.send(401, b"")
                if u.path == "/latest/dynamic/instance-identity/document":
                    return self.send(200, aws_doc, "application/json")
                if u.path == "/latest/dynamic/instance-identity/rsa2048":
                    return self.send(200, aws_rsa)
            if u.path == "/computeMetadata/v1/instance/service-accounts/default/identity":
                if (self.headers.get("Metadata-Flavor") != "Google" or q.get("format") != ["full"]
                        or q.get("licenses") != ["FALSE"] or "audience" not in q):
                    return self.send(400, b"")
                aud = q["audience"][0]
                csr = aud.split("#", 1)[1] if "#" in aud else ""
                return self.send(200, cl.gcp_token(csr, aud=aud, instance="7777777777777777777").encode())
            if u.path == "/metadata/attested/document":
                if self.headers.get("Metadata") != "true" or q.get("api-version") != ["2025-04-07"]:
                    return self.send(400, b"")
                content = cl.azure_content(q.get("nonce", [""])[0], vm="11111111-2222-4333-8444-555555555555")
                return self.send(200, cl.azure_answer(cl.azure_pkcs7(content)).encode(), "application/json")
            self.send(404, b"")

    srv = Metadata(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1], seen


def acme_stand_in(cl):
    """acmecloud's metadata service: Azure's protocol, acmecloud's own document and signer."""
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            if u.path != "/metadata/attested/document" or self.headers.get("Metadata") != "true":
                body = b""
                self.send_response(404)
            else:
                content = cl.acmecloud_content(q.get("nonce", [""])[0], machine="m-agent-1")
                body = json.dumps({"encoding": "pkcs7", "signature": base64.b64encode(
                    cl.azure_pkcs7(content, signer="acsigner", bag=("acsigner",))).decode()}).encode()
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = Metadata(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1]


def body(tap, env):
    """The script."""
    cl = cloudfix.Clouds(os.path.join(env.dir, "clouds"))
    db = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], dbname=env.db,
                          user=env.pgenv.get("PGUSER", "postgres"))
    db.autocommit = True
    cl.configure(db.cursor(), env.tenant, env.pool)
    srv, url, seen = stand_in(cl)
    last_refusal = lambda: env.psql("SELECT payload->>'refusal' FROM bc_join.events "
                                    "WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")
    cloud = {"aws": ["--cloud", "aws"], "gcp": ["--cloud", "gcp", "--cloud-audience", cloudfix.GCP_AUDIENCE],
             "azure": ["--cloud", "azure"]}
    nodes = {}
    try:
        for prov in ("aws", "gcp", "azure"):
            state = os.path.join(env.dir, "state-" + prov)
            tok = env.token_file(prov) if prov == "aws" else None
            t0 = time.time()
            r = env.bcd("run", *env.run_args(state, token_file=tok, extra=[
                "--attestor", "cloud-iid", *cloud[prov], "--metadata-url", url, "--once"]))
            node = r.stdout.splitlines()[0].rsplit("/", 1)[-1] if r.returncode == 0 else ""
            tap.ok(r.returncode == 0 and node.startswith("node_"),
                   "%s: bcd run --attestor cloud-iid --cloud %s joins through the gateway (%.1f s)"
                   % (prov, prov, time.time() - t0), r.stdout + r.stderr)
            nodes[prov] = node
            tap.eq(env.psql("SELECT payload->'detail'->>'provider' FROM bc_join.events "
                            "WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1"), prov,
                   "%s: node.joined names the provider" % prov)
        tap.ok(any(m == "PUT" and p == "/latest/api/token" for m, p, h in seen),
               "aws: IMDSv2, a session token first")
        gq = [p for m, p, h in seen if p.startswith("/computeMetadata/")]
        tap.ok(gq and "audience=" + urllib.parse.quote(cloudfix.GCP_AUDIENCE, safe="") + "%23" in gq[0],
               "gcp: the audience asked is <audience>#<csrSha256>, percent-encoded", gq)

        # -- the same instance, its state wiped: refused, until an operator resets it
        st = os.path.join(env.dir, "state-gcp-again")
        r = env.bcd("run", *env.run_args(st, extra=["--attestor", "cloud-iid", *cloud["gcp"],
                                                    "--metadata-url", url, "--once"]))
        tap.eq(r.returncode, 2, "gcp: the same instance with a new key is refused (exit 2)", r.stderr)
        tap.eq(last_refusal(), "cloud-iid:already-admitted", "recorded as cloud-iid:already-admitted")
        detail = json.loads(env.psql("SELECT payload->'detail' FROM bc_join.events "
                                     "WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1"))
        tap.eq(env.psql("SELECT bc_join.reset_cloud_instance('%s', '%s', '%s')"
                        % (detail["provider"], detail["account"], detail["instance"])), "t",
               "the operator resets the instance the event names")
        st2 = os.path.join(env.dir, "state-gcp-reset")
        r = env.bcd("run", *env.run_args(st2, extra=["--attestor", "cloud-iid", *cloud["gcp"],
                                                     "--metadata-url", url, "--once"]))
        tap.ok(r.returncode == 0 and r.stdout.splitlines()[0].endswith("/node/" + nodes["gcp"]),
               "gcp: after the reset it comes back as the same node", r.stdout + r.stderr)
        tap.eq(env.psql("SELECT count(*) FROM bc_join.nodes"), "3", "three nodes, no second one for the reset")

        # -- aws: the same instance again, with a join token of its own
        r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-aws-2"), token_file=env.token_file("aws2"), extra=[
            "--attestor", "cloud-iid", "--cloud", "aws", "--metadata-url", url, "--once"]))
        tap.ok(r.returncode == 2 and last_refusal() == "cloud-iid:already-admitted",
               "aws: the same instance again is refused too", r.stderr)

        # -- a fourth cloud, registered in SQL only, joined by bcd run with its protocol named
        cl.acmecloud_register(db.cursor())
        db.cursor().execute("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) "
                            "VALUES ('acmecloud', 'tenancy-7', %s, %s)", (env.tenant, env.pool))
        asrv, aurl = acme_stand_in(cl)
        try:
            acme = ["--attestor", "cloud-iid", "--cloud", "acmecloud", "--once"]
            u = env.bcd("run", *env.run_args(os.path.join(env.dir, "acme-u1"), extra=acme + ["--metadata-url", aurl]))
            tap.ok(u.returncode == 64 and "--cloud-protocol" in u.stderr,
                   "a registered cloud without --cloud-protocol: bcd says it needs one (exit 64)", u.stderr)
            u = env.bcd("run", *env.run_args(os.path.join(env.dir, "acme-u2"), extra=acme + ["--cloud-protocol", "azure"]))
            tap.ok(u.returncode == 64 and "--metadata-url" in u.stderr,
                   "and without --metadata-url: it needs that too (exit 64)", u.stderr)
            r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-acme"), extra=acme + [
                "--cloud-protocol", "azure", "--metadata-url", aurl]))
            tap.ok(r.returncode == 0 and "/node/node_" in r.stdout,
                   "acmecloud: bcd run --cloud acmecloud --cloud-protocol azure joins through the gateway",
                   r.stdout + r.stderr)
            tap.eq(env.psql("SELECT payload->'detail'->>'provider' || ' ' || (payload->'detail'->>'instance') "
                            "FROM bc_join.events WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1"),
                   "acmecloud m-agent-1", "node.joined names the registered provider and its instance")
        finally:
            asrv.shutdown()

        # -- plain HTTP, unpinned, only to the metadata service's own address (or the loopback)
        n_seen = len(seen)
        for other in (url.replace("127.0.0.1", "192.0.2.1"), url.replace("127.0.0.1", "127.0.0.1.example"),
                      url.replace("http://", "https://")):
            r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-other"), extra=[
                "--attestor", "cloud-iid", *cloud["azure"], "--metadata-url", other, "--once"]))
            tap.ok(r.returncode != 0 and "only http:// to 169.254.169.254" in r.stderr,
                   "--metadata-url %s is refused: plain HTTP to the metadata service only" % other, r.stderr)
        tap.eq(len(seen), n_seen, "nothing was asked of those")

        # -- usage
        u = env.bcd("run", *env.run_args(os.path.join(env.dir, "u1"), extra=["--attestor", "cloud-iid", "--once"]))
        tap.ok(u.returncode == 64 and "--cloud" in u.stderr, "cloud-iid without --cloud is a usage error", u.stderr)
        u = env.bcd("run", *env.run_args(os.path.join(env.dir, "u2"), extra=[
            "--attestor", "cloud-iid", "--cloud", "gcp", "--once"]))
        tap.ok(u.returncode == 64 and "--cloud-audience" in u.stderr, "gcp without --cloud-audience too", u.stderr)
        u = env.bcd("run", *env.run_args(os.path.join(env.dir, "u3"), extra=["--cloud", "aws", "--once"]))
        tap.ok(u.returncode == 64 and "cloud-iid" in u.stderr, "--cloud with another attestor too", u.stderr)
    finally:
        srv.shutdown()
        db.close()


agentlib.main(body)
