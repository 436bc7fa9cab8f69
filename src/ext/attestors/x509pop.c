/*
 * attestors/x509pop.c: the built-in x509pop attestor.  A machine proves a
 * certificate it holds: its node certificate (a machine that was away comes
 * back as itself, even shortly after the certificate expired), or a leaf of
 * an external PKI an operator configured (bc_join.add_x509pop_root).
 *
 * Evidence: the ASCII JWS compact serialization, protected header exactly
 * alg and x5c (optionally typ), signed with the leaf's key, over exactly
 * {"purpose":"x509pop","nodeId":..,"csrSha256":..,"iat":..}.  Checked in
 * the order of docs/attestors.md; every refusal is x509pop:<reason>.  The
 * JWS itself is parsed and verified by src/common (jose_x5c.c).
 */
#include "bc_join.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#define WHO BC_ATTESTOR_X509POP
/* The payload: four short members. */
#define X509POP_PAYLOAD_MAX 1024

static const char *const x509pop_roles[] = {BC_ROLE_NODE, BC_ROLE_SITE, BC_ROLE_RAMDISK, NULL};

/* The certificate a node leaf names, with its node, locked for the round. */
static BcPlan node_cert = {
	"SELECT c.node_id, c.identity_generation, c.revoked_at IS NOT NULL, c.revocation_reason, "
	"       c.certificate, c.allowed_kinds, "
	"       extract(epoch FROM c.not_after - c.not_before)::bigint, "
	"       extract(epoch FROM bc_join.compute_now() - c.not_after)::bigint, "
	"       n.identity_generation, n.state, n.tenant_id, n.role, "
	"       n.node_key = 'tpm' OR EXISTS (SELECT 1 FROM bc_join.node_certs k "
	"           WHERE k.node_id = n.id AND k.identity_generation = n.identity_generation "
	"             AND k.node_key_uri LIKE '" BC_TPM_AK_URN_PREFIX "%') "
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id "
	"WHERE c.serial = $1 FOR UPDATE OF n",
	1, {TEXTOID}
};

enum
{
	Anum_nc_node_id = 1,
	Anum_nc_generation,
	Anum_nc_revoked,
	Anum_nc_reason,
	Anum_nc_certificate,
	Anum_nc_allowed_kinds,
	Anum_nc_lifetime,
	Anum_nc_expired_for,
	Anum_nc_node_generation,
	Anum_nc_state,
	Anum_nc_tenant,
	Anum_nc_role,
	Anum_nc_tpm_bound
};

static BcPlan roots = {
	"SELECT id, tenant_id, pool_id, certificate FROM bc_join.x509pop_roots "
	"ORDER BY created_at, id",
	0, {InvalidOid}
};

enum
{
	Anum_rt_id = 1,
	Anum_rt_tenant,
	Anum_rt_pool,
	Anum_rt_certificate
};

static BcPlan bound_node = {
	"SELECT b.node_id, n.tenant_id FROM bc_join.node_bindings b "
	"JOIN bc_join.nodes n ON n.id = b.node_id "
	"WHERE b.subject = $1 AND b.attestor = '" BC_ATTESTOR_X509POP "'",
	1, {BYTEAOID}
};

enum
{
	Anum_bn_node = 1,
	Anum_bn_tenant
};

static BcPlan use_jws = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ('" BC_ATTESTOR_X509POP "', $1, $2, to_timestamp($3)) ON CONFLICT DO NOTHING",
	3, {BYTEAOID, TEXTOID, FLOAT8OID}
};

/* ------------------------------------------------------------ the payload */

/* The payload's members, read without raising (bc_json_members): exactly these four. */
enum
{
	P_PURPOSE,
	P_NODE_ID,
	P_CSR_SHA256,
	P_IAT,
	P_COUNT
};

/* Read the payload into m[P_COUNT]; false unless exactly the four members, of their types. */
static bool
payload_ok(const unsigned char *text, size_t len, BcEvidenceMember *m)
{
	static const BcEvidenceMember members[P_COUNT] = {
		{.name = "purpose", .required = true, .max = 128},
		{.name = "nodeId", .required = true, .max = 128},
		{.name = "csrSha256", .required = true, .max = 128},
		/* a plain integer of at most 15 digits: no fraction, no exponent */
		{.name = "iat", .integer = true, .required = true, .max = 15},
	};

	memcpy(m, members, sizeof(members));
	return len > 0 && bc_json_members((const char *) text, (int) len, m, P_COUNT, false);
}

/* ------------------------------------------------------------ the checks */

/* The refusal of a parse fault. */
static const char *
fault_reason(int fault)
{
	switch (fault)
	{
		case BC_X5C_TOO_MANY_INTERMEDIATES:
			return WHO ":too-many-intermediates";
		case BC_X5C_OVERSIZED_CERT:
			return WHO ":oversized-certificate";
		case BC_X5C_WEAK_KEY:
			return WHO ":weak-key";
		case BC_X5C_HUGE_KEY:
			return WHO ":huge-key";
		case BC_X5C_KEY_TYPE:
			return WHO ":key-type";
		case BC_X5C_ALG_MISMATCH:
			return WHO ":alg-mismatch";
	}
	return WHO ":malformed";
}

/* The serial of cert as 32 lower-case hex digits, or NULL when it is not 128 bits. */
static char *
serial_hex(X509 *cert)
{
	BIGNUM	   *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
	unsigned char raw[16];
	char	   *hex;
	int			i;

	if (bn == NULL || BN_is_negative(bn) || BN_num_bytes(bn) > 16 ||
		BN_bn2binpad(bn, raw, 16) != 16)
	{
		BN_free(bn);
		ERR_clear_error();
		return NULL;
	}
	BN_free(bn);
	hex = palloc(33);
	for (i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	return hex;
}

/*
 * Split the leaf's one spiffe URI SAN, a node's SPIFFE ID of this trust domain
 * (bc_spiffe_parse), into *tenant and *node; false when there is not exactly
 * one of that shape.
 */
static bool
node_san(X509 *leaf, char **tenant, char **node)
{
	char	   *uri = NULL;
	bc_spiffe_parts p;

	if (bc_cert_uri_san_count(leaf, BC_SPIFFE_SCHEME) != 1 ||
		bc_cert_uri_san(leaf, BC_SPIFFE_SCHEME, &uri) != BC_OK)
		return false;
	uri = bc_take_cstring(uri);
	if (!bc_spiffe_parse(uri, bc_trust_domain, &p) || p.session != NULL)
		return false;
	*tenant = pnstrdup(p.tenant, p.tenant_len);
	*node = pnstrdup(p.node, p.node_len);
	return true;
}

/*
 * In a repeat of this node's reclaim: the held certificate (the last SPI
 * row) was superseded by the very certificate asked for, i.e. revoked
 * "reclaimed" one generation before it, the node now of that generation.
 * What the reclaim spent is found spent by it.
 */
static bool
superseded_by_repeat(const char *node, const char *reason)
{
	const BcRepeat *r = bc_round_repeat();

	return r != NULL && strcmp(r->node_id, node) == 0 &&
		bc_spi_bool(Anum_nc_revoked) && reason != NULL && strcmp(reason, "reclaimed") == 0 &&
		bc_spi_int4(Anum_nc_generation) == r->generation - 1 &&
		bc_spi_int4(Anum_nc_node_generation) == r->generation;
}

/* A node certificate: the reclaim of its node, or the refusal. */
static void
node_branch(const BcJoinRequest *req, X509 *leaf, const char *node_id_claimed,
			BcAttestResult *res)
{
	char	   *san_tenant;
	char	   *san_node;
	char	   *serial = serial_hex(leaf);
	Datum		v;
	bool		isnull;
	char	   *tenant;
	char	   *reason;
	bool		revoked;
	bool		by_service;
	bool		repeat_ok;
	bytea	   *stored;
	unsigned char *der = NULL;
	int			der_len;
	int64		lifetime;

	if (!node_san(leaf, &san_tenant, &san_node) || strcmp(node_id_claimed, san_node) != 0)
		bc_refuse_join(WHO ":node-id", NULL);
	if (serial == NULL)
		bc_refuse_join(WHO ":unknown-certificate", NULL);
	v = CStringGetTextDatum(serial);
	if (bc_spi_exec(&node_cert, &v, NULL, false, 1) != 1)
		bc_refuse_join(WHO ":unknown-certificate", NULL);
	tenant = bc_spi_text_req(Anum_nc_tenant);
	if (strcmp(bc_spi_text_req(Anum_nc_node_id), san_node) != 0)
		bc_refuse_join(WHO ":node-id", tenant);
	if (strcmp(tenant, san_tenant) != 0)
		bc_refuse_join(WHO ":tenant", tenant);
	/* The very certificate issued, byte for byte. */
	stored = bc_spi_bytea_copy(Anum_nc_certificate);
	der_len = i2d_X509(leaf, &der);
	if (der_len <= 0 || VARSIZE_ANY_EXHDR(stored) != (size_t) der_len ||
		memcmp(VARDATA_ANY(stored), der, der_len) != 0)
	{
		OPENSSL_free(der);
		bc_refuse_join(WHO ":unknown-certificate", tenant);
	}
	/* The subject a repeat must prove again: this very certificate. */
	bc_sha256(der, der_len, res->subject);
	res->has_subject = true;
	OPENSSL_free(der);

	/*
	 * A revoked certificate never reclaims.  The reason names who revoked it:
	 * the service's renewed and reclaimed mean a newer certificate replaced
	 * it (superseded), its retired is told by the node's state below; any
	 * other reason is an operator's (revoked).
	 */
	revoked = bc_spi_bool(Anum_nc_revoked);
	reason = bc_spi_text(Anum_nc_reason);
	by_service = revoked && reason != NULL &&
		(strcmp(reason, "renewed") == 0 || strcmp(reason, "reclaimed") == 0 ||
		 strcmp(reason, "retired") == 0);
	if (revoked && !by_service)
		bc_refuse_join(WHO ":revoked", tenant);
	repeat_ok = superseded_by_repeat(san_node, reason);
	if (!repeat_ok &&
		((revoked && strcmp(reason, "retired") != 0) ||
		 bc_spi_int4(Anum_nc_generation) != bc_spi_int4(Anum_nc_node_generation)))
		bc_refuse_join(WHO ":superseded", tenant);
	if (bc_spi_int8(Anum_nc_expired_for) > bc_x509pop_grace)
		bc_refuse_join(WHO ":beyond-grace", tenant);
	if (strcmp(bc_spi_text_req(Anum_nc_state), "retired") == 0)
		bc_refuse_join(WHO ":retired", tenant);
	/* retired, of a node that is not (no path of the service writes that) */
	if (revoked && !repeat_ok)
		bc_refuse_join(WHO ":revoked", tenant);
	if (bc_spi_bool(Anum_nc_tpm_bound))
		bc_refuse_join(WHO ":tpm-bound", tenant);

	/* The reclaim of this node, as the certificate was: role, kinds, lifetime. */
	res->node_id = pstrdup(san_node);
	res->tenant_id = tenant;
	res->role = bc_spi_text_req(Anum_nc_role);
	res->allowed_kinds = bc_spi_datum(Anum_nc_allowed_kinds, &isnull);
	res->has_allowed_kinds = !isnull;
	if (res->has_allowed_kinds)
		res->allowed_kinds = PointerGetDatum(DatumGetArrayTypePCopy(res->allowed_kinds));
	/* Issued back-dated a minute: the lifetime asked for is a minute less. */
	lifetime = bc_spi_int8(Anum_nc_lifetime) - 60;
	res->cert_ttl_seconds = lifetime < 60 ? 60 : lifetime > INT_MAX ? INT_MAX : (int) lifetime;
	if (strcmp(res->role, BC_ROLE_RAMDISK) == 0 && res->cert_ttl_seconds > BC_RAMDISK_TTL_MAX)
		res->cert_ttl_seconds = BC_RAMDISK_TTL_MAX;
}

/*
 * An external leaf: the first configured root that verifies the chain alone
 * (each root its own store), at now.  Its tenant and pool, the binding of
 * the leaf key, and the node that binding names if any.
 */
static void
external_branch(const BcJoinRequest *req, X509 *const *certs, size_t ncerts,
				const char *node_id_claimed, int64 now, BcAttestResult *res)
{
	uint64		n;
	uint64		i;
	char	   *tenant = NULL;
	char	   *pool = NULL;
	Datum		v;

	n = bc_spi_exec(&roots, NULL, NULL, true, 0);
	for (i = 0; i < n && tenant == NULL; i++)
	{
		bool		isnull;
		bytea	   *der = DatumGetByteaPP(bc_spi_row_datum(i, Anum_rt_certificate, &isnull));
		X509	   *root = NULL;

		CHECK_FOR_INTERRUPTS();
		if (bc_cert_parse((unsigned char *) VARDATA_ANY(der), VARSIZE_ANY_EXHDR(der),
						  &root) != BC_OK)
			bc_invalid_config("x509pop root %s does not parse", bc_spi_row_text(i, Anum_rt_id));
		root = bc_own_x509(CurrentMemoryContext, &root);
		if (bc_cert_verify_path(certs[0], certs + 1, ncerts - 1, root, now) == BC_OK)
		{
			tenant = bc_spi_row_text(i, Anum_rt_tenant);
			pool = bc_spi_row_text(i, Anum_rt_pool);
		}
	}
	if (tenant == NULL)
		bc_refuse_join(WHO ":untrusted-chain", NULL);
	if (node_id_claimed[0] != '\0')
		bc_refuse_join(WHO ":node-id", tenant);

	res->tenant_id = tenant;
	res->pool_id = pool;
	res->role = pstrdup(req->role);
	if (bc_pkey_spki_sha256(X509_get0_pubkey(certs[0]), res->bind) != BC_OK)
		elog(ERROR, "could not hash the leaf key");
	res->has_bind = true;

	/* A bound leaf key comes back as its node, within the root's tenant only. */
	v = PointerGetDatum(bc_bytea(res->bind, BC_SHA256_LEN));
	if (bc_spi_exec(&bound_node, &v, NULL, false, 1) == 1)
	{
		if (strcmp(bc_spi_text_req(Anum_bn_tenant), tenant) != 0)
			bc_refuse_join(WHO ":bound-elsewhere", tenant);
		res->node_id = bc_spi_text_req(Anum_bn_node);
	}
}

/*
 * 1 when the leaf chains to the node CA's root (node-ca.crt's last
 * certificate) through the presented certificates, node-ca.crt's own and
 * node-ca.previous.crt's: a certificate of a previous intermediate under the
 * same root counts.
 */
static bool
node_ca_path(const BcKeys *keys, X509 **certs, int ncerts, int64 at)
{
	X509	   *untrusted[2 * BC_NODE_CA_CHAIN_MAX + 16];
	size_t		n = 0;
	int			i;

	for (i = 1; i < ncerts && n < lengthof(untrusted); i++)
		untrusted[n++] = certs[i];
	for (i = 0; i + 1 < keys->n_node_ca_chain && n < lengthof(untrusted); i++)
		untrusted[n++] = keys->node_ca_chain[i];
	for (i = 0; i < keys->n_node_ca_previous && n < lengthof(untrusted); i++)
		untrusted[n++] = keys->node_ca_previous[i];
	return bc_cert_verify_path(certs[0], untrusted, n, keys->node_ca_anchor, at) == BC_OK;
}

/* verify(): a machine proves a certificate it holds. */
static void
x509pop_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcAttestResult *res = &out->result;
	const BcKeys *keys = bc_keys();
	const char *jws;
	size_t		len;
	bc_x5c_jws	j;
	int			fault = BC_X5C_NONE;
	BcEvidenceMember ps[P_COUNT];
	int64		iat = 0;
	int64		now = bc_timestamp_to_unix(bc_now());
	int64		not_after;
	int64		at;
	X509	   *certs[BC_X5C_CERTS_MAX];
	size_t		ncerts;
	size_t		signing_input_len;
	const char *refusal = NULL;
	uint32_t	flags;
	size_t		i;
	Datum		v[3];
	char		nn[3] = {' ', ' ', ' '};

	/* x509pop takes no token; one limited to other attestors is refused. */
	bc_refuse_token_limited_to_others(WHO, req->token);
	if (req->attestation == NULL)
		bc_refuse_join(WHO ":malformed", NULL);
	jws = VARDATA_ANY(req->attestation);
	len = VARSIZE_ANY_EXHDR(req->attestation);

	/* Bounds, keys, header: src/common.  The certificates become the context's. */
	if (bc_jws_x5c_parse(jws, len, X509POP_PAYLOAD_MAX, &j, &fault) != BC_OK)
		bc_refuse_join(fault_reason(fault), NULL);
	ncerts = j.ncerts;
	/* Borrowed from the context from here on; j's own pointers are cleared. */
	for (i = 0; i < ncerts; i++)
		certs[i] = bc_own_x509(CurrentMemoryContext, &j.certs[i]);
	signing_input_len = j.signing_input_len;

	/* The payload; its purpose, this CSR, fresh; then the signature. */
	if (!payload_ok(j.payload, j.payload_len, ps))
		refusal = WHO ":malformed";
	else if (strcmp(ps[P_PURPOSE].value, "x509pop") != 0)
		refusal = WHO ":purpose";
	else if (strcmp(ps[P_CSR_SHA256].value, req->csr_sha256_b64) != 0 &&
			 !bc_check_no_csr("the payload's csrSha256 is the CSR's"))
		refusal = WHO ":csr-binding";
	else if ((iat = strtoll(ps[P_IAT].value, NULL, 10)) < now - bc_x509pop_window ||
			 iat > now + bc_x509pop_window)
		refusal = WHO ":stale-iat";
	else
	{
		/* A view of j over the borrowed certificates: never freed itself. */
		bc_x5c_jws	view = j;

		memcpy(view.certs, certs, sizeof(X509 *) * ncerts);
		if (bc_jws_x5c_verify(&view, jws) != BC_OK)
			refusal = WHO ":signature";
	}
	bc_x5c_jws_free(&j);		/* its certificates are the context's: cleared above */
	if (refusal != NULL)
		bc_refuse_join(refusal, NULL);

	/* The leaf signs and is no CA. */
	flags = X509_get_extension_flags(certs[0]);
	if (!(flags & EXFLAG_KUSAGE) || !(X509_get_key_usage(certs[0]) & KU_DIGITAL_SIGNATURE))
		bc_refuse_join(WHO ":key-usage", NULL);
	if (X509_check_ca(certs[0]) != 0)
		bc_refuse_join(WHO ":ca-leaf", NULL);

	/* The node CA alone, at min(now, notAfter); else each configured root alone, at now. */
	if (bc_cert_not_after(certs[0], &not_after) != BC_OK)
		bc_refuse_join(WHO ":malformed", NULL);
	at = not_after - 1 < now ? not_after - 1 : now;
	if (node_ca_path(keys, certs, ncerts, at))
		node_branch(req, certs[0], ps[P_NODE_ID].value, res);
	else
		external_branch(req, certs, ncerts, ps[P_NODE_ID].value, now, res);

	/* Once: the signing input, until it could no longer be fresh. */
	v[0] = PointerGetDatum(palloc(VARHDRSZ + BC_SHA256_LEN));
	SET_VARSIZE(DatumGetPointer(v[0]), VARHDRSZ + BC_SHA256_LEN);
	bc_sha256(jws, signing_input_len, (unsigned char *) VARDATA(DatumGetPointer(v[0])));
	if (res->node_id != NULL)
		v[1] = CStringGetTextDatum(res->node_id);
	else
		nn[1] = 'n';
	v[2] = Float8GetDatum((double) (iat + bc_x509pop_window));
	if (bc_spi_exec(&use_jws, v, nn, false, 0) != 1 &&
		!bc_spent_by_repeat(WHO, (unsigned char *) VARDATA(DatumGetPointer(v[0]))))
		bc_refuse_join(WHO ":replay", res->tenant_id);
}

const BcAttestor bc_x509pop_attestor = {
	.id = WHO,
	.version = "0.1.0",
	.roles = x509pop_roles,
	.verify = x509pop_verify,
};

PG_FUNCTION_INFO_V1(bc_x509pop_root_parse);

/*
 * x509pop_root_parse(certificate_pem text, OUT der bytea, OUT sha256 bytea,
 * OUT subject text, OUT not_after timestamptz): exactly one PEM certificate,
 * a CA, its key within the limits of x509pop; otherwise 22023.
 */
Datum
bc_x509pop_root_parse(PG_FUNCTION_ARGS)
{
	text	   *pem = PG_GETARG_TEXT_PP(0);
	BIO		   *bio;
	X509	   *cert;
	X509	   *extra;
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	unsigned char *der = NULL;
	int			der_len;
	unsigned char digest[BC_SHA256_LEN];
	int64		not_after;
	char	   *subject;
	BIO		   *name;
	BUF_MEM    *mem;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "x509pop_root_parse must return a record");
	if (VARSIZE_ANY_EXHDR(pem) > 4 * BC_X5C_CERT_MAX)
		bc_invalid_input("the certificate is over %d bytes of PEM", 4 * BC_X5C_CERT_MAX);
	bio = BIO_new_mem_buf(VARDATA_ANY(pem), (int) VARSIZE_ANY_EXHDR(pem));
	if (bio == NULL)
		elog(ERROR, "out of memory");
	cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	extra = cert != NULL ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	ERR_clear_error();
	if (cert == NULL)
		bc_invalid_input("certificate_pem holds no PEM certificate");
	cert = bc_own_x509(CurrentMemoryContext, &cert);
	if (extra != NULL)
	{
		(void) bc_own_x509(CurrentMemoryContext, &extra);
		bc_invalid_input("certificate_pem holds more than one certificate: add each root by itself");
	}
	if (X509_check_ca(cert) < 1)
		bc_invalid_input("the certificate is no CA certificate (basicConstraints CA:TRUE)");
	if (bc_x5c_key_fault(X509_get0_pubkey(cert)) != BC_X5C_NONE)
		bc_invalid_input("the certificate's key is not P-256, P-384 or RSA of 2048 to 8192 bits");
	if (bc_cert_not_after(cert, &not_after) != BC_OK)
		bc_invalid_input("the certificate's notAfter cannot be read");
	der_len = i2d_X509(cert, &der);
	if (der_len <= 0 || der_len > BC_X5C_CERT_MAX)
	{
		OPENSSL_free(der);
		bc_invalid_input("the certificate is over %d bytes of DER", BC_X5C_CERT_MAX);
	}
	values[0] = PointerGetDatum(bc_bytea(der, der_len));
	bc_sha256(der, der_len, digest);
	OPENSSL_free(der);
	values[1] = PointerGetDatum(bc_bytea(digest, BC_SHA256_LEN));
	name = BIO_new(BIO_s_mem());
	if (name == NULL ||
		X509_NAME_print_ex(name, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253) < 0)
	{
		BIO_free(name);
		elog(ERROR, "could not print the subject");
	}
	BIO_get_mem_ptr(name, &mem);
	subject = pnstrdup(mem->data, mem->length);
	BIO_free(name);
	values[2] = CStringGetTextDatum(subject);
	values[3] = TimestampTzGetDatum((TimestampTz) ((not_after -
													(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY) * USECS_PER_SEC));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
