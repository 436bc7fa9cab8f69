/*
 * fuzz_gw_ocsp_get.c: bc-gateway's GET /v1/ocsp/<request> decoding
 * (gw_ocsp_get_decode: evhttp_uridecode, then OpenSSL's base64 decoder) and
 * what follows it in the route, bc_ocsp_parse_request on the bytes.  Input:
 * the path's tail as the client sent it.  Properties: a decoded request is
 * 1..BC_OCSP_REQUEST_MAX bytes, and base64-encoding it and decoding that
 * again gives the same bytes; a refusal always says why.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fuzz_common.h"
#include "ocsp.h"
#include "ocsp_route.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *tail = malloc(size + 1);
	unsigned char der[BC_OCSP_REQUEST_MAX];
	unsigned char again[BC_OCSP_REQUEST_MAX];
	char		b64[4 * ((BC_OCSP_REQUEST_MAX + 2) / 3) + 1];
	size_t		len = 0,
				len2 = 0;
	const char *why = NULL;
	bc_ocsp_request *req = malloc(sizeof(*req));
	char		err[128];

	BC_FUZZ_ASSERT(tail != NULL && req != NULL);
	memcpy(tail, data, size);
	tail[size] = '\0';
	if (gw_ocsp_get_decode(tail, der, sizeof(der), &len, &why) == 0)
	{
		BC_FUZZ_ASSERT(why == NULL);
		BC_FUZZ_ASSERT(len >= 1 && len <= BC_OCSP_REQUEST_MAX);
		EVP_EncodeBlock((unsigned char *) b64, der, (int) len);
		BC_FUZZ_ASSERT(gw_ocsp_get_decode(b64, again, sizeof(again), &len2, &why) == 0);
		BC_FUZZ_ASSERT(len2 == len && memcmp(again, der, len) == 0);
		(void) bc_ocsp_parse_request(der, len, req, err, sizeof(err));
	}
	else
	{
		BC_FUZZ_ASSERT(why != NULL && len == 0);
	}
	free(req);
	free(tail);
	return 0;
}
