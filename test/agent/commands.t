#!/usr/bin/python3
"""commands.t: bcd run takes the node's commands through the real gateway.

Shows: a kind the certificate does not allow is refused at enqueue (22023);
the daemon with --command-handler fetches POST /v1/commands (a proof by its
key), verifies the signed answer against the pinned signing key, runs the
handler of the longest matching prefix (disk.wipe before disk.) with the
payload on stdin, and reports through POST /v1/commands/complete: the
operator sees done and the handler's output in bc_join.command_status, a
failing handler as failed with its exit code, a kind no handler takes as
failed no-handler, a handler over --command-timeout killed (failed
timeout); a command queued before the certificate's kinds narrowed is not
handed out (failed kind-not-allowed); SIGTERM stops the daemon.
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402


def script(env, name, text):
    """An executable shell script in the test directory; its path."""
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, 0o755)
    return path


def status(env, cid):
    """(state, exit_code, reason, output) of a command as operators see it."""
    row = env.psql("SELECT json_build_array(state, exit_code, reason, result->>'output') "
                   "FROM bc_join.command_status WHERE id = '%s'" % cid)
    return tuple(json.loads(row)) if row else None


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.fetch_commands(jsonb)"):
        tap.skip("commands", "bc_join.fetch_commands(jsonb) is not in the installed extension yet")
        return
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("a"), extra=["--once"]))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and lines and lines[0].startswith("spiffe://"), "joined", r.stdout + r.stderr)
    node = lines[0].rsplit("/", 1)[-1] if lines else "?"
    env.psql("UPDATE bc_join.node_certs SET allowed_kinds = ARRAY['inventory.refresh', 'logs.collect', "
             "'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec'] WHERE node_id = '%s'" % node)

    def enqueue(kind, payload="{}"):
        return env.psql("SELECT bc_join.enqueue_command('%s', '%s', '%s')" % (node, kind, payload))

    refused = env.psql("SELECT bc_join.enqueue_command('%s', 'node.reboot', '{}')" % node, check=False)
    tap.ok(not refused.startswith("cmd_"), "node.reboot is refused at enqueue: the certificate does not allow it",
           refused)
    wipe = enqueue("disk.wipe", '{"disks": ["/dev/sda"]}')
    diag = enqueue("diag.run")
    logs = enqueue("logs.collect")
    deploy = enqueue("deploy.image")
    boot = enqueue("boot.kexec")
    # The certificate narrows (as a renewal to narrower kinds would): boot.kexec was queued before.
    env.psql("UPDATE bc_join.node_certs SET allowed_kinds = ARRAY['logs.collect', 'diag.*', 'disk.wipe', "
             "'deploy.*'] WHERE node_id = '%s'" % node)

    wipe_h = script(env, "wipe.sh", 'echo "wipe-handler $1 $2 $BCD_COMMAND_ID"; cat\n')
    disk_h = script(env, "disk.sh", 'echo generic-disk-handler\n')
    diag_h = script(env, "diag.sh", 'echo diagnostics failed >&2; exit 3\n')
    slow_h = script(env, "slow.sh", 'echo starting; exec sleep 30\n')
    boot_h = script(env, "boot.sh", 'echo kexec\n')
    d = env.bcd_bg("run", *env.run_args(state, extra=[
        "--command-handler", "disk.=" + disk_h, "--command-handler", "disk.wipe=" + wipe_h,
        "--command-handler", "diag.*=" + diag_h, "--command-handler", "deploy.=" + slow_h,
        "--command-handler", "boot.kexec=" + boot_h,
        "--command-interval", "1", "--command-timeout", "2"]))
    ids = [wipe, diag, logs, deploy, boot]
    deadline = time.time() + 40
    while time.time() < deadline:
        if all(status(env, c) and status(env, c)[0] in ("done", "failed", "expired") for c in ids):
            break
        time.sleep(0.3)
    st = {c: status(env, c) for c in ids}
    w = st[wipe]
    tap.ok(w is not None and w[0] == "done" and w[1] == "0", "disk.wipe ran and is done", st)
    tap.ok(w is not None and w[3] is not None and
           w[3].startswith("wipe-handler disk.wipe %s %s\n" % (wipe, wipe)),
           "by the longest prefix's handler (disk.wipe, not disk.), with kind and id", w)
    tap.ok(w is not None and w[3] is not None and w[3].rstrip("\n").endswith('{"disks":["/dev/sda"]}'),
           "the payload came on stdin", w)
    tap.eq(st[diag][:3] if st[diag] else None, ("failed", "3", None), "a failing handler: failed, exit code 3")
    tap.ok(st[diag] is not None and "diagnostics failed" in (st[diag][3] or ""), "with its stderr", st[diag])
    tap.eq(st[logs][:3] if st[logs] else None, ("failed", "-1", "no-handler"),
           "a kind no handler takes: failed no-handler")
    tap.eq(st[deploy][:3] if st[deploy] else None, ("failed", "-1", "timeout"),
           "a handler over --command-timeout is killed: failed timeout")
    tap.eq(st[boot][2] if st[boot] else None, "kind-not-allowed",
           "boot.kexec, queued before the kinds narrowed, is never handed out")
    tap.ok("boot.sh" not in d.text(), "bcd never ran its handler", d.text())
    tap.eq(env.psql("SELECT count(*) FROM bc_join.events WHERE type = 'command.completed'"), "4",
           "command.completed for the four that ran")
    rc, _ = d.stop(signal.SIGTERM, 15)
    tap.ok(rc == 0, "SIGTERM stops the daemon with exit 0", d.text())


if __name__ == "__main__":
    agentlib.main(body)
