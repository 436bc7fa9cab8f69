#!/usr/bin/python3
"""sessions.t: hooks get session credentials from a socket-activated bcd.

Shows: bcd started by systemd-socket-activate (the listening socket passed
with LISTEN_FDS/LISTEN_PID exactly as systemd does; bcd execs on the first
connection and creates no socket of its own); 200 hook clients launched at
once across 10 sessions make exactly 10 provisioning requests (10 rows in
bc_join.session_certs, 10 `session` rounds in bc_join.attestor_statistics)
and get 200 credentials, written by bcd into each hook's own directory (key
and chain 0600, owned by the caller, the key certified by the chain, the
chain verified by openssl against the node CA, the SPIFFE ID the node's
/session/<sessionId>), the same certificate for every hook of a session; the
queue depth rises (bcd status and the metrics file) and returns to 0.  Then:
a later request provisions anew (no cache); a context is its own identity
and file; every bad directory (outside the runtime directory, a symbolic
link, group-writable, another owner's, missing) is refused bad-dir (65);
malformed requests bad-request; no daemon at the socket exits 69; over
--max-queue callers are refused busy (75) at once while the others wait;
a revoked node certificate is refused (77).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

HOOKS = 200
SESSIONS = 10


def cert_info(path):
    """(SPIFFE URI, public key PEM) of the first certificate in path."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    with open(path, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())   # the first of the chain
    uri = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.UniformResourceIdentifier)
    pub = cert.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    return (uri[0] if uri else None), pub


def key_pub(path):
    """The public key PEM of the private key in path."""
    from cryptography.hazmat.primitives import serialization
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def burst(tap, env, rt, sock, serial, node_ca):
    """200 hooks at once across 10 sessions while the database holds the provisionings."""
    import json
    dirs = []
    for i in range(HOOKS):
        d = os.path.join(rt, "hooks", "h%03d" % i)
        os.makedirs(d, 0o700)
        dirs.append(d)
    lock = sl.RowLock(env, serial)
    tap.ok(lock.held, "a transaction holds the node certificate row (issue_session will wait)")
    seen = []
    t0 = time.time()
    procs = [sl.hook_bg(env, rt, sock, "sess-%d" % (i % SESSIONS), dirs[i]) for i in range(HOOKS)]
    tap.note("%d hooks launched in %.1f s" % (HOOKS, time.time() - t0))
    full = sl.poll_status(env, rt, sock, lambda st: st["waiting"] == HOOKS, 60, seen)
    tap.ok(full is not None, "all %d hooks wait at once (queue depth %d)" % (HOOKS, HOOKS),
           seen[-1] if seen else "no status")
    if full is not None:
        tap.ok(full["inFlight"] == 4 and full["queued"] == SESSIONS - 4,
               "4 provisionings in flight (--max-provisioning), 6 queued", full)
    deadline, prom = time.time() + 5, ""
    while time.time() < deadline and "bcd_session_waiting %d\n" % HOOKS not in prom:
        time.sleep(0.1)
        with open(os.path.join(rt, "bcd", "metrics.prom")) as f:
            prom = f.read()
    tap.ok("bcd_session_waiting %d\n" % HOOKS in prom,
           "the metrics file publishes the depth too (rewritten at most every 0.25 s)", prom[:400])
    lock.release()
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        results.append((p.returncode, out.decode(), err.decode()))
    ok = [r for r in results if r[0] == 0]
    tap.eq(len(ok), HOOKS, "%d hooks exit 0" % HOOKS, [r for r in results if r[0] != 0][:3])
    final = sl.poll_status(env, rt, sock, lambda st: st["waiting"] == 0 and st["inFlight"] == 0,
                           30, seen)
    depths = [st["waiting"] for st in seen]
    tap.ok(final is not None and max(depths) >= HOOKS and depths[-1] == 0,
           "the depth rose to %d and returned to 0" % max(depths or [0]), depths[-10:])
    tap.ok(final is not None and final["provisionings"] == SESSIONS and final["served"] == HOOKS,
           "bcd counts 10 provisionings and 200 credentials served", final)
    tap.eq(env.psql("SELECT count(*) FROM bc_join.session_certs"), str(SESSIONS),
           "exactly 10 session certificates were issued (one per session)")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.sessions"), str(SESSIONS),
           "and 10 session identities reserved")
    tap.eq(env.psql("SELECT coalesce(sum(calls), 0) FROM bc_join.attestor_statistics "
                    "WHERE attestor = 'session'"), str(SESSIONS),
           "exactly 10 provisioning requests reached the database (attestor_statistics)")
    time.sleep(0.5)
    with open(os.path.join(rt, "bcd", "metrics.prom")) as f:
        prom = f.read()
    tap.ok("bcd_session_waiting 0\n" in prom and "bcd_session_in_flight 0\n" in prom and
           'bcd_session_provisionings_total{outcome="issued"} 10\n' in prom,
           "the metrics file shows the depth back at 0 and 10 provisionings", prom)
    return [json.loads(r[1]) if r[0] == 0 else {} for r in results], dirs


def check_deliveries(tap, env, answers, dirs, node_spiffe, node_ca):
    """Every delivery: in the hook's dir, 0600, ours, key certified, chain verified, one cert per session."""
    files_ok = True
    why = ""
    per_session = {}
    for i, a in enumerate(answers):
        kp, cp = a.get("keyPath", ""), a.get("certPath", "")
        sess = "sess-%d" % (i % SESSIONS)
        if (kp != os.path.join(dirs[i], sess + ".key") or cp != os.path.join(dirs[i], sess + ".crt")
                or not os.path.isfile(kp) or not os.path.isfile(cp)):
            files_ok, why = False, "hook %d: %r" % (i, a)
            break
        for f in (kp, cp):
            st = os.stat(f)
            if st.st_mode & 0o7777 != 0o600 or st.st_uid != os.getuid():
                files_ok, why = False, "%s: mode %o uid %d" % (f, st.st_mode & 0o7777, st.st_uid)
        uri, pub = cert_info(cp)
        if key_pub(kp) != pub:
            files_ok, why = False, "hook %d: the key is not the certificate's" % i
        with open(cp, "rb") as f:
            per_session.setdefault(sess, set()).add(f.read())
        a["uri"] = uri
    tap.ok(files_ok, "200 credentials: <dir>/<session>.key and .crt, 0600, owned by the caller, "
           "each key certified by its certificate", why)
    tap.ok(len(per_session) == SESSIONS and all(len(v) == 1 for v in per_session.values()) and
           len(set(next(iter(v)) for v in per_session.values())) == SESSIONS,
           "every hook of a session got the same certificate, every session its own")
    v = subprocess.run(["openssl", "verify", "-CAfile", node_ca] + [a["certPath"] for a in answers[:SESSIONS]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0 and v.stdout.count(": OK") == SESSIONS,
           "openssl verify -CAfile node-ca accepts the session certificates", v.stdout)
    ids = dict(l.split("|") for l in env.psql(
        "SELECT session_ref || '|' || id FROM bc_join.sessions").splitlines())
    good = all(a.get("uri") == "%s/session/%s" % (node_spiffe, ids.get("sess-%d" % (i % SESSIONS)))
               and a.get("spiffeId") == a.get("uri") for i, a in enumerate(answers))
    tap.ok(good, "each SPIFFE ID is the node's /session/<its session identity>", answers[0])


def refusals(tap, env, rt, sock):
    """No cache, contexts, bad directories, bad requests, no daemon."""
    d = os.path.join(rt, "hooks", "h000")
    r = sl.hook(env, rt, sock, "sess-0", d)
    tap.ok(r.returncode == 0 and r.stdout.splitlines()[0] == os.path.join(d, "sess-0.key")
           and len(r.stdout.splitlines()) == 3 and "PRIVATE KEY" not in r.stdout + r.stderr,
           "a later hook: key path, certificate path, notAfter on stdout (never the key)", r.stdout + r.stderr)
    tap.eq(env.psql("SELECT count(*) FROM bc_join.session_certs"), str(SESSIONS + 1),
           "and a new provisioning (nothing cached or kept spare)")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.sessions"), str(SESSIONS), "for the same session identity")
    r = sl.hook(env, rt, sock, "sess-0", d, context="agent:7")
    tap.ok(r.returncode == 0 and r.stdout.startswith(os.path.join(d, "sess-0@agent:7.key")),
           "a context gets its own files (<session>@<context>.key)", r.stdout + r.stderr)
    tap.eq(env.psql("SELECT context_ref FROM bc_join.sessions WHERE context_ref <> ''"), "agent:7",
           "and its own identity")

    outside = os.path.join(env.dir, "outside")
    os.mkdir(outside, 0o700)
    link = os.path.join(rt, "link")
    os.symlink(os.path.join(rt, "hooks", "h001"), link)
    loose = os.path.join(rt, "loose")
    os.mkdir(loose)
    os.chmod(loose, 0o770)
    foreign = os.path.join(rt, "foreign")
    os.mkdir(foreign, 0o700)
    os.chown(foreign, 65534, 65534)
    for what, dd, needle in [("outside the runtime directory", outside, "under the runtime directory"),
                             ("a symbolic link", link, "symbolic link"),
                             ("group-writable", loose, "writable by its group"),
                             ("owned by another user", foreign, "owned by uid 65534"),
                             ("missing", os.path.join(rt, "nope"), "No such file"),
                             ("with a .. component", os.path.join(rt, "hooks", "..", "hooks", "h001"), '".."')]:
        r = sl.hook(env, rt, sock, "sess-1", dd)
        tap.ok(r.returncode == sl.EX_DATAERR and r.stderr.startswith("bcd credential: bad-dir: ")
               and needle in r.stderr and r.stdout == "",
               "a directory %s: bad-dir, exit 65" % what, r.stderr)
    tap.ok(os.listdir(outside) == [] and os.listdir(foreign) == [] and os.listdir(loose) == [],
           "and nothing was written there")
    r = sl.hook(env, rt, sock, "a/b", d)
    tap.ok(r.returncode == sl.EX_DATAERR and "bcd credential: bad-request: " in r.stderr,
           "a malformed session selector: bad-request, exit 65", r.stderr)
    a = sl.raw(sock, b"this is not json\n")
    tap.ok(a == {"ok": False, "error": "bad-request", "retryable": False,
                 "message": 'the request is not a JSON object with an "op"'},
           "the wire protocol: one JSON answer line to any line", a)
    a = sl.raw(sock, b'{"op":"credential","session":"s","dir":"/x","extra":1}\n')
    tap.ok(a is not None and a["error"] == "bad-request", "unknown members are refused", a)
    r = sl.hook(env, rt, os.path.join(rt, "nobody-here.sock"), "sess-1", d)
    tap.ok(r.returncode == sl.EX_UNAVAILABLE and r.stderr.startswith("bcd credential: no-daemon: "),
           "no daemon at the socket: no-daemon, exit 69 (no fallback)", r.stderr)
    r = subprocess.run([env.bcd_bin, "credential", "--dir", d], stderr=subprocess.PIPE, text=True,
                       env=sl.bcd_env(env, rt))
    tap.eq(r.returncode, sl.EX_USAGE, "no --session: usage, exit 64")
    prom = sl.status(env, rt, sock, prometheus=True)
    tap.ok(prom is not None and "bcd_session_waiting 0\n" in prom and
           'bcd_session_answers_total{code="bad-dir"} 6\n' in prom,
           "bcd status --prometheus: the same numbers, answers by code", prom)


def busy(tap, env, rt, state, serial):
    """--max-queue 3: a fourth and fifth caller are refused busy at once."""
    sock = os.path.join(rt, "bcd", "bcd.sock")
    d = sl.start_daemon(env, "bcd-busy", rt, env.run_args(state, extra=[
        "--max-queue", "3", "--max-provisioning", "1"]))
    tap.ok(sl.wait_socket(d, sock) and "removed the stale socket" in d.text(),
           "bcd on its own removes the stale socket the activated one left, and binds", d.text())
    lock = sl.RowLock(env, serial)
    hooks = []
    for i in range(3):
        hd = os.path.join(rt, "hooks", "h%03d" % i)
        hooks.append(sl.hook_bg(env, rt, sock, "busy-%d" % i, hd))
        sl.poll_status(env, rt, sock, lambda st, n=i + 1: st["waiting"] == n, 30)
    t0 = time.time()
    over = [sl.hook(env, rt, sock, "busy-%d" % i, os.path.join(rt, "hooks", "h010")) for i in (3, 4)]
    tap.ok(all(r.returncode == sl.EX_TEMPFAIL and r.stderr.startswith("bcd credential: busy: ")
               and "--max-queue 3" in r.stderr for r in over) and time.time() - t0 < 10,
           "over --max-queue: busy, exit 75, at once", [r.stderr for r in over])
    st = sl.status(env, rt, sock)
    tap.ok(st is not None and st["waiting"] == 3 and st["inFlight"] == 1 and st["queued"] == 2
           and st["busy"] == 2, "while 3 wait: 1 in flight, 2 queued, 2 busy refusals", st)
    lock.release()
    rcs = [p.wait(60) for p in hooks]
    for p in hooks:
        p.communicate()
    tap.eq(rcs, [0, 0, 0], "the 3 admitted callers are served once the database lets go")
    return d


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("session credentials", "bc_join.issue_session(jsonb) is not installed yet")
        return
    env.gateway("--db-statement-timeout", "60s")   # the row lock below may hold a statement
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("s"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins (bcd run --once)", r.stderr)
    node_spiffe = r.stdout.splitlines()[0] if r.returncode == 0 else "?"
    node_ca = os.path.join(env.dir, "node-ca.pem")
    with open(node_ca, "w") as f:
        f.write(env.psql("SELECT bc_join.service_keys()->>'nodeCa'"))
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    daemon = sl.start_daemon(env, "bcd-activated", rt, env.run_args(state, extra=[
        "--metrics-file", os.path.join(rt, "bcd", "metrics.prom")]), activated=True, sock=sock)
    tap.ok("Execing" not in daemon.text(), "systemd-socket-activate listens; bcd is not started yet")
    st = sl.status(env, rt, sock)
    tap.ok(st is not None and st["nodeCredential"]["present"] and st["waiting"] == 0,
           "the first connection starts bcd, which answers it (the node credential present)", st)
    tap.ok("(socket activation)" in daemon.text() and "Execing" in daemon.text(),
           "bcd took the socket systemd-socket-activate passed", daemon.text())
    serial = st["nodeCredential"]["serial"] if st else "?"
    answers, dirs = burst(tap, env, rt, sock, serial, node_ca)
    check_deliveries(tap, env, answers, dirs, node_spiffe, node_ca)
    refusals(tap, env, rt, sock)
    rc, _ = daemon.stop()
    tap.ok(rc == 0 and os.path.exists(sock),
           "SIGTERM: exit 0; the activated socket is left to its owner (not unlinked)", daemon.text())
    d = busy(tap, env, rt, state, serial)
    env.psql("UPDATE bc_join.node_certs SET revoked_at = now() WHERE serial = '%s'" % serial)
    r = sl.hook(env, rt, sock, "after-revocation", os.path.join(rt, "hooks", "h000"))
    tap.ok(r.returncode == sl.EX_NOPERM and r.stderr.startswith("bcd credential: refused: "),
           "a revoked node certificate: refused, exit 77", r.stderr)
    rc, _ = d.stop()
    tap.ok(rc == 0 and not os.path.exists(sock), "bcd on its own removes its socket when it stops")
    logs = daemon.text() + d.text()
    tap.ok("PRIVATE KEY" not in logs and "jt_" not in logs, "the logs never show a key or token")
    tap.ok("Sanitizer" not in logs, "no sanitizer report in bcd's logs")


agentlib.main(body)
