#!/usr/bin/python3
"""attest_cost.py: what one continuous-attestation cycle costs the service.

Used by bench/attest-cost (read its head).  One throwaway cluster (fsync on,
synchronous_commit on), one TPM-bound node, a swtpm driven by tpm2-tools as
test/tap/attest.t does it: an ECDSA AK at a persistent handle, quotes by
tpm2_quote.  The node's measured boot is a real machine's event log
(test/data/eventlog/ubuntu_2104_shielded_vm_no_secure_boot_eventlog, a GCP
Shielded VM booting Ubuntu: 106 events, 3 banks, 38 KB) whose SHA-256 digests
are extended into the swtpm, so the log replays to the quoted PCRs; its IMA
list is written in the ima-ng format with PCR 10 extended to match.  The pool
is in enforce mode with the policy promoted from a first observed cycle, so
every cycle runs the whole judgement: proof, sealed state, AK, quote
signature, TPM clock, the whole event log parsed and replayed, every event
against boot_policy, the IMA increment replayed from the kept PCR 10 and
every entry against ima_policy.

Each cycle is round 1, then the quote (the TPM: not timed as the service's),
then round 2, every call `SELECT bc_join.attest($1::jsonb)` in its own
transaction over the unix socket.  Timed per call: the wall time at the
client (execute to result: parse, plan, run, commit with its WAL flush) and
the backend's CPU time (/proc/PID/schedstat, nanoseconds on a CPU).  Two
variants, interleaved cycle by cycle so a drifting machine weighs on both
alike: no IMA increment (an empty one: nothing new measured), and an
increment of BENCH_IMA (50) entries.  Prints a JSON line per variant and a
markdown table; exit 1 when a cycle was not "attested".

bench/run's section `credentials` runs it with BENCH_ATTEST_DB=NAME (on that
database of the cluster the PG* environment names, whose nodes are already
there, instead of a cluster of its own; a tenant of its own, "attest-cost")
and BENCH_CEILING=1: after the timed cycles, as many cycles of the plain-SQL
limit (the two rounds' statements without the crypto, the log's replay or
the C code), a JSON line per variant ("ceiling-none", "ceiling-ima").
"""
import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import psycopg2

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CYCLES = int(os.environ.get("BENCH_CYCLES", "40"))
IMA_N = int(os.environ.get("BENCH_IMA", "50"))
LOG = os.path.join(TOP, "test/data/eventlog/ubuntu_2104_shielded_vm_no_secure_boot_eventlog")
BCD = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/bcd"))
JOSE = os.environ.get("BCJ_JOSE_TOOL", os.path.join(TOP, "build/jose-tool"))


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def pct(v, p):
    """The p-th percentile (nearest rank) of values."""
    s = sorted(v)
    i = max(1, min(len(s), int(len(s) * p / 100.0 + 0.999999)))
    return s[i - 1]


W = tempfile.mkdtemp(prefix="bcj-attest-cost.")
os.chmod(W, 0o755)
TPMDIR = os.path.join(W, "tpm")
os.makedirs(os.path.join(TPMDIR, "state"))
procs = []


def free_port(n=1):
    return int(subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "free-port", str(n)],
                              stdout=subprocess.PIPE, check=True, text=True).stdout)


# BENCH_ATTEST_DB=NAME: on that database of the cluster PGHOST/PGPORT name (bench/run's
# section `credentials`: the extension there, nodes already in it) instead of a cluster
# of its own; a tenant of its own, "attest-cost".
ON_DB = os.environ.get("BENCH_ATTEST_DB")


def cleanup():
    for p in procs:
        p.kill()
        p.wait()
    if not ON_DB:
        subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", os.path.join(W, "pg")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not os.environ.get("BENCH_KEEP"):
        shutil.rmtree(W, ignore_errors=True)
    else:
        print("# kept " + W, file=sys.stderr)


def tpm(*args, out=False):
    r = subprocess.run(list(args), capture_output=True, cwd=TPMDIR)
    subprocess.run(["tpm2_flushcontext", "-t"], capture_output=True, cwd=TPMDIR)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.decode()))
    return r.stdout if out else None


def rd(name):
    with open(os.path.join(TPMDIR, name), "rb") as f:
        return f.read()


def own_cluster():
    """A throwaway cluster with fsync on, as a primary runs, and its database bench: the connection."""
    keys = os.path.join(W, "keys")
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), keys], check=True, stdout=subprocess.DEVNULL)
    pgdir, pgport = os.path.join(W, "pg"), free_port()
    pgt = [os.path.join(TOP, "tools/pg-throwaway")]
    start = pgt + ["start", pgdir, str(pgport), keys, "bench.local"]
    env = dict(kv.split("=", 1) for kv in subprocess.run(start, stdout=subprocess.PIPE, check=True,
                                                          text=True).stdout.split())
    adm = psycopg2.connect(host=env["PGHOST"], port=env["PGPORT"], user="postgres", dbname="postgres")
    adm.autocommit = True
    adm.cursor().execute("ALTER SYSTEM SET fsync = on")
    adm.cursor().execute("CREATE DATABASE bench")
    adm.close()
    subprocess.run(pgt + ["stop", pgdir], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(start, check=True, stdout=subprocess.DEVNULL)
    return psycopg2.connect(host=env["PGHOST"], port=env["PGPORT"], user="postgres", dbname="bench")


def main():
    db = psycopg2.connect(dbname=ON_DB) if ON_DB else own_cluster()
    db.autocommit = True
    cur = db.cursor()

    def one(sql, *args):
        cur.execute(sql, args)
        return cur.fetchone()[0]

    ON_DB or one("SELECT current_setting('fsync')") == "on" or sys.exit("fsync is not on")
    if not ON_DB:
        cur.execute("CREATE EXTENSION bc_join")
    tenant = one("SELECT bc_join.create_tenant(%s)", "attest-cost" if ON_DB else "bench")
    site = one("SELECT bc_join.create_site(%s, 'dc')", tenant)
    pool = one("SELECT bc_join.create_pool(%s, %s, 'p')", tenant, site)
    with open(os.path.join(W, "service-keys.json"), "w") as f:
        f.write(json.dumps(one("SELECT bc_join.service_keys()")))

    # -- the swtpm and its AK ----------------------------------------------------
    for _ in range(8):
        port = free_port(2)
        sw = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", "dir=" + os.path.join(TPMDIR, "state"),
             "--server", "type=tcp,port=%d,bindaddr=127.0.0.1" % port,
             "--ctrl", "type=tcp,port=%d,bindaddr=127.0.0.1" % (port + 1),
             "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["TPM2TOOLS_TCTI"] = "swtpm:host=127.0.0.1,port=%d" % port
        up = False
        for _ in range(50):
            if subprocess.run(["tpm2_getrandom", "1"], capture_output=True).returncode == 0:
                up = True
                break
            time.sleep(0.1)
        if up:
            procs.append(sw)
            break
        sw.kill()
        sw.wait()
    else:
        sys.exit("swtpm did not start")
    tpm("tpm2_createek", "-G", "ecc", "-c", "ek.ctx", "-u", "ek.pub")
    tpm("tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
        "-u", "ak.pub", "-n", "ak.name")
    handle = "0x81010002"
    tpm("tpm2_evictcontrol", "-c", "ak.ctx", handle)
    akpub = rd("ak.pub")
    akurn = "urn:bc:tpm-ak:sha256:" + rd("ak.name")[2:].hex()

    # -- the boot: a real machine's log, its SHA-256 digests extended -----------
    with open(LOG, "rb") as f:
        evlog = f.read()
    rep = one("SELECT bc_join.replay_event_log(%s)", psycopg2.Binary(evlog))
    n_ext = 0
    for e in rep["events"]:
        d = e["digests"].get("sha256")
        if d and e["typeName"] != "EV_NO_ACTION" and e["pcr"] < 16 and e["pcr"] != 10:
            tpm("tpm2_pcrextend", "%d:sha256=%s" % (e["pcr"], d))
            n_ext += 1
    tpm("tpm2_pcrread", "sha256:0,1,2,3,4,5,6,7", "-o", "pcrs.bin")
    vals = rd("pcrs.bin")
    for i in range(8):
        want = rep["pcrs"]["sha256"].get(str(i))
        if want and vals[32 * i:32 * i + 32].hex() != want:
            sys.exit("PCR %d of the swtpm is not the log's replay" % i)

    ima = []    # binary ima-ng entries, in order

    def ima_measure(path, content):
        fd = hashlib.sha256(content).digest()
        dng = b"sha256:\0" + fd
        nng = path.encode() + b"\0"
        tdata = struct.pack("<I", len(dng)) + dng + struct.pack("<I", len(nng)) + nng
        ima.append(struct.pack("<I", 10) + hashlib.sha1(tdata).digest() + struct.pack("<I", 6) + b"ima-ng" +
                   struct.pack("<I", len(tdata)) + tdata)
        return hashlib.sha256(tdata).hexdigest()

    def ima_batch(files):
        """Measure files (path, content) into IMA: one tpm2_pcrextend for all."""
        digs = [ima_measure(p, c) for p, c in files]
        for i in range(0, len(digs), 8):
            tpm("tpm2_pcrextend", *["10:sha256=%s" % d for d in digs[i:i + 8]])

    FILES = [("/usr/lib/bench/file%03d" % j, b"content %d" % j) for j in range(IMA_N)]
    ima_batch([("boot_aggregate", b"aggregate")] + FILES)

    # -- the node --------------------------------------------------------------
    tok = one("SELECT bc_join.create_join_token(%s, %s)", tenant, pool)
    ndir = os.path.join(W, "node")
    req = subprocess.run([BCD, "join-request", "--service-keys", os.path.join(W, "service-keys.json"),
                          "--token", tok, "--out-dir", ndir], capture_output=True, check=True).stdout.decode()
    r = one("SELECT bc_join(%s::jsonb)", req)
    pl = json.loads(unb64u(r["response"].split(".")[1]))
    serial = pl["serial"]
    cur.execute("UPDATE bc_join.node_certs SET node_key_uri = %s WHERE serial = %s", (akurn, serial))

    def proof():
        body = json.dumps({"purpose": "attest", "serial": serial, "iat": int(time.time())})
        return subprocess.run([JOSE, "sign", os.path.join(ndir, "node.key")], input=body.encode(),
                              capture_output=True, check=True).stdout.decode().strip()

    pid = one("SELECT pg_backend_pid()")

    def cpu_ns():
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])

    def call(req):
        """bc_join.attest(req): (answer, wall s, backend CPU s, s inside the call)."""
        body = json.dumps(req)
        c0, t0 = cpu_ns(), time.monotonic()
        cur.execute("SELECT clock_timestamp(), bc_join.attest(%s::jsonb), clock_timestamp()", (body,))
        s0, a, s1 = cur.fetchone()
        t1 = time.monotonic()
        return a, t1 - t0, (cpu_ns() - c0) / 1e9, (s1 - s0).total_seconds()

    def cycle():
        """One cycle; a dict of its times and outcome."""
        p1 = proof()
        a1, w1, c1, s1 = call({"proof": p1})
        if a1.get("status") != "challenge":
            return {"status": "round1:" + str(a1.get("status"))}
        ch = json.loads(unb64u(a1["response"].split(".")[1]))
        sel = "sha256:" + ",".join(str(p) for p in ch["pcrs"])
        qual = hashlib.sha256(b"bc_join/attest" + unb64u(ch["nonce"])).hexdigest()
        tq = time.monotonic()
        tpm("tpm2_pcrread", sel, "-o", "pcrs.bin")
        tpm("tpm2_quote", "-c", handle, "-l", sel, "-q", qual, "-m", "q.attest", "-s", "q.sig", "-g", "sha256")
        tq = time.monotonic() - tq
        v = rd("pcrs.bin")
        off = ch["imaOffset"]
        req = {"proof": proof(), "state": ch["state"], "akPub": b64u(akpub), "quote": b64u(rd("q.attest")),
               "quoteSignature": b64u(rd("q.sig")),
               "pcrValues": {"sha256": {str(p): v[32 * i:32 * i + 32].hex() for i, p in enumerate(ch["pcrs"])}},
               "eventLog": b64u(evlog), "ima": {"offset": off, "entries": b64u(b"".join(ima[off:]))}}
        a2, w2, c2, s2 = call(req)
        st = a2.get("status")
        return {"status": st, "w1": w1, "c1": c1, "s1": s1, "w2": w2, "c2": c2, "s2": s2, "tq": tq, "n_ima": len(ima) - off,
                "bytes2": len(json.dumps(req)), "body1": json.dumps({"proof": p1}), "body2": json.dumps(req)}

    # A first cycle observed, promoted into the policy; enforce from then on.
    c = cycle()
    if c["status"] != "attested":
        sys.exit("the first (observed) cycle was %s" % c["status"])
    rows = one("SELECT bc_join.promote_observations(%s)", pool)
    one("SELECT (bc_join.set_attestation_settings(%s, mode => 'enforce')).mode", pool)
    c = cycle()
    if c["status"] != "attested":
        sys.exit("the first enforced cycle was %s" % c["status"])
    cur.execute("SELECT count(*) FROM bc_join.boot_policy")
    n_boot = cur.fetchone()[0]
    cur.execute("SELECT count(*) FROM bc_join.ima_policy")
    n_imap = cur.fetchone()[0]

    res = {"none": [], "ima": []}
    bad = []
    wal = {"none": 0, "ima": 0}
    for i in range(CYCLES):
        for variant in ("none", "ima") if i % 2 == 0 else ("ima", "none"):
            if variant == "ima":
                ima_batch(FILES)     # the same files measured again: every entry in the allowlist
            l0 = one("SELECT pg_current_wal_lsn()::text")
            c = cycle()
            l1 = one("SELECT pg_current_wal_lsn()::text")
            c["wal"] = float(one("SELECT pg_wal_lsn_diff(%s, %s)", l1, l0))
            wal[variant] += c["wal"]
            if c["status"] != "attested" or c["n_ima"] != (IMA_N if variant == "ima" else 0):
                bad.append((variant, i, c))
                continue
            res[variant].append(c)
    # BENCH_CEILING=1: the plain-SQL limit of a cycle (bench/run's section `credentials`):
    # the statements bc_join.attest() runs in its two rounds (src/ext/attest.c, proof.c),
    # on this node's rows, without the crypto, the event log's parse and replay and the
    # C code: each round one transaction in one round trip (its statements prepared
    # once, sent as one string of EXECUTEs), the same request body cast to jsonb as the
    # call's statement does, in a savepoint as the call's round.  Round 2 looks the
    # log's events of PCRs 0-7 up in boot_policy and, with an increment, its entries in
    # ima_policy, with the arrays the call passes (the same events and entries).
    ceil = {}
    if os.environ.get("BENCH_CEILING") and res["none"] and res["ima"]:
        node_id = pl["nodeId"]
        bev = [e for e in rep["events"] if e["pcr"] < 8 and e["digests"].get("sha256") and e["typeName"] != "EV_NO_ACTION"]
        bpcr = [e["pcr"] for e in bev]
        btyp = [e["typeName"] for e in bev]
        bdig = [psycopg2.Binary(bytes.fromhex(e["digests"]["sha256"])) for e in bev]
        ipath = [f[0] for f in FILES]
        idig = [psycopg2.Binary(hashlib.sha256(f[1]).digest()) for f in FILES]
        lock = ("SELECT c.node_id, c.identity_generation, c.not_after <= bc_join.compute_now(), c.revoked_at IS NOT NULL, "
                "c.revocation_reason IS NOT DISTINCT FROM 'renewed', c.certificate, c.allowed_kinds, c.node_key_uri, "
                "extract(epoch FROM c.not_after - bc_join.compute_now())::bigint, n.identity_generation, n.state, n.tenant_id, "
                "n.role, EXISTS (SELECT 1 FROM bc_join.node_attestation a WHERE a.node_id = n.id AND a.state = 'quarantined'), "
                "c.revocation_reason FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id "
                "WHERE c.serial = $1 FOR SHARE OF c, n")
        use = ("INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
               "VALUES ($1, sha256($2::text::bytea), $3, now() + interval '10 minutes') ON CONFLICT DO NOTHING")
        sett = ("SELECT coalesce(s.interval_seconds, 60), coalesce(s.pcrs, '{0,1,2,3,4,5,6,7}'), coalesce(s.mode, 'observe') = 'enforce', "
                "n.pool_id FROM bc_join.nodes n LEFT JOIN bc_join.attestation_settings s ON s.pool_id = n.pool_id WHERE n.id = $1")
        na = "SELECT state, reset_count, restart_count, clock, ima_offset, ima_pcr10 FROM bc_join.node_attestation WHERE node_id = $1"
        boot = ("SELECT e.i::int FROM unnest($1::int[], $2::text[], $3::bytea[]) WITH ORDINALITY AS e(pcr, typ, digest, i) "
                "WHERE NOT EXISTS (SELECT 1 FROM bc_join.boot_policy p WHERE p.tenant_id = $4 AND (p.pool_id IS NULL OR p.pool_id = $5) "
                "AND p.pcr = e.pcr AND p.event_type = e.typ AND p.digest = e.digest) ORDER BY e.i LIMIT 1")
        imaq = ("SELECT e.i::int FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS e(path, digest, i) "
                "WHERE NOT EXISTS (SELECT 1 FROM bc_join.ima_policy p WHERE p.tenant_id = $3 AND (p.pool_id IS NULL OR p.pool_id = $4) "
                "AND p.path = e.path AND p.digest = e.digest) AND NOT EXISTS (SELECT 1 FROM bc_join.ima_excludes x "
                "WHERE x.tenant_id = $3 AND (x.pool_id IS NULL OR x.pool_id = $4) AND e.path ~ x.path_regex) ORDER BY e.i LIMIT 1")
        upd = ("UPDATE bc_join.node_attestation SET state = CASE WHEN state = 'quarantined' THEN state ELSE 'healthy' END, "
               "last_quote_at = bc_join.compute_now(), last_result = 'passed', last_reason = NULL, last_passed_at = bc_join.compute_now(), "
               "reset_count = reset_count, restart_count = restart_count, clock = clock, ima_offset = ima_offset, ima_pcr10 = ima_pcr10, "
               "missed_reported_at = NULL, failures = CASE WHEN state = 'quarantined' THEN failures ELSE 0 END "
               "WHERE node_id = $1 RETURNING state")
        seen = ("UPDATE bc_join.nodes n SET last_seen_at = bc_join.compute_now(), state = CASE WHEN n.state = 'adopting' THEN 'active' "
                "ELSE n.state END, updated_at = CASE WHEN n.state = 'adopting' THEN bc_join.compute_now() ELSE n.updated_at END "
                "WHERE n.id = (SELECT x.id FROM bc_join.nodes x WHERE x.id = $1 AND x.state <> 'retired' AND (x.state = 'adopting' "
                "OR x.last_seen_at < bc_join.compute_now() - interval '1 minute') FOR NO KEY UPDATE SKIP LOCKED)")
        for name, sql, types in (("q_lock", lock, "text"), ("q_use", use, "text, text, text"), ("q_sett", sett, "text"),
                                 ("q_na", na, "text"), ("q_nafor", na + " FOR UPDATE", "text"),
                                 ("q_nains", "INSERT INTO bc_join.node_attestation (node_id) VALUES ($1) ON CONFLICT "
                                  "ON CONSTRAINT node_attestation_pkey DO NOTHING", "text"),
                                 ("q_boot", boot, "int[], text[], bytea[], text, text"), ("q_ima", imaq, "text[], bytea[], text, text"),
                                 ("q_upd", upd, "text"), ("q_seen", seen, "text"), ("q_body", "SELECT $1::jsonb IS NULL", "text"),
                                 ("q_kids", "SELECT k FROM bc_join.compromised_kids() AS k", "")):
            cur.execute("PREPARE %s%s AS %s" % (name, "(%s)" % types if types else "", sql))
        r1 = ("BEGIN; EXECUTE q_body(%(b)s); SAVEPOINT round; EXECUTE q_lock(%(s)s); "
              "EXECUTE q_use('attest', %(u)s, %(n)s); EXECUTE q_sett(%(n)s); EXECUTE q_na(%(n)s); EXECUTE q_kids; "
              "RELEASE SAVEPOINT round; COMMIT")
        r2 = ("BEGIN; EXECUTE q_body(%(b)s); SAVEPOINT round; EXECUTE q_lock(%(s)s); "
              "EXECUTE q_use('attest', %(u)s, %(n)s); EXECUTE q_use('attest', %(u2)s, %(n)s); EXECUTE q_sett(%(n)s); "
              "EXECUTE q_nains(%(n)s); EXECUTE q_nafor(%(n)s); "
              "EXECUTE q_boot(%(bp)s, %(bt)s, %(bd)s, %(t)s, %(p)s); {ima}"
              "EXECUTE q_upd(%(n)s); EXECUTE q_seen(%(n)s); EXECUTE q_kids; RELEASE SAVEPOINT round; COMMIT")
        bodies = {v: (res[v][-1]["body1"], res[v][-1]["body2"]) for v in ("none", "ima")}
        cres = {"none": [], "ima": []}
        cwal = {"none": [], "ima": []}
        for i in range(CYCLES + 2):          # the first two warm the plans up, untimed
            for variant in ("none", "ima") if i % 2 == 0 else ("ima", "none"):
                args = {"s": serial, "n": node_id, "t": tenant, "p": pool, "bp": bpcr, "bt": btyp, "bd": bdig,
                        "u": "c%d-%s-1-%f" % (i, variant, time.time()), "u2": "c%d-%s-2-%f" % (i, variant, time.time()),
                        "ip": ipath, "id": idig}
                q2 = r2.replace("{ima}", "EXECUTE q_ima(%(ip)s, %(id)s, %(t)s, %(p)s); " if variant == "ima" else "")
                l0 = one("SELECT pg_current_wal_lsn()::text")
                c0 = cpu_ns()
                cur.execute(r1, dict(args, b=bodies[variant][0]))
                c1 = cpu_ns()
                cur.execute(q2, dict(args, b=bodies[variant][1]))
                c2 = cpu_ns()
                l1 = one("SELECT pg_current_wal_lsn()::text")
                if i >= 2:
                    cwal[variant].append(float(one("SELECT pg_wal_lsn_diff(%s, %s)", l1, l0)))
                    cres[variant].append(((c1 - c0) / 1e9, (c2 - c1) / 1e9))
        for variant, cs in cres.items():
            ceil[variant] = {"n": len(cs), "r1_cpu_ms": sum(c[0] for c in cs) / len(cs) * 1e3,
                             "r2_cpu_ms": sum(c[1] for c in cs) / len(cs) * 1e3,
                             "cycle_cpu_ms": sum(c[0] + c[1] for c in cs) / len(cs) * 1e3,
                             "wal_kB": sum(cwal[variant]) / len(cs) / 1024.0,
                             "wal_p50_kB": pct(cwal[variant], 50) / 1024.0, "bev": len(bev), "ima": IMA_N if variant == "ima" else 0}
            print(json.dumps(dict(ceil[variant], variant="ceiling-" + variant)))
    if os.environ.get("BENCH_WALSTATS"):
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        for variant in ("none", "ima"):
            if variant == "ima":
                ima_batch(FILES)
            cur.execute("CHECKPOINT")
            l0 = one("SELECT pg_current_wal_lsn()::text")
            cycle()
            l1 = one("SELECT pg_current_wal_lsn()::text")
            cur.execute("SELECT \"resource_manager/record_type\", count, record_size, fpi_size FROM pg_get_wal_stats(%s, %s, true) "
                        "WHERE count > 0 ORDER BY record_size + fpi_size DESC", (l0, l1))
            print("# WAL of one cycle after a CHECKPOINT, %s: %r" % (variant, cur.fetchall()), file=sys.stderr)
    cur.execute("SELECT state, failures FROM bc_join.node_attestation")
    fin = cur.fetchone()

    info = {"cycles": CYCLES, "ima_n": IMA_N, "log_bytes": len(evlog), "log_events": len(rep["events"]),
            "extended": n_ext, "boot_policy_rows": n_boot, "ima_policy_rows": n_imap, "promoted": rows,
            "node": fin, "bad": len(bad), "nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3]}
    print(json.dumps(info))
    out = {}
    for variant, cs in res.items():
        if not cs:
            continue
        m = lambda k: sum(c[k] for c in cs) / len(cs)  # noqa: E731
        cyc_cpu = m("c1") + m("c2")
        out[variant] = {
            "n": len(cs), "r1_p50_ms": pct([c["w1"] for c in cs], 50) * 1e3, "r1_cpu_ms": m("c1") * 1e3,
            "r2_p50_ms": pct([c["w2"] for c in cs], 50) * 1e3, "r2_max_ms": max(c["w2"] for c in cs) * 1e3,
            "r2_cpu_ms": m("c2") * 1e3, "r1_in_ms": pct([c["s1"] for c in cs], 50) * 1e3,
            "r2_in_ms": pct([c["s2"] for c in cs], 50) * 1e3, "cycle_wall_ms": (m("w1") + m("w2")) * 1e3, "cycle_cpu_ms": cyc_cpu * 1e3,
            "tpm_ms": m("tq") * 1e3, "round2_kB": m("bytes2") / 1024.0, "wal_kB": wal[variant] / len(cs) / 1024.0,
            "wal_p50_kB": pct([c["wal"] for c in cs], 50) / 1024.0,
            "per_s_2cores": 2.0 / cyc_cpu, "nodes_60s_2cores": 2.0 / cyc_cpu * 60}
        print(json.dumps(dict(out[variant], variant=variant)))
    print()
    print("| IMA increment | cycles | round 1 p50 ms | inside p50 ms | round 1 CPU ms | round 2 p50 ms | inside p50 ms "
          "| round 2 max ms | round 2 CPU ms | cycle CPU ms | WAL kB/cycle | round 2 body kB | cycles/s, 2 cores | nodes at 60 s, 2 cores "
          "| nodes at 60 s, 10% of 2 cores |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for variant, o in out.items():
        print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.0f | %.0f | %.0f |" % (
            "none" if variant == "none" else "%d entries" % IMA_N, o["n"], o["r1_p50_ms"], o["r1_in_ms"],
            o["r1_cpu_ms"], o["r2_p50_ms"], o["r2_in_ms"], o["r2_max_ms"], o["r2_cpu_ms"], o["cycle_cpu_ms"], o["wal_kB"], o["round2_kB"],
            o["per_s_2cores"], o["nodes_60s_2cores"], o["nodes_60s_2cores"] * 0.1))
    print("\n(tpm2_pcrread + tpm2_quote through the swtpm, two processes, not counted: %.0f ms a cycle)"
          % out["none"]["tpm_ms"] if "none" in out else "")
    for b in bad[:5]:
        print("# not attested: %r" % (b,), file=sys.stderr)
    return 1 if bad else 0


rc = 1
try:
    rc = main()
finally:
    cleanup()
sys.exit(rc)
