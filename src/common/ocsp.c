/*
 * ocsp.c: an OCSP request parsed by OpenSSL and bounded (ocsp.h).  Nothing
 * here reads DER by hand: d2i_OCSP_REQUEST parses the request, OpenSSL's
 * OCSP accessors hand out the CertIDs and extensions, d2i_ASN1_OCTET_STRING
 * unwraps the nonce (its extnValue is the DER of an OCTET STRING, so the
 * nonce is wrapped twice: RFC 6960 4.4.1, RFC 9654).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/ocsp.h>
#include <openssl/x509.h>

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
