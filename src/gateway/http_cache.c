/*
 * http_cache.c: entity tags, If-None-Match and HTTP-dates for the answers a
 * cache in front of the gateway may keep (the CRL, the documents, OCSP).
 */
#include "http_cache.h"

#include <string.h>

#include <event2/util.h>
#include <openssl/evp.h>

/* The strong ETag of body; see http_cache.h. */
void
gw_etag(const void *body, size_t len, char out[GW_ETAG_LEN])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(body, len, md, &mdlen, EVP_sha256(), NULL) || mdlen < 16)
		memset(md, 0, sizeof(md));
	out[0] = '"';
	for (int i = 0; i < 16; i++)
	{
		out[1 + 2 * i] = hex[md[i] >> 4];
		out[2 + 2 * i] = hex[md[i] & 0xf];
	}
	out[33] = '"';
	out[34] = '\0';
}

/* Whether If-None-Match matches etag (weak comparison); see http_cache.h. */
int
gw_etag_matches(const char *v, const char *etag)
{
	size_t		elen;

	if (v == NULL || etag == NULL)
		return 0;
	elen = strlen(etag);
	for (;;)
	{
		const char *start;

		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		if (*v == '\0')
			return 0;
		if (*v == '*')
			return 1;
		if (v[0] == 'W' && v[1] == '/')
			v += 2;
		start = v;
		if (*v == '"')
		{
			/* a quoted tag: up to the closing quote (etagc holds no quote) */
			const char *end = strchr(v + 1, '"');

			if (end == NULL)
				return 0;
			if ((size_t) (end + 1 - start) == elen && memcmp(start, etag, elen) == 0)
				return 1;
			v = end + 1;
		}
		/* anything else up to the next comma is not an entity tag: skipped */
		while (*v != '\0' && *v != ',')
			v++;
	}
}

/* t as an HTTP-date; see http_cache.h. */
int
gw_http_date(time_t t, char *out, size_t len)
{
	struct tm	tm;

	if (gmtime_r(&t, &tm) == NULL || evutil_date_rfc1123(out, len, &tm) <= 0)
		return -1;
	return 0;
}
