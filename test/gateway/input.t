#!/usr/bin/python3
"""input.t: unauthenticated input that the jsonb input cast refuses is a 400
INVALID_INPUT, never a 500.

The gateway's statement is SELECT <function>($1::jsonb); a body that is not a
valid jsonb value fails in the cast, before the function runs, with a class 22
SQLSTATE (22003 numeric out of range, 22P02 invalid JSON, 22021 invalid UTF-8,
22P05 \\u0000) or 54001 (stack depth: deep nesting).  Each such body, on each
relayed route, must be answered 400 with the INVALID_INPUT body, counted as
`invalid`, logged without the body, and the gateway must keep serving joins.
"""
import json
import subprocess
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

MARK = "ZQXJ7M"      # in every bad body: must never show up in the log

BODIES = [
    ("a number 1e1000000 in a member", ('{"csr": 1e1000000, "m": "%s"}' % MARK).encode()),
    ("a number -1e1000000 deep in claims",
     ('{"claims": {"macs": [-1e1000000]}, "m": "%s"}' % MARK).encode()),
    ("a 30,000-deep nested array", b"[" * 30000 + ('"%s"' % MARK).encode() + b"]" * 30000),
    # 5 bytes a level: 13,000 levels is what fits under 64 KiB
    ("a 13,000-deep nested object (valid jsonb, refused by the function)", b'{"":' * 13000 + ('"%s"' % MARK).encode() + b"}" * 13000),
    ("invalid UTF-8 in a string", b'{"csr": "\xff\xfe\xc3", "m": "' + MARK.encode() + b'"}'),
    ("invalid JSON text", ("csr=%s&role=node" % MARK).encode()),
    ("a string with \\u0000", ('{"csr": "a\\u0000b", "m": "%s"}' % MARK).encode()),
]


def is_invalid_input(code, b):
    try:
        j = json.loads(b)
    except ValueError:
        return False
    return (code == 400 and set(j) == {"status", "error"} and j["status"] == "error" and
            set(j["error"]) == {"code", "message"} and j["error"]["code"] == "INVALID_INPUT" and
            isinstance(j["error"]["message"], str) and j["error"]["message"] != "")


def body(tap, env):
    g = env.gateway("input", "--log-level", "debug")
    # whatever the extension has installed: a route whose function is missing is 404
    routes = ["/v1/join"]
    for path, fn in (("/v1/renew", "bc_join.renew(jsonb)"),
                     ("/v1/session", "bc_join.issue_session(jsonb)")):
        if env.psql("SELECT to_regprocedure('%s') IS NULL" % fn) == "t":
            tap.skip("POST %s with bad bodies" % path, "%s is not installed" % fn)
        else:
            routes.append(path)

    # what the database itself says about each body (as the gateway's statement would)
    for name, data in BODIES:
        path = os.path.join(env.dir, "probe.json")
        with open(path, "wb") as f:
            f.write(data)
        envv = dict(os.environ)
        envv.update(env.pgenv)
        r = subprocess.run(["psql", "-qAtX", "-d", env.db, "-v", "VERBOSITY=verbose", "-c",
                            "SELECT convert_from(pg_read_binary_file('%s'), 'UTF8')::jsonb IS NULL" % path],
                           env=envv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tap.note("%s: the database says %s" % (name, (r.stderr.splitlines() or ["(nothing)"])[0][:100]))

    n = 0
    for path in routes:
        for name, data in BODIES:
            code, h, b = env.curl(g, path, data=data)
            n += 1
            tap.ok(is_invalid_input(code, b), "POST %s with %s is 400 INVALID_INPUT" % (path, name),
                   (code, b[:300]))
            low = b.lower()
            tap.ok(MARK.encode().lower() not in low and
                   not any(w in low for w in (b"detail", b"context", b"select", b"line ", b"sql")),
                   "POST %s with %s: the answer echoes neither the body nor SQL" % (path, name), b[:300])

    # genuine server errors stay 5xx: a custom attestor that fails inside the join
    env.psql("CREATE FUNCTION public.boom_verify(evidence jsonb, context jsonb) RETURNS jsonb "
             "LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$BEGIN RAISE EXCEPTION 'boom %s' USING ERRCODE = 'XX000'; END$$" % MARK)
    env.psql("SELECT bc_join.register_attestor('boom', '1', ARRAY['node'], "
             "'public.boom_verify(jsonb,jsonb)'::regprocedure)")
    token = env.token(uses=1)
    req, _ = env.join_request("boom", token)
    with open(req) as f:
        jr = json.load(f)
    jr["attestor"] = "boom"
    jr["attestation"] = "AAAA"
    code, _, b = env.curl(g, "/v1/join", data=json.dumps(jr))
    tap.ok(code == 500 and json.loads(b)["error"]["code"] == "INTERNAL" and MARK.encode() not in b,
           "a server fault (XX000 in a custom attestor) is still 500 INTERNAL, its message kept", (code, b))

    code, _, b = env.curl(g, "/metrics")
    text = b.decode()
    inv = sum(float(l.split()[-1]) for l in text.splitlines()
              if l.startswith("bc_gateway_requests_total{") and 'outcome="invalid"' in l)
    err = sum(float(l.split()[-1]) for l in text.splitlines()
              if l.startswith("bc_gateway_requests_total{") and 'outcome="error"' in l)
    tap.ok(inv == n and err == 1, "every bad body is counted as invalid, none as error (the "
           "fault is the one error)", (inv, err, n))

    # still serving joins
    token = env.token(uses=1)
    req, d = env.join_request("after-bad-input", token)
    code, _, b = env.curl(g, "/v1/join", data_file=req)
    resp = os.path.join(env.dir, "resp-after.json")
    with open(resp, "wb") as f:
        f.write(b)
    v = env.verify(d, resp)
    tap.ok(code == 200 and v.returncode == 0, "a real join afterwards is 200 and verifies",
           (code, v.stderr))

    tap.eq(g.stop(), 0, "the gateway exits 0 on SIGTERM (ASan/LSan clean)")
    text = g.log_text()
    lines = g.log_lines()
    tap.ok(MARK not in text, "the log never holds a bad body (nor a piece of it)")
    reqs = [j for j in lines if j.get("msg") == "request" and j.get("status") == 400]
    tap.ok(len(reqs) == n and all(j.get("outcome") == "invalid" and j.get("level") == "info" or
                                  j.get("sqlstate", "").startswith("54") for j in reqs),
           "each is logged once as a 400 invalid request line", reqs[:3])
    tap.ok(all("sqlstate" in j for j in reqs), "each 400 line carries the SQLSTATE",
           [j for j in reqs if "sqlstate" not in j][:3])
    tap.note("sqlstates seen: %s" % sorted({j.get("sqlstate") for j in reqs}))


gwlib.main(body)
