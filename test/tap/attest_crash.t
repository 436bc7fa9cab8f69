#!/usr/bin/python3
"""attest_crash.t: a quarantining bc_join.attest() killed with SIGKILL at a
random moment leaves all of the quarantine or none of it (issue 44:
"no state where a failed quote is recorded and the certificate still
good, or the reverse, even under kill -9"; docs/attestation.md).

Its own cluster (bctest.ClusterEnv, like crash_safety.t: a SIGKILLed
backend makes the postmaster restart every backend) and its own swtpm.
One boot is measured into the swtpm (the TCG log and the IMA list written
here as attest.t does), a first node attests in observe mode, the
observations become the pool's policy, the pool goes to enforce.  Then,
ITER times: a file not in the policy is measured into IMA (PCR 10), a fresh
TPM-bound node asks round 1, and its round 2 (which must quarantine) is
sent from a connection whose backend a killer thread SIGKILLs after a
random moment in 0..3T ms (T: the time an unkilled quarantining round 2
took; iteration i in the i-th slice of 0..3T, so kills land after the commit too).  After
recovery the node is either wholly quarantined (state quarantined, its
certificate revoked attestation-failed, one node.quarantined event, one
node.quarantine audit row) or wholly untouched (no attestation state, the
certificate live, no event, no audit row), never a mix; the audit chain
verifies (bc_join.verify_audit_log()).

Why this fails if the writes were split across transactions: the kill
lands anywhere in 0..3T, so a commit between the revocation and the
quarantine (or the event, or the audit row) leaves a window in which a
kill finds the first part durable and the second lost; the per-node
checks below then see e.g. a revoked certificate on a healthy node or a
quarantined node with no event.  The more kills land before and after the
commit (both counts are required), the more of 0..T was covered.

The swtpm, log and quote helpers are the minimum of attest.t's.
"""
import base64
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import ClusterEnv, TOP, free_port, run  # noqa: E402

ITER = int(os.environ.get("BCJ_ATTEST_CRASH_N", "16"))
DB = "bcj_attest_crash"
BCD = os.environ.get("BCJ_BCD") or os.path.join(TOP, "build", "bcd")
JOSE = os.environ.get("BCJ_JOSE_TOOL") or os.path.join(TOP, "build", "jose-tool")


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Tpm:
    """A swtpm with an EK and an ECDSA AK at a persistent handle."""

    def __init__(self, d):
        self.dir = d
        os.makedirs(os.path.join(d, "state"))
        self.proc = None
        for _ in range(8):
            port = free_port(2)
            self.proc = subprocess.Popen(
                ["swtpm", "socket", "--tpm2", "--tpmstate", "dir=" + os.path.join(d, "state"),
                 "--server", "type=tcp,port=%d,bindaddr=127.0.0.1" % port,
                 "--ctrl", "type=tcp,port=%d,bindaddr=127.0.0.1" % (port + 1),
                 "--flags", "not-need-init,startup-clear"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.environ["TPM2TOOLS_TCTI"] = "swtpm:host=127.0.0.1,port=%d" % port
            for _ in range(50):
                if subprocess.run(["tpm2_getrandom", "1"], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                self.stop()
                continue
            break
        else:
            raise RuntimeError("swtpm did not start")
        self.run("tpm2_createek", "-G", "ecc", "-c", "ek.ctx", "-u", "ek.pub")
        self.handle = "0x81010002"
        self.run("tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
                 "-u", "ak.pub", "-n", "ak.name")
        self.run("tpm2_evictcontrol", "-c", "ak.ctx", self.handle)
        self.akpub = self.rd("ak.pub")
        self.uri = "urn:bc:tpm-ak:sha256:" + self.rd("ak.name")[2:].hex()
        self.log = []       # (pcr, type, sha256 digest, data)
        self.ima = []       # binary ima-ng entries

    def run(self, *args):
        r = subprocess.run(list(args), capture_output=True, cwd=self.dir)
        subprocess.run(["tpm2_flushcontext", "-t"], capture_output=True, cwd=self.dir)
        if r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.decode()))

    def rd(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def measure(self, pcr, typ, data):
        dig = hashlib.sha256(data).digest()
        self.run("tpm2_pcrextend", "%d:sha256=%s" % (pcr, dig.hex()))
        self.log.append((pcr, typ, dig, data))

    def ima_measure(self, path, content):
        dng = b"sha256:\0" + hashlib.sha256(content).digest()
        nng = path.encode() + b"\0"
        tdata = struct.pack("<I", len(dng)) + dng + struct.pack("<I", len(nng)) + nng
        self.run("tpm2_pcrextend", "10:sha256=%s" % hashlib.sha256(tdata).hexdigest())
        self.ima.append(struct.pack("<I", 10) + hashlib.sha1(tdata).digest() + struct.pack("<I", 6) +
                        b"ima-ng" + struct.pack("<I", len(tdata)) + tdata)

    def event_log(self):
        data = (b"Spec ID Event03\0" + struct.pack("<IBBBB", 0, 0, 2, 0, 2) + struct.pack("<I", 1) +
                struct.pack("<HH", 0x000B, 32) + b"\0")
        out = struct.pack("<II", 0, 3) + b"\0" * 20 + struct.pack("<I", len(data)) + data
        for pcr, typ, dig, d in self.log:
            out += struct.pack("<III", pcr, typ, 1) + struct.pack("<H", 0x000B) + dig + struct.pack("<I", len(d)) + d
        return out

    def boot(self):
        """Firmware, shim and grub, the separators; IMA's boot_aggregate and bash."""
        self.measure(0, 0x8, b"swtpm firmware 1.0")
        self.measure(4, 0x80000003, b"shim 15.7")
        self.measure(4, 0x80000003, b"grub 2.06")
        for p in range(8):
            self.measure(p, 0x4, b"\0\0\0\0")
        self.ima_measure("boot_aggregate", b"aggregate")
        self.ima_measure("/usr/bin/bash", b"bash 5.2")

    def quote(self, ch):
        """Round 2's quote fields over round 1's PCRs and nonce."""
        sel = "sha256:" + ",".join(str(p) for p in ch["pcrs"])
        qual = hashlib.sha256(b"bc_join/attest" + unb64u(ch["nonce"])).hexdigest()
        self.run("tpm2_pcrread", sel, "-o", "pcrs.bin")
        vals = self.rd("pcrs.bin")
        self.run("tpm2_quote", "-c", self.handle, "-l", sel, "-q", qual, "-m", "q.attest", "-s", "q.sig",
                 "-g", "sha256")
        return {"akPub": b64u(self.akpub), "quote": b64u(self.rd("q.attest")),
                "quoteSignature": b64u(self.rd("q.sig")),
                "pcrValues": {"sha256": {str(p): vals[32 * i:32 * i + 32].hex() for i, p in enumerate(ch["pcrs"])}}}


class Env(ClusterEnv):
    tpm = None

    def stop_processes(self):
        if self.tpm is not None:
            self.tpm.stop()


def connect():
    c = psycopg2.connect(dbname=DB)
    c.autocommit = True
    return c


def reconnect(deadline):
    """A connection, retried while the postmaster restarts the backends."""
    while True:
        try:
            return connect()
        except psycopg2.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def one(conn, sql, *args):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def setup(env):
    env.start_cluster("attestcrash")
    os.environ.update(env.pgenv)
    os.environ["PGDATABASE"] = env.db


def body(tap, env):
    tpm = env.tpm = Tpm(os.path.join(env.dir, "tpm"))
    tpm.boot()
    conn = connect()
    tok = env.token(uses=ITER + 2)
    count = [0]

    def join(c):
        count[0] += 1
        d = os.path.join(env.dir, "n%d" % count[0])
        req = subprocess.run([BCD, "join-request", "--service-keys", env.service_keys, "--token", tok,
                              "--out-dir", d], capture_output=True, check=True).stdout.decode()
        pl = json.loads(unb64u(one(c, "SELECT bc_join(%s::jsonb)", req)["response"].split(".")[1]))
        one(c, "UPDATE bc_join.node_certs SET node_key_uri = %s WHERE serial = %s RETURNING 1",
            tpm.uri, pl["serial"])
        return {"dir": d, "serial": pl["serial"], "node": pl["nodeId"]}

    def proof(n):
        b = json.dumps({"purpose": "attest", "serial": n["serial"], "iat": int(time.time())})
        return subprocess.run([JOSE, "sign", os.path.join(n["dir"], "node.key")], input=b.encode(),
                              capture_output=True, check=True).stdout.decode().strip()

    def round1(c, n):
        r = one(c, "SELECT bc_join.attest(%s::jsonb)", json.dumps({"proof": proof(n)}))
        return json.loads(unb64u(r["response"].split(".")[1]))

    def round2_req(n, ch):
        req = {"proof": proof(n), "state": ch["state"], "eventLog": b64u(tpm.event_log()),
               "ima": {"offset": ch["imaOffset"], "entries": b64u(b"".join(tpm.ima[ch["imaOffset"]:]))}}
        req.update(tpm.quote(ch))
        return json.dumps(req)

    # Observe mode, promote, enforce.
    n0 = join(conn)
    r = one(conn, "SELECT bc_join.attest(%s::jsonb)", round2_req(n0, round1(conn, n0)))
    tap.eq(r.get("status"), "attested", "a first node attests in observe mode")
    one(conn, "SELECT bc_join.promote_observations(%s)", env.pool)
    one(conn, "SELECT (bc_join.set_attestation_settings(%s, mode => 'enforce')).mode", env.pool)

    # T: an unkilled quarantining round 2.
    tpm.ima_measure("/tmp/evil-0", b"evil 0")
    n = join(conn)
    req = round2_req(n, round1(conn, n))
    t0 = time.time()
    r = one(conn, "SELECT bc_join.attest(%s::jsonb)", req)
    T = time.time() - t0
    tap.eq(r.get("status"), "quarantined", "in enforce mode a file not in the IMA policy quarantines "
           "(an unkilled round 2 took %.0f ms)" % (T * 1000))

    def observe(c, n):
        """(quarantined, live certs, certs revoked attestation-failed, events, audit rows) of n."""
        with c.cursor() as cur:
            cur.execute(
                "SELECT coalesce((SELECT state = 'quarantined' FROM bc_join.node_attestation WHERE node_id = %(n)s), false),"
                " (SELECT count(*) FROM bc_join.node_certs WHERE node_id = %(n)s AND revoked_at IS NULL),"
                " (SELECT count(*) FROM bc_join.node_certs WHERE node_id = %(n)s"
                "   AND revocation_reason = 'attestation-failed'),"
                " (SELECT count(*) FROM bc_join.events WHERE type = 'node.quarantined' AND payload->>'nodeId' = %(n)s),"
                " (SELECT count(*) FROM bc_join.audit_log WHERE action = 'node.quarantine' AND node_id = %(n)s)",
                {"n": n["node"]})
            return tuple(cur.fetchone())

    ALL, NONE = (True, 0, 1, 1, 1), (False, 1, 0, 0, 0)
    tap.eq(observe(conn, n), ALL, "unkilled: quarantined, certificate revoked, event and audit row")
    conn.close()

    counts = {"before": 0, "after": 0, "answered": 0}
    mixes = []
    for i in range(1, ITER + 1):
        tpm.ima_measure("/tmp/evil-%d" % i, b"evil %d" % i)
        c = reconnect(time.time() + 60)
        n = join(c)
        req = round2_req(n, round1(c, n))
        pid = one(c, "SELECT pg_backend_pid()")
        # stratified over 0..3T: every iteration its own slice, so both sides of the commit are hit
        delay = random.uniform((i - 1) / ITER, i / ITER) * 3 * T
        killer = threading.Timer(delay, lambda: os.kill(pid, signal.SIGKILL))
        answered = False
        try:
            killer.start()
            r = one(c, "SELECT bc_join.attest(%s::jsonb)", req)
            answered = r.get("status") == "quarantined"
        except psycopg2.Error:
            pass
        killer.join()
        try:
            c.close()
        except psycopg2.Error:
            pass
        # The postmaster restarts every backend after the SIGKILL: wait until
        # a connection answers again.
        deadline = time.time() + 60
        while True:
            try:
                c = reconnect(deadline)
                got = observe(c, n)
                break
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        c.close()
        if got == ALL:
            counts["answered" if answered else "after"] += 1
        elif got == NONE:
            counts["before"] += 1
        else:
            mixes.append("iteration %d (kill after %.0f ms): %r" % (i, delay * 1000, got))
    tap.note("%d kills in 0..3T = 0..%.0f ms: %d before the commit (nothing kept), %d after it "
             "(all kept, answer lost), %d after the answer" % (ITER, 3 * T * 1000, counts["before"],
                                                              counts["after"], counts["answered"]))
    tap.ok(not mixes, "every killed round 2 left all of the quarantine or none of it "
           "(quarantined, revoked attestation-failed, event, audit row)", "\n".join(mixes))
    tap.ok(counts["before"] > 0 and counts["after"] + counts["answered"] > 0,
           "kills landed both before and after the commit")
    c = reconnect(time.time() + 60)
    tap.eq(one(c, "SELECT bc_join.verify_audit_log()"), True, "the audit chain verifies after the kills")
    c.close()


if __name__ == "__main__":
    run(Env("bcj-attestcrash.", DB, "attestcrash.bc-join.local"), setup, body)
