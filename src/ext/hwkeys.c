/*
 * hwkeys.c: every private key of bc_join.key_dir, from a file or from
 * hardware, through one OpenSSL path (docs/operator.md, "Keys in hardware").
 *
 * A key file of the directory holds one of:
 *   - a PEM private key (PKCS#8 or SEC1), as the contract has always said;
 *   - a `TSS2 PRIVATE KEY` PEM (tpm2-openssl's format: the key wrapped by
 *     the TPM's storage key, usable only inside that TPM);
 *   - one line `handle:0x81xxxxxx`: a persistent key of the TPM;
 *   - one line `pkcs11:...` (RFC 7512): a key in a PKCS#11 token.
 * The first three are opened by OSSL_STORE (the file store of OpenSSL's
 * default provider and the tpm2 provider's decoder and `handle:` store),
 * the TPM through Debian's tpm2-openssl provider, loaded on the first TPM
 * key with TPM2OPENSSL_TCTI = bc_join.tpm_tcti.  A PKCS#11 key is opened by
 * libp11's engine (libengine-pkcs11-openssl, module bc_join.pkcs11_module):
 * Debian 12 ships no pkcs11-provider (Debian 13 does), and libp11 registers
 * no OSSL_STORE loader, so ENGINE_load_private_key is the one call OpenSSL
 * 3.0 offers there.  Whatever the kind, the result is an EVP_PKEY the rest
 * of the extension signs and derives with unchanged (bc_pkey_sign_props
 * names a key's provider, bc_pkey_libctx its library context; an engine's
 * key runs the engine's methods).  When a key's own operation fails (the
 * hardware went away: bc_key_failed), bc_hw_reset lets go of both, and the
 * keys are loaded anew at the next use.
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1	/* ENGINE: see above */

#include "bc_join.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/engine.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/store.h>

/*
 * Loaded once a hardware key is first read, until bc_hw_reset: the TPM's
 * keys live in a library context of their own (hw_libctx, with the default
 * and tpm2 providers), so that freeing it really closes the provider's ESAPI
 * context.  tpm2-tss leaves an ESAPI context unusable after a transport
 * failure (ESYS "called in bad sequence"), and OpenSSL 3.0 keeps a provider
 * of the default context alive while its methods are cached, however often
 * it is unloaded: the context's teardown is the one way back.
 */
static OSSL_LIB_CTX *hw_libctx = NULL;
static OSSL_PROVIDER *prov_default = NULL;
static OSSL_PROVIDER *prov_tpm2 = NULL;
static ENGINE *pkcs11_engine = NULL;

/*
 * The keys libp11's engine handed out (they do not name their engine:
 * libp11 sets EC methods, not EVP_PKEY_set1_engine), so that a failing key
 * is known for one of them (bc_hw_key_in_engine).  A key directory holds
 * at most a dozen private keys; bc_hw_reset forgets them.
 */
#define HW_ENGINE_KEYS_MAX 32
static const EVP_PKEY *engine_keys[HW_ENGINE_KEYS_MAX];
static int	n_engine_keys = 0;

/* A key file or reference is small; more is not a key. */
#define HW_FILE_MAX 16384

static void
set_err(char *err, size_t errlen, const char *what)
{
	char		ossl[256];

	bc_ossl_errors(ossl, sizeof(ossl));
	if (ossl[0] != '\0')
		snprintf(err, errlen, "%s: %s", what, ossl);
	else
		snprintf(err, errlen, "%s", what);
}

/*
 * The tpm2 provider, beside the default one (preferred for everything but
 * TPM keys), in hw_libctx; every key of the TPM is used there
 * (bc_pkey_libctx).
 */
static bool
tpm2_provider(char *err, size_t errlen)
{
	if (prov_tpm2 != NULL)
		return true;
	if (bc_tpm_tcti != NULL && bc_tpm_tcti[0] != '\0' &&
		setenv("TPM2OPENSSL_TCTI", bc_tpm_tcti, 1) != 0)
	{
		snprintf(err, errlen, "cannot set TPM2OPENSSL_TCTI");
		return false;
	}
	if (hw_libctx == NULL && (hw_libctx = OSSL_LIB_CTX_new()) == NULL)
	{
		set_err(err, errlen, "cannot make an OpenSSL library context");
		return false;
	}
	if (prov_default == NULL && (prov_default = OSSL_PROVIDER_load(hw_libctx, "default")) == NULL)
	{
		set_err(err, errlen, "cannot load OpenSSL's default provider");
		return false;
	}
	if ((prov_tpm2 = OSSL_PROVIDER_load(hw_libctx, "tpm2")) == NULL)
	{
		set_err(err, errlen, "cannot load the tpm2 provider (tpm2-openssl; bc_join.tpm_tcti names the TPM)");
		return false;
	}
	if (EVP_set_default_properties(hw_libctx, "?provider=default") != 1)
	{
		set_err(err, errlen, "cannot prefer the default provider");
		return false;
	}
	bc_set_key_libctx(hw_libctx);
	return true;
}

/* libp11's engine for bc_join.pkcs11_module, initialised once. */
static bool
pkcs11_eng(char *err, size_t errlen)
{
	ENGINE	   *e;

	if (pkcs11_engine != NULL)
		return true;
	if (bc_pkcs11_module == NULL || bc_pkcs11_module[0] == '\0')
	{
		snprintf(err, errlen, "a pkcs11: key needs bc_join.pkcs11_module (the token's PKCS#11 module)");
		return false;
	}
	ENGINE_load_builtin_engines();
	if ((e = ENGINE_by_id("pkcs11")) == NULL)
	{
		set_err(err, errlen, "cannot load the pkcs11 engine (libengine-pkcs11-openssl)");
		return false;
	}
	if (ENGINE_ctrl_cmd_string(e, "MODULE_PATH", bc_pkcs11_module, 0) != 1 ||
		ENGINE_init(e) != 1)
	{
		set_err(err, errlen, "cannot initialise the pkcs11 engine with bc_join.pkcs11_module");
		ENGINE_free(e);
		return false;
	}
	ENGINE_free(e);				/* the functional reference of ENGINE_init stays */
	pkcs11_engine = e;
	return true;
}

/*
 * Let go of the hardware: hw_libctx freed (the tpm2 provider torn down, its
 * ESAPI context and TCTI connection closed) and libp11's engine finished
 * (the PKCS#11 module finalised), so that the next key loaded opens them
 * anew.  After a key of theirs failed (bc_key_failed): the ESAPI context is
 * unusable after a transport failure, a TPM reset loses every object the
 * provider loaded, a token that went away its sessions.  Every key they
 * made is freed first (bc_keys_reset).
 */
void
bc_hw_reset(void)
{
	if (hw_libctx != NULL)
	{
		bc_set_key_libctx(NULL);
		if (prov_tpm2 != NULL)
			(void) OSSL_PROVIDER_unload(prov_tpm2);
		if (prov_default != NULL)
			(void) OSSL_PROVIDER_unload(prov_default);
		OSSL_LIB_CTX_free(hw_libctx);
		hw_libctx = NULL;
		prov_tpm2 = NULL;
		prov_default = NULL;
	}
	if (pkcs11_engine != NULL)
	{
		(void) ENGINE_finish(pkcs11_engine);
		pkcs11_engine = NULL;
	}
	n_engine_keys = 0;
	ERR_clear_error();
}

/* Forget the engine's keys (every key was freed: bc_keys_reset). */
void
bc_hw_forget_keys(void)
{
	n_engine_keys = 0;
}

/* True when key runs in an engine (a pkcs11: key of libp11's). */
bool
bc_hw_key_in_engine(const EVP_PKEY *key)
{
	int			i;

	for (i = 0; key != NULL && i < n_engine_keys; i++)
		if (engine_keys[i] == key)
			return true;
	return false;
}

/* The one key an OSSL_STORE URI names, opened in libctx (NULL: OpenSSL's default). */
static EVP_PKEY *
store_load(const char *uri, OSSL_LIB_CTX *libctx, const char *propq, char *err, size_t errlen)
{
	OSSL_STORE_CTX *ctx;
	EVP_PKEY   *key = NULL;

	ctx = OSSL_STORE_open_ex(uri, libctx, propq, NULL, NULL, NULL, NULL, NULL);
	if (ctx == NULL)
	{
		set_err(err, errlen, "cannot open the key");
		return NULL;
	}
	(void) OSSL_STORE_expect(ctx, OSSL_STORE_INFO_PKEY);
	while (key == NULL && !OSSL_STORE_eof(ctx))
	{
		OSSL_STORE_INFO *info = OSSL_STORE_load(ctx);

		if (info == NULL)
		{
			if (OSSL_STORE_error(ctx))
				break;
			continue;
		}
		if (OSSL_STORE_INFO_get_type(info) == OSSL_STORE_INFO_PKEY)
			key = OSSL_STORE_INFO_get1_PKEY(info);
		OSSL_STORE_INFO_free(info);
	}
	if (key == NULL)
		set_err(err, errlen, "no private key in it");
	OSSL_STORE_close(ctx);
	return key;
}

/* True when the file's text is one line starting with prefix (the line copied to out). */
static bool
one_line_ref(const char *text, size_t n, const char *prefix, char *out, size_t outlen)
{
	size_t		len = n;

	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' ||
					   text[len - 1] == ' ' || text[len - 1] == '\t'))
		len--;
	if (len < strlen(prefix) || strncmp(text, prefix, strlen(prefix)) != 0 ||
		len >= outlen || memchr(text, '\n', len) != NULL || memchr(text, '\0', len) != NULL)
		return false;
	memcpy(out, text, len);
	out[len] = '\0';
	return true;
}

/* What the file at path holds (bc_join.h). */
BcKeyKind
bc_hw_key_kind(const char *path)
{
	char		buf[HW_FILE_MAX + 1];
	char		ref[HW_FILE_MAX + 1];
	size_t		n;
	FILE	   *f = fopen(path, "rb");
	BcKeyKind	kind = BC_KEY_FILE;

	if (f == NULL)
		return BC_KEY_FILE;
	n = fread(buf, 1, HW_FILE_MAX, f);
	fclose(f);
	buf[n] = '\0';
	if (one_line_ref(buf, n, "handle:", ref, sizeof(ref)))
		kind = BC_KEY_TPM_HANDLE;
	else if (one_line_ref(buf, n, "pkcs11:", ref, sizeof(ref)))
		kind = BC_KEY_PKCS11;
	else if (strstr(buf, "-----BEGIN TSS2 PRIVATE KEY-----") != NULL)
		kind = BC_KEY_TPM_FILE;
	OPENSSL_cleanse(buf, sizeof(buf));
	OPENSSL_cleanse(ref, sizeof(ref));
	return kind;
}

/* The private P-256 key at path, whatever holds it (bc_join.h). */
EVP_PKEY *
bc_hw_load_private(const char *path, BcKeyKind *kind_out, char *err, size_t errlen)
{
	char		buf[HW_FILE_MAX + 1];
	char		ref[HW_FILE_MAX + 1];
	size_t		n;
	FILE	   *f;
	EVP_PKEY   *key = NULL;
	BcKeyKind	kind = BC_KEY_FILE;

	err[0] = '\0';
	if ((f = fopen(path, "rb")) == NULL)
	{
		snprintf(err, errlen, "cannot open key file: %s", strerror(errno));
		return NULL;
	}
	n = fread(buf, 1, HW_FILE_MAX, f);
	if (ferror(f) || !feof(f))
	{
		fclose(f);
		snprintf(err, errlen, "cannot read key file, or it is over %d bytes", HW_FILE_MAX);
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';

	if (one_line_ref(buf, n, "handle:", ref, sizeof(ref)))
	{
		kind = BC_KEY_TPM_HANDLE;
		if (tpm2_provider(err, errlen))
			key = store_load(ref, hw_libctx, "?provider=tpm2", err, errlen);
	}
	else if (one_line_ref(buf, n, "pkcs11:", ref, sizeof(ref)))
	{
		kind = BC_KEY_PKCS11;
		if (pkcs11_eng(err, errlen))
		{
			key = ENGINE_load_private_key(pkcs11_engine, ref, NULL, NULL);
			if (key == NULL)
				set_err(err, errlen, "the token has no such key (or the PIN is wrong)");
			else if (!bc_hw_key_in_engine(key) && n_engine_keys < HW_ENGINE_KEYS_MAX)
				engine_keys[n_engine_keys++] = key;
		}
	}
	else
	{
		OSSL_LIB_CTX *libctx = NULL;

		if (strstr(buf, "-----BEGIN TSS2 PRIVATE KEY-----") != NULL)
		{
			kind = BC_KEY_TPM_FILE;
			if (!tpm2_provider(err, errlen))
				goto out;
			libctx = hw_libctx;
		}
		else if (strstr(buf, "-----BEGIN ") == NULL)
		{
			/* A plain key file is PEM, as it always was (the store would take DER too). */
			snprintf(err, errlen, "no PEM private key in file");
			goto out;
		}
		key = store_load(path, libctx, NULL, err, errlen);
	}
	if (key != NULL && !bc_pkey_is_p256(key))
	{
		EVP_PKEY_free(key);
		key = NULL;
		snprintf(err, errlen, "key is not an EC P-256 key");
	}
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	OPENSSL_cleanse(ref, sizeof(ref));
	ERR_clear_error();
	if (kind_out != NULL)
		*kind_out = kind;
	return key;
}
