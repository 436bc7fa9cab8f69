"""benchlib.py: what the revocation benches share (bench/time_to_distrust.py,
time_to_distrust_ha.py, ca_compromise.py, attest_drift.py).

Importing it puts test/agent and test/lib on sys.path (agentlib, bctest,
sessionlib: the tests' fixtures the benches run on).  Here: the nearest-rank
percentile and a table row, a credential request on bcd's socket, PEM
certificates, an OCSP request and its answer (python3-cryptography builds and
parses them), the cluster-and-gateway setup and a body that stops every
process it started.
"""
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for _d in ("agent", "lib"):
    _p = os.path.join(HERE, "..", "test", _d)
    if _p not in sys.path:
        sys.path.insert(0, _p)

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.x509 import ocsp  # noqa: E402


def pct(v, p):
    """The p-th percentile (nearest rank) of values."""
    s = sorted(v)
    i = max(1, min(len(s), int(len(s) * p / 100.0 + 0.999999)))
    return s[i - 1]


def row(what, v):
    """A markdown table row: what, then the p50, max and min (s, 2 decimals) and count of v."""
    return "| %s | %.2f | %.2f | %.2f | %d |" % (what, pct(v, 50), max(v), min(v), len(v))


def table(heading, names, trials):
    """Print a markdown table: heading, then a row (row()) per (key, what) of names
    over the trials' values of key that are not None ("-" and 0 when none is)."""
    print("\n| %s | p50 s | max s | min s | trials |" % heading)
    print("| --- | ---: | ---: | ---: | ---: |")
    for key, what in names:
        v = [t[key] for t in trials if t[key] is not None]
        print(row(what, v) if v else "| %s | - | - | - | 0 |" % what)


def ask(sock_path, session, d, socket_errors=True):
    """One credential request on bcd's socket; the answer dict (None when none,
    or when the socket failed: with socket_errors False that raises instead)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(sock_path)
        s.sendall(json.dumps({"op": "credential", "session": session, "dir": d}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        if not socket_errors:
            raise
        return None
    finally:
        s.close()
    try:
        return json.loads(data)
    except ValueError:
        return None


def load_pems(data):
    """Every certificate of PEM text (bytes)."""
    end = b"-----END CERTIFICATE-----"
    return [x509.load_pem_x509_certificate(part + end) for part in data.split(end)
            if b"-----BEGIN CERTIFICATE-----" in part]


def ocsp_request(cert, issuer):
    """The DER OCSPRequest of one SHA-256 CertID of cert, no nonce (as bcd asks)."""
    return ocsp.OCSPRequestBuilder().add_certificate(cert, issuer, hashes.SHA256()).build().public_bytes(
        serialization.Encoding.DER)


def ocsp_post(conn, req):
    """POST req to /v1/ocsp on conn; the HTTP status and the body."""
    conn.request("POST", "/v1/ocsp", body=req, headers={"Content-Type": "application/ocsp-request"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def ocsp_answer(http_status, der):
    """'good' | 'revoked' | 'unknown' | the responseStatus | 'http N' of an answer to /v1/ocsp."""
    if http_status != 200:
        return "http %d" % http_status
    r = ocsp.load_der_ocsp_response(der)
    if r.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        return r.response_status.name
    return r.certificate_status.name.lower()


def ocsp_status(conn, req):
    """POST req to /v1/ocsp on conn; what ocsp_answer says of the answer."""
    return ocsp_answer(*ocsp_post(conn, req))


def setup_gateway(env, lift_session_bounds=False):
    """A throwaway cluster (the agents' schema), TLS keys and the gateway; with
    lift_session_bounds the per-node session bounds lifted (a poller asking a
    new session every 100 ms would meet them)."""
    env.start_cluster("agents")
    if lift_session_bounds:
        env.psql("ALTER DATABASE %s SET bc_join.sessions_per_node = 100000000" % env.db)
        env.psql("ALTER DATABASE %s SET bc_join.new_sessions_per_minute = 100000000" % env.db)
    env.make_tls()
    env.gateway()


def stopping(run):
    """A bctest body that calls run(tap, env), then stops every process env started."""
    def body(tap, env):
        try:
            run(tap, env)
        finally:
            env.stop_processes()
            env.procs = []
    return body
