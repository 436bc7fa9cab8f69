#!/usr/bin/python3
"""tpm_join.t: bcd run --attestor tpm joins through the real gateway and the
server's tpm attestor, on a swtpm with EK certificates behind tpm2-abrmd
(test/lib/tpm-rm.sh; the EK roots added with bc_join.add_tpm_ek_root).

Shows: a two-round join (challenge answered by the TPM) with the node key in
the TPM (node.key a TSS2 PRIVATE KEY); the certificate's key is that key;
bcd renew --once --attestor tpm renews (same SPIFFE ID, new serial, the AK's
tpm member accepted); the daemon serves a session credential signed through
the TPM key; after the state directory is wiped, the same EK re-joins as the
same node with identity generation + 1 (token with reclaim); a bcd without
--attestor tpm refuses the TSS2 node.key legibly.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib  # noqa: E402
from agentlib import TOP  # noqa: E402

RM = os.path.join(TOP, "test/lib/tpm-rm.sh")


def body(tap, env):
    tpm = os.path.join(env.dir, "tpm")
    s = subprocess.run(["bash", RM, "start", tpm, str(os.getpid())], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    if not tap.ok(s.returncode == 0, "a swtpm with EK certificates behind tpm2-abrmd", s.stderr):
        return
    try:
        run_body(tap, env, tpm)
    finally:
        env.stop_processes()
        env.procs = []
        subprocess.run(["bash", RM, "stop", tpm])


def run_body(tap, env, tpm):
    with open(os.path.join(tpm, "dbus-address")) as f:
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = f.read().strip()
    os.environ["TSS2_LOG"] = "all+NONE"
    with open(os.path.join(tpm, "tcti")) as f:
        tcti = f.read().strip()
    env.psql("SELECT bc_join.add_tpm_ek_root(pg_read_file('%s/root.pem')), "
             "bc_join.add_tpm_ek_root(pg_read_file('%s/issuer.pem'))" % (tpm, tpm))
    tok = os.path.join(env.dir, "token-tpm")
    with open(tok, "w") as f:
        f.write(env.psql("SELECT bc_join.create_join_token('%s', '%s', uses => 5, "
                         "allow_reclaim => true)" % (env.tenant, env.pool)) + "\n")
    os.chmod(tok, 0o600)
    state = os.path.join(env.dir, "state")
    tpm_args = ["--attestor", "tpm", "--tcti", tcti]

    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"] + tpm_args))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and len(lines) == 2 and "/node/" in lines[0],
           "bcd run --once --attestor tpm joins in two rounds through the gateway",
           r.stdout + r.stderr)
    if r.returncode != 0:
        return
    spiffe = lines[0]
    node = spiffe.rsplit("/", 1)[1]
    with open(os.path.join(state, "node.key")) as f:
        tap.ok(f.read().startswith("-----BEGIN TSS2 PRIVATE KEY-----"),
               "node.key is the TSS2 PRIVATE KEY of a key in the TPM")
    got = env.psql("SELECT attestor || ' ' || identity_generation FROM bc_join.nodes "
                   "WHERE id = '%s'" % node)
    tap.eq(got, "tpm 1", "the node was admitted by the tpm attestor, generation 1")

    r = env.bcd("renew", "--once", "--gateway", env.gw_url, "--gateway-ca", env.ca,
                "--service-keys", env.service_keys, "--state-dir", state, *tpm_args)
    tap.ok(r.returncode == 0 and len(r.stdout.splitlines()) == 2,
           "bcd renew --once --attestor tpm renews (new key in the TPM, the AK certifies it)",
           r.stdout + r.stderr)
    r2 = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"] + tpm_args))
    tap.ok(r2.returncode == 0 and r2.stdout.splitlines()[:1] == [spiffe],
           "the renewed credential names the same node", r2.stdout + r2.stderr)

    # Under a PCR policy the renewal quotes the PCRs for the new CSR, checked by the service.
    env.psql("SELECT bc_join.set_tpm_pcr_policy('%s', NULL, 'sha256:0-7', decode(repeat('00', 256), 'hex'))"
             % env.tenant)
    renew_args = ["--once", "--gateway", env.gw_url, "--gateway-ca", env.ca,
                  "--service-keys", env.service_keys, "--state-dir", state] + tpm_args
    r = env.bcd("renew", *renew_args)
    tap.ok(r.returncode == 0, "under a PCR policy (fresh PCRs 0-7) bcd renews with a quote of them",
           r.stdout + r.stderr)
    env.psql("SELECT bc_join.set_tpm_pcr_policy('%s', NULL, 'sha256:0-7', decode(repeat('11', 256), 'hex'))"
             % env.tenant)
    r = env.bcd("renew", *renew_args)
    tap.ok(r.returncode != 0 and env.psql(
        "SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
        "ORDER BY id DESC LIMIT 1") == "renew:tpm-pcr-digest",
        "with other expected PCR values the renewal is refused renew:tpm-pcr-digest", r.stderr)
    env.psql("SELECT bc_join.set_tpm_pcr_policy('%s', NULL, NULL)" % env.tenant)

    # A session credential through the daemon (signed with the TPM key).
    rt = sessionlib.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    p = sessionlib.start_daemon(env, "bcd-tpm", rt, env.run_args(state, token_file=tok,
                                                                 extra=tpm_args))
    up = sessionlib.wait_socket(p, sock)
    sess = os.path.join(rt, "sess")
    os.makedirs(sess, mode=0o700, exist_ok=True)
    h = sessionlib.hook(env, rt, sock, "s1", sess) if up else None
    tap.ok(h is not None and h.returncode == 0 and any(n.endswith(".crt") for n in os.listdir(sess)),
           "the daemon serves a session credential (its proof signed in the TPM)",
           (h.stdout + h.stderr if h else "") + p.text())
    rc, _ = p.stop(signal.SIGTERM, 20)
    tap.eq(rc, 0, "the daemon stops on SIGTERM", p.text())

    # Without --attestor tpm, the TSS2 key is refused legibly.
    r = env.bcd("run", *env.run_args(state, extra=["--once"]))
    tap.ok(r.returncode != 0 and "--attestor tpm" in r.stderr,
           "a bcd without --attestor tpm refuses the TPM's node.key legibly", r.stderr)

    # Wipe the state directory: the same EK comes back as the same node.
    shutil.rmtree(state)
    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"] + tpm_args))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and lines[:1] == [spiffe],
           "after a wipe the same EK re-joins as the same node (a reclaim)", r.stdout + r.stderr)
    got = env.psql("SELECT identity_generation FROM bc_join.nodes WHERE id = '%s'" % node)
    tap.eq(got, "2", "its identity generation is 2")


agentlib.main(body)
