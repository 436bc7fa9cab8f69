/*
 * compromise.c: a compromised node CA (issue 45, point 4).
 *
 * bc_join.mark_ca_compromised(pem) (sql/bc_join.sql) records an earlier
 * intermediate in bc_join.compromised_cas and revokes, with cACompromise,
 * every live node and session certificate it issued.  This file holds what
 * needs OpenSSL:
 *
 * - compromised_ca_facts(pem): the certificate's DER, subject, key id and
 *   key hash; refuses a certificate that is no CA, and the current issuing
 *   CA or another certificate of its chain (rotate first);
 * - bc_cert_issued_by(ca, certificate): the certificate's issuer name against the
 *   CA's subject, and its authority key id against the CA's subject key id
 *   (as X509_check_issued compares them), read by OpenSSL's ASN.1 decoder
 *   with a template that leaves the key undecoded: d2i_X509 decodes the
 *   public key through OpenSSL 3's decoders, 40 times the cost, which a
 *   sweep over a whole fleet would pay per certificate;
 * - for renew.c: whether a stored certificate's issuer is a compromised CA
 *   (the one renewal it then gets) and the record of that renewal;
 * - for node_cert.c: the issuing CA is never one marked compromised (a key
 *   directory not rotated, e.g. on another node of an HA formation).
 */
#include "bc_join.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include <openssl/asn1t.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

/* The certificate's SHA-256 over the DER of its SubjectPublicKeyInfo. */
static void
cert_spki_sha256(X509 *cert, unsigned char out[BC_SHA256_LEN])
{
	if (bc_cert_spki_sha256(cert, out) != BC_OK)
		elog(ERROR, "could not hash a certificate's public key");
}

/* True when a and b certify the same key, or have the same subject and key id. */
static bool
same_ca(X509 *a, X509 *b)
{
	const ASN1_OCTET_STRING *ka = X509_get0_subject_key_id(a);
	const ASN1_OCTET_STRING *kb = X509_get0_subject_key_id(b);
	EVP_PKEY   *pa = X509_get0_pubkey(a);
	EVP_PKEY   *pb = X509_get0_pubkey(b);

	if (pa != NULL && pb != NULL && EVP_PKEY_eq(pa, pb) == 1)
		return true;
	ERR_clear_error();
	return ka != NULL && kb != NULL && ASN1_OCTET_STRING_cmp(ka, kb) == 0 &&
		X509_NAME_cmp(X509_get_subject_name(a), X509_get_subject_name(b)) == 0;
}

PG_FUNCTION_INFO_V1(bc_compromised_ca_facts);

/*
 * compromised_ca_facts(ca_certificate text): (certificate, subject,
 * subject_name, key_id, spki_sha256) of one PEM CA certificate; 22023 when
 * it is none, 55000 when it is the current issuing CA or of its chain.
 */
Datum
bc_compromised_ca_facts(PG_FUNCTION_ARGS)
{
	char	   *pem = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const BcKeys *keys;
	BIO		   *bio;
	X509	   *ca;
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	unsigned char *der = NULL;
	int			len;
	unsigned char spki[BC_SHA256_LEN];
	const ASN1_OCTET_STRING *kid;
	char	   *subject;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "compromised_ca_facts must return a record");
	tupdesc = BlessTupleDesc(tupdesc);

	if (strlen(pem) > 65536)
		bc_invalid_input("ca_certificate is over 65536 bytes");
	bio = BIO_new_mem_buf(pem, -1);
	if (bio == NULL)
		elog(ERROR, "out of memory");
	ca = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	BIO_free(bio);
	ERR_clear_error();
	if (ca == NULL)
		bc_invalid_input("ca_certificate is not a PEM certificate");
	ca = bc_own_x509(CurrentMemoryContext, &ca);
	if (X509_check_ca(ca) == 0)
		bc_invalid_input("ca_certificate is not a CA certificate");
	kid = X509_get0_subject_key_id(ca);
	if (kid == NULL)
		bc_invalid_input("ca_certificate has no subject key identifier");

	bc_require_config();
	keys = bc_keys();
	if (same_ca(ca, keys->node_ca))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this is the current issuing CA"),
				 errdetail("Every certificate is issued by it: marking it compromised would leave nothing to issue from."),
				 errhint("Rotate first: bc-join-keygen --rotate-intermediate, then mark the previous intermediate.")));
	for (i = 1; i < keys->n_node_ca_chain; i++)
		if (same_ca(ca, keys->node_ca_chain[i]))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("this is a CA of the current chain (node-ca.crt)"),
					 errdetail("The current issuing CA chains to it, and agents pin the root."),
					 errhint("A compromised root needs a new trust anchor: a new key directory and a new service_keys() file for every agent.")));

	len = i2d_X509(ca, &der);
	if (len <= 0)
		elog(ERROR, "could not encode a certificate");
	values[0] = PointerGetDatum(bc_bytea(der, len));
	OPENSSL_free(der);
	subject = X509_NAME_oneline(X509_get_subject_name(ca), NULL, 0);
	if (subject == NULL)
		elog(ERROR, "out of memory");
	values[1] = CStringGetTextDatum(subject);
	OPENSSL_free(subject);
	der = NULL;
	len = i2d_X509_NAME(X509_get_subject_name(ca), &der);
	if (len <= 0)
		elog(ERROR, "could not encode a name");
	values[2] = PointerGetDatum(bc_bytea(der, len));
	OPENSSL_free(der);
	values[3] = PointerGetDatum(bc_bytea(ASN1_STRING_get0_data(kid), ASN1_STRING_length(kid)));
	cert_spki_sha256(ca, spki);
	values[4] = PointerGetDatum(bc_bytea(spki, BC_SHA256_LEN));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * A certificate as far as bc_cert_issued_by() reads it: RFC 5280's Certificate and
 * TBSCertificate, the validity, subject and key left as undecoded ANY.
 */
typedef struct BcTbsLite
{
	ASN1_INTEGER *version;
	ASN1_INTEGER *serial;
	X509_ALGOR *signature;
	X509_NAME  *issuer;
	ASN1_TYPE  *validity;
	ASN1_TYPE  *subject;
	ASN1_TYPE  *spki;
	ASN1_BIT_STRING *issuer_uid;
	ASN1_BIT_STRING *subject_uid;
	STACK_OF(X509_EXTENSION) *extensions;
} BcTbsLite;

ASN1_SEQUENCE(BcTbsLite) = {
	ASN1_EXP_OPT(BcTbsLite, version, ASN1_INTEGER, 0),
	ASN1_SIMPLE(BcTbsLite, serial, ASN1_INTEGER),
	ASN1_SIMPLE(BcTbsLite, signature, X509_ALGOR),
	ASN1_SIMPLE(BcTbsLite, issuer, X509_NAME),
	ASN1_SIMPLE(BcTbsLite, validity, ASN1_ANY),
	ASN1_SIMPLE(BcTbsLite, subject, ASN1_ANY),
	ASN1_SIMPLE(BcTbsLite, spki, ASN1_ANY),
	ASN1_IMP_OPT(BcTbsLite, issuer_uid, ASN1_BIT_STRING, 1),
	ASN1_IMP_OPT(BcTbsLite, subject_uid, ASN1_BIT_STRING, 2),
	ASN1_EXP_SEQUENCE_OF_OPT(BcTbsLite, extensions, X509_EXTENSION, 3)
} static_ASN1_SEQUENCE_END(BcTbsLite)

typedef struct BcCertLite
{
	BcTbsLite  *tbs;
	X509_ALGOR *sigalg;
	ASN1_BIT_STRING *sig;
} BcCertLite;

ASN1_SEQUENCE(BcCertLite) = {
	ASN1_SIMPLE(BcCertLite, tbs, BcTbsLite),
	ASN1_SIMPLE(BcCertLite, sigalg, X509_ALGOR),
	ASN1_SIMPLE(BcCertLite, sig, ASN1_BIT_STRING)
} static_ASN1_SEQUENCE_END(BcCertLite)

/*
 * Whether ca issued the certificate (DER): its issuer name is ca's subject
 * and its authority key id, when it has one, ca's subject key id.  False
 * when it does not decode (or has bytes after it).
 */
bool
bc_cert_issued_by(X509 *ca, const unsigned char *der, size_t len)
{
	const unsigned char *p = der;
	BcCertLite *c;
	bool		issued = false;

	if (len > LONG_MAX)
		return false;
	c = (BcCertLite *) ASN1_item_d2i(NULL, &p, (long) len, ASN1_ITEM_rptr(BcCertLite));
	if (c != NULL && p == der + len &&
		X509_NAME_cmp(c->tbs->issuer, X509_get_subject_name(ca)) == 0)
	{
		int			crit = 0;
		AUTHORITY_KEYID *akid = X509V3_get_d2i(c->tbs->extensions, NID_authority_key_identifier,
											   &crit, NULL);
		const ASN1_OCTET_STRING *ski = X509_get0_subject_key_id(ca);

		/* Absent (crit -1): the name alone, as X509_check_issued; twice or undecodable: no. */
		if (akid == NULL)
			issued = crit == -1;
		else
			issued = akid->keyid == NULL ||
				(ski != NULL && ASN1_OCTET_STRING_cmp(akid->keyid, ski) == 0);
		AUTHORITY_KEYID_free(akid);
	}
	ASN1_item_free((ASN1_VALUE *) c, ASN1_ITEM_rptr(BcCertLite));
	ERR_clear_error();
	return issued;
}

/* The CA certificate bc_cert_issued_by() was given last, kept for the next call of the scan. */
typedef struct IssuerCache
{
	bytea	   *der;
	X509	   *ca;
} IssuerCache;

PG_FUNCTION_INFO_V1(bc_issued_by);

/*
 * issued_by(certificate bytea, ca bytea): whether ca issued certificate
 * (bc_cert_issued_by() above); false when either does not parse.
 */
Datum
bc_issued_by(PG_FUNCTION_ARGS)
{
	bytea	   *leaf_der = PG_GETARG_BYTEA_PP(0);
	bytea	   *ca_der = PG_GETARG_BYTEA_PP(1);
	IssuerCache *cache = (IssuerCache *) fcinfo->flinfo->fn_extra;

	CHECK_FOR_INTERRUPTS();
	if (cache == NULL || VARSIZE_ANY_EXHDR(cache->der) != VARSIZE_ANY_EXHDR(ca_der) ||
		memcmp(VARDATA_ANY(cache->der), VARDATA_ANY(ca_der), VARSIZE_ANY_EXHDR(ca_der)) != 0)
	{
		MemoryContext cxt = fcinfo->flinfo->fn_mcxt;
		X509	   *ca = NULL;

		if (bc_cert_parse((unsigned char *) VARDATA_ANY(ca_der), VARSIZE_ANY_EXHDR(ca_der),
						  &ca) != BC_OK)
			PG_RETURN_BOOL(false);
		if (cache == NULL)
			cache = MemoryContextAllocZero(cxt, sizeof(IssuerCache));
		cache->ca = bc_own_x509(cxt, &ca);
		cache->der = MemoryContextAlloc(cxt, VARHDRSZ + VARSIZE_ANY_EXHDR(ca_der));
		SET_VARSIZE(cache->der, VARHDRSZ + VARSIZE_ANY_EXHDR(ca_der));
		memcpy(VARDATA(cache->der), VARDATA_ANY(ca_der), VARSIZE_ANY_EXHDR(ca_der));
		fcinfo->flinfo->fn_extra = cache;
	}
	PG_RETURN_BOOL(bc_cert_issued_by(cache->ca, (unsigned char *) VARDATA_ANY(leaf_der),
							 VARSIZE_ANY_EXHDR(leaf_der)));
}

static BcPlan compromised_cas = {
	"SELECT certificate FROM bc_join.compromised_cas", 0, {InvalidOid}
};

/*
 * True when the certificate (DER, as stored) was issued by a CA marked
 * compromised (SPI connected).
 */
bool
bc_issuer_compromised(bytea *der)
{
	uint64		n;
	uint64		i;

	n = bc_spi_exec(&compromised_cas, NULL, NULL, false, 0);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		bytea	   *ca_der = DatumGetByteaPP(bc_spi_row_datum(i, 1, &isnull));
		X509	   *ca = NULL;
		bool		issued;

		if (bc_cert_parse((unsigned char *) VARDATA_ANY(ca_der), VARSIZE_ANY_EXHDR(ca_der),
						  &ca) != BC_OK)
			continue;
		issued = bc_cert_issued_by(ca, (unsigned char *) VARDATA_ANY(der), VARSIZE_ANY_EXHDR(der));
		X509_free(ca);
		if (issued)
			return true;
	}
	return false;
}

/* True when the certificate's key is the one a CSR asks for (its SPKI SHA-256). */
bool
bc_cert_key_is(bytea *der, const unsigned char spki_sha256[BC_SHA256_LEN])
{
	X509	   *cert = NULL;
	unsigned char mine[BC_SHA256_LEN];

	if (bc_cert_parse((unsigned char *) VARDATA_ANY(der), VARSIZE_ANY_EXHDR(der), &cert) != BC_OK)
		elog(ERROR, "a stored certificate does not parse");
	cert = bc_own_x509(CurrentMemoryContext, &cert);
	cert_spki_sha256(cert, mine);
	return memcmp(mine, spki_sha256, BC_SHA256_LEN) == 0;
}

static BcPlan renewed_once = {
	"SELECT successor FROM bc_join.compromise_renewals WHERE serial = $1", 1, {TEXTOID}
};

/* True when the certificate already had its one renewal after a CA compromise. */
bool
bc_compromise_renewed(const char *serial)
{
	Datum		v = CStringGetTextDatum(serial);

	return bc_spi_exec(&renewed_once, &v, NULL, false, 1) == 1;
}

static BcPlan record_renewal = {
	"INSERT INTO bc_join.compromise_renewals (serial, successor) VALUES ($1, $2)", 2, {TEXTOID, TEXTOID}
};

/* Record the one renewal of a certificate revoked for its CA's compromise. */
void
bc_compromise_record_renewal(const char *serial, const char *successor)
{
	Datum		v[2];

	v[0] = CStringGetTextDatum(serial);
	v[1] = CStringGetTextDatum(successor);
	bc_spi_exec(&record_renewal, v, NULL, false, 0);
}

/*
 * Issuing takes the lock mark_ca_compromised() waits on (it holds both
 * tables EXCLUSIVE): a certificate issued from a CA it marks is either
 * committed before its sweep, which then revokes it, or waits for the mark,
 * then sees it below.
 */
static BcPlan issuing_lock = {
	"LOCK TABLE bc_join.node_certs, bc_join.session_certs IN ROW EXCLUSIVE MODE", 0, {InvalidOid}
};
static BcPlan issuer_marked = {
	"SELECT subject FROM bc_join.compromised_cas WHERE spki_sha256 = $1 LIMIT 1", 1, {BYTEAOID}
};

/*
 * INVALID_CONFIG when the issuing CA (node-ca.key's) is marked compromised:
 * a key directory not rotated never issues again (SPI connected).
 */
void
bc_require_issuer_not_compromised(X509 *node_ca)
{
	unsigned char spki[BC_SHA256_LEN];
	Datum		v;

	bc_spi_exec(&issuing_lock, NULL, NULL, false, 0);
	cert_spki_sha256(node_ca, spki);
	v = PointerGetDatum(bc_bytea(spki, BC_SHA256_LEN));
	if (bc_spi_exec(&issuer_marked, &v, NULL, false, 1) == 1)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the issuing CA of bc_join.key_dir is marked compromised"),
				 errdetail("INVALID_CONFIG: node-ca.key certifies %s, which bc_join.mark_ca_compromised() recorded: nothing is issued from it.",
						   bc_spi_text_req(1)),
				 errhint("Rotate the intermediate in this key directory: bc-join-keygen --rotate-intermediate.")));
}

/* ----------------------------------------------- a compromised signing key */

static BcPlan kids_marked = {
	"SELECT k FROM bc_join.compromised_kids() AS k", 0, {InvalidOid}
};

/*
 * The kids of the signing keys marked compromised (mark_key_compromised), a
 * List of C strings in the caller's memory context.  Connects SPI itself
 * (within a caller's connection too).
 */
List *
bc_compromised_kids(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *out = NIL;
	uint64		n;
	uint64		i;

	bc_spi_connect();
	n = bc_spi_exec(&kids_marked, NULL, NULL, true, 0);
	for (i = 0; i < n; i++)
	{
		char	   *kid = MemoryContextStrdup(cxt, bc_spi_row_text(i, 1));
		MemoryContext old = MemoryContextSwitchTo(cxt);

		out = lappend(out, kid);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return out;
}

/* True when kid is one of kids (bc_compromised_kids()). */
bool
bc_kid_listed(List *kids, const char *kid)
{
	ListCell   *lc;

	foreach(lc, kids)
		if (strcmp((const char *) lfirst(lc), kid) == 0)
			return true;
	return false;
}

/*
 * INVALID_CONFIG when the current signing key (signing.key) is marked
 * compromised: a key directory whose marked key became current again
 * (--promote of it, a directory restored) signs nothing.
 */
/*
 * Run as the table's owner but planned under the caller's search_path: the
 * operator is named with its schema, so that no operator of the caller's
 * schemas can stand in for it.
 */
static BcPlan kid_marked = {
	"SELECT 1 FROM bc_join.compromised_keys WHERE kid OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}
};

/*
 * True when kid is marked compromised: one probe of compromised_keys' key,
 * read as the table's owner whoever calls (the signing paths run as their
 * caller too: service_keys(), a tenant operator's), as PostgreSQL's own
 * foreign-key checks do (SECURITY_LOCAL_USERID_CHANGE: only this query).
 * The same answer as bc_kid_listed(bc_compromised_kids(), kid) without
 * calling that SQL function, which PostgreSQL plans again at every call
 * (SECURITY DEFINER with SET: never inlined, no plan kept): ~90 k
 * instructions a signed answer, this ~15 k.  Connects SPI itself.
 */
static bool
kid_compromised(const char *kid)
{
	Oid			relid;
	Oid			owner;
	Relation	rel;
	Oid			save_userid;
	int			save_sec;
	Datum		v = CStringGetTextDatum(kid);
	bool		marked = false;

	relid = get_relname_relid("compromised_keys", get_namespace_oid("bc_join", false));
	if (!OidIsValid(relid))
		elog(ERROR, "bc_join.compromised_keys does not exist");
	rel = table_open(relid, AccessShareLock);
	owner = RelationGetForm(rel)->relowner;
	table_close(rel, NoLock);

	bc_spi_connect();
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
	PG_TRY();
	{
		marked = bc_spi_exec(&kid_marked, &v, NULL, true, 1) == 1;
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec);
	}
	PG_END_TRY();
	SPI_finish();
	return marked;
}

void
bc_require_signing_key_live(const BcKeys *keys)
{
	if (kid_compromised(keys->signing_kid))
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the current signing key of bc_join.key_dir is marked compromised"),
				 errdetail("INVALID_CONFIG: signing.key is the key %s, which bc_join.mark_key_compromised() recorded: nothing is signed with it.",
						   keys->signing_kid),
				 errhint("Make another key current: bc-join-keygen --stage DIR, then --promote DIR.")));
}

static BcPlan mark_kid = {
	"INSERT INTO bc_join.compromised_keys (kid, held) VALUES ($1, $2) ON CONFLICT DO NOTHING",
	2, {TEXTOID, BOOLOID}
};

PG_FUNCTION_INFO_V1(bc_mark_key_compromised);

/*
 * mark_key_compromised(kid text): record a service signing key (its RFC
 * 7638 kid) as compromised: service_keys() and signed_service_keys() publish
 * it no more, nothing signs with it or verifies with it again.  Refuses the
 * current signing key (55000: promote another first); a kid this key
 * directory does not hold is recorded too (a key already deleted, another
 * HA node's).  Event and audit row; true when it was not marked before.
 */
Datum
bc_mark_key_compromised(PG_FUNCTION_ARGS)
{
	char	   *kid = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const BcKeys *keys;
	bool		held = false;
	size_t		i;
	Datum		v[2];
	bool		marked;
	StringInfoData buf;
	Jsonb	   *j;

	if (strlen(kid) != 43 || strspn(kid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != 43)
		bc_invalid_input("a kid is the key's RFC 7638 thumbprint: 43 base64url characters");
	bc_require_config();
	keys = bc_keys();
	if (strcmp(kid, keys->signing_kid) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this is the current signing key"),
				 errdetail("Every answer is signed by it: marking it compromised would leave nothing to sign with."),
				 errhint("Rotate first: bc-join-keygen --stage DIR, then --promote DIR, then mark the previous key.")));
	for (i = 0; i < (size_t) keys->n_signing; i++)
		held |= strcmp(kid, keys->signing_kids[i]) == 0;
	for (i = 0; i < (size_t) keys->n_signing_peers; i++)
	{
		char		peer[44];

		if (bc_jwk_thumbprint(keys->signing_peers[i], peer) == BC_OK)
			held |= strcmp(kid, peer) == 0;
	}
	bc_require_primary();
	bc_spi_connect();
	v[0] = CStringGetTextDatum(kid);
	v[1] = BoolGetDatum(held);
	marked = bc_spi_exec(&mark_kid, v, NULL, false, 0) == 1;
	if (marked)
	{
		initStringInfo(&buf);
		bc_json_begin(&buf);
		bc_json_member(&buf, "kid", kid);
		bc_json_member_bool(&buf, "held", held);
		bc_json_end(&buf);
		j = bc_jsonb(buf.data);
		bc_emit_event("root", "signing_key.compromised", j);
		bc_audit("signing_key.compromised", NULL, NULL, j);
	}
	SPI_finish();
	PG_RETURN_BOOL(marked);
}
