"""halib.py: what the high-availability TAP scripts share (test/ha/*.t).

HAMixin turns bctest's ClusterEnv (and gwlib's / agentlib's Env built on it)
into one on a pg_auto_failover formation made by tools/ha-throwaway.
Standard library only (Debian's /usr/bin/python3).
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, free_port  # noqa: E402

HA = os.path.join(TOP, "tools/ha-throwaway")


class HAMixin:
    """Before a bctest.ClusterEnv subclass: its cluster becomes a pg_auto_failover
    formation (tools/ha-throwaway) with database bcj; conninfo is the multi-host string."""

    def start_cluster(self, tenant, tpm=False):
        """With tpm, ha-throwaway start --tpm: a swtpm and a key directory per node."""
        self.db = "bcj"
        self.ha = os.path.join(self.dir, "ha")
        os.makedirs(self.ha)
        base = free_port(3)
        self.ports = {"node1": base + 1, "node2": base + 2}
        # started first: cleanup stops what a failed or timed-out start left running
        self.started = True
        r = subprocess.run([HA, "start", self.ha, str(base), self.trust_domain] + (["--tpm"] if tpm else []),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError("ha-throwaway start failed:\n" + r.stdout + r.stderr)
        self.multi = r.stdout.strip().splitlines()[-1]
        self.use_primary()
        self.tenant = self.psql("SELECT bc_join.create_tenant('%s')" % tenant)
        self.site = self.psql("SELECT bc_join.create_site('%s', 'dc')" % self.tenant)
        self.pool = self.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (self.tenant, self.site))
        self.service_keys = os.path.join(self.dir, "service-keys.json")
        with open(self.service_keys, "w") as f:
            f.write(self.psql("SELECT bc_join.service_keys()") + "\n")
        self.conninfo = self.multi + " user=gw_login"

    def node_env(self, node):
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.ports[node]), "PGUSER": "postgres"}

    def use_primary(self):
        """Point psql at whichever node is not in recovery; its name."""
        for node in ("node1", "node2"):
            self.pgenv = self.node_env(node)
            if self.psql("SELECT pg_is_in_recovery()", check=False) == "f":
                return node
        raise RuntimeError("no primary")

    def pg_stop(self):
        subprocess.run([HA, "stop", self.ha], check=False)

    def state(self):
        return subprocess.run([HA, "status", self.ha], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout

    def wait_state(self, node, states, timeout=120):
        """Wait until node's reported and assigned states are both in states."""
        pat = re.compile(r"^%s .*\|\s*(%s)\s*\|\s*(%s)\s*$" % (node, states, states), re.M)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pat.search(self.state()):
                return True
            time.sleep(0.2)
        return False
