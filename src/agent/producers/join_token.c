/*
 * join_token.c: the producer of the join-token attestor.  Its evidence is
 * the join token sealed to the service's encryption key (JWE
 * ECDH-ES+A256GCM, header csrSha256: bound to this join's CSR), sealed
 * afresh for every round; the token file is read at every round, so an
 * operator can drop a fresh token in place.  It answers no challenge.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "producers/producer.h"

/*
 * The join token: token as given, or read from token_file with one trailing
 * newline (LF or CR LF) stripped; at most BC_TOKEN_MAX bytes, the service's
 * bound; *out is NULL when neither is set.  Release *out with
 * bc_free_secret(*out, *len + 1).
 */
int
bcd_join_token_load(const char *token, const char *token_file, char **out, size_t *len)
{
	int			rc;

	*out = NULL;
	*len = 0;
	if (token == NULL && token_file == NULL)
		return BC_OK;
	if (token != NULL)
	{
		*len = strlen(token);
		*out = strdup(token);
		rc = *out == NULL ? BC_ENOMEM : BC_OK;
	}
	else
	{
		/* the service's bound (BC_TOKEN_MAX), and room for a trailing CR LF */
		rc = bcd_read_file(token_file, BC_TOKEN_MAX + 2, out, len);
		if (rc == BC_OK && *len > 0 && (*out)[*len - 1] == '\n')
		{
			(*out)[--(*len)] = '\0';
			if (*len > 0 && (*out)[*len - 1] == '\r')
				(*out)[--(*len)] = '\0';
		}
	}
	if (rc == BC_OK && (*len == 0 || *len > BC_TOKEN_MAX || memchr(*out, '\0', *len) != NULL))
	{
		bc_free_secret(*out, *len + 1);
		*out = NULL;
		*len = 0;
		rc = BC_EINVAL;
	}
	return rc;
}

/* The token, when there is one, sealed to the service for this CSR (producer.h). */
int
bcd_seal_token(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	char		csr_sha256[44];
	char	   *token = NULL;
	size_t		token_len = 0;
	int			rc;

	memset(out, 0, sizeof(*out));
	rc = bcd_join_token_load(in->token, in->token_file, &token, &token_len);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot read a non-empty token from %s (%s)",
				 in->token_file != NULL ? in->token_file : "--token", bc_status_str(rc));
		return rc;
	}
	if (token == NULL)
		return BC_OK;			/* no token: the request carries no sealedToken */
	rc = bc_sha256_b64url(in->csr, in->csr_len, csr_sha256);
	if (rc == BC_OK)
	{
		EVP_PKEY   *enc = bcd_service_keys_encryption(in->keys);

		rc = bc_jwe_seal(enc, "csrSha256", csr_sha256,
						 (const unsigned char *) token, token_len, &out->sealed_token);
		EVP_PKEY_free(enc);
	}
	if (rc != BC_OK)
		snprintf(err, errlen, "cannot build the JoinRequest (%s)", bc_status_str(rc));
	bc_free_secret(token, token_len + 1);
	return rc;
}

const bcd_producer bcd_producer_join_token = {
	.attestor = BC_ATTESTOR_JOIN_TOKEN,
	.summary = "the default: the join token (--token, --token-file), sealed",
	.commands = BCD_CMD_RUN | BCD_CMD_RAMDISK,
	.default_for = BCD_CMD_RUN,
	.produce = bcd_seal_token,
};
