#!/usr/bin/python3
"""bad_pop_request.py SERVICE_KEYS TOKEN|- < request.json > request.json

Turn a JoinRequest made by bcd into one whose CSR signature does not verify
(one bit of the signature flipped), with the token sealed (by jwcrypto) to
that tampered CSR (TOKEN "-": no token), so that only the service's
proof-of-possession check can refuse it.
"""
import base64, hashlib, json, sys
from jwcrypto import jwe, jwk
from jwcrypto.common import json_encode
from cryptography import x509

keys = json.load(open(sys.argv[1]))
token = sys.argv[2]
req = json.load(sys.stdin)

def b64u(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def unb64u(s): return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

der = bytearray(unb64u(req["csr"]))
der[-1] ^= 0x01                       # the last byte belongs to the signature's s
x509.load_der_x509_csr(bytes(der))    # still a well-formed CSR
csr_sha = b64u(hashlib.sha256(der).digest())
req["csr"] = b64u(bytes(der))
if token != "-":
    enc = jwk.JWK(**keys["encryptionKey"])
    sealed = jwe.JWE(token.encode(), protected=json_encode(
        {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": csr_sha}))
    sealed.add_recipient(enc)
    req["sealedToken"] = sealed.serialize(compact=True)
print(json.dumps(req))
