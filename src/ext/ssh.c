/*
 * ssh.c: OpenSSH certificates (issue 47; docs/operator.md "21. SSH").
 *
 * Host certificates: bc_join.issue_ssh_host_cert(request jsonb), request
 * {"sshPublicKey": "<base64 of the key blob>", "proof": "<JWS>"}, the proof
 * signed by the node's current key over {"purpose":"ssh-host", "serial",
 * "sshKeySha256": <b64url SHA-256 of the blob>, "iat", "hostname"?,
 * "principals"?} (proof.c's checks, bound by sshKeySha256).  Principals come
 * from the pool's rule (ssh_settings, bc_join.ssh_rule_principals) within
 * the tenant's ssh_names; the proof's hostname is a claim the rule may take,
 * its principals a selection the rule must allow (else
 * ssh-host:principal).  Valid from now - 60 s to the proving node
 * certificate's notAfter; one certificate per (node certificate, key), a
 * repeat answers it again; at most BC_SSH_HOST_KEYS_MAX keys per node
 * certificate.  Signed by ssh-host-ca.key; without it INVALID_CONFIG.
 *
 * User certificates: a session proof with "sshUser": true gets, beside its
 * X.509 certificate, an OpenSSH user certificate for the CSR's key (the
 * same validity) from the pool's user rule (principals, force-command,
 * source-address, extensions), signed by ssh-user-ca.key; when the pool has
 * no rule or none of its names is allowed, the session is issued without
 * it and event ssh.user.refused says why.
 *
 * Every certificate is a row of bc_join.ssh_certs and a hash-chained audit
 * row (ssh.host.issue, ssh.user.issue).  The KRL (ssh_krl()) is made from
 * ssh_krl_state and ssh_certs alone; signed_ssh() publishes its hash and
 * the CA keys signed by every signing key; ssh_host_ca() and ssh_user_ca()
 * the CA keys as OpenSSH lines.  Encodings: src/common/ssh.c (bc_ssh.h).
 */
#include "bc_join.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include <openssl/err.h>

#include "bc_ssh.h"

#define WHO BC_PURPOSE_SSH_HOST
/* Most host keys certified per node certificate. */
#define BC_SSH_HOST_KEYS_MAX 4
/* A host certificate is valid from this many seconds before it is issued (clock skew). */
#define BC_SSH_BACKDATE 60
/* A base64 key blob in a request: BC_SSH_BLOB_MAX bytes. */
#define BC_SSH_BLOB_B64_MAX (((BC_SSH_BLOB_MAX + 2) / 3) * 4)

/* What a host request carries, parsed. */
typedef struct SshHostArg
{
	char	   *proof;
	unsigned char *blob;
	size_t		blob_len;
	char		key_sha_b64[44];
	unsigned char key_sha[BC_SHA256_LEN];
} SshHostArg;

static BcPlan find_host_cert = {
	"SELECT serial, certificate, principals, valid_before, issued_at, revoked_at IS NOT NULL "
	"FROM bc_join.ssh_certs WHERE node_serial = $1 AND key_sha256 = $2 AND kind = 'host' "
	"ORDER BY issued_at DESC LIMIT 1",
	2, {TEXTOID, BYTEAOID}
};

enum
{
	Anum_fh_serial = 1,
	Anum_fh_certificate,
	Anum_fh_principals,
	Anum_fh_valid_before,
	Anum_fh_issued_at,
	Anum_fh_revoked
};

static BcPlan count_host_keys = {
	"SELECT count(DISTINCT key_sha256) FROM bc_join.ssh_certs WHERE node_serial = $1 AND kind = 'host'",
	1, {TEXTOID}
};

static BcPlan node_facts = {
	"SELECT n.pool_id, floor(extract(epoch FROM c.not_after))::bigint "
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = $1",
	1, {TEXTOID}
};

static BcPlan rule_principals = {
	"SELECT bc_join.ssh_rule_principals($1, $2, $3)",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan user_options = {
	"SELECT user_force_command, user_source_address, user_extensions "
	"FROM bc_join.ssh_settings WHERE pool_id = $1",
	1, {TEXTOID}
};

static BcPlan insert_ssh_cert = {
	"INSERT INTO bc_join.ssh_certs (serial, kind, tenant_id, node_id, node_serial, session_cert_serial, "
	"       ca_key, key_sha256, key_fingerprint, key_id, principals, critical_options, extensions, "
	"       valid_after, valid_before, certificate) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, to_timestamp($14), "
	"        to_timestamp($15), $16) ON CONFLICT (serial) DO NOTHING",
	16, {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BYTEAOID, BYTEAOID, TEXTOID,
	TEXTOID, TEXTARRAYOID, JSONBOID, TEXTARRAYOID, FLOAT8OID, FLOAT8OID, BYTEAOID}
};

static BcPlan krl_state = {
	"SELECT version, extract(epoch FROM changed_at)::bigint, changed_at FROM bc_join.ssh_krl_state",
	0, {InvalidOid}
};

static BcPlan krl_revoked = {
	"SELECT ca_key, array_agg(serial ORDER BY serial) FROM bc_join.ssh_certs "
	"WHERE revoked_at IS NOT NULL AND valid_before > $1 GROUP BY ca_key ORDER BY ca_key",
	1, {TIMESTAMPTZOID}
};

/* The extensions of a user certificate by name (ssh_settings.user_extensions). */
static const struct
{
	const char *name;
	unsigned	flag;
}			ssh_exts[] = {
	{"permit-X11-forwarding", BC_SSH_EXT_X11},
	{"permit-agent-forwarding", BC_SSH_EXT_AGENT},
	{"permit-port-forwarding", BC_SSH_EXT_PORT},
	{"permit-pty", BC_SSH_EXT_PTY},
	{"permit-user-rc", BC_SSH_EXT_USER_RC},
};

/* INVALID_CONFIG: the SSH CA key of this kind is not in bc_join.key_dir. */
static void
missing_ca(const char *file)
{
	ereport(ERROR,
			(errcode(ERRCODE_BC_INVALID_CONFIG),
			 errmsg("%s is missing", file),
			 errdetail("INVALID_CONFIG: SSH certificates are signed by %s in bc_join.key_dir.", file),
			 errhint("Add it with tools/bc-join-keygen --add-ssh-ca-keys.")));
}

/* The wire blob of a CA key (the public half), palloc()ed. */
static bytea *
ca_blob(EVP_PKEY *ca, const char *file)
{
	unsigned char *blob = NULL;
	size_t		len = 0;
	int			st = bc_ssh_pubkey_blob(ca, &blob, &len);

	if (st != BC_OK)
		bc_key_failed(psprintf("read the public key of %s", file), ca, st);
	return bc_take_bytea(blob, len, false);
}

/* A C string array as text[]. */
static Datum
text_array(char **items, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n > 0 ? n : 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = CStringGetTextDatum(items[i]);
	return PointerGetDatum(construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The strings of a text[] datum (no NULLs), palloc()ed; their count in *n. */
static char **
array_strings(Datum a, int *n)
{
	Datum	   *d;
	bool	   *nulls;
	char	  **out;
	int			i;

	deconstruct_array(DatumGetArrayTypeP(a), TEXTOID, -1, false, TYPALIGN_INT, &d, &nulls, n);
	out = palloc(sizeof(char *) * (*n > 0 ? *n : 1));
	for (i = 0; i < *n; i++)
		out[i] = nulls[i] ? "" : TextDatumGetCString(d[i]);
	return out;
}

/* A JSON array of strings. */
static char *
json_strings(char **items, int n)
{
	StringInfoData s;
	int			i;

	initStringInfo(&s);
	appendStringInfoChar(&s, '[');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&s, ',');
		escape_json(&s, items[i]);
	}
	appendStringInfoChar(&s, ']');
	return s.data;
}

/* Standard base64 of data, palloc()ed. */
static char *
b64(const unsigned char *data, size_t n)
{
	char	   *out = palloc(bc_b64_encoded_len(n) + 1);

	bc_b64_encode(data, n, out);
	return out;
}

/* A random certificate serial: 63 bits, never 0. */
static int64
random_serial(void)
{
	uint64		v = 0;

	while (v == 0)
	{
		if (!pg_strong_random(&v, sizeof(v)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random SSH certificate serial")));
		v &= UINT64CONST(0x7fffffffffffffff);
	}
	return (int64) v;
}

/*
 * The principals a pool's rule gives (ssh_rule_principals); NULL: no rule.
 * fresh: a snapshot of its own (sees what committed before a lock taken).
 */
static char **
rule_names(const char *kind, const char *pool_id, const char *vars, bool fresh, int *n)
{
	Datum		v[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		isnull;
	Datum		a;

	*n = 0;
	if (pool_id == NULL)
		return NULL;
	v[0] = CStringGetTextDatum(kind);
	v[1] = CStringGetTextDatum(pool_id);
	v[2] = JsonbPGetDatum(bc_jsonb(vars));
	if (bc_spi_exec(&rule_principals, v, nulls, !fresh, 1) != 1)
		elog(ERROR, "bc_join.ssh_rule_principals returned no row");
	a = bc_spi_datum(1, &isnull);
	if (isnull)
		return NULL;
	return array_strings(a, n);
}

/* Unix seconds as a TimestampTz. */
static TimestampTz
from_unix(int64 t)
{
	return (TimestampTz) ((t - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY) *
						  USECS_PER_SEC);
}

/* What one certificate is made of, and the row that records it. */
typedef struct SshIssue
{
	const char *kind;			/* "host" or "user" */
	const char *tenant;
	const char *node_id;
	const char *node_serial;
	const char *session_cert_serial;	/* user only */
	EVP_PKEY   *ca;
	const char *ca_file;
	const unsigned char *key_blob;
	size_t		key_blob_len;
	const char *key_id;
	char	  **principals;
	int			n_principals;
	int64		valid_after;
	int64		valid_before;
	const char *force_command;	/* user only; NULL: none */
	const char *source_address;
	char	  **extensions;
	int			n_extensions;
	/* out */
	int64		serial;
	unsigned char *cert;
	size_t		cert_len;
} SshIssue;

/*
 * Sign the certificate under a new random serial and record it in
 * ssh_certs, retrying on a serial taken; audit it ("ssh.<kind>.issue").
 */
static void
issue_cert(SshIssue *s)
{
	bc_ssh_cert_params p;
	unsigned char sha[BC_SHA256_LEN];
	char		fp[64];
	char		ca_fp[64];
	bytea	   *ca = ca_blob(s->ca, s->ca_file);
	StringInfoData opts;
	StringInfoData detail;
	unsigned	ext = 0;
	int			i;
	int			tries;

	/* an SSH key ID holds 255 bytes: a SPIFFE ID longer than that is the trust domain's */
	if (strlen(s->key_id) > 255)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the SPIFFE ID %s is too long for an SSH key ID", s->key_id),
				 errdetail("INVALID_CONFIG: an OpenSSH key ID holds at most 255 bytes."),
				 errhint("A shorter bc_join.trust_domain makes every SPIFFE ID shorter.")));
	memset(&p, 0, sizeof(p));
	for (i = 0; i < s->n_extensions; i++)
	{
		int			j;

		for (j = 0; j < lengthof(ssh_exts); j++)
			if (strcmp(s->extensions[i], ssh_exts[j].name) == 0)
				ext |= ssh_exts[j].flag;
	}
	p.type = strcmp(s->kind, "host") == 0 ? BC_SSH_CERT_HOST : BC_SSH_CERT_USER;
	p.key_blob = s->key_blob;
	p.key_blob_len = s->key_blob_len;
	p.key_id = s->key_id;
	p.principals = (const char *const *) s->principals;
	p.n_principals = (size_t) s->n_principals;
	p.valid_after = (uint64_t) s->valid_after;
	p.valid_before = (uint64_t) s->valid_before;
	p.force_command = s->force_command;
	p.source_address = s->source_address;
	p.extensions = ext;
	if (bc_sha256(s->key_blob, s->key_blob_len, sha) != BC_OK ||
		bc_ssh_fingerprint(s->key_blob, s->key_blob_len, fp) != BC_OK ||
		bc_ssh_fingerprint((unsigned char *) VARDATA(ca), VARSIZE(ca) - VARHDRSZ, ca_fp) != BC_OK)
		elog(ERROR, "could not hash an SSH public key");

	initStringInfo(&opts);
	bc_json_begin(&opts);
	if (s->force_command != NULL)
		bc_json_member(&opts, "force-command", s->force_command);
	if (s->source_address != NULL)
		bc_json_member(&opts, "source-address", s->source_address);
	bc_json_end(&opts);

	for (tries = 0;; tries++)
	{
		Datum		v[16];
		char		nulls[16];
		unsigned char *cert = NULL;
		size_t		len = 0;
		int			st;

		if (tries >= 8)
			elog(ERROR, "no free SSH certificate serial after %d tries", tries);
		s->serial = random_serial();
		p.serial = (uint64_t) s->serial;
		st = bc_ssh_cert_sign(&p, s->ca, &cert, &len);
		if (st == BC_EINVAL)
			elog(ERROR, "an SSH %s certificate could not be made of what was checked", s->kind);
		if (st != BC_OK)
			bc_key_failed(psprintf("sign an SSH certificate with %s", s->ca_file), s->ca, st);
		s->cert = (unsigned char *) VARDATA(bc_take_bytea(cert, len, false));
		s->cert_len = len;

		memset(nulls, ' ', sizeof(nulls));
		v[0] = Int64GetDatum(s->serial);
		v[1] = CStringGetTextDatum(s->kind);
		v[2] = CStringGetTextDatum(s->tenant);
		v[3] = CStringGetTextDatum(s->node_id);
		v[4] = CStringGetTextDatum(s->node_serial);
		if (s->session_cert_serial != NULL)
			v[5] = CStringGetTextDatum(s->session_cert_serial);
		else
			nulls[5] = 'n';
		v[6] = PointerGetDatum(ca);
		v[7] = PointerGetDatum(bc_bytea(sha, sizeof(sha)));
		v[8] = CStringGetTextDatum(fp);
		v[9] = CStringGetTextDatum(s->key_id);
		v[10] = text_array(s->principals, s->n_principals);
		v[11] = JsonbPGetDatum(bc_jsonb(opts.data));
		v[12] = text_array(s->extensions, s->n_extensions);
		v[13] = Float8GetDatum((double) s->valid_after);
		v[14] = Float8GetDatum((double) s->valid_before);
		v[15] = PointerGetDatum(bc_bytea(s->cert, s->cert_len));
		if (bc_spi_exec(&insert_ssh_cert, v, nulls, false, 0) == 1)
			break;
	}

	initStringInfo(&detail);
	bc_json_begin(&detail);
	bc_json_member(&detail, "serial", psprintf(INT64_FORMAT, s->serial));
	bc_json_member_raw(&detail, "principals", json_strings(s->principals, s->n_principals));
	bc_json_member(&detail, "keyId", s->key_id);
	bc_json_member(&detail, "keyFingerprint", fp);
	bc_json_member(&detail, "validBefore", bc_rfc3339(from_unix(s->valid_before)));
	bc_json_member(&detail, "caFingerprint", ca_fp);
	bc_json_member(&detail, "nodeSerial", s->node_serial);
	if (s->session_cert_serial != NULL)
		bc_json_member(&detail, "sessionSerial", s->session_cert_serial);
	if (s->force_command != NULL || s->source_address != NULL)
		bc_json_member_raw(&detail, "criticalOptions", opts.data);
	if (strcmp(s->kind, "user") == 0)
		bc_json_member_raw(&detail, "extensions", json_strings(s->extensions, s->n_extensions));
	bc_json_end(&detail);
	bc_audit(psprintf("ssh.%s.issue", s->kind), s->tenant, s->node_id, bc_jsonb(detail.data));
}

/* ------------------------------------------------------------ host certificates */

/*
 * Parse and bound {"sshPublicKey", "proof"}: 22023 for anything malformed,
 * a key blob that is not Ed25519 or ECDSA P-256/384/521 included.
 */
static void
parse_host_request(Jsonb *jb, SshHostArg *a)
{
	JsonbIterator *it;
	JsonbValue	v;
	char	   *key_b64 = NULL;
	EVP_PKEY   *pk = NULL;
	size_t		n;

	memset(a, 0, sizeof(*a));
	if (bc_jsonb_text_over(jb, BC_REQUEST_MAX))
		bc_invalid_input("the request is over %d bytes", BC_REQUEST_MAX);
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		bc_invalid_input("the request must be a JSON object");
	it = JsonbIteratorInit(&jb->root);
	(void) JsonbIteratorNext(&it, &v, true);
	while (JsonbIteratorNext(&it, &v, true) == WJB_KEY)
	{
		char	   *key = pnstrdup(v.val.string.val, v.val.string.len);

		(void) JsonbIteratorNext(&it, &v, true);
		if (strcmp(key, "sshPublicKey") == 0)
			key_b64 = bc_json_string_value(&v, key, BC_SSH_BLOB_B64_MAX);
		else if (strcmp(key, "proof") == 0)
			a->proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (key_b64 == NULL)
		bc_invalid_input("\"sshPublicKey\" is required");
	if (a->proof == NULL)
		bc_invalid_input("\"proof\" is required");
	n = strlen(key_b64);
	a->blob = palloc(n + 1);
	if (bc_b64_decode(key_b64, n, a->blob, n, &a->blob_len) != BC_OK || a->blob_len == 0)
		bc_invalid_input("\"sshPublicKey\" is not base64");
	if (bc_ssh_pubkey_parse(a->blob, a->blob_len, &pk) != BC_OK)
	{
		ERR_clear_error();
		bc_invalid_input("\"sshPublicKey\" is not an Ed25519 or ECDSA (P-256, P-384, P-521) public key blob");
	}
	EVP_PKEY_free(pk);
	if (bc_sha256(a->blob, a->blob_len, a->key_sha) != BC_OK ||
		bc_sha256_b64url(a->blob, a->blob_len, a->key_sha_b64) != BC_OK)
		elog(ERROR, "could not hash an SSH public key");
}

/*
 * The proof's "hostname" (NULL: none) and "principals" (NULL: none; else
 * 1..32 strings of 1..255 bytes, each once); anything else is
 * ssh-host:malformed-proof.
 */
static void
proof_host_members(Jsonb *pj, const char *tenant, char **hostname, char ***asked, int *n_asked)
{
	JsonbValue *h = getKeyJsonValueFromContainer(&pj->root, "hostname", 8, NULL);
	JsonbValue *p = getKeyJsonValueFromContainer(&pj->root, "principals", 10, NULL);
	const char *malformed = WHO ":malformed-proof";

	*hostname = NULL;
	*asked = NULL;
	*n_asked = 0;
	if (h != NULL && h->type != jbvNull)
	{
		if (h->type != jbvString || h->val.string.len < 1 || h->val.string.len > 253 ||
			memchr(h->val.string.val, '\0', h->val.string.len) != NULL)
			bc_refuse_join(malformed, tenant);
		*hostname = pnstrdup(h->val.string.val, h->val.string.len);
	}
	if (p != NULL && p->type != jbvNull)
	{
		JsonbIterator *it;
		JsonbValue	v;
		JsonbIteratorToken tok;
		char	  **out = palloc(sizeof(char *) * BC_SSH_PRINCIPALS_MAX);
		int			n = 0;

		if (p->type != jbvBinary || !JsonContainerIsArray(p->val.binary.data))
			bc_refuse_join(malformed, tenant);
		it = JsonbIteratorInit(p->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			char	   *s;
			int			i;

			if (tok != WJB_ELEM)
				continue;
			if (v.type != jbvString || n >= BC_SSH_PRINCIPALS_MAX || v.val.string.len < 1 ||
				v.val.string.len > BC_SSH_PRINCIPAL_MAX ||
				memchr(v.val.string.val, '\0', v.val.string.len) != NULL)
				bc_refuse_join(malformed, tenant);
			s = pnstrdup(v.val.string.val, v.val.string.len);
			for (i = 0; i < n; i++)
				if (strcmp(out[i], s) == 0)
					bc_refuse_join(malformed, tenant);
			out[n++] = s;
		}
		if (n == 0)
			bc_refuse_join(malformed, tenant);
		*asked = out;
		*n_asked = n;
	}
}

/* The signed "issued" answer of a host certificate. */
static Jsonb *
host_answer(const SshHostArg *a, const char *node_id, const char *tenant, TimestampTz issued_at,
			int64 serial, const unsigned char *cert, size_t cert_len, const char *principals_json,
			TimestampTz valid_before, MemoryContext outcxt)
{
	StringInfoData payload;

	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "status", BC_STATUS_ISSUED);
	bc_json_member(&payload, "sshKeySha256", a->key_sha_b64);
	bc_json_member(&payload, "issuedAt", bc_rfc3339(issued_at));
	bc_json_member(&payload, "nodeId", node_id);
	bc_json_member(&payload, "tenantId", tenant);
	bc_json_member(&payload, "sshCertificate", b64(cert, cert_len));
	bc_json_member(&payload, "sshSerial", psprintf(INT64_FORMAT, serial));
	bc_json_member_raw(&payload, "principals", principals_json);
	bc_json_member(&payload, "validBefore", bc_rfc3339(valid_before));
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

/* The host round: the node's proof, the rule, then the certificate (or the one already issued). */
static Jsonb *
ssh_host_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	SshHostArg *a = (SshHostArg *) arg;
	const BcKeys *keys = bc_keys();
	char	   *serial = bc_proof_serial(a->proof, WHO);
	BcProofCert c;
	Jsonb	   *pj;
	char	   *hostname;
	char	  **asked;
	int			n_asked;
	Datum		v[2];
	bool		isnull;
	char	   *pool_id;
	int64		not_after;
	StringInfoData vars;
	char	  **allowed;
	int			n_allowed;
	SshIssue	s;
	TimestampTz now = bc_now();
	StringInfoData ev;

	bc_lock_proof_cert(WHO, serial, false, &c);
	pj = bc_check_node_proof_bound(WHO, a->proof, serial, c.der, c.node_id, c.tenant,
								   "sshKeySha256", a->key_sha_b64, "key-binding");
	bc_require_live_cert(WHO, &c);
	proof_host_members(pj, c.tenant, &hostname, &asked, &n_asked);

	/*
	 * One certificate per node certificate and key (a repeat is answered
	 * again), at most BC_SSH_HOST_KEYS_MAX keys: the node certificate's
	 * requests one at a time, so that two at once cannot both issue (the
	 * reads after the lock are not read-only: a snapshot of their own sees
	 * what the request before committed).
	 */
	{
		unsigned char h[BC_SHA256_LEN];

		if (bc_sha256(serial, strlen(serial), h) != BC_OK)
			elog(ERROR, "could not hash a serial");
		(void) bc_xact_lock(BC_LOCK_SSH_HOST,
							((uint32) h[0] << 24) | ((uint32) h[1] << 16) | ((uint32) h[2] << 8) | h[3], true);
	}
	v[0] = CStringGetTextDatum(serial);
	v[1] = PointerGetDatum(bc_bytea(a->key_sha, BC_SHA256_LEN));
	if (bc_spi_exec(&find_host_cert, v, NULL, false, 1) == 1)
	{
		bytea	   *cert;
		char	  **names;
		int			n;
		int64		old_serial;
		TimestampTz issued_at;
		TimestampTz valid_before;

		if (bc_spi_bool(Anum_fh_revoked))
			bc_refuse_join(WHO ":revoked", c.tenant);
		cert = bc_spi_bytea_copy(Anum_fh_certificate);
		names = array_strings(bc_spi_datum(Anum_fh_principals, &isnull), &n);
		old_serial = bc_spi_int8(Anum_fh_serial);
		issued_at = DatumGetTimestampTz(bc_spi_datum(Anum_fh_issued_at, &isnull));
		valid_before = DatumGetTimestampTz(bc_spi_datum(Anum_fh_valid_before, &isnull));
		bc_node_seen(c.node_id, false);
		return host_answer(a, c.node_id, c.tenant, issued_at, old_serial,
						   (unsigned char *) VARDATA_ANY(cert), VARSIZE_ANY_EXHDR(cert),
						   json_strings(names, n), valid_before, outcxt);
	}
	if (bc_spi_exec(&count_host_keys, v, NULL, false, 1) != 1)
		elog(ERROR, "could not count the SSH host keys of certificate %s", serial);
	if (bc_spi_int8(1) >= BC_SSH_HOST_KEYS_MAX)
		bc_refuse_join(WHO ":too-many-keys", c.tenant);

	if (bc_spi_exec(&node_facts, v, NULL, true, 1) != 1)
		elog(ERROR, "node certificate %s vanished", serial);
	pool_id = bc_spi_text(1);
	not_after = bc_spi_int8(2);

	initStringInfo(&vars);
	bc_json_begin(&vars);
	bc_json_member(&vars, "node", c.node_id);
	bc_json_member(&vars, "tenant", c.tenant);
	if (pool_id != NULL)
		bc_json_member(&vars, "pool", pool_id);
	if (hostname != NULL)
		bc_json_member(&vars, "hostname", hostname);
	bc_json_end(&vars);
	/*
	 * A claimed hostname, one request at a time (whatever the node): the
	 * rule drops a name another node's live host certificate carries, and
	 * reads after this lock with a snapshot of its own, so two nodes
	 * claiming one name at once cannot both get it.
	 */
	if (hostname != NULL)
	{
		unsigned char h[BC_SHA256_LEN];

		if (bc_sha256(hostname, strlen(hostname), h) != BC_OK)
			elog(ERROR, "could not hash a hostname");
		(void) bc_xact_lock(BC_LOCK_SSH_HOSTNAME,
							((uint32) h[0] << 24) | ((uint32) h[1] << 16) | ((uint32) h[2] << 8) | h[3], true);
	}
	allowed = rule_names("host", pool_id, vars.data, hostname != NULL, &n_allowed);
	if (allowed == NULL)
		bc_refuse_join(WHO ":no-rule", c.tenant);
	if (asked != NULL)
	{
		int			i;

		/* What the host asked for, each of it allowed: never more than the rule gives. */
		for (i = 0; i < n_asked; i++)
		{
			int			j;
			bool		found = false;

			for (j = 0; j < n_allowed && !found; j++)
				found = strcmp(asked[i], allowed[j]) == 0;
			if (!found)
			{
				StringInfoData d;

				initStringInfo(&d);
				bc_json_begin(&d);
				bc_json_member(&d, "nodeId", c.node_id);
				bc_json_member(&d, "principal", asked[i]);
				bc_json_end(&d);
				bc_refuse_join_detail(WHO ":principal", c.tenant, d.data);
			}
		}
		allowed = asked;
		n_allowed = n_asked;
	}
	if (n_allowed == 0)
		bc_refuse_join(WHO ":no-principals", c.tenant);
	if (keys->n_ssh_host_ca == 0)
		missing_ca("ssh-host-ca.key");

	memset(&s, 0, sizeof(s));
	s.kind = "host";
	s.tenant = c.tenant;
	s.node_id = c.node_id;
	s.node_serial = serial;
	s.ca = keys->ssh_host_ca_set[0];
	s.ca_file = "ssh-host-ca.key";
	s.key_blob = a->blob;
	s.key_blob_len = a->blob_len;
	s.key_id = psprintf(BC_SPIFFE_NODE_FMT, bc_trust_domain, c.tenant, c.node_id);
	s.principals = allowed;
	s.n_principals = n_allowed;
	s.valid_after = bc_timestamp_to_unix(now) - BC_SSH_BACKDATE;
	s.valid_before = not_after;
	if (s.valid_before <= s.valid_after)
		bc_refuse_join(WHO ":expired", c.tenant);
	issue_cert(&s);
	bc_node_seen(c.node_id, false);

	initStringInfo(&ev);
	bc_json_begin(&ev);
	bc_json_member(&ev, "serial", psprintf(INT64_FORMAT, s.serial));
	bc_json_member(&ev, "kind", "host");
	bc_json_member(&ev, "nodeId", c.node_id);
	bc_json_member_raw(&ev, "principals", json_strings(allowed, n_allowed));
	bc_json_member(&ev, "validBefore", bc_rfc3339(from_unix(s.valid_before)));
	bc_json_end(&ev);
	bc_emit_event(c.tenant, "ssh.certificate.issued", bc_jsonb(ev.data));

	return host_answer(a, c.node_id, c.tenant, now, s.serial, s.cert, s.cert_len,
					   json_strings(allowed, n_allowed), from_unix(s.valid_before), outcxt);
}

PG_FUNCTION_INFO_V1(bc_issue_ssh_host_cert);

/* bc_join.issue_ssh_host_cert(request jsonb): an OpenSSH host certificate for a joined node. */
Datum
bc_issue_ssh_host_cert(PG_FUNCTION_ARGS)
{
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	SshHostArg	a;
	Jsonb	   *out;

	bc_require_sql_version();
	parse_host_request(PG_GETARG_JSONB_P(0), &a);
	memset(&req, 0, sizeof(req));
	req.attestor = WHO;
	req.role = BC_ROLE_NODE;
	req.claims = bc_jsonb("{}");
	bc_require_config();
	if (bc_keys()->n_ssh_host_ca == 0)
		missing_ca("ssh-host-ca.key");
	bc_require_primary();

	bc_spi_connect();
	out = bc_run_round(&req, ssh_host_round, &a, WHO, callcxt);
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}

/* ------------------------------------------------------------ user certificates */

/* Record that a session asked for an SSH user certificate and got none, and why. */
static void
user_refused(const BcSshSession *u, const char *reason)
{
	StringInfoData ev;

	initStringInfo(&ev);
	bc_json_begin(&ev);
	bc_json_member(&ev, "sessionId", u->session_id);
	bc_json_member(&ev, "nodeId", u->node_id);
	bc_json_member(&ev, "reason", reason);
	bc_json_end(&ev);
	bc_emit_event(u->tenant, "ssh.user.refused", bc_jsonb(ev.data));
}

/*
 * The SSH user certificate of a session whose proof said "sshUser": true:
 * for the CSR's key, the same validity as the session certificate, from the
 * pool's user rule.  Appends "sshCertificate" and "sshSerial" to payload;
 * without a rule, or with none of its names allowed, appends nothing and
 * records ssh.user.refused (the session is issued all the same).
 */
void
bc_ssh_session_cert(const BcJoinRequest *req, const BcSshSession *u, StringInfo payload)
{
	const BcKeys *keys = bc_keys();
	StringInfoData vars;
	char	  **names;
	int			n;
	Datum		v;
	bool		isnull;
	char	   *pool_id;
	SshIssue	s;
	unsigned char *blob = NULL;
	size_t		blob_len = 0;
	Datum		ext;
	static BcPlan node_pool = {
		"SELECT pool_id FROM bc_join.nodes WHERE id = $1", 1, {TEXTOID}
	};

	v = CStringGetTextDatum(u->node_id);
	if (bc_spi_exec(&node_pool, &v, NULL, true, 1) != 1)
		elog(ERROR, "node %s vanished", u->node_id);
	pool_id = bc_spi_text(1);

	initStringInfo(&vars);
	bc_json_begin(&vars);
	bc_json_member(&vars, "node", u->node_id);
	bc_json_member(&vars, "session", u->session_ref);
	if (u->context_ref[0] != '\0')
		bc_json_member(&vars, "context", u->context_ref);
	bc_json_end(&vars);
	names = rule_names("user", pool_id, vars.data, false, &n);
	if (names == NULL)
	{
		user_refused(u, "no-rule");
		return;
	}
	if (n == 0)
	{
		user_refused(u, "no-principals");
		return;
	}
	if (keys->n_ssh_user_ca == 0)
		missing_ca("ssh-user-ca.key");

	memset(&s, 0, sizeof(s));
	v = CStringGetTextDatum(pool_id);
	if (bc_spi_exec(&user_options, &v, NULL, true, 1) != 1)
		elog(ERROR, "the SSH settings of pool %s vanished", pool_id);
	s.force_command = bc_spi_text(1);
	s.source_address = bc_spi_text(2);
	ext = bc_spi_datum(3, &isnull);
	if (!isnull)
		s.extensions = array_strings(ext, &s.n_extensions);

	if (bc_ssh_pubkey_blob(bc_csr_pubkey(req->csr), &blob, &blob_len) != BC_OK)
		elog(ERROR, "could not encode the session key as an SSH public key");
	s.key_blob = (unsigned char *) VARDATA(bc_take_bytea(blob, blob_len, false));
	s.key_blob_len = blob_len;
	s.kind = "user";
	s.tenant = u->tenant;
	s.node_id = u->node_id;
	s.node_serial = u->node_serial;
	s.session_cert_serial = u->session_cert_serial;
	s.ca = keys->ssh_user_ca_set[0];
	s.ca_file = "ssh-user-ca.key";
	s.key_id = u->spiffe_id;
	s.principals = names;
	s.n_principals = n;
	s.valid_after = bc_timestamp_to_unix(u->not_before);
	s.valid_before = bc_timestamp_to_unix(u->not_after);
	issue_cert(&s);

	bc_json_member(payload, "sshCertificate", b64(s.cert, s.cert_len));
	bc_json_member(payload, "sshSerial", psprintf(INT64_FORMAT, s.serial));
}

/* ------------------------------------------------------------ KRL and CA keys */

/*
 * The KRL: ssh_krl_state's version and time (none: version 0 at the epoch),
 * then under each CA key the serials of its revoked certificates not
 * expired at that time, ascending (SPI connected).  *version gets the
 * version; malloc()ed bytes (taken after SPI_finish), length in *len.
 */
static unsigned char *
build_krl(int64 *version, size_t *len)
{
	int64		generated = 0;
	Datum		changed_at = TimestampTzGetDatum(from_unix(0));
	uint64		n;
	uint64		i;
	bc_ssh_krl_ca *cas;
	unsigned char *krl = NULL;
	int			st;
	bool		isnull;
	const char *td = bc_trust_domain != NULL ? bc_trust_domain : "";

	*version = 0;
	if (bc_spi_exec(&krl_state, NULL, NULL, true, 1) == 1)
	{
		*version = bc_spi_int8(1);
		generated = bc_spi_int8(2);
		changed_at = bc_spi_datum(3, &isnull);
	}
	n = bc_spi_exec(&krl_revoked, &changed_at, NULL, true, 0);
	cas = palloc0(sizeof(bc_ssh_krl_ca) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bytea	   *ca = DatumGetByteaPCopy(bc_spi_row_datum(i, 1, &isnull));
		Datum	   *d;
		bool	   *nulls;
		int			m;
		int			j;
		uint64_t   *serials;

		CHECK_FOR_INTERRUPTS();
		deconstruct_array(DatumGetArrayTypeP(bc_spi_row_datum(i, 2, &isnull)), INT8OID, 8,
						  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &d, &nulls, &m);
		serials = palloc(sizeof(uint64_t) * (m > 0 ? m : 1));
		for (j = 0; j < m; j++)
			serials[j] = (uint64_t) DatumGetInt64(d[j]);
		cas[i].ca_blob = (unsigned char *) VARDATA(ca);
		cas[i].ca_blob_len = VARSIZE(ca) - VARHDRSZ;
		cas[i].serials = serials;
		cas[i].n_serials = (size_t) m;
	}
	st = bc_ssh_krl_build((uint64_t) *version, (uint64_t) generated,
						  psprintf("bc_join %s", td), cas, (size_t) n, &krl, len);
	if (st == BC_ETOOBIG)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the SSH KRL is over %d bytes", BC_SSH_KRL_MAX),
				 errdetail("INVALID_CONFIG: too many revoked SSH certificates are unexpired.")));
	if (st != BC_OK)
		elog(ERROR, "could not build the SSH KRL (status %d)", st);
	return krl;
}

PG_FUNCTION_INFO_V1(bc_ssh_krl);

/* bc_join.ssh_krl(): the OpenSSH KRL, the same bytes until the next SSH revocation. */
Datum
bc_ssh_krl(PG_FUNCTION_ARGS)
{
	int64		version;
	size_t		len;
	unsigned char *krl;

	bc_spi_connect();
	krl = build_krl(&version, &len);
	SPI_finish();
	PG_RETURN_BYTEA_P(bc_take_bytea(krl, len, false));
}

/* One bc_ssh_pubkey_line per key of set (current first), comment bc_join-<what>@<td>. */
static char *
ca_lines(EVP_PKEY *const *set, int n, const char *what)
{
	StringInfoData out;
	const char *td = bc_require_trust_domain();
	int			i;

	initStringInfo(&out);
	for (i = 0; i < n; i++)
	{
		bytea	   *blob = ca_blob(set[i], what);
		char	   *line = bc_ssh_pubkey_line((unsigned char *) VARDATA(blob), VARSIZE(blob) - VARHDRSZ,
											  psprintf("bc_join-%s@%s", what, td));

		if (line == NULL)
			elog(ERROR, "could not write the %s public key line", what);
		appendStringInfoString(&out, bc_take_cstring(line));
	}
	return out.data;
}

/* The lines of ca_lines as a JSON array of strings without their newlines. */
static char *
ca_lines_json(EVP_PKEY *const *set, int n, const char *what)
{
	char	   *lines = ca_lines(set, n, what);
	char	  **items = palloc(sizeof(char *) * (n > 0 ? n : 1));
	int			m = 0;
	char	   *p = lines;

	while (*p != '\0' && m < n)
	{
		char	   *nl = strchr(p, '\n');

		items[m++] = nl != NULL ? pnstrdup(p, nl - p) : pstrdup(p);
		p = nl != NULL ? nl + 1 : p + strlen(p);
	}
	return json_strings(items, m);
}

PG_FUNCTION_INFO_V1(bc_ssh_host_ca);

/* bc_join.ssh_host_ca(): the host CA keys as OpenSSH lines (@cert-authority). */
Datum
bc_ssh_host_ca(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();

	if (k->n_ssh_host_ca == 0)
		missing_ca("ssh-host-ca.key");
	PG_RETURN_TEXT_P(cstring_to_text(ca_lines(k->ssh_host_ca_set, k->n_ssh_host_ca, "host-ca")));
}

PG_FUNCTION_INFO_V1(bc_ssh_user_ca);

/* bc_join.ssh_user_ca(): the user CA keys as OpenSSH lines (TrustedUserCAKeys). */
Datum
bc_ssh_user_ca(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();

	if (k->n_ssh_user_ca == 0)
		missing_ca("ssh-user-ca.key");
	PG_RETURN_TEXT_P(cstring_to_text(ca_lines(k->ssh_user_ca_set, k->n_ssh_user_ca, "user-ca")));
}

PG_FUNCTION_INFO_V1(bc_signed_ssh);

/*
 * bc_join.signed_ssh(): {"keys": [JWS...]} over {trustDomain, issuedAt,
 * krlVersion, krlSha256, hostCa, userCa}, signed by every live signing key
 * (bc_signed_by_each, as signed_trust_bundles()): what bcd takes the CA
 * keys and the KRL's hash from.
 */
Datum
bc_signed_ssh(PG_FUNCTION_ARGS)
{
	const BcKeys *k = bc_keys();
	int64		version;
	size_t		len;
	unsigned char *krl;
	char		sha[44];
	int			st;
	StringInfoData doc;

	bc_require_signing_key_live(k);
	(void) bc_require_trust_domain();
	bc_spi_connect();
	krl = build_krl(&version, &len);
	SPI_finish();
	st = bc_sha256_b64url(krl, len, sha);
	free(krl);
	if (st != BC_OK)
		elog(ERROR, "could not hash the SSH KRL");
	initStringInfo(&doc);
	bc_json_begin(&doc);
	bc_json_member(&doc, "trustDomain", bc_trust_domain);
	bc_json_member(&doc, "issuedAt", bc_rfc3339(bc_now()));
	bc_json_member_int(&doc, "krlVersion", version);
	bc_json_member(&doc, "krlSha256", sha);
	bc_json_member_raw(&doc, "hostCa", ca_lines_json(k->ssh_host_ca_set, k->n_ssh_host_ca, "host-ca"));
	bc_json_member_raw(&doc, "userCa", ca_lines_json(k->ssh_user_ca_set, k->n_ssh_user_ca, "user-ca"));
	bc_json_end(&doc);
	PG_RETURN_JSONB_P(bc_jsonb(bc_signed_by_each(k, doc.data)));
}
