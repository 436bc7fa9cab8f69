#!/usr/bin/python3
"""ssh.t: a joined host's SSH identity with the real OpenSSH (issue 47).

One cluster, gateway and bcd (as root: it keeps sshd's files), one sshd of
Debian's openssh-server on a loopback port with its own config: HostKey the
P-256 key bcd made (--ssh-own-host-key) and an ed25519 key of ssh-keygen
(--ssh-host-key), each with the HostCertificate bcd keeps; TrustedUserCAKeys
bcd's --ssh-user-ca, RevokedKeys bcd's --ssh-krl (both from the signed GET
/v1/ssh/signed and GET /v1/ssh/krl); --ssh-reload a script that sends SIGHUP
to sshd.  The client: ssh -F /dev/null, BatchMode, StrictHostKeyChecking=yes,
UserKnownHostsFile bcd's --ssh-host-ca (only '@cert-authority * <host CA>').

  (1) the client connects with no prompt and no plain host key anywhere, and
      runs a command (HostKeyAlias a principal of the pool's rule);
  (2) an alias the tenant may use but the rule does not give: refused;
  (3) a hook's `bcd credential --ssh` user certificate logs in as root, the
      force-command's output "forced", sshd's log the key ID and serial;
      ssh-keygen -L shows exactly the rule's principals, the force-command,
      no agent forwarding;
  (4) revoke_certificate of the session: within 2 status intervals bcd's KRL
      has it and sshd refuses the login ("revoked by file");
  (5) a renewal of the node certificate: a new host certificate serial on
      disk, sshd HUPed by --ssh-reload, the client sees the new serial;
  (6) revoke_node: a client with RevokedHostKeys=bcd's KRL refuses the host.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import Proc, free_port, mode  # noqa: E402

STATUS_INTERVAL = 1
T0 = time.time()
HOST_NAME = "db.hosts.test"        # the --hostname claim the rule takes
STATIC_NAME = "web.hosts.test"     # a principal of the rule
OTHER_NAME = "mail.hosts.test"     # within the tenant's names, not the rule's


def run(cmd, timeout=20, **kw):
    """Run cmd; CompletedProcess with text output."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, e.stdout or "", "timed out")


def write_exe(path, text):
    """An executable script only root can change."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def cert_field(path, field):
    """A field of ssh-keygen -L -f path ("Serial", "Key ID", ...), or None."""
    r = run(["ssh-keygen", "-L", "-f", path])
    m = re.search(r"^\s*%s: (.*)$" % re.escape(field), r.stdout, re.M)
    return m.group(1).strip().strip('"') if m else None


def cert_block(path, block):
    """The indented lines under "block:" of ssh-keygen -L -f path."""
    out = run(["ssh-keygen", "-L", "-f", path]).stdout.splitlines()
    lines = []
    for i, l in enumerate(out):
        if l.strip() == block + ":" or l.strip().startswith(block + ": "):
            if l.strip() != block + ":":
                lines.append(l.strip().split(": ", 1)[1])
            for m in out[i + 1:]:
                if not m.startswith(" " * 16):
                    break
                lines.append(m.strip())
    return lines


def wait_for(cond, timeout, step=0.1):
    """Poll cond() until it is true; its last value."""
    deadline = time.time() + timeout
    v = cond()
    while not v and time.time() < deadline:
        time.sleep(step)
        v = cond()
    return v


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_ssh_host_cert(jsonb)"):
        tap.skip("ssh", "bc_join.issue_ssh_host_cert(jsonb) is not in the installed extension yet")
        return
    sshd_bin = "/usr/sbin/sshd"
    os.makedirs("/run/sshd", 0o755, exist_ok=True)   # sshd's privilege separation directory
    # every directory bcd writes into, and the reload: root's, under /run (not /tmp)
    d = tempfile.mkdtemp(prefix="bcj-ssh-", dir="/run")
    env.ssh_dir = d
    try:
        script(tap, env, d, sshd_bin)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def script(tap, env, d, sshd_bin):
    """The six steps, in d."""
    # -- the operator's side: names the tenant may use, the pool's rule ------------------
    env.psql("SELECT bc_join.allow_ssh_names('%s', 'host', ARRAY['*.hosts.test'])" % env.tenant)
    env.psql("SELECT bc_join.allow_ssh_names('%s', 'user', ARRAY['root'])" % env.tenant)
    env.psql("SELECT bc_join.set_ssh_settings('%s', host_principals => ARRAY['%s', '{hostname}'], "
             "host_hostname_patterns => ARRAY['*.hosts.test'], user_principals => ARRAY['root'], "
             "user_force_command => 'echo forced')" % (env.pool, STATIC_NAME))

    # -- the host: sshd's ed25519 key, bcd's own key, the files bcd keeps ----------------
    etc = os.path.join(d, "etc")
    own = os.path.join(d, "own")
    files = os.path.join(d, "files")
    for x in (etc, files):
        os.mkdir(x, 0o755)
    ed = os.path.join(etc, "ssh_host_ed25519_key")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", ed])
    krl = os.path.join(files, "revoked.krl")
    user_ca = os.path.join(files, "user_ca.pub")
    host_ca = os.path.join(files, "known_hosts")
    pidfile = os.path.join(d, "sshd.pid")
    reload_exe = write_exe(os.path.join(d, "reload-sshd"),
                           "#!/bin/sh\n[ -f %s ] || exit 0\nkill -HUP \"$(cat %s)\"\n" % (pidfile, pidfile))
    # refusals at start: a relative key path (usage, 64); a KRL under /tmp, where env.dir is
    # (a directory above it writable by others), and a reload writable by others (exit 1)
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, extra=["--ssh-host-key", "ssh_host_ed25519_key.pub"]),
                timeout=30)
    tap.ok(r.returncode == 64 and "--ssh-host-key must be the absolute path" in r.stderr,
           "a relative --ssh-host-key: usage error", r.stderr)
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("x"), extra=[
        "--ssh-krl", os.path.join(env.dir, "krl")]), timeout=30)
    tap.ok(r.returncode == 1 and "--ssh-krl" in r.stderr and "refused" in r.stderr,
           "a --ssh-krl in a directory others can write to: bcd refuses to start", r.stderr)
    loose = write_exe(os.path.join(d, "loose"), "#!/bin/sh\n")
    os.chmod(loose, 0o777)
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("y"), extra=[
        "--ssh-host-key", ed + ".pub", "--ssh-reload", loose]), timeout=30)
    tap.ok(r.returncode == 1 and "--ssh-reload %s is refused" % loose in r.stderr,
           "a --ssh-reload writable by others: bcd refuses to start", r.stderr)
    # --ssh-host-key in a directory others can write to (env.dir, under /tmp): refused even
    # when its certificate goes elsewhere (--ssh-cert-dir): the key is read only through it
    loose_pub = os.path.join(env.dir, "loose_ed25519_key.pub")
    shutil.copy(ed + ".pub", loose_pub)
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("z"), extra=[
        "--ssh-host-key", loose_pub, "--ssh-cert-dir", files]), timeout=30)
    tap.ok(r.returncode == 1 and "--ssh-host-key's directory" in r.stderr,
           "a --ssh-host-key in a directory others can write to, with --ssh-cert-dir: bcd "
           "refuses to start", r.stderr[-1500:])
    shutil.rmtree(state, ignore_errors=True)
    rt = os.path.join(env.dir, "rt")       # the runtime directory: the socket, the hook's DIR
    os.mkdir(rt, 0o700)
    benv = env.bcd_env()
    benv["XDG_RUNTIME_DIR"] = rt
    bcd = Proc(env, "bcd", [env.bcd_bin, "run"] + env.run_args(state, token_file=env.token_file("ssh"), extra=[
        "--status-interval", str(STATUS_INTERVAL), "--renew-at", "0.12", "--hostname", HOST_NAME,
        "--ssh-host-key", ed + ".pub", "--ssh-own-host-key", own, "--ssh-reload", reload_exe,
        "--ssh-krl", krl, "--ssh-user-ca", user_ca, "--ssh-host-ca", host_ca]), benv)
    env.procs.append(bcd)
    own_key = os.path.join(own, "ssh_host_ecdsa_key")
    certs = [ed + "-cert.pub", own_key + "-cert.pub"]
    tap.ok(wait_for(lambda: all(os.path.exists(p) for p in certs + [krl, user_ca, host_ca]), 30),
           "bcd joined and wrote both host certificates, the KRL and the CA files", bcd.text())
    tap.eq([mode(own_key), mode(own_key + ".pub"), mode(certs[0]), mode(krl)],
           [0o600, 0o644, 0o644, 0o644], "modes: the own key 0600, the rest 0644")
    tap.ok(run(["ssh-keygen", "-Q", "-l", "-f", krl]).returncode == 0,
           "the KRL is one ssh-keygen reads")
    with open(host_ca) as f:
        lines = f.read().splitlines()
    tap.ok(len(lines) >= 1 and all(l.startswith("@cert-authority * ecdsa-sha2-nistp256 ")
                                   for l in lines), "--ssh-host-ca: @cert-authority * lines only",
           "\n".join(lines))
    serial0 = [cert_field(p, "Serial") for p in certs]
    principals = cert_block(certs[1], "Principals")
    tap.eq(sorted(principals), sorted([HOST_NAME, STATIC_NAME]),
           "the host certificate names the rule's principal and the claimed hostname, no more")
    tap.eq(cert_field(certs[1], "Type"), "ecdsa-sha2-nistp256-cert-v01@openssh.com host certificate",
           "a host certificate of bcd's P-256 key")

    tap.note("%.1f s" % (time.time() - T0))
    # -- sshd ---------------------------------------------------------------------------
    port = free_port()
    log = os.path.join(d, "sshd.log")
    auth = os.path.join(d, "authorized_keys")
    client_key = os.path.join(d, "client")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", client_key])
    stranger = os.path.join(d, "stranger")     # a key sshd takes for nobody: a quick probe
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger])
    shutil.copy(client_key + ".pub", auth)
    conf = os.path.join(d, "sshd_config")
    with open(conf, "w") as f:
        f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nHostCertificate %s\n"
                "HostKey %s\nHostCertificate %s\nTrustedUserCAKeys %s\nRevokedKeys %s\n"
                "AuthorizedKeysFile %s\nPidFile %s\nUsePAM no\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                "LogLevel VERBOSE\n"
                % (port, own_key, certs[1], ed, certs[0], user_ca, krl, auth, pidfile))
    t = run([sshd_bin, "-t", "-f", conf])
    tap.ok(t.returncode == 0, "sshd -t accepts the configuration", t.stderr)
    sshd = Proc(env, "sshd", [sshd_bin, "-D", "-f", conf, "-E", log])
    env.procs.append(sshd)
    agentlib.wait_port(port, sshd.proc, "sshd", log=lambda: open(log).read())

    def sshd_log():
        with open(log) as f:
            return f.read()

    def ssh(alias, *args, key=client_key, extra=(), cmd="true"):
        """ssh to sshd as root; CompletedProcess (a refused connection, sshd
        restarting on SIGHUP, is tried again)."""
        argv = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", "UserKnownHostsFile=" + host_ca, "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "HostKeyAlias=" + alias, "-o", "IdentitiesOnly=yes", "-i", key,
                "-o", "ConnectTimeout=5", "-p", str(port)] + list(extra) + ["root@127.0.0.1", cmd]
        for _ in range(20):
            r = run(argv)
            if "Connection refused" not in r.stderr and "Connection closed" not in r.stderr \
                    and "Connection reset" not in r.stderr:
                return r
            time.sleep(0.2)
        return r

    tap.note("%.1f s" % (time.time() - T0))
    # -- (1) @cert-authority only: no prompt, connected ---------------------------------
    r = ssh(STATIC_NAME, extra=["-v"])
    m = re.search(r"Server host certificate: \S+ \S+, serial (\d+)", r.stderr)
    tap.ok(r.returncode == 0 and m is not None and
           m.group(1) in serial0 + [cert_field(p, "Serial") for p in certs],
           "(1) a client with only @cert-authority * in known_hosts connects to the host, no "
           "prompt, and runs a command", r.stderr[-3000:])
    r = ssh(HOST_NAME, key=stranger)
    tap.ok(r.returncode == 255 and "Permission denied (publickey)" in r.stderr,
           "(1) the claimed hostname the rule takes works as well (the host verified, then "
           "a key sshd does not take)", r.stderr[-2000:])

    # -- (2) a name the rule does not give ----------------------------------------------
    r = ssh(OTHER_NAME)
    tap.ok(r.returncode == 255 and "Host key verification failed" in r.stderr,
           "(2) an alias the host certificate does not name: refused", r.stderr[-2000:])

    tap.note("%.1f s" % (time.time() - T0))
    # -- (3) a session's user certificate -----------------------------------------------
    sock = os.path.join(rt, "bcd", "bcd.sock")
    hookdir = os.path.join(rt, "hook")
    os.mkdir(hookdir, 0o700)
    h = run([env.bcd_bin, "credential", "--session", "admin", "--dir", hookdir, "--socket", sock,
             "--ssh"], timeout=60, env=benv)
    ukey = os.path.join(hookdir, "admin.key")
    ucert = ukey + "-cert.pub"
    tap.ok(h.returncode == 0 and os.path.exists(ucert),
           "(3) bcd credential --ssh wrote the session's user certificate", h.stdout + h.stderr)
    user_serial = cert_field(ucert, "Serial") if os.path.exists(ucert) else None
    key_id = cert_field(ucert, "Key ID") if os.path.exists(ucert) else None
    r = ssh(STATIC_NAME, key=ukey, cmd="true")
    tap.ok(r.returncode == 0 and r.stdout.strip() == "forced",
           "(3) the session's certificate logs in as root; the force-command runs: \"forced\"",
           r.stdout + r.stderr[-2000:])
    text = sshd_log()
    tap.ok(user_serial is not None and key_id is not None and
           re.search(r"Accepted publickey for root .*ID %s \(serial %s\)" %
                     (re.escape(key_id), user_serial), text) is not None,
           "(3) sshd's log names the certificate's key ID and serial", text[-2000:])
    tap.eq(cert_block(ucert, "Principals"), ["root"], "(3) ssh-keygen -L: exactly the rule's principals")
    tap.eq(cert_block(ucert, "Critical Options"), ["force-command echo forced"],
           "(3) ssh-keygen -L: the force-command and no other critical option")
    exts = cert_block(ucert, "Extensions")
    tap.ok("permit-agent-forwarding" not in exts and exts == ["permit-pty"],
           "(3) ssh-keygen -L: permit-pty only, no agent forwarding", str(exts))

    tap.note("%.1f s" % (time.time() - T0))
    # -- (4) the session revoked: refused within 2 status intervals ---------------------
    session_serial = env.psql("SELECT session_cert_serial FROM bc_join.ssh_certs WHERE serial = %s"
                              % user_serial) if user_serial else ""
    if session_serial:
        env.psql("SELECT bc_join.revoke_certificate('%s', 'keyCompromise')" % session_serial)
        t0 = time.time()
        r = wait_for(lambda: (lambda x: x if x.returncode != 0 else None)(ssh(STATIC_NAME, key=ukey)),
                     2 * STATUS_INTERVAL + 3, step=0.2)
        took = time.time() - t0
    else:
        r, took = None, -1
    tap.ok(r is not None and r.returncode == 255 and took <= 2 * STATUS_INTERVAL + 1.5,
           "(4) revoke_certificate of the session: its SSH login refused %.1f s later" % took,
           (r.stderr if r else "no session certificate") + bcd.text()[-2000:])
    tap.ok(session_serial != "" and wait_for(lambda: "revoked by file %s" % krl in sshd_log(), 5),
           "(4) sshd's log: the key revoked by bcd's KRL", sshd_log()[-2000:])
    tap.eq(run(["ssh-keygen", "-Q", "-f", krl, ucert]).returncode if session_serial else -1, 1,
           "(4) ssh-keygen -Q: the KRL lists the session's certificate")

    tap.note("%.1f s" % (time.time() - T0))
    # -- (5) a renewal: new host certificates, sshd reloaded ----------------------------
    # from the first certificates on (a renewal may already have come: then no wait)
    tap.ok(bcd.wait_log("renewed spiffe://", 30), "(5) the node certificate renewed",
           bcd.text()[-2000:])
    ok = wait_for(lambda: cert_field(certs[1], "Serial") not in (None, serial0[1]) and
                  cert_field(certs[0], "Serial") not in (None, serial0[0]), 10)
    serial1 = [cert_field(p, "Serial") for p in certs]
    tap.ok(ok, "(5) both host certificates renewed (serials %s -> %s)" % (serial0, serial1),
           bcd.text()[-2000:])
    tap.ok(wait_for(lambda: "Received SIGHUP" in sshd_log(), 10),
           "(5) --ssh-reload HUPed sshd", sshd_log()[-2000:] + bcd.text()[-1500:])
    r = ssh(STATIC_NAME, extra=["-v"])
    m = re.search(r"Server host certificate: \S+ \S+, serial (\d+)", r.stderr)
    tap.ok(r.returncode == 0 and m is not None and m.group(1) not in serial0 and
           m.group(1) in serial1 + [cert_field(p, "Serial") for p in certs],
           "(5) the client sees a renewed host certificate (serial %s)" % (m.group(1) if m else "?"),
           r.stderr[-2000:])
    st = run([env.bcd_bin, "status", "--socket", sock], env=benv)
    try:
        doc = json.loads(st.stdout)
    except ValueError:
        doc = {}
    shown = {c.get("path"): c.get("serial") for c in doc.get("sshHostCertificates", [])}
    tap.ok(shown == {p: cert_field(p, "Serial") for p in certs} and
           isinstance(doc.get("sshKrlVersion"), int) and doc.get("sshSignedError") is None and
           re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", doc.get("sshSignedIssuedAt") or "") and
           all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", c.get("validBefore", ""))
               for c in doc.get("sshHostCertificates", [])),
           "bcd status: each host certificate's path, serial and validBefore, the KRL's version, "
           "the signed document's issuedAt and no error",
           st.stdout + st.stderr)

    tap.note("%.1f s" % (time.time() - T0))
    # -- (6) the node revoked: a client with bcd's KRL refuses the host ------------------
    node_id = env.psql("SELECT node_id FROM bc_join.node_certs ORDER BY issued_at DESC LIMIT 1")
    version = int(env.psql("SELECT coalesce(max(version), 0) FROM bc_join.ssh_krl_state"))
    env.psql("SELECT bc_join.revoke_node('%s', 'keyCompromise')" % node_id)
    tap.ok(bcd.wait_log("KRL version %d written" % (version + 1), 2 * STATUS_INTERVAL + 5) or
           bcd.wait_log("KRL version", 1, count=3),
           "(6) bcd took up the KRL of the revocation", bcd.text()[-2000:])
    r = ssh(STATIC_NAME, extra=["-o", "RevokedHostKeys=" + krl])
    tap.ok(r.returncode == 255 and "revoked" in r.stderr.lower(),
           "(6) revoke_node: a client with RevokedHostKeys=bcd's KRL refuses the host",
           r.stderr[-2000:])
    r = ssh(STATIC_NAME, key=stranger)
    tap.ok(r.returncode == 255 and "Permission denied (publickey)" in r.stderr,
           "(6) and without the KRL the host would be verified", r.stderr[-2000:])
    tap.eq(os.path.exists(krl) and os.path.exists(certs[0]), True, "bcd never removed a file")

    # -- what bcd never installs, sshd survives: a HUP with a certificate of another key ------
    shutil.copy(certs[0], certs[1])
    hups = sshd_log().count("Received SIGHUP")
    run([reload_exe])
    wait_for(lambda: sshd_log().count("Received SIGHUP") > hups, 5)
    r = ssh(STATIC_NAME, key=stranger)
    tap.ok(r.returncode == 255 and "Permission denied (publickey)" in r.stderr and
           sshd.proc.poll() is None,
           "sshd HUPed with a host certificate of another key keeps serving (its other key)",
           r.stderr[-1500:] + sshd_log()[-1500:])
    sshd.stop(signal.SIGTERM, 10)
    rc, _ = bcd.stop(signal.SIGTERM, 20)
    tap.ok(rc == 0 and "Sanitizer" not in bcd.text() and "runtime error" not in bcd.text(),
           "bcd stops on SIGTERM, exit 0, no sanitizer report", bcd.text()[-3000:])
    # the floor of the signed documents (issuedAt, krlVersion) for the next start: the KRL's
    try:
        with open(os.path.join(state, "ssh-signed-floor")) as f:
            floor = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        floor = []
    tap.ok(len(floor) == 2 and floor[1] >= version + 1 and abs(floor[0] - time.time()) < 600,
           "the state directory keeps the signed documents' floor (issuedAt, krlVersion %d) "
           "for the next start" % (version + 1), str(floor))


def setup(env):
    """The cluster with 60-second node certificates (a renewal within the script), the gateway."""
    env.start_cluster("agents")
    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    env.make_tls()
    env.gateway()


agentlib.run(agentlib.Env(), setup, body)
