#!/usr/bin/python3
"""mitm.t: bcd refuses what a man in the middle tampered with.

A tampering HTTPS relay (mitm.py, its TLS certificate signed by the very CA
bcd pins, so TLS does not stop it) sits between bcd and the real gateway.
For each tampering bcd run --once exits 1 with the reason and writes no
credential: an answer re-signed with another key; an answer bound to another
CSR (one captured for another host's key); a leaf with one byte flipped; a
leaf from another CA and a leaf for another key, both re-signed with the
service's own signing key (so only bcd's chain and key checks stand in the
way).  A relay whose certificate is not signed by the pinned CA gets no
request at all.  An untampered relay (control) works.
"""
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402


def no_credential(state):
    """True when state holds no credential file, new or not."""
    return not any(os.path.exists(os.path.join(state, n))
                   for n in ("node.key", "node-chain.pem", "node.key.new", "node-chain.pem.new"))


def capture_other(env):
    """An answer the gateway gave to another host's JoinRequest; its path."""
    other = os.path.join(env.dir, "other-host")
    req = subprocess.run([env.bcd_bin, "join-request", "--service-keys", env.service_keys,
                          "--token", env.token(), "--out-dir", other],
                         check=True, stdout=subprocess.PIPE, env=env.bcd_env()).stdout
    ctx = ssl.create_default_context(cafile=env.ca)
    conn = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=30)
    conn.request("POST", "/v1/join", body=req, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    path = os.path.join(env.dir, "captured.json")
    with open(path, "wb") as f:
        f.write(body)
    return resp.status, path


def body(tap, env):
    """The script."""
    code, captured = capture_other(env)
    tap.eq(code, 200, "an answer for another host's CSR is captured")
    signing = os.path.join(env.keys, "signing.key")
    cases = [
        ("pass", [], 0, "", "the untampered relay (control): bcd joins through it"),
        ("resign-other", [], 1, "does not verify with the pinned signing key",
         "an answer re-signed with another key is refused"),
        ("swap", ["--swap-file", captured], 1, "answers another CSR",
         "an answer bound to another CSR is refused"),
        ("chain-flip", [], 1, "does not verify with the pinned signing key",
         "a leaf with a flipped byte (signature kept) is refused"),
        ("chain-other-ca", ["--signing-key", signing], 1, "does not verify against the pinned node CA",
         "a leaf from another CA, re-signed with the service's own key, is refused"),
        ("leaf-other-key", ["--signing-key", signing, "--node-ca-key", os.path.join(env.keys, "node-ca.key"),
                            "--node-ca", os.path.join(env.keys, "node-ca.crt")], 1,
         "not for our key", "a leaf for another key, re-signed with the service's own key, is refused"),
    ]
    for mode, extra, want_rc, reason, name in cases:
        url, relay = env.mitm(mode, extra)
        state = os.path.join(env.dir, "state-" + mode)
        r = env.bcd("run", *env.run_args(state, gateway=url, token_file=env.token_file(mode),
                                         extra=["--once"]))
        relay.stop(signal.SIGTERM, 10)
        if want_rc == 0:
            tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://") and not no_credential(state),
                   name, r.stdout + r.stderr)
            continue
        tap.ok(r.returncode == 1 and reason in r.stderr and "mitm: POST /v1/join" in relay.text(),
               name + " (exit 1)", "rc %d\n%s\n%s" % (r.returncode, r.stderr, relay.text()))
        tap.ok(no_credential(state), mode + ": no credential is written")

    # -- a relay whose TLS certificate the pinned CA did not sign ------------------------
    rogue_ca_key, rogue_ca = env.make_ca("rogue-ca")
    env.mitm_key, env.mitm_cert = env.server_cert("rogue", rogue_ca_key, rogue_ca)
    url, relay = env.mitm("pass", name="rogue")
    state = os.path.join(env.dir, "state-rogue")
    bcd = env.bcd_bg("run", *env.run_args(state, gateway=url, token_file=env.token_file("rogue"),
                                         extra=["--once"]))
    tap.ok(bcd.wait_log("trying again", 20), "TLS to a relay outside the pinned CA fails; bcd backs off",
           bcd.text())
    rc, _ = bcd.stop(signal.SIGTERM, 20)
    tap.ok(rc == 0 and no_credential(state) and "mitm: POST" not in relay.text(),
           "no request reached it, nothing is written, SIGTERM exits 0",
           "rc %s\n%s\n%s" % (rc, bcd.text(), relay.text()))
    tap.ok("certificate" in bcd.text().lower(), "the log names the TLS certificate problem", bcd.text())


agentlib.main(body)
