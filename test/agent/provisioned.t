#!/usr/bin/python3
"""provisioned.t: a machine re-imaged comes back as the node it was.

A host joins with a join token through the real gateway (bcd run --once);
its state directory is wiped (the re-image); an operator makes a
provisioning token for the node in psql; bcd run --once --node-id NODE
--token-file joins again through the provisioned attestor and is the same
node with identity generation + 1, its old certificate superseded, the
token spent; the token cannot be used twice; a token for another node and
the usage errors are refused legibly.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402


def body(tap, env):
    """The script."""
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("first"), extra=["--once"]))
    node = r.stdout.splitlines()[0].rsplit("/", 1)[-1] if r.returncode == 0 else ""
    tap.ok(r.returncode == 0 and node.startswith("node_"), "a host joins with a join token", r.stderr)
    old_serial = env.psql("SELECT serial FROM bc_join.node_certs WHERE node_id = '%s'" % node)

    # -- the re-image: nothing of the old state is left ---------------------------
    shutil.rmtree(state)
    ptok = env.psql("SELECT bc_join.create_provisioning_token('%s')" % node)
    tok = os.path.join(env.dir, "provisioning-token")
    with open(tok, "w") as f:
        f.write(ptok + "\n")
    os.chmod(tok, 0o600)
    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--node-id", node, "--once"]))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and len(lines) == 2 and lines[0].endswith("/node/" + node),
           "bcd run --node-id NODE with the provisioning token comes back as that node",
           r.stdout + r.stderr)
    tap.eq(env.psql("SELECT identity_generation FROM bc_join.nodes WHERE id = '%s'" % node), "2",
           "identity generation + 1")
    tap.eq(env.psql("SELECT revocation_reason FROM bc_join.node_certs WHERE serial = '%s'" % old_serial),
           "reclaimed", "the certificate of the old image is revoked (reclaimed)")
    tap.eq(env.psql("SELECT spent_at IS NOT NULL FROM bc_join.provisioning_tokens WHERE id = '%s'"
                    % ptok.split(".")[0]), "t", "the provisioning token is spent")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.nodes"), "1", "and no second node was made")
    tap.eq(env.psql("SELECT payload->>'attestor' FROM bc_join.events WHERE type = 'node.joined' "
                    "ORDER BY id DESC LIMIT 1"), "provisioned", "node.joined names the provisioned attestor")
    with open(os.path.join(env.dir, "nodeca.pem"), "w") as f:
        f.write(env.psql("SELECT bc_join.service_keys()->>'nodeCa'"))
    v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(env.dir, "nodeca.pem"),
                        os.path.join(state, "node-chain.pem")], capture_output=True, text=True)
    tap.ok(v.returncode == 0, "the new certificate verifies against the node CA", v.stdout + v.stderr)

    # -- the spent token again, from another re-image -----------------------------
    state2 = os.path.join(env.dir, "state2")
    r = env.bcd("run", *env.run_args(state2, token_file=tok, extra=["--node-id", node, "--once"]))
    tap.eq(r.returncode, 2, "the spent token again: the service refuses (exit 2)", r.stderr)
    tap.eq(env.psql("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                    "ORDER BY id DESC LIMIT 1"), "provisioned:spent", "recorded as provisioned:spent")

    # -- a token for another node ---------------------------------------------------
    other = env.psql("SELECT bc_join.create_provisioning_token('%s')" % node)
    state3 = os.path.join(env.dir, "state3")
    r = env.bcd("run", *env.run_args(state3, extra=["--token", other, "--node-id", "node_" + "0" * 32,
                                                    "--once"]))
    tap.eq(r.returncode, 2, "a token for another node: refused (exit 2)", r.stderr)
    tap.eq(env.psql("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                    "ORDER BY id DESC LIMIT 1"), "provisioned:wrong-node", "recorded as provisioned:wrong-node")
    tap.eq(env.psql("SELECT spent_at IS NULL FROM bc_join.provisioning_tokens WHERE id = '%s'"
                    % other.split(".")[0]), "t", "and that token is not spent")

    # -- usage ----------------------------------------------------------------------
    u = env.bcd("run", *env.run_args(os.path.join(env.dir, "s4"), extra=["--node-id", node, "--once"]))
    tap.ok(u.returncode == 64 and "provisioning token" in u.stderr,
           "--node-id without a token is a usage error that says so", u.stderr)
    u = env.bcd("run", *env.run_args(os.path.join(env.dir, "s5"), token_file=tok,
                                     extra=["--node-id", node, "--attestor", "x509pop", "--once"]))
    tap.ok(u.returncode == 64 and "provisioned" in u.stderr, "--node-id with another attestor is refused",
           u.stderr)


agentlib.main(body)
