#!/usr/bin/python3
"""tpm_request.py: JoinRequests and renewals for the tpm attestor, assembled
from files tpm2-tools 5.4 and openssl wrote (test/tap/tpm.t).

  tpm_request.py join CSR_DER [MEMBER=FILE ...] [MEMBER=@TEXT ...] [options]
      prints a JoinRequest with attestor tpm; MEMBER is an evidence member
      (ekPub, ekCert, akPub, nodeKeyPub, certifyInfo, certifySignature,
      state, secret, quote, quoteSignature); FILE's bytes are base64url'ed,
      @TEXT is taken as it is (state).
      --token TOKEN --service-keys FILE   seal TOKEN to the CSR (jwcrypto)
      --flip MEMBER:OFFSET                flip the low bit of that byte
      --raw JSON                          the evidence bytes exactly
      --role ROLE
  tpm_request.py challenge RESPONSE_JSON OUT_CRED OUT_STATE
      from a challenge response: the badcc0de file for
      tpm2_activatecredential, and the state
  tpm_request.py nonce SECRET_FILE CSR_DER [renew]
      hex of SHA-256(secret || SHA-256(CSR)), or of
      SHA-256("bc_join/tpm/renew" || SHA-256(CSR)) for renew
      sign the CSR again in the TPM with ecdsa-with-SHA256 WITHOUT parameters:
      tpm2-openssl 1.1.1 writes an explicit NULL after the OID, which
      RFC 5758 forbids and JoinService refuses (join:csr-signature)
  tpm_request.py renew CSR_DER SERIAL HANDLE [MEMBER=FILE ...] [--iat N]
      a renewal: the proof signed by the TPM key at HANDLE (openssl with the
      tpm2 provider, TPM2OPENSSL_TCTI), and the tpm member when given
"""
import base64, hashlib, json, subprocess, sys, time


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def members(args):
    ev, rest = {}, []
    for a in args:
        if "=" in a and not a.startswith("--"):
            k, v = a.split("=", 1)
            ev[k] = v[1:] if v.startswith("@") else b64u(open(v, "rb").read())
        else:
            rest.append(a)
    return ev, rest


def seal(token, keys_file, csr):
    from jwcrypto import jwe, jwk
    from jwcrypto.common import json_encode
    keys = json.load(open(keys_file))
    sealed = jwe.JWE(token.encode(), protected=json_encode(
        {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": b64u(hashlib.sha256(csr).digest())}))
    sealed.add_recipient(jwk.JWK(**keys["encryptionKey"]))
    return sealed.serialize(compact=True)


def join(argv):
    csr = open(argv[0], "rb").read()
    ev, rest = members(argv[1:])
    opts = {}
    i = 0
    while i < len(rest):
        opts.setdefault(rest[i], []).append(rest[i + 1])
        i += 2
    for f in opts.get("--flip", []):
        k, off = f.split(":")
        b = bytearray(unb64u(ev[k]))
        b[int(off) % len(b)] ^= 1
        ev[k] = b64u(bytes(b))
    raw = opts["--raw"][0].encode() if "--raw" in opts else json.dumps(ev).encode()
    req = {"csr": b64u(csr), "role": opts.get("--role", ["node"])[0], "attestor": "tpm",
           "attestation": b64u(raw)}
    if "--token" in opts:
        req["sealedToken"] = seal(opts["--token"][0], opts["--service-keys"][0], csr)
    print(json.dumps(req))


def challenge(argv):
    resp = json.load(open(argv[0]))
    payload = json.loads(unb64u(resp["response"].split(".")[1]))
    ch = json.loads(unb64u(payload["challenge"]))
    with open(argv[1], "wb") as f:
        f.write(bytes.fromhex("badcc0de00000001") + unb64u(ch["credentialBlob"]) +
                unb64u(ch["encryptedSecret"]))
    with open(argv[2], "w") as f:
        f.write(ch["state"])


def nonce(argv):
    csr_h = hashlib.sha256(open(argv[1], "rb").read()).digest()
    if len(argv) > 2 and argv[2] == "renew":
        print(hashlib.sha256(b"bc_join/tpm/renew" + csr_h).hexdigest())
    else:
        print(hashlib.sha256(open(argv[0], "rb").read() + csr_h).hexdigest())


def tpm_sign(handle, data):
    return subprocess.run(["openssl", "dgst", "-sha256", "-provider", "tpm2", "-provider", "default",
                           "-propquery", "?provider=tpm2",
                           "-sign", "handle:" + handle],
                          input=data, capture_output=True, check=True).stdout


def der_len(n):
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def renew(argv):
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    csr = open(argv[0], "rb").read()
    serial, handle = argv[1], argv[2]
    ev, rest = members(argv[3:])
    iat = int(rest[rest.index("--iat") + 1]) if "--iat" in rest else int(time.time())
    header = b64u(json.dumps({"alg": "ES256"}).encode())
    body = b64u(json.dumps({"purpose": "renew", "serial": serial,
                            "csrSha256": b64u(hashlib.sha256(csr).digest()), "iat": iat}).encode())
    der = tpm_sign(handle, (header + "." + body).encode())
    r, s = decode_dss_signature(der)
    sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    req = {"csr": b64u(csr), "proof": header + "." + body + "." + b64u(sig)}
    if ev:
        req["tpm"] = ev
    print(json.dumps(req))


{"join": join, "challenge": challenge, "nonce": nonce, "renew": renew}[sys.argv[1]](sys.argv[2:])
