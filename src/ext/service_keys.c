/*
 * service_keys.c: the JoinService keys, loaded from bc_join.key_dir.
 *
 * The private halves are read by the server from files only its OS user can
 * read, kept in this backend's memory for its lifetime (parsed once, not per
 * join), and never returned by any SQL function.  The public halves are
 * published through signing_jwk(), encryption_jwk(), node_ca_certificate()
 * and service_keys() (with its time, signed).
 */
#include "bc_join.h"
#include "pg_compat.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

static BcKeys keys;
static bool keys_loaded = false;
/* Loads so far in this backend: BcKeys.generation. */
static uint64 keys_generation = 0;
/* A key failed in its own operation: load everything anew at the next use. */
static bool keys_failed = false;

/* What the keys were loaded from: the directory's identity and times. */
static struct stat keys_dir_stat;
/* The local transaction in which key_dir was last compared with keys_dir_stat. */
static LocalTransactionId keys_checked_lxid = InvalidLocalTransactionId;

/* Free whatever is loaded. */
void
bc_keys_reset(void)
{
	int			i;

	/* The OpenSSL cache holds references too: release them through it first. */
	for (i = 0; i < keys.n_signing; i++)
	{
		bc_ossl_cache_forget(keys.signing_set[i]);
		EVP_PKEY_free(keys.signing_set[i]);
	}
	for (i = 0; i < keys.n_encryption; i++)
	{
		bc_ossl_cache_forget(keys.encryption_set[i]);
		EVP_PKEY_free(keys.encryption_set[i]);
	}
	for (i = 0; i < keys.n_signing_peers; i++)
		EVP_PKEY_free(keys.signing_peers[i]);
	bc_ossl_cache_forget(keys.node_ca_key);
	bc_ossl_cache_forget(keys.challenge_pkey);
	EVP_PKEY_free(keys.challenge_pkey);
	for (i = 0; i < keys.n_jwt_svid; i++)
	{
		bc_ossl_cache_forget(keys.jwt_svid_set[i]);
		EVP_PKEY_free(keys.jwt_svid_set[i]);
	}
	bc_ossl_cache_forget(keys.ocsp);
	EVP_PKEY_free(keys.ocsp);
	for (i = 0; i < keys.n_ssh_host_ca; i++)
	{
		bc_ossl_cache_forget(keys.ssh_host_ca_set[i]);
		EVP_PKEY_free(keys.ssh_host_ca_set[i]);
	}
	for (i = 0; i < keys.n_ssh_user_ca; i++)
	{
		bc_ossl_cache_forget(keys.ssh_user_ca_set[i]);
		EVP_PKEY_free(keys.ssh_user_ca_set[i]);
	}
	EVP_PKEY_free(keys.node_ca_key);
	for (i = 0; i < keys.n_node_ca_chain; i++)
		X509_free(keys.node_ca_chain[i]);
	for (i = 0; i < keys.n_node_ca_previous; i++)
		X509_free(keys.node_ca_previous[i]);
	free(keys.node_ca_pem);
	free(keys.node_ca_chain_b64);
	bc_hw_forget_keys();
	OPENSSL_cleanse(&keys, sizeof(keys));
	keys_loaded = false;
	keys_checked_lxid = InvalidLocalTransactionId;
}

/* True for the statuses a requester's input causes (bc_join.h). */
bool
bc_status_is_input(int status)
{
	return status == BC_EINVAL || status == BC_EVERIFY || status == BC_ETOOBIG ||
		status == BC_EUNSUPPORTED;
}

/*
 * A private key of key_dir failed in its own operation (bc_join.h): for a
 * key in a TPM or a PKCS#11 token, the hardware did not answer (stopped,
 * unplugged, its daemon gone).  Never a refusal: the caller's request was
 * not the cause, so it is INVALID_CONFIG (the gateway's 500, which bcd
 * retries) and nothing is recorded or spent (the round rolls back).
 *
 * Then the backend must get a working key again once the hardware is back.
 * A TPM's keys are let go with their library context at the next use and
 * loaded anew (bc_hw_reset).  A PKCS#11 token's cannot be: libp11 keeps
 * every key object it handed out, with its object handle, for the life of
 * the process, and the module does not enumerate its slots again in the
 * same process (SoftHSM2: "General Error"), so the backend ends (FATAL,
 * the same SQLSTATE, the transaction rolled back first) and the client's
 * next connection loads the keys in a new backend.
 */
void
bc_key_failed(const char *what, EVP_PKEY *key, int status)
{
	char		ossl[512];
	bool		engine = bc_hw_key_in_engine(key);

	bc_ossl_errors(ossl, sizeof(ossl));
	keys_failed = true;
	if (status != BC_EKEY && !engine)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not %s", what),
				 errdetail("%s%s%s.", bc_status_str(status), ossl[0] ? ": " : "", ossl)));
	ereport(engine ? FATAL : ERROR,
			(errcode(ERRCODE_BC_INVALID_CONFIG),
			 errmsg("a bc_join key could not %s", what),
			 errdetail("INVALID_CONFIG: the key's own operation failed in its %s%s%s. "
					   "A key in a TPM or a PKCS#11 token fails so while the hardware is unreachable; %s",
					   engine ? "PKCS#11 engine" : "provider", ossl[0] ? ": " : "", ossl,
					   engine ? "this backend ends (its PKCS#11 module cannot open the token again), "
					   "and a new connection loads the keys anew." :
					   "this backend loads its keys again at its next use.")));
	pg_unreachable();
}

/* Why a load failed: kept until it is raised (after the retries). */
typedef struct LoadError
{
	const char *msg;
	char	   *detail;
} LoadError;

#define LOAD_FAIL(e, m, d) \
	do { (e)->msg = (m); (e)->detail = (d); return false; } while (0)

/* Raise INVALID_CONFIG about the key directory. */
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
static bool
check_private_mode(const char *path, bool dir, LoadError *e)
{
	struct stat st;

	if (stat(path, &st) != 0)
		LOAD_FAIL(e, "bc_join key directory is incomplete", psprintf("%s: %m.", path));
	if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		LOAD_FAIL(e, "bc_join key directory is malformed",
				  psprintf("%s is not a %s.", path, dir ? "directory" : "regular file"));
	if (st.st_uid != geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
		LOAD_FAIL(e, "bc_join keys are readable by others",
				  psprintf("%s must be owned by the server's OS user with no group or other access (mode 0%o).",
						   path, (unsigned) (st.st_mode & 07777)));
	return true;
}

/* Read one private key file; an optional one that does not exist is NULL. */
static bool
load_private(const char *name, bool optional, EVP_PKEY **out, LoadError *e)
{
	char	   *path = psprintf("%s/%s", bc_key_dir, name);
	char		err[256];

	*out = NULL;
	if (optional && access(path, F_OK) != 0 && errno == ENOENT)
		return true;
	if (!check_private_mode(path, false, e))
		return false;
	*out = bc_hw_load_private(path, NULL, err, sizeof(err));
	if (*out == NULL)
		LOAD_FAIL(e, "could not load a bc_join key", psprintf("%s: %s.", path, err));
	return true;
}

/*
 * Load one kind of key: NAME.key (the current one, required unless
 * optional: then without it none of the kind is loaded), then NAME.next.key
 * and NAME.previous.key when present; a key twice (a link made while
 * rotating) counts once.
 */
static bool
load_set(const char *name, bool optional, EVP_PKEY **set, int *n, char (*kids)[44], LoadError *e)
{
	static const char *const suffixes[BC_KEYSET_MAX] = {".key", ".next.key", ".previous.key"};
	int			i;

	*n = 0;
	for (i = 0; i < BC_KEYSET_MAX; i++)
	{
		EVP_PKEY   *k;
		char		kid[44];
		bool		dup = false;
		int			j;

		if (!load_private(psprintf("%s%s", name, suffixes[i]), i > 0 || optional, &k, e))
			return false;
		if (k == NULL && i == 0)
			return true;		/* an optional kind without its current key */
		if (k == NULL)
			continue;
		if (bc_jwk_thumbprint(k, kid) != BC_OK)
		{
			EVP_PKEY_free(k);
			LOAD_FAIL(e, "could not compute a key id", psprintf("%s%s is not a P-256 key.", name, suffixes[i]));
		}
		for (j = 0; j < *n; j++)
			dup |= EVP_PKEY_eq(set[j], k) == 1;
		if (dup)
		{
			EVP_PKEY_free(k);
			continue;
		}
		if (kids != NULL)
			memcpy(kids[*n], kid, sizeof(kid));
		set[(*n)++] = k;
	}
	return true;
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * signing.peer-<name>.pub (public, any owner and mode, as node-ca.crt): the
 * other nodes' signing keys, in the order of their names; a key this node
 * holds itself counts once.
 */
static bool
load_peers(LoadError *e)
{
	DIR		   *d = opendir(bc_key_dir);
	struct dirent *de;
	char	   *names[BC_SIGNING_PEERS_MAX + 1];
	int			n = 0;
	int			i;

	if (d == NULL)
		LOAD_FAIL(e, "bc_join key directory is incomplete", psprintf("%s: %m.", bc_key_dir));
	while ((de = readdir(d)) != NULL)
	{
		size_t		len = strlen(de->d_name);

		if (strncmp(de->d_name, "signing.peer-", 13) != 0 || len <= 13 + 4 ||
			strcmp(de->d_name + len - 4, ".pub") != 0)
			continue;
		if (n == BC_SIGNING_PEERS_MAX)
		{
			closedir(d);
			LOAD_FAIL(e, "bc_join key directory has too many peer keys",
					  psprintf("At most %d signing.peer-<name>.pub files.", BC_SIGNING_PEERS_MAX));
		}
		names[n++] = pstrdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(names[0]), cmp_names);
	for (i = 0; i < n; i++)
	{
		char	   *path = psprintf("%s/%s", bc_key_dir, names[i]);
		char		err[256];
		EVP_PKEY   *k = bc_pkey_read_pem_file(path, 0, err, sizeof(err));
		bool		dup = false;
		int			j;

		if (k == NULL)
			LOAD_FAIL(e, "could not load a peer's signing key", psprintf("%s: %s.", path, err));
		for (j = 0; j < keys.n_signing; j++)
			dup |= EVP_PKEY_eq(keys.signing_set[j], k) == 1;
		for (j = 0; j < keys.n_signing_peers; j++)
			dup |= EVP_PKEY_eq(keys.signing_peers[j], k) == 1;
		ERR_clear_error();
		if (dup)
			EVP_PKEY_free(k);
		else
			keys.signing_peers[keys.n_signing_peers++] = k;
	}
	return true;
}

/* The PEM and base64 DER copies of the node CA bundle. */
static bool
encode_bundle(LoadError *e)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	BUF_MEM    *mem;
	StringInfoData b64;
	int			i;

	if (bio == NULL)
		LOAD_FAIL(e, "out of memory", "Could not encode the node CA certificate.");
	initStringInfo(&b64);
	for (i = 0; i < keys.n_node_ca_chain; i++)
	{
		unsigned char *der = NULL;
		int			derlen = i2d_X509(keys.node_ca_chain[i], &der);
		char	   *s;

		if (derlen <= 0 || PEM_write_bio_X509(bio, keys.node_ca_chain[i]) != 1)
		{
			OPENSSL_free(der);
			BIO_free(bio);
			LOAD_FAIL(e, "could not encode the node CA certificate", "DER or PEM encoding failed.");
		}
		s = palloc(bc_b64_encoded_len(derlen) + 1);
		bc_b64_encode(der, derlen, s);
		OPENSSL_free(der);
		appendStringInfo(&b64, "%s\"%s\"", i > 0 ? "," : "", s);
	}
	BIO_get_mem_ptr(bio, &mem);
	keys.node_ca_pem = malloc(mem->length + 1);
	keys.node_ca_chain_b64 = strdup(b64.data);
	if (keys.node_ca_pem == NULL || keys.node_ca_chain_b64 == NULL)
	{
		BIO_free(bio);
		LOAD_FAIL(e, "out of memory", "Could not copy the node CA certificate.");
	}
	memcpy(keys.node_ca_pem, mem->data, mem->length);
	keys.node_ca_pem[mem->length] = '\0';
	BIO_free(bio);
	return true;
}

/* Load every key from bc_join.key_dir into keys; false and e on failure. */
static bool
load_all(LoadError *e)
{
	char	   *path;
	char		err[256];
	size_t		n = 0;
	int			i;

	if (!check_private_mode(bc_key_dir, true, e))
		return false;
	if (!load_set("signing", false, keys.signing_set, &keys.n_signing, keys.signing_kids, e) ||
		!load_set("encryption", false, keys.encryption_set, &keys.n_encryption, NULL, e) ||
		!load_private("node-ca.key", false, &keys.node_ca_key, e))
		return false;
	keys.signing = keys.signing_set[0];
	memcpy(keys.signing_kid, keys.signing_kids[0], sizeof(keys.signing_kid));
	if (!load_peers(e))
		return false;
	keys.encryption = keys.encryption_set[0];

	path = psprintf("%s/node-ca.crt", bc_key_dir);
	if (bc_cert_read_pem_bundle(path, NULL, 0, keys.node_ca_chain, BC_NODE_CA_CHAIN_MAX,
								&n, err, sizeof(err)) != BC_OK)
		LOAD_FAIL(e, "could not load the node CA certificate", psprintf("%s: %s.", path, err));
	keys.n_node_ca_chain = (int) n;
	keys.node_ca = keys.node_ca_chain[0];
	keys.node_ca_anchor = keys.node_ca_chain[n - 1];

	/*
	 * Rotating the intermediate (tools/bc-join-keygen --rotate-intermediate)
	 * writes node-ca.next.crt, then renames the new node-ca.key into place,
	 * then node-ca.next.crt over node-ca.crt: between the two renames the key
	 * is the next certificate's, which then issues.
	 */
	if (X509_check_private_key(keys.node_ca, keys.node_ca_key) != 1 &&
		access(path = psprintf("%s/node-ca.next.crt", bc_key_dir), F_OK) == 0)
	{
		X509	   *next[BC_NODE_CA_CHAIN_MAX];
		size_t		m = 0;

		ERR_clear_error();
		if (bc_cert_read_pem_bundle(path, NULL, 0, next, BC_NODE_CA_CHAIN_MAX, &m,
									err, sizeof(err)) == BC_OK)
		{
			if (X509_check_private_key(next[0], keys.node_ca_key) == 1)
			{
				for (i = 0; i < keys.n_node_ca_chain; i++)
					X509_free(keys.node_ca_chain[i]);
				memcpy(keys.node_ca_chain, next, m * sizeof(next[0]));
				keys.n_node_ca_chain = (int) m;
				keys.node_ca = next[0];
				keys.node_ca_anchor = next[m - 1];
			}
			else
				while (m > 0)
					X509_free(next[--m]);
		}
	}
	ERR_clear_error();
	if (X509_check_private_key(keys.node_ca, keys.node_ca_key) != 1)
		LOAD_FAIL(e, "node-ca.key does not match node-ca.crt",
				  "The node CA's private key must be the one the first certificate of node-ca.crt certifies.");
	/* The bundle is one chain: each certificate issued by the next. */
	for (i = 0; i + 1 < keys.n_node_ca_chain; i++)
		if (X509_check_issued(keys.node_ca_chain[i + 1], keys.node_ca_chain[i]) != X509_V_OK)
			LOAD_FAIL(e, "node-ca.crt is not one chain",
					  psprintf("Certificate %d of node-ca.crt is not issued by certificate %d "
							   "(the issuing CA first, then its chain up to the root).", i + 1, i + 2));

	/*
	 * node-ca.previous.crt (optional, public): the intermediate(s) before
	 * the current one (tools/bc-join-keygen --rotate-intermediate keeps it),
	 * so that a node certificate they issued still chains to the root when
	 * an agent presents only its leaf (x509pop).
	 */
	path = psprintf("%s/node-ca.previous.crt", bc_key_dir);
	if (access(path, F_OK) == 0)
	{
		if (bc_cert_read_pem_bundle(path, NULL, 0, keys.node_ca_previous, BC_NODE_CA_CHAIN_MAX,
									&n, err, sizeof(err)) != BC_OK)
			LOAD_FAIL(e, "could not load the previous node CA certificate",
					  psprintf("%s: %s.", path, err));
		keys.n_node_ca_previous = (int) n;
	}

	/*
	 * challenge.key seals the state of two-round attestors.  A directory
	 * without it still serves one-round joins; sealing then raises
	 * INVALID_CONFIG (bc_challenge_keys()).
	 */
	path = psprintf("%s/challenge.key", bc_key_dir);
	if (access(path, F_OK) == 0)
	{
		if (!check_private_mode(path, false, e))
			return false;
		/* A key in hardware (or its TSS2 file): P-256, through hwkeys.c. */
		if (bc_hw_key_kind(path) != BC_KEY_FILE)
		{
			if ((keys.challenge_pkey = bc_hw_load_private(path, NULL, err, sizeof(err))) == NULL)
				LOAD_FAIL(e, "could not load a bc_join key", psprintf("%s: %s.", path, err));
		}
		else if (bc_state_key_read_file(path, keys.challenge32, &keys.challenge_pkey,
										err, sizeof(err)) != BC_OK)
			LOAD_FAIL(e, "could not load a bc_join key", psprintf("%s: %s.", path, err));
		keys.has_challenge = true;
	}

	/*
	 * jwt-svid.key (optional, any kind hwkeys.c loads): signs JWT-SVIDs.  A
	 * directory without it serves everything else; issue_jwt_svid() then
	 * raises INVALID_CONFIG.  With it, jwt-svid.next.key (staged) and
	 * jwt-svid.previous.key (promoted from, not yet retired) are published
	 * beside it and never sign (tools/bc-join-keygen --stage-jwt-key).
	 */
	if (!load_set("jwt-svid", true, keys.jwt_svid_set, &keys.n_jwt_svid, keys.jwt_svid_kids, e))
		return false;
	if (keys.n_jwt_svid > 0)
	{
		keys.jwt_svid = keys.jwt_svid_set[0];
		memcpy(keys.jwt_svid_kid, keys.jwt_svid_kids[0], sizeof(keys.jwt_svid_kid));
	}

	/*
	 * ocsp.key (optional, any kind hwkeys.c loads): signs OCSP responses
	 * (ocsp.c).  A directory without it serves everything else;
	 * ocsp_response() then raises INVALID_CONFIG.
	 */
	if (!load_private("ocsp.key", true, &keys.ocsp, e))
		return false;

	/*
	 * ssh-host-ca.key, ssh-user-ca.key (optional, P-256, any kind hwkeys.c
	 * loads): the OpenSSH CAs (ssh.c).  Without one, issuance of its kind is
	 * INVALID_CONFIG; with it, its .next.key and .previous.key are published.
	 */
	if (!load_set("ssh-host-ca", true, keys.ssh_host_ca_set, &keys.n_ssh_host_ca, NULL, e) ||
		!load_set("ssh-user-ca", true, keys.ssh_user_ca_set, &keys.n_ssh_user_ca, NULL, e))
		return false;
	return encode_bundle(e);
}

/* 1 when the directory is not the one (or not as) the keys were loaded from. */
static bool
dir_changed(const struct stat *a, const struct stat *b)
{
	return a->st_dev != b->st_dev || a->st_ino != b->st_ino ||
		a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec ||
		a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec;
}

/*
 * The service keys.  Loaded once per backend, and again in the first call
 * of a transaction that finds key_dir changed (a file added, renamed or
 * removed: how keys rotate, see tools/bc-join-keygen), so that every call in
 * one transaction sees the same keys.  A rotation moves files one at a time;
 * a load that fails, or that saw the directory change under it, is tried
 * again for a moment before it is an error.
 */
const BcKeys *
bc_keys(void)
{
	LoadError	e = {NULL, NULL};
	struct stat before;
	struct stat after;
	int			attempt;

	/*
	 * After a key's operation failed, nothing of the hardware is trusted to
	 * work again as it is: the keys are freed, the provider and engine let
	 * go, and everything is loaded anew (a load while the hardware is still
	 * away is INVALID_CONFIG, as for a new backend).
	 */
	if (keys_failed)
	{
		bc_keys_reset();
		bc_hw_reset();
		keys_failed = false;
	}
	if (keys_loaded)
	{
		if (MyProc == NULL || BC_MY_LXID == keys_checked_lxid)
			return &keys;
		if (bc_key_dir != NULL && stat(bc_key_dir, &after) == 0 &&
			!dir_changed(&after, &keys_dir_stat))
		{
			keys_checked_lxid = BC_MY_LXID;
			return &keys;
		}
		bc_keys_reset();
	}

	if (bc_key_dir == NULL || bc_key_dir[0] == '\0')
		config_error("bc_join.key_dir is not set",
					 "The JoinService has no keys to sign, open tokens or issue certificates with.");
	for (attempt = 0;; attempt++)
	{
		bool		ok;

		CHECK_FOR_INTERRUPTS();
		if (stat(bc_key_dir, &before) != 0)
			memset(&before, 0, sizeof(before));
		ok = load_all(&e);
		if (stat(bc_key_dir, &after) != 0)
			memset(&after, 0, sizeof(after));
		if (ok && !dir_changed(&before, &after))
			break;
		bc_keys_reset();
		if (attempt >= 10)
		{
			if (ok)
				config_error("bc_join key directory keeps changing",
							 "It changed under every one of ten loads.");
			config_error(e.msg, e.detail);
		}
		pg_usleep(20 * 1000L);
	}
	keys_dir_stat = after;

	/*
	 * The kernel stamps a directory's change with a coarse clock (a few
	 * milliseconds): two renames of one rotation may share a stamp.  While
	 * the directory changed that recently, the stamp proves nothing, so the
	 * next transaction loads again.
	 */
	{
		struct timespec now;

		if (clock_gettime(CLOCK_REALTIME, &now) != 0 ||
			(now.tv_sec - after.st_mtim.tv_sec) * 1000 +
			(now.tv_nsec - after.st_mtim.tv_nsec) / 1000000 < 100 ||
			(now.tv_sec - after.st_ctim.tv_sec) * 1000 +
			(now.tv_nsec - after.st_ctim.tv_nsec) / 1000000 < 100)
			memset(&keys_dir_stat, 0, sizeof(keys_dir_stat));
	}
	keys_checked_lxid = MyProc != NULL ? BC_MY_LXID : InvalidLocalTransactionId;
	keys.generation = ++keys_generation;
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
	return bc_jsonb(json);
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

/* Append key's public JWK, with its RFC 7638 kid when with_kid. */
static void
append_jwk(StringInfo buf, EVP_PKEY *key, bool with_kid)
{
	char	   *jwk = NULL;
	char		kid[44];

	if (bc_jwk_from_pkey(key, &jwk) != BC_OK || bc_jwk_thumbprint(key, kid) != BC_OK)
	{
		bc_free(jwk);
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("could not encode a public key as a JWK")));
	}
	jwk = bc_take_cstring(jwk);
	if (!with_kid)
	{
		appendStringInfoString(buf, jwk);
		return;
	}
	/* The canonical JWK is one object: its members, then the kid. */
	appendBinaryStringInfo(buf, jwk, strlen(jwk) - 1);
	bc_json_member(buf, "kid", kid);
	bc_json_end(buf);
}

/*
 * Append a jwt-svid key's public JWK with its kid, then member name: value
 * ("use": "jwt-svid" in the SPIFFE bundle; "alg" and "use" in jwks()).
 */
void
bc_append_jwt_jwk(StringInfo buf, EVP_PKEY *key, const char *name, const char *value)
{
	StringInfoData jwk;

	initStringInfo(&jwk);
	append_jwk(&jwk, key, true);
	jwk.len--;					/* reopen the JWK: its members, then ours */
	jwk.data[jwk.len] = '\0';
	bc_json_member(&jwk, name, value);
	bc_json_end(&jwk);
	appendStringInfoString(buf, jwk.data);
	pfree(jwk.data);
}

/*
 * The service-keys document: trustDomain, signingKey and encryptionKey (the
 * current ones, as signing_jwk() and encryption_jwk()), signingKeys and encryptionKeys (every key in key_dir, the
 * current one first, each with its kid; signingKeys then the peers' keys), jwtKeys (jwt-svid.key's, then
 * jwt-svid.next.key's and jwt-svid.previous.key's when present, each with its
 * kid; empty without jwt-svid.key: only the first signs), nodeCa (node-ca.crt: the issuing CA
 * first, then its chain up to the root).
 */
static char *
service_keys_text(const BcKeys *k, const char *issued_at)
{
	StringInfoData buf;
	int			i;
	bool		first = true;
	/* Keys marked compromised (mark_key_compromised) are published no more. */
	List	   *marked = bc_compromised_kids();

	(void) bc_require_trust_domain();
	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "trustDomain", bc_trust_domain);
	bc_json_key(&buf, "signingKey");
	append_jwk(&buf, k->signing, false);
	bc_json_key(&buf, "encryptionKey");
	append_jwk(&buf, k->encryption, false);
	bc_json_key(&buf, "signingKeys");
	appendStringInfoChar(&buf, '[');
	for (i = 0; i < k->n_signing; i++)
	{
		if (bc_kid_listed(marked, k->signing_kids[i]))
			continue;
		if (!first)
			appendStringInfoChar(&buf, ',');
		first = false;
		append_jwk(&buf, k->signing_set[i], true);
	}
	for (i = 0; i < k->n_signing_peers; i++)
	{
		char		kid[44];

		if (bc_jwk_thumbprint(k->signing_peers[i], kid) == BC_OK && bc_kid_listed(marked, kid))
			continue;
		if (!first)
			appendStringInfoChar(&buf, ',');
		first = false;
		append_jwk(&buf, k->signing_peers[i], true);
	}
	appendStringInfoChar(&buf, ']');
	bc_json_key(&buf, "encryptionKeys");
	appendStringInfoChar(&buf, '[');
	for (i = 0; i < k->n_encryption; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		append_jwk(&buf, k->encryption_set[i], true);
	}
	appendStringInfoChar(&buf, ']');
	bc_json_key(&buf, "jwtKeys");
	appendStringInfoChar(&buf, '[');
	for (i = 0; i < k->n_jwt_svid; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		append_jwk(&buf, k->jwt_svid_set[i], true);
	}
	appendStringInfoChar(&buf, ']');
	bc_json_member(&buf, "nodeCa", k->node_ca_pem);
	if (issued_at != NULL)
		bc_json_member(&buf, "issuedAt", issued_at);
	bc_json_end(&buf);
	return buf.data;
}

/* The compact JWS ES256 of doc by key (kid in its header), palloc()ed. */
static char *
sign_doc(EVP_PKEY *key, const char *kid, const char *doc)
{
	char	   *jws = NULL;

	int			st = bc_jws_sign_es256(key, kid, (unsigned char *) doc, strlen(doc), &jws);

	if (st != BC_OK)
		bc_key_failed("sign the service keys with signing.key", key, st);
	return bc_take_cstring(jws);
}

/*
 * service_keys()'s last answer, for the transaction and issuedAt it was made
 * in: ECDSA signatures differ at every signing, and a STABLE function gives
 * one answer within a transaction (the keys cannot change within one).
 */
static char *sk_cached = NULL;
static char sk_cached_at[32];
static LocalTransactionId sk_cached_lxid = InvalidLocalTransactionId;

PG_FUNCTION_INFO_V1(bc_service_keys);

/*
 * service_keys(): what an agent pins, in one document: the members above,
 * issuedAt (the service clock) and "signed", the document with issuedAt
 * signed by the current signing key (one JWS of signed_service_keys()), so
 * that the time agents pin is the service's statement: a rollover issued
 * before it is refused from the first one on (docs/operator.md).
 */
Datum
bc_service_keys(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();
	char	   *at = bc_rfc3339(bc_now());
	char	   *doc;
	char	   *jws;
	StringInfoData out;

	if (sk_cached != NULL && MyProc != NULL && BC_MY_LXID == sk_cached_lxid &&
		strcmp(sk_cached_at, at) == 0)
		PG_RETURN_JSONB_P(bc_jsonb(sk_cached));
	bc_require_signing_key_live(k);
	doc = service_keys_text(k, at);
	jws = sign_doc(k->signing, k->signing_kid, doc);
	initStringInfo(&out);
	appendBinaryStringInfo(&out, doc, strlen(doc) - 1);	/* without its closing brace */
	bc_json_member(&out, "signed", jws);
	bc_json_end(&out);
	if (sk_cached != NULL)
		pfree(sk_cached);
	sk_cached = MemoryContextStrdup(TopMemoryContext, out.data);
	strlcpy(sk_cached_at, at, sizeof(sk_cached_at));
	sk_cached_lxid = MyProc != NULL ? BC_MY_LXID : InvalidLocalTransactionId;
	PG_RETURN_JSONB_P(bc_jsonb(out.data));
}

/*
 * {"keys": [JWS...]}: doc signed once by every signing key in key_dir (each
 * JWS names its kid), never by a key marked compromised
 * (mark_key_compromised); palloc()ed.
 */
char *
bc_signed_by_each(const BcKeys *k, const char *doc)
{
	StringInfoData out;
	int			i;
	bool		first = true;
	List	   *marked = bc_compromised_kids();

	initStringInfo(&out);
	bc_json_begin(&out);
	bc_json_key(&out, "keys");
	appendStringInfoChar(&out, '[');
	for (i = 0; i < k->n_signing; i++)
	{
		if (bc_kid_listed(marked, k->signing_kids[i]))
			continue;
		appendStringInfo(&out, "%s\"%s\"", first ? "" : ",",
						 sign_doc(k->signing_set[i], k->signing_kids[i], doc));
		first = false;
	}
	appendStringInfoChar(&out, ']');
	bc_json_end(&out);
	return out.data;
}

PG_FUNCTION_INFO_V1(bc_signed_service_keys);

/*
 * signed_service_keys(): the rollover an agent accepts, {"keys": [JWS...]}:
 * the service-keys document with issuedAt, signed once by every signing key
 * in key_dir (each JWS names its kid), so that an agent pinning any one of
 * them can verify the set that replaces its pins; never by a key marked
 * compromised (mark_key_compromised), which the document lists no more.
 */
Datum
bc_signed_service_keys(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();

	bc_require_signing_key_live(k);
	PG_RETURN_JSONB_P(bc_jsonb(bc_signed_by_each(k, service_keys_text(k, bc_rfc3339(bc_now())))));
}

/* #46 federation */

static BcPlan federated_bundles = {
	"SELECT bc_join.federated_bundles()::text", 0, {InvalidOid}
};

PG_FUNCTION_INFO_V1(bc_signed_trust_bundles);

/*
 * signed_trust_bundles(): the federated trust domains' bundles as agents
 * take them (GET /v1/trust-bundles), {"keys": [JWS...]} in the shape of
 * signed_service_keys(), each JWS over {trustDomain, issuedAt, bundles:
 * {"spiffe://<td>": bundle}} (federated_bundles(): the bundles the database
 * accepted), signed by every live signing key.
 */
Datum
bc_signed_trust_bundles(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();
	MemoryContext cxt = CurrentMemoryContext;
	char	   *bundles;
	StringInfoData doc;

	bc_require_signing_key_live(k);
	(void) bc_require_trust_domain();
	bc_spi_connect();
	if (bc_spi_exec(&federated_bundles, NULL, NULL, true, 1) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("bc_join.federated_bundles() returned no row")));
	bundles = MemoryContextStrdup(cxt, bc_spi_text_req(1));
	SPI_finish();
	initStringInfo(&doc);
	bc_json_begin(&doc);
	bc_json_member(&doc, "trustDomain", bc_trust_domain);
	bc_json_member(&doc, "issuedAt", bc_rfc3339(bc_now()));
	bc_json_member_raw(&doc, "bundles", bundles);
	bc_json_end(&doc);
	PG_RETURN_JSONB_P(bc_jsonb(bc_signed_by_each(k, doc.data)));
}

PG_FUNCTION_INFO_V1(bc_federated_bundle_problem);

/*
 * federated_bundle_problem(bundle text): NULL when another trust domain's
 * bundle may be stored (bc_spiffe_bundle_check: size, key count, shape,
 * x509-svid certificates, jwt-svid kids, sequence and hint up to 2^53),
 * else why not, one lower-case sentence.
 */
Datum
bc_federated_bundle_problem(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	char		why[256];

	if (bc_spiffe_bundle_check(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), why, sizeof(why)) == BC_OK)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(why));
}

/* A misconfigured service fails loudly before anything is written. */
void
bc_require_config(void)
{
	(void) bc_keys();
	(void) bc_require_trust_domain();
}

/*
 * Append the bundle's x509-svid key of root: its public JWK with "use" and
 * "x5c" (the standard base64 DER of the certificate).
 */
static void
append_x509_svid_key(StringInfo buf, X509 *root)
{
	unsigned char *der = NULL;
	int			derlen = i2d_X509(root, &der);
	char	   *b64;

	if (derlen <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("could not encode the node CA root")));
	b64 = palloc(bc_b64_encoded_len((size_t) derlen) + 1);
	bc_b64_encode(der, (size_t) derlen, b64);
	OPENSSL_free(der);
	append_jwk(buf, X509_get0_pubkey(root), false);
	buf->len--;					/* reopen the JWK: its members, then ours */
	buf->data[buf->len] = '\0';
	bc_json_member(buf, "use", "x509-svid");
	bc_json_key(buf, "x5c");
	appendStringInfoChar(buf, '[');
	appendStringInfo(buf, "\"%s\"", b64);
	appendStringInfoChar(buf, ']');
	bc_json_end(buf);
}

/* #46 federation: the own bundle's sequence, by content (docs/operator.md, "Federation"). */
static BcPlan own_sequence = {
	"SELECT bc_join.own_bundle_sequence($1)", 1, {BYTEAOID}
};

/*
 * The bundle's spiffe_sequence: the one the database gave its keys (the
 * member text so far, SHA-256), bc_join.own_bundle_sequence(): equal keys
 * have the same sequence on every HA node, whatever the key directories'
 * mtimes, and new keys a higher one than any before (never lower than the
 * service clock's Unix seconds, so above the mtimes earlier versions
 * published).
 */
static int64
content_sequence(const char *keys, size_t len)
{
	unsigned char h[BC_SHA256_LEN];
	Datum		v;
	bool		isnull;
	int64		seq;

	if (bc_sha256(keys, len, h) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not hash the SPIFFE bundle's keys")));
	v = PointerGetDatum(bc_bytea(h, sizeof(h)));
	bc_spi_connect();
	if (bc_spi_exec(&own_sequence, &v, NULL, false, 1) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("bc_join.own_bundle_sequence() returned no row")));
	seq = DatumGetInt64(bc_spi_datum(1, &isnull));
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("bc_join.own_bundle_sequence() returned NULL")));
	SPI_finish();
	return seq;
}

PG_FUNCTION_INFO_V1(bc_spiffe_bundle);

/*
 * spiffe_bundle(): the trust domain's SPIFFE bundle (a JWKS): an x509-svid
 * key for each root of the node CA chain (the last certificate of
 * node-ca.crt, and of node-ca.previous.crt when that is another root), the
 * jwt-svid keys with their kids (jwt-svid.key first, then the next and
 * previous ones; none without jwt-svid.key), spiffe_sequence
 * (content_sequence: by the keys) and spiffe_refresh_hint.
 */
Datum
bc_spiffe_bundle(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();
	StringInfoData buf;
	int			i;

	(void) bc_require_trust_domain();
	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_key(&buf, "keys");
	appendStringInfoChar(&buf, '[');
	append_x509_svid_key(&buf, k->node_ca_anchor);
	if (k->n_node_ca_previous > 0)
	{
		X509	   *prev = k->node_ca_previous[k->n_node_ca_previous - 1];

		if (X509_cmp(prev, k->node_ca_anchor) != 0)
		{
			appendStringInfoChar(&buf, ',');
			append_x509_svid_key(&buf, prev);
		}
	}
	for (i = 0; i < k->n_jwt_svid; i++)
	{
		appendStringInfoChar(&buf, ',');
		bc_append_jwt_jwk(&buf, k->jwt_svid_set[i], "use", "jwt-svid");
	}
	appendStringInfoChar(&buf, ']');
	bc_json_member_int(&buf, "spiffe_sequence", content_sequence(buf.data, buf.len));
	bc_json_member_int(&buf, "spiffe_refresh_hint", BC_SPIFFE_REFRESH_HINT);
	bc_json_end(&buf);
	PG_RETURN_JSONB_P(bc_jsonb(buf.data));
}
