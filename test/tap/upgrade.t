#!/usr/bin/python3
"""upgrade.t: a database made by the released 0.1.0 comes through ALTER
EXTENSION bc_join UPDATE whole, and works.

The way an operator upgrades: the 0.1.0 library is built from this
repository's history (commit e420d1d, where 0.1.0 was released) and runs a
cluster of its own (a relocated copy of this PostgreSQL with that library in
its lib directory), which is filled through the real entry points with every
kind of state (test/lib/statefill.py).  Then the cluster is started with
today's library: before the update every entry point refuses, naming both
versions and the command; after ALTER EXTENSION bc_join UPDATE the schema is
a fresh install's (test/tools/schema-snapshot: every object, privileges,
comments), every row is kept, the issuance log holds (against the anchor the
0.1.0 service published too), and joins, renewals, sessions, approvals and
commands work on the state 0.1.0 left.
Needs the environment test/run-all sets (BCJ_BCD) and git history."""
import glob, os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
import statefill

TOP = bctest.TOP
RELEASE = "e420d1d"          # the commit 0.1.0 was released at

# 0.1.0's library builds against PostgreSQL 15 only (the JSON and PGPROC
# changes of 16 and 17 came with 0.2.0's src/ext/pg_compat.h): a database
# reaches PostgreSQL 17 at 0.2.0 or later (ALTER EXTENSION bc_join UPDATE on
# 15, then pg_upgrade; docs/operator.md), so on 17 there is nothing to run.
_major = subprocess.run(["pg_config", "--version"], capture_output=True, text=True).stdout.split()[1].split(".")[0]
if int(_major) >= 16:
    print("1..0 # SKIP the 0.1.0 library was never built for PostgreSQL %s" % _major)
    sys.exit(0)
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq
bcd = os.environ["BCJ_BCD"]
work = tempfile.mkdtemp(prefix="bcj-upgrade.")
os.chmod(work, 0o755)
keys = os.path.join(work, "keys")
pgdir = os.path.join(work, "pg")
started = []


def run(*args, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(args, env=e, capture_output=True, text=True, **kw)


def old_postgres():
    """This PostgreSQL copied under work/old (its binaries relocate: they find
    lib and share relative to themselves), with the 0.1.0 library."""
    src = os.path.join(work, "v0.1.0")
    os.makedirs(src)
    arch = subprocess.run(["git", "-C", TOP, "archive", RELEASE], capture_output=True)
    if arch.returncode != 0:
        raise RuntimeError("needs this repository's history (git archive %s): %s"
                           % (RELEASE, arch.stderr.decode(errors="replace")))
    subprocess.run(["tar", "-x", "-C", src], input=arch.stdout, check=True)
    b = run("make", "-C", src, "-s", "-j2", "bc_join.so")
    if b.returncode != 0:
        raise RuntimeError("could not build the 0.1.0 library:\n" + b.stderr[-3000:])
    cfg = lambda k: run("pg_config", k, check=True).stdout.strip()
    bindir, libdir, sharedir = cfg("--bindir"), cfg("--pkglibdir"), cfg("--sharedir")
    root = os.path.join(work, "old")
    rb, rl, rs = (root + d for d in (bindir, libdir, sharedir))
    shutil.copytree(bindir, rb, symlinks=True)
    os.makedirs(rl)
    for f in glob.glob(os.path.join(libdir, "*")):
        os.symlink(f, os.path.join(rl, os.path.basename(f)))
    os.unlink(os.path.join(rl, "bc_join.so"))
    shutil.copy(os.path.join(src, "bc_join.so"), os.path.join(rl, "bc_join.so"))
    shutil.copytree(sharedir, rs, symlinks=True)
    got = run(os.path.join(rb, "pg_config"), "--pkglibdir").stdout.strip()
    if got != rl:
        raise RuntimeError("the copy does not relocate (pg_config says %s)" % got)
    return rb


def start(bindir=None):
    env = {"PATH": bindir + ":" + os.environ["PATH"]} if bindir else None
    out = run(os.path.join(TOP, "tools/pg-throwaway"), "start", pgdir, str(port), keys,
              "test.bc-join.local", env=env, check=True).stdout
    started.append(bindir)
    return dict(kv.split("=", 1) for kv in out.split())


def stop(bindir=None):
    env = {"PATH": bindir + ":" + os.environ["PATH"]} if bindir else None
    run(os.path.join(TOP, "tools/pg-throwaway"), "stop", pgdir, env=env)


port = bctest.free_port()
filler = None
oldbin = None
try:
    oldbin = old_postgres()
    ok(True, "the 0.1.0 library is built from %s and installed in a copy of this PostgreSQL" % RELEASE)
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), keys], check=True, capture_output=True)
    env = start(oldbin)
    q = lambda db, sql, **kw: run("psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql, env=env, **kw)
    q("postgres", "CREATE DATABASE bcj", check=True)
    q("bcj", "CREATE EXTENSION bc_join VERSION '0.1.0'", check=True)
    eq(q("bcj", "SELECT extversion FROM pg_extension WHERE extname = 'bc_join'").stdout.strip(), "0.1.0",
       "bc_join 0.1.0 is installed")
    service_keys = os.path.join(work, "service-keys.json")
    with open(service_keys, "w") as f:
        f.write(q("bcj", "SELECT bc_join.service_keys()", check=True).stdout)
    filler = statefill.Filler("bcj", env, os.path.join(work, "fill"), bcd, service_keys, note=tap.note)
    filler.fill()
    before = filler.snapshot()
    ok(True, "0.1.0 filled through its entry points (%d rows)" % sum(len(r) for _, r in before.values()))
    filler.close()
    stop(oldbin)

    # Today's library on the 0.1.0 schema: refused, clearly, until the update.
    env = start()
    filler.pgenv = env
    r = q("bcj", "SELECT bc_join('{}')")
    ok(r.returncode != 0 and "library is version" in r.stderr and "bc_join 0.1.0" in r.stderr
       and "ALTER EXTENSION bc_join UPDATE" in r.stderr,
       "before the update, an entry point refuses, naming both versions and the command", r.stderr)
    r = q("bcj", "SELECT bc_join.renew('{}')")
    ok(r.returncode != 0 and "ALTER EXTENSION bc_join UPDATE" in r.stderr, "and so does renew()", r.stderr)
    eq(q("bcj", "SELECT count(*) FROM bc_join.nodes").stdout.strip(), str(len(before["nodes"][1])),
       "nothing was written meanwhile")

    r = q("bcj", "ALTER EXTENSION bc_join UPDATE")
    eq(r.returncode, 0, "ALTER EXTENSION bc_join UPDATE", r.stderr)
    eq(q("bcj", "SELECT extversion = bc_join.library_version() FROM pg_extension WHERE extname = 'bc_join'")
       .stdout.strip(), "t", "the schema is now the library's version")
    q("postgres", "CREATE DATABASE bcj_fresh", check=True)
    q("bcj_fresh", "CREATE EXTENSION bc_join", check=True)
    # (the fill's own objects are in schema acme, the operator's, not the extension's)
    snap = lambda db: run(os.path.join(TOP, "test/tools/schema-snapshot"), db, "--exclude-schema=acme",
                          env=env, check=True).stdout
    fresh, upgraded = snap("bcj_fresh"), snap("bcj")
    if fresh != upgraded:
        import difflib
        d = "".join(list(difflib.unified_diff(fresh.splitlines(True), upgraded.splitlines(True),
                                              "fresh", "upgraded"))[:120])
    else:
        d = None
    ok(fresh == upgraded, "the upgraded schema is a fresh install's (%d lines of schema-snapshot: objects, "
       "privileges, comments)" % fresh.count("\n"), d)
    after = filler.snapshot()
    # 0.2.0 maps 0.1.0's free-text revocation reasons onto RFC 5280's and the
    # service's own (docs/operator.md, "Revocation"; test/tap/revocation_upgrade.t)
    statefill.Filler.compare(tap, before, after, "upgraded from 0.1.0",
                             columns_changed={("node_certs", "revocation_reason"),
                                              ("session_certs", "revocation_reason")})
    eq(filler.one("SELECT count(*) FROM bc_join.node_certs WHERE revocation_reason = 'reclaimed'"),
       sum(1 for r in before["node_certs"][1] if r[before["node_certs"][0].index("revocation_reason")] == "superseded"),
       "the service's own 'superseded' of a reclaim is 'reclaimed' now")
    filler.check_service(tap, "upgraded")
except Exception:
    import traceback
    tap.ok(False, "script ran to the end", traceback.format_exc())
finally:
    if filler:
        filler.stop()
    stop(started[-1] if started else None)
    if os.environ.get("BCJ_KEEP"):
        print("# kept " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)
sys.exit(tap.done())
