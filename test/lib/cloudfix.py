"""cloudfix.py: local stand-ins for the clouds' signing keys (cloud-iid tests).

The verification code is the one that checks real evidence; only the trust
material differs: a self-signed RSA-2048 certificate plays AWS's regional
certificate, a root -> intermediate -> signer chain with a dNSName under a
test domain plays Azure's, an RSA key in a JWKS plays Google's.  openssl
makes the PKCS#7 exactly as the clouds ship it (attached content, BER/DER),
jwcrypto the JWT."""
import base64, hashlib, json, os, subprocess, time

from jwcrypto import jwk, jws
from jwcrypto.common import json_encode

AZURE_DOMAIN = "metadata.test.example"
GCP_AUDIENCE = "https://join.test.example"
# Two clouds that are none of the three: acmecloud signs Azure's way (a
# PKCS#7 carrying the document, by a signer under its own root and domain)
# and names things its own way; jcloud issues RS256 JWTs Google's way with
# its own issuer and claims.  Each is a provider registered in SQL
# (bc_join.cloud_providers), no attestor of its own.
ACME_DOMAIN = "identity.acmecloud.example"
JCLOUD_ISSUER = "https://id.jcloud.example"
JCLOUD_AUDIENCE = "https://join.jcloud.example"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sh(*args, data=None):
    return subprocess.run(args, input=data, capture_output=True, check=True).stdout


class Clouds:
    def __init__(self, d):
        self.d = d
        os.makedirs(d, exist_ok=True)
        p = lambda n: os.path.join(d, n)
        self.p = p
        # AWS: a self-signed RSA-2048 certificate like the regional one, and an evil one
        for n in ("aws", "evil"):
            sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p(n + ".key"),
               "-out", p(n + ".crt"), "-days", "30", "-subj", "/CN=" + n + " stand-in",
               "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
               "-addext", "keyUsage=digitalSignature")
        # Azure: root -> intermediate -> signer (dNSName under the test domain); an unrelated cert
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("root.key"),
           "-out", p("root.crt"), "-days", "30", "-subj", "/CN=azure test root",
           "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign,cRLSign")
        self._issue("int", "root", "/CN=azure test intermediate",
                    "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=keyCertSign,cRLSign\n")
        self._issue("signer", "int", "/CN=eastus." + AZURE_DOMAIN,
                    "subjectAltName=DNS:eastus.%s\nextendedKeyUsage=serverAuth,clientAuth\n" % AZURE_DOMAIN)
        self._issue("wrongdom", "int", "/CN=eastus.metadata.elsewhere.example",
                    "subjectAltName=DNS:eastus.metadata.elsewhere.example,DNS:x%s\n" % AZURE_DOMAIN)
        # a genuine signer valid for one day only: expired once the service clock is 2 days on
        self._issue("daysigner", "int", "/CN=westus." + AZURE_DOMAIN,
                    "subjectAltName=DNS:westus.%s\nextendedKeyUsage=serverAuth,clientAuth\n" % AZURE_DOMAIN,
                    days=1)
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("azevil.key"),
           "-out", p("azevil.crt"), "-days", "30", "-subj", "/CN=eastus." + AZURE_DOMAIN,
           "-addext", "subjectAltName=DNS:eastus." + AZURE_DOMAIN)
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("other.key"),
           "-out", p("other.crt"), "-days", "30", "-subj", "/CN=unrelated")
        # GCP: an RSA key in a JWKS, and keys that must never verify
        self.gkey = jwk.JWK.generate(kty="RSA", size=2048, kid="g1")
        self.gother = jwk.JWK.generate(kty="RSA", size=2048, kid="g2")
        self.gec = jwk.JWK.generate(kty="EC", crv="P-256", kid="g1")

    # --------------------------------------------------------- acmecloud
    def acmecloud_ca(self):
        """acmecloud's own root -> intermediate -> signer (attest.<its domain>)."""
        p = self.p
        if os.path.exists(p("acsigner.crt")):
            return
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("acroot.key"),
           "-out", p("acroot.crt"), "-days", "30", "-subj", "/CN=acmecloud test root",
           "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign,cRLSign")
        self._issue("acint", "acroot", "/CN=acmecloud test intermediate",
                    "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=keyCertSign,cRLSign\n")
        self._issue("acsigner", "acint", "/CN=attest." + ACME_DOMAIN,
                    "subjectAltName=DNS:attest.%s\n" % ACME_DOMAIN)

    def acmecloud_register(self, cur):
        """The operator registers acmecloud: its format, members, domain and anchors."""
        self.acmecloud_ca()
        cur.execute("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member, "
                    "nonce_member, require_members, domain) VALUES ('acmecloud', 'azure-pkcs7', 'tenancy.id', "
                    "'machine.id', 'binding.nonce', ARRAY['region'], %s)", (ACME_DOMAIN,))
        cur.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material, note) "
                    "VALUES ('acmecloud', 'root', %s, 'acmecloud root')", (self.pem("acroot"),))
        cur.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material, note) "
                    "VALUES ('acmecloud', 'intermediate', %s, 'acmecloud intermediate')", (self.pem("acint"),))

    def acmecloud_content(self, nonce, tenancy="tenancy-7", machine="m-0042", created=None, expires=None,
                          drop=()):
        now = time.time()
        fmt = lambda t: time.strftime("%m/%d/%y %H:%M:%S -0000", time.gmtime(t))
        doc = {"binding": {"nonce": nonce}, "region": "north-1",
               "timeStamp": {"createdOn": fmt(created if created is not None else now - 5),
                             "expiresOn": fmt(expires if expires is not None else now + 3600)},
               "tenancy": {"id": tenancy, "name": "acme"}, "machine": {"id": machine, "shape": "s1"}}
        for k in drop:
            doc.pop(k, None)
        return json.dumps(doc).encode()

    def acmecloud_evidence(self, content, signer="acsigner"):
        return json.dumps({"provider": "acmecloud",
                           "document": b64u(self.azure_pkcs7(content, signer=signer, bag=(signer,)))})

    # ------------------------------------------------------------ jcloud
    def jcloud_register(self, cur):
        """The operator registers jcloud: Google's format, its own issuer, claims and key."""
        self.jkey = jwk.JWK.generate(kty="RSA", size=2048, kid="j1")
        cur.execute("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member, "
                    "started_member, issuer, audience) VALUES ('jcloud', 'gcp-jwt', 'org', 'vm.id', 'vm.born', "
                    "%s, %s)", (JCLOUD_ISSUER, JCLOUD_AUDIENCE))
        cur.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('jcloud', 'jwks', %s)",
                    (json.dumps({"keys": [json.loads(self.jkey.export_public())]}),))

    def jcloud_token(self, csr_sha256, iss=None, key=None, org="org-9", vm="vm-0001", born=None):
        now = int(time.time())
        claims = {"iss": iss or JCLOUD_ISSUER, "aud": JCLOUD_AUDIENCE + "#" + csr_sha256, "iat": now,
                  "exp": now + 600, "org": org, "vm": {"id": vm, "born": born if born is not None else now - 30}}
        t = jws.JWS(json.dumps(claims).encode())
        t.add_signature(key or self.jkey, None, json_encode({"alg": "RS256", "kid": "j1", "typ": "JWT"}))
        return json.dumps({"provider": "jcloud", "token": t.serialize(compact=True)})

    def _issue(self, name, ca, subj, ext, days=30):
        p = self.p
        with open(p(name + ".ext"), "w") as f:
            f.write(ext)
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", p(name + ".key"),
           "-out", p(name + ".csr"), "-subj", subj)
        sh("openssl", "x509", "-req", "-in", p(name + ".csr"), "-CA", p(ca + ".crt"),
           "-CAkey", p(ca + ".key"), "-CAcreateserial", "-days", str(days), "-out", p(name + ".crt"),
           "-extfile", p(name + ".ext"))

    def pem(self, name):
        return open(self.p(name + ".crt")).read()

    def jwks(self):
        return json.dumps({"keys": [json.loads(self.gkey.export_public())]})

    def configure(self, cur, tenant, pool, aws_account="123456789012", gcp_project="proj-1",
                  azure_sub="8d10da13-8125-4ba9-a717-bf7490507b3d"):
        """The operator's configuration for all three providers."""
        q = cur.execute
        q("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('aws', 'certificate', %s)",
          (self.pem("aws"),))
        q("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('azure', 'root', %s)",
          (self.pem("root"),))
        q("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('azure', 'intermediate', %s)",
          (self.pem("int"),))
        q("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('gcp', 'jwks', %s)",
          (self.jwks(),))
        q("INSERT INTO bc_join.cloud_providers (provider) VALUES ('aws')")
        q("INSERT INTO bc_join.cloud_providers (provider, audience) VALUES ('gcp', %s)", (GCP_AUDIENCE,))
        q("INSERT INTO bc_join.cloud_providers (provider, domain) VALUES ('azure', %s)", (AZURE_DOMAIN,))
        for prov, acct in (("aws", aws_account), ("gcp", gcp_project), ("azure", azure_sub)):
            q("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) "
              "VALUES (%s, %s, %s, %s)", (prov, acct, tenant, pool))

    # -------------------------------------------------------------- AWS
    def aws_document(self, account="123456789012", instance="i-0123456789abcdef0", pending=None):
        pending = pending if pending is not None else time.time() - 60
        doc = {"accountId": account, "architecture": "x86_64", "availabilityZone": "eu-west-1a",
               "imageId": "ami-0123456789abcdef0", "instanceId": instance, "instanceType": "t3.micro",
               "pendingTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(pending)),
               "privateIp": "10.0.0.5", "region": "eu-west-1", "version": "2017-09-30"}
        # pretty-printed like AWS's, the exact bytes signed
        return json.dumps(doc, indent=2, separators=(",", " : ")).encode()

    def aws_pkcs7(self, document, signer="aws", certs=False, md="sha256"):
        args = ["openssl", "smime", "-sign", "-nodetach", "-binary", "-md", md, "-outform", "DER",
                "-signer", self.p(signer + ".crt"), "-inkey", self.p(signer + ".key")]
        if not certs:
            args.append("-nocerts")
        return sh(*args, data=document)

    def aws_rsa2048(self, pkcs7):
        """The /rsa2048 answer: base64 with line breaks, as IMDS serves it."""
        return base64.encodebytes(pkcs7)

    def aws_evidence(self, document, pkcs7):
        return json.dumps({"provider": "aws", "document": b64u(document), "pkcs7": b64u(pkcs7)})

    # -------------------------------------------------------------- GCP
    def gcp_token(self, csr_sha256, alg="RS256", key=None, kid="g1", aud=None, iss=None,
                  iat=None, exp=None, project="proj-1", instance="4567890123456789012",
                  created=None, drop=()):
        now = int(time.time())
        iat = now if iat is None else iat
        claims = {"iss": iss or "https://accounts.google.com",
                  "aud": aud if aud is not None else GCP_AUDIENCE + "#" + csr_sha256,
                  "azp": "1122334455", "sub": "1122334455", "email": "vm@proj-1.iam.example",
                  "iat": iat, "exp": exp if exp is not None else iat + 3600,
                  "google": {"compute_engine": {
                      "project_id": project, "project_number": 99887766, "zone": "europe-west1-b",
                      "instance_id": instance, "instance_name": "vm-1",
                      "instance_creation_timestamp": created if created is not None else now - 120}}}
        for k in drop:
            claims["google"]["compute_engine"].pop(k, None)
        payload = json.dumps(claims).encode()
        if alg == "none":
            return b64u(json.dumps({"alg": "none", "kid": kid}).encode()) + "." + b64u(payload) + "."
        if alg == "HS256":
            key = jwk.JWK(kty="oct", k=b64u(self.gkey.export_to_pem()))
        key = key or (self.gec if alg == "ES256" else self.gkey)
        t = jws.JWS(payload)
        t.add_signature(key, None, json_encode({"alg": alg, "kid": kid, "typ": "JWT"}))
        return t.serialize(compact=True)

    def gcp_evidence(self, token):
        return json.dumps({"provider": "gcp", "token": token})

    # ------------------------------------------------------------ Azure
    def azure_content(self, nonce, vm="0f2c4a8e-5b6d-4e7f-8a9b-0c1d2e3f4a5b",
                      sub="8d10da13-8125-4ba9-a717-bf7490507b3d", created=None, expires=None):
        now = time.time()
        fmt = lambda t: time.strftime("%m/%d/%y %H:%M:%S -0000", time.gmtime(t))
        return json.dumps({"nonce": nonce, "plan": {"name": "", "product": "", "publisher": ""},
                           "timeStamp": {"createdOn": fmt(created if created is not None else now - 5),
                                         "expiresOn": fmt(expires if expires is not None else now + 21600)},
                           "vmId": vm, "licenseType": "", "subscriptionId": sub,
                           "sku": "22_04-lts-gen2"}).encode()

    def azure_pkcs7(self, content, signer="signer", bag=("other", "signer"), md="sha256"):
        """Signed by signer; the bag holds the named certificates in this order (unrelated first)."""
        bagfile = self.p("bag-%s.pem" % signer)
        with open(bagfile, "w") as f:
            for n in bag:
                f.write(self.pem(n))
        return sh("openssl", "smime", "-sign", "-nodetach", "-binary", "-md", md, "-outform", "DER",
                  "-nocerts", "-certfile", bagfile, "-signer", self.p(signer + ".crt"),
                  "-inkey", self.p(signer + ".key"), data=content)

    def azure_answer(self, pkcs7):
        """The IMDS answer to /metadata/attested/document."""
        return json.dumps({"encoding": "pkcs7", "signature": base64.b64encode(pkcs7).decode()})

    def azure_evidence(self, pkcs7):
        return json.dumps({"provider": "azure", "document": b64u(pkcs7)})


def csr_sha256(request_json):
    """(csrSha256 base64url, Azure nonce) of a JoinRequest's CSR."""
    csr = base64.urlsafe_b64decode(request_json["csr"] + "=" * (-len(request_json["csr"]) % 4))
    h = hashlib.sha256(csr).digest()
    return b64u(h), h.hex()[:32]


class Requests:
    """JoinRequests made by the real agent command (bcd join-request
    --attestation-file), each from the key and CSR kept in scratch/d."""

    def __init__(self, bcd, service_keys, scratch):
        self.bcd, self.keys, self.scratch, self.n = bcd, service_keys, scratch, 0

    def request(self, evidence, d=None, token=None, role=None):
        """A JoinRequest for evidence from the key and CSR kept in d (new when None)."""
        if d is None:
            self.n += 1
            d = "r%d" % self.n
        f = os.path.join(self.scratch, d + ".json")
        with open(f, "w") as fh:
            fh.write(evidence)
        args = [self.bcd, "join-request", "--service-keys", self.keys, "--attestor", "cloud-iid",
                "--attestation-file", f, "--out-dir", os.path.join(self.scratch, d)]
        if token:
            args += ["--token", token]
        if role:
            args += ["--role", role]
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout
