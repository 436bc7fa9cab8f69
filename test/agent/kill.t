#!/usr/bin/python3
"""kill.t: bcd killed with SIGKILL at random points of its work never leaves
a half-written credential (docs/security.md, "Crash safety").

Renewal: `bcd renew --once` is killed BCJ_KILLS times (default 15) after a
random 0 to T ms, T the time an unkilled renewal takes here.  After every
kill the state directory holds node.key and node-chain.pem whose leaf
certifies it (openssl), or an interrupted commit (node-chain.pem.new
certifying node.key.new or node.key) that the next start finishes; the next
`bcd renew --once` then succeeds, its leaf certifies node.key, it is the
node's one live certificate in the database, and no .new, temporary file or
DIR/renew is left.  The kill after the commit and before DIR/renew is
removed is also made by hand (DIR/renew holding the stored key): the next
renewal starts from a new key instead of being refused for key reuse.

Delivery: a `bcd run` daemon serving `bcd credential` is killed BCJ_KILLS
times after a random 0 to T ms from the launch of 6 hooks (3 sessions, each
asked again in every round, so an earlier delivery is being replaced), T
the time a round of hooks takes here.  After every kill, in every hook's
directory: a .crt is there only with its .key, and certifies it; a hook
that exited 0 has both.  The daemon starts again on the stale socket.
"""
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

KILLS = int(os.environ.get("BCJ_KILLS", "15"))


def pub_of_key(path):
    r = subprocess.run(["openssl", "pkey", "-in", path, "-pubout"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout if r.returncode == 0 and r.stdout else None


def pub_of_cert(path):
    r = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-pubkey"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout if r.returncode == 0 and r.stdout else None


def serial_of(path):
    out = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-serial"],
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().split("=", 1)[-1].lower().rjust(32, "0")


def matches(key, crt):
    k = pub_of_key(key) if os.path.exists(key) else None
    return k is not None and os.path.exists(crt) and k == pub_of_cert(crt)


def state_after_kill(state):
    """'match', 'pending' (an interrupted commit the next start finishes) or what is wrong."""
    key, chain = os.path.join(state, "node.key"), os.path.join(state, "node-chain.pem")
    if matches(key, chain):
        return "match"
    new = os.path.join(state, "node-chain.pem.new")
    newkey = os.path.join(state, "node.key.new")
    if os.path.exists(new) and (matches(newkey, new) or matches(key, new)):
        return "pending"
    return "torn: %s" % sorted(os.listdir(state))


def renewals(tap, env, state, node_id):
    t0 = time.time()
    r = env.bcd("renew", "--once", *env.run_args(state))
    span = time.time() - t0
    tap.ok(r.returncode == 0, "an unkilled bcd renew --once renews (%.0f ms)" % (span * 1000), r.stderr)
    # the kill that lands after the commit, before DIR/renew is removed, made by hand
    work = os.path.join(state, "renew")
    os.mkdir(work, 0o700)
    subprocess.run(["cp", os.path.join(state, "node.key"), os.path.join(work, "node.key")], check=True)
    subprocess.run(["openssl", "req", "-new", "-key", os.path.join(work, "node.key"), "-subj", "/",
                    "-outform", "DER", "-out", os.path.join(work, "node.csr.der")], check=True,
                   stderr=subprocess.DEVNULL)
    r = env.bcd("renew", "--once", *env.run_args(state))
    tap.ok(r.returncode == 0 and "already the node key" in r.stderr and not os.path.exists(work),
           "a DIR/renew left holding the stored key (killed after the commit): the next renewal "
           "starts from a new key and succeeds", r.stderr)
    bad, next_failed, outcomes = [], [], {}
    for i in range(KILLS):
        p = subprocess.Popen([env.bcd_bin, "renew", "--once"] + env.run_args(state),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env.bcd_env())
        time.sleep(random.uniform(0, span))
        p.send_signal(signal.SIGKILL)
        _, err = p.communicate()
        what = "exited %d before the kill" % p.returncode if p.returncode != -9 else state_after_kill(state)
        if p.returncode != -9:
            what = "done"
        outcomes[what.split(":")[0]] = outcomes.get(what.split(":")[0], 0) + 1
        if what.startswith("torn"):
            bad.append("kill %d: %s" % (i, what))
        pending = os.path.exists(os.path.join(state, "renew"))
        r = env.bcd("renew", "--once", *env.run_args(state))
        live = env.psql("SELECT string_agg(serial, ',') FROM bc_join.node_certs "
                        "WHERE node_id = '%s' AND revoked_at IS NULL" % node_id)
        leftovers = [n for n in os.listdir(state) if ".new" in n or ".tmp" in n or n == "renew"]
        if (r.returncode != 0 or not matches(os.path.join(state, "node.key"), os.path.join(state, "node-chain.pem"))
                or live != serial_of(os.path.join(state, "node-chain.pem")) or leftovers):
            next_failed.append("kill %d (%s, DIR/renew %s): rc %d, live %s, leftovers %s: %s"
                               % (i, what, "kept" if pending else "absent", r.returncode, live,
                                  leftovers, r.stderr[-600:]))
    tap.note("renewal kills: %s" % ", ".join("%s %d" % kv for kv in sorted(outcomes.items())))
    tap.ok(not bad, "after each of %d kills node.key and node-chain.pem match, or an interrupted "
           "commit is there to finish" % KILLS, "\n".join(bad))
    tap.ok(not next_failed, "the next bcd renew --once succeeds each time: its leaf certifies node.key, "
           "is the node's one live certificate, nothing pending is left", "\n".join(next_failed))


def check_hook_dirs(dirs, sessions):
    """Problems in the hooks' directories: a .crt without its .key, or not certifying it."""
    bad, orphans, temps = [], 0, 0
    for d in dirs:
        names = os.listdir(d)
        temps += len([n for n in names if ".tmp." in n])
        for s in sessions:
            key, crt = os.path.join(d, s + ".key"), os.path.join(d, s + ".crt")
            if os.path.exists(crt) and not matches(key, crt):
                bad.append("%s: %s.crt without the key it certifies" % (d, s))
            elif os.path.exists(key) and not os.path.exists(crt):
                orphans += 1
    return bad, orphans, temps


def deliveries(tap, env, state):
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    sessions = ["kill-%d" % i for i in range(3)]
    dirs = []
    for i in range(6):
        d = os.path.join(rt, "hooks", "h%d" % i)
        os.makedirs(d, 0o700)
        dirs.append(d)

    def start(n):
        p = sl.start_daemon(env, "bcd-kill-%d" % n, rt, env.run_args(state))
        return p if sl.wait_socket(p, sock) else None

    def round_of_hooks():
        return [sl.hook_bg(env, rt, sock, sessions[i % 3], d) for i, d in enumerate(dirs)]

    d = start(0)
    tap.ok(d is not None, "bcd run serves the socket", d and d.text())
    t0 = time.time()
    hooks = round_of_hooks()
    rcs = [h.wait(60) for h in hooks]
    span = time.time() - t0
    tap.ok(rcs == [0] * 6, "an unkilled round of 6 hooks is served (%.0f ms)" % (span * 1000), rcs)
    bad, restarts, killed_hooks, served, problems = [], 0, 0, 0, []
    orphans = temps = 0
    for i in range(KILLS):
        hooks = round_of_hooks()
        time.sleep(random.uniform(0, span))
        d.stop(signal.SIGKILL)
        for h in hooks:
            try:
                h.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                h.kill()
                h.communicate()
        for h, hd in zip(hooks, dirs):
            if h.returncode == 0:
                served += 1
                s = sessions[dirs.index(hd) % 3]
                if not matches(os.path.join(hd, s + ".key"), os.path.join(hd, s + ".crt")):
                    problems.append("kill %d: hook in %s exited 0 without a matching pair" % (i, hd))
            else:
                killed_hooks += 1
        b, o, t = check_hook_dirs(dirs, sessions)
        orphans, temps = max(orphans, o), max(temps, t)
        bad += ["kill %d: %s" % (i, x) for x in b]
        d = start(i + 1)
        if d is None:
            problems.append("kill %d: bcd run did not start again" % i)
            break
        restarts += 1
    tap.note("delivery kills: %d hooks served, %d lost their daemon; at most %d key(s) left without "
             "a .crt and %d temporary file(s) at once" % (served, killed_hooks, orphans, temps))
    tap.ok(not bad, "after each of %d kills every .crt in the hooks' directories certifies the .key "
           "beside it" % KILLS, "\n".join(bad))
    tap.ok(not problems, "every hook that exited 0 has its key and certificate, matching", "\n".join(problems))
    tap.eq(restarts, KILLS, "bcd run starts again after every kill (the stale socket removed)")
    hooks = round_of_hooks()
    rcs = [h.wait(60) for h in hooks]
    b, _, _ = check_hook_dirs(dirs, sessions)
    tap.ok(rcs == [0] * 6 and not b and all(matches(os.path.join(hd, sessions[j % 3] + ".key"),
                                                   os.path.join(hd, sessions[j % 3] + ".crt"))
                                           for j, hd in enumerate(dirs)),
           "afterwards every hook is served, every pair matches", rcs)
    d.stop()
    tap.ok("Sanitizer" not in "".join(open(os.path.join(env.dir, n), errors="replace").read()
                                      for n in os.listdir(env.dir) if n.startswith("bcd-kill-")),
           "no sanitizer report in the daemons' logs")


def body(tap, env):
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("kills", "bc_join.issue_session(jsonb) is not installed yet")
        return
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("k"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)
    node_id = r.stdout.splitlines()[0].rsplit("/", 1)[-1] if r.returncode == 0 else "?"
    renewals(tap, env, state, node_id)
    deliveries(tap, env, state)


agentlib.main(body)
