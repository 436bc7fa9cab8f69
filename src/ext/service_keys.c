/*
 * service_keys.c: the JoinService keys, loaded from bc_join.key_dir.
 *
 * The private halves are read by the server from files only its OS user can
 * read, kept in this backend's memory for its lifetime (parsed once, not per
 * join), and never returned by any SQL function.  The public halves are
 * published through signing_jwk(), encryption_jwk(), node_ca_certificate()
 * and service_keys().
 */
#include "bc_join.h"

#include <sys/stat.h>
#include <unistd.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include <openssl/pem.h>

static BcKeys keys;
static bool keys_loaded = false;

/* Free whatever is loaded. */
void
bc_keys_reset(void)
{
	/* The OpenSSL cache holds references too: release them through it first. */
	bc_ossl_cache_forget(keys.signing);
	bc_ossl_cache_forget(keys.encryption);
	bc_ossl_cache_forget(keys.node_ca_key);
	bc_ossl_cache_forget(keys.challenge_pkey);
	EVP_PKEY_free(keys.challenge_pkey);
	EVP_PKEY_free(keys.signing);
	EVP_PKEY_free(keys.encryption);
	EVP_PKEY_free(keys.node_ca_key);
	X509_free(keys.node_ca);
	free(keys.node_ca_pem);
	free(keys.node_ca_der);
	OPENSSL_cleanse(&keys, sizeof(keys));
	keys_loaded = false;
}

/* INVALID_CONFIG about the key directory. */
static void
config_error(const char *msg, const char *detail)
{
	bc_keys_reset();
	ereport(ERROR,
			(errcode(ERRCODE_BC_INVALID_CONFIG),
			 errmsg("%s", msg),
			 errdetail("INVALID_CONFIG: %s", detail),
			 errhint("Create a key directory with tools/bc-join-keygen and set bc_join.key_dir.")));
}

/* Refuse a private file that anyone but the server's OS user could read. */
static void
check_private_mode(const char *path, bool dir)
{
	struct stat st;

	if (stat(path, &st) != 0)
		config_error("bc_join key directory is incomplete",
					 psprintf("%s: %m.", path));
	if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		config_error("bc_join key directory is malformed",
					 psprintf("%s is not a %s.", path, dir ? "directory" : "regular file"));
	if (st.st_uid != geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
		config_error("bc_join keys are readable by others",
					 psprintf("%s must be owned by the server's OS user with no group or other access (mode 0%o).",
							  path, (unsigned) (st.st_mode & 07777)));
}

/* Read one private key file. */
static EVP_PKEY *
load_private(const char *dir, const char *name)
{
	char	   *path = psprintf("%s/%s", dir, name);
	char		err[256];
	EVP_PKEY   *k;

	check_private_mode(path, false);
	k = bc_pkey_read_pem_file(path, 1, err, sizeof(err));
	if (k == NULL)
		config_error("could not load a bc_join key", psprintf("%s: %s.", path, err));
	return k;
}

/* Load every key from bc_join.key_dir (once per backend). */
const BcKeys *
bc_keys(void)
{
	char	   *path;
	char		err[256];
	BIO		   *bio;
	BUF_MEM    *mem;
	unsigned char *der = NULL;
	int			derlen;

	if (keys_loaded)
		return &keys;

	if (bc_key_dir == NULL || bc_key_dir[0] == '\0')
		config_error("bc_join.key_dir is not set",
					 "The JoinService has no keys to sign, open tokens or issue certificates with.");
	check_private_mode(bc_key_dir, true);

	keys.signing = load_private(bc_key_dir, "signing.key");
	keys.encryption = load_private(bc_key_dir, "encryption.key");
	keys.node_ca_key = load_private(bc_key_dir, "node-ca.key");

	path = psprintf("%s/node-ca.crt", bc_key_dir);
	keys.node_ca = bc_cert_read_pem_file(path, err, sizeof(err));
	if (keys.node_ca == NULL)
		config_error("could not load the node CA certificate", psprintf("%s: %s.", path, err));
	if (X509_check_private_key(keys.node_ca, keys.node_ca_key) != 1)
		config_error("node-ca.key does not match node-ca.crt",
					 "The node CA's private key must be the one its certificate certifies.");
	if (bc_jwk_thumbprint(keys.signing, keys.signing_kid) != BC_OK)
		config_error("could not compute the signing key id", "The signing key is not a P-256 key.");

	/*
	 * challenge.key seals the state of two-round attestors.  A directory
	 * without it still serves one-round joins; sealing then raises
	 * INVALID_CONFIG (bc_challenge_keys()).
	 */
	path = psprintf("%s/challenge.key", bc_key_dir);
	if (access(path, F_OK) == 0)
	{
		check_private_mode(path, false);
		if (bc_state_key_read_file(path, keys.challenge32, &keys.challenge_pkey,
								   err, sizeof(err)) != BC_OK)
			config_error("could not load a bc_join key", psprintf("%s: %s.", path, err));
		keys.has_challenge = true;
	}

	/* Public copies of the CA certificate, PEM and DER. */
	bio = BIO_new(BIO_s_mem());
	if (bio == NULL || PEM_write_bio_X509(bio, keys.node_ca) != 1)
	{
		BIO_free(bio);
		config_error("could not encode the node CA certificate", "PEM encoding failed.");
	}
	BIO_get_mem_ptr(bio, &mem);
	keys.node_ca_pem = malloc(mem->length + 1);
	if (keys.node_ca_pem == NULL)
	{
		BIO_free(bio);
		config_error("out of memory", "Could not copy the node CA certificate.");
	}
	memcpy(keys.node_ca_pem, mem->data, mem->length);
	keys.node_ca_pem[mem->length] = '\0';
	BIO_free(bio);

	derlen = i2d_X509(keys.node_ca, &der);
	if (derlen <= 0)
		config_error("could not encode the node CA certificate", "DER encoding failed.");
	keys.node_ca_der = malloc(derlen);
	if (keys.node_ca_der == NULL)
	{
		OPENSSL_free(der);
		config_error("out of memory", "Could not copy the node CA certificate.");
	}
	memcpy(keys.node_ca_der, der, derlen);
	keys.node_ca_der_len = derlen;
	OPENSSL_free(der);

	keys_loaded = true;
	return &keys;
}

/* A public JWK as jsonb. */
static Jsonb *
public_jwk(EVP_PKEY *key)
{
	char	   *json = NULL;

	if (bc_jwk_from_pkey(key, &json) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("could not encode a public key as a JWK")));
	json = bc_take_cstring(json);
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(json)));
}

PG_FUNCTION_INFO_V1(bc_signing_jwk);

/* signing_jwk(): the public JWK responses are signed with. */
Datum
bc_signing_jwk(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(public_jwk(bc_keys()->signing));
}

PG_FUNCTION_INFO_V1(bc_encryption_jwk);

/* encryption_jwk(): the public JWK sealed tokens are encrypted to. */
Datum
bc_encryption_jwk(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(public_jwk(bc_keys()->encryption));
}

PG_FUNCTION_INFO_V1(bc_node_ca_certificate);

/* node_ca_certificate(): the node CA certificate, PEM. */
Datum
bc_node_ca_certificate(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(bc_keys()->node_ca_pem));
}

PG_FUNCTION_INFO_V1(bc_service_keys);

/* service_keys(): what an agent pins, in one document. */
Datum
bc_service_keys(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();
	char	   *sig = NULL;
	char	   *enc = NULL;
	StringInfoData buf;

	(void) bc_require_trust_domain();
	if (bc_jwk_from_pkey(k->signing, &sig) != BC_OK ||
		bc_jwk_from_pkey(k->encryption, &enc) != BC_OK)
	{
		bc_free(sig);
		bc_free(enc);
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("could not encode a public key as a JWK")));
	}
	sig = bc_take_cstring(sig);
	enc = bc_take_cstring(enc);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"trustDomain\":");
	escape_json(&buf, bc_trust_domain);
	appendStringInfo(&buf, ",\"signingKey\":%s,\"encryptionKey\":%s,\"nodeCa\":", sig, enc);
	escape_json(&buf, k->node_ca_pem);
	appendStringInfoChar(&buf, '}');
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}
