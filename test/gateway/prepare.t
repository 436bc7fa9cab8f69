#!/usr/bin/python3
"""prepare.t: bc-gateway prepares each statement once per database connection.

Real cluster, real extension, the ASan build of the gateway, curl over TLS.
The server logs every Parse and Execute of the gateway's role
(log_min_duration_statement = 0), so the test sees what was sent:

- many requests on one connection: one Parse of each statement, every
  Execute by its prepared name, the answers as before;
- a Prepare the server refuses (the role loses USAGE on the schema) is that
  request's error, exactly as the unprepared statement's, and the statement
  is prepared again, and works, once the privilege is back;
- a connection the server kills is re-opened and prepares again (never
  "prepared statement does not exist");
- --db-no-prepare sends the statements unprepared.
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

RENEW = "SELECT t.r, t.r->>'status' FROM bc_join.renew($1::jsonb) AS t(r)"
JOIN = "SELECT t.r, t.r->>'status' FROM public.bc_join($1::jsonb) AS t(r)"


def server_log(env):
    with open(os.path.join(env.pg, "server.log"), "rb") as f:
        return f.read().decode("utf-8", "replace")


def since(env, mark):
    return server_log(env)[mark:]


def parses(text, sql):
    """Names of the Parse messages of sql in text ('<unnamed>' for unnamed)."""
    return re.findall(r"parse (\S+): " + re.escape(sql), text)


def executes(text, sql):
    """Names of the Bind messages of sql (an Execute is logged only when it succeeds)."""
    return re.findall(r"bind (\S+): " + re.escape(sql), text)


def wait_log(env, mark, pred, timeout=5):
    end = time.time() + timeout
    while True:
        t = since(env, mark)
        if pred(t) or time.time() > end:
            return t
        time.sleep(0.05)


def body(tap, env):
    env.psql("ALTER ROLE gw_login SET log_min_duration_statement = 0")
    g = env.gateway("prep", "--db-pool", "1")
    u = env.gateway("noprep", "--db-pool", "1", "--db-no-prepare")

    # A renewal whose CSR is not DER: bc_join.renew raises INVALID_INPUT (400).
    renew = json.dumps({"csr": "AAAA", "proof": "x.y.z"})
    token = env.token(uses=1)
    req, d = env.join_request("p1", token)

    mark = len(server_log(env))
    codes = [env.curl(g, "/v1/renew", data=renew)[0] for _ in range(6)]
    code, _, out = env.curl(g, "/v1/join", data_file=req)
    t = wait_log(env, mark, lambda t: len(executes(t, JOIN)) >= 1 and len(executes(t, RENEW)) >= 6)
    tap.eq(codes, [400] * 6, "six invalid renewals through the preparing gateway: 400 each")
    tap.eq(code, 200, "a join through it: 200")
    if code == 200:
        with open(os.path.join(env.dir, "p1.resp"), "wb") as f:
            f.write(out)
        v = env.verify(d, os.path.join(env.dir, "p1.resp"))
        tap.ok(v.returncode == 0, "its answer verifies as before", v.stderr)
    else:
        tap.ok(False, "its answer verifies as before", out)
    rp, rx = parses(t, RENEW), executes(t, RENEW)
    tap.eq(len(rp), 1, "the renewal statement is parsed once on the connection", rp)
    tap.ok(len(rx) == 6 and len(set(rx)) == 1 and rx[0].startswith("bc_gw_"),
           "its six executions run the prepared statement by name", rx)
    jp, jx = parses(t, JOIN), executes(t, JOIN)
    tap.ok(len(jp) == 1 and len(jx) == 1 and jx[0].startswith("bc_gw_") and jx[0] != rx[0],
           "the join statement is prepared under a name of its own", (jp, jx))

    # The unprepared gateway: unnamed statements, the same answers.
    mark = len(server_log(env))
    codes = [env.curl(u, "/v1/renew", data=renew)[0] for _ in range(3)]
    t = wait_log(env, mark, lambda t: len(executes(t, RENEW)) >= 3)
    tap.eq(codes, [400] * 3, "--db-no-prepare: the same 400s")
    ux = executes(t, RENEW)
    tap.ok(len(ux) == 3 and set(ux) == {"<unnamed>"} and "bc_gw_" not in t,
           "--db-no-prepare: every statement unnamed, nothing prepared", ux)

    # A Prepare the server refuses is the request's error, and not remembered.
    env.psql("REVOKE USAGE ON SCHEMA bc_join FROM bc_join_gateway")
    g2 = env.gateway("prep2", "--db-pool", "1")
    c_prep = env.curl(g2, "/v1/renew", data=renew)
    c_unprep = env.curl(u, "/v1/renew", data=renew)
    env.psql("GRANT USAGE ON SCHEMA bc_join TO bc_join_gateway")
    tap.ok(c_prep[0] >= 500 and (c_prep[0], c_prep[2]) == (c_unprep[0], c_unprep[2]),
           "a refused Prepare answers exactly what the unprepared statement answers (%d)"
           % c_prep[0], (c_prep, c_unprep))
    mark = len(server_log(env))
    c = [env.curl(g2, "/v1/renew", data=renew)[0] for _ in range(2)]
    t = wait_log(env, mark, lambda t: len(executes(t, RENEW)) >= 2)
    tap.eq(c, [400, 400], "after the GRANT the same connection serves the statement")
    tap.ok(len(parses(t, RENEW)) == 1 and len(executes(t, RENEW)) == 2,
           "it was prepared again, once", t[-2000:])
    lines = g2.log_lines()
    tap.ok(not any(ln.get("msg", "").startswith("database connection lost") for ln in lines),
           "a refused Prepare does not drop the connection")

    # The server kills the gateway's backend: a new connection prepares again.
    n = env.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                 "WHERE usename = 'gw_login'")
    tap.ok(int(n) >= 1, "the gateways' backends are terminated (%s)" % n)
    time.sleep(0.3)
    mark = len(server_log(env))
    c = [env.curl(g, "/v1/renew", data=renew)[0] for _ in range(3)]
    t = wait_log(env, mark, lambda t: len(executes(t, RENEW)) >= 3)
    tap.eq(c, [400] * 3, "after the kill the preparing gateway answers as before")
    tap.ok(len(parses(t, RENEW)) == 1 and "does not exist" not in t,
           "the new connection prepared the statement once; no missing prepared statement",
           t[-2000:])


gwlib.main(body)
