#!/usr/bin/python3
"""prometheus.t: a real Prometheus scrapes a gateway's metrics listener,
evaluates the shipped alert rules and fires BcJoinRefusalBurst on a
scripted burst of refusals (issue 48), as an on-call person would see it.

A real cluster with the installed extension, the ASan gateway with a metrics
listener (--metrics-listen, --metrics-max-age 0.5s), and Debian's prometheus
started by this script on a loopback port (its own config and scratch
storage, scrape and evaluation every second, https with the gateway's
certificate as CA).  The rules are contrib/prometheus/bc-join.rules.yml with
ONE change, made here: every `for:` is 1s instead of minutes (the
expressions, thresholds and windows are the shipped ones).  Shows:
  - Prometheus scrapes the listener (up 1, bc_gateway_service_metrics_up 1,
    the bc_join_* families) and loads the nine rules, each evaluating
    without error (health ok: the expressions hold on real label sets);
  - a burst of 26 refused joins of one reason (a spent join token, through
    the public listener) fires BcJoinRefusalBurst for exactly that
    (attestor, reason) within seconds, its value the burst, its summary
    rendered;
  - a reason refused 3 times (a revoked token) has no alert, and no other
    alert is pending or firing (the eight others stay inactive: nothing
    else is wrong here);
  - every family the listener served is in docs/operator.md, "Watching it".
Stays under ~25 s.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

RULES = os.path.join(gwlib.TOP, "contrib/prometheus/bc-join.rules.yml")
BURST = 26          # refusals of the burst's reason (the rule: more than 20 in 5 minutes)
FEW = 3             # refusals of another reason: no alert
STARTED = time.monotonic()


class MetricsPort:
    """The metrics listener of a gateway, for env.curl."""

    def __init__(self, port):
        self.port = port

    def url(self, path):
        return "https://127.0.0.1:%d%s" % (self.port, path)


class Prometheus:
    """One prometheus server on 127.0.0.1, its config, storage and log in d."""

    def __init__(self, d, scrape_port, ca_file, rules_text):
        os.makedirs(d)
        self.port = gwlib.free_port()
        with open(os.path.join(d, "bc-join.rules.yml"), "w") as f:
            f.write(rules_text)
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            f.write("""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - bc-join.rules.yml
scrape_configs:
  - job_name: bc-join
    scheme: https
    tls_config:
      ca_file: %s
    static_configs:
      - targets: ['127.0.0.1:%d']
""" % (ca_file, scrape_port))
        self.log = os.path.join(d, "prometheus.log")
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + os.path.join(d, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(d, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port,
             "--log.level=warn"],
            stdout=self.logf, stderr=self.logf, cwd=d)
        gwlib.wait_port(self.port, self.proc, "prometheus", log=self.log_text)
        deadline = time.monotonic() + 15      # the API answers 503 until the TSDB is open
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("prometheus not ready:\n" + self.log_text()[-1500:])
            time.sleep(0.1)

    def log_text(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def api(self, path, **params):
        """GET /api/v1/<path>?params: its data (raises unless status success)."""
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise RuntimeError("prometheus %s: %r" % (path, doc))
        return doc["data"]

    def query(self, q):
        """An instant query: [(labels, value)]."""
        return [(s["metric"], float(s["value"][1])) for s in self.api("query", query=q)["result"]]

    def wait(self, what, fn, timeout):
        """fn() until it returns something true, at most timeout seconds; its last result."""
        deadline = time.monotonic() + timeout
        while True:
            got = fn()
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.25)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def shortened(text):
    """The rules with every `for:` made 1s; (text, how many were changed)."""
    return re.subn(r"(?m)^(\s+for:\s*)\S+\s*$", r"\g<1>1s", text)


def body(tap, env):
    if env.psql("SELECT to_regprocedure('bc_join.metrics()') IS NOT NULL") != "t":
        tap.skip("prometheus", "bc_join.metrics() is not in the installed extension")
        return
    mp = MetricsPort(gwlib.free_port())
    g = env.gateway("p", "--db-pool", "2", "--metrics-listen", "127.0.0.1:%d" % mp.port,
                    "--metrics-max-age", "0.5s")
    with open(RULES) as f:
        shipped = f.read()
    rules, n_for = shortened(shipped)
    tap.ok(n_for == 8 and rules.count("\n") == shipped.count("\n"),
           "the shipped rules with their 8 for: made 1s, nothing else changed (this test's only change)")

    prom = Prometheus(os.path.join(env.dir, "prometheus"), mp.port, env.cert, rules)
    env.prometheus = prom
    t0 = time.monotonic()

    def scraped():
        up = prom.query('up{job="bc-join"}')
        svc = prom.query("bc_gateway_service_metrics_up")
        rounds = prom.query("bc_join_rounds_total")
        return up and up[0][1] == 1 and svc and svc[0][1] == 1 and rounds is not None and \
            prom.query("bc_join_counters_reset_timestamp_seconds")
    tap.ok(prom.wait("scrape", scraped, 15),
           "prometheus scrapes the metrics listener over https: up 1, bc_gateway_service_metrics_up 1, "
           "bc_join_* there", prom.log_text()[-1500:])

    def loaded():
        groups = prom.api("rules")["groups"]
        rs = [r for grp in groups for r in grp["rules"]]
        return len(rs) == 9 and all(r.get("lastEvaluation", "").startswith("20") and
                                    not r["lastEvaluation"].startswith("0001") for r in rs) and groups
    groups = prom.wait("rules", loaded, 10) or prom.api("rules")["groups"]
    rs = [(grp["name"], r["name"], r["health"], r.get("lastError", "")) for grp in groups for r in grp["rules"]]
    tap.ok(len(rs) == 9 and all(h == "ok" and not e for _, _, h, e in rs),
           "the nine rules loaded, each evaluated without error", rs)

    # -- the burst ------------------------------------------------------------
    tap.note("%.1f s: the burst" % (time.monotonic() - t0))
    spent = env.token(uses=1)
    env.join_node(g, "n0", spent)
    revoked = env.token(uses=5)
    env.psql("SELECT bc_join.revoke_join_token('%s')" % revoked.rsplit(".", 1)[0])
    req_spent, _ = env.join_request("spent", spent)
    req_revoked, _ = env.join_request("revoked", revoked)
    # a first refusal of each: the (attestor, reason) series appear, and are scraped
    first = [env.curl(g, "/v1/join", data_file=req_spent)[0], env.curl(g, "/v1/join", data_file=req_revoked)[0]]

    def both_seen():
        return len(prom.query('bc_join_refusals_total{reason=~"join-token:(spent|revoked)"}')) == 2
    tap.ok(first == [403, 403] and prom.wait("series", both_seen, 10),
           "a first refusal of each reason; prometheus has both series", first)
    codes = [env.curl(g, "/v1/join", data_file=req_spent)[0] for _ in range(BURST - 1)]
    codes += [env.curl(g, "/v1/join", data_file=req_revoked)[0] for _ in range(FEW - 1)]
    tap.eq(codes, [403] * (BURST + FEW - 2), "%d more refusals of a spent token, %d of a revoked one"
           % (BURST - 1, FEW - 1))
    tap.note("%.1f s: burst sent" % (time.monotonic() - t0))

    def firing():
        return [a for a in prom.api("alerts")["alerts"]
                if a["labels"].get("alertname") == "BcJoinRefusalBurst" and a["state"] == "firing"]
    fired = prom.wait("alert", firing, 20)
    tap.note("%.1f s: %s" % (time.monotonic() - t0, "fired" if fired else "not fired"))
    labels = fired[0]["labels"] if fired else {}
    tap.ok(len(fired) == 1 and labels == {"alertname": "BcJoinRefusalBurst", "job": "bc-join",
                                          "attestor": "join-token", "reason": "join-token:spent",
                                          "severity": "warning"},
           "BcJoinRefusalBurst fires for join-token / join-token:spent (job bc-join, warning)",
           json.dumps(prom.api("alerts"), indent=1)[-2500:])
    # its value once every refusal was scraped and evaluated: increase() from the
    # first sample (1) to the last (BURST), extrapolated a little (Prometheus' way)
    def evaluated():
        seen = prom.query('bc_join_refusals_total{reason="join-token:spent"}')
        if not seen or seen[0][1] != BURST:
            return None
        a = [a for a in prom.api("alerts")["alerts"] if a["labels"].get("reason") == "join-token:spent"]
        return a if a and float(a[0]["value"]) >= BURST - 1 else None
    now = prom.wait("all scraped", evaluated, 10) or \
        [a for a in prom.api("alerts")["alerts"] if a["labels"].get("reason") == "join-token:spent"]
    value = float(now[0]["value"]) if now else 0
    tap.ok(BURST - 1 <= value <= 2 * BURST,
           "its value is the burst as increase() over the 5-minute window sees it (%g for %d refusals)"
           % (value, BURST), now)
    tap.ok(fired and re.fullmatch(r"join-token refused \d+(\.\d+)? joins for join-token:spent in 5 minutes",
                                  fired[0]["annotations"].get("summary", "")),
           "its summary is rendered", fired[0]["annotations"] if fired else None)

    # -- what must not fire ---------------------------------------------------
    revoked_count = prom.query('bc_join_refusals_total{reason="join-token:revoked"}')
    others = [(a["labels"].get("alertname"), a["labels"].get("reason"), a["state"])
              for a in prom.api("alerts")["alerts"]
              if not (a["labels"].get("alertname") == "BcJoinRefusalBurst" and
                      a["labels"].get("reason") == "join-token:spent")]
    tap.ok(revoked_count and revoked_count[0][1] == FEW and others == [],
           "join-token:revoked counted %d times has no alert, and no other alert is pending or firing" % FEW,
           (revoked_count, others))

    # -- every family scraped is in docs/operator.md, "Watching it" --------------
    with open(os.path.join(gwlib.TOP, "docs/operator.md")) as f:
        m = re.search(r"^## (?:\d+\. )?Watching it\n(.*?)(?=^## )", f.read(), re.M | re.S)
    section = m.group(1) if m else ""
    docs_named = set(re.findall(r"`<doc>` one of ((?:`[a-z_]+`(?:, )?)+)", section))
    doc_names = set(re.findall(r"`([a-z_]+)`", " ".join(docs_named)))
    names = sorted({r[0]["__name__"] for r in prom.query('group by (__name__) ({job="bc-join"})')})
    families = sorted({re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("bc_gateway_request_duration")
                       else n for n in names if not (n == "up" or n.startswith(("scrape_", "ALERTS")))})

    def documented(name):
        if "`%s`" % name in section:
            return True
        d = re.match(r"bc_gateway_([a-z_]+?)_(fetches_total|answers_total|age_seconds)$", name)
        return bool(d) and d.group(1) in doc_names and "`bc_gateway_<doc>_%s`" % d.group(2) in section
    tap.ok(len(families) > 30 and [f for f in families if not documented(f)] == [],
           'every family the metrics listener served (%d) is in docs/operator.md, "Watching it"' % len(families),
           [f for f in families if not documented(f)])
    tap.note("%.1f s in all" % (time.monotonic() - STARTED))


def main():
    env = gwlib.Env()
    stop_gateways = env.stop_processes

    def stop_all():
        if getattr(env, "prometheus", None) is not None:
            env.prometheus.stop()
        stop_gateways()
    env.stop_processes = stop_all

    def setup(e):
        e.start_cluster("gw")
        e.make_cert()
    gwlib.run(env, setup, body)


main()
