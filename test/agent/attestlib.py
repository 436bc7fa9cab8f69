"""attestlib.py: the continuous-attestation fixture of attest.t, shared with
bench/attest-drift: a swtpm with EK certificates behind tpm2-abrmd
(test/lib/tpm-rm.sh), a TPM-bound node joined by it, a UEFI event log in the
TCG crypto-agile format, the node's attestation state read in psql."""
import os
import subprocess
import sys
import time

from agentlib import TOP

sys.path.insert(0, os.path.join(TOP, "test/tools"))
import tcglog  # noqa: E402

RM = os.path.join(TOP, "test/lib/tpm-rm.sh")
EV_NO_ACTION = 3
EV_SEPARATOR = 4


def spec_id_log():
    """A crypto-agile log holding the SpecID event alone (sha256 only), by test/tools/tcglog.py."""
    return tcglog.spec_id(["sha256"])


def event2(pcr, etype, digest, data):
    """One TCG_PCR_EVENT2 with a sha256 digest (given: not necessarily data's), by tcglog.py."""
    return tcglog.event2(["sha256"], pcr, etype, data, {"sha256": digest})


def start_tpm(env):
    """Start the swtpm and tpm2-abrmd in env.dir/tpm; (directory, CompletedProcess of tpm-rm.sh)."""
    tpm = os.path.join(env.dir, "tpm")
    s = subprocess.run(["bash", RM, "start", tpm, str(os.getpid())], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return tpm, s


def stop_tpm(tpm):
    """Stop what start_tpm started."""
    subprocess.run(["bash", RM, "stop", tpm])


def use_tpm(env, tpm):
    """This process's environment on tpm's bus, its EK roots trusted by the
    service; the TCTI string for bcd and tpm2-tools."""
    with open(os.path.join(tpm, "dbus-address")) as f:
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = f.read().strip()
    os.environ["TSS2_LOG"] = "all+NONE"
    with open(os.path.join(tpm, "tcti")) as f:
        tcti = f.read().strip()
    env.psql("SELECT bc_join.add_tpm_ek_root(pg_read_file('%s/root.pem')), "
             "bc_join.add_tpm_ek_root(pg_read_file('%s/issuer.pem'))" % (tpm, tpm))
    return tcti


def reclaim_token(env, uses):
    """A join token with reclaim (a readmitted node joins again as the same
    node, as after a wipe) in a 0600 file; its path."""
    tok = os.path.join(env.dir, "token-attest")
    with open(tok, "w") as f:
        f.write(env.psql("SELECT bc_join.create_join_token('%s', '%s', uses => %d, "
                         "allow_reclaim => true)" % (env.tenant, env.pool, uses)) + "\n")
    os.chmod(tok, 0o600)
    return tok


def attestation(env, node):
    """(state, last_quote_at epoch or 0, last_result) of node."""
    got = env.psql("SELECT state || ' ' || coalesce(extract(epoch FROM last_quote_at)::bigint, 0) "
                   "|| ' ' || coalesce(last_result, '-') FROM bc_join.node_attestation "
                   "WHERE node_id = '%s'" % node)
    if not got:
        return ("none", 0, "-")
    st, at, res = got.split(" ")
    return (st, int(at), res)


def readmit_node(env, node):
    """bc_join.readmit_node(node): None, or the error."""
    try:
        env.psql("SELECT bc_join.readmit_node('%s')" % node)
        return None
    except RuntimeError as e:
        return str(e)


def wait_for(cond, timeout, step=0.2):
    """Poll cond() until true or timeout; its last value."""
    deadline = time.time() + timeout
    v = cond()
    while not v and time.time() < deadline:
        time.sleep(step)
        v = cond()
    return v
