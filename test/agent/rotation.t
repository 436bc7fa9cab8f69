#!/usr/bin/python3
"""rotation.t: the service keys and the node CA's intermediate rotate while
agents run, through the real gateway, and no join, renewal or session fails.

Shows: tools/bc-join-keygen makes an offline root and an online intermediate
(node-ca.crt the intermediate then the root; answers carry that chain;
openssl verifies a node certificate against the root alone); --stage
publishes next keys at once (service_keys(), GET /v1/service-keys signed by
each key) and a running bcd takes the rollover up at its next renewal and
keeps it in its state directory; --promote makes responses signed by the new
key: a running bcd verifies them by kid, an agent started with the old
--service-keys file joins (its token sealed to the previous encryption key
still opens; the answer's unknown kid makes it fetch the rollover, signed by
the previous key it pins); --retire ends the overlap (an old pin can no longer
join; a bcd restarted from its state keeps working); --rotate-intermediate
issues from a new intermediate under the same root while the old one's
certificates stay valid (sessions from them, x509pop reclaim). All the
while a daemon renews every few seconds and a hook asks for a session
credential every half second: none fails. Refused rollovers: signed by a key
not pinned, a flipped bit, another root, another trust domain, older than the
pinned set; each logged, the pins unchanged.

No rollback (#26.4): a service_keys() file made after the rotation carries its
issuedAt, signed; a hostile gateway replaying the overlap's genuine rollover
(captured after --stage, signed by the key the new file pins) to a bcd
started from that file is refused at its very first rollover ("older than the
set pinned now"), and that bcd joins, its token sealed to the current
encryption key.  A retired signing key the operator puts back is published
again in a newer, genuine rollover, which a bcd that saw it dropped refuses
("brings back a key the pinned set dropped").
"""
import base64
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ssl  # noqa: E402
import urllib.request  # noqa: E402

import agentlib  # noqa: E402
import sessionlib  # noqa: E402
from jwcrypto import jwk, jws  # noqa: E402


def b64u_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def keygen(env, *args):
    r = subprocess.run([os.path.join(agentlib.TOP, "tools/bc-join-keygen")] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("bc-join-keygen failed: " + r.stdout)
    return r.stdout


def kids(doc):
    return [k["kid"] for k in doc["signingKeys"]]


def issuer(path):
    return subprocess.run(["openssl", "x509", "-in", path, "-noout", "-issuer"],
                          stdout=subprocess.PIPE, text=True).stdout.strip()


def pinned(state):
    """The signing kids bcd keeps in its state directory ([] when none)."""
    path = os.path.join(state, "service-keys.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return kids(json.load(f)["set"])


def rollover_of(env, ctx, want=None, timeout=10):
    """GET /v1/service-keys through the real gateway (its cached copy may be a
    second old: polled until its JWS kids are want, when given)."""
    deadline = time.time() + timeout
    while True:
        with urllib.request.urlopen(env.gw_url + "/v1/service-keys", context=ctx, timeout=10) as resp:
            doc = json.loads(resp.read())
        got = [json.loads(b64u_decode(j.split(".")[0]))["kid"] for j in doc["keys"]]
        if want is None or sorted(got) == sorted(want) or time.time() > deadline:
            return doc
        time.sleep(0.3)


def issued_at(rollover):
    """The issuedAt of a rollover's first JWS."""
    return json.loads(b64u_decode(rollover["keys"][0].split(".")[1]))["issuedAt"]


def write_keys(env, name):
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(env.psql("SELECT bc_join.service_keys()") + "\n")
    return path


class Sessions(threading.Thread):
    """A hook asking for a session credential every half second; failures counted."""

    def __init__(self, env, rt, sock):
        super().__init__(daemon=True)
        self.env, self.rt, self.sock = env, rt, sock
        self.ok = 0
        self.failed = []
        self.stop = False
        self.n = 0

    def run(self):
        for i in range(4):
            os.makedirs(os.path.join(self.rt, "hook-%d" % i), 0o700, exist_ok=True)
        while not self.stop:
            self.n += 1
            d = os.path.join(self.rt, "hook-%d" % (self.n % 4))
            r = sessionlib.hook(self.env, self.rt, self.sock, "rot-%d" % self.n, d, timeout=60)
            if r.returncode == 0:
                self.ok += 1
            else:
                self.failed.append((self.n, r.returncode, r.stderr[-300:]))
            time.sleep(0.5)


def join(env, state, keys_file, extra=()):
    """bcd run --once for a new node with keys_file pinned; CompletedProcess."""
    args = ["--gateway", env.gw_url, "--gateway-ca", env.ca, "--service-keys", keys_file,
            "--state-dir", state, "--token-file", env.token_file(os.path.basename(state)), "--once"]
    return env.bcd("run", *(args + list(extra)))


def forged_rollovers(env, good):
    """(name, body) of rollovers bcd must refuse; good is a real one (a dict)."""
    doc = json.loads(b64u_decode(good["keys"][0].split(".")[1]))
    with open(os.path.join(env.keys, "signing.key"), "rb") as f:
        real = jwk.JWK.from_pem(f.read())
    real_kid = json.loads(b64u_decode(good["keys"][0].split(".")[0]))["kid"]
    other = jwk.JWK.generate(kty="EC", crv="P-256")

    def signed(payload, key, kid):
        s = jws.JWS(json.dumps(payload).encode())
        s.add_signature(key, None, {"alg": "ES256", "kid": kid})
        return json.dumps({"keys": [s.serialize(compact=True)]})

    attacker = json.loads(other.export_public())
    attacker["kid"] = other.thumbprint()
    evil = dict(doc, signingKey={k: attacker[k] for k in ("crv", "kty", "x", "y")},
                signingKeys=[attacker])
    out = [("signed by a key not pinned (claiming a pinned kid)", signed(evil, other, real_kid)),
           ("signed by a key not pinned (its own kid)", signed(evil, other, other.thumbprint()))]
    h, p, sig = good["keys"][0].split(".")
    raw = bytearray(b64u_decode(p))
    raw[len(raw) // 2] ^= 0x01
    flipped = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    out.append(("a flipped bit in the payload", json.dumps({"keys": [".".join([h, flipped, sig])]})))
    other_root = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:P-256", "-nodes", "-keyout", "/dev/null",
                                 "-subj", "/CN=other root", "-days", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    out.append(("another node CA root", signed(dict(doc, nodeCa=other_root), real, real_kid)))
    out.append(("another trust domain", signed(dict(doc, trustDomain="evil.example"), real, real_kid)))
    out.append(("older than the pinned set", signed(dict(doc, issuedAt="2001-01-01T00:00:00Z"), real, real_kid)))
    out.append(("no issuedAt", signed({k: v for k, v in doc.items() if k != "issuedAt"}, real, real_kid)))
    out.append(("not a rollover at all", json.dumps({"keys": "x"})))
    return out


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.signed_service_keys()"):
        tap.skip("rotation", "bc_join.signed_service_keys() is not in the installed extension")
        return
    root = env.keys + ".root"
    root_crt = os.path.join(root, "root.crt")

    # -- the CA as bc-join-keygen makes it --------------------------------------------------
    tap.ok(os.path.exists(os.path.join(root, "root.key")) and
           not os.path.exists(os.path.join(env.keys, "root.key")),
           "bc-join-keygen puts the root's key beside the key directory, not in it")
    with open(os.path.join(env.keys, "node-ca.crt")) as f:
        bundle = f.read()
    tap.eq(bundle.count("BEGIN CERTIFICATE"), 2, "node-ca.crt: the intermediate, then the root")
    sk = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.eq(len(sk["signingKeys"]), 1, "one signing key to begin with")

    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    # the gateway's copy of GET /v1/service-keys lives 1 s here (default 10 s), so each
    # step below is published at once
    env.gateway("--service-keys-max-age", "1")
    rt = sessionlib.runtime_dir(env)
    ctx = ssl.create_default_context(cafile=env.ca)
    state = os.path.join(env.dir, "a")
    r = join(env, state, env.service_keys)
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"), "agent A joins", r.stdout + r.stderr)
    chain = os.path.join(state, "node-chain.pem")
    with open(chain) as f:
        tap.eq(f.read().count("BEGIN CERTIFICATE"), 3, "its node-chain.pem: leaf, intermediate, root")
    v = subprocess.run(["openssl", "verify", "-CAfile", root_crt, "-untrusted", chain, chain],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0, "openssl verifies it against the offline root alone", v.stdout)
    v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(env.keys, "node-ca.crt"), chain],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0, "and against node-ca.crt (openssl verify -CAfile <node CA>)", v.stdout)
    old_issuer = issuer(chain)
    # D joins now, so that its 60 s certificate of the old intermediate has expired by the
    # time the intermediate has rotated (below: D re-joins as itself by x509pop)
    d_state = os.path.join(env.dir, "d")
    r = join(env, d_state, env.service_keys)
    tap.ok(r.returncode == 0, "agent D joins (its certificate expires during the rotations)",
           r.stdout + r.stderr)
    d_node = r.stdout.split("\n")[0].rsplit("/", 1)[-1]

    sock = os.path.join(rt, "a.sock")
    daemon = sessionlib.start_daemon(env, "bcd-a", rt, [
        "--gateway", env.gw_url, "--gateway-ca", env.ca, "--service-keys", env.service_keys,
        "--state-dir", state, "--socket", sock, "--renew-at", "0.1"])
    tap.ok(sessionlib.wait_socket(daemon, sock), "agent A's daemon serves its socket", daemon.text())
    hooks = Sessions(env, rt, sock)
    hooks.start()

    def renewals():
        return daemon.text().count("renewed spiffe://")

    def wait_renewals(k, timeout=60):
        want = renewals() + k
        deadline = time.time() + timeout
        while time.time() < deadline and renewals() < want:
            time.sleep(0.2)
        return renewals() >= want

    tap.ok(wait_renewals(1), "A renews by itself (60 s certificates)", daemon.text())

    # -- stage: next keys published, taken up at the next renewal ---------------------------
    keygen(env, "--stage", env.keys)
    sk = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.eq(len(sk["signingKeys"]), 2, "--stage: service_keys() publishes the current and the next key")
    rollover = rollover_of(env, ctx, kids(sk))
    hdr_kids = [json.loads(b64u_decode(j.split(".")[0]))["kid"] for j in rollover["keys"]]
    tap.eq(sorted(hdr_kids), sorted(kids(sk)), "GET /v1/service-keys: the set signed once by each key")
    # what a hostile gateway captures during the overlap, and the key about to be retired
    captured = os.path.join(env.dir, "captured-overlap.json")
    with open(captured, "w") as f:
        json.dump(rollover, f)
    with open(os.path.join(env.keys, "signing.key"), "rb") as f:
        first_signing_pem = f.read()
    first_signing_stat = os.stat(os.path.join(env.keys, "signing.key"))
    took = wait_renewals(1)
    deadline = time.time() + 10
    while time.time() < deadline and pinned(state) != kids(sk):
        time.sleep(0.2)
    tap.ok(took and pinned(state) == kids(sk),
           "A takes the rollover up at its next renewal and keeps it in its state directory",
           (pinned(state), kids(sk), daemon.text()[-2000:]))
    tap.ok("service keys rolled over" in daemon.text(), "and logs it once")

    # -- promote: the new key signs; old pins still join ------------------------------------
    old_keys_file = env.service_keys
    keygen(env, "--promote", env.keys)
    sk2 = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.eq(kids(sk2)[0], kids(sk)[1], "--promote: the next key is current")
    tap.ok(wait_renewals(2), "A renews twice under the new signing key", daemon.text()[-2000:])
    b_state = os.path.join(env.dir, "b")
    r = join(env, b_state, old_keys_file)
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"),
           "agent B with the old --service-keys joins: its sealed token opens with the previous "
           "encryption key, the answer's kid fetches the rollover", r.stdout + r.stderr)
    tap.ok("service keys rolled over" in r.stderr, "B says it rolled over", r.stderr)

    # -- retire: the overlap ends -----------------------------------------------------------
    keygen(env, "--retire", env.keys)
    sk3 = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.eq(kids(sk3), [kids(sk2)[0]], "--retire: only the current key is published")
    tap.ok(wait_renewals(1), "A renews after the retirement", daemon.text()[-2000:])
    # bcd logs the renewal, then takes up the service's keys (renewal.c): wait for the pins
    deadline = time.time() + 10
    while time.time() < deadline and pinned(state) != kids(sk3):
        time.sleep(0.2)
    tap.eq(pinned(state), kids(sk3), "and pins the current set")
    r = join(env, os.path.join(env.dir, "c"), old_keys_file, extra=["--max-retry-after", "1"])
    tap.ok(r.returncode != 0, "an agent still holding the retired keys only cannot join", r.stdout + r.stderr)
    new_keys_file = write_keys(env, "service-keys-2.json")
    r = join(env, os.path.join(env.dir, "d2"), new_keys_file)
    tap.ok(r.returncode == 0, "one with the new service_keys() does", r.stdout + r.stderr)

    # -- a hostile gateway replays the overlap's rollover to a bcd pinning the new file ----
    with open(new_keys_file) as f:
        nk = json.load(f)
    tap.ok("signed" in nk and nk.get("issuedAt", "") > issued_at(rollover),
           "the new service_keys() file carries its issuedAt (signed), later than the captured rollover",
           (nk.get("issuedAt"), issued_at(rollover)))
    url, relay = env.mitm("keys-file", extra=["--swap-file", captured], name="replay")
    r_state = os.path.join(env.dir, "r")
    p = env.bcd_bg("run", "--gateway", url, "--gateway-ca", env.ca, "--service-keys", new_keys_file,
                   "--state-dir", r_state, "--token-file", env.token_file("r"),
                   "--socket", os.path.join(rt, "r.sock"))
    joined = p.wait_log("joined as spiffe://", 60)
    p.stop()
    relay.stop()
    tap.ok("service keys rollover refused: it is older than the set pinned now" in p.text() and
           "service keys rolled over" not in p.text(),
           "the replayed overlap rollover (genuine, signed by the pinned key) is refused at the first "
           "rollover: older than the set pinned now", p.text()[-2000:])
    tap.ok(joined, "and that bcd joins: its token, sealed to the current encryption key, opened "
           "(sealed to the retired one it would be refused, and bcd would stop)", p.text()[-2000:])
    tap.eq(pinned(r_state), [], "nothing of the replay kept in its state directory")

    # -- the intermediate rotates under the same root ---------------------------------------
    pre = os.path.join(env.dir, "pre-rotation.pem")
    with open(chain) as f, open(pre, "w") as g:
        g.write(f.read())
    keygen(env, "--rotate-intermediate", env.keys, "--root-dir", root)
    tap.ok(wait_renewals(2), "A renews twice across the intermediate's rotation", daemon.text()[-2000:])
    tap.ok(issuer(chain) != old_issuer, "its certificate now comes from the new intermediate",
           (issuer(chain), old_issuer))
    v = subprocess.run(["openssl", "verify", "-CAfile", root_crt, "-untrusted", chain, chain],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0, "still verified by the same root", v.stdout)
    v = subprocess.run(["openssl", "verify", "-CAfile", root_crt, "-untrusted", pre, pre],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0, "and a certificate of the old intermediate too (until it expires)", v.stdout)
    r = join(env, os.path.join(env.dir, "e"), new_keys_file)
    tap.ok(r.returncode == 0, "a new agent joins under the new intermediate", r.stdout + r.stderr)
    # D's certificate, of the old intermediate, expires: D joins again as itself by x509pop.
    with open(os.path.join(d_state, "node-chain.pem")) as f:
        d_pem = f.read()
    d_end = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-checkend", "0"], input=d_pem,
                           stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 75
    while time.time() < deadline and subprocess.run(
            ["openssl", "x509", "-noout", "-checkend", "0"], input=d_pem, stdout=subprocess.DEVNULL,
            text=True).returncode == 0:
        time.sleep(0.5)
    r = env.bcd("run", "--gateway", env.gw_url, "--gateway-ca", env.ca, "--service-keys", new_keys_file,
                "--state-dir", d_state, "--once")
    tap.ok(r.returncode == 0 and r.stdout.split("\n")[0].endswith("/node/" + d_node) and "x509pop" in r.stderr,
           "D, whose expired certificate is of the old intermediate, re-joins as itself by x509pop",
           r.stdout + r.stderr + d_end.stdout)

    time.sleep(2)
    hooks.stop = True
    hooks.join(90)
    tap.ok(hooks.ok >= 20 and hooks.failed == [],
           "%d session credentials through all of it, none failed" % hooks.ok, hooks.failed[:3])
    # (a session asked with the certificate a renewal is revoking at that moment is
    # refused and asked again with the new one, by design: the hooks above saw none fail)
    bad = [l for l in daemon.text().splitlines()
           if "does not verify" in l or ("refused" in l and not l.startswith("bcd: session "))]
    tap.ok(bad == [], "A's log shows no answer unverified and no join or renewal refused", bad[:5])

    # -- forged rollovers: refused, pins unchanged ------------------------------------------
    daemon.stop()
    before = pinned(state)
    good = rollover_of(env, ctx)
    forged = os.path.join(env.dir, "forged.json")
    for name, text in forged_rollovers(env, good):
        with open(forged, "w") as f:
            f.write(text)
        url, relay = env.mitm("keys-file", extra=["--swap-file", forged], name="keys-%d" % len(env.procs))
        p = env.bcd_bg("run", "--gateway", url, "--gateway-ca", env.ca, "--service-keys", env.service_keys,
                       "--state-dir", state, "--socket", os.path.join(rt, "f.sock"))
        seen = p.wait_log("rollover refused", 30)
        p.stop()
        relay.stop()
        tap.ok(seen and pinned(state) == before, "a rollover %s: refused, the pins unchanged" % name,
               p.text()[-1500:])

    # -- a key a rollover dropped never comes back, even in a newer genuine rollover -------
    back = os.path.join(env.keys, "signing.previous.key")
    with open(back, "wb") as f:
        f.write(first_signing_pem)
    os.chmod(back, 0o600)
    os.chown(back, first_signing_stat.st_uid, first_signing_stat.st_gid)
    sk4 = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.ok(len(sk4["signingKeys"]) == 2 and kids(sk4)[1] not in before and before == kids(sk3),
           "the operator puts the retired signing key back: published again", (kids(sk4), before))
    back_rollover = os.path.join(env.dir, "back.json")
    with open(back_rollover, "w") as f:
        json.dump(rollover_of(env, ctx, kids(sk4)), f)
    url, relay = env.mitm("keys-file", extra=["--swap-file", back_rollover], name="back")
    p = env.bcd_bg("run", "--gateway", url, "--gateway-ca", env.ca, "--service-keys", env.service_keys,
                   "--state-dir", state, "--socket", os.path.join(rt, "f.sock"))
    seen = p.wait_log("rollover refused", 30)
    p.stop()
    relay.stop()
    os.remove(back)
    tap.ok(seen and "brings back a key the pinned set dropped (signing key %s)" % kids(sk4)[1] in p.text()
           and pinned(state) == before,
           "a newer genuine rollover with a key A's bcd saw dropped: refused, the pins unchanged",
           p.text()[-1500:])


agentlib.main(body)
