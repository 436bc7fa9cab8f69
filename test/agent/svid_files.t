#!/usr/bin/python3
"""svid_files.t: files mode (#46.5; docs/agent.md, "Files mode").

One bcd daemon (--status-interval 1) keeps two identities in two directories
(--svid-files 'DIR=>session=S'): the server's, reloaded by a wrapper script that runs
`nginx -s reload` (--svid-files-reload), and a client's.  Debian's nginx, run with its own
prefix, configuration and pid file in the test's directory on a port below the ephemeral
range, reads ssl_certificate, ssl_certificate_key and ssl_client_certificate from the
server's directory and requires a client certificate:
- svid.pem (leaf and intermediates, no root), svid_key.pem 0600, svid_bundle.pem (the
  trust domain's root), crl.pem once the CRL is held; no temporary file left behind (one
  an earlier bcd left is removed at start);
- `openssl s_client` with the client's SVID: "Verify return code: 0" against
  svid_bundle.pem, the server's certificate is svid.pem's (its serial, its URI SAN), and
  nginx answers SUCCESS with the client certificate, whose URI SAN is the client
  workload's SPIFFE ID;
- a renewal (bc_join.revoke_certificate of the server's SVID: bcd provisions it again at
  once): new files, the reload run and done, and s_client then sees the new serial;
- bc_join.revoke_node: svid_key.pem and svid.pem are removed from both directories (as
  the Workload API ends its streams);
- a symbolic link planted as svid_key.pem before the start is replaced by the key, its
  target left untouched;
- refused at start (bcd exits non-zero, saying why): a DIR writable by others, a DIR
  under /tmp (a directory above it writable by others), and a reload executable
  writable by others.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib  # noqa: E402

NGINX = "/usr/sbin/nginx"

NGINX_CONF = """
daemon off;
master_process on;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log info;
events {{ worker_connections 32; }}
http {{
  access_log off;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {d}/svid.pem;
    ssl_certificate_key {d}/svid_key.pem;
    ssl_client_certificate {d}/svid_bundle.pem;
    ssl_verify_client on;
    ssl_verify_depth 4;
    location / {{ return 200 "$ssl_client_verify $ssl_client_escaped_cert\\n"; }}
  }}
}}
"""


def trusted_dir():
    """A directory only root can change, every directory above it too (/run):
    bcd refuses a reload executable under /tmp, where env.dir is."""
    d = tempfile.mkdtemp(prefix="bcj-files-", dir="/run")
    os.chmod(d, 0o755)
    return d


def write_exe(path, text, mode=0o755):
    """An executable file; its path."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def load_pems(data):
    """Every certificate of PEM text (bytes)."""
    from cryptography import x509
    end = b"-----END CERTIFICATE-----"
    return [x509.load_pem_x509_certificate(part + end) for part in data.split(end)
            if b"-----BEGIN CERTIFICATE-----" in part]


def uri_san(cert):
    """The URI SANs of a certificate."""
    from cryptography import x509
    try:
        return cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        return []


def s_client(port, cli, ca):
    """openssl s_client with the client's SVID, a GET; (output, server leaf or None)."""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                        "-cert", os.path.join(cli, "svid.pem"),
                        "-key", os.path.join(cli, "svid_key.pem"),
                        "-cert_chain", os.path.join(cli, "svid.pem"),
                        "-CAfile", ca, "-verify_return_error", "-showcerts", "-ign_eof"],
                       input=b"GET / HTTP/1.0\r\n\r\n", stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20)
    out = r.stdout.decode("utf-8", "replace")
    certs = load_pems(r.stdout)
    return out, certs[0] if certs else None


def client_uri(out):
    """The URI SAN of the client certificate nginx echoes ($ssl_client_escaped_cert)."""
    for line in out.splitlines():
        if line.startswith("SUCCESS "):
            pems = load_pems(urllib.parse.unquote(line.split(" ", 1)[1]).encode())
            return uri_san(pems[0]) if pems else []
    return None


def body(tap, env):
    tdir = trusted_dir()
    try:
        script(tap, env, tdir)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


def script(tap, env, tdir):
    from cryptography import x509
    if not os.access(NGINX, os.X_OK):
        tap.skip("files mode with nginx", "no %s (Debian package nginx)" % NGINX)
        return
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("f"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "the host joins", r.stdout + r.stderr):
        return
    node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    srv = os.path.join(tdir, "srv")
    cli = os.path.join(tdir, "cli")
    os.mkdir(srv, 0o700)
    os.mkdir(cli, 0o700)
    prefix = os.path.join(env.dir, "nginx")
    os.mkdir(prefix, 0o755)
    port = agentlib.free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(p=prefix, d=srv, port=port))
    nginx = [NGINX, "-p", prefix, "-c", conf, "-e", os.path.join(prefix, "error.log")]
    reload = write_exe(os.path.join(tdir, "reload-nginx"),
                       "#!/bin/sh\nexec %s -s reload 2>&1\n" % " ".join(nginx))

    # refusals at start: a DIR writable by others, or under /tmp; a reload executable
    # writable by others
    bad = os.path.join(tdir, "open")
    os.mkdir(bad)
    os.chmod(bad, 0o777)
    r = env.bcd("run", *env.run_args(state, extra=["--svid-files", bad + "=>session=x"]), timeout=30)
    tap.ok(r.returncode != 0 and "%s is writable by others (mode 0777)" % bad in r.stderr,
           "a DIR writable by others: bcd refuses to start, saying so", (r.returncode, r.stderr))
    under_tmp = os.path.join(env.dir, "srv")
    os.mkdir(under_tmp, 0o700)
    r = env.bcd("run", *env.run_args(state, extra=["--svid-files", under_tmp + "=>session=x"]),
                timeout=30)
    tap.ok(r.returncode != 0 and "/tmp is writable by others" in r.stderr,
           "a DIR under /tmp (writable by others, a link could be swapped on the way): refused",
           (r.returncode, r.stderr))
    loose = write_exe(os.path.join(tdir, "loose"), "#!/bin/sh\nexit 0\n", 0o757)
    os.chmod(loose, 0o757)
    r = env.bcd("run", *env.run_args(state, extra=[
        "--svid-files", srv + "=>session=web", "--svid-files-reload", srv + "=" + loose]),
        timeout=30)
    tap.ok(r.returncode != 0 and "--svid-files-reload %s is refused" % loose in r.stderr and
           "writable by others" in r.stderr,
           "a reload executable writable by others: bcd refuses to start, saying so",
           (r.returncode, r.stderr))

    # a symbolic link planted as svid_key.pem
    victim = os.path.join(env.dir, "victim")
    with open(victim, "w") as f:
        f.write("not a key\n")
    os.symlink(victim, os.path.join(srv, "svid_key.pem"))
    # what a bcd killed between a write and its rename leaves (a key among them)
    with open(os.path.join(srv, ".svid_key.pem.tmp.0011223344556677"), "w") as f:
        f.write("an old key\n")

    rt = sessionlib.runtime_dir(env)
    p = sessionlib.start_daemon(env, "bcd-files", rt, env.run_args(state, extra=[
        "--svid-files", srv + "=>session=web",
        "--svid-files", cli + "/=>session=client,context=c1",
        "--svid-files-reload", srv + "=" + reload,
        "--status-interval", "1"]))
    ok = p.wait_log("files: %s: a new" % srv, 20) and p.wait_log("files: %s: a new" % cli, 10)
    tap.ok(ok, "bcd writes both directories", p.text())
    if not ok:
        return
    key = os.path.join(srv, "svid_key.pem")
    tap.ok(not os.path.islink(key) and open(victim).read() == "not a key\n",
           "the link planted as svid_key.pem is replaced, its target untouched")
    tap.eq(oct(agentlib.mode(key)), "0o600", "svid_key.pem is 0600")
    chain = load_pems(open(os.path.join(srv, "svid.pem"), "rb").read())
    roots = load_pems(open(os.path.join(srv, "svid_bundle.pem"), "rb").read())
    tap.ok(len(chain) >= 1 and all(c.issuer != c.subject for c in chain) and len(roots) == 1 and
           roots[0].issuer == roots[0].subject,
           "svid.pem: the leaf and its intermediates, no root; svid_bundle.pem: the root",
           ([c.subject for c in chain], [c.subject for c in roots]))
    spiffe_srv = uri_san(chain[0])
    spiffe_cli = uri_san(load_pems(open(os.path.join(cli, "svid.pem"), "rb").read())[0])
    tap.ok(len(spiffe_srv) == 1 and spiffe_srv[0].startswith("spiffe://" + agentlib.TRUST_DOMAIN)
           and len(spiffe_cli) == 1 and spiffe_cli != spiffe_srv,
           "each leaf has one URI SAN of the trust domain, the two identities apart",
           (spiffe_srv, spiffe_cli))
    deadline = time.time() + 10
    while not os.path.exists(os.path.join(srv, "crl.pem")) and time.time() < deadline:
        time.sleep(0.1)
    tap.ok(os.path.exists(os.path.join(srv, "crl.pem")), "crl.pem once bcd holds the CRL",
           p.text())
    tap.eq([n for n in os.listdir(srv) if n.startswith(".")], [],
           "no temporary file left (one an earlier bcd left removed at start)")

    ng = agentlib.Proc(env, "nginx", nginx)
    env.procs.append(ng)
    agentlib.wait_port(port, ng.proc, "nginx")
    out, leaf = s_client(port, cli, os.path.join(srv, "svid_bundle.pem"))
    tap.ok("Verify return code: 0 (ok)" in out and leaf is not None and
           leaf.serial_number == chain[0].serial_number and uri_san(leaf) == spiffe_srv,
           "s_client with the client's SVID: the server's SVID verifies against svid_bundle.pem "
           "(its serial, its URI SAN)", out)
    tap.eq(client_uri(out), spiffe_cli,
           "nginx verified the client (SUCCESS); its certificate's URI SAN is the client workload's")

    # a renewal: the server's SVID revoked, provisioned again at once, the reload run
    done = p.text().count("files: %s: reload %s done" % (srv, reload))
    env.psql("SELECT bc_join.revoke_certificate('%032x', 'superseded')" % chain[0].serial_number)
    t0 = time.time()
    tap.ok(p.wait_log("files: %s: reload %s done" % (srv, reload), 15, count=done + 1),
           "a new SVID: the files replaced and nginx -s reload run (%.1f s)" % (time.time() - t0),
           p.text()[-3000:])
    chain2 = load_pems(open(os.path.join(srv, "svid.pem"), "rb").read())
    new = None
    for _ in range(30):         # nginx's workers pick the new files up
        out, leaf = s_client(port, cli, os.path.join(srv, "svid_bundle.pem"))
        if leaf is not None and leaf.serial_number != chain[0].serial_number:
            new = leaf
            break
        time.sleep(0.2)
    tap.ok(new is not None and new.serial_number == chain2[0].serial_number and
           "Verify return code: 0 (ok)" in out and uri_san(new) == spiffe_srv,
           "after the renewal s_client sees the new serial (the same SPIFFE ID)", out)
    crl = x509.load_pem_x509_crl(open(os.path.join(srv, "crl.pem"), "rb").read())
    tap.ok(crl.get_revoked_certificate_by_serial_number(chain[0].serial_number) is not None,
           "crl.pem lists the old serial")
    # the node revoked: as the Workload API's streams end, the key and certificate go
    env.psql("SELECT bc_join.revoke_node('%s', 'keyCompromise')" % node)
    t0 = time.time()
    tap.ok(p.wait_log("files: %s: svid_key.pem and svid.pem removed: this node's certificate"
                      % srv, 15) and not os.path.exists(key) and
           not os.path.exists(os.path.join(srv, "svid.pem")) and
           not os.path.exists(os.path.join(cli, "svid_key.pem")),
           "revoke_node: svid_key.pem and svid.pem removed from both directories (%.1f s)"
           % (time.time() - t0), p.text()[-3000:])
    ng.stop()
    rc, _ = p.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p.text(), "bcd stops cleanly (no sanitizer report)",
           p.text()[-3000:])


agentlib.main(body)
