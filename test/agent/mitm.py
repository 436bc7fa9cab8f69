#!/usr/bin/python3
"""mitm.py: a tampering man in the middle between bcd and bc-gateway (tests only).

Listens with HTTPS on 127.0.0.1:PORT (a certificate signed by the CA that bcd
pins, so TLS alone does not stop it), forwards every POST to the real
gateway, and tampers with a 200 answer's signed response according to
--mode:

  pass             nothing (a control)
  lose-first       the first answer lost: the request reaches the gateway (and
                   the database commits it), the client gets 503 Retry-After: 1;
                   every later request passes through untouched
  resign-other     the payload re-signed with a key of our own
  swap             the body of --swap-file instead (an answer for another CSR)
  chain-flip       one byte of the leaf flipped, the service's signature kept
  chain-other-ca   the leaf replaced by one for the same key and SPIFFE ID
                   issued by another CA, re-signed with --signing-key (the
                   service's own key: only the agent's chain check is left)
  leaf-other-key   the leaf replaced by one from the real node CA
                   (--node-ca-key/--node-ca) for another key, re-signed with
                   --signing-key
  keys-file        GET /v1/service-keys answered with the body of --swap-file
                   (a forged or replayed rollover); everything else passes

Standard library plus python3-jwcrypto and python3-cryptography.
"""
import argparse
import base64
import datetime
import http.client
import http.server
import json
import ssl
import sys
import urllib.parse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from jwcrypto import jwk, jws
from jwcrypto.common import json_encode

ARGS = None


def b64u_decode(s):
    """Decode unpadded base64url."""
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64u(b):
    """Unpadded base64url of bytes."""
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sign(payload, key_pem, kid=None):
    """A compact JWS ES256 of payload by key_pem (a fresh key when None)."""
    key = jwk.JWK.from_pem(key_pem) if key_pem else jwk.JWK.generate(kty="EC", crv="P-256")
    s = jws.JWS(json.dumps(payload).encode())
    hdr = {"alg": "ES256"}
    if kid:
        hdr["kid"] = kid
    s.add_signature(key, alg="ES256", protected=json_encode(hdr))
    return s.serialize(compact=True)


def reissue(leaf_der, public_key, issuer_key, issuer_name):
    """A copy of the leaf (subject, SANs, validity) for public_key by issuer_key."""
    leaf = x509.load_der_x509_certificate(leaf_der)
    b = (x509.CertificateBuilder().subject_name(leaf.subject).issuer_name(issuer_name)
         .public_key(public_key).serial_number(leaf.serial_number)
         .not_valid_before(leaf.not_valid_before).not_valid_after(leaf.not_valid_after))
    for ext in leaf.extensions:
        if ext.oid.dotted_string in ("2.5.29.35", "2.5.29.14"):
            continue        # key identifiers follow the new keys
        b = b.add_extension(ext.value, ext.critical)
    return b.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def tamper(body):
    """The tampered body for a 200 answer (bytes in, bytes out)."""
    mode = ARGS.mode
    if mode in ("pass", "lose-first", "keys-file"):
        return body
    if mode == "swap":
        with open(ARGS.swap_file, "rb") as f:
            return f.read()
    outer = json.loads(body)
    header, payload_b64, sig = outer["response"].split(".")
    payload = json.loads(b64u_decode(payload_b64))
    kid = json.loads(b64u_decode(header)).get("kid")
    signing = open(ARGS.signing_key, "rb").read() if ARGS.signing_key else None
    if mode == "resign-other":
        outer["response"] = sign(payload, None, kid)
    elif mode == "chain-flip":
        leaf = bytearray(base64.b64decode(payload["certificateChain"][0]))
        leaf[len(leaf) // 2] ^= 0x01
        payload["certificateChain"][0] = base64.b64encode(bytes(leaf)).decode()
        outer["response"] = ".".join([header, b64u(json.dumps(payload).encode()), sig])
    elif mode == "chain-other-ca":
        leaf_der = base64.b64decode(payload["certificateChain"][0])
        other_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bc_join node CA")])
        pub = x509.load_der_x509_certificate(leaf_der).public_key()
        payload["certificateChain"][0] = base64.b64encode(
            reissue(leaf_der, pub, other_key, name)).decode()
        outer["response"] = sign(payload, signing, kid)
    elif mode == "leaf-other-key":
        leaf_der = base64.b64decode(payload["certificateChain"][0])
        ca_key = serialization.load_pem_private_key(open(ARGS.node_ca_key, "rb").read(), None)
        ca = x509.load_pem_x509_certificate(open(ARGS.node_ca, "rb").read())
        other = ec.generate_private_key(ec.SECP256R1()).public_key()
        payload["certificateChain"][0] = base64.b64encode(
            reissue(leaf_der, other, ca_key, ca.subject)).decode()
        outer["response"] = sign(payload, signing, kid)
    else:
        raise SystemExit("unknown mode " + mode)
    return json.dumps(outer).encode()


LOST = False


class Handler(http.server.BaseHTTPRequestHandler):
    """Forward a POST to the gateway, tamper with the answer, send it back."""

    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        up = urllib.parse.urlparse(ARGS.upstream)
        ctx = ssl.create_default_context(cafile=ARGS.upstream_ca)
        conn = http.client.HTTPSConnection(up.hostname, up.port, context=ctx, timeout=30)
        conn.request("POST", self.path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        status = resp.status
        retry = resp.getheader("Retry-After")
        conn.close()
        global LOST
        if ARGS.mode == "lose-first" and not LOST:
            # the gateway answered (and the database committed), the answer is lost
            LOST = True
            status, body, retry = 503, b'{"status":"error"}', "1"
        elif status == 200:
            body = tamper(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if retry:
            self.send_header("Retry-After", retry)
        self.end_headers()
        self.wfile.write(body)
        sys.stderr.write("mitm: %s %s -> %d (%s)\n" % (self.command, self.path, status, ARGS.mode))
        sys.stderr.flush()

    def do_GET(self):
        if ARGS.mode == "keys-file" and self.path == "/v1/service-keys":
            with open(ARGS.swap_file, "rb") as f:
                body, status = f.read(), 200
        else:
            up = urllib.parse.urlparse(ARGS.upstream)
            ctx = ssl.create_default_context(cafile=ARGS.upstream_ca)
            conn = http.client.HTTPSConnection(up.hostname, up.port, context=ctx, timeout=30)
            conn.request("GET", self.path)
            resp = conn.getresponse()
            body, status = resp.read(), resp.status
            conn.close()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        sys.stderr.write("mitm: GET %s -> %d (%s)\n" % (self.path, status, ARGS.mode))
        sys.stderr.flush()

    def log_message(self, fmt, *args):
        """Quiet: do_POST logs one line itself."""
        pass


def main():
    """Parse the options and serve HTTPS until killed."""
    global ARGS
    p = argparse.ArgumentParser()
    for name in ("--cert", "--key", "--upstream", "--upstream-ca", "--mode"):
        p.add_argument(name, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--swap-file")
    p.add_argument("--signing-key")
    p.add_argument("--node-ca-key")
    p.add_argument("--node-ca")
    ARGS = p.parse_args()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
