/*
 * ssh.c: OpenSSH public keys, certificates and KRLs (bc_ssh.h).
 */
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_ssh.h"

/* Stub. */
int
bc_ssh_pubkey_blob(EVP_PKEY *pk, unsigned char **blob, size_t *len)
{
	(void) pk; (void) blob; (void) len;
	return BC_EINVAL;
}

/* Stub. */
int
bc_ssh_pubkey_parse(const unsigned char *blob, size_t len, EVP_PKEY **pk)
{
	(void) blob; (void) len; (void) pk;
	return BC_EINVAL;
}

/* Stub. */
int
bc_ssh_pubkey_line_parse(const char *line, size_t len, unsigned char **blob, size_t *blob_len)
{
	(void) line; (void) len; (void) blob; (void) blob_len;
	return BC_EINVAL;
}

/* Stub. */
char *
bc_ssh_pubkey_line(const unsigned char *blob, size_t len, const char *comment)
{
	(void) blob; (void) len; (void) comment;
	return NULL;
}

/* Stub. */
int
bc_ssh_fingerprint(const unsigned char *blob, size_t len, char out[64])
{
	(void) blob; (void) len; (void) out;
	return BC_EINVAL;
}

/* Stub. */
int
bc_ssh_cert_sign(const bc_ssh_cert_params *p, EVP_PKEY *ca, unsigned char **cert, size_t *len)
{
	(void) p; (void) ca; (void) cert; (void) len;
	return BC_EINVAL;
}

/* Stub. */
int
bc_ssh_cert_parse(const unsigned char *cert, size_t len, bc_ssh_cert_info *out)
{
	(void) cert; (void) len;
	if (out)
		memset(out, 0, sizeof(*out));
	return BC_EINVAL;
}

/* Stub. */
void
bc_ssh_cert_info_free(bc_ssh_cert_info *i)
{
	(void) i;
}

/* Stub. */
int
bc_ssh_krl_build(uint64_t krl_version, uint64_t generated, const char *comment,
				 const bc_ssh_krl_ca *cas, size_t n, unsigned char **krl, size_t *len)
{
	(void) krl_version; (void) generated; (void) comment; (void) cas; (void) n;
	(void) krl; (void) len;
	return BC_EINVAL;
}
