/*
 * tpm_key.h: the node key in the TPM, through Debian's tpm2-openssl provider:
 * the provider loaded for the --tcti of a tpm bcd, P-256 keys made in the
 * TPM, their TSS2 PRIVATE KEY files (and the TPM2B blobs in them, for
 * ESAPI), and the one lock of the provider's TPM connection.
 */
#ifndef BCD_TPM_KEY_H
#define BCD_TPM_KEY_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

/* The PEM label tpm2-openssl writes. */
#define BCD_TSS2_PEM_LABEL "TSS2 PRIVATE KEY"

/*
 * Load the default and tpm2 providers (TPM2OPENSSL_TCTI set to tcti first:
 * the provider reads its TCTI from there) and make the process prefer the
 * default provider ("?provider=default"), so only node keys live in the TPM.
 * Once per process; from then on the store makes and reads TPM keys only.
 */
int			bcd_tpm_keys_init(const char *tcti, char *err, size_t errlen);

/* The default --tcti: the kernel's resource manager. */
#define BCD_TCTI_DEFAULT "device:/dev/tpmrm0"

/*
 * NULL when tcti is a TCTI a tpm bcd can use, else why not: the provider
 * keeps a connection of its own open beside bcd's ESAPI one, so the TPM must
 * be reached through a resource manager (/dev/tpmrm0, tabrmd); a raw TPM
 * (swtpm:, mssim:, device:/dev/tpm0) serves one connection at a time and
 * the second would wait for ever.
 */
const char *bcd_tpm_tcti_refused(const char *tcti);

/* At exit, once every TPM key is freed: unload the providers. */
void		bcd_tpm_keys_done(void);

/* 1 once bcd_tpm_keys_init succeeded: node keys are TPM keys. */
int			bcd_tpm_keys_on(void);

/* A new P-256 signing key made in the TPM (owner hierarchy), or NULL and err. */
EVP_PKEY   *bcd_tpm_key_generate(char *err, size_t errlen);

/*
 * The TPM key in the TSS2 PRIVATE KEY file path, or NULL and err: any other
 * PEM (a PKCS#8 file key) is refused, never used instead.
 */
EVP_PKEY   *bcd_tpm_key_read(const char *path, char *err, size_t errlen);

/* 1 when the file at path is a TSS2 PRIVATE KEY PEM (by its label). */
int			bcd_tpm_key_file_is_tss2(const char *path);

/* The blobs of a TSS2 PRIVATE KEY: marshalled TPM2B_PUBLIC and TPM2B_PRIVATE. */
typedef struct bcd_tpm_key_blobs
{
	uint32_t	parent;			/* TPM2_RH_OWNER: the provider's owner primary */
	size_t		pub_len;
	unsigned char pub[1024];
	size_t		priv_len;
	unsigned char priv[1024];
} bcd_tpm_key_blobs;

int			bcd_tpm_key_blobs_read(const char *path, bcd_tpm_key_blobs *out,
								   char *err, size_t errlen);

/*
 * The provider's TPM connection is one ESAPI context, not safe for two
 * threads: every use of a TPM key (signing, freeing) holds this lock.  A
 * no-op unless bcd_tpm_keys_on().
 */
void		bcd_tpm_key_lock(void);
void		bcd_tpm_key_unlock(void);

#endif							/* BCD_TPM_KEY_H */
