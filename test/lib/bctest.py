"""bctest.py: what every Python TAP script of bc_join shares.

A minimal TAP producer, free ports on 127.0.0.1, and ClusterEnv: one
temporary directory holding a throwaway PostgreSQL cluster with the real
bc_join extension (tools/bc-join-keygen, tools/pg-throwaway), a tenant, a
site and a pool, the service keys, and a login role of bc_join_gateway.
test/gateway/gwlib.py and test/agent/agentlib.py build on it.
Standard library only (Debian's /usr/bin/python3).
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Every cluster tools/pg-throwaway starts for a test is a copy of one initdb
# (kept under build/pg-templates): 0.2 s instead of 2-3 s on a busy machine.
os.environ.setdefault("PG_THROWAWAY_TEMPLATES", os.path.join(TOP, "build", "pg-templates"))


class Tap:
    """Minimal TAP producer; the plan is printed at the end."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, name), flush=True)
        if not cond:
            self.failed += 1
            # also on stderr: prove shows it without -v, so a CI log says why
            print("# failed: %s" % name, file=sys.stderr, flush=True)
            if diag is not None:
                for line in str(diag).splitlines()[-30:]:
                    print("#   " + line, flush=True)
                    print("#   " + line, file=sys.stderr, flush=True)
        return cond

    def eq(self, got, want, name, diag=None):
        return self.ok(got == want, name,
                       "got %r, expected %r%s" % (got, want, "\n" + str(diag) if diag else ""))

    def skip(self, name, reason):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, reason), flush=True)

    def note(self, msg):
        print("# " + msg, flush=True)

    def done(self):
        print("1..%d" % self.n, flush=True)
        return 1 if self.failed else 0


class SharedDb:
    """A TAP script's own database on test/run-all's cluster (reached through
    the PG* environment run-all exports), with bc_join created, and the
    script's scratch directory under BCJ_SCRATCH, both made afresh."""

    def __init__(self, name, dbname=None):
        import psycopg2
        self.scratch = os.path.join(os.environ["BCJ_SCRATCH"], name)
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.scratch)
        self.dbname = dbname or "bcj_" + name
        self.admin = psycopg2.connect(dbname="postgres")
        self.admin.autocommit = True
        self.admin.cursor().execute("DROP DATABASE IF EXISTS " + self.dbname)
        self.admin.cursor().execute("CREATE DATABASE " + self.dbname)
        self.db = psycopg2.connect(dbname=self.dbname)
        self.db.autocommit = True
        self.cur = self.db.cursor()
        self.cur.execute("CREATE EXTENSION bc_join")

    def one(self, sql, *args):
        """The first column of the first row of sql."""
        self.cur.execute(sql, args)
        return self.cur.fetchone()[0]

    def tenant(self, name, pool="p"):
        """A new tenant with a site and a pool; (tenant, site, pool) ids."""
        t = self.one("SELECT bc_join.create_tenant(%s)", name)
        s = self.one("SELECT bc_join.create_site(%s, 's')", t)
        return t, s, self.one("SELECT bc_join.create_pool(%s, %s, %s)", t, s, pool)


def ephemeral_range():
    """The kernel's ephemeral port range (net.ipv4.ip_local_port_range): ports an
    outgoing connection may take at any moment."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(n=1):
    """A TCP port P with P..P+n-1 free on 127.0.0.1 right now, below the kernel's
    ephemeral range: a port inside it can be taken by any outgoing connection
    between this check and the server's bind (a CI run under load lost
    mitm.py's port that way)."""
    low = 10000
    high = ephemeral_range()[0] - n
    if high <= low + 1000:
        raise RuntimeError("the ephemeral port range starts at %d: too few ports below it" % (high + n))
    for _ in range(200):
        port = random.randint(low, high)
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port + i))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port")


def wait_port(port, proc, what, timeout=20, log=None):
    """Wait until 127.0.0.1:port accepts connections; proc must stay alive
    (log: a function giving its log, shown when it exits)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited at start%s" % (what, ":\n" + log() if log else ""))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not listen" % what)


class Sql:
    """An autocommit psycopg2 connection to a database of a ClusterEnv's
    cluster: conn, its cursor cur, and one()."""

    def __init__(self, env, db):
        import psycopg2
        self.conn = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"],
                                     user=env.pgenv["PGUSER"], dbname=db)
        self.conn.autocommit = True
        self.cur = self.conn.cursor()

    def one(self, sql, *args):
        """The first column of the first row of sql."""
        self.cur.execute(sql, args)
        return self.cur.fetchone()[0]


class ClusterEnv:
    """A temporary directory and a cluster with the extension in database db."""

    def __init__(self, prefix, db, trust_domain):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        self.db = db
        self.trust_domain = trust_domain
        self.pg = os.path.join(self.dir, "pg")
        self.keys = os.path.join(self.dir, "keys")
        self.pgport = free_port()
        self.started = False

    def start_cluster(self, tenant, make_keys=True):
        """Keys (unless the caller made self.keys), the cluster, the database,
        the extension, a tenant with a site and a pool, service-keys.json, and
        gw_login (bc_join_gateway, which the extension grants what the gateway
        needs)."""
        if make_keys:
            subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), self.keys],
                           check=True, stdout=subprocess.DEVNULL)
        self.pg_start()
        self.started = True
        self.psql("CREATE DATABASE %s" % self.db, db="postgres")
        self.psql("CREATE EXTENSION bc_join")
        self.psql("CREATE ROLE gw_login LOGIN IN ROLE bc_join_gateway")
        self.tenant = self.psql("SELECT bc_join.create_tenant('%s')" % tenant)
        self.site = self.psql("SELECT bc_join.create_site('%s', 'dc')" % self.tenant)
        self.pool = self.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (self.tenant, self.site))
        self.service_keys = os.path.join(self.dir, "service-keys.json")
        with open(self.service_keys, "w") as f:
            f.write(self.psql("SELECT bc_join.service_keys()") + "\n")
        self.conninfo = "host=%s port=%d dbname=%s user=gw_login" % (
            os.path.join(self.pg, "sock"), self.pgport, self.db)

    def pg_start(self):
        """Start (or restart) the cluster; a few tries, then the server log's tail."""
        for _ in range(3):
            r = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", self.pg,
                                str(self.pgport), self.keys, self.trust_domain],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0:
                self.pgenv = dict(kv.split("=", 1) for kv in r.stdout.split())
                return
            time.sleep(1)
        raise RuntimeError("cannot start the cluster:\n" + r.stderr)

    def pg_stop(self):
        subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", self.pg], check=False)

    def connect(self, db=None):
        """An autocommit connection (Sql) to db, the env's database unless given."""
        return Sql(self, db or self.db)

    def psql(self, sql, db=None, check=True):
        """Run sql as the superuser; its output, trimmed."""
        envv = dict(os.environ)
        envv.update(self.pgenv)
        r = subprocess.run(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", db or self.db, "-c", sql],
                           env=envv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("psql failed: %s\n%s" % (sql, r.stderr))
        return r.stdout.strip()

    def token(self, uses=1):
        """A fresh join token of the test tenant and pool."""
        return self.psql("SELECT bc_join.create_join_token('%s', '%s', uses => %d)"
                         % (self.tenant, self.pool, uses))

    def stop_processes(self):
        """Stop what the subclass started (before the cluster goes)."""

    def cleanup(self):
        """Stop every process, the cluster; remove the directory (unless BCJ_KEEP)."""
        self.stop_processes()
        if self.started:
            self.pg_stop()
        if os.environ.get("BCJ_KEEP"):
            print("# kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def run(env, setup, body):
    """Run setup(env) then body(tap, env) with cleanup on every path; exit
    with TAP's verdict."""
    tap = Tap()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    try:
        setup(env)
        body(tap, env)
    except Exception:  # report, then clean up
        import traceback
        tap.ok(False, "script ran to the end", traceback.format_exc())
    finally:
        env.cleanup()
    sys.exit(tap.done())
