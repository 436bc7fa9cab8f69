#!/usr/bin/python3
"""approval.t: a join deferred for an operator's approval completes while bcd waits.

A custom attestor replaces join-token and defers every join until an
operator approves it (retryAfterSeconds 1).  bcd run --once waits through
the pending rounds; stopped (SIGTERM) and restarted mid-approval it reuses
the same key and CSR (one request waits, not two); once the operator runs
bc_join.approve_join_request() in SQL it finishes with the SPIFFE ID.  A
rejected request ends in the one refusal (exit 2).  A challenge, which no
producer of bcd answers yet, fails clearly.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import mode  # noqa: E402


def wait_sql(env, sql, want, timeout=30):
    """Poll sql until it returns want; True when it did in time."""
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        got = env.psql(sql)
        if got == want:
            return True
        time.sleep(0.2)
    return False


def body(tap, env):
    """The script."""
    env.register_approval_attestor()
    state = os.path.join(env.dir, "state")
    tok = env.token_file("a")
    args = env.run_args(state, token_file=tok, extra=["--once", "--max-retry-after", "2"])

    bcd = env.bcd_bg("run", *args)
    tap.ok(wait_sql(env, "SELECT count(*) FROM bc_join.pending_join_requests", "1"),
           "the join waits in bc_join.pending_join_requests")
    tap.ok(bcd.wait_log("pending", 15, count=2), "bcd asks again while it waits (pending rounds)",
           bcd.text())
    tap.ok(bcd.proc.poll() is None, "and is still running")
    csr = open(os.path.join(state, "join", "node.csr.der"), "rb").read()
    tap.eq(mode(os.path.join(state, "join", "node.key")), 0o600, "the join key in join/ is 0600")

    # -- stopped and restarted mid-approval: the same key and CSR ----------------------
    t0 = time.time()
    rc, out = bcd.stop(signal.SIGTERM, 20)
    tap.ok(rc == 0 and out == "" and time.time() - t0 < 5,
           "SIGTERM while waiting: exit 0 promptly, nothing printed", bcd.text())
    bcd = env.bcd_bg("run", *args)
    tap.ok(bcd.wait_log("pending", 15), "restarted, bcd is pending again", bcd.text())
    tap.eq(open(os.path.join(state, "join", "node.csr.der"), "rb").read(), csr,
           "it reuses the same CSR (and key) from join/")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.join_requests"), "1",
           "so the operator still sees one request, not two")

    # -- the operator approves ----------------------------------------------------------
    rid = env.psql("SELECT id FROM bc_join.pending_join_requests")
    env.psql("SELECT bc_join.approve_join_request('%s')" % rid)
    rc, out = bcd.wait(30)
    lines = out.splitlines()
    prefix = "spiffe://%s/tenant/%s/node/" % (agentlib.TRUST_DOMAIN, env.tenant)
    tap.ok(rc == 0 and len(lines) == 2 and lines[0].startswith(prefix),
           "after the approval bcd finishes and prints the SPIFFE ID", out + bcd.text())
    tap.ok(os.path.exists(os.path.join(state, "node-chain.pem")) and
           not os.path.exists(os.path.join(state, "join")), "the credential is stored, join/ removed")
    node_id = lines[0].rsplit("/", 1)[-1] if lines else "?"
    tap.eq(env.psql("SELECT array_to_string(allowed_kinds, ',') FROM bc_join.node_certs "
                    "WHERE node_id = '%s'" % node_id), "inventory.refresh,diag.*",
           "the certificate carries the attestor's allowedKinds")

    # -- a rejected request ends in the refusal -------------------------------------------
    state2 = os.path.join(env.dir, "state2")
    bcd2 = env.bcd_bg("run", *env.run_args(state2, token_file=env.token_file("b"),
                                          extra=["--once", "--max-retry-after", "2"]))
    tap.ok(wait_sql(env, "SELECT count(*) FROM bc_join.pending_join_requests", "1"),
           "a second host waits for approval")
    rid = env.psql("SELECT id FROM bc_join.pending_join_requests")
    env.psql("SELECT bc_join.reject_join_request('%s', 'unknown machine')" % rid)
    rc, out = bcd2.wait(30)
    tap.ok(rc == 2 and "refused" in bcd2.text(), "after a rejection bcd exits 2 (refused)",
           "rc %s\n%s" % (rc, bcd2.text()))
    tap.ok(not os.path.exists(os.path.join(state2, "node-chain.pem")), "and stores nothing")

    # -- a challenge goes to the producer of its attestor: join-token has none ---------------
    env.psql("""
CREATE FUNCTION public.challenger_verify(evidence jsonb, context jsonb) RETURNS jsonb LANGUAGE sql SET search_path = public, pg_catalog, pg_temp AS
$$ SELECT jsonb_build_object('deferred', 'challenge', 'challenge', 'AAECAw') $$;
SELECT bc_join.register_attestor('challenger', '1', ARRAY['node'], 'public.challenger_verify(jsonb,jsonb)');
""")
    state3 = os.path.join(env.dir, "state3")
    r = env.bcd("run", *env.run_args(state3, token_file=env.token_file("c"),
                                     extra=["--once", "--attestor", "challenger"]), timeout=30)
    tap.ok(r.returncode == 1 and "no producer answers challenges for challenger" in r.stderr,
           "a challenge without a producer fails clearly (exit 1)", r.stderr)
    tap.ok(not os.path.exists(os.path.join(state3, "node-chain.pem")), "and stores nothing")


agentlib.main(body)
