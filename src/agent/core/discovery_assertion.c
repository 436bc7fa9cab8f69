/*
 * discovery_assertion.c: the site agent's discovery assertion and the
 * parse of a ramdisk's request for one (discovery_assertion.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/ssl.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/clock.h"
#include "core/discovery_assertion.h"
#include "core/tpm_key.h"

int
bcd_ssl_wait(SSL *ssl, int fd, int ret, long long deadline_ms)
{
	int			e = SSL_get_error(ssl, ret);
	long long	left = deadline_ms - bcd_now_ms();
	struct pollfd p = {fd, 0, 0};
	int			n;

	if (e == SSL_ERROR_WANT_READ)
		p.events = POLLIN;
	else if (e == SSL_ERROR_WANT_WRITE)
		p.events = POLLOUT;
	else
		return -1;
	if (left <= 0)
		return -1;
	do
		n = poll(&p, 1, (int) (left > 60000 ? 60000 : left));
	while (n < 0 && errno == EINTR);
	return n > 0 ? 0 : -1;
}

int
bcd_discovery_sign(const bcd_credential *cred, const char *site, const char *mac,
				   long long epoch, const unsigned char *csr, size_t csr_len, long ttl, char **jws)
{
	char		sha[44];
	time_t		now = time(NULL);
	json_t	   *doc = NULL;
	char	   *claims = NULL;
	int			rc;

	*jws = NULL;
	rc = bc_sha256_b64url(csr, csr_len, sha);
	if (rc != BC_OK)
		return rc;
	rc = BC_ENOMEM;
	doc = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I}", "purpose", "discovery",
					"serial", cred->serial, "siteId", site, "mac", mac, "epoch", (json_int_t) epoch,
					"csrSha256", sha, "iat", (json_int_t) now, "exp", (json_int_t) (now + ttl));
	if (doc != NULL && (claims = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL)
	{
		bcd_tpm_key_lock();
		rc = bc_jws_sign_es256(cred->key, NULL, (const unsigned char *) claims, strlen(claims), jws);
		bcd_tpm_key_unlock();
	}
	json_decref(doc);
	free(claims);
	return rc;
}

int
bcd_discovery_parse_request(const char *line, size_t len, unsigned char **csr, size_t *csr_len,
							char mac[18])
{
	json_t	   *doc;
	const char *csr64;
	const char *m;
	size_t		n;
	unsigned char *der = NULL;
	bc_csr	   *req = NULL;
	int			rc = BC_EINVAL;

	*csr = NULL;
	*csr_len = 0;
	if (len >= BCD_DISCOVERY_LINE_MAX || memchr(line, '\0', len) != NULL)
		return BC_EINVAL;
	doc = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	csr64 = json_string_value(json_object_get(doc, "csr"));
	m = json_string_value(json_object_get(doc, "mac"));
	if (!json_is_object(doc) || json_object_size(doc) != 2 || csr64 == NULL || m == NULL ||
		!bc_mac_valid(m) || (n = strlen(csr64)) == 0 || n > BC_CSR_B64_MAX)
		goto out;
	der = malloc(bc_b64url_decoded_maxlen(n) + 1);
	if (der == NULL ||
		bc_b64url_decode(csr64, n, der, bc_b64url_decoded_maxlen(n), csr_len) != BC_OK ||
		bc_csr_parse(der, *csr_len, &req) != BC_OK || bc_csr_verify_pop(req) != BC_OK)
		goto out;
	memcpy(mac, m, 18);
	*csr = der;
	der = NULL;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		*csr_len = 0;
	bc_csr_free(req);
	free(der);
	json_decref(doc);
	return rc;
}
