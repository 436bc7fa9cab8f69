/*
 * service_keys.c: load the pinned public keys of the JoinService, the JSON
 * that bc_join.service_keys() returns:
 * {"trustDomain": "...", "signingKey": {JWK}, "encryptionKey": {JWK},
 *  "nodeCa": "<PEM certificate>"}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include "bc_common.h"
#include "core/fileio.h"
#include "core/service_keys.h"

/* Longest trust domain accepted (a DNS name). */
#define TRUST_DOMAIN_MAX 255

/* 1 when s is a plausible SPIFFE trust domain: lower-case letters, digits, '.', '-', '_'. */
static int
trust_domain_is_valid(const char *s)
{
	size_t		i;

	if (s[0] == '\0')
		return 0;
	for (i = 0; s[i] != '\0'; i++)
	{
		char		c = s[i];

		if (i >= TRUST_DOMAIN_MAX)
			return 0;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

/* The public key of JWK object member name of doc. */
static int
member_jwk(json_t *doc, const char *name, EVP_PKEY **out)
{
	json_t	   *jwk = json_object_get(doc, name);
	char	   *text;
	int			rc;

	if (!json_is_object(jwk))
		return BC_EINVAL;
	text = json_dumps(jwk, JSON_COMPACT);
	if (text == NULL)
		return BC_ENOMEM;
	rc = bc_pkey_from_jwk(text, strlen(text), out);
	free(text);
	return rc;
}

/* The certificate of PEM string member name of doc. */
static int
member_pem_cert(json_t *doc, const char *name, X509 **out)
{
	json_t	   *pem = json_object_get(doc, name);
	BIO		   *bio;

	*out = NULL;
	if (!json_is_string(pem))
		return BC_EINVAL;
	bio = BIO_new_mem_buf(json_string_value(pem), (int) json_string_length(pem));
	if (bio == NULL)
		return BC_ENOMEM;
	*out = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	BIO_free(bio);
	if (*out == NULL)
	{
		ERR_clear_error();
		return BC_EINVAL;
	}
	return BC_OK;
}

/* Load and check the service-keys file at path (bounded to 64 KiB). */
int
bcd_service_keys_load(const char *path, bcd_service_keys *keys,
					  char *err, size_t errlen)
{
	char	   *text = NULL;
	size_t		len = 0;
	json_t	   *doc = NULL;
	json_t	   *td;
	json_error_t jerr;
	const char *what = "cannot read the file";
	int			rc;

	memset(keys, 0, sizeof(*keys));
	rc = bcd_read_file(path, BCD_SERVICE_KEYS_MAX, &text, &len);
	if (rc != BC_OK)
		goto out;
	what = "not a JSON object";
	rc = BC_EINVAL;
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(doc))
		goto out;
	what = "trustDomain missing or not a valid trust domain";
	td = json_object_get(doc, "trustDomain");
	if (!json_is_string(td) || !trust_domain_is_valid(json_string_value(td)))
		goto out;
	rc = BC_ENOMEM;
	keys->trust_domain = strdup(json_string_value(td));
	if (keys->trust_domain == NULL)
		goto out;
	what = "signingKey is not a public P-256 JWK";
	rc = member_jwk(doc, "signingKey", &keys->signing_key);
	if (rc != BC_OK)
		goto out;
	what = "encryptionKey is not a public P-256 JWK";
	rc = member_jwk(doc, "encryptionKey", &keys->encryption_key);
	if (rc != BC_OK)
		goto out;
	what = "nodeCa is not a PEM certificate";
	rc = member_pem_cert(doc, "nodeCa", &keys->node_ca);
out:
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "%s: %s (%s)", path, what, bc_status_str(rc));
		bcd_service_keys_free(keys);
	}
	json_decref(doc);
	free(text);
	return rc;
}

/* Release what bcd_service_keys_load allocated. */
void
bcd_service_keys_free(bcd_service_keys *keys)
{
	free(keys->trust_domain);
	EVP_PKEY_free(keys->signing_key);
	EVP_PKEY_free(keys->encryption_key);
	X509_free(keys->node_ca);
	memset(keys, 0, sizeof(*keys));
}
