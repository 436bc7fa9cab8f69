#!/usr/bin/python3
"""attest.t: bc_join.attest(), continuous attestation, against a real swtpm.

Every quote is made by tpm2_quote with an ECDSA AK kept at a persistent
handle of a swtpm; the UEFI event logs are written here in the TCG
crypto-agile format with the swtpm's PCRs extended to match (tpm2_pcrextend),
and the IMA lists in the ima-ng binary format with PCR 10 extended likewise.
The nodes join with a join token (bcd join-request); their certificate is
then given the AK's statement (urn:bc:tpm-ak:sha256:<Name>) as a tpm join
would write it, and every proof is signed with the real node key (jose-tool).

Shows: the two rounds; observe mode records, promote_observations, enforce;
the refusals that prove nothing about the machine (replayed state, a quote
for another nonce, another node's state or AK, PCR values not the quoted
ones, a truncated log, a wrong IMA offset) leave a healthy node healthy and
its certificates good; what the TPM signed and fails (a new boot component
against the policy, a log not replaying to the quoted PCRs, an unknown file
in IMA, the TPM clock behind the kept one) quarantines the node in one
transaction (certificates revoked attestation-failed, event, audit, NOTIFY);
a quarantined node is refused renewals and sessions, keeps attesting, and is
readmitted after a passing quote; a reboot (swtpm power cycle: resetCount
up) is accepted with a new log; attestation_sweep() finds missed intervals.
bc_join.metrics()'s bc_join_attestation_failures_total counts each failing
round by its reason, and not the refusals that prove nothing (issue 48).
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import base64, hashlib, json, os, select, shutil, struct, subprocess, sys, time, zlib
import psycopg2
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import bctest
import tcglog
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

TOP = bctest.TOP
bcd, keys, jose = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"], os.environ["BCJ_JOSE_TOOL"]
sdb = bctest.SharedDb("attest")
scratch, db, cur, one = sdb.scratch, sdb.db, sdb.cur, sdb.one
tenant, site, pool = sdb.tenant("attest")


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


# ------------------------------------------------------------------ swtpm
tpmdir = os.path.join(scratch, "tpm")
os.makedirs(os.path.join(tpmdir, "state"))
swtpm = None


def swtpm_start():
    global swtpm
    for _ in range(8):
        port = bctest.free_port(2)
        swtpm = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", "dir=" + os.path.join(tpmdir, "state"),
             "--server", "type=tcp,port=%d,bindaddr=127.0.0.1" % port,
             "--ctrl", "type=tcp,port=%d,bindaddr=127.0.0.1" % (port + 1),
             "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["TPM2TOOLS_TCTI"] = "swtpm:host=127.0.0.1,port=%d" % port
        for _ in range(50):
            if subprocess.run(["tpm2_getrandom", "1"], capture_output=True).returncode == 0:
                return port
            time.sleep(0.1)
        swtpm.kill()
        swtpm.wait()
    raise SystemExit("swtpm did not start")


def tpm(*args, out=False):
    r = subprocess.run(list(args), capture_output=True, cwd=tpmdir)
    subprocess.run(["tpm2_flushcontext", "-t"], capture_output=True, cwd=tpmdir)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.decode()))
    return r.stdout if out else None


def rd(name):
    with open(os.path.join(tpmdir, name), "rb") as f:
        return f.read()


def swtpm_stop():
    if swtpm is not None and swtpm.poll() is None:
        swtpm.kill()
        swtpm.wait()


import atexit
atexit.register(swtpm_stop)     # however the script ends
port = swtpm_start()
tpm("tpm2_createek", "-G", "ecc", "-c", "ek.ctx", "-u", "ek.pub")
AKS = {}
for ak, handle in (("akA", "0x81010002"), ("akB", "0x81010003")):
    tpm("tpm2_createak", "-C", "ek.ctx", "-c", ak + ".ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
        "-u", ak + ".pub", "-n", ak + ".name")
    tpm("tpm2_evictcontrol", "-c", ak + ".ctx", handle)
    AKS[ak] = (handle, rd(ak + ".pub"), "urn:bc:tpm-ak:sha256:" + rd(ak + ".name")[2:].hex())

# ---------------------------------------------------------- logs, written here
EV = {"EV_S_CRTM_VERSION": 0x8, "EV_SEPARATOR": 0x4, "EV_EFI_BOOT_SERVICES_APPLICATION": 0x80000003,
      "EV_POST_CODE": 0x1}
log_events = []     # (pcr, type, sha256 digest, data)


def event_log(events=None):
    """The crypto-agile log (sha256 bank) of log_events, written by test/tools/tcglog.py."""
    return tcglog.spec_id(["sha256"]) + b"".join(
        tcglog.event2(["sha256"], pcr, typ, data) for pcr, typ, _, data in (log_events if events is None else events))


def event_data(typ, label):
    """The event data a firmware would log for label: a UTF-16LE string for
    EV_S_CRTM_VERSION, a UEFI_IMAGE_LOAD_EVENT for a boot services application,
    the bytes as they are otherwise (so tpm2_eventlog decodes every event)."""
    if typ == "EV_S_CRTM_VERSION":
        return (label.decode() + "\0").encode("utf-16-le")
    if typ == "EV_EFI_BOOT_SERVICES_APPLICATION":
        return tcglog.image_load(zlib.crc32(label) & 0xffff)
    return label


def measure(pcr, typ, label, extend=True, log=True):
    """An event: SHA-256 of its data (event_data(typ, label)) extended into the swtpm and logged."""
    data = event_data(typ, label)
    dig = hashlib.sha256(data).digest()
    if extend:
        tpm("tpm2_pcrextend", "%d:sha256=%s" % (pcr, dig.hex()))
    if log:
        log_events.append((pcr, EV[typ], dig, data))
    return dig


ima_entries = []    # binary ima-ng entries, in order


def ima_measure(path, content, extend=True):
    fd = hashlib.sha256(content).digest()
    dng = b"sha256:\0" + fd
    nng = path.encode() + b"\0"
    tdata = struct.pack("<I", len(dng)) + dng + struct.pack("<I", len(nng)) + nng
    entry = (struct.pack("<I", 10) + hashlib.sha1(tdata).digest() + struct.pack("<I", 6) + b"ima-ng" +
             struct.pack("<I", len(tdata)) + tdata)
    if extend:
        tpm("tpm2_pcrextend", "10:sha256=%s" % hashlib.sha256(tdata).hexdigest())
    ima_entries.append(entry)
    return fd


def boot():
    """A boot: firmware, shim and kernel measured, the separators."""
    del log_events[:]
    del ima_entries[:]
    measure(0, "EV_S_CRTM_VERSION", b"swtpm firmware 1.0")
    measure(4, "EV_EFI_BOOT_SERVICES_APPLICATION", b"shim 15.7")
    measure(4, "EV_EFI_BOOT_SERVICES_APPLICATION", b"grub 2.06")
    for p in range(8):
        measure(p, "EV_SEPARATOR", b"\0\0\0\0")
    ima_measure("boot_aggregate", b"aggregate")
    ima_measure("/usr/bin/bash", b"bash 5.2")


boot()

# ------------------------------------------------------------ nodes and proofs
tok = one("SELECT bc_join.create_join_token(%s, %s, uses => 10)", tenant, pool)
NODES = {}


def join(name, ak):
    d = os.path.join(scratch, name)
    req = subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", tok, "--out-dir", d],
                         capture_output=True, check=True).stdout.decode()
    r = one("SELECT bc_join(%s::jsonb)", req)
    pl = json.loads(unb64u(r["response"].split(".")[1]))
    cur.execute("UPDATE bc_join.node_certs SET node_key_uri = %s WHERE serial = %s", (AKS[ak][2], pl["serial"]))
    NODES[name] = {"dir": d, "serial": pl["serial"], "node": pl["nodeId"], "ak": ak}
    return NODES[name]


def proof(n, iat=None):
    body = json.dumps({"purpose": "attest", "serial": n["serial"], "iat": int(iat or time.time())})
    return subprocess.run([jose, "sign", os.path.join(n["dir"], "node.key")], input=body.encode(),
                          capture_output=True, check=True).stdout.decode().strip()


def payload(resp):
    return json.loads(unb64u(resp["response"].split(".")[1]))


def attest(req):
    return one("SELECT bc_join.attest(%s::jsonb)", json.dumps(req))


def last_refusal():
    return one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
               "ORDER BY id DESC LIMIT 1")


def round1(n):
    r = attest({"proof": proof(n)})
    return payload(r) if r.get("status") == "challenge" else r


def quote(n, ch, ak=None):
    """Quote by the node's AK (or ak) over round 1's PCRs for its nonce; the pcrValues."""
    handle, pub, _ = AKS[ak or n["ak"]]
    sel = "sha256:" + ",".join(str(p) for p in ch["pcrs"])
    qual = hashlib.sha256(b"bc_join/attest" + unb64u(ch["nonce"])).hexdigest()
    tpm("tpm2_pcrread", sel, "-o", "pcrs.bin")
    vals = rd("pcrs.bin")
    tpm("tpm2_quote", "-c", handle, "-l", sel, "-q", qual, "-m", "q.attest", "-s", "q.sig", "-g", "sha256")
    pv = {str(p): vals[32 * i:32 * i + 32].hex() for i, p in enumerate(ch["pcrs"])}
    return {"akPub": b64u(pub), "quote": b64u(rd("q.attest")), "quoteSignature": b64u(rd("q.sig")),
            "pcrValues": {"sha256": pv}}


def round2(n, ch, log=True, ima_from=None, **over):
    req = {"proof": proof(n), "state": ch["state"]}
    req.update(quote(n, ch))
    if log:
        req["eventLog"] = b64u(event_log())
    off = ch["imaOffset"] if ima_from is None else ima_from
    if off >= 0:
        req["ima"] = {"offset": off, "entries": b64u(b"".join(ima_entries[off:]))}
    req.update(over)
    return attest(req)


def cycle(n, **kw):
    ch = round1(n)
    return round2(n, ch, **kw), ch


def state(n):
    return one("SELECT state FROM bc_join.node_attestation WHERE node_id = %s", n["node"])


def live_certs(n):
    return one("SELECT count(*) FROM bc_join.node_certs WHERE node_id = %s AND revoked_at IS NULL", n["node"])


A = join("a", "akA")
B = join("b", "akB")

G = join("g", "akA")
cur.execute("UPDATE bc_join.node_certs SET node_key_uri = NULL WHERE serial = %s", (G["serial"],))
r = attest({"proof": proof(G)})
eq((r.get("status"), last_refusal()), ("refused", "attest:not-tpm-bound"),
   "a node whose certificate carries no TPM statement is refused")

# ------------------------------------------------------------- observe mode
ch = round1(A)
eq(ch.get("status"), "challenge", "round 1 answers a signed challenge")
eq((ch["pcrs"], ch["bank"], ch["imaOffset"], ch["intervalSeconds"]), ([0, 1, 2, 3, 4, 5, 6, 7, 10], "sha256", 0, 60),
   "the PCRs of the pool's default (0-7) and IMA's 10, SHA-256, IMA from 0, every 60 s")
eq(len(unb64u(ch["nonce"])), 32, "a 32-byte nonce")
eq(one("SELECT count(*) FROM bc_join.node_attestation"), 0, "round 1 writes no attestation state")
r = round2(A, ch)
eq((r.get("status"), payload(r).get("imaOffset"), payload(r).get("nextSeconds"), payload(r).get("nonce")),
   ("attested", 2, 60, ch["nonce"]),
   "round 2 with the quote, the event log and the IMA list is attested (the answer names round 1's nonce); IMA accepted up to entry 2")
eq(state(A), "healthy", "the node is healthy")
eq(one("SELECT count(*) FROM bc_join.boot_observations WHERE node_id = %s", A["node"]), 11,
   "observe mode recorded the 11 distinct boot events of PCRs 0-7")
eq(one("SELECT array_agg(path ORDER BY path) FROM bc_join.ima_observations WHERE node_id = %s", A["node"]),
   ["/usr/bin/bash", "boot_aggregate"], "and the files IMA measured")
eq(one("SELECT reset_count IS NOT NULL AND clock > 0 FROM bc_join.node_attestation WHERE node_id = %s", A["node"]),
   True, "the TPM's clockInfo is kept")

# An increment: one more file, only the new entry sent.
ima_measure("/usr/bin/ls", b"ls 9.1")
r, ch = cycle(A)
eq((ch["imaOffset"], r.get("status"), payload(r)["imaOffset"]), (2, "attested", 3),
   "the next cycle sends the IMA list from offset 2; accepted up to 3 from the kept PCR 10")

# bc_join_attestation_failures_total of bc_join.metrics() (issue 48), by reason: only what
# the machine sent failing counts (this is the one script whose rounds attest on this cluster)
def failures():
    text = one("SELECT bc_join.metrics()")
    return {l.split('"')[1]: int(l.split()[-1]) for l in text.splitlines()
            if l.startswith("bc_join_attestation_failures_total{")}


def failed_since(before):
    now = failures()
    return {k: now[k] - before.get(k, 0) for k in now if now[k] != before.get(k, 0)}


fail0 = failures()

# ------------------------------------------- refusals that prove nothing about the machine
ch = round1(A)
good = quote(A, ch)
r = round2(A, ch)
eq(r.get("status"), "attested", "a cycle passes")
r = attest(dict({"proof": proof(A), "state": ch["state"], "eventLog": b64u(event_log())}, **good))
eq((r.get("status"), last_refusal()), ("refused", "attest:nonce-reused"), "its state again (a replay) is refused")
ch2 = round1(A)
r = attest(dict({"proof": proof(A), "state": ch2["state"], "eventLog": b64u(event_log())}, **good))
eq((r.get("status"), last_refusal()), ("refused", "attest:quote-nonce"),
   "an old quote (another nonce) with a fresh state is refused")
chB = round1(B)
r = attest(dict({"proof": proof(A), "state": chB["state"]}, **quote(B, chB)))
eq((r.get("status"), last_refusal()), ("refused", "attest:state-mismatch"),
   "another node's state and quote is refused")
ch3 = round1(A)
r = attest(dict({"proof": proof(A), "state": ch3["state"]}, **quote(A, ch3, ak="akB")))
eq((r.get("status"), last_refusal()), ("refused", "attest:ak-mismatch"),
   "a quote by another AK than the certificate's is refused")
ch4 = round1(A)
q = quote(A, ch4)
q["pcrValues"]["sha256"]["4"] = "00" * 32
r = attest(dict({"proof": proof(A), "state": ch4["state"]}, **q))
eq((r.get("status"), last_refusal()), ("refused", "attest:pcr-digest"),
   "PCR values that are not the quoted ones are refused")
ch5 = round1(A)
r = round2(A, ch5, eventLog=b64u(event_log()[:-7]))
eq((r.get("status"), last_refusal()), ("refused", "attest:eventlog-truncated"), "a truncated event log is refused")
ch6 = round1(A)
r = round2(A, ch6, ima_from=1)
eq((r.get("status"), last_refusal()), ("refused", "attest:ima-offset"),
   "an IMA increment from another offset than the one told is refused")
ch7 = round1(A)
cur.execute("SET bc_join.clock_offset = 120")
r = round2(A, ch7)
cur.execute("RESET bc_join.clock_offset")
eq((r.get("status"), last_refusal()), ("refused", "attest:challenge-expired"),
   "a round 2 after the state's notAfter (60 s) is refused")
r = attest({"proof": proof(A, iat=time.time() - 3600)})
eq((r.get("status"), last_refusal()), ("refused", "attest:stale-proof"), "a stale proof is refused")
eq((state(A), live_certs(A), one("SELECT count(*) FROM bc_join.events WHERE type = 'node.quarantined'")),
   ("healthy", 1, 0), "none of these refusals quarantined the node or revoked its certificate")
r, _ = cycle(A)
eq(r.get("status"), "attested", "and the node attests on")
eq(failed_since(fail0), {"quote": 3, "eventlog": 1, "ima": 1},
   "metrics: the other nonce, AK and PCR values count as quote failures, the truncated log and the "
   "IMA offset as eventlog and ima; a replay, a foreign state, an expired state or a stale proof not at all")

# ------------------------------------------------------- promote, enforce
n_rows = one("SELECT bc_join.promote_observations(%s)", pool)
ok(n_rows >= 13, "promote_observations copies the observations into the policy (%d rows)" % n_rows)
bad_settings = []
for args in ("mode => 'audit'", "interval_seconds => 4", "interval_seconds => 3601", "pcrs => '{24}'",
             "pcrs => '{}'", "on_missed => 'ignore'", "missed_intervals => 0"):
    try:
        cur.execute("SELECT bc_join.set_attestation_settings(%%s, %s)" % args, (pool,))
        bad_settings.append(args)
    except psycopg2.Error as e:
        if e.pgcode != "23514":
            bad_settings.append(args + " " + str(e.pgcode))
eq(bad_settings, [], "settings out of bounds are refused (23514): mode, interval 5..3600, PCRs 0..23, on_missed")
one("SELECT (bc_join.set_attestation_settings(%s, mode => 'enforce', interval_seconds => 30)).mode", pool)
r, ch = cycle(A)
eq((r.get("status"), payload(r)["nextSeconds"]), ("attested", 30), "enforce mode: the same boot passes, interval 30 s")
r, ch = cycle(A, log=False)
eq((r.get("status"), last_refusal()), ("refused", "attest:eventlog-missing"),
   "enforce mode: a quote without the event log is refused (not quarantined)")
r, ch = cycle(A, ima_from=-1)
eq((r.get("status"), last_refusal()), ("refused", "attest:ima-missing"),
   "enforce mode: a quote whose PCR 10 moved, without the IMA list, is refused (not quarantined)")
eq(state(A), "healthy", "still healthy")

# ------------------------------------------- drift: a new bootloader, in one transaction
listener = psycopg2.connect(dbname=sdb.dbname)
listener.autocommit = True
listener.cursor().execute("LISTEN bc_join_crl")
chan = one("SELECT bc_join.request_channel(%s)", tenant)
listener.cursor().execute('LISTEN "%s"' % chan)
sess_before = one("SELECT count(*) FROM bc_join.node_certs WHERE node_id = %s", A["node"])
new_grub = measure(4, "EV_EFI_BOOT_SERVICES_APPLICATION", b"grub 2.12 (unknown)")
r, ch = cycle(A)
eq((r.get("status"), payload(r).get("reason")), ("quarantined", "attestation-failed"),
   "a boot event the policy does not allow: the answer is quarantined (signed)")
eq(state(A), "quarantined", "the node is quarantined")
eq(one("SELECT array_agg(DISTINCT revocation_reason) FROM bc_join.node_certs WHERE node_id = %s", A["node"]),
   ["attestation-failed"], "its certificates are revoked, reason attestation-failed")
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1")
eq((ev["reason"], ev["detail"]["pcr"], ev["detail"]["eventType"], ev["detail"]["digest"], ev["revokedSerials"]),
   ("boot-policy", 4, "EV_EFI_BOOT_SERVICES_APPLICATION", new_grub.hex(), [A["serial"]]),
   "the event node.quarantined says what failed: PCR, event type, digest; and the serials revoked")
cur.execute("SELECT count(DISTINCT x) FROM ("
       " SELECT xmin::text AS x FROM bc_join.node_certs WHERE node_id = %(n)s UNION ALL"
       " SELECT xmin::text FROM bc_join.node_attestation WHERE node_id = %(n)s UNION ALL"
       " SELECT xmin::text FROM bc_join.events WHERE type = 'node.quarantined' AND payload->>'nodeId' = %(n)s UNION ALL"
       " SELECT xmin::text FROM bc_join.audit_log WHERE action = 'node.quarantine' AND node_id = %(n)s) x",
       {"n": A["node"]})
eq(cur.fetchone()[0], 1,
   "revocation, quarantine, event and audit row were written by one transaction (one xmin)")
eq(one("SELECT count(*) FROM bc_join.revoked_certificates WHERE serial = %s", A["serial"]), 1,
   "the certificate is in the revoked list the CRL is made from")
got = set()
deadline = time.time() + 5
while len(got) < 2 and time.time() < deadline:
    select.select([listener], [], [], 0.5)
    listener.poll()
    while listener.notifies:
        got.add(listener.notifies.pop().channel)
eq(got, {"bc_join_crl", chan}, "NOTIFY went to the gateways' CRL channel and the tenant's request channel")
crl = subprocess.run(["openssl", "crl", "-inform", "DER", "-noout", "-text"],
                     input=bytes(one("SELECT bc_join.crl()")), capture_output=True).stdout.decode()
ok(A["serial"].upper() in crl.upper().replace(":", "") and "Privilege Withdrawn" in crl,
   "the CRL lists the serial, reason privilegeWithdrawn")
cur.execute("SELECT bc_join.audit_log_problems(100)")
eq(cur.fetchall(), [], "the audit log still verifies")

# A quarantined node: renewals and sessions refused, it keeps attesting.
rq = subprocess.run([bcd, "join-request", "--service-keys", keys, "--out-dir", os.path.join(scratch, "a-new")],
                    capture_output=True, check=True).stdout.decode()
csr = json.loads(rq)["csr"]
body = json.dumps({"purpose": "renew", "serial": A["serial"],
                   "csrSha256": b64u(hashlib.sha256(unb64u(csr)).digest()), "iat": int(time.time())})
pr = subprocess.run([jose, "sign", os.path.join(A["dir"], "node.key")], input=body.encode(),
                    capture_output=True, check=True).stdout.decode().strip()
r = one("SELECT bc_join.renew(%s::jsonb)", json.dumps({"csr": csr, "proof": pr}))
eq((r.get("status"), last_refusal()), ("refused", "renew:quarantined"), "a quarantined node's renewal is refused")
body = json.dumps({"purpose": "session", "serial": A["serial"], "session": "s1", "context": "c",
                   "csrSha256": b64u(hashlib.sha256(unb64u(csr)).digest()), "iat": int(time.time())})
pr = subprocess.run([jose, "sign", os.path.join(A["dir"], "node.key")], input=body.encode(),
                    capture_output=True, check=True).stdout.decode().strip()
r = one("SELECT bc_join.issue_session(%s::jsonb)", json.dumps({"csr": csr, "proof": pr}))
eq((r.get("status"), last_refusal()), ("refused", "session:quarantined"), "and its session request")
r, ch = cycle(A)
eq((r.get("status"), state(A)), ("quarantined", "quarantined"), "it keeps attesting, and is still quarantined")
try:
    cur.execute("SELECT bc_join.readmit_node(%s)", (A["node"],))
    ok(False, "readmit_node refuses without a passing quote")
except psycopg2.Error as e:
    eq(e.pgcode, "55000", "readmit_node refuses without a passing quote since the quarantine")
# The staged update: the operator allows the new grub; the next quote passes; readmitted.
cur.execute("INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest, note) "
            "VALUES (%s, %s, 4, 'EV_EFI_BOOT_SERVICES_APPLICATION', %s, 'grub 2.12')",
            (tenant, pool, psycopg2.Binary(new_grub)))
r, ch = cycle(A)
eq((r.get("status"), one("SELECT last_result FROM bc_join.node_attestation WHERE node_id = %s", A["node"])),
   ("quarantined", "passed"), "after the policy allows it the quote passes; the node stays quarantined until readmitted")
cur.execute("SELECT bc_join.readmit_node(%s)", (A["node"],))
eq((state(A), one("SELECT count(*) FROM bc_join.events WHERE type = 'node.readmitted'"), live_certs(A)),
   ("healthy", 1, 0), "readmit_node: healthy again, evented; the revoked certificates stay revoked")

# ------------------------------------------------ IMA drift and a log that does not replay (node B)
r, _ = cycle(B, ima_from=0)
eq(r.get("status"), "attested", "node B attests under the enforced policy")
ima_measure("/tmp/evil", b"not allowed")
r, _ = cycle(B)
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1")
eq((r.get("status"), ev["reason"], ev["detail"]["path"]), ("quarantined", "ima-policy", "/tmp/evil"),
   "an unknown file measured into IMA quarantines the node, the event names the path")

ptok = one("SELECT bc_join.create_provisioning_token(%s)", B["node"])
evf = os.path.join(scratch, "prov.json")
with open(evf, "w") as f:
    json.dump({"nodeId": B["node"]}, f)
rq = subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", ptok, "--attestor", "provisioned",
                     "--attestation-file", evf, "--out-dir", os.path.join(scratch, "b-again")],
                    capture_output=True, check=True).stdout.decode()
r = one("SELECT bc_join(%s::jsonb)", rq)
eq((r.get("status"), last_refusal()), ("refused", "join:quarantined"),
   "a quarantined node cannot join again as itself (provisioned re-key) before it is readmitted")

C = join("c", "akB")
cur.execute("INSERT INTO bc_join.ima_policy (tenant_id, path, digest) VALUES (%s, '/tmp/evil', %s)",
            (tenant, psycopg2.Binary(hashlib.sha256(b"not allowed").digest())))
r, _ = cycle(C, ima_from=0)
eq(r.get("status"), "attested", "node C (same TPM) attests")
measure(5, "EV_POST_CODE", b"unlogged", log=False)
r, _ = cycle(C)
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1")
eq((r.get("status"), ev["reason"], ev["detail"]["pcr"]), ("quarantined", "eventlog-replay", 5),
   "a PCR extended without its log event: the log does not replay, the node is quarantined")

# ---------------------------------------------------------------- the TPM clock
D = join("d", "akA")
log_events.append((5, EV["EV_POST_CODE"], hashlib.sha256(b"unlogged").digest(), b"unlogged"))
cur.execute("INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest) "
            "VALUES (%s, NULL, 5, 'EV_POST_CODE', %s)", (tenant, psycopg2.Binary(hashlib.sha256(b"unlogged").digest())))
r, _ = cycle(D, ima_from=0)
eq(r.get("status"), "attested", "node D attests (the log carries the event again)")
# A reboot: power cycle the swtpm; resetCount goes up, the PCRs start over.
rc0 = one("SELECT reset_count FROM bc_join.node_attestation WHERE node_id = %s", D["node"])
subprocess.run(["swtpm_ioctl", "--tcp", "127.0.0.1:%d" % (port + 1), "-i"], capture_output=True, check=True)
try:
    tpm("tpm2_startup", "-c")
except RuntimeError:
    pass
boot()
measure(4, "EV_EFI_BOOT_SERVICES_APPLICATION", b"grub 2.12 (unknown)")
measure(5, "EV_POST_CODE", b"unlogged")
# An independent parser agrees: tpm2_eventlog (tpm2-tools) decodes every event of this log
# and replays it to the PCRs bc_join.replay_event_log gives (PCRs 0-7 only: none of the
# places where tpm2_eventlog 5.4 departs from the spec, see eventlog.t).
with open(os.path.join(scratch, "attest.log"), "wb") as f:
    f.write(event_log())
te = subprocess.run(["tpm2_eventlog", os.path.join(scratch, "attest.log")], capture_output=True, text=True)
theirs = {str(i): "%064x" % v if isinstance(v, int) else v[2:].lower()
          for i, v in ((yaml.safe_load(te.stdout) or {}).get("pcrs") or {}).get("sha256", {}).items()} \
    if te.returncode == 0 else {}
ours = one("SELECT bc_join.replay_event_log(%s)->'pcrs'->'sha256'", psycopg2.Binary(event_log()))
eq((te.returncode, theirs), (0, ours), "tpm2_eventlog decodes the log and replays it to bc_join.replay_event_log's PCRs")
r, ch = cycle(D)
eq((ch["imaOffset"], r.get("status"), payload(r)["imaOffset"],
    one("SELECT reset_count FROM bc_join.node_attestation WHERE node_id = %s", D["node"]) > rc0),
   (4, "attested", 0, True),
   "a reboot (resetCount up, a new log) is accepted; the old list's increment is not replayed, IMA starts over at 0")
r, ch = cycle(D)
eq((ch["imaOffset"], r.get("status"), payload(r)["imaOffset"]), (0, "attested", 2),
   "the next cycle replays the new IMA list from 0")
cur.execute("UPDATE bc_join.node_attestation SET clock = clock + 100000000 WHERE node_id = %s", (D["node"],))
r, _ = cycle(D)
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1")
eq((r.get("status"), ev["reason"]), ("quarantined", "clock-rollback"),
   "a quote whose TPM clock is behind the kept one (same boot) quarantines")
eq(failed_since(fail0), {"quote": 3, "eventlog": 2, "ima": 2, "boot-policy": 2, "ima-policy": 1,
                         "eventlog-replay": 1, "clock-rollback": 1},
   "metrics: every failing round by its reason (the quarantined node's next quote failed the boot "
   "policy again: twice), the enforce-mode refusals (log, IMA list missing) too")

# ------------------------------------------------- a tenant operator of another tenant
other, _, _ = sdb.tenant("attest-other")
cur.execute("DROP ROLE IF EXISTS bcj_attest_op")
cur.execute("CREATE ROLE bcj_attest_op")
cur.execute("SELECT bc_join.grant_tenant_operator('bcj_attest_op', %s)", (other,))
cur.execute("SET ROLE bcj_attest_op")
denied = []
for sql, args in (("SELECT bc_join.readmit_node(%s)", (A["node"],)),
                  ("SELECT bc_join.set_attestation_settings(%s, mode => 'observe')", (pool,)),
                  ("SELECT bc_join.promote_observations(%s)", (pool,)),
                  ("INSERT INTO bc_join.boot_policy (tenant_id, pcr, event_type, digest) VALUES (%s, 4, 'EV_IPL', %s)",
                   (tenant, psycopg2.Binary(b"\0" * 32)))):
    try:
        cur.execute(sql, args)
        denied.append("allowed")
    except psycopg2.Error as e:
        denied.append(e.pgcode)
cur.execute("SELECT (SELECT count(*) FROM bc_join.node_attestation) + (SELECT count(*) FROM bc_join.boot_policy) "
            "+ (SELECT count(*) FROM bc_join.attestation_state)")
seen_rows = cur.fetchone()[0]
cur.execute("RESET ROLE")
eq((denied, seen_rows), (["42501"] * 4, 0),
   "another tenant's operator can neither readmit, set, promote nor write policy rows here, and reads none of them")

# --------------------------------------------------------------- the sweep
E = join("e", "akA")
r, _ = cycle(E, ima_from=0)
eq(r.get("status"), "attested", "node E attests")
cur.execute("UPDATE bc_join.node_attestation SET last_passed_at = last_passed_at - interval '10 minutes' "
            "WHERE node_id = %s", (E["node"],))
# the sweep also finds AK-bound nodes that never attested (below): those
# joined above without a quote (B) are made new again, out of this count
cur.execute("UPDATE bc_join.node_certs c SET issued_at = bc_join.compute_now() WHERE c.revoked_at IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM bc_join.node_attestation a WHERE a.node_id = c.node_id)")
eq(one("SELECT bc_join.attestation_sweep()"), 1, "attestation_sweep finds the node that missed 3 intervals")
eq((state(E), one("SELECT payload->>'action' FROM bc_join.events WHERE type = 'node.attestation.missed'")),
   ("healthy", "event"), "on_missed event: an event, no quarantine")
eq(one("SELECT bc_join.attestation_sweep()"), 0, "once per miss")
one("SELECT (bc_join.set_attestation_settings(%s, on_missed => 'revoke')).on_missed", pool)
cur.execute("UPDATE bc_join.node_attestation SET missed_reported_at = NULL WHERE node_id = %s", (E["node"],))
one("SELECT bc_join.attestation_sweep()")
eq((state(E), live_certs(E)), ("quarantined", 0), "on_missed revoke: quarantined, certificates revoked")
eq(one("SELECT count(*) FROM bc_join.attestation_state WHERE state = 'quarantined'"), 4,
   "the view shows every quarantined node")

# A node bound to an AK that never attests (compromised before its first
# quote, or bcd --no-attest) is swept too, from its certificate's issuance;
# a node whose certificate carries no TPM statement is not (G, long joined).
H = join("h", "akB")
eq((one("SELECT bc_join.attestation_sweep()"), state(H), live_certs(H)), (0, "unattested", 1),
   "an AK-bound node just joined, no quote yet: not missed (the sweep only gives it its unattested row)")
cur.execute("UPDATE bc_join.node_certs SET issued_at = issued_at - interval '10 minutes', "
            "not_before = not_before - interval '10 minutes' WHERE node_id IN (%s, %s)", (H["node"], G["node"]))
cur.execute("UPDATE bc_join.node_certs SET issued_at = bc_join.compute_now() WHERE node_id = %s", (B["node"],))
eq(one("SELECT bc_join.attestation_sweep()"), 1, "an AK-bound node without a passing quote for 3 intervals since its certificate is missed")
eq((state(H), live_certs(H),
    one("SELECT last_reason FROM bc_join.node_attestation WHERE node_id = %s", H["node"]),
    one("SELECT payload->>'reason' FROM bc_join.events WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1"),
    one("SELECT count(*) FROM bc_join.events WHERE type = 'node.attestation.missed' AND payload->>'nodeId' = %s",
        H["node"])),
   ("quarantined", 0, "missed-intervals", "missed-intervals", 1),
   "on_missed revoke: the never-attested node is quarantined, its certificate revoked, one missed event")
eq((one("SELECT bc_join.attestation_sweep()"),
    one("SELECT count(*) FROM bc_join.node_attestation WHERE node_id = %s", G["node"]), live_certs(G)), (0, 0, 1),
   "once per miss; a node whose certificate carries no TPM statement is never swept")

# ------------------------------------------------ mutated round 2s (observe mode)
# A node in a pool of its own (observe mode, where even a log that does not
# replay is only refused): its round 2, one member mutated at a time (a
# flipped byte, cut short, junk, another JSON type), answers the one refusal
# or 22023, never attested (but for event data the digests do not cover) and
# never quarantined; the server stays up.
import random
rng = random.Random(44)
pool2 = one("SELECT bc_join.create_pool(%s, %s, 'fuzz')", tenant, site)
tok2 = one("SELECT bc_join.create_join_token(%s, %s, uses => 1)", tenant, pool2)
tok, tok_saved = tok2, tok
F = join("f", "akA")
tok = tok_saved
chF = round1(F)
baseF = dict({"state": chF["state"], "eventLog": b64u(event_log()),
              "ima": {"offset": 0, "entries": b64u(b"".join(ima_entries))}}, **quote(F, chF))
fuzz_bad = []
outcomes = {}
for i in range(240):
    doc = json.loads(json.dumps(baseF))
    field = rng.choice(["quote", "quoteSignature", "akPub", "eventLog", "ima", "state", "pcrValues"])
    how = rng.choice(["flip", "flip", "flip", "cut", "junk", "type"])
    if field == "ima":
        doc["ima"]["entries"] = mut = None
        raw = b"".join(ima_entries)
    elif field == "pcrValues":
        raw = None
    else:
        raw = unb64u(doc[field]) if field != "state" else doc[field].encode()
    if how == "type":
        val = rng.choice([1, None, [], {}, "", "x" * 70000])
    elif raw is None:
        k = rng.choice(list(doc["pcrValues"]["sha256"]))
        doc["pcrValues"]["sha256"][rng.choice([k, "24", "01", "-1"])] = rng.choice(["00" * 32, "zz", "", 5])
        val = doc["pcrValues"]
    else:
        b = bytearray(raw)
        if how == "flip":
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
        elif how == "cut":
            b = b[:rng.randrange(len(b))]
        else:
            b = bytearray(rng.randbytes(rng.randrange(1, 200)))
        val = bytes(b).decode("latin-1") if field == "state" else b64u(bytes(b))
    if field == "ima":
        if how == "type":
            doc["ima"] = val
        else:
            doc["ima"]["entries"] = val
    else:
        doc[field] = val
    doc["proof"] = proof(F)
    try:
        r = attest(doc)
        st = r.get("status")
        if st == "attested" and field == "eventLog" and how == "flip":
            st = "attested (event data)"
        elif st != "refused":
            fuzz_bad.append((field, how, r))
    except psycopg2.Error as e:
        st = "raised " + str(e.pgcode)
        if e.pgcode not in ("22023", "22P05"):    # 22P05: the jsonb cast of a \u0000
            fuzz_bad.append((field, how, str(e)[:200]))
    outcomes[st] = outcomes.get(st, 0) + 1
tap.note("mutated round 2s: %s" % outcomes)
eq(fuzz_bad, [], "240 mutated round 2s: the one refusal or 22023 (22P05 from the cast), never attested by a mutation that matters")
eq((state(F) or "unattested", live_certs(F)), ("unattested", 1) if "attested (event data)" not in outcomes else
   ("healthy", 1), "and never quarantined")

listener.close()
swtpm_stop()
sys.exit(tap.done())
