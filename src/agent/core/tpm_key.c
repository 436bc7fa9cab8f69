/*
 * tpm_key.c: node keys that live in the TPM (docs/agent.md, "Key custody").
 *
 * Debian's tpm2-openssl provider (1.1) makes them: EVP_PKEY_Q_keygen with
 * "provider=tpm2" creates a P-256 key under the provider's owner-hierarchy
 * primary (made afresh from a fixed template at every use, never persisted)
 * and keeps it loaded while the EVP_PKEY lives.  Its PEM is a TSS2 PRIVATE
 * KEY (2.23.133.10.1.3): the TPM2B_PUBLIC and the TPM2B_PRIVATE, wrapped by
 * that primary, useless on any other TPM.  The process prefers the default
 * provider for everything else (digests, session keys, random numbers);
 * signing with a TPM key names its provider (bc_pkey_sign_props).
 *
 * The provider opens its own TCTI connection at load and keeps it: the TPM
 * must sit behind a resource manager (the kernel's /dev/tpmrm0, or tabrmd)
 * for bcd's own ESAPI connection (tpm_esys.c) to work beside it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/provider.h>

#include "bc_common.h"
#include "core/tpm_key.h"

/* TPM2_RH_OWNER: a TSS2 key whose parent is the owner hierarchy's primary. */
#define RH_OWNER 0x40000001u
/* The loadableKey OID of the TSS2 PRIVATE KEY format. */
#define OID_LOADABLE_KEY "2.23.133.10.1.3"

static int	keys_on;
static OSSL_PROVIDER *prov_default;
static OSSL_PROVIDER *prov_tpm2;
static pthread_mutex_t provider_lock = PTHREAD_MUTEX_INITIALIZER;

/* "what: OpenSSL's errors" into err. */
static void
ossl_error(char *err, size_t errlen, const char *what)
{
	char		ossl[256];

	bc_ossl_errors(ossl, sizeof(ossl));
	snprintf(err, errlen, "%s%s%s", what, ossl[0] != '\0' ? ": " : "", ossl);
}

/* Load the providers for tcti (tpm_key.h). */
int
bcd_tpm_keys_init(const char *tcti, char *err, size_t errlen)
{
	if (keys_on)
		return BC_OK;
	if (setenv("TPM2OPENSSL_TCTI", tcti, 1) != 0)
	{
		snprintf(err, errlen, "cannot set TPM2OPENSSL_TCTI");
		return BC_ENOMEM;
	}
	if ((prov_default = OSSL_PROVIDER_load(NULL, "default")) == NULL)
	{
		ossl_error(err, errlen, "cannot load OpenSSL's default provider");
		return BC_ECRYPTO;
	}
	if ((prov_tpm2 = OSSL_PROVIDER_load(NULL, "tpm2")) == NULL)
	{
		ossl_error(err, errlen, "cannot load the tpm2 provider (tpm2-openssl) for the TCTI");
		return BC_ECRYPTO;
	}
	if (EVP_set_default_properties(NULL, "?provider=default") != 1)
	{
		ossl_error(err, errlen, "cannot prefer the default provider");
		return BC_ECRYPTO;
	}
	keys_on = 1;
	return BC_OK;
}

/* Why tcti cannot serve a tpm bcd, or NULL (tpm_key.h). */
const char *
bcd_tpm_tcti_refused(const char *tcti)
{
	static const char *const raw[] = {"swtpm", "mssim", "device:/dev/tpm0"};
	size_t		i;

	if (strcmp(tcti, "device") == 0 || strcmp(tcti, "device:") == 0)
		return "the device TCTI defaults to /dev/tpm0, a TPM without a resource manager";
	for (i = 0; i < sizeof(raw) / sizeof(raw[0]); i++)
	{
		size_t		n = strlen(raw[i]);

		if (strncmp(tcti, raw[i], n) == 0 && (tcti[n] == '\0' || tcti[n] == ':'))
			return "this TCTI reaches the TPM without a resource manager, one connection at "
				"a time, and bcd needs two (its own and the tpm2 provider's): use "
				"device:/dev/tpmrm0 or tabrmd";
	}
	return NULL;
}

/* Unload the providers (every TPM key freed first): the provider's connection closes. */
void
bcd_tpm_keys_done(void)
{
	if (prov_tpm2 != NULL)
		OSSL_PROVIDER_unload(prov_tpm2);
	if (prov_default != NULL)
		OSSL_PROVIDER_unload(prov_default);
	prov_tpm2 = NULL;
	prov_default = NULL;
	keys_on = 0;
}

int
bcd_tpm_keys_on(void)
{
	return keys_on;
}

void
bcd_tpm_key_lock(void)
{
	if (keys_on)
		pthread_mutex_lock(&provider_lock);
}

void
bcd_tpm_key_unlock(void)
{
	if (keys_on)
		pthread_mutex_unlock(&provider_lock);
}

/* A new P-256 key in the TPM (tpm_key.h). */
EVP_PKEY *
bcd_tpm_key_generate(char *err, size_t errlen)
{
	EVP_PKEY   *key;

	bcd_tpm_key_lock();
	key = EVP_PKEY_Q_keygen(NULL, "provider=tpm2", "EC", "P-256");
	bcd_tpm_key_unlock();
	if (key == NULL)
		ossl_error(err, errlen, "the TPM did not make a P-256 key (tpm2 provider)");
	return key;
}

/* 1 when path holds a TSS2 PRIVATE KEY PEM. */
int
bcd_tpm_key_file_is_tss2(const char *path)
{
	static const char head[] = "-----BEGIN " BCD_TSS2_PEM_LABEL "-----";
	char		buf[sizeof(head)];
	FILE	   *f = fopen(path, "r");
	size_t		n;

	if (f == NULL)
		return 0;
	n = fread(buf, 1, sizeof(head) - 1, f);
	fclose(f);
	return n == sizeof(head) - 1 && memcmp(buf, head, n) == 0;
}

/* The TPM key in path (tpm_key.h). */
EVP_PKEY *
bcd_tpm_key_read(const char *path, char *err, size_t errlen)
{
	BIO		   *bio = NULL;
	EVP_PKEY   *key = NULL;

	if (!bcd_tpm_key_file_is_tss2(path))
	{
		snprintf(err, errlen, "%s is not a TSS2 PRIVATE KEY (a key in this TPM); a tpm bcd "
				 "never uses a file key", path);
		return NULL;
	}
	bio = BIO_new_file(path, "r");
	if (bio != NULL)
	{
		/*
		 * The key's parameters are asked of the provider too: under the lock
		 * (another thread signing meanwhile made this check fail).
		 */
		bcd_tpm_key_lock();
		key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
		if (key != NULL && !bc_pkey_is_p256(key))
		{
			EVP_PKEY_free(key);
			key = NULL;
			snprintf(err, errlen, "%s is not a P-256 key", path);
		}
		else if (key == NULL)
			ossl_error(err, errlen, "the TPM does not load this TSS2 PRIVATE KEY (another TPM's?)");
		bcd_tpm_key_unlock();
	}
	BIO_free(bio);
	if (bio == NULL)
		snprintf(err, errlen, "cannot open %s", path);
	return key;
}

/*
 * TSSPRIVKEY ::= SEQUENCE { type OBJECT IDENTIFIER, emptyAuth [0] EXPLICIT
 * BOOLEAN OPTIONAL, parent INTEGER, pubkey OCTET STRING, privkey OCTET
 * STRING }, read element by element.
 */
static int
parse_tss2(const unsigned char *der, long n, bcd_tpm_key_blobs *out)
{
	const unsigned char *p = der;
	const unsigned char *end;
	const unsigned char *q;
	long		len;
	int			tag;
	int			cls;
	char		oid[64];
	ASN1_OBJECT *obj = NULL;
	ASN1_INTEGER *parent = NULL;
	ASN1_OCTET_STRING *pub = NULL;
	ASN1_OCTET_STRING *priv = NULL;
	int			rc = BC_EINVAL;

	if ((ASN1_get_object(&p, &len, &tag, &cls, n) & 0x80) || tag != V_ASN1_SEQUENCE)
		return BC_EINVAL;
	end = p + len;
	if ((obj = d2i_ASN1_OBJECT(NULL, &p, end - p)) == NULL ||
		OBJ_obj2txt(oid, sizeof(oid), obj, 1) <= 0 || strcmp(oid, OID_LOADABLE_KEY) != 0)
		goto out;
	q = p;
	if (p < end && *p == 0xa0)
	{
		if (ASN1_get_object(&q, &len, &tag, &cls, end - p) & 0x80)
			goto out;
		p = q + len;			/* emptyAuth: skipped (the provider's keys have none) */
	}
	if ((parent = d2i_ASN1_INTEGER(NULL, &p, end - p)) == NULL ||
		(pub = d2i_ASN1_OCTET_STRING(NULL, &p, end - p)) == NULL ||
		(priv = d2i_ASN1_OCTET_STRING(NULL, &p, end - p)) == NULL || p != end)
		goto out;
	if ((size_t) ASN1_STRING_length(pub) > sizeof(out->pub) ||
		(size_t) ASN1_STRING_length(priv) > sizeof(out->priv))
		goto out;
	out->parent = (uint32_t) ASN1_INTEGER_get(parent);
	if (out->parent == 0)
		out->parent = RH_OWNER;
	out->pub_len = (size_t) ASN1_STRING_length(pub);
	memcpy(out->pub, ASN1_STRING_get0_data(pub), out->pub_len);
	out->priv_len = (size_t) ASN1_STRING_length(priv);
	memcpy(out->priv, ASN1_STRING_get0_data(priv), out->priv_len);
	rc = BC_OK;
out:
	ASN1_OBJECT_free(obj);
	ASN1_INTEGER_free(parent);
	ASN1_OCTET_STRING_free(pub);
	ASN1_OCTET_STRING_free(priv);
	return rc;
}

/* The TPM2B blobs of the TSS2 PRIVATE KEY in path (tpm_key.h). */
int
bcd_tpm_key_blobs_read(const char *path, bcd_tpm_key_blobs *out, char *err, size_t errlen)
{
	BIO		   *bio = BIO_new_file(path, "r");
	unsigned char *der = NULL;
	char	   *name = NULL;
	long		n = 0;
	int			rc = BC_EINVAL;

	memset(out, 0, sizeof(*out));
	if (bio != NULL &&
		PEM_bytes_read_bio(&der, &n, &name, BCD_TSS2_PEM_LABEL, bio, NULL, NULL) == 1)
		rc = parse_tss2(der, n, out);
	if (rc != BC_OK)
		snprintf(err, errlen, "%s is not a TSS2 PRIVATE KEY", path);
	else if (out->parent != RH_OWNER)
	{
		snprintf(err, errlen, "%s has parent 0x%08x; bcd makes its keys under the owner "
				 "hierarchy's primary (0x40000001) only", path, (unsigned) out->parent);
		rc = BC_EUNSUPPORTED;
	}
	ERR_clear_error();
	OPENSSL_free(der);
	OPENSSL_free(name);
	BIO_free(bio);
	return rc;
}
