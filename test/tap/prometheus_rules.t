#!/usr/bin/python3
"""prometheus_rules.t: the shipped alert rules (contrib/prometheus/bc-join.rules.yml)
are valid and do what their unit tests say, with Debian's promtool.

Shows: `promtool check rules` accepts the file; its groups and alerts are the
ones docs/operator.md and the issue name (bc-join-service, bc-join-gateway,
bcd; nine alerts); `promtool test rules` passes every file of
contrib/prometheus/tests/; every alert has a case where it fires and one where
it must stay quiet, and the tests notice when either is broken: a copy of the
rules where one alert can never fire fails the tests naming that alert, and a
copy where it always fires (an extra, unlabelled alert) fails them too; every
metric family the rules read and every alert is described in docs/operator.md,
"Watching it".  No database, no server: a few seconds.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, Tap  # noqa: E402

RULES = os.path.join(TOP, "contrib/prometheus/bc-join.rules.yml")
TESTS = sorted(glob.glob(os.path.join(TOP, "contrib/prometheus/tests/*.yml")))
GROUPS = {
    "bc-join-service": ["BcJoinRefusalBurst", "BcJoinApprovalsWaiting",
                        "BcJoinCertificatesExpiringUnrenewed", "BcJoinAuditAnchorStale",
                        "BcJoinAttestationFailures"],
    "bc-join-gateway": ["BcJoinCrlStale", "BcGatewayDbPoolSaturated", "BcJoinServiceMetricsDown"],
    "bcd": ["BcdProvisioningQueueFull"],
}


def promtool(*args):
    """promtool with args; (exit status, stdout and stderr together)."""
    r = subprocess.run(["promtool"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def test_copy(tmp, rules_doc, alert):
    """Copies of the tests of alert beside a changed rules file; their paths."""
    d = tempfile.mkdtemp(dir=tmp)
    os.mkdir(os.path.join(d, "tests"))
    with open(os.path.join(d, "bc-join.rules.yml"), "w") as f:
        yaml.safe_dump(rules_doc, f, sort_keys=False)
    copies = []
    for t in TESTS:
        with open(t) as f:
            tests = yaml.safe_load(f)
        # only the cases that evaluate alert (promtool's time goes on evaluations)
        tests["tests"] = [c for c in tests["tests"]
                          if any(a["alertname"] == alert for a in c.get("alert_rule_test", []))]
        if not tests["tests"]:
            continue
        dst = os.path.join(d, "tests", os.path.basename(t))
        with open(dst, "w") as f:
            yaml.safe_dump(tests, f, sort_keys=False)
        copies.append(dst)
    return copies


def per_file(out):
    """promtool test rules' output of several files: {path: its part}."""
    parts = {}
    for chunk in out.split("Unit Testing:  ")[1:]:
        path, _, rest = chunk.partition("\n")
        parts[path.strip()] = rest
    return parts


def with_expr(doc, alert, fn):
    """A deep copy of the rules document with alert's expr replaced by fn(expr)."""
    new = yaml.safe_load(yaml.safe_dump(doc))
    for g in new["groups"]:
        for r in g["rules"]:
            if r.get("alert") == alert:
                r["expr"] = fn(r["expr"])
    return new


def watching_it():
    """The text of docs/operator.md's section "Watching it" (to the next ## heading)."""
    with open(os.path.join(TOP, "docs/operator.md")) as f:
        text = f.read()
    m = re.search(r"^## (?:\d+\. )?Watching it\n(.*?)(?=^## )", text, re.M | re.S)
    return m.group(1) if m else ""


def main():
    tap = Tap()
    tmp = tempfile.mkdtemp(prefix="bcj-promrules-")
    try:
        rc, out = promtool("check", "rules", RULES)
        tap.ok(rc == 0 and "SUCCESS: 9 rules found" in out, "promtool check rules accepts the shipped file (9 rules)", out)

        with open(RULES) as f:
            doc = yaml.safe_load(f)
        got = {g["name"]: [r["alert"] for r in g["rules"] if "alert" in r] for g in doc["groups"]}
        tap.eq(got, GROUPS, "groups bc-join-service, bc-join-gateway, bcd hold the nine alerts")
        tap.ok(all("severity" in r.get("labels", {}) and "summary" in r.get("annotations", {})
                   and "description" in r.get("annotations", {})
                   for g in doc["groups"] for r in g["rules"]),
               "every alert has a severity, a summary and a description")

        tap.ok(len(TESTS) >= 4, "unit test files in contrib/prometheus/tests (%d)" % len(TESTS))
        rc, out = promtool("test", "rules", *TESTS)     # one run (promtool's start is most of it)
        parts = per_file(out)
        for t in TESTS:
            part = parts.get(t, "")
            tap.ok(part.strip() == "SUCCESS", "promtool test rules %s" % os.path.relpath(t, TOP), part or out)
        tap.eq(rc, 0, "promtool test rules: exit 0")

        # which alerts the tests expect firing somewhere, and quiet somewhere
        fires, quiet = set(), set()
        for t in TESTS:
            with open(t) as f:
                for case in yaml.safe_load(f)["tests"]:
                    for a in case.get("alert_rule_test", []):
                        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
        alerts = [a for names in GROUPS.values() for a in names]
        tap.eq(sorted(a for a in alerts if a not in fires), [], "every alert has a test where it fires")
        tap.eq(sorted(a for a in alerts if a not in quiet), [], "every alert has a test where it must not fire")

        # the tests notice a broken alert: one that never fires, one that always
        # does (one promtool run for the 18 changed copies)
        cases = []
        for a in alerts:
            cases.append(("never", a, test_copy(tmp, with_expr(doc, a, lambda e: "vector(0) > 1"), a)))
            cases.append(("always", a, test_copy(tmp, with_expr(doc, a, lambda e: "(%s) or vector(1)" % e.strip()), a)))
        rc, out = promtool("test", "rules", *[c for _, _, copies in cases for c in copies])
        parts = per_file(out)
        missed = {"never": [], "always": []}
        for kind, a, copies in cases:
            if not any("FAILED" in parts.get(c, "") and ("alertname: %s," % a) in parts.get(c, "")
                       for c in copies):
                missed[kind].append(a)
        tap.ok(rc != 0 and len(parts) == sum(len(c) for _, _, c in cases),
               "promtool tested every changed copy (%d files)" % len(parts), out[-2000:])
        tap.eq(missed["never"], [], "an alert changed to never fire fails its unit tests (each of the nine)")
        tap.eq(missed["always"], [], "an alert changed to fire always fails its unit tests (each of the nine)")

        # the docs: every alert, every family the rules read
        section = watching_it()
        tap.ok(len(section) > 0, 'docs/operator.md has a section "Watching it"')
        tap.eq([a for a in alerts if a not in section], [], '"Watching it" describes every alert')
        with open(RULES) as f:
            families = sorted(set(re.findall(r"\b((?:bc_join|bc_gateway|bcd)_[a-z_]+)\b",
                                             "\n".join(r["expr"] for g in doc["groups"] for r in g["rules"]))))
        tap.eq([m for m in families if m not in section], [],
               '"Watching it" describes every family the rules read (%d)' % len(families))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(tap.done())


main()
