#!/usr/bin/python3
"""pg_upgrade.t: pg_upgrade of a cluster with bc_join keeps the service.

A cluster filled with every kind of state (test/lib/statefill.py) is
upgraded by pg_upgrade into a new cluster (the same major here, the one
Debian 12 has; test/run-debian13 and docs/operator.md cover 15 to 17): the
new cluster has bc_join installed and preloaded and the same key directory.
pg_upgrade --check passes and the upgrade runs; every row is there and the
service answers as the original.  And the one reason a cluster could not
be upgraded: a database still at bc_join 0.1.0, whose tables held
regprocedure columns (pg_upgrade refuses reg* types but regclass, regrole
and regtype in any table), fails --check until ALTER EXTENSION bc_join
UPDATE; 0.2.0 keeps the functions as text.
Needs the environment test/run-all sets (BCJ_BCD)."""
import os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
import statefill

TOP = bctest.TOP
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq
bcd = os.environ["BCJ_BCD"]
work = tempfile.mkdtemp(prefix="bcj-pgupgrade.")
os.chmod(work, 0o755)
keys = os.path.join(work, "keys")
bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
running = []


def run(*args, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(args, env=e, capture_output=True, text=True, **kw)


def start(name, port):
    out = run(os.path.join(TOP, "tools/pg-throwaway"), "start", os.path.join(work, name), str(port), keys,
              "test.bc-join.local", check=True).stdout
    running.append(name)
    return dict(kv.split("=", 1) for kv in out.split())


def stop(name):
    run(os.path.join(TOP, "tools/pg-throwaway"), "stop", os.path.join(work, name))
    if name in running:
        running.remove(name)


def as_postgres(*args):
    """pg_upgrade refuses root: as the postgres OS user, in a directory it may write."""
    cmd = list(args)
    if os.getuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True)


def upgrade(old, new, check):
    """pg_upgrade from cluster old to new (both stopped); the result."""
    d = lambda n: os.path.join(work, n, "data")
    args = [os.path.join(bindir, "pg_upgrade"), "-b", bindir, "-B", bindir, "-d", d(old), "-D", d(new),
            "-U", "postgres", "-p", str(bctest.free_port()), "-P", str(bctest.free_port())]
    return as_postgres(*(args + (["--check"] if check else [])))


filler = None
try:
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), keys], check=True, capture_output=True)
    subprocess.run(["chown", "-R", "postgres", work], check=False)
    p_old, p_new = bctest.free_port(), bctest.free_port()
    env = start("old", p_old)
    q = lambda db, sql: run("psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql, env=env, check=True)
    q("postgres", "CREATE DATABASE bcj")
    q("bcj", "CREATE EXTENSION bc_join")
    service_keys = os.path.join(work, "service-keys.json")
    with open(service_keys, "w") as f:
        f.write(q("bcj", "SELECT bc_join.service_keys()").stdout)
    filler = statefill.Filler("bcj", env, os.path.join(work, "fill"), bcd, service_keys, note=tap.note)
    filler.fill()
    before = filler.snapshot()
    filler.check_ssh_rows(tap, before, "filled")
    filler.close()
    stop("old")
    start("new", p_new)          # initdb with bc_join preloaded and the key directory, then stopped
    stop("new")
    subprocess.run(["chown", "-R", "postgres", work], check=False)

    r = upgrade("old", "new", check=True)
    ok(r.returncode == 0 and "Clusters are compatible" in r.stdout, "pg_upgrade --check: the clusters are compatible",
       r.stdout[-3000:] + r.stderr[-2000:])
    r = upgrade("old", "new", check=False)
    ok(r.returncode == 0 and "Upgrade Complete" in r.stdout, "pg_upgrade runs", r.stdout[-3000:] + r.stderr[-2000:])
    env = start("new", p_new)
    filler.pgenv = env
    statefill.Filler.compare(tap, before, filler.snapshot(), "after pg_upgrade")
    filler.check_service(tap, "after pg_upgrade")
    stop("new")

    # A database left at 0.1.0 stops pg_upgrade at --check (its regprocedure columns).
    p010 = bctest.free_port()
    env = start("old010", p010)
    q("postgres", "CREATE DATABASE bcj")
    q("bcj", "CREATE EXTENSION bc_join VERSION '0.1.0'")
    stop("old010")
    start("new010", bctest.free_port())
    stop("new010")
    subprocess.run(["chown", "-R", "postgres", work], check=False)
    r = upgrade("old010", "new010", check=True)
    ok(r.returncode != 0 and "reg*" in r.stdout, "a database still at bc_join 0.1.0 fails pg_upgrade --check (reg* "
       "data types in user tables)", r.stdout[-2000:])
    env = start("old010", p010)
    q("bcj", "ALTER EXTENSION bc_join UPDATE")
    stop("old010")
    r = upgrade("old010", "new010", check=True)
    ok(r.returncode == 0, "after ALTER EXTENSION bc_join UPDATE it passes", r.stdout[-2000:])
except Exception:
    import traceback
    tap.ok(False, "script ran to the end", traceback.format_exc())
finally:
    if filler:
        filler.stop()
    for n in list(running):
        stop(n)
    if os.environ.get("BCJ_KEEP"):
        print("# kept " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)
sys.exit(tap.done())
