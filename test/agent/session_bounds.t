#!/usr/bin/python3
"""session_bounds.t: who asked for a session credential, and how many a node may mint.

Shows (issue 26.8), through the real gateway and a bcd daemon:
- the caller is recorded: bcd logs every delivery with the pid, executable
  and unit of the process that asked (SO_PEERCRED and /proc), and the
  service records the same claim with the certificate (session_certs.caller:
  the pid and executable of the `bcd credential` process that connected);
- bc_join.sessions_per_node 3: three sessions are issued, a fourth new one
  is refused (exit 77, `refused`), recorded session:too-many with the node
  and the setting in the event's detail; a session the node holds is still
  issued; nothing was reserved for the refused one;
- bc_join.new_sessions_per_minute 4 (cap raised): the next new session is
  refused session:too-fast; bcd's queue stays as bounded as before (a
  refusal is answered, nothing waits);
- a hook of a runaway loop asking 20 new sessions gets 0 beyond the bounds.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402


def hook_pid(env, rt, sock, session, d):
    """bcd credential for session into d; (exit status, stderr, its pid)."""
    cmd = [env.bcd_bin, "credential", "--session", session, "--dir", d, "--socket", sock]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=sl.bcd_env(env, rt))
    _, err = p.communicate(timeout=120)
    return p.returncode, err, p.pid


def last_refusal(env):
    """(refusal, detail) of the newest security.join.refused event."""
    row = env.psql("SELECT json_build_array(payload->>'refusal', payload->'detail') FROM bc_join.events "
                   "WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")
    return tuple(json.loads(row)) if row else (None, None)


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("session bounds", "bc_join.issue_session(jsonb) is not installed")
        return
    env.psql("ALTER DATABASE agent SET bc_join.sessions_per_node = 3")
    env.gateway()                       # new connections: the setting in force
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("b"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)
    node = r.stdout.splitlines()[0].rsplit("/", 1)[-1] if r.returncode == 0 else "?"
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    daemon = sl.start_daemon(env, "bcd-bounds", rt, env.run_args(state))
    tap.ok(sl.wait_socket(daemon, sock), "bcd serves its socket", daemon.text())
    hooks = os.path.join(rt, "hooks")
    os.makedirs(hooks, 0o700)
    exe = os.path.realpath(env.bcd_bin)

    # -- who asked ------------------------------------------------------------------------
    pids = {}
    for i in range(3):
        d = os.path.join(hooks, "s%d" % i)
        os.mkdir(d, 0o700)
        rc, err, pid = hook_pid(env, rt, sock, "s%d" % i, d)
        pids["s%d" % i] = (rc, pid, err)
    tap.ok(all(v[0] == 0 for v in pids.values()), "three sessions: issued", pids)
    log = daemon.text()
    delivered = [l for l in log.splitlines() if " delivered " in l]
    tap.ok(all(any(("session %s: delivered" % s) in l and ("for pid %d (exe %s, unit " % (v[1], exe)) in l
                   for l in delivered) for s, v in pids.items()),
           "bcd logs each delivery with the caller's pid and executable (SO_PEERCRED, /proc)",
           delivered)
    rows = json.loads(env.psql(
        "SELECT json_agg(json_build_array(s.session_ref, c.caller) ORDER BY s.session_ref) "
        "FROM bc_join.session_certs c JOIN bc_join.sessions s ON s.id = c.session_id") or "[]")
    tap.ok(len(rows) == 3 and all(c is not None and c.get("pid") == pids[s][1] and c.get("exe") == exe
                                  for s, c in rows),
           "the service records the same claim with each certificate (session_certs.caller)", rows)
    events = json.loads(env.psql(
        "SELECT json_agg(payload->'caller'->>'pid') FROM bc_join.events WHERE type = 'session.provisioned'") or "[]")
    tap.eq(sorted(int(p) for p in events), sorted(v[1] for v in pids.values()),
           "and in session.provisioned")

    # -- the cap ----------------------------------------------------------------------------
    d = os.path.join(hooks, "s3")
    os.mkdir(d, 0o700)
    rc, err, _ = hook_pid(env, rt, sock, "s3", d)
    tap.ok(rc == sl.EX_NOPERM and err.startswith("bcd credential: refused: "),
           "bc_join.sessions_per_node 3: a fourth new session is refused (77)", err)
    ref, detail = last_refusal(env)
    tap.eq(ref, "session:too-many", "recorded session:too-many")
    tap.eq(detail, {"nodeId": node, "setting": "bc_join.sessions_per_node", "limit": 3},
           "the event names the node and the setting")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.sessions"), "3", "nothing reserved for it")
    rc, err, _ = hook_pid(env, rt, sock, "s0", os.path.join(hooks, "s0"))
    tap.eq(rc, 0, "a session the node holds is still issued at the cap", err)

    # -- the rate ---------------------------------------------------------------------------
    env.psql("ALTER DATABASE agent SET bc_join.sessions_per_node = 1000")
    env.psql("ALTER DATABASE agent SET bc_join.new_sessions_per_minute = 4")
    daemon.stop()
    env.gateway()
    daemon = sl.start_daemon(env, "bcd-bounds-2", rt, env.run_args(state))
    tap.ok(sl.wait_socket(daemon, sock), "bcd again, through a gateway with the new settings", daemon.text())
    rc, err, _ = hook_pid(env, rt, sock, "s3", d)
    tap.eq(rc, 0, "cap raised: the fourth new session is issued (four in the minute)", err)
    codes = []
    for i in range(20):
        dd = os.path.join(hooks, "r%d" % i)
        os.mkdir(dd, 0o700)
        codes.append(hook_pid(env, rt, sock, "runaway-%d" % i, dd)[0])
    tap.ok(codes == [sl.EX_NOPERM] * 20, "a runaway hook asking 20 new sessions: every one refused (77)", codes)
    ref, detail = last_refusal(env)
    tap.ok(ref == "session:too-fast" and detail.get("setting") == "bc_join.new_sessions_per_minute",
           "recorded session:too-fast (bc_join.new_sessions_per_minute)", (ref, detail))
    tap.eq(env.psql("SELECT count(*) FROM bc_join.sessions"), "4", "four identities in all")
    st = sl.status(env, rt, sock)
    tap.ok(st is not None and st["waiting"] == 0 and st["inFlight"] == 0 and st["maxQueue"] == 256,
           "bcd's queue is as bounded as before, and empty", st)
    rc, _ = daemon.stop()
    tap.eq(rc, 0, "SIGTERM: exit 0")
    env.psql("ALTER DATABASE agent RESET bc_join.sessions_per_node")
    env.psql("ALTER DATABASE agent RESET bc_join.new_sessions_per_minute")


agentlib.main(body)
