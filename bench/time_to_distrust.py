#!/usr/bin/python3
"""time_to_distrust.py: the time from a node's revocation to its effects.

Used by bench/time-to-distrust (read its head).  test/agent/revocation.t's
fixture (test/agent/agentlib.py): one throwaway cluster, the real
bc-gateway, and per trial a fresh node: joined by a join token (`bcd run
--once`), then its daemon started with the Workload API (a uid rule) and
`--status-interval BENCH_STATUS_INTERVAL` (default 10 s: bcd's default, what
an operator gets).  A trial: the daemon holding the node CA's CRL, a
FetchX509SVID stream open and served, a hook session served; a random wait of
0 to one status interval (so the revocation falls anywhere in bcd's cycle);
then `SELECT bc_join.revoke_node(node, 'keyCompromise')` in its own
transaction, t0 the moment its COMMIT returns; from before the commit, four
pollers time
  (a) OCSP: POST /v1/ocsp through the gateway (every 50 ms, one TLS
      connection) of a SHA-256 CertID of the node certificate, built and
      parsed by python3-cryptography, until the answer is `revoked`;
  (a') the CRL: GET /v1/crl through the gateway (every 50 ms) until it lists
      the node certificate;
  (b) the Workload API: on a witness, another node's bcd started once with
      the same options, a FetchX509SVID and a FetchX509Bundles stream open
      all along: on each, the first message whose crl lists the node
      certificate's serial (what workloads that rely on the node learn); on the revoked node's own stream, its end
      (its status code kept; a revoked node ends its streams, docs/agent.md);
  (c) a hook: {"op":"credential"} for a session never asked before on bcd's
      socket (every 100 ms) until bcd refuses one itself, naming the
      revocation; the first refusal of any kind is kept too (the service
      refuses a revoked node's session at once, and bcd passes that on).
The service's own moment (node_certs.revoked_at) is read too.  Then the
daemon is stopped; the next trial.  Prints a JSON line per trial and a
markdown table; exit 1 when a trial missed an effect.
"""
import http.client
import json
import os
import random
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ask, load_pems, ocsp_request, ocsp_status, setup_gateway, stopping, table  # noqa: E402
import agentlib  # noqa: E402
import bctest  # noqa: E402
import sessionlib  # noqa: E402
import psycopg2  # noqa: E402
from cryptography import x509  # noqa: E402

TRIALS = int(os.environ.get("BENCH_TRIALS", "20"))
INTERVAL = int(os.environ.get("BENCH_STATUS_INTERVAL", "10"))


def run(tap, env):
    sys.path.insert(0, agentlib.workload_stubs(env))
    import grpc  # noqa: E402
    import workload_pb2 as pb  # noqa: E402
    import workload_pb2_grpc as pbg  # noqa: E402
    ctx = ssl.create_default_context(cafile=env.ca)
    db = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], user=env.pgenv["PGUSER"],
                          dbname=env.db)
    settings = env.psql("SELECT 'bc_join.crl_validity ' || current_setting('bc_join.crl_validity') || "
                        "', bc_join.ocsp_validity ' || current_setting('bc_join.ocsp_validity')")
    nsess = [0]
    trials, missed = [], []
    # -- the witness: another node's bcd, its FetchX509SVID stream open all along; the
    # serials of each CRL it pushes, and when
    wstate = os.path.join(env.dir, "witness")
    r = env.bcd("run", *env.run_args(wstate, token_file=env.token_file("witness"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "the witness node joins", r.stderr):
        return
    wrt = sessionlib.runtime_dir(env, "rt-witness")
    wp = sessionlib.start_daemon(env, "bcd-witness", wrt, env.run_args(wstate) + [
        "--workload-rule", "uid:0=>session=wl", "--status-interval", str(INTERVAL)])
    if not tap.ok(sessionlib.wait_socket(wp, os.path.join(wrt, "bcd", "bcd.sock")) and
                  wp.wait_log("revocation: a new CRL taken", 2 * INTERVAL + 10), "the witness holds a CRL",
                  wp.text()):
        return
    wstub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + os.path.join(wrt, "bcd", "workload.sock")))
    wit = {"msgs": [], "end": None}

    def witness():
        try:
            for m in wstub.FetchX509SVID(pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")]):
                now = time.time()
                wit["msgs"].append((now, set(r.serial_number for c in m.crl for r in x509.load_der_x509_crl(c))))
        except grpc.RpcError as e:
            wit["end"] = e.code().name
    threading.Thread(target=witness, daemon=True).start()
    wbun = {"msgs": []}

    def witness_bundles():
        """The witness's FetchX509Bundles stream: the serials of each CRL it pushes, and when."""
        try:
            for m in wstub.FetchX509Bundles(pb.X509BundlesRequest(), metadata=[("workload.spiffe.io", "true")]):
                now = time.time()
                wbun["msgs"].append((now, set(r.serial_number for c in m.crl for r in x509.load_der_x509_crl(c))))
        except grpc.RpcError:
            pass
    threading.Thread(target=witness_bundles, daemon=True).start()
    for k in range(TRIALS):
        # -- a fresh node, its daemon: the CRL held, a stream served, a session served
        state = os.path.join(env.dir, "state%d" % k)
        r = env.bcd("run", *env.run_args(state, token_file=env.token_file("t%d" % k), extra=["--once"]))
        if r.returncode != 0:
            missed.append((k, "join", r.stderr[-500:]))
            break
        node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
        chain = load_pems(open(os.path.join(state, "node-chain.pem"), "rb").read())
        serial = chain[0].serial_number
        req = ocsp_request(chain[0], chain[1])
        rt = sessionlib.runtime_dir(env, "rt%d" % k)
        sock = os.path.join(rt, "bcd", "bcd.sock")
        wsock = os.path.join(rt, "bcd", "workload.sock")
        p = sessionlib.start_daemon(env, "bcd-%d" % k, rt, env.run_args(state) + [
            "--workload-rule", "uid:0=>session=wl", "--status-interval", str(INTERVAL)])
        if not (sessionlib.wait_socket(p, sock) and p.wait_log("revocation: a new CRL taken", 2 * INTERVAL + 10)):
            missed.append((k, "daemon not ready", p.text()[-1500:]))
            break
        stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wsock))
        stream = stub.FetchX509SVID(pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")],
                                    timeout=6 * INTERVAL + 60)
        first = next(stream)
        sess_base = os.path.join(rt, "sess")
        os.makedirs(sess_base, mode=0o700)

        def new_session():
            nsess[0] += 1
            d = os.path.join(sess_base, "s%d" % nsess[0])
            os.mkdir(d, 0o700)
            return ask(sock, "s%d" % nsess[0], d)

        a = new_session()
        oc = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=10)
        before = ocsp_status(oc, req)
        if not (len(first.svids) == 1 and len(first.crl) == 1 and a and a.get("ok") and before == "good"):
            missed.append((k, "not ready", len(first.svids), len(first.crl), a, before))
            break
        time.sleep(random.uniform(0, INTERVAL))
        got, stop = {}, threading.Event()
        t0box = []

        def after_t0(t):
            """t when it is after the commit (the pollers run from before it)."""
            return bool(t0box) and t >= t0box[0]

        def ocsp_poll():
            while not stop.is_set():
                st = ocsp_status(oc, req)
                now = time.time()
                if st == "revoked":
                    got["ocsp"] = now
                    return
                if after_t0(now) and st != "good":
                    got.setdefault("ocsp_other", set()).add(st)
                time.sleep(0.05)

        def crl_poll():
            c = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=10)
            while not stop.is_set():
                c.request("GET", "/v1/crl")
                resp = c.getresponse()
                der = resp.read()
                if resp.status == 200 and x509.load_der_x509_crl(der).get_revoked_certificate_by_serial_number(
                        serial) is not None:
                    got["crl"] = time.time()
                    return
                time.sleep(0.05)

        def hooks():
            while not stop.is_set():
                ans = new_session()
                now = time.time()
                if ans is None or not ans.get("ok"):
                    msg = (ans or {}).get("message", "")
                    if "hook_any" not in got:
                        got["hook_any"] = now
                        got["hook_any_error"] = (ans or {}).get("error"), msg[:70]
                    if "was revoked" in msg:  # bcd's own refusal (docs/agent.md, "Revocation")
                        got["hook"] = now
                        got["hook_error"] = (ans or {}).get("error"), msg[msg.find("said by"):][:20]
                        return
                time.sleep(0.1)

        def witness_poll():
            while not stop.is_set() and not ("witness" in got and "bundles" in got):
                for key, box in (("witness", wit), ("bundles", wbun)):
                    for t, serials in box["msgs"][-1:]:
                        if serial in serials:
                            got.setdefault(key, t)
                time.sleep(0.01)

        def workload():
            try:
                for m in stream:
                    if "stream_crl" not in got and any(
                            x509.load_der_x509_crl(c).get_revoked_certificate_by_serial_number(serial) is not None
                            for c in m.crl):
                        got["stream_crl"] = time.time()
                got["stream_code"] = "OK"
            except grpc.RpcError as e:
                got["stream_code"] = e.code().name
                got["stream_details"] = (e.details() or "")[:90]
            got["stream_end"] = time.time()

        th = [threading.Thread(target=f, daemon=True) for f in (ocsp_poll, crl_poll, hooks, witness_poll, workload)]
        for t in th:
            t.start()
        # -- the revocation: t0 is the moment its COMMIT returns
        cur = db.cursor()
        cur.execute("SELECT bc_join.revoke_node(%s, 'keyCompromise')", (node,))
        db.commit()
        t0 = time.time()
        t0box.append(t0)
        deadline = t0 + 3 * INTERVAL + 15
        keys = ("ocsp", "crl", "witness", "bundles", "stream_end", "hook_any", "hook")
        while time.time() < deadline and not all(w in got for w in keys):
            time.sleep(0.05)
        stop.set()
        for t in th[:4]:
            t.join(15)
        cur.execute("SELECT extract(epoch FROM revoked_at) FROM bc_join.node_certs WHERE serial = %s",
                    ("%032x" % serial,))
        ra = cur.fetchone()
        db.commit()
        row = {"trial": k, "service": float(ra[0]) - t0 if ra and ra[0] is not None else None}
        for w in keys:
            row[w] = got[w] - t0 if w in got else None
        row["stream_crl"] = got["stream_crl"] - t0 if "stream_crl" in got else None
        for w in ("stream_code", "stream_details", "hook_error", "hook_any_error"):
            row[w] = got.get(w)
        row["ocsp_other"] = sorted(got.get("ocsp_other", ()))
        print(json.dumps(row), flush=True)
        p.stop()
        oc.close()
        if any(row[w] is None for w in keys):
            missed.append((k, "an effect not seen", row))
        trials.append(row)

    tap.ok(not missed and len(trials) == TRIALS, "%d trials, every effect seen" % len(trials), missed)
    if not trials:
        return
    table("from the COMMIT of revoke_node to", (("ocsp", "(a) OCSP `revoked` at the gateway (POST /v1/ocsp)"),
             ("crl", "(a') the CRL at the gateway lists the node certificate (GET /v1/crl)"),
             ("witness", "(b) another node's Workload API stream: a message whose crl lists it"),
             ("bundles", "(b) the same on its FetchX509Bundles stream"),
             ("stream_end", "(b') the revoked node's own Workload API stream ends"),
             ("hook_any", "(c') a hook refused at all (the service refuses the session)"),
             ("hook", "(c) bcd refuses a hook itself (its revoked state)")), trials)
    codes = sorted(set(str(t["stream_code"]) for t in trials))
    errs = sorted(set(str(t["hook_error"]) for t in trials) | set(str(t["hook_any_error"]) for t in trials))
    other = sorted(set(s for t in trials for s in t["ocsp_other"]))
    svc = [t["service"] for t in trials if t["service"] is not None]
    print("\nstream status: %s; hook refusals: %s; OCSP answers after the commit other than good/revoked: %s; "
          "revoked_at - commit: min %.3f s max %.3f s; --status-interval %d s; %s; %d sessions asked"
          % (", ".join(codes), "; ".join(errs), ", ".join(other) or "none", min(svc), max(svc), INTERVAL,
             settings, nsess[0]))


if __name__ == "__main__":
    bctest.run(agentlib.Env(), lambda env: setup_gateway(env, lift_session_bounds=True), stopping(run))
