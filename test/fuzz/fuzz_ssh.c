/*
 * fuzz_ssh.c: the OpenSSH parsers of src/common/ssh.c, which read a
 * stranger's bytes (key blobs in /v1/ssh/host requests, certificates in
 * bcd's answers): bc_ssh_pubkey_line_parse, bc_ssh_pubkey_parse and
 * bc_ssh_cert_parse on the same input, with their properties: what parses
 * writes back to the same bytes, a certificate's key blob parses as a key,
 * nothing leaks.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "bc_common.h"
#include "bc_ssh.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *blob = NULL,
			   *again = NULL;
	size_t		blob_len = 0,
				again_len = 0;
	EVP_PKEY   *pk = NULL;
	bc_ssh_cert_info info;
	char		fp[64];
	int			rc;

	/* a .pub / -cert.pub line */
	rc = bc_ssh_pubkey_line_parse((const char *) data, size, &blob, &blob_len);
	if (rc == BC_OK)
	{
		char	   *line = bc_ssh_pubkey_line(blob, blob_len, NULL);

		BC_FUZZ_ASSERT(line != NULL);
		BC_FUZZ_ASSERT(bc_ssh_pubkey_line_parse(line, strlen(line), &again, &again_len) == BC_OK);
		BC_FUZZ_ASSERT(again_len == blob_len && memcmp(again, blob, blob_len) == 0);
		BC_FUZZ_ASSERT(bc_ssh_fingerprint(blob, blob_len, fp) == BC_OK);
		free(again);
		free(line);
		free(blob);
	}
	else
		BC_FUZZ_ASSERT(blob == NULL);

	/* a public key blob: parsed, it writes back the same bytes */
	rc = bc_ssh_pubkey_parse(data, size, &pk);
	if (rc == BC_OK)
	{
		BC_FUZZ_ASSERT(pk != NULL);
		BC_FUZZ_ASSERT(bc_ssh_pubkey_blob(pk, &again, &again_len) == BC_OK);
		BC_FUZZ_ASSERT(again_len == size && memcmp(again, data, size) == 0);
		free(again);
		EVP_PKEY_free(pk);
	}
	else
		BC_FUZZ_ASSERT(pk == NULL);

	/* a certificate blob */
	rc = bc_ssh_cert_parse(data, size, &info);
	if (rc == BC_OK)
	{
		BC_FUZZ_ASSERT(info.type == BC_SSH_CERT_USER || info.type == BC_SSH_CERT_HOST);
		BC_FUZZ_ASSERT(info.n_principals >= 1 && info.n_principals <= BC_SSH_PRINCIPALS_MAX);
		BC_FUZZ_ASSERT(bc_ssh_pubkey_parse(info.key_blob, info.key_blob_len, NULL) == BC_OK);
		BC_FUZZ_ASSERT(bc_ssh_pubkey_parse(info.ca_blob, info.ca_blob_len, NULL) == BC_OK);
		BC_FUZZ_ASSERT(info.ca_blob >= data && info.ca_blob + info.ca_blob_len <= data + size);
		for (size_t i = 0; i < info.n_principals; i++)
			BC_FUZZ_ASSERT(strlen(info.principals[i]) >= 1 && strlen(info.principals[i]) <= BC_SSH_PRINCIPAL_MAX);
	}
	else
		BC_FUZZ_ASSERT(info.key_blob == NULL && info.n_principals == 0);
	bc_ssh_cert_info_free(&info);
	return 0;
}
