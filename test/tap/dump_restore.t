#!/usr/bin/python3
"""dump_restore.t: a logical backup keeps the whole state of the CA.

A cluster of its own is filled through the real entry points with every
kind of state (test/lib/statefill.py: token, tpm, x509pop, cloud-iid,
discovery and custom-attestor joins, a renewal, sessions, commands queued
and completed, a revocation, a pending and a rejected join request,
retention-pruned rows, the 16 audit chains, a published anchor, an operator
of one tenant: its regrole restored by name, the role made first; SSH names,
a pool's SSH rule, SSH host and user certificates, one revoked: the KRL's
state).  Then
pg_dump -Fc restored with pg_restore into a new cluster with the same key
directory, pg_dump | psql, and pg_dumpall | psql into a third cluster: every
row of every table is equal, table by table (the root tenant's too: its
created_at and request channel as they were, not made anew by the restore's
CREATE EXTENSION), and the restored service
answers as the original would (statefill's checks: the audit chains and
the anchor, a renewal, a token's remaining uses, the AWS instance refused as
used, the pending request approved and completed, the CRL, the queued
command dispatched once; ssh_krl() the same bytes, its revoked serial listed
by ssh-keygen -Q -l, the SSH host key certified before answered the same
certificate and the revoked one refused, a session's SSH user certificate by
the pool's rule; the KRL after the other two restores too).  A backup older than an anchor published later
is shown behind it, in SQL and by tools/bc-audit-verify offline.
Needs the environment test/run-all sets (BCJ_BCD)."""
import json, os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
import statefill

TOP = bctest.TOP
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq
bcd = os.environ["BCJ_BCD"]
work = tempfile.mkdtemp(prefix="bcj-dump.")
os.chmod(work, 0o755)
keys = os.path.join(work, "keys")
clusters = []


def cluster(name):
    d = os.path.join(work, name)
    port = bctest.free_port()
    out = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", d, str(port), keys,
                          "test.bc-join.local"], capture_output=True, text=True, check=True).stdout
    clusters.append(d)
    return dict(kv.split("=", 1) for kv in out.split())


def sh(env, *args, check=False, **kw):
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run(args, env=e, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        # what the command said, not only its status (a failure seen once under
        # load in a fresh tree left nothing to read)
        raise RuntimeError("%s exited %d: %s" % (" ".join(args)[:200], r.returncode,
                                                 (r.stderr or r.stdout).strip()[-3000:]))
    return r


filler = None
try:
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), keys], check=True, capture_output=True)
    a = cluster("a")
    sh(a, "psql", "-qAtX", "-d", "postgres", "-c", "CREATE DATABASE bcj", check=True)
    sh(a, "psql", "-qAtX", "-d", "bcj", "-c", "CREATE EXTENSION bc_join", check=True)
    service_keys = os.path.join(work, "service-keys.json")
    with open(service_keys, "w") as f:
        f.write(sh(a, "psql", "-qAtX", "-d", "bcj", "-c", "SELECT bc_join.service_keys()", check=True).stdout)
    filler = statefill.Filler("bcj", a, os.path.join(work, "fill"), bcd, service_keys, note=tap.note)
    filler.fill()
    before = filler.snapshot()
    root = filler.one("SELECT row(created_at, request_channel, refusal_channel)::text FROM bc_join.tenants WHERE id = 'root'")
    tap.note("filled: " + ", ".join("%s %d" % (t, len(r)) for t, (_, r) in sorted(before.items())
                                    if r and not t.startswith(":")))
    ok(len([t for t, (_, r) in before.items() if r and not t.startswith(":")]) >= 25,
       "the fill put rows in (nearly) every table", sorted(t for t, (_, r) in before.items() if not r))
    filler.check_ssh_rows(tap, before, "filled")

    fc, plain, allsql = (os.path.join(work, n) for n in ("bcj.dump", "bcj.sql", "all.sql"))
    r = sh(a, "pg_dump", "-Fc", "-d", "bcj", "-f", fc)
    eq(r.returncode, 0, "pg_dump -Fc", r.stderr)
    r = sh(a, "pg_dump", "-d", "bcj", "-f", plain)
    eq(r.returncode, 0, "pg_dump (plain text)", r.stderr)
    r = sh(a, "pg_dumpall", "-f", allsql)
    eq(r.returncode, 0, "pg_dumpall", r.stderr)
    with open(plain) as f:
        text = f.read()
    ok(all("COPY bc_join.%s " % t in text for t in ("audit_log", "node_certs") + statefill.SSH_TABLES),
       "the dump holds the extension's rows (COPY bc_join.audit_log, node_certs, ssh_certs ...)")

    # After the backup: one more row, and an anchor the world sees.
    filler.one("SELECT bc_join.create_site(%s, 'after-the-backup')", filler.t1)
    later_anchor = filler.one("SELECT bc_join.audit_anchor()")
    filler.close()

    # -- pg_restore into a new cluster with the same key directory
    b = cluster("b")
    # the cluster's roles first (pg_dumpall --globals-only; here the one a tenant operator grant names)
    sh(b, "psql", "-qAtX", "-d", "postgres", "-c", "CREATE ROLE bcj_fill_tenant_op LOGIN", check=True)
    sh(b, "psql", "-qAtX", "-d", "postgres", "-c", "CREATE DATABASE bcj", check=True)
    r = sh(b, "pg_restore", "--exit-on-error", "-d", "bcj", fc)
    eq(r.returncode, 0, "pg_restore into a new cluster succeeds", r.stderr)
    filler.pgenv = b
    after = filler.snapshot()
    statefill.Filler.compare(tap, before, after, "pg_restore")
    eq(filler.one("SELECT row(created_at, request_channel, refusal_channel)::text FROM bc_join.tenants WHERE id = 'root'"), root,
       "pg_restore: the root tenant's created_at, request and refusal channels as they were")
    got = filler.one("SELECT bc_join.verify_audit_log(%s)", later_anchor)
    eq(got, False, "an anchor published after the backup: verify_audit_log(anchor) is false on the restore")
    c = filler.cur()
    c.execute("SELECT problem FROM bc_join.audit_anchor_problems(%s)", (later_anchor,))
    probs = [r[0] for r in c.fetchall()]
    ok(probs and all("behind the anchor" in p for p in probs),
       "audit_anchor_problems() says the log is behind it (restored from an older backup)", probs)
    exp = os.path.join(work, "restored.csv")
    sh(b, "psql", "-qAtX", "-d", "bcj", "-c",
       "\\copy (SELECT * FROM bc_join.audit_export) TO '%s' CSV HEADER" % exp, check=True)
    anchor_file = os.path.join(work, "later.jws")
    with open(anchor_file, "w") as f:
        f.write(later_anchor + "\n")
    r = subprocess.run([os.path.join(TOP, "tools/bc-audit-verify"), exp, "--anchor", anchor_file,
                        "--service-keys", service_keys], capture_output=True, text=True)
    ok(r.returncode == 1 and "behind" in r.stderr, "tools/bc-audit-verify says so offline", r.stdout + r.stderr)
    filler.close()
    filler.check_service(tap, "pg_restore")

    # -- pg_dump | psql
    sh(b, "psql", "-qAtX", "-d", "postgres", "-c", "CREATE DATABASE bcj_plain", check=True)
    r = sh(b, "psql", "-qX", "-v", "ON_ERROR_STOP=1", "-d", "bcj_plain", "-f", plain)
    eq(r.returncode, 0, "psql restores the plain-text dump", r.stderr[-2000:])
    statefill.Filler.compare(tap, before, filler.snapshot("bcj_plain"), "pg_dump | psql")
    filler.dbname = "bcj_plain"
    ok(filler.one("SELECT bc_join.verify_audit_log(%s)", filler.anchor), "pg_dump | psql: the log holds against the anchor")
    filler.check_krl(tap, "pg_dump | psql")
    filler.close()
    filler.dbname = "bcj"

    # -- pg_dumpall into a third cluster (roles and all)
    c3 = cluster("c")
    r = sh(c3, "psql", "-qX", "-d", "postgres", "-f", allsql)
    errors = [l for l in r.stderr.splitlines() if "ERROR" in l]
    ok(all('role "postgres" already exists' in l for l in errors),
       "pg_dumpall's script runs (the only error: the superuser role exists)", "\n".join(errors[:10]))
    filler.pgenv = c3
    statefill.Filler.compare(tap, before, filler.snapshot(), "pg_dumpall")
    ok(filler.one("SELECT bc_join.verify_audit_log(%s)", filler.anchor), "pg_dumpall: the log holds against the anchor")
    filler.check_krl(tap, "pg_dumpall")
    ok(filler.one("SELECT count(*) FROM pg_roles WHERE rolname IN ('bc_join_gateway', 'bc_join_operator')") == 2,
       "pg_dumpall: the extension's roles are there")
    filler.close()
except Exception:
    import traceback
    tap.ok(False, "script ran to the end", traceback.format_exc())
finally:
    if filler:
        filler.stop()
    for d in clusters:
        subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", d], capture_output=True)
    if os.environ.get("BCJ_KEEP"):
        print("# kept " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)
sys.exit(tap.done())
