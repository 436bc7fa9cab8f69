/*
 * ocsp.c: an OCSP request parsed by OpenSSL and bounded (ocsp.h).  Nothing
 * here reads DER by hand: d2i_OCSP_REQUEST parses the request, OpenSSL's
 * OCSP accessors hand out the CertIDs and extensions, d2i_ASN1_OCTET_STRING
 * unwraps the nonce (its extnValue is the DER of an OCTET STRING, so the
 * nonce is wrapped twice: RFC 6960 4.4.1, RFC 9654).  The answer is
 * built with OpenSSL's responder API (OCSP_basic_add1_status,
 * OCSP_basic_sign_ctx), the responder certificate with its X509 API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/ocsp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "ocsp.h"

/* Write a reason into err (when there is room) and return -1. */
static int
fail(char *err, size_t errlen, const char *what)
{
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "%s", what);
	return -1;
}

/*
 * The serial as bc_join writes serials: lower-case hex of the big-endian
 * magnitude, zero-padded to 32 digits when it fits 16 bytes; "" when the
 * serial is negative, zero or over 32 bytes (no certificate has it).
 */
static int
serial_hex(const ASN1_INTEGER *serial, char out[65])
{
	BIGNUM	   *bn = ASN1_INTEGER_to_BN(serial, NULL);
	unsigned char bin[32];
	int			n,
				width,
				i;

	out[0] = '\0';
	if (bn == NULL)
		return -1;
	n = BN_num_bytes(bn);
	if (BN_is_negative(bn) || BN_is_zero(bn) || n > (int) sizeof(bin))
	{
		BN_free(bn);
		return 0;
	}
	width = n <= 16 ? 16 : n;
	if (BN_bn2binpad(bn, bin, width) != width)
	{
		BN_free(bn);
		return -1;
	}
	BN_free(bn);
	for (i = 0; i < width; i++)
		snprintf(out + 2 * i, 3, "%02x", bin[i]);
	return 0;
}

/* One CertID into *id; 0 or -1 with err set. */
static int
take_certid(OCSP_CERTID *cid, bc_ocsp_certid *id, char *err, size_t errlen)
{
	ASN1_OCTET_STRING *name_hash = NULL,
			   *key_hash = NULL;
	ASN1_OBJECT *md = NULL;
	ASN1_INTEGER *serial = NULL;
	OCSP_CERTID *back;
	unsigned char *p;
	const unsigned char *q;
	int			len;

	if (cid == NULL || OCSP_id_get0_info(&name_hash, &md, &key_hash, &serial, cid) != 1
		|| name_hash == NULL || md == NULL || key_hash == NULL || serial == NULL)
		return fail(err, errlen, "a request has no complete certID");
	id->hash_nid = OBJ_obj2nid(md);
	len = ASN1_STRING_length(name_hash);
	if (len < 0 || (size_t) len > sizeof(id->name_hash))
		return fail(err, errlen, "a certID's issuerNameHash is over 64 bytes");
	memcpy(id->name_hash, ASN1_STRING_get0_data(name_hash), (size_t) len);
	id->name_hash_len = (size_t) len;
	len = ASN1_STRING_length(key_hash);
	if (len < 0 || (size_t) len > sizeof(id->key_hash))
		return fail(err, errlen, "a certID's issuerKeyHash is over 64 bytes");
	memcpy(id->key_hash, ASN1_STRING_get0_data(key_hash), (size_t) len);
	id->key_hash_len = (size_t) len;
	if (serial_hex(serial, id->serial_hex) != 0)
		return fail(err, errlen, "a certID's serialNumber cannot be read");
	len = i2d_OCSP_CERTID(cid, NULL);
	if (len <= 0 || (size_t) len > sizeof(id->der))
		return fail(err, errlen, "a certID's DER is over 256 bytes");
	p = id->der;
	if (i2d_OCSP_CERTID(cid, &p) != len)
		return fail(err, errlen, "a certID cannot be encoded");
	id->der_len = (size_t) len;
	/*
	 * What OpenSSL accepted must read back as one CertID (an ANY parameter
	 * of the hash algorithm can hold what it cannot): the answer echoes it.
	 */
	q = id->der;
	back = d2i_OCSP_CERTID(NULL, &q, len);
	OCSP_CERTID_free(back);
	if (back == NULL || q != id->der + len)
		return fail(err, errlen, "a certID does not encode back to a CertID");
	return 0;
}

/* Whether an extension list has a critical extension other than the nonce. */
static int
unknown_critical(int count, X509_EXTENSION *(*get) (const void *, int), const void *owner)
{
	int			i;

	for (i = 0; i < count; i++)
	{
		X509_EXTENSION *ext = get(owner, i);

		if (ext != NULL && X509_EXTENSION_get_critical(ext)
			&& OBJ_obj2nid(X509_EXTENSION_get_object(ext)) != NID_id_pkix_OCSP_Nonce)
			return 1;
	}
	return 0;
}

/* OCSP_REQUEST_get_ext with the signature unknown_critical takes. */
static X509_EXTENSION *
request_ext(const void *req, int i)
{
	return OCSP_REQUEST_get_ext((OCSP_REQUEST *) req, i);
}

/* OCSP_ONEREQ_get_ext with the signature unknown_critical takes. */
static X509_EXTENSION *
onereq_ext(const void *one, int i)
{
	return OCSP_ONEREQ_get_ext((OCSP_ONEREQ *) one, i);
}

/* The nonce of a request (RFC 9654) into *out; 0 or -1 with err set. */
static int
take_nonce(OCSP_REQUEST *req, bc_ocsp_request *out, char *err, size_t errlen)
{
	int			idx = OCSP_REQUEST_get_ext_by_NID(req, NID_id_pkix_OCSP_Nonce, -1);
	X509_EXTENSION *ext;
	ASN1_OCTET_STRING *value;
	ASN1_OCTET_STRING *inner;
	const unsigned char *p;
	long		vlen;
	int			nlen;

	if (idx < 0)
		return 0;
	if (OCSP_REQUEST_get_ext_by_NID(req, NID_id_pkix_OCSP_Nonce, idx) >= 0)
		return fail(err, errlen, "the request has two nonce extensions");
	ext = OCSP_REQUEST_get_ext(req, idx);
	value = ext != NULL ? X509_EXTENSION_get_data(ext) : NULL;
	if (value == NULL)
		return fail(err, errlen, "the nonce extension has no value");
	p = ASN1_STRING_get0_data(value);
	vlen = ASN1_STRING_length(value);
	inner = d2i_ASN1_OCTET_STRING(NULL, &p, vlen);
	if (inner == NULL || p != ASN1_STRING_get0_data(value) + vlen)
	{
		ASN1_OCTET_STRING_free(inner);
		return fail(err, errlen, "the nonce extension's value is not one OCTET STRING");
	}
	nlen = ASN1_STRING_length(inner);
	if (nlen < 1 || nlen > BC_OCSP_NONCE_MAX)
	{
		ASN1_OCTET_STRING_free(inner);
		return fail(err, errlen, "the nonce is not 1 to 128 octets");
	}
	memcpy(out->nonce, ASN1_STRING_get0_data(inner), (size_t) nlen);
	out->nonce_len = (size_t) nlen;
	out->has_nonce = 1;
	ASN1_OCTET_STRING_free(inner);
	return 0;
}

/* Parse and bound one OCSP request (ocsp.h). */
int
bc_ocsp_parse_request(const unsigned char *der, size_t len, bc_ocsp_request *out,
					  char *err, size_t errlen)
{
	OCSP_REQUEST *req = NULL;
	const unsigned char *p = der;
	int			n,
				i,
				rc = -1;

	memset(out, 0, sizeof(*out));
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (der == NULL || len == 0)
		return fail(err, errlen, "the request is empty");
	if (len > BC_OCSP_REQUEST_MAX)
		return fail(err, errlen, "the request is over 4096 bytes");
	req = d2i_OCSP_REQUEST(NULL, &p, (long) len);
	if (req == NULL)
	{
		fail(err, errlen, "the request is not a DER OCSPRequest");
		goto done;
	}
	if (p != der + len)
	{
		fail(err, errlen, "the request has bytes after its OCSPRequest");
		goto done;
	}
	n = OCSP_request_onereq_count(req);
	if (n <= 0)
	{
		fail(err, errlen, "the request has no certID");
		goto done;
	}
	if (n > BC_OCSP_MAX_CERTIDS)
	{
		fail(err, errlen, "the request has over 16 certIDs");
		goto done;
	}
	if (unknown_critical(OCSP_REQUEST_get_ext_count(req), request_ext, req))
	{
		fail(err, errlen, "the request has an unknown critical extension");
		goto done;
	}
	for (i = 0; i < n; i++)
	{
		OCSP_ONEREQ *one = OCSP_request_onereq_get0(req, i);

		if (one == NULL)
		{
			fail(err, errlen, "a request entry cannot be read");
			goto done;
		}
		if (unknown_critical(OCSP_ONEREQ_get_ext_count(one), onereq_ext, one))
		{
			fail(err, errlen, "a request entry has an unknown critical extension");
			goto done;
		}
		if (take_certid(OCSP_onereq_get0_id(one), &out->ids[i], err, errlen) != 0)
			goto done;
	}
	out->n = n;
	if (take_nonce(req, out, err, errlen) != 0)
		goto done;
	rc = 0;

done:
	OCSP_REQUEST_free(req);
	ERR_clear_error();
	if (rc != 0)
		memset(out, 0, sizeof(*out));	/* nothing half-filled goes back */
	return rc;
}

/* Whether the CertID names ca as its issuer (ocsp.h). */
int
bc_ocsp_issuer_matches(const bc_ocsp_certid *id, X509 *ca)
{
	const EVP_MD *md = id->hash_nid == NID_sha1 ? EVP_sha1() :
		id->hash_nid == NID_sha256 ? EVP_sha256() : NULL;
	unsigned char h[EVP_MAX_MD_SIZE];
	unsigned int hlen = 0;
	int			match;

	if (md == NULL || ca == NULL)
		return 0;
	match = X509_NAME_digest(X509_get_subject_name(ca), md, h, &hlen) == 1 &&
		hlen == id->name_hash_len && CRYPTO_memcmp(h, id->name_hash, hlen) == 0 &&
		X509_pubkey_digest(ca, md, h, &hlen) == 1 &&
		hlen == id->key_hash_len && CRYPTO_memcmp(h, id->key_hash, hlen) == 0;
	ERR_clear_error();
	return match;
}

/* A SHA-256 signing context for key, in its provider (as pki.c signs). */
static EVP_MD_CTX *
sign_ctx_for(EVP_PKEY *key)
{
	EVP_MD_CTX *ctx = bc_ossl_cache_sign_ctx(key);
	char		props[64];

	if (ctx != NULL)
		return ctx;
	ctx = EVP_MD_CTX_new();
	if (ctx == NULL ||
		EVP_DigestSignInit_ex(ctx, NULL, "SHA256", bc_pkey_libctx(key),
							  bc_pkey_sign_props(key, props, sizeof(props)), key, NULL) != 1)
	{
		EVP_MD_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* A copy of OpenSSL's DER into malloc()ed memory. */
static int
take_der(unsigned char *ossl_der, int len, unsigned char **der_out, size_t *der_len)
{
	if (len <= 0 || ossl_der == NULL)
		return BC_ECRYPTO;
	*der_out = malloc((size_t) len);
	if (*der_out == NULL)
		return BC_ENOMEM;
	memcpy(*der_out, ossl_der, (size_t) len);
	*der_len = (size_t) len;
	return BC_OK;
}

/* The delegated responder certificate (ocsp.h). */
int
bc_ocsp_responder_cert(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *key,
					   int64_t not_before, int64_t not_after, X509 **out)
{
	static const struct
	{
		int			nid;
		const char *value;
	}			exts[] = {
		{NID_basic_constraints, "critical,CA:FALSE"},
		{NID_key_usage, "critical,digitalSignature"},
		{NID_ext_key_usage, "OCSPSigning"},
		{NID_id_pkix_OCSP_noCheck, "ignored"},	/* a NULL value: the string is not read */
		{NID_subject_key_identifier, "hash"},
		{NID_authority_key_identifier, "keyid:always"},
	};
	X509	   *cert = X509_new();
	ASN1_INTEGER *serial = NULL;
	BIGNUM	   *bn = NULL;
	unsigned char rnd[16];
	X509V3_CTX	v3;
	EVP_MD_CTX *ctx = NULL;
	size_t		i;
	int			rc = BC_ECRYPTO;

	*out = NULL;
	if (cert == NULL || ca == NULL || ca_key == NULL || key == NULL)
		goto out;
	/* 128 bits, positive, never zero: the top byte is 01xxxxxx */
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		goto out;
	rnd[0] = (unsigned char) ((rnd[0] & 0x3f) | 0x40);
	if ((bn = BN_bin2bn(rnd, sizeof(rnd), NULL)) == NULL ||
		(serial = BN_to_ASN1_INTEGER(bn, NULL)) == NULL ||
		X509_set_version(cert, X509_VERSION_3) != 1 ||
		X509_set_serialNumber(cert, serial) != 1 ||
		X509_NAME_add_entry_by_NID(X509_get_subject_name(cert), NID_commonName, MBSTRING_UTF8,
								   (const unsigned char *) "bc_join OCSP responder", -1, -1, 0) != 1 ||
		X509_set_issuer_name(cert, X509_get_subject_name(ca)) != 1 ||
		ASN1_TIME_set(X509_getm_notBefore(cert), (time_t) not_before) == NULL ||
		ASN1_TIME_set(X509_getm_notAfter(cert), (time_t) not_after) == NULL ||
		X509_set_pubkey(cert, key) != 1)
		goto out;
	X509V3_set_ctx(&v3, ca, cert, NULL, NULL, 0);
	for (i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
	{
		X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &v3, exts[i].nid, exts[i].value);
		int			ok = ext != NULL && X509_add_ext(cert, ext, -1) == 1;

		X509_EXTENSION_free(ext);
		if (!ok)
			goto out;
	}
	/* From here the CA key's own operation: its provider or engine. */
	rc = BC_EKEY;
	if ((ctx = sign_ctx_for(ca_key)) == NULL || X509_sign_ctx(cert, ctx) <= 0)
		goto out;
	*out = cert;
	cert = NULL;
	rc = BC_OK;
out:
	if (rc != BC_OK && rc != BC_EKEY)
		ERR_clear_error();
	EVP_MD_CTX_free(ctx);
	ASN1_INTEGER_free(serial);
	BN_free(bn);
	X509_free(cert);
	return rc;
}

/* The signed answer (ocsp.h). */
int
bc_ocsp_response_der(const bc_ocsp_request *req, const bc_ocsp_single *singles,
					 int64_t this_update, int64_t next_update,
					 X509 *responder, X509 *issuer, EVP_PKEY *key,
					 unsigned char **der_out, size_t *der_len)
{
	OCSP_BASICRESP *bs = OCSP_BASICRESP_new();
	STACK_OF(X509) *certs = sk_X509_new_null();
	OCSP_RESPONSE *resp = NULL;
	ASN1_GENERALIZEDTIME *tu = ASN1_GENERALIZEDTIME_set(NULL, (time_t) this_update);
	ASN1_GENERALIZEDTIME *nu = ASN1_GENERALIZEDTIME_set(NULL, (time_t) next_update);
	EVP_MD_CTX *ctx = NULL;
	unsigned char *der = NULL;
	int			i;
	int			len;
	int			rc = BC_ECRYPTO;

	*der_out = NULL;
	*der_len = 0;
	if (bs == NULL || tu == NULL || nu == NULL || certs == NULL || req->n < 1 ||
		req->n > BC_OCSP_MAX_CERTIDS || (issuer != NULL && sk_X509_push(certs, issuer) <= 0))
		goto out;
	for (i = 0; i < req->n; i++)
	{
		const unsigned char *p = req->ids[i].der;
		OCSP_CERTID *cid = d2i_OCSP_CERTID(NULL, &p, (long) req->ids[i].der_len);
		const bc_ocsp_single *st = &singles[i];
		ASN1_GENERALIZEDTIME *rt = NULL;
		int			ok;

		if (st->status == V_OCSP_CERTSTATUS_REVOKED)
			rt = ASN1_GENERALIZEDTIME_set(NULL, (time_t) st->revoked_at);
		ok = cid != NULL && (st->status != V_OCSP_CERTSTATUS_REVOKED || rt != NULL) &&
			(st->status == V_OCSP_CERTSTATUS_GOOD || st->status == V_OCSP_CERTSTATUS_REVOKED ||
			 st->status == V_OCSP_CERTSTATUS_UNKNOWN) &&
			OCSP_basic_add1_status(bs, cid, st->status,
								   st->status == V_OCSP_CERTSTATUS_REVOKED && st->reason >= 0 ?
								   st->reason : OCSP_REVOKED_STATUS_NOSTATUS,
								   rt, tu, nu) != NULL;
		OCSP_CERTID_free(cid);
		ASN1_GENERALIZEDTIME_free(rt);
		if (!ok)
			goto out;
	}
	if (req->has_nonce &&
		OCSP_basic_add1_nonce(bs, (unsigned char *) req->nonce, (int) req->nonce_len) != 1)
		goto out;
	/* From here the responder key's own operation: its provider or engine. */
	rc = BC_EKEY;
	if ((ctx = sign_ctx_for(key)) == NULL ||
		OCSP_basic_sign_ctx(bs, responder, ctx, certs, OCSP_RESPID_KEY) != 1)
		goto out;
	rc = BC_ECRYPTO;
	if ((resp = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, bs)) == NULL)
		goto out;
	len = i2d_OCSP_RESPONSE(resp, &der);
	rc = take_der(der, len, der_out, der_len);
out:
	if (rc != BC_OK && rc != BC_EKEY)
		ERR_clear_error();
	OPENSSL_free(der);
	OCSP_RESPONSE_free(resp);
	EVP_MD_CTX_free(ctx);
	ASN1_GENERALIZEDTIME_free(tu);
	ASN1_GENERALIZEDTIME_free(nu);
	OCSP_BASICRESP_free(bs);
	sk_X509_free(certs);		/* the stack only: issuer is the caller's */
	return rc;
}

/* An unsigned error answer (ocsp.h). */
int
bc_ocsp_error_der(int status, unsigned char **der_out, size_t *der_len)
{
	OCSP_RESPONSE *resp = NULL;
	unsigned char *der = NULL;
	int			len;
	int			rc = BC_EINVAL;

	*der_out = NULL;
	*der_len = 0;
	if (status <= OCSP_RESPONSE_STATUS_SUCCESSFUL || status == 4 || status > OCSP_RESPONSE_STATUS_UNAUTHORIZED)
		return rc;
	rc = BC_ECRYPTO;
	if ((resp = OCSP_response_create(status, NULL)) != NULL)
	{
		len = i2d_OCSP_RESPONSE(resp, &der);
		rc = take_der(der, len, der_out, der_len);
	}
	ERR_clear_error();
	OPENSSL_free(der);
	OCSP_RESPONSE_free(resp);
	return rc;
}
