/*
 * fuzz_ocsp_request.c: an OCSP request as bc_join.ocsp_response and
 * bc-gateway's /v1/ocsp take it (bc_ocsp_parse_request), with its
 * properties: a refusal gives a reason and nothing half-filled, an accepted
 * request is within every bound, each CertID's DER is one CertID that
 * encodes back to the same bytes, and a request rebuilt by OpenSSL from what
 * was parsed parses to the same CertIDs and nonce.
 */
#include <string.h>

#include <openssl/err.h>
#include <openssl/ocsp.h>

#include "ocsp.h"
#include "fuzz_common.h"

/* Whether s is "" or lower-case hex of 32 to 64 digits, an even number. */
static int
serial_ok(const char *s)
{
	size_t		n = strlen(s),
				i;

	if (n == 0)
		return 1;
	if (n < 32 || n > 64 || n % 2 != 0)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* A request made by OpenSSL from what was parsed parses to the same. */
static void
rebuild(const bc_ocsp_request *r)
{
	static bc_ocsp_request again;
	OCSP_REQUEST *req = OCSP_REQUEST_new();
	unsigned char *der = NULL;
	char		err[160];
	int			len,
				i;

	BC_FUZZ_ASSERT(req != NULL);
	for (i = 0; i < r->n; i++)
	{
		const unsigned char *p = r->ids[i].der;
		OCSP_CERTID *cid = d2i_OCSP_CERTID(NULL, &p, (long) r->ids[i].der_len);

		BC_FUZZ_ASSERT(cid != NULL && p == r->ids[i].der + r->ids[i].der_len);
		BC_FUZZ_ASSERT(OCSP_request_add0_id(req, cid) != NULL);
	}
	if (r->has_nonce)
		BC_FUZZ_ASSERT(OCSP_request_add1_nonce(req, (unsigned char *) r->nonce, (int) r->nonce_len) == 1);
	len = i2d_OCSP_REQUEST(req, &der);
	BC_FUZZ_ASSERT(len > 0);
	if (len <= BC_OCSP_REQUEST_MAX)
	{
		BC_FUZZ_ASSERT(bc_ocsp_parse_request(der, (size_t) len, &again, err, sizeof(err)) == 0);
		BC_FUZZ_ASSERT(again.n == r->n && again.has_nonce == r->has_nonce);
		BC_FUZZ_ASSERT(again.nonce_len == r->nonce_len
					   && memcmp(again.nonce, r->nonce, r->nonce_len) == 0);
		for (i = 0; i < r->n; i++)
			BC_FUZZ_ASSERT(memcmp(&again.ids[i], &r->ids[i], sizeof(again.ids[i])) == 0);
	}
	OPENSSL_free(der);
	OCSP_REQUEST_free(req);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bc_ocsp_request r;
	static const bc_ocsp_request zero;
	char		err[160];
	int			i;

	if (bc_ocsp_parse_request(data, size, &r, err, sizeof(err)) != 0)
	{
		BC_FUZZ_ASSERT(err[0] != '\0');
		BC_FUZZ_ASSERT(memcmp(&r, &zero, sizeof(r)) == 0);
		BC_FUZZ_ASSERT(ERR_peek_error() == 0);
		return 0;
	}
	BC_FUZZ_ASSERT(size <= BC_OCSP_REQUEST_MAX);
	BC_FUZZ_ASSERT(ERR_peek_error() == 0);
	BC_FUZZ_ASSERT(r.n >= 1 && r.n <= BC_OCSP_MAX_CERTIDS);
	BC_FUZZ_ASSERT(r.has_nonce ? (r.nonce_len >= 1 && r.nonce_len <= BC_OCSP_NONCE_MAX) : r.nonce_len == 0);
	for (i = 0; i < r.n; i++)
	{
		const bc_ocsp_certid *id = &r.ids[i];
		const unsigned char *p = id->der;
		OCSP_CERTID *cid;
		unsigned char *back = NULL;
		int			blen;

		BC_FUZZ_ASSERT(id->name_hash_len <= sizeof(id->name_hash));
		BC_FUZZ_ASSERT(id->key_hash_len <= sizeof(id->key_hash));
		BC_FUZZ_ASSERT(id->der_len >= 1 && id->der_len <= sizeof(id->der));
		BC_FUZZ_ASSERT(memchr(id->serial_hex, '\0', sizeof(id->serial_hex)) != NULL);
		BC_FUZZ_ASSERT(serial_ok(id->serial_hex));
		cid = d2i_OCSP_CERTID(NULL, &p, (long) id->der_len);
		BC_FUZZ_ASSERT(cid != NULL && p == id->der + id->der_len);
		blen = i2d_OCSP_CERTID(cid, &back);
		BC_FUZZ_ASSERT(blen == (int) id->der_len && memcmp(back, id->der, id->der_len) == 0);
		OPENSSL_free(back);
		OCSP_CERTID_free(cid);
	}
	for (i = r.n; i < BC_OCSP_MAX_CERTIDS; i++)
		BC_FUZZ_ASSERT(memcmp(&r.ids[i], &zero.ids[i], sizeof(r.ids[i])) == 0);
	rebuild(&r);
	return 0;
}
