#!/usr/bin/python3
"""metrics.t: bc_join.metrics() shows what the service does, exactly, and a
refusal is told on its tenant's refusal channel (issue 48).

A cluster of its own (the counters are the server's: no other script's
rounds in them), a copy of test/run-all's keys.  Scripted through the real
entry points: refusals of two custom attestors with three reasons and two
tenants (one no evidence authenticated), a refused attest round, a join
that waits for an approval and is approved, joins with short certificates,
a renewal, a session, a node found overdue by attestation_sweep() and then
quarantined, an audit anchor, a key promotion, 52 tenants with waiting
requests (50 lines and "_other"), a reset.  After each step every sample of
bc_join.metrics() is what the step makes it, no more (counters by exactly
the rounds made, gauges to the numbers the database holds); the text passes
promtool check metrics; the gateway's and the platform operator's roles
may call it, a tenant operator and a role with nothing may not.

The refusal NOTIFY: a tenant operator learns its tenant's refusal_channel
(another tenant's is refused), and its LISTEN gets exactly the refusals
recorded in its tenant's stream, at the events' rate bound
(bc_join.refusal_events_per_minute 3: five refusals, three NOTIFYs; the next
minute's first says suppressedBefore 2), each payload
{"event","type","attestor","refusal","at"} with the event's id, at most 512
bytes for a refusal of 159 escaped bytes, and never the evidence nor a
hash; the other tenant's listener gets only its own, root's the one no
evidence authenticated; rotate_request_channel() rotates the refusal
channel too.  Needs BCJ_BCD (test/run-all); promtool (Debian's prometheus).
"""
import json, os, re, select, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
import statefill

BCD = os.environ["BCJ_BCD"]
SECRET = "EVIDENCE-MARKER-7f3a"   # in every refused request's evidence: never in a payload
FAMILIES = {
    "bc_join_rounds_total": "counter", "bc_join_refusals_total": "counter",
    "bc_join_counters_reset_timestamp_seconds": "gauge", "bc_join_pending_join_requests": "gauge",
    "bc_join_pending_join_request_oldest_age_seconds": "gauge",
    "bc_join_node_certificates_live": "gauge", "bc_join_node_certificates_expiring": "gauge",
    "bc_join_sessions_live": "gauge", "bc_join_audit_log_head_timestamp_seconds": "gauge",
    "bc_join_audit_anchor_timestamp_seconds": "gauge", "bc_join_key_rotation_timestamp_seconds": "gauge",
    "bc_join_attestation_failures_total": "counter", "bc_join_attestation_stale_nodes": "gauge",
    "bc_join_quarantined_nodes": "gauge",
}
SAMPLE = re.compile(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)",?')

VERIFY = r"""
CREATE FUNCTION public.m_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $f$
DECLARE
	e jsonb := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
	d jsonb;
BEGIN
	IF e ? 'refuse' THEN
		PERFORM bc_join.refuse((evidence->>'attestor') || ':' || (e->>'refuse'), e->>'tenant');
	END IF;
	IF e ? 'approval' THEN
		d := bc_join.await_approval(evidence->>'attestor', e->>'tenant', context);
		IF d IS NOT NULL THEN
			RETURN d;
		END IF;
	END IF;
	RETURN jsonb_build_object('tenantId', e->>'tenant', 'role', 'node', 'poolId', e->>'pool',
							  'certTtlSeconds', (e->>'ttl')::integer);
END $f$;
SELECT bc_join.register_attestor('m-one', '1', ARRAY['node'], 'public.m_verify(jsonb,jsonb)');
SELECT bc_join.register_attestor('m-two', '1', ARRAY['node'], 'public.m_verify(jsonb,jsonb)');
"""


def parse(text):
    """The samples of a metrics text: {(name, ((label, value), ...)): float}; checks the form."""
    problems, samples, declared, seen_help = [], {}, {}, set()
    if not text.endswith("\n"):
        problems.append("does not end with a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            if name in seen_help:
                problems.append("HELP twice: " + name)
            seen_help.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            if name in declared:
                problems.append("TYPE twice: " + name)
            declared[name] = typ
        else:
            m = SAMPLE.match(line)
            if not m or m.group(1) not in declared:
                problems.append("not a sample of a declared family: " + line)
                continue
            labels = tuple((k, re.sub(r'\\(.)', lambda x: "\n" if x.group(1) == "n" else x.group(1), v))
                           for k, v in LABEL.findall(m.group(2) or ""))
            key = (m.group(1), labels)
            if key in samples:
                problems.append("sample twice: " + line)
            samples[key] = float(m.group(3))
    return samples, declared, problems


def body(tap, env):
    db = env.db
    sk = env.service_keys
    env.psql("ALTER DATABASE %s SET bc_join.refusal_events_per_minute = 3" % db)
    env.psql("ALTER DATABASE %s SET bc_join.cert_ttl = 7200" % db)
    env.psql(VERIFY)
    ta, pa = env.tenant, env.pool
    tb = env.psql("SELECT bc_join.create_tenant('mb')")
    sb = env.psql("SELECT bc_join.create_site('%s', 'dc')" % tb)
    pb = env.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (tb, sb))
    env.psql("CREATE ROLE m_top LOGIN; CREATE ROLE m_nobody LOGIN; "
             "CREATE ROLE m_op LOGIN IN ROLE bc_join_operator")
    env.psql("SELECT bc_join.grant_tenant_operator('m_top', '%s')" % ta)
    scratch = os.path.join(env.dir, "fill")
    f = statefill.Filler(db, env.pgenv, scratch, BCD, sk, note=tap.note)

    def as_role(role, q):
        import psycopg2
        try:
            c = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], user=role, dbname=db)
            c.autocommit = True
            cur = c.cursor()
            cur.execute(q)
            r = cur.fetchone()[0]
            c.close()
            return r
        except psycopg2.Error as e:
            return e.pgerror.splitlines()[0] if e.pgerror else str(e)

    def metrics():
        return as_role("gw_login", "SELECT bc_join.metrics()")

    last = {}

    def check(what, want, text=None):
        """Every sample moved as want says ({key: delta} for counters, {key: value}
        for gauges given with '='), every other sample as it was."""
        nonlocal last
        text = text or metrics()
        got, declared, problems = parse(text)
        tap.eq(problems, [], what + ": the text is well formed")
        expect = dict(last)
        for k, v in want.items():
            if isinstance(v, tuple):     # ('=', value): a gauge's value
                expect[k] = v[1]
            elif v is None:
                expect.pop(k, None)
            else:
                expect[k] = expect.get(k, 0) + v
        skip = {n for n in ("bc_join_audit_log_head_timestamp_seconds", "bc_join_audit_anchor_timestamp_seconds",
                            "bc_join_key_rotation_timestamp_seconds", "bc_join_counters_reset_timestamp_seconds",
                            "bc_join_pending_join_request_oldest_age_seconds")}
        diff = {k: (got.get(k), expect.get(k)) for k in set(got) | set(expect)
                if k[0] not in skip and got.get(k) != expect.get(k)}
        tap.eq(diff, {}, what + ": the samples moved exactly so ({key: (got, expected)})")
        last = {k: v for k, v in got.items()}
        return got, text

    def R(att, outcome):
        return ("bc_join_rounds_total", (("attestor", att), ("outcome", outcome)))

    def F(att, reason):
        return ("bc_join_refusals_total", (("attestor", att), ("reason", reason)))

    G = lambda name, *labels: (name, tuple(labels))

    # -- who may call it
    tap.ok(metrics().startswith("# HELP bc_join_rounds_total "), "the gateway's role calls bc_join.metrics()")
    tap.ok(as_role("m_op", "SELECT bc_join.metrics()").startswith("# HELP"), "the platform operator's too")
    tap.eq(as_role("m_top", "SELECT bc_join.metrics()"), "ERROR:  permission denied for function metrics",
           "a tenant operator may not call it")
    tap.eq(as_role("m_nobody", "SELECT bc_join.metrics()"), "ERROR:  permission denied for schema bc_join",
           "a role with nothing may not call it")
    tap.eq(f.one("SELECT array_agg(r ORDER BY r) FROM unnest(ARRAY['m_nobody', 'm_top', 'bc_join_tenant_operator', "
                 "'m_op', 'gw_login']) r WHERE has_function_privilege(r, 'bc_join.metrics()', 'EXECUTE')"),
           ["gw_login", "m_op"], "EXECUTE: the gateway's and the platform operator's roles only, not PUBLIC")

    text0 = metrics()
    got0, declared, _ = parse(text0)
    tap.eq(declared, FAMILIES, "the families, each once, with their types")
    r = subprocess.run(["promtool", "check", "metrics"], input=text0, capture_output=True, text=True)
    tap.eq((r.returncode, r.stdout + r.stderr), (0, ""), "promtool check metrics finds nothing to say")
    reasons = {dict(k[1])["reason"] for k in got0 if k[0] == "bc_join_attestation_failures_total"}
    tap.eq(sorted(reasons), sorted(["quote", "eventlog", "eventlog-replay", "boot-policy", "ima", "ima-replay",
                                    "ima-policy", "clock-rollback"]), "attestation failures: the fixed reasons, each")
    last = dict(got0)

    # -- the refusal channels, and listeners on them
    cha = as_role("m_top", "SELECT bc_join.refusal_channel('%s')" % ta)
    tap.ok(re.fullmatch(r"bc_join_refusals_[0-9a-f]{32}", cha) is not None and ta not in cha,
           "a tenant operator's refusal_channel(): bc_join_refusals_ and 32 random hex digits")
    tap.eq(as_role("m_top", "SELECT bc_join.refusal_channel('%s')" % tb),
           "ERROR:  no tenant with this id in the tenants you operate", "another tenant's channel is refused it")
    tap.eq(as_role("m_nobody", "SELECT bc_join.refusal_channel('%s')" % ta)[:25], "ERROR:  permission denied",
           "a role with nothing asks for none")
    chb = f.one("SELECT bc_join.refusal_channel(%s)", tb)
    chr_ = f.one("SELECT bc_join.refusal_channel('root')")
    import psycopg2
    listeners = {}
    for name, role, ch in (("a", "m_top", cha), ("b", "postgres", chb), ("root", "postgres", chr_)):
        c = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], user=role, dbname=db)
        c.autocommit = True
        c.cursor().execute('LISTEN "%s"' % ch)
        listeners[name] = c

    def heard(wait=0.3):
        out = {}
        end = time.time() + wait
        while True:
            for name, c in listeners.items():
                c.poll()
                while c.notifies:
                    n = c.notifies.pop(0)
                    out.setdefault(name, []).append((n.channel, n.payload))
            left = end - time.time()
            if left <= 0:
                return out
            select.select([c.fileno() for c in listeners.values()], [], [], left)

    # -- refusals: m-one 5x for tenant A (rate bound 3), m-two 2x for B, m-one 1x nobody's
    req1 = json.loads(f.join_request("r1", attestor="m-one"))
    req2 = json.loads(f.join_request("r2", attestor="m-two"))

    def send(req, evidence, conn=0):
        r = dict(req)
        r["attestation"] = statefill.b64u(json.dumps(dict(evidence, secret=SECRET)).encode())
        return f.send("bc_join", r, conn)

    answers = [send(req1, {"refuse": "bad-x", "tenant": ta}) for _ in range(5)]
    answers += [send(req2, {"refuse": "bad-y", "tenant": tb}) for _ in range(2)]
    answers += [send(req1, {"refuse": "bad-z"})]
    tap.ok(all(a.get("status") == "refused" and a["error"]["code"] == "ACCESS_DENIED" for a in answers),
           "eight joins refused, each the one ACCESS_DENIED")
    check("after the refusals", {R("m-one", o): 0 for o in ("admitted", "deferred-approval", "deferred-challenge",
                                                            "error")}
          | {R("m-two", o): 0 for o in ("admitted", "deferred-approval", "deferred-challenge", "error")}
          | {R("m-one", "refused"): 6, R("m-two", "refused"): 2,
             F("m-one", "m-one:bad-x"): 5, F("m-two", "m-two:bad-y"): 2, F("m-one", "m-one:bad-z"): 1})
    h = heard()
    def events(t):
        c = f.cur()
        c.execute("SELECT id FROM bc_join.events WHERE tenant_id = %s AND type = 'security.join.refused' "
                  "ORDER BY id", (t,))
        return [r[0] for r in c.fetchall()]

    ev_a, ev_b, ev_root = events(ta), events(tb), events("root")
    tap.eq((len(ev_a), len(ev_b), len(ev_root)), (3, 2, 1), "events: 3 of A's 5 (rate bound), B's 2, root's 1")
    pa_ = [json.loads(p) for _, p in h.get("a", [])]
    tap.eq([p["event"] for p in pa_], ev_a, "A's listener heard exactly A's recorded refusals (3 of 5), by event id")
    tap.eq([json.loads(p)["event"] for _, p in h.get("b", [])], ev_b, "B's listener heard B's two and nothing of A's")
    tap.eq([json.loads(p)["event"] for _, p in h.get("root", [])], ev_root,
           "root's listener heard the refusal no evidence authenticated")
    tap.eq(sorted(pa_[0]), sorted(["event", "type", "attestor", "refusal", "at"]),
           "a payload's members: event, type, attestor, refusal, at")
    tap.eq((pa_[0]["type"], pa_[0]["attestor"], pa_[0]["refusal"]),
           ("security.join.refused", "m-one", "m-one:bad-x"), "its type, attestor and refusal")
    tap.ok(abs(pa_[0]["at"] - time.time()) < 60, "its time: epoch seconds, now")
    allp = "".join(p for v in h.values() for _, p in v)
    tap.ok(SECRET not in allp and "Sha256" not in allp and "csr" not in allp.lower(),
           "no payload carries the evidence, a CSR or a hash")

    # the next minute (the service clock moved): told, with what was suppressed before
    c = f.cur(1)
    c.execute("SET bc_join.clock_offset = 61")
    f.send("bc_join", dict(req1, attestation=statefill.b64u(json.dumps({"refuse": "bad-x", "tenant": ta}).encode())), 1)
    # a custom refusal of 159 bytes, every one escaped in JSON
    long_reason = '"' * (158 - len("m-one:")) + "\\"
    send(req1, {"refuse": long_reason, "tenant": ta}, 1)
    h = heard()
    pa_ = [json.loads(p) for _, p in h.get("a", [])]
    tap.eq([p.get("suppressedBefore") for p in pa_], [2, None],
           "the next minute's first refusal says suppressedBefore 2")
    tap.ok(all(len(p.encode()) <= 512 for _, p in h.get("a", [])) and pa_[1]["refusal"].startswith('m-one:"'),
           "a refusal of 159 escaped bytes: the payload stays within 512 bytes (%s)"
           % [len(p.encode()) for _, p in h.get("a", [])])
    tap.eq(set(h) - {"a"}, set(), "nobody else heard them")
    f.one("SELECT bc_join.rotate_request_channel(%s)", ta)
    tap.ok(as_role("m_top", "SELECT bc_join.refusal_channel('%s')" % ta) not in (cha, None),
           "rotate_request_channel() gives the tenant a new refusal channel too")
    c.execute("SET bc_join.clock_offset = 0")
    got, text = check("the next minute", {R("m-one", "refused"): 2, F("m-one", "m-one:bad-x"): 1,
                                          F("m-one", "m-one:" + long_reason): 1})
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    tap.eq((r.returncode, r.stdout + r.stderr), (0, ""), "a reason with quotes and a backslash: still valid text")

    # a custom refusal echoing a stranger's control characters (m_verify does): the
    # text keeps no control byte but newline (else bc-gateway refuses the whole text,
    # for as long as the pair lives: until the server restarts), each one shown as
    # '?', and two refusals alike once so are one sample, not two of the same series
    send(req1, {"refuse": "ctl\r\x01\tz", "tenant": ta})
    send(req1, {"refuse": "ctl\x02\x1b\x7fz", "tenant": ta})
    got, text = check("control characters in a reason", {R("m-one", "refused"): 2, F("m-one", "m-one:ctl???z"): 2})
    tap.eq(sorted({ch for ch in text if ord(ch) < 0x20 or ord(ch) == 0x7f}), ["\n"],
           "no control character but newline in the text (what bc-gateway takes)")
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    tap.eq((r.returncode, r.stdout + r.stderr), (0, ""), "a reason with control characters: still valid text")

    # a stranger sending 70 reasons m-two echoes: m-two keeps 64 reasons apart (bad-y
    # and 63 of these), the other 7 are its "_other"; m-one's next reason is its own
    for k in range(1, 71):
        send(req2, {"refuse": "flood-%d" % k, "tenant": tb})
    send(req1, {"refuse": "after-flood", "tenant": ta})
    want = {F("m-two", "m-two:flood-%d" % k): 1 for k in range(1, 64)}
    want |= {R("m-two", "refused"): 70, F("m-two", "_other"): 7, R("m-one", "refused"): 1,
             F("m-one", "m-one:after-flood"): 1}
    check("70 reasons of one attestor", want)

    # -- a refused continuous-attestation round: a refusal, not an attestation failure
    ok_req = json.loads(f.join_request("n1", attestor="m-one"))
    a = f.send("bc_join", dict(ok_req, attestation=statefill.b64u(json.dumps(
        {"tenant": ta, "pool": pa, "ttl": 1800}).encode())))
    tap.eq(a.get("status"), "issued", "a join admitted (a 30-minute certificate)", f.last_refusal())
    pl = statefill.payload_of(a)
    n1 = statefill.Node("n1", pl["nodeId"], f.node_key("n1"), pl["serial"])
    at = f.send("bc_join.attest", {"proof": statefill.jws_es256(
        n1.key, {"purpose": "attest", "serial": n1.serial, "iat": int(time.time())})})
    tap.eq(at.get("status"), "refused", "an attest round of a node that is not TPM-bound is refused")
    check("a join, a refused attest round",
          {R("m-one", "admitted"): 1} | {R("attest", o): 0 for o in ("admitted", "deferred-approval",
                                                                     "deferred-challenge", "error")}
          | {R("attest", "refused"): 1, F("attest", "attest:not-tpm-bound"): 1,
             G("bc_join_node_certificates_live"): ("=", 1),
             G("bc_join_node_certificates_expiring", ("within", "1h")): ("=", 1),
             G("bc_join_node_certificates_expiring", ("within", "24h")): ("=", 1)})

    # -- an approval: the request waits (tenant B), is approved, the retry is admitted
    areq = json.loads(f.join_request("n2", attestor="m-two"))
    ev = {"approval": 1, "tenant": tb, "pool": pb, "ttl": 5400}
    a = send(areq, ev)
    tap.eq(a.get("status"), "pending", "a join waits for an approval")
    got, _ = check("a request waiting", {R("m-two", "deferred-approval"): 1,
                                         G("bc_join_pending_join_requests", ("tenant", tb)): ("=", 1)})
    age = got.get(G("bc_join_pending_join_request_oldest_age_seconds", ("tenant", tb)))
    tap.ok(age is not None and 0 <= age < 30, "its age is shown for its tenant (%r)" % age)
    f.one("SELECT bc_join.approve_join_request(%s)", f.one("SELECT id FROM bc_join.join_requests"))
    a = send(areq, ev)
    tap.eq(a.get("status"), "issued", "approved, the retry is admitted", f.last_refusal())
    pl = statefill.payload_of(a)
    n2 = statefill.Node("n2", pl["nodeId"], f.node_key("n2"), pl["serial"])
    got, _ = check("approved", {R("m-two", "admitted"): 1,
                                G("bc_join_pending_join_requests", ("tenant", tb)): None,
                                G("bc_join_node_certificates_live"): ("=", 2),
                                G("bc_join_node_certificates_expiring", ("within", "24h")): ("=", 2)})
    tap.ok(not any(k[0] == "bc_join_pending_join_request_oldest_age_seconds" for k in got),
           "no age line once none waits")

    # -- a renewal (bc_join.cert_ttl 7200: the new certificate is not within 1 h) and a session
    a = f.renew(n1)
    tap.eq(a.get("status"), "issued", "the 30-minute certificate renewed", f.last_refusal())
    s = f.session(n2, "svc")
    tap.eq(s.get("status"), "issued", "a session issued", f.last_refusal())
    check("a renewal and a session",
          {R("renew", o): 0 for o in ("deferred-approval", "deferred-challenge", "refused", "error")}
          | {R("session", o): 0 for o in ("deferred-approval", "deferred-challenge", "refused", "error")}
          | {R("renew", "admitted"): 1, R("session", "admitted"): 1,
             G("bc_join_node_certificates_expiring", ("within", "1h")): ("=", 0),
             G("bc_join_sessions_live"): ("=", 1)})

    # -- continuous attestation: n2 overdue (the sweep finds it), then quarantined
    f.one("INSERT INTO bc_join.node_attestation (node_id, state, last_passed_at) "
          "VALUES (%s, 'healthy', now() - interval '1 hour') RETURNING 1", n2.id)
    tap.eq(f.one("SELECT bc_join.attestation_sweep()"), 1, "attestation_sweep() finds n2 overdue")
    check("overdue", {G("bc_join_attestation_stale_nodes"): ("=", 1)})
    f.one("SELECT bc_join.quarantine_node(%s, 'ima-policy', '{}')", n2.id)
    check("quarantined", {G("bc_join_attestation_stale_nodes"): ("=", 0), G("bc_join_quarantined_nodes"): ("=", 1),
                          G("bc_join_node_certificates_live"): ("=", 1),
                          G("bc_join_node_certificates_expiring", ("within", "24h")): ("=", 1),
                          G("bc_join_sessions_live"): ("=", 0)})

    # -- the audit log's head and anchor, a key promotion
    t0 = time.time()
    f.one("SELECT bc_join.audit_anchor()")
    got, _ = check("an anchor", {})
    anchor = got[G("bc_join_audit_anchor_timestamp_seconds")]
    head = got[G("bc_join_audit_log_head_timestamp_seconds")]
    tap.ok(t0 - 1 <= anchor <= time.time() + 1, "the anchor's time is the call's (%r)" % anchor)
    tap.ok(t0 - 60 <= head <= time.time() + 1, "the audit log's head is the quarantine's row, just now (%r)" % head)
    tap.eq(got0[G("bc_join_audit_anchor_timestamp_seconds")], 0.0, "before: no anchor since the server started")
    before = got[G("bc_join_key_rotation_timestamp_seconds", ("key", "signing"))]
    keygen = os.path.join(bctest.TOP, "tools/bc-join-keygen")
    t0 = time.time()
    subprocess.run([keygen, "--stage", env.keys], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([keygen, "--promote", env.keys], check=True, stdout=subprocess.DEVNULL)
    got, _ = check("a promotion", {})
    after = got[G("bc_join_key_rotation_timestamp_seconds", ("key", "signing"))]
    tap.ok(after >= t0 - 0.05 and after > before, "the signing key's rotation time is the promotion's (%r > %r)"
           % (after, before))
    tap.eq(sorted(dict(k[1])["key"] for k in got if k[0] == "bc_join_key_rotation_timestamp_seconds"),
           sorted(["signing", "encryption", "node-ca", "jwt-svid", "ocsp", "ssh-host-ca", "ssh-user-ca"]),
           "every kind of key present has its line")

    # -- more than 50 tenants waiting: the 50 with most, the rest summed as _other
    f.one("""WITH t AS (SELECT g, bc_join.create_tenant('w' || g) AS id FROM generate_series(1, 52) g)
             INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, expires_at, created_at)
             SELECT 'jr_w' || t.g || '_' || k, t.id, 'm-one', 'node', sha256((t.id || k)::bytea),
                    now() + interval '1 day', now() - (t.g || ' minutes')::interval
             FROM t, generate_series(1, CASE WHEN t.g > 50 THEN 1 ELSE 2 END) k RETURNING 1""")
    want = {G("bc_join_pending_join_requests", ("tenant", "_other")): ("=", 2)}
    for g in range(1, 51):
        want[G("bc_join_pending_join_requests", ("tenant", f.one("SELECT id FROM bc_join.tenants WHERE name = %s",
                                                                   "w%d" % g)))] = ("=", 2)
    got, _ = check("52 tenants waiting", want)
    tap.ok(abs(got.get(G("bc_join_pending_join_request_oldest_age_seconds", ("tenant", "_other")), 0) - 52 * 60) < 30,
           "the _other line's age is the oldest of the rest (52 minutes)")
    tap.eq(len([k for k in got if k[0] == "bc_join_pending_join_request_oldest_age_seconds"]), 51,
           "51 age lines: 50 tenants and _other")

    # -- a reset: the counters from zero, the start moved
    f.one("SELECT bc_join.attestor_stats_reset()")
    got, _ = check("a reset", {k: ("=", 0.0) for k in last
                               if k[0] in ("bc_join_rounds_total", "bc_join_refusals_total")})
    tap.ok(got[G("bc_join_counters_reset_timestamp_seconds")] > got0[G("bc_join_counters_reset_timestamp_seconds")],
           "the counters' start moved")
    for c in listeners.values():
        c.close()
    f.close()


def setup(env):
    # a copy of test/run-all's keys (a key promotion below changes them), else new ones
    if os.environ.get("BCJ_KEY_DIR"):
        subprocess.run(["cp", "-a", os.environ["BCJ_KEY_DIR"], env.keys], check=True)
    env.start_cluster("ma", make_keys=not os.environ.get("BCJ_KEY_DIR"))


bctest.run(bctest.ClusterEnv("bcj-metrics-", "bcj", "test.bc-join.local"), setup, body)
