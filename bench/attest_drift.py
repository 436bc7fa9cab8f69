#!/usr/bin/python3
"""attest_drift.py: the time from a drift on the host to its effects.

Used by bench/attest-drift (read its head).  test/agent/attest.t's fixture
(test/agent/attestlib.py): one throwaway cluster, the real bc-gateway, one
`bcd run --attestor tpm` on a swtpm behind tpm2-abrmd, attesting at the
pool's interval (BENCH_INTERVAL, 5 s: the minimum) in enforce mode, its
UEFI event log a file.  A trial: the node healthy, a Workload API
FetchX509SVID stream open and served; a random wait of 0 to one interval (so
the drift falls anywhere in bcd's cycle); then the drift: PCR 4 extended by
tpm2_pcrextend with no event in the log (a "new bootloader"); from the
moment tpm2_pcrextend returns, three pollers time
  (1) the CRL: GET /v1/crl through the gateway (every 50 ms, one TLS
      connection) until it lists the node's live certificate;
  (2) a session: a hook's {"op":"credential"} for a session never asked
      before on bcd's socket (every 100 ms) until one is refused;
  (3) the Workload API stream: until it ends (its status code kept);
  (4) OCSP: POST /v1/ocsp through the gateway (every 50 ms, one TLS
      connection) of a SHA-256 CertID of the node's live certificate (built
      and parsed by python3-cryptography, as bench/time_to_distrust.py does)
      until the answer is `revoked`.
The service's own moment (node_attestation.quarantined_at) is read too.
Then the operator's repair: the event appended to the log (it replays again,
and a boot_policy row allows it), a passing quote awaited, readmit_node, bcd
joins again by its TPM and is attested again; the next trial.  Prints a JSON
line per trial and a markdown table; exit 1 when a trial missed an effect.
"""
import http.client
import json
import os
import random
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ask, load_pems, ocsp_request, ocsp_status, pct, setup_gateway  # noqa: E402
import agentlib  # noqa: E402
import bctest  # noqa: E402
import sessionlib  # noqa: E402
from attestlib import (EV_SEPARATOR, attestation, event2, readmit_node, reclaim_token,  # noqa: E402
                       spec_id_log, start_tpm, stop_tpm, use_tpm, wait_for)
from cryptography import x509  # noqa: E402

TRIALS = int(os.environ.get("BENCH_TRIALS", "20"))
INTERVAL = int(os.environ.get("BENCH_INTERVAL", "5"))
DIGEST = b"\x42" * 32


def live_chain(state, serial, timeout=15):
    """node-chain.pem's certificates once its first is serial (hex); None after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        chain = load_pems(open(os.path.join(state, "node-chain.pem"), "rb").read())
        if chain and chain[0].serial_number == int(serial, 16):
            return chain
        time.sleep(0.2)
    return None


def body(tap, env):
    tpm, s = start_tpm(env)
    if not tap.ok(s.returncode == 0, "a swtpm behind tpm2-abrmd", s.stderr):
        return
    try:
        run(tap, env, tpm)
    finally:
        env.stop_processes()
        env.procs = []
        stop_tpm(tpm)


def run(tap, env, tpm):
    tcti = use_tpm(env, tpm)
    tok = reclaim_token(env, TRIALS + 5)
    state = os.path.join(env.dir, "state")
    evlog = os.path.join(env.dir, "binary_bios_measurements")
    with open(evlog, "wb") as f:
        f.write(spec_id_log())
    tpm_args = ["--attestor", "tpm", "--tcti", tcti]
    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"] + tpm_args))
    if not tap.ok(r.returncode == 0, "the node joins by its TPM", r.stdout + r.stderr):
        return
    node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    env.psql("INSERT INTO bc_join.attestation_settings (pool_id, tenant_id, interval_seconds, mode) "
             "VALUES ('%s', '%s', %d, 'enforce')" % (env.pool, env.tenant, INTERVAL))
    env.psql("INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest, note) "
             "VALUES ('%s', '%s', 4, 'EV_SEPARATOR', '\\x%s', 'the bench''s repaired drift')"
             % (env.tenant, env.pool, DIGEST.hex()))
    rt = sessionlib.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    wsock = os.path.join(rt, "bcd", "workload.sock")
    args = env.run_args(state, token_file=tok, extra=tpm_args + [
        "--event-log", evlog, "--ima-log", os.path.join(env.dir, "no-ima")])
    p = sessionlib.start_daemon(env, "bcd-attest", rt, args + ["--workload-rule", "uid:0=>session=wl"])
    if not tap.ok(sessionlib.wait_socket(p, sock), "the daemon serves its socket", p.text()):
        return
    if not tap.ok(wait_for(lambda: attestation(env, node)[0] == "healthy", 30), "the node is attested",
                  p.text()):
        return
    sys.path.insert(0, agentlib.workload_stubs(env))
    import grpc  # noqa: E402
    import workload_pb2 as pb  # noqa: E402
    import workload_pb2_grpc as pbg  # noqa: E402
    stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wsock))
    ctx = ssl.create_default_context(cafile=env.ca)
    sess_base = os.path.join(rt, "sess")
    os.makedirs(sess_base, mode=0o700)
    nsess = [0]

    def new_session():
        nsess[0] += 1
        d = os.path.join(sess_base, "s%d" % nsess[0])
        os.mkdir(d, 0o700)
        return ask(sock, "s%d" % nsess[0], d, socket_errors=False)

    trials, missed = [], []
    for k in range(TRIALS):
        # -- ready: healthy, a live certificate, a stream served, a session served
        serial = env.psql("SELECT serial FROM bc_join.node_certs WHERE node_id = '%s' AND revoked_at IS NULL "
                          "ORDER BY issued_at DESC LIMIT 1" % node)
        stream = stub.FetchX509SVID(pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")],
                                    timeout=120)
        first = next(stream)
        a = new_session()
        if not (serial and len(first.svids) == 1 and a and a.get("ok")):
            missed.append((k, "not ready", serial, a))
            break
        chain = live_chain(state, serial)
        if chain is None:
            missed.append((k, "node-chain.pem is not the live certificate", serial))
            break
        oreq = ocsp_request(chain[0], chain[1])
        oc = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=10)
        if ocsp_status(oc, oreq) != "good":
            missed.append((k, "OCSP does not answer good before the drift", serial))
            break
        time.sleep(random.uniform(0, INTERVAL))
        got, stop = {}, threading.Event()

        def ocsp():
            while not stop.is_set():
                if ocsp_status(oc, oreq) == "revoked":
                    got["ocsp"] = time.time()
                    return
                time.sleep(0.05)

        def crl():
            c = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=10)
            while not stop.is_set():
                c.request("GET", "/v1/crl")
                resp = c.getresponse()
                der = resp.read()
                if resp.status == 200 and x509.load_der_x509_crl(der).get_revoked_certificate_by_serial_number(
                        int(serial, 16)) is not None:
                    got["crl"] = time.time()
                    return
                time.sleep(0.05)

        def sessions():
            while not stop.is_set():
                ans = new_session()
                if ans is None or not ans.get("ok"):
                    got["session"] = time.time()
                    got["session_error"] = (ans or {}).get("error"), (ans or {}).get("message", "")[:80]
                    return
                time.sleep(0.1)

        def workload():
            try:
                for _ in stream:
                    pass
                got["workload_code"] = "OK"
            except grpc.RpcError as e:
                got["workload_code"] = e.code().name
            got["workload"] = time.time()

        # -- the drift
        x = subprocess.run(["tpm2_pcrextend", "-T", tcti, "4:sha256=" + DIGEST.hex()],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        t0 = time.time()
        if x.returncode != 0:
            missed.append((k, "tpm2_pcrextend", x.stderr))
            break
        th = [threading.Thread(target=f, daemon=True) for f in (crl, ocsp, sessions, workload)]
        for t in th:
            t.start()
        deadline = time.time() + 6 * INTERVAL + 10
        while time.time() < deadline and not all(w in got for w in ("crl", "ocsp", "session", "workload")):
            time.sleep(0.05)
        stop.set()
        for t in th[:3]:
            t.join(15)
        oc.close()
        q = env.psql("SELECT extract(epoch FROM quarantined_at) FROM bc_join.node_attestation "
                     "WHERE node_id = '%s'" % node)
        row = {"trial": k, "service": float(q) - t0 if q else None}
        for w in ("crl", "ocsp", "session", "workload"):
            row[w] = got[w] - t0 if w in got else None
        row["workload_code"] = got.get("workload_code")
        row["session_error"] = got.get("session_error")
        print(json.dumps(row), flush=True)
        if None in (row["crl"], row["ocsp"], row["session"], row["workload"]):
            missed.append((k, "an effect not seen", row))
            break
        trials.append(row)

        # -- the repair: the event logged, a passing quote, readmission, attested again
        with open(evlog, "ab") as f:
            f.write(event2(4, EV_SEPARATOR, DIGEST, b"\0\0\0\0"))
        tq = int(float(q))
        if not wait_for(lambda: attestation(env, node)[1] > tq and attestation(env, node)[2] == "passed",
                        4 * INTERVAL + 10):
            missed.append((k, "no passing quote after the repair", attestation(env, node)))
            break
        err = readmit_node(env, node)
        if err or not p.wait_log("attest: attested again", 6 * INTERVAL + 30, count=k + 1):
            missed.append((k, "not readmitted", err, p.text()[-2000:]))
            break

    tap.ok(not missed and len(trials) == TRIALS, "%d trials, every effect seen" % len(trials), missed)
    if not trials:
        return
    print("\n| from the drift to | p50 s | max s | min s | trials | after the quarantine: p50 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    names = (("service", "the service quarantines the node (node_attestation.quarantined_at)"),
             ("crl", "(a) the CRL at the gateway lists the node's certificate"),
             ("session", "(b) the first refused session credential (bcd's socket)"),
             ("workload", "(c) the Workload API stream ended"),
             ("ocsp", "(d) OCSP `revoked` at the gateway (POST /v1/ocsp)"))
    for key, what in names:
        v = [t[key] for t in trials if t[key] is not None]
        lag = [(t[key] - t["service"]) * 1e3 for t in trials if t[key] is not None and t["service"] is not None]
        print("| %s | %.2f | %.2f | %.2f | %d | %s | %s |" % (
            what, pct(v, 50), max(v), min(v), len(v), "-" if key == "service" else "%.0f" % pct(lag, 50),
            "-" if key == "service" else "%.0f" % max(lag)))
    codes = sorted(set(str(t["workload_code"]) for t in trials))
    errs = sorted(set(str(t["session_error"]) for t in trials))
    print("\nstream status: %s; session refusals: %s; interval %d s; %s sessions asked"
          % (", ".join(codes), "; ".join(errs), INTERVAL, nsess[0]))


bctest.run(agentlib.Env(), lambda env: setup_gateway(env, lift_session_bounds=True), body)
