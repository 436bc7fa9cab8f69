#!/usr/bin/python3
"""attest.t: bcd run --attestor tpm attests continuously through the real
gateway (POST /v1/attest) to bc_join.attest(), on a swtpm behind tpm2-abrmd
(test/lib/tpm-rm.sh, as tpm_join.t), with a UEFI event log written here in
the TCG crypto-agile format (the SpecID event alone: the swtpm's PCRs 0-7 are
zero, and so is the replay) and an IMA binary list of ima-ng entries with PCR
10 extended to match.

Shows: both rounds reach the service at the interval its pool sets (5 s
here): the node is attested (node_attestation healthy, its quote's time
moving on) while it serves session credentials; the IMA list is taken, then
only its new entries from the service's offset; an extend of PCR 4 that no
event logs (a "new bootloader") quarantines it in enforce mode within one
interval: bcd logs QUARANTINED, its Workload API ends the open
FetchX509SVID stream (PERMISSION_DENIED, saying why), the hooks' socket
refuses a session credential with the quarantine's message (no request
reaches the service), and bcd keeps attesting; after bc_join.readmit_node (the log extended to
match) bcd joins again by its TPM (the same node, a new certificate: the
quarantine revoked the old one), is attested and serves session credentials
again; a second drift soon after is quarantined and, readmitted, joins again at
once (not held back by the first readmission's join); with --no-attest no
round is sent.
"""
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib  # noqa: E402
from attestlib import (EV_SEPARATOR, attestation, event2, readmit_node, reclaim_token,  # noqa: E402
                       spec_id_log, start_tpm, stop_tpm, use_tpm, wait_for)


def ima_entry(path, content):
    """One ima-ng entry of the binary list, and the digest IMA extends PCR 10's sha256 bank with."""
    dng = b"sha256:\0" + hashlib.sha256(content).digest()
    nng = path.encode() + b"\0"
    data = struct.pack("<I", len(dng)) + dng + struct.pack("<I", len(nng)) + nng
    entry = (struct.pack("<I", 10) + hashlib.sha1(data).digest() + struct.pack("<I", 6) + b"ima-ng" +
             struct.pack("<I", len(data)) + data)
    return entry, hashlib.sha256(data).digest()


def measure(tcti, ima, files):
    """Append the files' entries to the IMA list, then extend PCR 10 with them (list first:
    the quote may lag the list, never lead it); True when every extend worked."""
    digests = []
    with open(ima, "ab") as f:
        for path, content in files:
            e, d = ima_entry(path, content)
            f.write(e)
            digests.append(d)
    for d in digests:
        x = subprocess.run(["tpm2_pcrextend", "-T", tcti, "10:sha256=" + d.hex()],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        if x.returncode != 0:
            return False
    return True


def ima_offset(env, node):
    """node_attestation.ima_offset of node."""
    return env.psql("SELECT ima_offset FROM bc_join.node_attestation WHERE node_id = '%s'" % node)


def body(tap, env):
    tap.ok(env.has_function("bc_join.attest(jsonb)"), "the installed bc_join has bc_join.attest(jsonb)")
    tpm, s = start_tpm(env)
    if not tap.ok(s.returncode == 0, "a swtpm with EK certificates behind tpm2-abrmd", s.stderr):
        return
    try:
        run_body(tap, env, tpm)
    finally:
        env.stop_processes()
        env.procs = []
        stop_tpm(tpm)


def run_body(tap, env, tpm):
    tcti = use_tpm(env, tpm)
    # a token with reclaim: a readmitted node joins again as the same node (as after a wipe)
    tok = reclaim_token(env, 5)
    state = os.path.join(env.dir, "state")
    evlog = os.path.join(env.dir, "binary_bios_measurements")
    with open(evlog, "wb") as f:
        f.write(spec_id_log())
    tpm_args = ["--attestor", "tpm", "--tcti", tcti]

    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"] + tpm_args))
    if not tap.ok(r.returncode == 0, "the node joins by its TPM", r.stdout + r.stderr):
        return
    node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    # the pool attests every 5 s (observe mode first)
    env.psql("INSERT INTO bc_join.attestation_settings (pool_id, tenant_id, interval_seconds) "
             "VALUES ('%s', '%s', 5)" % (env.pool, env.tenant))

    rt = sessionlib.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    ima = os.path.join(env.dir, "binary_runtime_measurements")
    tap.ok(measure(tcti, ima, [("/usr/bin/a", b"a"), ("/usr/bin/b", b"b"), ("/usr/bin/c", b"c")]),
           "an IMA list of 3 ima-ng entries, PCR 10 extended to match")
    args = env.run_args(state, token_file=tok, extra=tpm_args + [
        "--event-log", evlog, "--ima-log", ima])
    wsock = os.path.join(rt, "bcd", "workload.sock")
    p = sessionlib.start_daemon(env, "bcd-attest", rt, args + ["--workload-rule", "uid:0=>session=wl"])
    up = sessionlib.wait_socket(p, sock)
    tap.ok(up, "the daemon serves its socket", p.text())
    first = wait_for(lambda: attestation(env, node)[0] == "healthy", 30)
    tap.ok(first and p.wait_log("attest: attested", 10),
           "both rounds reach the service: the node is attested, and bcd says so",
           (attestation(env, node), p.text()))
    t0 = attestation(env, node)[1]
    tap.ok(wait_for(lambda: attestation(env, node)[1] > t0, 20),
           "it attests again at the pool's interval (5 s)", (attestation(env, node), p.text()))
    tap.eq(ima_offset(env, node), "3", "the service took the IMA list (offset 3)")
    measure(tcti, ima, [("/usr/bin/d", b"d"), ("/usr/bin/e", b"e")])
    tap.ok(wait_for(lambda: ima_offset(env, node) == "5" and attestation(env, node)[2] == "passed", 20),
           "two files measured later: bcd sends the entries from offset 3, the service is at 5",
           (ima_offset(env, node), attestation(env, node), p.text()))
    sess = os.path.join(rt, "sess")
    os.makedirs(sess, mode=0o700, exist_ok=True)
    h = sessionlib.hook(env, rt, sock, "s1", sess)
    tap.ok(h.returncode == 0, "an attested node serves a session credential", h.stdout + h.stderr)
    # gRPC in a child process (agentlib.Workload): this one forks on (psql, tpm2-tools, hooks)
    wl = agentlib.Workload(env, agentlib.workload_stubs(env), wsock)
    stream = wl.stream("FetchX509SVID", wl.pb.X509SVIDRequest(), timeout=90)
    first = next(stream)
    tap.eq(len(first.svids), 1, "a Workload API stream serves the X509-SVID")

    # A new bootloader: PCR 4 extended with no event in the log; enforce mode.
    env.psql("UPDATE bc_join.attestation_settings SET mode = 'enforce' WHERE pool_id = '%s'" % env.pool)
    digest = b"\x42" * 32
    x = subprocess.run(["tpm2_pcrextend", "-T", tcti, "4:sha256=" + digest.hex()],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    tap.ok(x.returncode == 0, "PCR 4 extended behind the log's back (tpm2_pcrextend)", x.stderr)
    t_drift = time.time()
    quarantined = p.wait_log("attest: QUARANTINED", 20)
    tap.ok(quarantined and attestation(env, node)[0] == "quarantined",
           "within one interval the service quarantines the node and bcd logs it",
           (time.time() - t_drift, attestation(env, node), p.text()))
    try:
        next(stream)
        code, details = "OK", ""
    except StopIteration:
        code, details = "OK", "the stream ended"
    except agentlib.WorkloadError as e:
        code, details = e.code, e.details
    wl.stop()
    tap.ok(code == "PERMISSION_DENIED" and "quarantined" in details,
           "the Workload API stream ends PERMISSION_DENIED, saying the node is quarantined",
           (code, details))
    tap.ok(env.psql("SELECT count(*) FROM bc_join.node_certs c WHERE c.node_id = '%s' "
                    "AND c.revoked_at IS NULL" % node) == "0",
           "its certificates are revoked")
    tap.eq(env.psql("SELECT payload->>'reason' || ' ' || (payload->'detail'->>'pcr') FROM bc_join.events "
                    "WHERE type = 'node.quarantined' ORDER BY id DESC LIMIT 1"), "eventlog-replay 4",
           "the event says why: the event log does not replay to the quoted PCR 4")
    h = sessionlib.hook(env, rt, sock, "s2", sess)
    tap.ok(h.returncode != 0 and "quarantined" in h.stderr,
           "a session credential is refused with the quarantine's message", h.stdout + h.stderr)
    st = sessionlib.status(env, rt, sock)
    prom = sessionlib.status(env, rt, sock, prometheus=True) or ""
    tap.ok(st is not None and st.get("quarantined") is True and "bcd_node_quarantined 1\n" in prom,
           "bcd status says quarantined (and bcd_node_quarantined 1)", (st, prom))
    tq = attestation(env, node)[1]
    tap.ok(wait_for(lambda: attestation(env, node)[1] > tq, 20),
           "a quarantined bcd keeps attesting at the interval", (attestation(env, node), p.text()))

    # The operator adds the new bootloader's event to the log (it replays again); readmits.
    with open(evlog, "ab") as f:
        f.write(event2(4, EV_SEPARATOR, digest, b"\0\0\0\0"))
    env.psql("UPDATE bc_join.attestation_settings SET mode = 'observe' WHERE pool_id = '%s'" % env.pool)
    tr = attestation(env, node)[1]
    passed = wait_for(lambda: attestation(env, node)[1] > tr and
                      attestation(env, node)[2] == "passed", 20)
    readmit = readmit_node(env, node) if passed else "no passing quote"
    tap.ok(passed and readmit is None and p.wait_log("attest: joining again by tpm", 20) and
           p.wait_log("attest: attested again", 30),
           "after a passing quote and bc_join.readmit_node bcd joins again and is attested",
           (attestation(env, node), readmit, p.text()))
    h = sessionlib.hook(env, rt, sock, "s3", sess)
    tap.ok(h.returncode == 0, "the readmitted node serves session credentials again",
           h.stdout + h.stderr + p.text())
    st = sessionlib.status(env, rt, sock)
    tap.ok(st is not None and st.get("quarantined") is False, "bcd status: no longer quarantined", st)

    # A second drift minutes later is readmitted as fast as the first: the join asked for
    # after a readmission is not held back by the first one's (bcd asks at most every 5 min
    # while nothing changes).
    env.psql("UPDATE bc_join.attestation_settings SET mode = 'enforce' WHERE pool_id = '%s'" % env.pool)
    digest2 = b"\x43" * 32
    x = subprocess.run(["tpm2_pcrextend", "-T", tcti, "4:sha256=" + digest2.hex()],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    tap.ok(x.returncode == 0 and wait_for(lambda: p.text().count("attest: QUARANTINED") >= 2, 20),
           "a second drift: quarantined again", (x.stderr, attestation(env, node), p.text()[-2000:]))
    with open(evlog, "ab") as f:
        f.write(event2(4, EV_SEPARATOR, digest2, b"\0\0\0\0"))
    env.psql("UPDATE bc_join.attestation_settings SET mode = 'observe' WHERE pool_id = '%s'" % env.pool)
    tr = attestation(env, node)[1]
    passed = wait_for(lambda: attestation(env, node)[1] > tr and
                      attestation(env, node)[2] == "passed", 20)
    readmit = readmit_node(env, node) if passed else "no passing quote"
    tap.ok(passed and readmit is None and
           wait_for(lambda: p.text().count("attest: attested again") >= 2, 30),
           "readmitted a second time, bcd joins again at once and is attested",
           (attestation(env, node), readmit, p.text()[-2000:]))
    # An independent parser agrees on the log bcd sent: tpm2_eventlog (tpm2-tools) replays
    # it to the PCRs bc_join.replay_event_log gives (PCR 4 only, none of the places where
    # tpm2_eventlog 5.4 departs from the spec: see test/tap/eventlog.t).
    te = subprocess.run(["tpm2_eventlog", evlog], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, timeout=30)
    pcrs = ((yaml.safe_load(te.stdout) or {}).get("pcrs") or {}).get("sha256", {}) if te.returncode == 0 else {}
    theirs = {str(i): "%064x" % v if isinstance(v, int) else v[2:].lower() for i, v in pcrs.items()}
    ours = json.loads(env.psql("SELECT bc_join.replay_event_log(pg_read_binary_file('%s'))->'pcrs'->'sha256'"
                               % evlog))
    tap.ok(te.returncode == 0 and theirs == ours and "4" in ours,
           "tpm2_eventlog replays the log to bc_join.replay_event_log's PCRs", (te.stderr, theirs, ours))
    rc, _ = p.stop(signal.SIGTERM, 20)
    tap.eq(rc, 0, "the daemon stops on SIGTERM", p.text())

    # --no-attest: no round is sent.
    before = attestation(env, node)[1]
    p = sessionlib.start_daemon(env, "bcd-noattest", rt, args + ["--no-attest"])
    up = sessionlib.wait_socket(p, sock)
    time.sleep(3)
    tap.ok(up and "attest:" not in p.text() and attestation(env, node)[1] == before,
           "with --no-attest bcd sends no attestation", p.text())
    p.stop(signal.SIGTERM, 20)


agentlib.main(body)
