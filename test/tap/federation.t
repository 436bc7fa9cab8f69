#!/usr/bin/python3
"""federation.t: two trust domains on one machine federate with each other
(#46 federation), and the database refuses what it must.

Two clusters (tools/pg-throwaway, domains A and B, each its own key
directory), two real gateways whose TLS certificate comes from a test web
CA, and bc-join-federate --once (the ASan build when there is one) as a
login role of bc_join_federation.  Shows:
- https_web: A federates with B's GET /v1/spiffe-bundle and B with A's; the
  bundle the database stored is the peer's spiffe_bundle(); without --ca-file
  (the system's roots) and by a host name the certificate does not name the
  fetch fails, recorded in last_error and federation.fetch.failed.
- GET /v1/trust-bundles of A's gateway: {keys: [JWS]}, one per signing key,
  each verified with the signing key of A's service keys (jwcrypto), payload
  {trustDomain, issuedAt, bundles: {"spiffe://B": B's bundle}}; B's key does
  not verify it.
- Hostile bundles served by `openssl s_server -HTTP` (a real HTTPS server):
  a lower sequence, the same sequence with other content, a sequence of
  2^63-1, two certificates in x5c, a certificate that is no CA, a
  certificate of another key, 65 keys, a body over 256 KiB, a bundle that takes
  every domain's bundles over 64000 bytes in all (the signed document agents take
  would pass no bound on its way), a redirect to http:// are each refused: the old bundle kept, last_error set, event
  federation.bundle.refused (or federation.fetch.failed for the redirect);
  a redirect to https:// is followed; a hint of 0 is clamped to 60 s; an
  empty key set is stored (the domain wholly distrusted); add_federation
  refuses an http:// URL and userinfo.
- https_spiffe: an s_server with an X509-SVID issued by B's node CA is
  accepted with its SPIFFE ID (serving another domain's bundle, and
  self-serving B's own, bootstrapped by the operator's copy); refused with
  another ID, and an s_server with a Web-PKI certificate is refused.
- D3: B's own spiffe_sequence is the one the database gave its keys: the
  same keys in another directory whose mtimes differ (an HA node) publish
  the same sequence, a new jwt-svid key a higher one, the old keys theirs.
- bc_join_federation may call federation_due() (and store_fetched_bundle),
  not read the table, add, remove or set a domain, or change a URL.
- pg_dump keeps the federation's rows.
Wall time: see the report in the commit (target <= 20 s).
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, ClusterEnv, Tap, free_port, wait_port  # noqa: E402

from jwcrypto import jwk, jws  # noqa: E402

TD_A = "a.fed.bc-join.test"
TD_B = "b.fed.bc-join.test"
GATEWAY = os.environ.get("BCJ_GATEWAY", os.path.join(TOP, "build/bc-gateway"))
# the ASan + UBSan build when there is one (make build/asan/bc-join-federate)
FEDERATE = os.environ.get("BCJ_FEDERATE") or (
    os.path.join(TOP, "build/asan/bc-join-federate") if os.path.exists(os.path.join(TOP, "build/asan/bc-join-federate"))
    else os.path.join(TOP, "build/bc-join-federate"))


def openssl(*args, cwd=None):
    subprocess.run(["openssl"] + list(args), check=True, cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Domain(ClusterEnv):
    """One trust domain: key directory, cluster, database, gateway login, federation login."""

    def __init__(self, td):
        ClusterEnv.__init__(self, "bcj-fed-", "fed", td)

    def setup(self):
        self.start_cluster("t")
        self.psql("CREATE ROLE fed_login LOGIN IN ROLE bc_join_federation")
        self.fed_conninfo = "host=%s port=%d dbname=%s user=fed_login" % (
            os.path.join(self.pg, "sock"), self.pgport, self.db)
        self.sql = self.connect()

    def q(self, sql, check=True):
        """Run sql as the superuser on one connection (psql's -At text of the first
        column of the first row: t/f, JSON, '' for none); '' on an error unless check."""
        try:
            self.sql.cur.execute(sql)
            row = self.sql.cur.fetchone() if self.sql.cur.description else None
        except Exception:  # noqa: BLE001
            if check:
                raise
            return ""
        v = row[0] if row else None
        if v is None:
            return ""
        if isinstance(v, bool):
            return "t" if v else "f"
        if isinstance(v, (dict, list)):
            return json.dumps(v)
        return str(v)


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bcj-fed-")
        os.chmod(self.dir, 0o755)
        self.a = Domain(TD_A)
        self.b = Domain(TD_B)
        self.procs = []

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for d in (self.a, self.b):
            d.cleanup()
        if os.environ.get("BCJ_KEEP"):
            print("# kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def cert(self, name, ca_key, ca_crt, ext, key=None):
        """A P-256 leaf signed by the CA with the extensions ext; (key, cert)."""
        key = key or self.path(name + ".key")
        crt, csr, extf = self.path(name + ".crt"), self.path(name + ".csr"), self.path(name + ".ext")
        with open(extf, "w") as f:
            f.write(ext)
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", "/CN=" + name, "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
                "-days", "1", "-extfile", extf, "-out", crt)
        return key, crt

    def web_pki(self):
        """The test web CA and a server certificate for 127.0.0.1 (IP SAN only)."""
        self.ca_key, self.ca = self.path("web-ca.key"), self.path("web-ca.crt")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                "-subj", "/CN=web-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", self.ca_key, "-out", self.ca)
        self.web_key, self.web_crt = self.cert("web", self.ca_key, self.ca,
                                               "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                                               "extendedKeyUsage=serverAuth\n")

    def gateway(self, d):
        port = free_port()
        log = open(self.path("gateway-%s.log" % d.trust_domain), "ab")
        p = subprocess.Popen([GATEWAY, "--listen", "127.0.0.1:%d" % port, "--tls-cert", self.web_crt,
                              "--tls-key", self.web_key, "--db", d.conninfo, "--log-level", "warn"],
                             stdout=log, stderr=log)
        self.procs.append(p)
        wait_port(port, p, "bc-gateway")
        return "https://127.0.0.1:%d" % port

    def s_server(self, name, key, crt, chain=None):
        """openssl s_server -HTTP serving the files of a directory of its own; (its dir, URL base)."""
        www = self.path("www-" + name)
        os.makedirs(www)
        port = free_port()
        cmd = ["openssl", "s_server", "-quiet", "-HTTP", "-accept", "127.0.0.1:%d" % port,
               "-key", key, "-cert", crt]
        if chain:
            cmd += ["-cert_chain", chain]
        p = subprocess.Popen(cmd, cwd=www, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(self.path("s_server-%s.log" % name), "ab"))
        self.procs.append(p)
        wait_port(port, p, "openssl s_server")
        return www, "https://127.0.0.1:%d" % port


def serve(www, name, body, status="200 OK", headers=""):
    """A file s_server -HTTP answers as is: status line, headers, the body."""
    data = body if isinstance(body, bytes) else body.encode()
    with open(os.path.join(www, name), "wb") as f:
        f.write(("HTTP/1.0 %s\r\nContent-Type: application/json\r\n%s\r\n" % (status, headers)).encode() + data)


def federate(d, *extra, ca_file=None):
    """bc-join-federate --once against d; (exit status, the JSON lines by trust domain, stderr)."""
    cmd = [FEDERATE, "--db", d.fed_conninfo, "--once"] + (["--ca-file", ca_file] if ca_file else []) + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    lines = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
            lines[o.get("trustDomain")] = o
        except ValueError:
            lines.setdefault("_raw", []).append(line)
    return r.returncode, lines, r.stderr


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def body(tap, env):
    a, b = env.a, env.b
    ts = [threading.Thread(target=d.setup) for d in (a, b)]
    [t.start() for t in ts]
    env.web_pki()
    [t.join() for t in ts]
    if not (a.started and b.started):
        raise RuntimeError("a cluster did not start")
    gw_a, gw_b = env.gateway(a), env.gateway(b)
    bundle_a = json.loads(a.q("SELECT bc_join.spiffe_bundle()"))
    bundle_b = json.loads(b.q("SELECT bc_join.spiffe_bundle()"))

    # -- https_web, each with the other's gateway -------------------------------------------
    a.q("SELECT bc_join.add_federation('%s', '%s/v1/spiffe-bundle')" % (TD_B, gw_b))
    b.q("SELECT bc_join.add_federation('%s', '%s/v1/spiffe-bundle')" % (TD_A, gw_a))
    rc, out, err = federate(a)      # the system's roots: the test web CA is not one
    r = out.get(TD_B, {}).get("result", {})
    tap.ok(rc == 0 and r.get("stored") is False and "certificate" in r.get("error", ""),
           "https_web without --ca-file: the gateway's certificate is refused (system roots)", (rc, out, err))
    tap.eq(a.q("SELECT last_error LIKE 'fetch failed: %%' AND bundle IS NULL FROM bc_join.federations "
                  "WHERE trust_domain = '%s'" % TD_B), "t", "recorded in last_error, no bundle")
    a.q("UPDATE bc_join.federated_trust_domains SET next_fetch_at = now()")
    # and a host name the certificate does not name (IP SAN only)
    a.q("SELECT bc_join.add_federation('byname.example', '%s/v1/spiffe-bundle')"
           % gw_b.replace("127.0.0.1", "localhost"))
    rc, out, err = federate(a, ca_file=env.ca)
    r = out.get("byname.example", {}).get("result", {})
    tap.ok(r.get("stored") is False and ("localhost" in r.get("error", "") or "name" in r.get("error", "")),
           "https_web checks the host name: localhost is not in the certificate", out)
    tap.eq(a.q("SELECT count(*) FROM bc_join.events WHERE type = 'federation.fetch.failed'"), "2",
           "each failed fetch is an event federation.fetch.failed")
    a.q("SELECT bc_join.remove_federation('byname.example')")
    r = out.get(TD_B, {}).get("result", {})
    tap.ok(rc == 0 and r.get("stored") is True and r.get("changed") is True
           and r.get("sequence") == bundle_b["spiffe_sequence"],
           "A fetches B's /v1/spiffe-bundle over https_web (--ca-file the test web CA)", (rc, out, err))
    tap.eq(json.loads(a.q("SELECT bundle FROM bc_join.federated_trust_domains WHERE trust_domain = '%s'" % TD_B)),
           bundle_b, "A stored B's spiffe_bundle()")
    rc, out, err = federate(b, ca_file=env.ca)
    tap.ok(rc == 0 and out.get(TD_A, {}).get("result", {}).get("stored") is True
           and json.loads(b.q("SELECT bundle FROM bc_join.federated_trust_domains")) == bundle_a,
           "B fetches and stores A's bundle the same way", (rc, out, err))
    rc, out, _ = federate(a, ca_file=env.ca)
    tap.ok(rc == 0 and out == {}, "nothing is due right after: the next fetch is a quarter of the hint away", out)
    tap.eq(a.q("SELECT extract(epoch FROM next_fetch_at - fetched_at)::int FROM bc_join.federated_trust_domains"),
           "75",
           "next_fetch_at: hint 300 s / 4 = 75 s")
    # -- the signed document agents take: GET /v1/trust-bundles --------------------------
    r = subprocess.run(["curl", "-s", "--cacert", env.ca, gw_a + "/v1/trust-bundles"],
                       stdout=subprocess.PIPE, text=True, check=True)
    doc = json.loads(r.stdout)
    keys_a = json.load(open(a.service_keys))["signingKeys"]
    keys_b = json.load(open(b.service_keys))["signingKeys"]
    verified = []
    for token in doc.get("keys", []):
        kid = json.loads(b64url(token.split(".")[0])).get("kid")
        k = next((x for x in keys_a if x.get("kid") == kid), None)
        try:
            s = jws.JWS()
            s.deserialize(token, jwk.JWK(**k))
            verified.append(json.loads(s.payload))
        except Exception as e:  # noqa: BLE001
            tap.note("JWS refused: %r" % e)
    tap.ok(len(doc.get("keys", [])) == len(keys_a) and len(verified) == len(keys_a),
           "GET /v1/trust-bundles: one JWS per signing key of A, each verified with it", doc)
    p = verified[0] if verified else {}
    tap.ok(p.get("trustDomain") == TD_A and p.get("issuedAt", "").endswith("Z")
           and p.get("bundles") == {"spiffe://" + TD_B: bundle_b},
           "its payload: {trustDomain A, issuedAt, bundles: {spiffe://B: B's bundle}}", p)
    bad = 0
    for token in doc.get("keys", []):
        try:
            jws.JWS().deserialize(token, jwk.JWK(**keys_b[0]))
        except Exception:  # noqa: BLE001
            bad += 1
    tap.eq(bad, len(doc.get("keys", [])), "B's signing key verifies none of them")

    # -- hostile bundles, from a real HTTPS server: one domain each, all in one pass -----------
    www, base = env.s_server("hostile", env.web_key, env.web_crt)
    x509b = next(k for k in bundle_b["keys"] if k["use"] == "x509-svid")
    x509a = next(k for k in bundle_a["keys"] if k["use"] == "x509-svid")
    jwtb = next(k for k in bundle_b["keys"] if k["use"] == "jwt-svid")
    good = {"keys": [x509b, jwtb], "spiffe_sequence": 100, "spiffe_refresh_hint": 600}
    # a certificate that is no CA, its JWK its own key
    nk, nc = env.cert("notca", env.ca_key, env.ca, "basicConstraints=critical,CA:FALSE\n")
    njwk = json.loads(jwk.JWK.from_pem(open(nk, "rb").read()).export_public())
    nder = subprocess.run(["openssl", "x509", "-in", nc, "-outform", "DER"], stdout=subprocess.PIPE,
                          check=True).stdout
    refusals = [  # (domain, body served, the reason's words, what it shows)
        ("lower", dict(good, spiffe_sequence=99), "lower than the stored 100", "a lower sequence"),
        ("same", {"keys": [x509b], "spiffe_sequence": 100}, "content differs", "the same sequence with other content"),
        ("huge-seq", dict(good, spiffe_sequence=2 ** 63 - 1), "not an integer from 0 to 2^53",
         "spiffe_sequence 2^63-1 (over 2^53)"),
        ("two-x5c", dict(good, spiffe_sequence=101, keys=[dict(x509b, x5c=x509b["x5c"] * 2)]),
         "exactly one certificate", "two certificates in x5c"),
        ("not-ca", dict(good, spiffe_sequence=101,
                        keys=[dict(njwk, use="x509-svid", x5c=[base64.b64encode(nder).decode()])]),
         "is not a CA certificate", "x5c a certificate that is no CA"),
        ("other-key", dict(good, spiffe_sequence=101, keys=[dict(x509b, x5c=x509a["x5c"])]),
         "does not hold the JWK's key", "x5c a CA certificate of another key"),
        ("many", dict(good, spiffe_sequence=101, keys=[dict(jwtb, kid="k%d" % i) for i in range(65)]),
         "more than 64 keys", "65 keys"),
        ("big", json.dumps(dict(good, spiffe_sequence=101, pad="x" * (300 * 1024))).encode(),
         "larger than 262144 bytes", "a body over 256 KiB"),
        ("not-json", b'{"keys": [}', "not JSON", "a body that is not JSON"),
        # under 256 KiB alone, but every domain's bundle goes to agents in one signed document
        ("total", dict(good, spiffe_sequence=101, pad="x" * 60000), "over 64000",
         "a bundle of 60 KB that takes the federated bundles over 64000 bytes in all"),
    ]
    for name, doc, _, _ in refusals:
        serve(www, name, doc if isinstance(doc, bytes) else json.dumps(doc))
    # redirects: to http:// never followed; to https:// followed, the configured URL kept
    serve(www, "to-http", b"", status="302 Found", headers="Location: http://127.0.0.1:9/bundle\r\n")
    serve(www, "to-https", b"", status="302 Found", headers="Location: %s/moved\r\n" % base)
    serve(www, "moved", json.dumps(dict(good, spiffe_sequence=101, spiffe_refresh_hint=0)))
    serve(www, "empty", json.dumps({"keys": [], "spiffe_sequence": 102}))
    names = [r[0] for r in refusals] + ["to-http", "to-https", "empty"]
    a.q(";".join("SELECT bc_join.add_federation('%s.h.example', '%s/%s', bundle => '%s')"
                    % (n, base, n, json.dumps(good)) for n in names))
    rc, out, err = federate(a, ca_file=env.ca)
    tap.ok(rc == 0 and all(n + ".h.example" in out for n in names), "one pass fetched every hostile domain",
           (rc, out, err))
    for name, _, reason, what in refusals:
        td = name + ".h.example"
        result = out.get(td, {}).get("result", {})
        row = a.q("SELECT sequence || '|' || (last_error LIKE '%%%s%%') || '|' || (bundle = '%s'::jsonb) "
                     "FROM bc_join.federated_trust_domains WHERE trust_domain = '%s'"
                     % (reason.replace("'", "''"), json.dumps(good), td))
        ev = a.q("SELECT count(*) FROM bc_join.events WHERE type = 'federation.bundle.refused' "
                    "AND payload->>'trustDomain' = '%s' AND payload->>'reason' LIKE '%%%s%%'"
                    % (td, reason.replace("'", "''")))
        tap.ok(result.get("stored") is False and reason in result.get("refused", "")
               and row == "100|true|true" and ev == "1",
               "refused: %s (the old bundle kept, last_error, event federation.bundle.refused)" % what,
               (result, row, ev))
    r = out.get("to-http.h.example", {}).get("result", {})
    tap.ok(r.get("stored") is False and "Protocol" in r.get("error", "") and
           a.q("SELECT sequence FROM bc_join.federated_trust_domains WHERE trust_domain = 'to-http.h.example'")
           == "100", "a redirect to http:// is not followed (recorded as a failed fetch)", r)
    r = out.get("to-https.h.example", {}).get("result", {})
    tap.ok(r.get("stored") is True and r.get("sequence") == 101 and
           a.q("SELECT refresh_hint || '|' || endpoint_url FROM bc_join.federated_trust_domains "
                  "WHERE trust_domain = 'to-https.h.example'") == "60|%s/to-https" % base,
           "a redirect to https:// is followed (the configured URL kept); hint 0 clamped to 60 s", r)
    r = out.get("empty.h.example", {}).get("result", {})
    tap.ok(r.get("stored") is True and a.q(
        "SELECT keys || '|' || (last_error IS NULL) FROM bc_join.federations WHERE trust_domain = 'empty.h.example'")
        == "0|true", "an empty key set is stored: every SVID of that domain refused", r)
    for url, why in (("http://127.0.0.1:9/b", "http://"), ("https://u:p@127.0.0.1:9/b", "userinfo")):
        e = a.q("SELECT bc_join.add_federation('x.example', '%s')" % url, check=False)
        tap.ok(e == "" and a.q("SELECT count(*) FROM bc_join.federated_trust_domains WHERE trust_domain = "
                                  "'x.example'") == "0", "add_federation refuses a URL with %s" % why)

    for bad in ("..", "a..b.example", ".lead.example", "trail.example."):
        e = a.q("SELECT bc_join.add_federation('%s', NULL, 'static', NULL, '{\"keys\": []}')" % bad, check=False)
        tap.ok(e == "" and a.q("SELECT count(*) FROM bc_join.federated_trust_domains WHERE trust_domain = "
                                  "'%s'" % bad) == "0", "add_federation refuses the trust domain name %r" % bad)
    # at most 64 federated domains (what every bcd holds): filled up to 64 and the next one
    # refused, all in a subtransaction rolled back
    a.q("""CREATE FUNCTION pg_temp.cap_check() RETURNS text LANGUAGE plpgsql AS $f$
        DECLARE msg text; n int;
        BEGIN
          BEGIN
            n := 64 - (SELECT count(*) FROM bc_join.federated_trust_domains);
            FOR i IN 1..n LOOP
              PERFORM bc_join.add_federation('cap' || i || '.example', NULL, 'static', NULL, '{"keys": []}');
            END LOOP;
            BEGIN
              PERFORM bc_join.add_federation('cap65.example', NULL, 'static', NULL, '{"keys": []}');
              msg := 'added a 65th';
            EXCEPTION WHEN OTHERS THEN msg := SQLERRM;
            END;
            RAISE EXCEPTION 'roll back';
          EXCEPTION WHEN raise_exception THEN NULL;
          END;
          RETURN msg;
        END $f$""")
    before = a.q("SELECT count(*) FROM bc_join.federated_trust_domains")
    msg = a.q("SELECT pg_temp.cap_check()")
    tap.ok("64 trust domains are federated already" in msg and
           a.q("SELECT count(*) FROM bc_join.federated_trust_domains") == before,
           "add_federation refuses a 65th federated trust domain (every bcd holds 64)", msg)

    # -- https_spiffe ----------------------------------------------------------------------
    ep_id = "spiffe://%s/bundle-endpoint" % TD_B
    node_ca = os.path.join(b.keys, "node-ca.crt")
    sk, sc = env.cert("svid", os.path.join(b.keys, "node-ca.key"), node_ca,
                      "subjectAltName=URI:%s\nbasicConstraints=critical,CA:FALSE\n"
                      "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n" % ep_id)
    swww, sbase = env.s_server("svid", sk, sc, chain=node_ca)
    served = {"keys": [jwtb], "spiffe_sequence": 7}
    serve(swww, "bundle", json.dumps(served))
    # self-serving: B's own endpoint serves B's bundle, bootstrapped by the operator's copy
    rotated = dict(bundle_b, spiffe_sequence=bundle_b["spiffe_sequence"] + 1, spiffe_refresh_hint=900)
    serve(swww, "self", json.dumps(rotated))
    a.q("SELECT bc_join.remove_federation('%s')" % TD_B)
    a.q("SELECT bc_join.add_federation('%s', '%s/self', 'https_spiffe', '%s', '%s')"
        % (TD_B, sbase, ep_id, json.dumps(bundle_b)))
    a.q("SELECT bc_join.add_federation('s.example', '%s/bundle', 'https_spiffe', '%s')" % (sbase, ep_id))
    a.q("SELECT bc_join.add_federation('s2.example', '%s/bundle', 'https_spiffe', 'spiffe://%s/other')"
           % (sbase, TD_B))
    serve(www, "bundle", json.dumps(served))
    a.q("SELECT bc_join.add_federation('s3.example', '%s/bundle', 'https_spiffe', '%s')" % (base, ep_id))
    rc, out, err = federate(a, ca_file=env.ca)
    r1, r2, r3 = (out.get(t, {}).get("result", {}) for t in ("s.example", "s2.example", "s3.example"))
    tap.ok(r1.get("stored") is True and r1.get("sequence") == 7,
           "https_spiffe: the endpoint's X509-SVID (B's node CA) with the configured ID is accepted", (out, err))
    r0 = out.get(TD_B, {}).get("result", {})
    tap.ok(r0.get("stored") is True and r0.get("sequence") == rotated["spiffe_sequence"],
           "https_spiffe self-serving: B's endpoint, authenticated by the bootstrap bundle, serves B's next bundle",
           r0)
    tap.ok(r2.get("stored") is False and "is not spiffe://%s/other" % TD_B in r2.get("error", ""),
           "https_spiffe refuses the same endpoint configured with another ID", r2)
    tap.ok(r3.get("stored") is False and "does not chain" in r3.get("error", ""),
           "https_spiffe refuses a Web-PKI certificate (not chained to B's bundle)", r3)
    e = a.q("SELECT bc_join.add_federation('s4.example', 'https://x/', 'https_spiffe', "
               "'spiffe://unknown.example/x')", check=False)
    tap.ok(e == "" and a.q("SELECT count(*) FROM bc_join.federated_trust_domains WHERE trust_domain = 's4.example'")
           == "0", "https_spiffe needs a bundle of the endpoint's domain (none given, none federated)")

    # -- D3: B's own spiffe_sequence is by its keys, not by the key directory's mtimes ------
    # An HA node: the same keys copied into another directory, every mtime an hour later.
    seq0 = bundle_b["spiffe_sequence"]
    keys2 = os.path.join(b.dir, "keys-node2")
    subprocess.run(["cp", "-a", b.keys, keys2], check=True)
    later = time.time() + 3600
    for f in os.listdir(keys2) + [""]:
        os.utime(os.path.join(keys2, f), (later, later))

    def seq_with(keydir):
        b.q("ALTER DATABASE %s SET bc_join.key_dir = '%s'" % (b.db, keydir))
        return int(b.psql("SELECT bc_join.spiffe_bundle()->'spiffe_sequence'"))    # a new backend
    tap.eq(seq_with(keys2), seq0, "the same keys in another directory (mtimes an hour later): the same sequence")
    jwt = os.path.join(keys2, "jwt-svid.key")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", jwt)
    if os.geteuid() == 0:       # the cluster runs as postgres (tools/pg-throwaway), else as us
        shutil.chown(jwt, "postgres")
    os.chmod(jwt, 0o600)
    seq1 = seq_with(keys2)
    tap.ok(seq1 > seq0, "a new jwt-svid key: a higher sequence", (seq0, seq1))
    tap.eq(seq_with(b.keys), seq0, "the old keys again: their own sequence (a peer refuses it as lower)")
    b.q("ALTER DATABASE %s RESET bc_join.key_dir" % b.db)

    # -- bc_join_federation may fetch and hand over, nothing else ----------------------------
    import psycopg2
    fed = psycopg2.connect(a.fed_conninfo)
    fed.autocommit = True
    denied = []
    for sql in ("SELECT count(*) FROM bc_join.federated_trust_domains",
                "SELECT bc_join.add_federation('evil.example', 'https://10.0.0.1/')",
                "SELECT bc_join.remove_federation('%s')" % TD_B,
                "SELECT bc_join.set_federated_bundle('%s', '{\"keys\": []}')" % TD_B,
                "UPDATE bc_join.federated_trust_domains SET endpoint_url = 'https://10.0.0.1/'"):
        try:
            fed.cursor().execute(sql)
        except psycopg2.Error as e:
            denied.append(e.pgcode)
    cur = fed.cursor()
    cur.execute("SELECT count(*) FROM bc_join.federation_due()")
    tap.ok(denied == ["42501"] * 5 and cur.fetchone()[0] == 0,
           "bc_join_federation: federation_due() yes; the table, add/remove/set and an UPDATE: 42501", denied)
    fed.close()

    # -- the rows survive pg_dump -------------------------------------------------------------
    envv = dict(os.environ)
    envv.update(a.pgenv)
    dump = subprocess.run(["pg_dump", "--data-only", "-t", "bc_join.federated_trust_domains", a.db],
                          env=envv, stdout=subprocess.PIPE, text=True).stdout
    tap.ok(all(t in dump for t in (TD_B, "empty.h.example", "s.example")), "pg_dump keeps federated_trust_domains' rows")


def main():
    tap = Tap()
    env = Env()
    t0 = time.time()
    try:
        body(tap, env)
    except Exception:  # noqa: BLE001
        import traceback
        tap.ok(False, "script ran to the end", traceback.format_exc())
    finally:
        env.cleanup()
    tap.note("wall time %.1f s" % (time.time() - t0))
    sys.exit(tap.done())


main()
