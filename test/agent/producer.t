#!/usr/bin/python3
"""producer.t: a custom attestor joined from a real host, its evidence made
by an external producer (bcd run --attestor ID --producer PATH).

Shows: the seed's acme-asset attestor registered as a PL/pgSQL function
with its vendor key; a host joins through the real gateway with
`bcd run --attestor acme-asset --producer acme.py` (a small Python script
signing the asset tag with the CSR's hash, run without a shell in a clean
environment, its input one JSON object on stdin), its claims kept; it
renews (bcd renew --once) and serves a session credential; a second host
with a replayed proof, a proof for another CSR, an unknown asset and the
wrong role is refused each time (exit 2, the one refusal, the reason
recorded, no node made); bcd join-request --producer makes a request
bc_join() admits; a custom attestor with a challenge round, the join token
sealed by bcd (the producer never sees it), answered by the producer in
round 2, and when it cannot answer now (75) the join starts over at round 1
with a fresh challenge; a producer that hangs, writes garbage, writes
megabytes, exits non-zero, is killed or says "not now" (75) is logged
clearly and backed off from while bcd keeps running with the same key and
CSR, and stops cleanly on SIGTERM; one that says "never" (78) ends the join
(exit 1); the two examples of docs/agent.md join as written; usage errors
(another producer's option, a producer of another command); bcd run --help
lists each producer's options under its name; bcd ramdisk --attestor ID
--producer PATH joins a custom ramdisk attestor.

The producer held to ssh's and sudo's rules for their helpers (#42.7): a
relative or missing --producer is a usage error naming it (exit 64); one
writable by its group or others, owned by another user, or under a
world-writable directory (/tmp among them) is refused (exit 64, saying
which component and why); the file is opened once and run by descriptor, so
a symlink swapped under the path after bcd started does not change what
runs; the answer is taken when the producer has exited and its JSON object
is complete, though a setsid() child it left still holds its stdout (logged
with its pid, left running), the child's end of the object included;
an exit 0 with an invalid answer logs the last line of its stderr.
"""
import base64
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

API = "bc-join.dev/producer/v1"

# The seed's example (docs/attestors.md, "An example"): a vendor-signed asset
# tag bound to the CSR, a lookup table of its own, each proof used once.
ACME = r"""
CREATE TABLE public.plg_acme_assets (asset_tag text PRIMARY KEY, tenant_id text NOT NULL, pool_id text NOT NULL);
CREATE TABLE public.plg_acme_config (vendor_key text NOT NULL);
CREATE FUNCTION public.acme_asset_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	body jsonb;
	sig bytea;
	tag text;
	a public.plg_acme_assets;
BEGIN
	IF context->>'csrSha256' IS NULL THEN
		PERFORM bc_join.refuse('acme-asset:no-csr-binding');
	END IF;
	BEGIN
		body := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
		sig := bc_join.b64url_decode(body->>'sig');
	EXCEPTION WHEN others THEN
		body := NULL;
	END;
	IF body IS NULL OR sig IS NULL OR jsonb_typeof(body->'assetTag') IS DISTINCT FROM 'string' THEN
		PERFORM bc_join.refuse('acme-asset:malformed');
	END IF;
	tag := body->>'assetTag';
	IF NOT bc_join.ecdsa_verify((SELECT vendor_key FROM public.plg_acme_config),
								convert_to(tag, 'UTF8') || bc_join.b64url_decode(context->>'csrSha256'),
								sig) THEN
		PERFORM bc_join.refuse('acme-asset:bad-signature');
	END IF;
	SELECT * INTO a FROM public.plg_acme_assets WHERE asset_tag = tag;
	IF NOT FOUND THEN
		PERFORM bc_join.refuse('acme-asset:unknown-asset');
	END IF;
	PERFORM bc_join.use_once('acme-asset', sha256(sig));
	RETURN jsonb_build_object('tenantId', a.tenant_id, 'role', 'node', 'poolId', a.pool_id,
							  'bind', bc_join.b64url_encode(sha256(convert_to(tag, 'UTF8'))));
END
$$;
SELECT bc_join.register_attestor('acme-asset', '1.0.0', ARRAY['node'], 'public.acme_asset_verify(jsonb,jsonb)');
"""

# A custom attestor with a challenge round: round 1 carries the join token
# (sealed by bcd) and the word "hello"; it answers a nonce bound to the CSR;
# round 2's evidence must be the vendor's signature over nonce || csrSha256.
CHAL = r"""
CREATE TABLE public.plg_chal (nonce bytea PRIMARY KEY, csr_sha256 text NOT NULL);
CREATE FUNCTION public.acme_chal_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t jsonb;
	n bytea;
	body jsonb;
	c public.plg_chal;
BEGIN
	IF evidence->>'token' IS NULL THEN PERFORM bc_join.refuse('acme-chal:no-token'); END IF;
	t := bc_join.check_join_token('acme-chal', evidence->>'token', context);
	IF bc_join.b64url_decode(evidence->>'payload') = '\x68656c6c6f'::bytea THEN
		n := sha256(convert_to(gen_random_uuid()::text, 'UTF8'));
		INSERT INTO public.plg_chal VALUES (n, context->>'csrSha256');
		RETURN jsonb_build_object('deferred', 'challenge', 'challenge', bc_join.b64url_encode(n),
								  'notAfter', bc_join.compute_now() + interval '5 minutes');
	END IF;
	BEGIN
		body := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
	EXCEPTION WHEN others THEN
		PERFORM bc_join.refuse('acme-chal:malformed');
	END;
	SELECT * INTO c FROM public.plg_chal WHERE nonce = bc_join.b64url_decode(body->>'nonce')
		AND csr_sha256 = context->>'csrSha256';
	IF NOT FOUND THEN PERFORM bc_join.refuse('acme-chal:unknown-challenge'); END IF;
	IF NOT bc_join.ecdsa_verify((SELECT vendor_key FROM public.plg_acme_config),
								c.nonce || bc_join.b64url_decode(context->>'csrSha256'),
								bc_join.b64url_decode(body->>'sig')) THEN
		PERFORM bc_join.refuse('acme-chal:bad-signature');
	END IF;
	DELETE FROM public.plg_chal WHERE nonce = c.nonce;
	PERFORM bc_join.use_once('acme-chal', sha256(c.nonce));
	PERFORM bc_join.spend_join_token(t->>'tokenId');
	RETURN jsonb_build_object('tenantId', t->>'tenantId', 'role', t->>'role', 'poolId', t->>'poolId',
							  'tokenId', t->>'tokenId');
END $$;
SELECT bc_join.register_attestor('acme-chal', '1', ARRAY['node'], 'public.acme_chal_verify(jsonb,jsonb)');
"""

# A ramdisk's custom attestor: the ramdisk's join token (sealed by bcd) and
# the vendor's proof bound to the CSR, as for acme-asset.
RAMDISK = r"""
CREATE FUNCTION public.acme_ramdisk_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t jsonb;
	body jsonb;
BEGIN
	IF evidence->>'token' IS NULL THEN PERFORM bc_join.refuse('acme-ramdisk:no-token'); END IF;
	t := bc_join.check_join_token('acme-ramdisk', evidence->>'token', context);
	body := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
	IF NOT bc_join.ecdsa_verify((SELECT vendor_key FROM public.plg_acme_config),
								convert_to(body->>'assetTag', 'UTF8') || bc_join.b64url_decode(context->>'csrSha256'),
								bc_join.b64url_decode(body->>'sig')) THEN
		PERFORM bc_join.refuse('acme-ramdisk:bad-signature');
	END IF;
	PERFORM bc_join.spend_join_token(t->>'tokenId');
	RETURN jsonb_build_object('tenantId', t->>'tenantId', 'role', 'ramdisk', 'poolId', t->>'poolId',
							  'tokenId', t->>'tokenId');
END $$;
SELECT bc_join.register_attestor('acme-ramdisk', '1', ARRAY['ramdisk'], 'public.acme_ramdisk_verify(jsonb,jsonb)');
"""

# The producer of both: what a vendor's tooling would be, in a few lines.
PRODUCER = r'''#!/usr/bin/python3
import base64, json, os, sys
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

VENDOR, TAG, RECORD, MODE = %(vendor)r, %(tag)r, %(record)r, %(mode)r
fds = {}
for fd in os.listdir("/proc/self/fd"):                        # the listing's own is closed by now
    try:
        fds[fd] = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        pass
req = json.load(sys.stdin)
if MODE == "setsid":
    if os.fork() == 0:                                          # a daemon left behind, holding stdout
        os.setsid()
        with open(RECORD + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        import time
        time.sleep(120)
        os._exit(0)
    while not os.path.exists(RECORD + ".daemon"):
        pass
with open(RECORD, "a") as f:
    f.write(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "fds": fds, "input": req}) + "\n")
if MODE == "flaky-round2" and req["round"] == 2 and not os.path.exists(RECORD + ".failed"):
    open(RECORD + ".failed", "w").close()
    sys.stderr.write("the vendor token is busy\n")
    sys.exit(75)
b64d = lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) %% 4))
b64e = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
with open(VENDOR, "rb") as f:
    vendor = serialization.load_pem_private_key(f.read(), None)
sign = lambda data: b64e(vendor.sign(data, ec.ECDSA(hashes.SHA256())))
csr_hash = b64d(req["csrSha256"]) if MODE != "other-csr" else os.urandom(32)
if req["attestor"] == "acme-chal" and req["round"] == 1:
    evidence = b"hello"
elif req["attestor"] == "acme-chal":
    evidence = json.dumps({"nonce": req["challenge"],
                           "sig": sign(b64d(req["challenge"]) + csr_hash)}).encode()
else:
    evidence = json.dumps({"assetTag": TAG, "sig": sign(TAG.encode() + csr_hash)}).encode()
answer = json.dumps({"apiVersion": req["apiVersion"], "attestation": b64e(evidence),
                     "claims": {"serial": TAG}})
if MODE == "setsid-late":                                       # it exits; its daemon ends the answer
    sys.stdout.write(answer[:20])
    sys.stdout.flush()
    if os.fork() == 0:
        os.setsid()
        with open(RECORD + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        import time
        time.sleep(0.5)
        os.write(1, answer[20:].encode())
        time.sleep(120)
        os._exit(0)
    sys.exit(0)
sys.stdout.write(answer)
'''

# Producers that fail, one way each (the record shows each run's CSR).
BROKEN = {
    "hang": "import time; time.sleep(120)",
    "garbage": "sys.stderr.write('acme-tool 2.1 starting\\nthe vendor token answered garbage\\n'); "
               "print('this is not JSON {')",
    "megabytes": "sys.stdout.write('x' * (8 << 20))",
    "nonzero": "sys.stderr.write('the vendor service is down\\n'); sys.exit(3)",
    "killed": "import signal; os.kill(os.getpid(), signal.SIGKILL)",
    "not-now": "sys.stderr.write('the asset database is busy\\n'); sys.exit(75)",
}
BROKEN_SAYS = {
    "hang": "did not finish within 1 s; killed",
    "garbage": "wrote no valid answer: its answer is not one JSON object",
    "megabytes": "wrote more than 65536 bytes on stdout; killed",
    "nonzero": "exited 3; its stderr: the vendor service is down",
    "killed": "was killed by signal 9",
    "not-now": "cannot make the evidence now (exit 75); its stderr: the asset database is busy",
}
# and then the last line of its stderr, as docs/agent.md promises (#42.7)
BROKEN_ALSO = {"garbage": "; its stderr: the vendor token answered garbage"}
BROKEN_HEAD = r'''#!/usr/bin/python3
import json, os, sys
req = json.load(sys.stdin)
with open(%(record)r, "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "input": req}) + "\n")
'''


def kill(pid):
    """SIGKILL pid (0: none) if it is still there."""
    try:
        if pid > 0:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def write_exe(path, text):
    """An executable file (0700) holding text."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o700)
    return path


def records(path):
    """The producer's records, one dict per run."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def trusted_dir():
    """A directory for the producers that only root can change, every directory
    above it too (/run): bcd refuses one under /tmp, where env.dir is."""
    d = tempfile.mkdtemp(prefix="bcj-producers-", dir="/run")
    os.chmod(d, 0o755)
    return d


def body(tap, env):
    """The script, its producers in a trusted directory."""
    pdir = trusted_dir()
    try:
        script(tap, env, pdir)
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


def script(tap, env, pdir):
    """The script."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    vendor = os.path.join(env.dir, "vendor.key")
    env.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", vendor)
    with open(vendor, "rb") as f:
        pub = serialization.load_pem_private_key(f.read(), None).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    env.psql(ACME)
    env.psql("INSERT INTO public.plg_acme_config VALUES ('%s')" % pub)
    env.psql("INSERT INTO public.plg_acme_assets VALUES ('ASSET-0042', '%s', '%s'), ('ASSET-0043', '%s', '%s'), "
             "('ASSET-0044', '%s', '%s'), ('ASSET-0045', '%s', '%s')" % ((env.tenant, env.pool) * 4))

    def producer(name, tag, mode="ok"):
        rec = os.path.join(env.dir, "record-%s.jsonl" % name)
        exe = write_exe(os.path.join(pdir, "producer-%s.py" % name),
                        PRODUCER % {"vendor": vendor, "tag": tag, "record": rec, "mode": mode})
        return exe, rec

    def nodes():
        return env.psql("SELECT count(*) FROM bc_join.nodes")

    def last_refusal():
        return env.psql("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                        "ORDER BY id DESC LIMIT 1")

    # -- a host joins through the real gateway with the external producer ----------------
    exe42, rec42 = producer("a", "ASSET-0042")
    state = os.path.join(env.dir, "state-a")
    r = env.bcd("run", *env.run_args(state, extra=["--attestor", "acme-asset", "--producer", exe42,
                                                   "--once"]))
    lines = r.stdout.splitlines()
    node = lines[0].rsplit("/", 1)[-1] if r.returncode == 0 and lines else "?"
    tap.ok(r.returncode == 0 and node.startswith("node_"),
           "bcd run --attestor acme-asset --producer PATH joins the host", r.stdout + r.stderr)
    tap.eq(env.psql("SELECT attestor || ' ' || (claims->>'serial') FROM bc_join.nodes WHERE id = '%s'" % node),
           "acme-asset ASSET-0042", "the node joined by acme-asset, with the claims the producer added")
    runs = records(rec42)
    tap.eq(len(runs), 1, "the producer ran once (one round)")
    run1 = runs[0] if runs else {"env": {}, "input": {}, "cwd": ""}
    tap.eq(sorted(run1["env"]), ["BCD_ATTESTOR", "BCD_PRODUCER_API_VERSION", "BCD_ROUND", "LC_ALL", "PATH"],
           "its environment is the documented variables only", run1["env"])
    tap.ok(run1["env"].get("BCD_ATTESTOR") == "acme-asset" and run1["env"].get("BCD_ROUND") == "1"
           and run1["env"].get("BCD_PRODUCER_API_VERSION") == API and run1["cwd"] == "/",
           "BCD_ATTESTOR, BCD_ROUND and BCD_PRODUCER_API_VERSION say what it runs for; cwd /", run1)
    fds = run1.get("fds", {})
    tap.ok(sorted(fds) == ["0", "1", "2", "3"] and fds["3"] == exe42,
           "no file descriptor of bcd's is open in it beyond stdin, stdout, stderr and 3, the script "
           "itself for its interpreter (it was run by descriptor)", fds)
    inp = run1["input"]
    tap.eq(sorted(inp), ["apiVersion", "attestor", "claims", "csr", "csrSha256", "csrSpkiSha256", "role",
                         "round", "serviceKeys"], "its input has the documented members (no challenge in round 1)")
    ok_bind = False
    try:
        csr_der = b64d(inp["csr"])
        csr = x509.load_der_x509_csr(csr_der)
        spki = csr.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
        ok_bind = (b64d(inp["csrSha256"]) == hashlib.sha256(csr_der).digest()
                   and b64d(inp["csrSpkiSha256"]) == hashlib.sha256(spki).digest())
    except Exception as e:  # noqa: BLE001
        tap.note("csr: %s" % e)
    tap.ok(ok_bind, "csrSha256 and csrSpkiSha256 are the hashes of the CSR it is given")
    with open(os.path.join(state, "node-chain.pem"), "rb") as f:
        leaf = x509.load_pem_x509_certificate(f.read())
    tap.ok(leaf.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
           == (spki if ok_bind else b""), "the certificate is for that CSR's key")
    keys = inp.get("serviceKeys", {})
    tap.ok(keys.get("trustDomain") == agentlib.TRUST_DOMAIN and "BEGIN CERTIFICATE" in keys.get("nodeCa", "")
           and "BEGIN PUBLIC KEY" in keys.get("encryptionKey", ""),
           "and the service's public keys (trust domain, node CA, encryption key)", keys)

    # -- it renews as any node, and serves a session credential ---------------------------
    r = env.bcd("renew", "--once", *env.run_args(state))
    tap.ok(r.returncode == 0 and len(r.stdout.splitlines()) == 2, "bcd renew --once renews the node",
           r.stdout + r.stderr)
    tap.eq(len(records(rec42)), 1, "renewal does not run the producer")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE node_id = '%s'" % node), "2",
           "a second certificate for the same node")
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    daemon = sl.start_daemon(env, "bcd-acme", rt, env.run_args(
        state, extra=["--attestor", "acme-asset", "--producer", exe42]))
    tap.ok(sl.wait_socket(daemon, sock), "bcd run with the producer serves its socket", daemon.text())
    hooks = os.path.join(rt, "hooks")
    os.makedirs(hooks, 0o700)
    h = sl.hook(env, rt, sock, "s1", hooks)
    tap.ok(h.returncode == 0, "a session credential is served", h.stdout + h.stderr)
    tap.eq(env.psql("SELECT count(*) FROM bc_join.session_certs s JOIN bc_join.node_certs n "
                    "ON n.serial = s.node_serial WHERE n.node_id = '%s'" % node), "1",
           "issued for that node")
    daemon.stop()

    # -- the two examples of docs/agent.md "Writing a producer", as written there ------------
    with open(os.path.join(agentlib.TOP, "docs", "agent.md")) as f:
        doc = f.read()
    section = doc[doc.index("## Writing a producer"):]
    for lang, tag in (("python", "ASSET-0044"), ("sh", "ASSET-0045")):
        start = section.index("```%s\n" % lang) + len(lang) + 4
        text = section[start:section.index("```", start)]
        tagf = os.path.join(env.dir, "tag-" + lang)
        with open(tagf, "w") as f:
            f.write(tag + "\n")
        exe = write_exe(os.path.join(pdir, "doc-producer-" + lang),
                        text.replace("/etc/acme/vendor.key", vendor).replace("/etc/acme/asset-tag", tagf))
        r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-doc-" + lang),
                                         extra=["--attestor", "acme-asset", "--producer", exe, "--once"]))
        tap.ok(r.returncode == 0 and "/node/node_" in r.stdout,
               "the %s example of docs/agent.md joins a host (%s)" % (lang, tag), r.stdout + r.stderr)

    # -- refusals, each a second host: exit 2, the one refusal, no node made --------------
    before = nodes()
    # a replayed proof: host B's evidence, captured, sent by another host (another CSR)
    replay = write_exe(os.path.join(pdir, "producer-replay.py"), r'''#!/usr/bin/python3
import json, sys
req = json.load(sys.stdin)
with open(%r) as f:
    print(json.dumps({"apiVersion": req["apiVersion"], "attestation": f.read().strip()}))
''' % os.path.join(env.dir, "captured"))
    cases = [
        ("replay", replay, [], "a replayed proof (host B's evidence from another host)", "acme-asset:bad-signature"),
        ("other-csr", producer("oc", "ASSET-0043", "other-csr")[0], [],
         "a proof for another CSR", "acme-asset:bad-signature"),
        ("unknown", producer("unk", "ASSET-9999")[0], [], "an unknown asset", "acme-asset:unknown-asset"),
        ("role", producer("role", "ASSET-0043")[0], ["--role", "site"], "the wrong role (site)",
         "acme-asset:role-not-admitted"),
    ]
    # what a host's producer sent (host B's, for ASSET-0043), as a relay would have captured it
    env_capture = os.path.join(env.dir, "captured")
    exe43 = producer("b", "ASSET-0043")[0]
    r = env.bcd("join-request", "--service-keys", env.service_keys, "--attestor", "acme-asset",
                "--producer", exe43, "--out-dir", os.path.join(env.dir, "capture-dir"))
    with open(env_capture, "w") as f:
        f.write(json.loads(r.stdout)["attestation"] if r.returncode == 0 else "")
    tap.ok(r.returncode == 0, "bcd join-request --producer prints a JoinRequest with its evidence", r.stderr)
    jr = json.loads(r.stdout) if r.returncode == 0 else {}
    tap.ok(jr.get("attestor") == "acme-asset" and jr.get("claims", {}).get("serial") == "ASSET-0043"
           and "sealedToken" not in jr, "naming the attestor, with the producer's claims, no token", jr)
    for name, exe, extra, what, reason in cases:
        r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-" + name),
                                         extra=["--attestor", "acme-asset", "--producer", exe, "--once"] + extra))
        tap.ok(r.returncode == 2 and "refused" in r.stderr, "%s: refused (exit 2)" % what, r.stderr)
        tap.eq(last_refusal(), reason, "%s: recorded as %s" % (what, reason))
    tap.eq(nodes(), before, "no refused host made a node")
    # the captured request itself, straight to bc_join(): its proof was never used, so it admits
    got = env.psql("SELECT bc_join('%s')->>'status'" % json.dumps(jr).replace("'", "''"))
    tap.eq(got, "issued", "bc_join() admits the JoinRequest bcd join-request --producer made")

    # -- a challenge round, answered by the producer; the token sealed by bcd -------------
    env.psql(CHAL)
    exec_chal, rec_chal = producer("chal", "ASSET-0042")
    tok = env.token_file("chal")
    with open(tok) as f:
        token = f.read().strip()
    state_c = os.path.join(env.dir, "state-chal")
    r = env.bcd("run", *env.run_args(state_c, token_file=tok,
                                     extra=["--attestor", "acme-chal", "--producer", exec_chal, "--once"]))
    tap.ok(r.returncode == 0 and "/node/node_" in r.stdout, "acme-chal: a two-round join answered by the producer",
           r.stdout + r.stderr)
    runs = records(rec_chal)
    tap.eq([x["input"].get("round") for x in runs], [1, 2], "the producer ran for round 1 and round 2")
    tap.ok(len(runs) == 2 and "challenge" not in runs[0]["input"] and runs[1]["input"].get("challenge")
           and runs[1]["env"].get("BCD_ROUND") == "2", "round 2 carries the service's challenge", runs)
    tap.ok(len(runs) == 2 and runs[0]["input"]["csrSha256"] == runs[1]["input"]["csrSha256"],
           "both rounds for the same CSR")
    tap.ok(all(token not in json.dumps(x) and token.split(".")[-1] not in json.dumps(x) for x in runs),
           "the producer never saw the join token (bcd sealed it)")
    tap.eq(env.psql("SELECT uses_left FROM bc_join.join_tokens WHERE id = '%s'" % token.split(".")[0]), "0",
           "the token was spent by the final round")

    # a round 2 the producer cannot answer now: back off, start over at round 1, then joined
    exec_flaky, rec_flaky = producer("flaky", "ASSET-0042", "flaky-round2")
    r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-flaky"), token_file=env.token_file("flaky"),
                                     extra=["--attestor", "acme-chal", "--producer", exec_flaky,
                                            "--max-retry-after", "1", "--once"]))
    tap.ok(r.returncode == 0 and "the challenge cannot be answered now" in r.stderr
           and "the vendor token is busy" in r.stderr and "starting over" in r.stderr,
           "a challenge the producer cannot answer now (75): logged, backed off, then joined", r.stderr)
    runs = records(rec_flaky)
    tap.eq([x["input"].get("round") for x in runs], [1, 2, 1, 2],
           "the join started over at round 1 with a fresh challenge")
    tap.ok(len(runs) == 4 and runs[1]["input"]["challenge"] != runs[3]["input"]["challenge"]
           and len({x["input"]["csrSha256"] for x in runs}) == 1, "another challenge, the same CSR", runs)

    # -- producers that fail: a clear error, a back-off, bcd keeps running ----------------
    daemons = {}
    for name, code in BROKEN.items():
        rec = os.path.join(env.dir, "record-%s.jsonl" % name)
        exe = write_exe(os.path.join(pdir, "broken-%s.py" % name),
                        BROKEN_HEAD % {"record": rec} + code + "\n")
        daemons[name] = (env.bcd_bg("run", *env.run_args(
            os.path.join(env.dir, "state-" + name),
            extra=["--attestor", "acme-asset", "--producer", exe, "--producer-timeout", "1",
                   "--max-retry-after", "1"])), rec)
    for name, (p, rec) in daemons.items():
        says = BROKEN_SAYS[name]
        tap.ok(p.wait_log(says, timeout=60, count=2), "%s: logged clearly, twice (%s)" % (name, says), p.text())
        if name in BROKEN_ALSO:
            tap.ok(any(says in line and BROKEN_ALSO[name] in line for line in p.text().splitlines()),
                   "%s: exit 0 with an invalid answer: the reason and the last line of its stderr (%s)"
                   % (name, BROKEN_ALSO[name]), p.text())
        tap.ok("trying again in" in p.text() and p.proc.poll() is None,
               "%s: backed off, and bcd keeps running" % name, p.text())
        runs = records(rec)
        tap.ok(len(runs) >= 2 and len({x["input"]["csrSha256"] for x in runs}) == 1,
               "%s: every run for the same key and CSR (the state is kept)" % name,
               [x["input"]["csrSha256"] for x in runs])
        rc, _ = p.stop()
        tap.ok(rc == 0 and "stopped by a signal" in p.text(), "%s: SIGTERM stops it cleanly (exit 0)" % name,
               p.text())
    hang_pids = [x["pid"] for x in records(daemons["hang"][1])]
    time.sleep(0.2)
    tap.ok(hang_pids and not any(os.path.exists("/proc/%d" % pid) for pid in hang_pids),
           "the hung producers were killed", hang_pids)
    tap.ok(os.path.exists(os.path.join(env.dir, "state-hang", "join", "node.key")),
           "the join's key is still in the state directory")

    never = write_exe(os.path.join(pdir, "broken-never.py"),
                      "#!/usr/bin/python3\nimport sys\nsys.stderr.write('no asset tag in this machine\\n')\n"
                      "sys.exit(78)\n")
    r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-never"),
                                     extra=["--attestor", "acme-asset", "--producer", never, "--once"]))
    tap.ok(r.returncode == 1 and "exit 78, final" in r.stderr and "no asset tag in this machine" in r.stderr,
           "a producer that exits 78 ends the join: exit 1, saying why", r.stderr)

    # -- usage ------------------------------------------------------------------------------
    st = os.path.join(env.dir, "state-usage")
    for extra, what, needle in [
        (["--producer", exe42], "--producer without --attestor", "needs --attestor"),
        (["--attestor", "tpm", "--producer", exe42], "--producer for a built-in attestor", "own producer"),
        (["--attestor", "acme-asset", "--producer", exe42, "--producer-timeout", "0"],
         "--producer-timeout 0", "[1, 600]"),
    ]:
        r = env.bcd("run", *env.run_args(st, extra=extra + ["--once"]))
        tap.ok(r.returncode == 64 and needle in r.stderr, "%s: a usage error that says so" % what, r.stderr)
    for extra, what, needle in [
        (["--attestor", "acme-asset", "--tcti", "device:/dev/tpmrm0"], "another producer's option (--tcti)",
         "--tcti is for --attestor tpm, not acme-asset"),
        (["--attestor", "discovery"], "an attestor whose producer serves bcd ramdisk only",
         "bcd run has no producer of --attestor discovery"),
    ]:
        r = env.bcd("run", *env.run_args(st, extra=extra + ["--once"]))
        tap.ok(r.returncode == 64 and needle in r.stderr, "%s: a usage error that says so" % what, r.stderr)

    # -- the producer held to the rules ssh and sudo apply to their helpers (#42.7) -----------
    ran = os.path.join(env.dir, "refused-ran")
    refused = "#!/bin/sh\ntouch %s\nexit 75\n" % ran
    plain = os.path.join(pdir, "not-executable")
    with open(plain, "w") as f:
        f.write(refused)
    os.chmod(plain, 0o600)
    gw = write_exe(os.path.join(pdir, "group-writable"), refused)
    os.chmod(gw, 0o770)
    ow = write_exe(os.path.join(pdir, "others-writable"), refused)
    os.chmod(ow, 0o702)
    theirs = write_exe(os.path.join(pdir, "owned-by-nobody"), refused)
    os.chown(theirs, 65534, 65534)
    wwd = os.path.join(pdir, "world-writable")
    os.mkdir(wwd)
    os.chmod(wwd, 0o777)
    in_wwd = write_exe(os.path.join(wwd, "producer"), refused)
    via = os.path.join(pdir, "link-to-world-writable")
    os.symlink(in_wwd, via)
    in_tmp = write_exe(os.path.join(env.dir, "producer-under-tmp"), refused)
    missing = os.path.join(pdir, "no-such-producer")
    uid = os.geteuid()
    for path, what, needle in [
        ("producer-a.py", "a relative --producer", "--producer producer-a.py must be an absolute path"),
        (missing, "a missing --producer", "--producer %s does not exist" % missing),
        (plain, "a --producer that is not executable", "--producer %s is not an executable file" % plain),
        (gw, "a producer its group may write", "--producer %s is refused: %s is writable by its group "
         "(mode 0770)" % (gw, gw)),
        (ow, "a producer others may write", "--producer %s is refused: %s is writable by others (mode 0702)"
         % (ow, ow)),
        (theirs, "a producer owned by another user", "--producer %s is refused: %s is owned by uid 65534, "
         "neither root nor bcd's user (uid %d)" % (theirs, theirs, uid)),
        (in_wwd, "a producer in a world-writable directory", "--producer %s is refused: %s is writable by "
         "others (mode 0777)" % (in_wwd, wwd)),
        (via, "a symlink to a producer in a world-writable directory (the real path is checked)",
         "--producer %s is refused: %s is writable by others (mode 0777)" % (via, wwd)),
        (in_tmp, "a producer under /tmp", "--producer %s is refused: /tmp is writable by others (mode 1777)"
         % in_tmp),
    ]:
        r = env.bcd("run", *env.run_args(st, extra=["--attestor", "acme-asset", "--producer", path, "--once"]))
        tap.ok(r.returncode == 64 and needle in r.stderr, "%s: exit 64, naming it and why" % what, r.stderr)
    r = env.bcd("join-request", "--service-keys", env.service_keys, "--attestor", "acme-asset",
                "--producer", in_wwd, "--out-dir", os.path.join(env.dir, "refused-dir"))
    tap.ok(r.returncode == 64 and "is writable by others" in r.stderr,
           "bcd join-request --producer holds it to the same rules", r.stderr)
    tap.ok(not os.path.exists(ran), "no refused producer ran")

    # the file opened once and run by that descriptor: a symlink swapped after the start, and the
    # file itself replaced, change nothing of what runs
    runs_at = os.path.join(env.dir, "swap-runs")
    prod_a = write_exe(os.path.join(pdir, "swap-a"), "#!/bin/sh\necho a >> %s\necho 'not now' >&2\nexit 75\n"
                       % runs_at)
    prod_b = write_exe(os.path.join(pdir, "swap-b"), "#!/bin/sh\necho b >> %s\nexit 75\n" % runs_at)
    current = os.path.join(pdir, "current")
    os.symlink(prod_a, current)

    def swap_runs():
        with open(runs_at) if os.path.exists(runs_at) else open(os.devnull) as f:
            return f.read().split()

    d = env.bcd_bg("run", *env.run_args(os.path.join(env.dir, "state-swap"), extra=[
        "--attestor", "acme-asset", "--producer", current, "--max-retry-after", "1"]))
    deadline = time.time() + 30
    while not swap_runs() and time.time() < deadline and d.proc.poll() is None:
        time.sleep(0.05)
    os.symlink(prod_b, current + ".new")
    os.rename(current + ".new", current)              # the link now names B ...
    shutil.copy(prod_b, prod_a + ".new")
    os.rename(prod_a + ".new", prod_a)                # ... and so does A's path
    while len(swap_runs()) < 2 and time.time() < deadline and d.proc.poll() is None:
        time.sleep(0.05)
    d.stop()
    tap.ok(len(swap_runs()) >= 2 and set(swap_runs()) == {"a"},
           "a symlink swapped after bcd started (and the file replaced) does not change what runs: "
           "the file opened at the start ran every time", (swap_runs(), d.text()[-800:]))

    # a producer that leaves a setsid() child holding its stdout: its answer taken when it exits
    env.psql("INSERT INTO public.plg_acme_assets VALUES ('ASSET-0046', '%s', '%s')" % (env.tenant, env.pool))
    exe46, rec46 = producer("setsid", "ASSET-0046", "setsid")
    t0 = time.time()
    r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-setsid"), extra=[
        "--attestor", "acme-asset", "--producer", exe46, "--producer-timeout", "30", "--once"]), timeout=15)
    took = time.time() - t0
    try:
        with open(rec46 + ".daemon") as f:
            left = int(f.read())
    except (OSError, ValueError):
        left = 0
    tap.ok(r.returncode == 0 and "/node/node_" in r.stdout and took < 10,
           "a producer that exits leaving a setsid() child holding its stdout: its answer taken as it "
           "exited, joined in %.1f s" % took, r.stdout + r.stderr)
    tap.ok(left > 0 and ("exited leaving pid %d, outside its process group" % left) in r.stderr
           and "left running" in r.stderr, "and that child is logged, by pid, as left running", r.stderr)
    tap.ok(left > 0 and os.path.exists("/proc/%d" % left), "it is still running (out of bcd's reach)")
    kill(left)
    # one that exits 0 with its answer begun, which that child ends half a second later
    env.psql("INSERT INTO public.plg_acme_assets VALUES ('ASSET-0047', '%s', '%s')" % (env.tenant, env.pool))
    exe47, rec47 = producer("setsid-late", "ASSET-0047", "setsid-late")
    t0 = time.time()
    r = env.bcd("run", *env.run_args(os.path.join(env.dir, "state-setsid-late"), extra=[
        "--attestor", "acme-asset", "--producer", exe47, "--producer-timeout", "30", "--once"]), timeout=15)
    took = time.time() - t0
    try:
        with open(rec47 + ".daemon") as f:
            left = int(f.read())
    except (OSError, ValueError):
        left = 0
    tap.ok(r.returncode == 0 and "/node/node_" in r.stdout and took < 10 and "no valid answer" not in r.stderr
           and ("exited leaving pid %d" % left) in r.stderr,
           "a producer that exits 0 with its JSON begun, the rest written by its setsid() child: the "
           "answer taken once the object is complete, not at the end of the pipe (%.1f s)" % took,
           r.stdout + r.stderr)
    kill(left)

    h = env.bcd("run", "--help")
    text = h.stdout
    sect = text[text.find("Producers:"):] if "Producers:" in text else ""
    tap.ok(h.returncode == 0 and "--producer PATH" in sect and "--producer-timeout S" in sect,
           "bcd run --help documents --producer", text[:200])
    under = {}
    name = None
    for line in sect.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("    ") and ":" in line:
            name = line.strip().split(":")[0]
            under[name] = []
        elif name and line.startswith("    --"):      # an option, not a continuation line
            under[name].append(line.split()[0])
    tap.eq({k: v for k, v in under.items() if v},
           {"provisioned": ["--node-id"], "tpm": ["--tcti", "--tpm-ek", "--tpm-pcrs"],
            "cloud-iid": ["--cloud", "--cloud-protocol", "--metadata-url", "--cloud-audience"],
            "any other ID": ["--producer", "--producer-timeout"]},
           "bcd run --help lists each producer's options under its name", sect)
    h = env.bcd("ramdisk", "--help")
    tap.ok(h.returncode == 0 and "  discovery:" in h.stdout and "--site-agent" in h.stdout
           and "--producer PATH" in h.stdout and "--tcti" not in h.stdout,
           "bcd ramdisk --help lists its producers' options (discovery, external), not tpm's", h.stdout)

    # -- bcd ramdisk --attestor ID --producer PATH: a custom ramdisk attestor --------------------
    env.psql(RAMDISK)
    rtok = os.path.join(env.dir, "ramdisk-token")
    with open(rtok, "w") as f:
        f.write(env.psql("SELECT bc_join.create_join_token('%s', '%s', role => 'ramdisk')"
                         % (env.tenant, env.pool)) + "\n")
    exe_r, rec_r = producer("ramdisk", "ASSET-0042")
    r = env.bcd("ramdisk", "--gateway", env.gw_url, "--gateway-ca", env.ca, "--service-keys", env.service_keys,
                "--token-file", rtok, "--attestor", "acme-ramdisk", "--producer", exe_r, "--once")
    tap.ok(r.returncode == 0 and "/node/node_" in r.stdout,
           "bcd ramdisk --attestor acme-ramdisk --producer PATH joins a ramdisk", r.stdout + r.stderr)
    runs = records(rec_r)
    tap.ok(len(runs) == 1 and runs[0]["input"]["role"] == "ramdisk",
           "its producer ran once, for role ramdisk", runs)
    tap.eq(env.psql("SELECT role || ' ' || attestor FROM bc_join.nodes ORDER BY created_at DESC LIMIT 1"),
           "ramdisk acme-ramdisk", "a ramdisk node of that attestor")
    r = env.bcd("ramdisk", "--gateway", env.gw_url, "--gateway-ca", env.ca, "--service-keys", env.service_keys,
                "--token-file", rtok, "--attestor", "acme-ramdisk", "--producer", exe_r, "--mac",
                "aa:bb:cc:dd:ee:ff", "--once")
    tap.ok(r.returncode == 64 and "--mac is for --attestor discovery" in r.stderr,
           "bcd ramdisk --producer with --mac: a usage error that says so", r.stderr)


agentlib.main(body)
