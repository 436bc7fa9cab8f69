#!/usr/bin/python3
"""cloud_registry.t: cloud-iid as the seed describes it,
cloudIidAttestor({providers, resolve, roles}) (issue 42 item 9b).

The clouds are rows of one registry, bc_join.cloud_providers: aws, gcp and
azure take the contract's definitions; a fourth and a fifth cloud are added
in SQL alone, each with a document format the attestor already verifies,
its own trust anchors and its own member names: acmecloud signs Azure's way
(PKCS#7 by a signer under its own root and domain, the CSR bound by a nonce)
and jcloud issues JWTs Google's way (its own issuer, claims and JWKS).
Local CAs and keys stand in for the clouds (test/lib/cloudfix.py); requests
are made by the real agent command (bcd join-request --attestation-file)
and joined through the SQL entry point.  Each cloud account names the roles
its machines may join as (node, site): a role it does not allow is refused
cloud-iid:role.  The registry's rows are checked as they are written, by an
operator who is no superuser too.  Needs the environment test/run-all sets
(PGHOST, PGPORT, BCJ_*)."""
import base64, json, os, subprocess, sys
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest, cloudfix
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("cloud_registry", "bcj_cloud_registry")
scratch, c, one = sdb.scratch, sdb.cur, sdb.one
t, s, p = sdb.tenant('clouds', 'vms')
cl = cloudfix.Clouds(os.path.join(scratch, "ca"))
cl.configure(c, t, p)

request = cloudfix.Requests(bcd, keys, scratch).request
def csr_of(d, role=None):
    """(csrSha256, nonce) of the CSR kept in d, made by a first request."""
    return cloudfix.csr_sha256(json.loads(request('{"provider":"aws"}', d, role=role)))
def join(req):
    c.execute("SELECT bc_join(%s::jsonb)", (req,))
    return c.fetchone()[0]
def last_refusal():
    return one("SELECT payload FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")
def refused(req, reason, name):
    r = join(req)
    got = last_refusal()
    ok(r.get("status") == "refused" and got["refusal"] == "cloud-iid:" + reason, name + ": refused " + reason,
       (r, got))
    return got
def payload(r):
    body = r["response"].split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
def joined():
    return one("SELECT payload FROM bc_join.events WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1")
def config_error(sql, args, code, name, cur=None):
    try:
        (cur or c).execute(sql, args)
        ok(False, name, "accepted")
    except psycopg2.Error as e:
        ok(e.pgcode == code, name, (e.pgcode, str(e)))

# ------------------------------------------------- the built-ins are rows
c.execute("SELECT provider, format, account_member, instance_member, started_member, require_members, "
          "issuer, nonce_member, uuid_ids FROM bc_join.cloud_providers")
rows = {r[0]: r[1:] for r in c.fetchall()}
eq(rows["aws"], ("aws-pkcs7", "accountId", "instanceId", "pendingTime", ["region"], None, None, False),
   "aws enabled is a row of the registry: AWS's format and members (ATTESTORS.md)")
eq(rows["gcp"], ("gcp-jwt", "google.compute_engine.project_id", "google.compute_engine.instance_id",
                 "google.compute_engine.instance_creation_timestamp", [], "https://accounts.google.com", None, False),
   "gcp: Google's format, issuer and claims")
eq(rows["azure"], ("azure-pkcs7", "subscriptionId", "vmId", None, [], None, "nonce", True),
   "azure: Azure's format, nonce and UUIDs")
config_error("UPDATE bc_join.cloud_providers SET format = 'gcp-jwt' WHERE provider = 'aws'", (), "F0000",
             "a built-in's format cannot be changed")
config_error("UPDATE bc_join.cloud_providers SET instance_member = 'vm' WHERE provider = 'azure'", (), "F0000",
             "nor its members")
config_error("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member, domain) "
             "VALUES ('nonced', 'azure-pkcs7', 'a', 'b', 'x.example')", (), "F0000",
             "an azure-pkcs7 provider without a nonce_member is INVALID_CONFIG")
config_error("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member, issuer, audience) "
             "VALUES ('jj', 'gcp-jwt', 'iss', 'b', 'https://i', 'https://a')", (), "F0000",
             "a member the format reads itself (iss) is INVALID_CONFIG")
config_error("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member) "
             "VALUES ('plain', 'aws-pkcs7', 'a b', 'c')", (), "F0000", "a member path that is none is INVALID_CONFIG")
config_error("INSERT INTO bc_join.cloud_providers (provider, format, account_member, instance_member, max_instance_age) "
             "VALUES ('plain', 'aws-pkcs7', 'a', 'b', '1 hour')", (), "F0000",
             "an instance age without a started_member is INVALID_CONFIG")
config_error("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('acmecloud', 'root', %s)",
             (cl.pem("root"),), "22023", "trust material for a provider nobody registered is refused")
config_error("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id, roles) "
             "VALUES ('gcp', 'proj-r', %s, %s, ARRAY['ramdisk'])", (t, p), "23514",
             "an account's roles are node and site, nothing else")

# an operator who is no superuser edits the registry; its mistakes are INVALID_CONFIG, not 42501
c.execute("DROP ROLE IF EXISTS cloud_registry_op")
c.execute("CREATE ROLE cloud_registry_op IN ROLE bc_join_operator")
c.execute("SET ROLE cloud_registry_op")
config_error("UPDATE bc_join.cloud_providers SET max_instance_age = '1 hour' WHERE provider = 'azure'", (), "F0000",
             "an operator: an instance age for azure is INVALID_CONFIG")
cl.acmecloud_register(c)
ok(True, "an operator registers acmecloud (format azure-pkcs7, its members, domain, root and intermediate)")
config_error("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('acmecloud', 'jwks', %s)",
             (cl.jwks(),), "22023", "an operator: trust of a kind acmecloud's format does not read is refused")
c.execute("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) VALUES ('acmecloud', 'tenancy-7', %s, %s)",
          (t, p))
config_error("UPDATE bc_join.cloud_accounts SET allow_unbound = true WHERE provider = 'acmecloud'", (), "F0000",
             "an operator: unbound admission for a cloud that binds the CSR is INVALID_CONFIG")
c.execute("RESET ROLE")
cl.jcloud_register(c)
c.execute("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) VALUES ('jcloud', 'org-9', %s, %s)",
          (t, p))

# ------------------------------------------------------------- acmecloud
d = "acme"
h, nonce = csr_of(d)
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce), signer="signer"), d), "untrusted-signer",
        "acmecloud: a document signed by Azure's stand-in signer does not chain to acmecloud's root")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content("0" * 32)), d), "wrong-nonce",
        "acmecloud: another CSR's nonce (binding.nonce)")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce, drop=("region",))), d), "malformed-document",
        "acmecloud: a required member (region) missing")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce, drop=("machine",))), d), "malformed-document",
        "acmecloud: no instance member (machine.id)")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce, tenancy="tenancy-x")), d), "unknown-account",
        "acmecloud: a tenancy nobody mapped")
good = cl.acmecloud_evidence(cl.acmecloud_content(nonce))
r = join(request(good, d))
ok(r.get("status") == "issued", "acmecloud: its document for this CSR is admitted, no attestor of its own", r)
acme_node = payload(r)["nodeId"]
eq(joined().get("detail"), {"provider": "acmecloud", "account": "tenancy-7", "instance": "m-0042",
                            "admission": "bound"}, "acmecloud: node.joined names provider, account and instance")
eq(one("SELECT count(*) FROM bc_join.node_bindings WHERE attestor = 'cloud-iid' AND node_id = %s "
       "AND subject = bc_join.cloud_instance_bind('acmecloud', 'tenancy-7', 'm-0042')", acme_node), 1,
   "acmecloud: bound as SHA-256(acmecloud 0 tenancy 0 machine)")
r2 = join(request(good, d))
ok(r2.get("status") == "issued" and payload(r2)["serial"] == payload(r)["serial"],
   "acmecloud: the same request again is answered with the same certificate", r2)
h2, nonce2 = csr_of("acme2")
got = refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce2)), "acme2"), "already-admitted",
              "acmecloud: the same machine, a new key")
eq(got.get("detail"), {"provider": "acmecloud", "account": "tenancy-7", "instance": "m-0042"},
   "acmecloud: the event names the instance to reset")
eq(one("SELECT bc_join.reset_cloud_instance('acmecloud', 'tenancy-7', 'm-0042')"), True,
   "reset_cloud_instance takes a registered provider")
r = join(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce2)), "acme2"))
ok(r.get("status") == "issued" and payload(r)["nodeId"] == acme_node, "acmecloud: after a reset, its node again", r)
c.execute("DELETE FROM bc_join.cloud_providers WHERE provider = 'acmecloud'")
h3, nonce3 = csr_of("acme3")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce3, machine="m-3")), "acme3"), "malformed",
        "acmecloud without its row is no provider at all")
c.execute("DELETE FROM bc_join.cloud_trust WHERE provider = 'acmecloud'")
cl.acmecloud_register(c)

# ---------------------------------------------------------------- jcloud
h, _ = csr_of("j")
refused(request(cl.jcloud_token(h, iss="https://accounts.google.com"), "j"), "wrong-issuer",
        "jcloud: a token with Google's issuer, not jcloud's")
refused(request(cl.jcloud_token(h, key=cl.gkey), "j"), "bad-signature", "jcloud: signed with another cloud's key")
refused(request(cl.jcloud_token(h, vm=""), "j"), "no-instance", "jcloud: an empty instance claim")
r = join(request(cl.jcloud_token(h), "j"))
ok(r.get("status") == "issued", "jcloud: its token for this CSR is admitted", r)
eq(joined().get("detail"), {"provider": "jcloud", "account": "org-9", "instance": "vm-0001", "admission": "bound"},
   "jcloud: account and instance from its own claims")
c.execute("UPDATE bc_join.cloud_providers SET max_instance_age = '1 minute' WHERE provider = 'jcloud'")
h, _ = csr_of("j2")
refused(request(cl.jcloud_token(h, vm="vm-2", born=0), "j2"), "too-old",
        "jcloud: an instance born long ago, by its own started member")

# ----------------------------------------------------------------- roles
h, nonce = csr_of("site1", role="site")
site_ev = cl.acmecloud_evidence(cl.acmecloud_content(nonce, machine="edge-1"))
got = refused(request(site_ev, "site1", role="site"), "role", "acmecloud: a site agent of an account that allows node only")
eq(got.get("detail"), {"provider": "acmecloud", "account": "tenancy-7", "instance": "edge-1", "role": "site"},
   "the refusal names the account and the role asked for")
ok(one("SELECT tenant_id FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1") == t,
   "in the account's tenant")
c.execute("UPDATE bc_join.cloud_accounts SET roles = ARRAY['node', 'site'] WHERE provider = 'acmecloud'")
r = join(request(site_ev, "site1", role="site"))
ok(r.get("status") == "issued" and payload(r)["role"] == "site", "acmecloud: allowed, the site agent joins", r)
eq(one("SELECT array[role, site_id, coalesce(pool_id, '-')] FROM bc_join.nodes WHERE id = %s",
       payload(r)["nodeId"]), ["site", s, "-"], "as a site agent of the pool's site, in no pool")
h, _ = csr_of("site2", role="site")
refused(request(cl.gcp_evidence(cl.gcp_token(h, instance="8000000000000000001")), "site2", role="site"), "role",
        "gcp (built in): a site agent of a project that allows node only")
c.execute("UPDATE bc_join.cloud_accounts SET roles = ARRAY['site'] WHERE provider = 'gcp'")
r = join(request(cl.gcp_evidence(cl.gcp_token(h, instance="8000000000000000001")), "site2", role="site"))
ok(r.get("status") == "issued" and payload(r)["role"] == "site", "gcp: roles {site}: the site agent joins", r)
h, _ = csr_of("site3")
refused(request(cl.gcp_evidence(cl.gcp_token(h, instance="8000000000000000002")), "site3"), "role",
        "gcp: and a node of that project is refused")
h, _ = csr_of("rd", "ramdisk")
refused(request(cl.gcp_evidence(cl.gcp_token(h, instance="8000000000000000003")), "rd", role="ramdisk"),
        "role-not-admitted", "a ramdisk is never a cloud instance")

# the resolver answers roles for accounts without a row
c.execute("""CREATE FUNCTION public.cloud_roles(provider text, account text, context jsonb) RETURNS jsonb
             LANGUAGE sql SET search_path = pg_catalog, pg_temp
             AS $$ SELECT CASE WHEN account = 'tenancy-r' THEN
                   jsonb_build_object('tenantId', %s::text, 'poolId', %s::text, 'roles', jsonb_build_array('site'))
                   END $$""", (t, p))
c.execute("SELECT bc_join.register_cloud_resolver('public.cloud_roles(text,text,jsonb)')")
h, nonce = csr_of("res1")
refused(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce, tenancy="tenancy-r", machine="r-1")), "res1"),
        "role", "a resolved account whose answer allows site only: a node is refused")
h, nonce = csr_of("res2", "site")
r = join(request(cl.acmecloud_evidence(cl.acmecloud_content(nonce, tenancy="tenancy-r", machine="r-2")), "res2", role="site"))
ok(r.get("status") == "issued" and payload(r)["role"] == "site", "and a site agent joins", r)

c.execute("DROP ROLE cloud_registry_op")
tap.done()
