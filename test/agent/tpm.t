#!/usr/bin/python3
"""tpm.t: what bcd's tpm producer makes, on a swtpm with EK certificates behind
tpm2-abrmd (test/lib/tpm-rm.sh), checked without the server's tpm attestor by
test/tools/tpm-check (the common library's checks, src/common/bc_tpm.h).

Shows, for the RSA-2048 EK (policy session) and the P-384 EK (password):
`bcd tpm-evidence` makes node.key as a TSS2 PRIVATE KEY (0600; openssl cannot
read it without the TPM), keeps the AK's blobs in the directory, and its
round-1 evidence passes every check (EK certificate from NV chains to swtpm's
CA and certifies ekPub, without NV padding; AK attributes and scheme; the AK's
Certify of nodeKeyPub; nodeKeyPub is the CSR's key; the CSR's signature made
in the TPM verifies); a challenge made in software (bc_tpm_make_credential
for the AK's Name under ekPub) is answered with that secret and a quote by the
AK with extraData SHA-256(secret || SHA-256(CSR)) over sha256:0-7; a second
run reuses the AK and the node key; a tampered challenge is refused; a file
key (PKCS#8) in the directory is refused, never used; a TCTI without a
resource manager is refused.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, Tap  # noqa: E402

BCD = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/asan/bcd"))
CHECK = os.environ.get("BCJ_TPM_CHECK", os.path.join(TOP, "build/tpm-check"))
RM = os.path.join(TOP, "test/lib/tpm-rm.sh")


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def run(cmd, env=None, timeout=60):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=timeout)


def body(tap, d, tcti, envv):
    def bcd(*args):
        return run([BCD, "tpm-evidence", "--tcti", tcti] + list(args), env=envv)

    def write(name, text):
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    for ek in ("rsa", "p384"):
        out = os.path.join(d, "node-" + ek)
        r = bcd("--tpm-ek", ek, "--out-dir", out)
        tap.eq(r.returncode, 0, "%s EK: bcd tpm-evidence makes round 1" % ek, r.stderr)
        ev = write("ev-%s.b64" % ek, r.stdout)
        key = os.path.join(out, "node.key")
        csr = os.path.join(out, "node.csr.der")
        with open(key) as f:
            pem = f.read()
        tap.ok(pem.startswith("-----BEGIN TSS2 PRIVATE KEY-----"),
               "%s EK: node.key is a TSS2 PRIVATE KEY (the key lives in the TPM)" % ek)
        tap.eq(os.stat(key).st_mode & 0o777, 0o600, "%s EK: node.key is 0600" % ek)
        o = run(["openssl", "pkey", "-in", key, "-noout"])
        tap.ok(o.returncode != 0, "%s EK: openssl without the TPM cannot use node.key" % ek)
        tap.ok(all(os.path.exists(os.path.join(out, f)) for f in ("tpm-ak.pub", "tpm-ak.priv")),
               "%s EK: the AK's blobs are kept in the directory" % ek)
        c = run([CHECK, "evidence", ev, csr, os.path.join(tpm, "root.pem"),
                 os.path.join(tpm, "issuer.pem")])
        tap.ok(c.returncode == 0 and "not ok" not in c.stdout and c.stdout.count("ok:") >= 20,
               "%s EK: round 1 passes every check of the common library" % ek, c.stdout + c.stderr)
        doc = json.loads(b64d(r.stdout.strip()))
        tap.eq(sorted(doc), sorted(["ekPub", "ekCert", "akPub", "nodeKeyPub", "certifyInfo",
                                    "certifySignature"]),
               "%s EK: round 1 has exactly the members the contract fixes" % ek)

        chal = os.path.join(d, "ch-%s.b64" % ek)
        secret = os.path.join(d, "secret-%s" % ek)
        c = run([CHECK, "challenge", ev, chal, secret])
        tap.eq(c.returncode, 0, "%s EK: a challenge made in software for the AK under ekPub" % ek,
               c.stderr)
        a = bcd("--tpm-ek", ek, "--out-dir", out, "--challenge", chal)
        tap.eq(a.returncode, 0, "%s EK: bcd answers the challenge" % ek, a.stderr)
        ans = write("ans-%s.b64" % ek, a.stdout)
        c = run([CHECK, "answer", ans, ev, csr, secret])
        tap.ok(c.returncode == 0 and "not ok" not in c.stdout,
               "%s EK: the answer carries the secret and a quote over it and the CSR" % ek,
               c.stdout + c.stderr)

        r2 = bcd("--tpm-ek", ek, "--out-dir", out)
        doc2 = json.loads(b64d(r2.stdout.strip())) if r2.returncode == 0 else {}
        tap.ok(r2.returncode == 0 and doc2.get("akPub") == doc["akPub"] and
               doc2.get("nodeKeyPub") == doc["nodeKeyPub"],
               "%s EK: a second run reuses the AK and the node key" % ek, r2.stderr)

        ch = json.loads(b64d(open(chal).read().strip()))
        blob = bytearray(b64d(ch["credentialBlob"]))
        blob[-1] ^= 1
        ch["credentialBlob"] = b64e(bytes(blob))
        bad = write("bad-%s.b64" % ek, b64e(json.dumps(ch).encode()))
        a = bcd("--tpm-ek", ek, "--out-dir", out, "--challenge", bad)
        tap.ok(a.returncode == 1 and "ActivateCredential" in a.stderr and a.stdout == "",
               "%s EK: a tampered challenge is refused by the TPM, nothing printed" % ek,
               a.stderr)

    # A file key is never used instead of a TPM key.
    filekey = os.path.join(d, "filekey")
    os.makedirs(filekey, mode=0o700)
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", os.path.join(filekey, "node.key")])
    run(["openssl", "req", "-new", "-key", os.path.join(filekey, "node.key"), "-subj", "/",
         "-outform", "der", "-out", os.path.join(filekey, "node.csr.der")])
    before = open(os.path.join(filekey, "node.key")).read()
    r = bcd("--out-dir", filekey)
    tap.ok(r.returncode == 1 and "never uses a file key" in r.stderr and r.stdout == "",
           "a PKCS#8 node.key is refused legibly, never used", r.stderr)
    tap.eq(open(os.path.join(filekey, "node.key")).read(), before, "and left as it was")

    r = run([BCD, "tpm-evidence", "--tcti", "swtpm:host=127.0.0.1,port=2321", "--out-dir",
             os.path.join(d, "raw")], env=envv)
    tap.ok(r.returncode == 64 and "resource manager" in r.stderr,
           "a TCTI without a resource manager is refused (exit 64)", r.stderr)
    r = run([BCD, "run", "--gateway", "https://127.0.0.1:1", "--gateway-ca", "x",
             "--service-keys", "x", "--state-dir", os.path.join(d, "s"), "--tcti", tcti], env=envv)
    tap.ok(r.returncode == 64 and "--attestor tpm" in r.stderr,
           "bcd run: --tcti without --attestor tpm is a usage error", r.stderr)
    h = run([BCD, "run", "--help"])
    tap.ok(all(o in h.stdout for o in ("--tcti", "--tpm-ek", "--tpm-pcrs")),
           "bcd run --help explains --tcti, --tpm-ek, --tpm-pcrs")


tap = Tap()
d = tempfile.mkdtemp(prefix="bcj-tpm-")
tpm = os.path.join(d, "tpm")
try:
    s = run(["bash", RM, "start", tpm, str(os.getpid())], timeout=60)
    if not tap.ok(s.returncode == 0, "a swtpm with EK certificates behind tpm2-abrmd", s.stderr):
        sys.exit(tap.done())
    envv = dict(os.environ)
    with open(os.path.join(tpm, "dbus-address")) as f:
        envv["DBUS_SESSION_BUS_ADDRESS"] = f.read().strip()
    with open(os.path.join(tpm, "tcti")) as f:
        tcti = f.read().strip()
    envv.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    envv["TSS2_LOG"] = "all+NONE"
    body(tap, d, tcti, envv)
finally:
    run(["bash", RM, "stop", tpm])
    if not os.environ.get("BCJ_KEEP"):
        shutil.rmtree(d, ignore_errors=True)
sys.exit(tap.done())
