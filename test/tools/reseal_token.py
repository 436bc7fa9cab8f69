#!/usr/bin/python3
"""reseal_token.py SERVICE_KEYS PLAINTEXT_HEX < request.json > request.json

Replace a JoinRequest's sealedToken by one sealed (by jwcrypto) to the same
CSR around exactly the bytes PLAINTEXT_HEX, e.g. a real token followed by a
NUL and junk, so that only the service's whole-plaintext comparison can
refuse it.
"""
import base64, hashlib, json, sys
from jwcrypto import jwe, jwk
from jwcrypto.common import json_encode

keys = json.load(open(sys.argv[1]))
plaintext = bytes.fromhex(sys.argv[2])
req = json.load(sys.stdin)
csr = base64.urlsafe_b64decode(req["csr"] + "=" * (-len(req["csr"]) % 4))
csr_sha = base64.urlsafe_b64encode(hashlib.sha256(csr).digest()).rstrip(b"=").decode()
sealed = jwe.JWE(plaintext, protected=json_encode(
    {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": csr_sha}))
sealed.add_recipient(jwk.JWK(**keys["encryptionKey"]))
req["sealedToken"] = sealed.serialize(compact=True)
print(json.dumps(req))
