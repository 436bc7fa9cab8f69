#!/usr/bin/python3
"""metrics.t: the metrics listener (--metrics-listen, #48) serves the
gateway's own families followed by bc_join.metrics(), as a scrape sees them.

A real cluster with the installed extension, the ASan gateway with a
metrics listener (--metrics-max-age 0.5s, --retry-after 1), the real agent's
join requests over HTTPS, and an attestor deferring to an operator's
approval (a custom one, as test/tap/approval.t's).  Shows:
  - the metrics listener answers GET /metrics (200, text 0.0.4): the
    gateway's families first, then bc_join_* (each family's TYPE once),
    bc_gateway_service_metrics_up 1; GET /healthz; nothing else (an API path
    404, POST /metrics 405);
  - the public listener's /metrics shows no bc_join_ family;
  - a scripted burst through the public listener (one join, three refusals
    of a spent token, two of a revoked one, two joins deferred for approval,
    approved, then admitted) moves bc_join_refusals_total by exactly 3 and 2
    for those two reasons and nothing else, bc_join_rounds_total by exactly
    the rounds made, bc_join_pending_join_requests up by two then back, and
    bc_join_node_certificates_live by three;
  - a text over 1 MiB, or one that is not Prometheus text, is refused (a
    fetch error, up 0, the precise reason in the log) and the last good text
    is still served;
  - the database gone: up 0 with the last good text, then (past 5 x
    --metrics-max-age) without it, the gateway's own families still 200;
    the gateway exits 0.
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

STARTED = time.time()
MAX_AGE = 0.5           # --metrics-max-age: a copy is served for 5 x that (2.5 s) while fetches fail
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
FAMILY = re.compile(r"^(?:# (?:HELP|TYPE) )?bc_join_", re.M)


def samples(text):
    """{(name, ((label, value), ...)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if m:
            labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def delta(before, after, name):
    """{labels: after - before} of the samples of name that moved."""
    keys = {k for k in list(before) + list(after) if k[0] == name}
    moved = {}
    for k in keys:
        d = after.get(k, 0) - before.get(k, 0)
        if d != 0:
            moved[dict(k[1]).get("attestor", "") + "|" + (dict(k[1]).get("reason") or
                                                           dict(k[1]).get("outcome", ""))] = d
    return moved


def total(s, name):
    return sum(v for k, v in s.items() if k[0] == name)


class MetricsPort:
    """The metrics listener of a gateway, for env.curl."""

    def __init__(self, port):
        self.port = port

    def url(self, path):
        return "https://127.0.0.1:%d%s" % (self.port, path)


def body(tap, env):
    if env.psql("SELECT to_regprocedure('bc_join.metrics()') IS NOT NULL") != "t":
        tap.skip("metrics listener", "bc_join.metrics() is not in the installed extension")
        return
    # an attestor that defers every join to an operator's approval
    env.psql("""
CREATE FUNCTION public.approve_me_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $f$
DECLARE
	deferral jsonb := bc_join.await_approval('approve-me', '%s', context);
BEGIN
	IF deferral IS NOT NULL THEN
		RETURN deferral;
	END IF;
	RETURN jsonb_build_object('tenantId', '%s', 'role', 'node', 'poolId', '%s');
END $f$;
SELECT bc_join.register_attestor('approve-me', '1', ARRAY['node'], 'public.approve_me_verify(jsonb,jsonb)');
""" % (env.tenant, env.tenant, env.pool))

    mp = MetricsPort(gwlib.free_port())
    # client_encoding=LATIN1 asked for: the gateway talks UTF8 all the same
    g = env.gateway("m", "--db-pool", "2", "--retry-after", "1",
                    "--db", env.conninfo + " client_encoding=LATIN1",
                    "--metrics-listen", "127.0.0.1:%d" % mp.port, "--metrics-max-age", "%gs" % MAX_AGE)

    def scrape():
        code, h, b = env.curl(mp, "/metrics")
        text = b.decode("utf-8", "replace")
        return code, h, text, samples(text)

    fetched = [0.0]

    def fresh(wait=MAX_AGE + 0.05):
        """A scrape after the copy turned stale (and any --retry-after window
        passed): this one fetched bc_join.metrics() (fetched[0]: no later
        than that fetch's start)."""
        time.sleep(wait)
        fetched[0] = time.monotonic()
        return scrape()

    t0 = time.monotonic()
    tap.note("%.1f s since the script started" % (time.time() - STARTED))
    code, h, text, before = scrape()
    types = re.findall(r"^# TYPE (\S+) ", text, re.M)
    tap.ok(code == 200 and h.get("content-type") == "text/plain; version=0.0.4",
           "the metrics listener: GET /metrics is 200, text/plain; version=0.0.4", (code, h))
    tap.ok(len(types) == len(set(types)), "every family's TYPE once, the service's and the gateway's",
           [t for t in types if types.count(t) > 1])
    want = {"bc_join_rounds_total", "bc_join_refusals_total", "bc_join_pending_join_requests",
            "bc_gateway_requests_total", "bc_gateway_db_pool_size", "bc_gateway_service_metrics_up",
            "bc_gateway_service_metrics_fetches_total", "bc_gateway_service_metrics_age_seconds"}
    tap.ok(want <= set(types), "the gateway's families and the service's", sorted(want - set(types)))
    first_service = min(i for i, t in enumerate(types) if t.startswith("bc_join_"))
    tap.ok(all(t.startswith("bc_gateway_") for t in types[:first_service]) and
           all(t.startswith("bc_join_") for t in types[first_service:]),
           "the gateway's families first, then bc_join.metrics()'s text", types)
    tap.eq(gwlib.metric(text, "bc_gateway_service_metrics_up"), 1.0, "bc_gateway_service_metrics_up 1")

    code, _, b = env.curl(g, "/metrics")
    api = b.decode()
    tap.ok(code == 200 and "bc_gateway_requests_total" in api and not FAMILY.search(api),
           "the public listener's /metrics: the gateway's families, no bc_join_ family",
           FAMILY.findall(api)[:3])
    code, _, b = env.curl(mp, "/healthz")
    tap.ok(code == 200 and b == b"ok\n", "GET /healthz on the metrics listener", (code, b))
    code, _, _ = env.curl(mp, "/v1/crl")
    code2, h2, _ = env.curl(mp, "/metrics", data="{}")
    tap.ok(code == 404 and code2 == 405 and h2.get("allow") == "GET",
           "nothing else there: GET /v1/crl 404, POST /metrics 405 Allow: GET", (code, code2, h2))

    tap.note("%.1f s: the burst" % (time.monotonic() - t0))
    # -- the burst, through the public listener ----------------------------
    spent = env.token(uses=1)
    env.join_node(g, "n0", spent)
    revoked = env.token(uses=5)
    env.psql("SELECT bc_join.revoke_join_token('%s')" % revoked.rsplit(".", 1)[0])
    refused = []
    for i, tok in enumerate([spent, spent, spent, revoked, revoked]):
        req, _ = env.join_request("r%d" % i, tok)
        refused.append(env.curl(g, "/v1/join", data_file=req)[0])
    tap.eq(refused, [403] * 5, "five joins refused: a spent token three times, a revoked one twice")
    waiting = []
    for i in range(2):
        req = os.path.join(env.dir, "approve-%d.json" % i)
        with open(req, "wb") as f:
            f.write(gwlib.subprocess.run(
                [env.bcd, "join-request", "--service-keys", env.service_keys, "--attestor", "approve-me",
                 "--out-dir", os.path.join(env.dir, "host-a%d" % i)],
                check=True, stdout=gwlib.subprocess.PIPE).stdout)
        code, _, b = env.curl(g, "/v1/join", data_file=req)
        waiting.append((req, code, json.loads(b).get("status") if code == 200 else b))
    tap.eq([w[1:] for w in waiting], [(200, "pending")] * 2, "two joins wait for an approval")

    _, _, _, mid = fresh()
    tap.eq(total(mid, "bc_join_pending_join_requests") - total(before, "bc_join_pending_join_requests"), 2,
           "bc_join_pending_join_requests: two more")
    for rid in env.psql("SELECT id FROM bc_join.join_requests WHERE state = 'pending'").split():
        env.psql("SELECT bc_join.approve_join_request('%s')" % rid)
    admitted = []
    for req, _, _ in waiting:
        code, _, b = env.curl(g, "/v1/join", data_file=req)
        admitted.append((code, json.loads(b).get("status") if code == 200 else b))
    tap.eq(admitted, [(200, "issued")] * 2, "approved, the two retries are issued")

    _, _, _, after = fresh()
    moved = delta(before, after, "bc_join_refusals_total")
    tap.ok(len(moved) == 2 and
           sorted((k.split("|")[0], k.split("|")[1].split(":")[-1], v) for k, v in moved.items()) ==
           [("join-token", "revoked", 2), ("join-token", "spent", 3)],
           "bc_join_refusals_total: join-token spent +3, revoked +2, nothing else", moved)
    tap.eq(delta(before, after, "bc_join_rounds_total"),
           {"join-token|admitted": 1, "join-token|refused": 5,
            "approve-me|deferred-approval": 2, "approve-me|admitted": 2},
           "bc_join_rounds_total: exactly the rounds made")
    tap.eq(total(after, "bc_join_pending_join_requests"), total(before, "bc_join_pending_join_requests"),
           "bc_join_pending_join_requests: back where it was")
    tap.eq(total(after, "bc_join_node_certificates_live") - total(before, "bc_join_node_certificates_live"),
           3, "bc_join_node_certificates_live: three more")
    tap.eq(delta(before, after, "bc_gateway_requests_total").get("|refused"), 5.0,
           "and the gateway's own bc_gateway_requests_total{endpoint=join,outcome=refused} +5 on the same scrape")

    tap.note("%.1f s: garbage" % (time.monotonic() - t0))
    # -- texts the gateway refuses ------------------------------------------
    def errors(s):
        return s.get(("bc_gateway_service_metrics_fetches_total", (("result", "error"),)), 0)

    env.psql("ALTER FUNCTION bc_join.metrics() RENAME TO metrics_real")
    last_good = fetched[0]
    garbage = [("repeat('bc_join_x 1' || chr(10), 100000)", "larger than 1 MiB"),
               ("'<html>oops</html>' || chr(10)", "neither a sample nor a comment")]
    for i, (sql, reason) in enumerate(garbage):
        env.psql("CREATE OR REPLACE FUNCTION bc_join.metrics() RETURNS text LANGUAGE sql AS $$ SELECT %s $$" % sql)
        e0 = errors(after)
        # the second: --retry-after 1 after the failed fetch
        _, _, text, after = fresh(MAX_AGE + 0.05 if i == 0 else 1.05)
        logged = [ln for ln in g.log_lines() if ln.get("msg") == "service metrics fetch failed"]
        tap.ok(errors(after) == e0 + 1 and gwlib.metric(text, "bc_gateway_service_metrics_up") == 0 and
               "bc_join_x" not in text and "oops" not in text and len(text) < 1024 * 1024,
               "a text %s is refused (a fetch error, up 0)" % reason, (errors(after), e0, text[-300:]))
        if i == 0:
            tap.ok("bc_join_rounds_total{" in text and time.monotonic() - last_good < 5 * MAX_AGE,
                   "the last good text is still served", text[-300:])
        tap.ok(len(logged) == i + 1 and reason in logged[-1].get("reason", ""),
               "the log says why: %s" % reason, logged[-1:])
    # a label that is not ASCII reaches Prometheus as UTF-8 (client_encoding UTF8 forced)
    env.psql("CREATE OR REPLACE FUNCTION bc_join.metrics() RETURNS text LANGUAGE sql AS "
             "$$ SELECT 'bc_join_enc{x=\"' || chr(233) || '\"} 1' || chr(10) $$")
    time.sleep(1.05)
    fetched[0] = time.monotonic()
    _, _, raw = env.curl(mp, "/metrics")
    tap.ok('bc_join_enc{x="\u00e9"} 1\n'.encode("utf-8") in raw,
           "a non-ASCII label arrives as UTF-8 although --db asks client_encoding=LATIN1", raw[-200:])
    env.psql("DROP FUNCTION bc_join.metrics(); ALTER FUNCTION bc_join.metrics_real() RENAME TO metrics")

    tap.note("%.1f s: the database gone" % (time.monotonic() - t0))
    # -- the database gone, and back -----------------------------------------
    _, _, text, s = fresh(1.05)
    tap.eq(gwlib.metric(text, "bc_gateway_service_metrics_up"), 1.0, "the real function back: up 1")
    good = fetched[0]
    env.pg_stop()
    _, _, text, s = fresh()
    tap.ok(gwlib.metric(text, "bc_gateway_service_metrics_up") == 0 and "bc_join_rounds_total{" in text and
           time.monotonic() - good < 5 * MAX_AGE,
           "the database gone: up 0, the last good text still served", text[-300:])
    time.sleep(max(0.0, good + 5 * MAX_AGE + 0.1 - time.monotonic()))
    code, _, text, s = scrape()
    tap.ok(code == 200 and gwlib.metric(text, "bc_gateway_service_metrics_up") == 0 and
           not FAMILY.search(text) and "bc_gateway_requests_total" in text,
           "past 5 x --metrics-max-age: dropped, the gateway's own families still there (200)", text[-300:])
    tap.note("%.1f s: done" % (time.monotonic() - t0))
    tap.eq(g.stop(), 0, "the gateway exits 0 (no sanitizer report)", g.log_text()[-2000:])


if __name__ == "__main__":
    gwlib.main(body)
