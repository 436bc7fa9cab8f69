#!/usr/bin/python3
"""JOSE interoperability between src/common (through jose-tool) and jwcrypto.

usage: /usr/bin/python3 test/interop/jose_interop.py build/jose-tool

Prints one line per check, then "N passed, M failed"; exits 1 if any failed.
Needs Debian's python3-jwcrypto (use /usr/bin/python3, not a pyenv python).
"""
import hashlib
import base64
import json
import os
import subprocess
import sys
import tempfile

from jwcrypto import jwe, jwk, jws
from jwcrypto.common import json_encode

RESULTS = []


def check(name, fn):
    """Run one check; record and print PASS/FAIL with the reason."""
    try:
        fn()
        RESULTS.append(True)
        print(f"PASS {name}")
    except Exception as exc:  # noqa: BLE001 - any failure is a failed check
        RESULTS.append(False)
        print(f"FAIL {name}: {exc!r}")


def run(tool, args, stdin=b"", expect_ok=True):
    """Run jose-tool; return (stdout, stderr); assert the exit status."""
    proc = subprocess.run([tool] + args, input=stdin, capture_output=True,
                          timeout=30, check=False)
    if expect_ok and proc.returncode != 0:
        raise AssertionError(f"{args[0]} exited {proc.returncode}: {proc.stderr!r}")
    if not expect_ok and proc.returncode == 0:
        raise AssertionError(f"{args[0]} accepted what it must refuse")
    return proc.stdout, proc.stderr


def b64url(data):
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="jose-interop-")

    # One P-256 key from jwcrypto, handed to jose-tool as PEM and as a public JWK.
    key = jwk.JWK.generate(kty="EC", crv="P-256")
    key_pem = os.path.join(tmp, "key.pem")
    pub_jwk = os.path.join(tmp, "pub.jwk")
    with open(key_pem, "wb") as f:
        f.write(key.export_to_pem(private_key=True, password=None))
    with open(pub_jwk, "w", encoding="ascii") as f:
        f.write(key.export_public())

    csr_sha256 = b64url(hashlib.sha256(b"a CSR").digest())
    token = b"bcjt_interop-token-\x00\xff binary too"

    def jwcrypto_jwe_opens_in_tool():
        hdr = {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": csr_sha256}
        tok = jwe.JWE(token, protected=json_encode(hdr))
        tok.add_recipient(jwk.JWK.from_json(key.export_public()))
        out, err = run(tool, ["open", key_pem, "csrSha256"],
                       tok.serialize(compact=True).encode())
        assert out == token, f"plaintext differs: {out!r}"
        assert err.decode().strip() == csr_sha256, f"header value {err!r}"

    def jwcrypto_jwe_with_apu_apv_opens_in_tool():
        hdr = {"alg": "ECDH-ES", "enc": "A256GCM", "apu": b64url(b"Alice"),
               "apv": b64url(b"Bob"), "csrSha256": csr_sha256}
        tok = jwe.JWE(token, protected=json_encode(hdr))
        tok.add_recipient(jwk.JWK.from_json(key.export_public()))
        out, _ = run(tool, ["open", key_pem, "csrSha256"],
                     tok.serialize(compact=True).encode())
        assert out == token, f"plaintext differs: {out!r}"

    def tool_jwe_opens_in_jwcrypto():
        out, _ = run(tool, ["seal", pub_jwk, "csrSha256", csr_sha256], token)
        tok = jwe.JWE()
        tok.deserialize(out.decode().strip(), key=key)
        assert tok.payload == token, "plaintext differs"
        hdr = json.loads(tok.objects["protected"])
        assert hdr["alg"] == "ECDH-ES" and hdr["enc"] == "A256GCM", hdr
        assert hdr["csrSha256"] == csr_sha256, hdr

    payload = json.dumps({"status": "issued", "csrSha256": csr_sha256}).encode()

    def tool_jws_verifies_in_jwcrypto():
        out, _ = run(tool, ["sign", key_pem, "kid-1"], payload)
        sig = jws.JWS()
        sig.deserialize(out.decode().strip())
        sig.verify(jwk.JWK.from_json(key.export_public()), alg="ES256")
        assert sig.payload == payload, "payload differs"
        assert sig.jose_header.get("kid") == "kid-1", sig.jose_header

    def jwcrypto_jws():
        sig = jws.JWS(payload)
        sig.add_signature(key, alg="ES256", protected=json_encode({"alg": "ES256"}))
        return sig.serialize(compact=True)

    def jwcrypto_jws_verifies_in_tool():
        out, _ = run(tool, ["verify", pub_jwk], jwcrypto_jws().encode())
        assert out == payload, f"payload differs: {out!r}"

    def tampered_jws_refused_by_tool():
        h, p, s = jwcrypto_jws().split(".")
        other = b64url(payload.replace(b"issued", b"pendin"))
        run(tool, ["verify", pub_jwk], f"{h}.{other}.{s}".encode(), expect_ok=False)
        flipped = s[:10] + ("A" if s[10] != "A" else "B") + s[11:]
        run(tool, ["verify", pub_jwk], f"{h}.{p}.{flipped}".encode(), expect_ok=False)
        none_hdr = b64url(b'{"alg":"none"}')
        run(tool, ["verify", pub_jwk], f"{none_hdr}.{p}.".encode(), expect_ok=False)

    def tampered_jwe_refused_by_tool():
        hdr = {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": csr_sha256}
        tok = jwe.JWE(token, protected=json_encode(hdr))
        tok.add_recipient(jwk.JWK.from_json(key.export_public()))
        parts = tok.serialize(compact=True).split(".")
        ct = bytearray(base64.urlsafe_b64decode(parts[3] + "=" * (-len(parts[3]) % 4)))
        ct[0] ^= 1
        parts[3] = b64url(bytes(ct))
        run(tool, ["open", key_pem, "csrSha256"], ".".join(parts).encode(),
            expect_ok=False)

    def jwk_and_thumbprint_agree():
        out, _ = run(tool, ["jwk", key_pem])
        imported = jwk.JWK.from_json(out.decode().strip())
        assert imported.export_public(as_dict=True) == key.export_public(as_dict=True)
        assert out.decode().strip() == json.dumps(
            {"crv": "P-256", "kty": "EC", "x": imported["x"], "y": imported["y"]},
            separators=(",", ":")), "JWK is not in RFC 7638 canonical form"
        tp, _ = run(tool, ["thumbprint", key_pem])
        assert tp.decode().strip() == imported.thumbprint(), "thumbprints differ"

    check("JWE sealed by jwcrypto opens with jose-tool (header csrSha256)",
          jwcrypto_jwe_opens_in_tool)
    check("JWE sealed by jwcrypto with apu/apv opens with jose-tool",
          jwcrypto_jwe_with_apu_apv_opens_in_tool)
    check("JWE sealed by jose-tool decrypts in jwcrypto", tool_jwe_opens_in_jwcrypto)
    check("JWS signed by jose-tool verifies in jwcrypto", tool_jws_verifies_in_jwcrypto)
    check("JWS signed by jwcrypto verifies with jose-tool", jwcrypto_jws_verifies_in_tool)
    check("tampered JWS (payload, signature, alg none) refused by jose-tool",
          tampered_jws_refused_by_tool)
    check("tampered JWE refused by jose-tool", tampered_jwe_refused_by_tool)
    check("JWK imports in jwcrypto; RFC 7638 thumbprints agree", jwk_and_thumbprint_agree)

    # A federated trust domain's keys (issue 46): RS/PS/ES 256-512 signed by jwcrypto,
    # verified by bc_jws_verify_any with the key from bc_pkey_from_jwk_any.
    rsa = jwk.JWK.generate(kty="RSA", size=2048)
    ecs = {"ES256": jwk.JWK.generate(kty="EC", crv="P-256"),
           "ES384": jwk.JWK.generate(kty="EC", crv="P-384"),
           "ES512": jwk.JWK.generate(kty="EC", crv="P-521")}

    def pub_file(k, name):
        path = os.path.join(tmp, name + ".jwk")
        with open(path, "w") as f:
            f.write(k.export_public())
        return path

    def signed(k, alg, body=payload):
        sig = jws.JWS(body)
        sig.add_signature(k, alg=alg, protected=json_encode({"alg": alg, "kid": "k"}))
        return sig.serialize(compact=True)

    def any_alg_verifies(alg, k):
        def fn():
            path = pub_file(k, alg)
            out, _ = run(tool, ["verify-any", path], signed(k, alg).encode())
            assert out == payload, f"payload differs: {out!r}"
            h, p, s = signed(k, alg).split(".")
            flipped = s[:10] + ("A" if s[10] != "A" else "B") + s[11:]
            run(tool, ["verify-any", path], f"{h}.{p}.{flipped}".encode(), expect_ok=False)
            other = b64url(payload.replace(b"issued", b"pendin"))
            run(tool, ["verify-any", path], f"{h}.{other}.{s}".encode(), expect_ok=False)
        return fn

    def any_alg_mismatch_refused():
        rsa_pub = pub_file(rsa, "rsa")
        # an EC alg with an RSA key, an RSA alg with an EC key, another curve, alg none
        run(tool, ["verify-any", rsa_pub], signed(ecs["ES256"], "ES256").encode(), expect_ok=False)
        run(tool, ["verify-any", pub_file(ecs["ES256"], "p256")], signed(rsa, "RS256").encode(),
            expect_ok=False)
        run(tool, ["verify-any", pub_file(ecs["ES384"], "p384")], signed(ecs["ES256"], "ES256").encode(),
            expect_ok=False)
        # PS256 signed, header rewritten to RS256: the padding differs, refused
        h, p, s = signed(rsa, "PS256").split(".")
        hdr_RS256, hdr_none, hdr_HS256 = (b64url(json.dumps({"alg": a}).encode())
                                          for a in ("RS256", "none", "HS256"))
        run(tool, ["verify-any", rsa_pub], f"{hdr_RS256}.{p}.{s}".encode(),
            expect_ok=False)
        run(tool, ["verify-any", rsa_pub], f"{hdr_none}.{p}.".encode(),
            expect_ok=False)
        # HS256 with the RSA modulus as the secret (the alg confusion attack)
        run(tool, ["verify-any", rsa_pub], f"{hdr_HS256}.{p}.{s}".encode(),
            expect_ok=False)
        # a private JWK is refused as a verification key; a 1024-bit RSA key too
        priv = os.path.join(tmp, "priv.jwk")
        with open(priv, "w") as f:
            f.write(ecs["ES256"].export_private())
        run(tool, ["verify-any", priv], signed(ecs["ES256"], "ES256").encode(), expect_ok=False)
        small = jwk.JWK.generate(kty="RSA", size=1024)
        run(tool, ["verify-any", pub_file(small, "small")], signed(small, "RS256").encode(),
            expect_ok=False)

    for alg in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"):
        check(f"{alg} JWS by jwcrypto verifies with verify-any; tampered refused",
              any_alg_verifies(alg, rsa))
    for alg, k in ecs.items():
        check(f"{alg} JWS by jwcrypto verifies with verify-any; tampered refused",
              any_alg_verifies(alg, k))
    check("verify-any refuses an alg that does not fit the key, none, HS256, a private JWK, "
          "RSA-1024", any_alg_mismatch_refused)

    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    passed = sum(RESULTS)
    failed = len(RESULTS) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
