/*
 * bc_ssh.h: OpenSSH public keys, certificates and KRLs (PROTOCOL.certkeys,
 * PROTOCOL.krl; RFC 4251 encodings), written and parsed in src/common as
 * jose.c does JOSE: OpenSSL does every hash and signature (EVP_DigestSign
 * with the CA's EVP_PKEY, so file, TPM and PKCS#11 CA keys sign alike).
 *
 * No PostgreSQL headers.  Returns BC_OK, BC_EINVAL (malformed input or
 * params), BC_ECRYPTO (OpenSSL failed) as bc_common.h; buffers handed back
 * are malloc()ed (free()).
 */
#ifndef BC_SSH_H
#define BC_SSH_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#define BC_SSH_BLOB_MAX 1024			/* a certified public key, wire form */
#define BC_SSH_CERT_MAX 16384
#define BC_SSH_PRINCIPALS_MAX 32
#define BC_SSH_PRINCIPAL_MAX 255

enum
{
	BC_SSH_CERT_USER = 1, BC_SSH_CERT_HOST = 2
};
enum
{
	BC_SSH_EXT_X11 = 1, BC_SSH_EXT_AGENT = 2, BC_SSH_EXT_PORT = 4, BC_SSH_EXT_PTY = 8,
	BC_SSH_EXT_USER_RC = 16
};

typedef struct bc_ssh_cert_params
{
	int			type;
	const unsigned char *key_blob;
	size_t		key_blob_len;
	uint64_t	serial;
	const char *key_id;
	const char *const *principals;
	size_t		n_principals;
	uint64_t	valid_after,
				valid_before;
	const char *force_command,
			   *source_address;	/* user only; NULL: absent */
	unsigned	extensions;		/* user only; BC_SSH_EXT_* */
} bc_ssh_cert_params;

/*
 * What bc_ssh_cert_parse read.  ca_blob points into the parsed buffer;
 * key_blob (the certified key as a plain public key blob, which the
 * certificate does not hold in one piece) and the principals are malloc()ed:
 * bc_ssh_cert_info_free releases them.
 */
typedef struct bc_ssh_cert_info
{
	int			type;
	const unsigned char *key_blob;
	size_t		key_blob_len;
	uint64_t	serial;
	char		key_id[256];
	char	   *principals[BC_SSH_PRINCIPALS_MAX];
	size_t		n_principals;
	uint64_t	valid_after,
				valid_before;
	const unsigned char *ca_blob;
	size_t		ca_blob_len;
} bc_ssh_cert_info;

typedef struct bc_ssh_krl_ca
{
	const unsigned char *ca_blob;
	size_t		ca_blob_len;
	const uint64_t *serials;
	size_t		n_serials;
} bc_ssh_krl_ca;				/* serials ascending, unique, non-zero */

/* The wire blob of pk: EC P-256/384/521, Ed25519. */
int			bc_ssh_pubkey_blob(EVP_PKEY *pk, unsigned char **blob, size_t *len);

/* The key of a wire blob: on-curve via EVP_PKEY_fromdata; exact length. */
int			bc_ssh_pubkey_parse(const unsigned char *blob, size_t len, EVP_PKEY **pk);

/*
 * The blob of one "type b64 [comment]" line (a .pub or -cert.pub file's):
 * type must match the blob's, and the blob must parse (bc_ssh_pubkey_parse,
 * or bc_ssh_cert_parse for a *-cert-v01@openssh.com type).
 */
int			bc_ssh_pubkey_line_parse(const char *line, size_t len, unsigned char **blob,
									 size_t *blob_len);

/* "type b64 [comment]\n", malloc()ed; NULL on a malformed blob. */
char	   *bc_ssh_pubkey_line(const unsigned char *blob, size_t len, const char *comment);

/* "SHA256:<base64 without padding>", as ssh-keygen -l prints it. */
int			bc_ssh_fingerprint(const unsigned char *blob, size_t len, char out[64]);

/*
 * A certificate signed by ca (ECDSA P-256: ecdsa-sha2-nistp256), nonce of 32
 * RAND_bytes; signs as bc_jws_sign_es256 (bc_pkey_sign_props, bc_pkey_libctx).
 * BC_EINVAL: type not user/host, serial 0, valid_after >= valid_before, key_id
 * missing, over 255 bytes or with control characters, 0 or over 32 principals,
 * a principal empty, over 255 bytes or with NUL, ',', white space, '*' or '?',
 * a host certificate with force_command, source_address or extensions, an
 * option value with control characters or over 1024 bytes, a key blob that
 * does not parse (RSA, DSA, sk-*: refused), a CA not P-256.  Options and
 * extensions are written sorted by name, each value string(string(value)).
 */
int			bc_ssh_cert_sign(const bc_ssh_cert_params *p, EVP_PKEY *ca, unsigned char **cert,
							 size_t *len);

/*
 * Structure only; no signature check.  Exact length, at most BC_SSH_CERT_MAX;
 * an Ed25519 or ECDSA certified key and CA (each point on its curve), 1..32
 * principals of 1..255 bytes without NUL, options and extensions sorted and
 * unique, no critical option but force-command and source-address, none of
 * either in a host certificate.  BC_EINVAL (out zeroed) otherwise.
 */
int			bc_ssh_cert_parse(const unsigned char *cert, size_t len, bc_ssh_cert_info *out);
void		bc_ssh_cert_info_free(bc_ssh_cert_info *i);

/*
 * An unsigned KRL (OpenSSH >= 9.4 refuses signed ones): the header, then one
 * CERTIFICATES section with one SERIAL_LIST per CA that has serials.
 * BC_EINVAL for a CA blob that does not parse or serials not ascending,
 * repeated or zero; BC_ETOOBIG over BC_SSH_KRL_MAX (bc_protocol.h).
 */
int			bc_ssh_krl_build(uint64_t krl_version, uint64_t generated, const char *comment,
							 const bc_ssh_krl_ca *cas, size_t n, unsigned char **krl, size_t *len);

#endif							/* BC_SSH_H */
