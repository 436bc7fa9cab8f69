/*
 * attestors/tpm.c: the built-in tpm attestor (docs/protocol.md, "The tpm attestor, round by round"), two
 * rounds, and the proof a renewal of a TPM-bound certificate carries.
 *
 * Round 1: the EK is trusted (enrolled by SHA-256 of its SPKI, or its
 * certificate chains to a root added with add_tpm_ek_root), the AK, the
 * certification of the node key by the AK, the node key is the CSR's, the
 * tenant resolves (enrollment, or a sealed join token checked without being
 * spent), a bound EK reclaims only its own node.  Then a challenge deferral
 * that writes nothing: MakeCredential for the AK's Name under the EK, the
 * secret sealed in the state (challenge_state.c) with the AK Name, the EK's
 * bind and the token id; the envelope binds attestor, CSR, role, notAfter.
 *
 * Round 2 (state, secret, quote and quoteSignature present): round 1 again,
 * the state opens and names this AK, EK and token, the secret is the sealed
 * one, the challenge is used once (attestation_uses), the quote by the AK
 * carries extraData SHA-256(secret || SHA-256(CSR DER)) and meets the PCR
 * policy if one applies.  Result: bind SHA-256(EK SPKI), nodeKey tpm,
 * nodeKeyUri urn:bc:tpm-ak:sha256:<hex of the AK Name's digest>.
 *
 * Evidence is read without raising (bc_json_members, evidence.c):
 * anything wrong in it is tpm:malformed, a recorded refusal.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "bc_tpm.h"

static const char *const tpm_roles[] = {BC_ROLE_NODE, BC_ROLE_SITE, NULL};

#define TPM_STATE_VERSION 1
#define TPM_CHALLENGE_TTL 300
/* Banks a PCR policy may name. */
#define TPM_PCR_BANKS_MAX 4
#define TPM_RENEW_LABEL "bc_join/tpm/renew"

/* ------------------------------------------------------------- evidence */

enum
{
	F_EK_PUB,
	F_EK_CERT,
	F_AK_PUB,
	F_NODE_PUB,
	F_CERTIFY,
	F_CERTIFY_SIG,
	F_STATE,
	F_SECRET,
	F_QUOTE,
	F_QUOTE_SIG,
	F_COUNT
};

static const struct
{
	const char *name;
	size_t		cap;			/* decoded bytes; characters for state */
	bool		binary;
}			tpm_fields[F_COUNT] = {
	{"ekPub", BC_TPM_STRUCT_MAX, true},
	{"ekCert", BC_TPM_EKCERT_MAX, true},
	{"akPub", BC_TPM_STRUCT_MAX, true},
	{"nodeKeyPub", BC_TPM_STRUCT_MAX, true},
	{"certifyInfo", BC_TPM_STRUCT_MAX, true},
	{"certifySignature", BC_TPM_STRUCT_MAX, true},
	{"state", BC_STATE_MAX, false},
	{"secret", BC_TPM_SECRET_LEN, true},
	{"quote", BC_TPM_STRUCT_MAX, true},
	{"quoteSignature", BC_TPM_STRUCT_MAX, true},
};

/* The members found, decoded. */
typedef struct TpmEvidence
{
	bool		has[F_COUNT];
	char	   *text[F_COUNT];	/* as sent */
	unsigned char *bin[F_COUNT];	/* decoded (binary members) */
	size_t		len[F_COUNT];
} TpmEvidence;

/* Decode every member found; false when one is not canonical base64url or over its cap. */
static bool
decode_members(TpmEvidence *ev)
{
	int			i;

	for (i = 0; i < F_COUNT; i++)
	{
		size_t		n;

		if (!ev->has[i])
			continue;
		n = strlen(ev->text[i]);
		if (!tpm_fields[i].binary)
		{
			if (n == 0 || n > tpm_fields[i].cap)
				return false;
			continue;
		}
		if (n == 0 || bc_b64url_decoded_maxlen(n) > tpm_fields[i].cap + 3)
			return false;
		ev->bin[i] = palloc(bc_b64url_decoded_maxlen(n) + 1);
		if (bc_b64url_decode(ev->text[i], n, ev->bin[i], tpm_fields[i].cap, &ev->len[i]) != BC_OK ||
			ev->len[i] == 0)
			return false;
	}
	return true;
}

/*
 * Scan and decode the evidence JSON without raising (bc_json_members).
 * false for anything malformed: invalid UTF-8 or JSON, not one object of
 * string members, an unknown or duplicate member, bad base64url, a member
 * over its cap.
 */
static bool
scan_evidence(const char *data, size_t len, TpmEvidence *ev)
{
	BcEvidenceMember m[F_COUNT];
	size_t		i;
	int			braces = 0;

	memset(ev, 0, sizeof(*ev));
	if (len == 0)
		return false;
	/* One flat object: no nesting for the recursive parser to descend. */
	for (i = 0; i < len; i++)
	{
		if (data[i] == '[' || (data[i] == '{' && ++braces > 1))
			return false;
	}
	memset(m, 0, sizeof(m));
	for (i = 0; i < F_COUNT; i++)
	{
		m[i].name = tpm_fields[i].name;
		m[i].max = INT_MAX;		/* decode_members checks the caps */
	}
	if (braces != 1 || !bc_json_members(data, (int) len, m, F_COUNT, false))
		return false;
	for (i = 0; i < F_COUNT; i++)
	{
		ev->has[i] = m[i].value != NULL;
		ev->text[i] = m[i].value;
	}
	return decode_members(ev);
}

/* ------------------------------------------------------------ structures */

/* The parsed structures of a certification (both rounds, and renewal). */
typedef struct TpmCertified
{
	bc_tpm_public ak;
	bc_tpm_public node;
	bc_tpm_attest certify;
	TPMT_SIGNATURE certify_sig;
	unsigned char ak_name[BC_TPM_NAME_MAX];
	size_t		ak_name_len;
} TpmCertified;

/* Refuse "<prefix><reason>". */
static void pg_attribute_noreturn()
tpm_refuse(const char *prefix, const char *reason, const char *tenant)
{
	bc_refuse_join(psprintf("%s%s", prefix, reason), tenant);
}

static char *ak_statement(const TpmCertified *c);

/*
 * Parse akPub, nodeKeyPub, certifyInfo, certifySignature and run checks 2
 * to 4 of docs/protocol.md, "The tpm attestor, round by round": the AK, the certification by it of the node key,
 * the node key and its equality with the CSR's.
 */
static void
check_certified(const char *prefix, const BcJoinRequest *req, const unsigned char *const *bin,
				const size_t *len, TpmCertified *c, const char *tenant)
{
	const char *reason = NULL;

	if (bc_tpm_public_parse(bin[0], len[0], &c->ak) != BC_OK ||
		bc_tpm_public_parse(bin[1], len[1], &c->node) != BC_OK ||
		bc_tpm_attest_parse(bin[2], len[2], &c->certify) != BC_OK ||
		bc_tpm_signature_parse(bin[3], len[3], &c->certify_sig) != BC_OK)
		tpm_refuse(prefix, "malformed", tenant);
	if (bc_tpm_check_ak(&c->ak, &reason) != BC_OK)
		tpm_refuse(prefix, reason, tenant);
	if (bc_tpm_name(&c->ak, c->ak_name, &c->ak_name_len) != BC_OK)
		tpm_refuse(prefix, "ak-name-alg", tenant);
	if (bc_tpm_verify_attest(&c->ak, &c->certify, &c->certify_sig, &reason) != BC_OK)
		tpm_refuse(prefix, reason, tenant);
	if (bc_tpm_check_certify(&c->certify, &c->node, &reason) != BC_OK)
		tpm_refuse(prefix, reason, tenant);
	if (bc_tpm_check_node_key(&c->node, &reason) != BC_OK)
		tpm_refuse(prefix, reason, tenant);
	if ((req->csr == NULL && bc_check_no_csr("nodeKeyPub is the CSR's key")) ||
		bc_tpm_node_key_matches(&c->node, bc_csr_pubkey(req->csr), &reason) == BC_OK)
	{
		if (bc_checking())
			bc_check_note("akStatement", ak_statement(c));
		return;
	}
	tpm_refuse(prefix, reason, tenant);
}

/* BC_TPM_AK_URN_PREFIX "sha256:" <lower-case hex of the AK Name's digest>. */
static char *
ak_statement(const TpmCertified *c)
{
	StringInfoData s;
	size_t		i;

	initStringInfo(&s);
	appendStringInfoString(&s, BC_TPM_AK_URN_PREFIX "sha256:");
	for (i = 2; i < c->ak_name_len; i++)
		appendStringInfo(&s, "%02x", c->ak_name[i]);
	return s.data;
}

/* ------------------------------------------------------------- EK trust */

static BcPlan ek_certificates = {
	"SELECT certificate, is_root FROM bc_join.tpm_ek_certificates ORDER BY sha256",
	0, {InvalidOid}
};

enum
{
	Anum_ekc_certificate = 1,
	Anum_ekc_is_root
};

static BcPlan ek_enrollment = {
	"SELECT tenant_id, pool_id, site_id, pcr_selection, pcr_values "
	"FROM bc_join.tpm_ek_enrollments WHERE ek_spki_sha256 = $1",
	1, {BYTEAOID}
};

enum
{
	Anum_enr_tenant = 1,
	Anum_enr_pool,
	Anum_enr_site,
	Anum_enr_pcr_selection,
	Anum_enr_pcr_values
};

/* An enrollment, when the EK has one. */
typedef struct TpmEnrollment
{
	bool		found;
	char	   *tenant_id;
	char	   *pool_id;
	char	   *site_id;
	char	   *pcr_selection;
	bytea	   *pcr_values;
} TpmEnrollment;

/* The enrollment of the EK whose SPKI hashes to bind. */
static void
find_enrollment(const unsigned char bind[BC_SHA256_LEN], TpmEnrollment *e)
{
	Datum		v = PointerGetDatum(bc_bytea(bind, BC_SHA256_LEN));

	memset(e, 0, sizeof(*e));
	if (bc_spi_exec(&ek_enrollment, &v, NULL, true, 1) != 1)
		return;
	e->found = true;
	e->tenant_id = bc_spi_text_req(Anum_enr_tenant);
	e->pool_id = bc_spi_text(Anum_enr_pool);
	e->site_id = bc_spi_text(Anum_enr_site);
	e->pcr_selection = bc_spi_text(Anum_enr_pcr_selection);
	if (e->pcr_selection != NULL)
		e->pcr_values = bc_spi_bytea_copy(Anum_enr_pcr_values);
}

/*
 * Check an EK certificate against the roots and intermediates added with
 * add_tpm_ek_root, at the service clock.  BC_OK, or BC_EVERIFY with the reason.
 */
static int
check_ek_cert(const unsigned char *der, size_t n, const bc_tpm_public *ek,
			  const char **reason)
{
	X509	   *cert = NULL;
	X509	  **roots;
	X509	  **inter;
	size_t		n_roots = 0;
	size_t		n_inter = 0;
	uint64		rows;
	uint64		i;

	if (bc_tpm_ek_cert_parse(der, n, &cert, reason) != BC_OK)
		return BC_EVERIFY;
	cert = bc_own_x509(CurrentMemoryContext, &cert);
	rows = bc_spi_exec(&ek_certificates, NULL, NULL, true, 0);
	roots = palloc0(sizeof(X509 *) * (rows + 1));
	inter = palloc0(sizeof(X509 *) * (rows + 1));
	for (i = 0; i < rows; i++)
	{
		bool		isnull;
		bytea	   *d = DatumGetByteaPP(bc_spi_row_datum(i, Anum_ekc_certificate, &isnull));
		bool		is_root = DatumGetBool(bc_spi_row_datum(i, Anum_ekc_is_root, &isnull));
		X509	   *x = NULL;

		if (bc_cert_parse((unsigned char *) VARDATA_ANY(d), VARSIZE_ANY_EXHDR(d), &x) != BC_OK)
			elog(ERROR, "a stored TPM EK certificate does not parse");
		x = bc_own_x509(CurrentMemoryContext, &x);
		if (is_root)
			roots[n_roots++] = x;
		else
			inter[n_inter++] = x;
	}
	return bc_tpm_check_ek_cert(cert, ek, roots, n_roots, inter, n_inter,
								bc_timestamp_to_unix(bc_now()), reason);
}

/* ------------------------------------------------------------ PCR policy */

/* A PCR policy: its banks, in order, over values. */
typedef struct TpmPcrPolicy
{
	size_t		n_banks;
	bc_tpm_pcr_bank banks[TPM_PCR_BANKS_MAX];
	bytea	   *values;
} TpmPcrPolicy;

static const struct
{
	const char *name;
	uint16_t	alg;
}			pcr_bank_names[] = {
	{"sha1", TPM2_ALG_SHA1}, {"sha256", TPM2_ALG_SHA256},
	{"sha384", TPM2_ALG_SHA384}, {"sha512", TPM2_ALG_SHA512},
};

/*
 * Parse a PCR selection "bank:i,j-k[+bank:...]" over values (the selected
 * PCRs' values concatenated in that order, ascending index in each bank).
 * NULL on success (and *normalized), else what is wrong.
 */
static const char *
parse_pcr_policy(const char *sel, bytea *values, TpmPcrPolicy *p, char **normalized)
{
	StringInfoData norm;
	const char *s = sel;
	size_t		need = 0;
	size_t		b;

	memset(p, 0, sizeof(*p));
	initStringInfo(&norm);
	while (*s)
	{
		size_t		nl = strcspn(s, ":");
		uint16_t	alg = 0;
		uint32_t	mask = 0;
		size_t		k;
		int			i;

		for (k = 0; k < lengthof(pcr_bank_names); k++)
		{
			if (strlen(pcr_bank_names[k].name) == nl && strncmp(s, pcr_bank_names[k].name, nl) == 0)
				alg = pcr_bank_names[k].alg;
		}
		if (alg == 0 || s[nl] != ':')
			return "a bank is sha1, sha256, sha384 or sha512 followed by ':'";
		if (p->n_banks == TPM_PCR_BANKS_MAX)
			return "at most four banks";
		for (b = 0; b < p->n_banks; b++)
		{
			if (p->banks[b].hash_alg == alg)
				return "a bank is named twice";
		}
		s += nl + 1;
		for (;;)
		{
			char	   *end;
			long		lo = strtol(s, &end, 10);
			long		hi = lo;

			if (end == s || *s == '-' || *s == '+')
				return "PCRs are numbers 0 to 23 or ranges i-j";
			s = end;
			if (*s == '-')
			{
				s++;
				hi = strtol(s, &end, 10);
				if (end == s || *s == '-' || *s == '+')
					return "PCRs are numbers 0 to 23 or ranges i-j";
				s = end;
			}
			if (lo < 0 || hi > 23 || lo > hi)
				return "PCRs are numbers 0 to 23 or ranges i-j";
			for (i = (int) lo; i <= (int) hi; i++)
			{
				if (mask & (1u << i))
					return "a PCR is named twice in a bank";
				mask |= 1u << i;
			}
			if (*s != ',')
				break;
			s++;
		}
		if (*s == '+')
		{
			s++;
			if (*s == '\0')
				return "a '+' must be followed by a bank";
		}
		else if (*s != '\0')
			return "unexpected characters";

		p->banks[p->n_banks].hash_alg = alg;
		p->banks[p->n_banks].pcrs = mask;
		p->banks[p->n_banks].values_len = (size_t) __builtin_popcount(mask) * bc_tpm_digest_size(alg);
		need += p->banks[p->n_banks].values_len;
		if (p->n_banks > 0)
			appendStringInfoChar(&norm, '+');
		for (k = 0; k < lengthof(pcr_bank_names); k++)
		{
			if (pcr_bank_names[k].alg == alg)
				appendStringInfo(&norm, "%s:", pcr_bank_names[k].name);
		}
		{
			bool		first = true;

			for (i = 0; i < 24; i++)
			{
				if (mask & (1u << i))
				{
					appendStringInfo(&norm, first ? "%d" : ",%d", i);
					first = false;
				}
			}
		}
		p->n_banks++;
	}
	if (p->n_banks == 0)
		return "the selection is empty";
	if (values == NULL || VARSIZE_ANY_EXHDR(values) != need)
		return psprintf("the values must be the %zu bytes of the selected PCRs, bank by bank, ascending index", need);
	p->values = values;
	{
		const unsigned char *v = (const unsigned char *) VARDATA_ANY(values);

		for (b = 0; b < p->n_banks; b++)
		{
			p->banks[b].values = v;
			v += p->banks[b].values_len;
		}
	}
	if (normalized != NULL)
		*normalized = norm.data;
	return NULL;
}

static BcPlan pcr_policy_lookup = {
	"SELECT selection, pcr_values FROM bc_join.tpm_pcr_policies "
	"WHERE tenant_id = $1 AND (pool_id = $2 OR pool_id IS NULL) "
	"ORDER BY pool_id IS NULL LIMIT 1",
	2, {TEXTOID, TEXTOID}
};

enum
{
	Anum_pcr_selection = 1,
	Anum_pcr_values
};

/*
 * The PCR policy that applies: the enrollment's own, else the pool's, else
 * the tenant's.  false when none does.
 */
static bool
find_pcr_policy(const TpmEnrollment *e, const char *tenant, const char *pool, TpmPcrPolicy *p)
{
	char	   *sel;
	bytea	   *values;
	const char *err;

	if (e != NULL && e->found && e->pcr_selection != NULL)
	{
		sel = e->pcr_selection;
		values = e->pcr_values;
	}
	else
	{
		Datum		v[2];
		char		nulls[2] = {' ', ' '};

		v[0] = CStringGetTextDatum(tenant);
		if (pool != NULL)
			v[1] = CStringGetTextDatum(pool);
		else
		{
			v[1] = (Datum) 0;
			nulls[1] = 'n';
		}
		if (bc_spi_exec(&pcr_policy_lookup, v, nulls, true, 1) != 1)
			return false;
		sel = bc_spi_text_req(Anum_pcr_selection);
		values = bc_spi_bytea_copy(Anum_pcr_values);
	}
	err = parse_pcr_policy(sel, values, p, NULL);
	if (err != NULL)
		bc_invalid_config("a stored TPM PCR policy is invalid: %s", err);
	return true;
}

/* Check a quote by the AK with extraData extra against policy (NULL: none). */
static void
check_quote(const char *prefix, const TpmCertified *c, const unsigned char *qbin, size_t qlen,
			const unsigned char *sbin, size_t slen, const unsigned char extra[BC_SHA256_LEN],
			const TpmPcrPolicy *policy, const char *tenant)
{
	bc_tpm_attest quote;
	TPMT_SIGNATURE sig;
	const char *reason = NULL;
	int			st;

	if (bc_tpm_attest_parse(qbin, qlen, &quote) != BC_OK ||
		bc_tpm_signature_parse(sbin, slen, &sig) != BC_OK)
		tpm_refuse(prefix, "malformed", tenant);
	if (bc_tpm_verify_attest(&c->ak, &quote, &sig, &reason) != BC_OK)
		tpm_refuse(prefix, reason, tenant);
	st = bc_tpm_check_quote(&quote, &sig, extra, BC_SHA256_LEN,
							policy ? policy->banks : NULL, policy ? policy->n_banks : 0, &reason);
	if (st == BC_EVERIFY)
		tpm_refuse(prefix, reason, tenant);
	if (st != BC_OK)
		bc_invalid_config("the TPM PCR policy does not fit its selection (%s)", reason);
}

/* ---------------------------------------------------------------- tenant */

static BcPlan bound_node = {
	"SELECT b.node_id, n.tenant_id, n.pool_id FROM bc_join.node_bindings b "
	"JOIN bc_join.nodes n ON n.id = b.node_id "
	"WHERE b.subject = $1 AND b.attestor = '" BC_ATTESTOR_TPM "'",
	1, {BYTEAOID}
};

enum
{
	Anum_bn_node = 1,
	Anum_bn_tenant,
	Anum_bn_pool
};

static BcPlan remember_ek = {
	"INSERT INTO bc_join.tpm_eks (ek_spki_sha256, ek_public, ek_certificate) VALUES ($1, $2, $3) "
	"ON CONFLICT (ek_spki_sha256) DO UPDATE SET ek_public = excluded.ek_public, "
	"       ek_certificate = excluded.ek_certificate, seen_at = bc_join.compute_now()",
	3, {BYTEAOID, BYTEAOID, BYTEAOID}
};

static BcPlan use_challenge = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, expires_at) "
	"VALUES ('" BC_ATTESTOR_TPM "', $1, $2) ON CONFLICT DO NOTHING",
	2, {BYTEAOID, TIMESTAMPTZOID}
};

static BcPlan enrollment_mode = {
	"SELECT enrollment FROM bc_join.tpm_settings WHERE tenant_id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_em_enrollment = 1
};

static BcPlan latest_request = {
	"SELECT id, state, expires_at <= bc_join.compute_now() FROM bc_join.join_requests "
	"WHERE attestor = '" BC_ATTESTOR_TPM "' AND csr_sha256 = $1 ORDER BY created_at DESC, id LIMIT 1",
	1, {BYTEAOID}
};

enum
{
	Anum_lr_id = 1,
	Anum_lr_state,
	Anum_lr_expired
};

static BcPlan create_request = {
	"SELECT bc_join.create_join_request($1, '" BC_ATTESTOR_TPM "', $2, $3)",
	3, {TEXTOID, JSONBOID, JSONBOID}
};

enum
{
	Anum_cr_request_id = 1
};

/* The hex of n bytes. */
static char *
hex_of(const unsigned char *b, size_t n)
{
	char	   *s = palloc(2 * n + 1);
	size_t		i;

	for (i = 0; i < n; i++)
		snprintf(s + 2 * i, 3, "%02x", b[i]);
	return s;
}

/*
 * An EK neither enrolled nor chained, in a tenant whose tpm enrollment mode
 * is approval: a join request an operator approves (which enrolls the EK).
 * Defers while it waits; refuses once rejected or expired.  has_cert: the EK
 * came with a certificate (that chains to no configured root), which the
 * request's detail tells the operator (ekChain unchained, else none).
 */
static void
await_enrollment(const BcJoinRequest *req, const unsigned char bind[BC_SHA256_LEN],
				 const BcToken *tok, bool has_cert, BcOutcome *out)
{
	Datum		v[3];
	StringInfoData ctx;
	StringInfoData detail;

	v[0] = PointerGetDatum(bc_bytea(req->csr_sha256, BC_SHA256_LEN));
	if (bc_spi_exec(&latest_request, v, NULL, true, 1) == 1)
	{
		char	   *id = bc_spi_text_req(Anum_lr_id);
		char	   *state = bc_spi_text_req(Anum_lr_state);

		if (strcmp(state, "rejected") == 0)
			bc_refuse_join("tpm:rejected", tok->tenant_id);
		if (bc_spi_bool(Anum_lr_expired) && strcmp(state, "pending") == 0)
			bc_refuse_join("tpm:request-expired", tok->tenant_id);
		if (strcmp(state, "pending") != 0)
			bc_refuse_join("tpm:ek-unknown", tok->tenant_id);	/* approved, since unenrolled */
		out->deferred = true;
		out->kind = "approval";
		out->request_id = id;
		out->retry_after_seconds = 30;
		return;
	}
	initStringInfo(&ctx);
	bc_json_begin(&ctx);
	bc_json_member_raw(&ctx, "claims",
					   JsonbToCString(NULL, &req->claims->root, VARSIZE(req->claims)));
	bc_json_member(&ctx, "csrSha256", req->csr_sha256_b64);
	bc_json_member(&ctx, "role", req->role);
	bc_json_end(&ctx);
	initStringInfo(&detail);
	bc_json_begin(&detail);
	bc_json_member(&detail, "ekSpkiSha256", hex_of(bind, BC_SHA256_LEN));
	bc_json_member(&detail, "poolId", tok->pool_id);
	bc_json_member(&detail, "siteId", tok->site_id);
	bc_json_member(&detail, "tokenId", tok->token_id);
	bc_json_member(&detail, "ekChain", has_cert ? "unchained" : "none");
	bc_json_member(&detail, "note", "an unknown TPM endorsement key asks to be enrolled");
	bc_json_end(&detail);
	v[0] = CStringGetTextDatum(tok->tenant_id);
	v[1] = JsonbPGetDatum(bc_jsonb(ctx.data));
	v[2] = JsonbPGetDatum(bc_jsonb(detail.data));
	bc_spi_exec(&create_request, v, NULL, false, 1);
	out->deferred = true;
	out->kind = "approval";
	out->request_id = bc_spi_text_req(Anum_cr_request_id);
	out->retry_after_seconds = 30;
}

/* ----------------------------------------------------------------- state */

/* The payload sealed in the state: what round 2 must match. */
typedef struct TpmState
{
	unsigned char secret[BC_TPM_SECRET_LEN];
	unsigned char ak_name[BC_TPM_NAME_MAX];
	size_t		ak_name_len;
	unsigned char bind[BC_SHA256_LEN];
	char		token_id[64];
} TpmState;

/* version | secret | u8 len, AK Name | EK bind | u8 len, token id */
static StringInfo
state_payload(const TpmState *s)
{
	StringInfo	b = makeStringInfo();
	size_t		tl = strlen(s->token_id);

	appendStringInfoChar(b, TPM_STATE_VERSION);
	appendBinaryStringInfo(b, (const char *) s->secret, BC_TPM_SECRET_LEN);
	appendStringInfoChar(b, (char) s->ak_name_len);
	appendBinaryStringInfo(b, (const char *) s->ak_name, s->ak_name_len);
	appendBinaryStringInfo(b, (const char *) s->bind, BC_SHA256_LEN);
	appendStringInfoChar(b, (char) tl);
	appendBinaryStringInfo(b, s->token_id, tl);
	return b;
}

/* The reverse; false when it is not one. */
static bool
state_parse(const unsigned char *p, size_t n, TpmState *s)
{
	size_t		off = 0;

	memset(s, 0, sizeof(*s));
	if (n < 1 + BC_TPM_SECRET_LEN + 1 || p[0] != TPM_STATE_VERSION)
		return false;
	off = 1;
	memcpy(s->secret, p + off, BC_TPM_SECRET_LEN);
	off += BC_TPM_SECRET_LEN;
	s->ak_name_len = p[off++];
	if (s->ak_name_len > BC_TPM_NAME_MAX || off + s->ak_name_len + BC_SHA256_LEN + 1 > n)
		return false;
	memcpy(s->ak_name, p + off, s->ak_name_len);
	off += s->ak_name_len;
	memcpy(s->bind, p + off, BC_SHA256_LEN);
	off += BC_SHA256_LEN;
	if (p[off] >= sizeof(s->token_id) || off + 1 + p[off] != n)
		return false;
	memcpy(s->token_id, p + off + 1, p[off]);
	return true;
}

/* base64url of bytes, palloc'd. */
static char *
b64u(const unsigned char *b, size_t n)
{
	char	   *s = palloc(bc_b64url_encoded_len(n) + 1);

	bc_b64url_encode(b, n, s);
	return s;
}

/* Round 1's answer: MakeCredential for the AK under the EK, the sealed state. */
static void
challenge(const BcJoinRequest *req, const bc_tpm_public *ek, const TpmCertified *c,
		  const unsigned char bind[BC_SHA256_LEN], const char *token_id, BcOutcome *out)
{
	TpmState	s;
	unsigned char *blob = NULL;
	unsigned char *enc = NULL;
	size_t		blob_len = 0;
	size_t		enc_len = 0;
	StringInfo	payload;
	StringInfoData ch;
	TimestampTz na = bc_now() + (int64) TPM_CHALLENGE_TTL * USECS_PER_SEC;
	char	   *state;
	int			st;

	memset(&s, 0, sizeof(s));
	if (RAND_bytes(s.secret, BC_TPM_SECRET_LEN) != 1)
		elog(ERROR, "RAND_bytes failed");
	memcpy(s.ak_name, c->ak_name, c->ak_name_len);
	s.ak_name_len = c->ak_name_len;
	memcpy(s.bind, bind, BC_SHA256_LEN);
	if (token_id != NULL)
		strlcpy(s.token_id, token_id, sizeof(s.token_id));

	st = bc_tpm_make_credential(ek, c->ak_name, c->ak_name_len, s.secret, BC_TPM_SECRET_LEN,
								&blob, &blob_len, &enc, &enc_len);
	if (st != BC_OK)
	{
		OPENSSL_cleanse(&s, sizeof(s));
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("MakeCredential failed for a checked EK")));
	}
	payload = state_payload(&s);
	OPENSSL_cleanse(&s, sizeof(s));
	state = bc_challenge_seal(BC_ATTESTOR_TPM, na, (unsigned char *) payload->data, payload->len);
	OPENSSL_cleanse(payload->data, payload->len);

	initStringInfo(&ch);
	bc_json_begin(&ch);
	bc_json_member(&ch, "credentialBlob", b64u(blob, blob_len));
	bc_json_member(&ch, "encryptedSecret", b64u(enc, enc_len));
	bc_json_member(&ch, "state", state);
	bc_json_end(&ch);
	bc_free(blob);
	bc_free(enc);

	out->deferred = true;
	out->kind = "challenge";
	out->challenge_b64 = b64u((unsigned char *) ch.data, ch.len);
	(void) bc_challenge_sealed_not_after(&out->not_after);
	out->has_not_after = true;
}

/* ---------------------------------------------------------------- verify */

/* verify(): the two rounds of docs/protocol.md, "The tpm attestor, round by round". */
static void
tpm_verify(const BcJoinRequest *req, BcOutcome *out)
{
	TpmEvidence ev;
	bc_tpm_public ek;
	TpmCertified c;
	TpmEnrollment enr;
	BcToken		tok;
	bool		has_token = false;
	bool		trusted = false;
	bool		round2;
	const char *reason = NULL;
	const char *untrusted_reason = "ek-unknown";
	unsigned char bind[BC_SHA256_LEN];
	const char *tenant = NULL;
	const char *pool = NULL;
	const char *site = NULL;
	char	   *node_id = NULL;
	BcAttestResult *res = &out->result;
	int			n_round2;
	const unsigned char *cbin[4];
	size_t		clen[4];

	/* Evidence: one flat JSON object of known string members. */
	if (req->attestation == NULL ||
		!scan_evidence(VARDATA(req->attestation), VARSIZE(req->attestation) - VARHDRSZ, &ev))
		bc_refuse_join("tpm:malformed", NULL);
	if (!ev.has[F_EK_PUB] || !ev.has[F_AK_PUB] || !ev.has[F_NODE_PUB] ||
		!ev.has[F_CERTIFY] || !ev.has[F_CERTIFY_SIG])
		bc_refuse_join("tpm:malformed", NULL);
	n_round2 = ev.has[F_STATE] + ev.has[F_SECRET] + ev.has[F_QUOTE] + ev.has[F_QUOTE_SIG];
	if (n_round2 != 0 && n_round2 != 4)
		bc_refuse_join("tpm:malformed", NULL);
	round2 = n_round2 == 4;
	if (round2 && ev.len[F_SECRET] != BC_TPM_SECRET_LEN)
		bc_refuse_join("tpm:malformed", NULL);
	if (bc_tpm_public_parse(ev.bin[F_EK_PUB], ev.len[F_EK_PUB], &ek) != BC_OK)
		bc_refuse_join("tpm:malformed", NULL);

	/* 1. The EK is trusted: enrolled, or its certificate chains to a root. */
	if (bc_tpm_check_ek(&ek, &reason) != BC_OK)
		bc_refuse_join(psprintf("tpm:%s", reason), NULL);
	if (bc_tpm_ek_spki_sha256(&ek, bind) != BC_OK)
		bc_refuse_join("tpm:ek-type", NULL);
	find_enrollment(bind, &enr);
	bc_check_note("ekSha256", hex_of(bind, BC_SHA256_LEN));
	if (enr.found)
	{
		trusted = true;
		bc_check_note("ekTrust", "enrolled");
		bc_check_note("ekTenant", enr.tenant_id);
	}
	else if (ev.has[F_EK_CERT])
	{
		if (check_ek_cert(ev.bin[F_EK_CERT], ev.len[F_EK_CERT], &ek, &reason) == BC_OK)
		{
			trusted = true;
			bc_check_note("ekTrust", "certificate");
		}
		else if (strcmp(reason, "ek-chain") == 0)
			untrusted_reason = reason;	/* may still wait for an operator */
		else
			bc_refuse_join(psprintf("tpm:%s", reason), NULL);
	}

	/* 2-4. The AK, its certification of the node key, the node key is the CSR's. */
	cbin[0] = ev.bin[F_AK_PUB];
	clen[0] = ev.len[F_AK_PUB];
	cbin[1] = ev.bin[F_NODE_PUB];
	clen[1] = ev.len[F_NODE_PUB];
	cbin[2] = ev.bin[F_CERTIFY];
	clen[2] = ev.len[F_CERTIFY];
	cbin[3] = ev.bin[F_CERTIFY_SIG];
	clen[3] = ev.len[F_CERTIFY_SIG];
	if (!trusted)
	{
		/* Only an operator's approval can make it trusted: that needs a tenant. */
		Datum		v;

		if (req->token == NULL)
			bc_refuse_join(psprintf("tpm:%s", untrusted_reason), NULL);
		bc_check_join_token(BC_ATTESTOR_TPM, req->token, req->role, req->claims, &tok);
		v = CStringGetTextDatum(tok.tenant_id);
		if (bc_spi_exec(&enrollment_mode, &v, NULL, true, 1) != 1 ||
			strcmp(bc_spi_text_req(Anum_em_enrollment), "approval") != 0)
			bc_refuse_join(psprintf("tpm:%s", untrusted_reason), tok.tenant_id);
		check_certified("tpm:", req, cbin, clen, &c, tok.tenant_id);
		if (round2)
			bc_refuse_join("tpm:ek-unknown", tok.tenant_id);
		await_enrollment(req, bind, &tok, ev.has[F_EK_CERT], out);
		return;
	}
	check_certified("tpm:", req, cbin, clen, &c, enr.found ? enr.tenant_id : NULL);

	/* 5. The tenant: the enrollment's, or a sealed token's; both must agree. */
	if (req->token != NULL)
	{
		bc_check_join_token(BC_ATTESTOR_TPM, req->token, req->role, req->claims, &tok);
		has_token = true;
	}
	if (enr.found)
	{
		tenant = enr.tenant_id;
		pool = enr.pool_id;
		site = enr.site_id;
		if (has_token &&
			(strcmp(tok.tenant_id, tenant) != 0 ||
			 (tok.pool_id != NULL && pool != NULL && strcmp(tok.pool_id, pool) != 0)))
			bc_refuse_join("tpm:tenant-mismatch", tenant);
	}
	else if (has_token)
	{
		tenant = tok.tenant_id;
		pool = tok.pool_id;
		site = tok.site_id;
	}
	else if (round2 || !bc_check_no_token("the tenant, from a token (the EK is not enrolled)"))
		bc_refuse_join("tpm:no-tenant", NULL);

	/* A bound EK reclaims its own node, in its tenant (and pool), and as a token allows. */
	if (tenant != NULL)
	{
		Datum		v = PointerGetDatum(bc_bytea(bind, BC_SHA256_LEN));

		if (bc_spi_exec(&bound_node, &v, NULL, true, 1) == 1)
		{
			char	   *n_tenant = bc_spi_text_req(Anum_bn_tenant);
			char	   *n_pool = bc_spi_text(Anum_bn_pool);

			node_id = bc_spi_text_req(Anum_bn_node);
			/*
			 * A repeat finds the EK bound to its own node by the certificate
			 * it asks for: that binding needs no reclaim from the token.
			 */
			if (strcmp(n_tenant, tenant) != 0 ||
				(pool != NULL && (n_pool == NULL || strcmp(n_pool, pool) != 0)) ||
				(has_token && !tok.allow_reclaim &&
				 !(bc_round_repeat() != NULL && strcmp(bc_round_repeat()->node_id, node_id) == 0)))
				bc_refuse_join("tpm:bound-elsewhere", tenant);
			pool = n_pool;
			site = NULL;		/* the node's: validate_reclaim keeps it */
		}
	}

	if (!round2)
	{
		challenge(req, &ek, &c, bind, has_token ? tok.token_id : NULL, out);
		return;
	}

	/* Round 2: the state, the secret, the challenge once, the quote. */
	{
		TpmState	s;
		bytea	   *payload;
		TimestampTz na;
		unsigned char extra_in[BC_TPM_SECRET_LEN + BC_SHA256_LEN];
		unsigned char extra[BC_SHA256_LEN];
		unsigned char used[BC_SHA256_LEN];
		TpmPcrPolicy policy;
		bool		has_policy;
		Datum		v[3];
		char		nulls[3] = {' ', ' ', ' '};
		bool		same;

		payload = bc_challenge_open(BC_ATTESTOR_TPM, ev.text[F_STATE], tenant, &na);
		if (!state_parse((unsigned char *) VARDATA(payload), VARSIZE(payload) - VARHDRSZ, &s))
			bc_refuse_join("tpm:state-mismatch", tenant);
		same = s.ak_name_len == c.ak_name_len &&
			memcmp(s.ak_name, c.ak_name, c.ak_name_len) == 0 &&
			memcmp(s.bind, bind, BC_SHA256_LEN) == 0 &&
			strcmp(s.token_id, has_token ? tok.token_id : "") == 0;
		if (!same)
		{
			OPENSSL_cleanse(&s, sizeof(s));
			bc_refuse_join("tpm:state-mismatch", tenant);
		}
		same = CRYPTO_memcmp(s.secret, ev.bin[F_SECRET], BC_TPM_SECRET_LEN) == 0;
		OPENSSL_cleanse(&s, sizeof(s));
		if (!same)
			bc_refuse_join("tpm:secret-mismatch", tenant);

		bc_sha256(ev.bin[F_SECRET], BC_TPM_SECRET_LEN, used);
		v[0] = PointerGetDatum(bc_bytea(used, BC_SHA256_LEN));
		v[1] = TimestampTzGetDatum(na);
		if (bc_spi_exec(&use_challenge, v, NULL, false, 0) != 1 &&
			!bc_spent_by_repeat(BC_ATTESTOR_TPM, used))
			bc_refuse_join("tpm:challenge-reused", tenant);

		memcpy(extra_in, ev.bin[F_SECRET], BC_TPM_SECRET_LEN);
		memcpy(extra_in + BC_TPM_SECRET_LEN, req->csr_sha256, BC_SHA256_LEN);
		bc_sha256(extra_in, sizeof(extra_in), extra);
		OPENSSL_cleanse(extra_in, sizeof(extra_in));
		has_policy = find_pcr_policy(&enr, tenant, pool, &policy);
		check_quote("tpm:", &c, ev.bin[F_QUOTE], ev.len[F_QUOTE], ev.bin[F_QUOTE_SIG],
					ev.len[F_QUOTE_SIG], extra, has_policy ? &policy : NULL, tenant);

		/* What renewal needs to see the EK still trusted. */
		v[0] = PointerGetDatum(bc_bytea(bind, BC_SHA256_LEN));
		v[1] = PointerGetDatum(bc_bytea(ev.bin[F_EK_PUB], ev.len[F_EK_PUB]));
		if (ev.has[F_EK_CERT] && !enr.found)
			v[2] = PointerGetDatum(bc_bytea(ev.bin[F_EK_CERT], ev.len[F_EK_CERT]));
		else
			nulls[2] = 'n';
		bc_spi_exec(&remember_ek, v, nulls, false, 0);
	}

	res->tenant_id = pstrdup(tenant);
	res->role = pstrdup(req->role);
	res->node_id = node_id;
	if (node_id == NULL)
	{
		res->pool_id = pool ? pstrdup(pool) : NULL;
		res->site_id = site ? pstrdup(site) : NULL;
	}
	memcpy(res->bind, bind, BC_SHA256_LEN);
	res->has_bind = true;
	res->node_key = "tpm";
	res->node_key_uri = ak_statement(&c);
	res->statement_proven = true;
	if (has_token)
	{
		res->token_id = tok.token_id;
		res->allow_reclaim = tok.allow_reclaim;
		res->spend_token = true;
		res->expect_checked = true;
	}
}

const BcAttestor bc_tpm_attestor = {
	.id = BC_ATTESTOR_TPM,
	.version = "0.1.0",
	.roles = tpm_roles,
	.verify = tpm_verify,
};

/* --------------------------------------------------------------- renewal */

static BcPlan node_ek = {
	"SELECT b.subject, n.pool_id, e.ek_public, e.ek_certificate, "
	"       (SELECT count(*) FROM bc_join.tpm_ek_enrollments x WHERE x.ek_spki_sha256 = b.subject) "
	"FROM bc_join.node_bindings b JOIN bc_join.nodes n ON n.id = b.node_id "
	"LEFT JOIN bc_join.tpm_eks e ON e.ek_spki_sha256 = b.subject "
	"WHERE b.node_id = $1 AND b.attestor = '" BC_ATTESTOR_TPM "'",
	1, {TEXTOID}
};

enum
{
	Anum_ne_subject = 1,
	Anum_ne_pool,
	Anum_ne_ek_public,
	Anum_ne_ek_certificate,
	Anum_ne_enrollments
};

/* A string member of the renewal's tpm object, decoded; NULL when absent. */
static unsigned char *
renew_member(Jsonb *tpm, const char *name, size_t *len, const char *tenant)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&tpm->root, name, strlen(name), NULL);
	unsigned char *out;
	size_t		n;

	*len = 0;
	if (v == NULL)
		return NULL;
	if (v->type != jbvString || v->val.string.len == 0 ||
		bc_b64url_decoded_maxlen(v->val.string.len) > BC_TPM_STRUCT_MAX + 3)
		bc_refuse_join("renew:tpm-malformed", tenant);
	n = bc_b64url_decoded_maxlen(v->val.string.len);
	out = palloc(n + 1);
	if (bc_b64url_decode(v->val.string.val, v->val.string.len, out, BC_TPM_STRUCT_MAX, len) != BC_OK ||
		*len == 0)
		bc_refuse_join("renew:tpm-malformed", tenant);
	return out;
}

/*
 * A renewal of a certificate carrying statement (urn:bc:tpm-ak:...) proves
 * it again for the new key: tpm (NULL when the request had none) certifies
 * the new CSR's key by the AK the statement names, the node's EK is still
 * trusted, and where a PCR policy applies a quote by that AK with extraData
 * SHA-256("bc_join/tpm/renew" || SHA-256(new CSR DER)) meets it.  Refuses
 * "renew:tpm-<reason>".
 */
void
bc_tpm_renew_check(const BcJoinRequest *req, Jsonb *tpm, const char *node_id,
				   const char *tenant, const char *statement)
{
	static const char *const names[] = {"akPub", "nodeKeyPub", "certifyInfo", "certifySignature",
	"quote", "quoteSignature", NULL};
	const unsigned char *bin[6];
	size_t		len[6];
	TpmCertified c;
	char	   *mine;
	Datum		v;
	bytea	   *subject;
	char	   *pool;
	bool		trusted;
	TpmEnrollment enr;
	TpmPcrPolicy policy;
	bool		has_policy;
	int			i;

	if (tpm == NULL)
		bc_refuse_join("renew:tpm-missing", tenant);
	if (!JB_ROOT_IS_OBJECT(tpm) || JB_ROOT_IS_SCALAR(tpm))
		bc_refuse_join("renew:tpm-malformed", tenant);
	{
		JsonbIterator *it = JsonbIteratorInit(&tpm->root);
		JsonbValue	k;

		(void) JsonbIteratorNext(&it, &k, true);
		while (JsonbIteratorNext(&it, &k, true) == WJB_KEY)
		{
			bool		known = false;

			for (i = 0; names[i] != NULL; i++)
			{
				if (strlen(names[i]) == k.val.string.len &&
					strncmp(names[i], k.val.string.val, k.val.string.len) == 0)
					known = true;
			}
			if (!known)
				bc_refuse_join("renew:tpm-malformed", tenant);
			(void) JsonbIteratorNext(&it, &k, true);
		}
	}
	for (i = 0; i < 6; i++)
		bin[i] = renew_member(tpm, names[i], &len[i], tenant);
	if (bin[0] == NULL || bin[1] == NULL || bin[2] == NULL || bin[3] == NULL ||
		(bin[4] == NULL) != (bin[5] == NULL))
		bc_refuse_join("renew:tpm-malformed", tenant);

	check_certified("renew:tpm-", req, bin, len, &c, tenant);
	mine = ak_statement(&c);
	if (strcmp(mine, statement) != 0)
		bc_refuse_join("renew:tpm-ak-mismatch", tenant);

	/* The EK the statement was issued for is still trusted. */
	v = CStringGetTextDatum(node_id);
	if (bc_spi_exec(&node_ek, &v, NULL, true, 1) != 1)
		bc_refuse_join("renew:tpm-ek-untrusted", tenant);
	subject = bc_spi_bytea_copy(Anum_ne_subject);
	pool = bc_spi_text(Anum_ne_pool);
	trusted = bc_spi_int8(Anum_ne_enrollments) > 0;
	if (!trusted)
	{
		bool		isnull_pub;
		bool		isnull_cert;
		Datum		pub = bc_spi_datum(Anum_ne_ek_public, &isnull_pub);
		Datum		cert = bc_spi_datum(Anum_ne_ek_certificate, &isnull_cert);

		if (!isnull_pub && !isnull_cert)
		{
			bytea	   *p = DatumGetByteaPCopy(pub);
			bytea	   *cd = DatumGetByteaPCopy(cert);
			bc_tpm_public ek;
			const char *reason;

			trusted = bc_tpm_public_parse((unsigned char *) VARDATA(p), VARSIZE(p) - VARHDRSZ, &ek) == BC_OK &&
				check_ek_cert((unsigned char *) VARDATA(cd), VARSIZE(cd) - VARHDRSZ, &ek, &reason) == BC_OK;
		}
	}
	if (!trusted)
		bc_refuse_join("renew:tpm-ek-untrusted", tenant);

	/* A PCR policy: the quote by the same AK, for this new CSR. */
	find_enrollment((unsigned char *) VARDATA(subject), &enr);
	has_policy = find_pcr_policy(&enr, tenant, pool, &policy);
	if (has_policy)
	{
		StringInfoData m;
		unsigned char extra[BC_SHA256_LEN];

		if (bin[4] == NULL)
			bc_refuse_join("renew:tpm-quote-missing", tenant);
		initStringInfo(&m);
		appendStringInfoString(&m, TPM_RENEW_LABEL);
		appendBinaryStringInfo(&m, (const char *) req->csr_sha256, BC_SHA256_LEN);
		bc_sha256(m.data, m.len, extra);
		check_quote("renew:tpm-", &c, bin[4], len[4], bin[5], len[5], extra, &policy, tenant);
	}
}

/* --------------------------------------------------------- configuration */

PG_FUNCTION_INFO_V1(bc_tpm_pcr_selection_sql);

/*
 * tpm_pcr_selection(selection, pcr_values): the selection normalized
 * ("sha256:0,1,2"), or 22023 saying what is wrong with the pair.
 */
Datum
bc_tpm_pcr_selection_sql(PG_FUNCTION_ARGS)
{
	char	   *sel = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bytea	   *values = PG_GETARG_BYTEA_PP(1);
	TpmPcrPolicy p;
	char	   *norm = NULL;
	const char *err;

	if (strlen(sel) > 256)
		bc_invalid_input("a PCR selection is at most 256 characters");
	err = parse_pcr_policy(sel, values, &p, &norm);
	if (err != NULL)
		bc_invalid_input("invalid PCR policy: %s", err);
	PG_RETURN_TEXT_P(cstring_to_text(norm));
}

PG_FUNCTION_INFO_V1(bc_tpm_ek_certificate_sql);

/*
 * tpm_ek_certificate(pem): exactly one PEM certificate of a CA, as
 * (der, is_root, subject, sha256); is_root when self-signed (its own key
 * verifies it).  22023 otherwise.
 */
Datum
bc_tpm_ek_certificate_sql(PG_FUNCTION_ARGS)
{
	text	   *pem = PG_GETARG_TEXT_PP(0);
	BIO		   *bio;
	X509	   *x;
	X509	   *extra;
	unsigned char *der = NULL;
	int			derlen;
	bool		is_root;
	char	   *subject;
	unsigned char h[BC_SHA256_LEN];
	StringInfoData out;
	char	   *p;

	if (VARSIZE_ANY_EXHDR(pem) > 16384)
		bc_invalid_input("an EK root or intermediate is at most 16 KiB of PEM");
	p = text_to_cstring(pem);
	bio = BIO_new_mem_buf(p, -1);
	if (bio == NULL)
		elog(ERROR, "out of memory");
	x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	extra = x ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	ERR_clear_error();
	if (x == NULL)
		bc_invalid_input("not a PEM certificate");
	x = bc_own_x509(CurrentMemoryContext, &x);
	if (extra != NULL)
	{
		(void) bc_own_x509(CurrentMemoryContext, &extra);
		bc_invalid_input("exactly one certificate, please: add the chain one certificate at a time");
	}
	{
		const char *q = strstr(p, "-----BEGIN");

		if (q == NULL || strstr(q + 1, "-----BEGIN") != NULL)
			bc_invalid_input("exactly one PEM block, a certificate, please");
	}
	if (X509_check_ca(x) < 1)
		bc_invalid_input("the certificate is not a CA certificate (basicConstraints CA:TRUE)");
	is_root = X509_check_issued(x, x) == X509_V_OK &&
		X509_verify(x, X509_get0_pubkey(x)) == 1;
	ERR_clear_error();
	derlen = i2d_X509(x, &der);
	if (derlen <= 0)
		elog(ERROR, "i2d_X509 failed");
	bc_sha256(der, derlen, h);
	{
		char	   *s = X509_NAME_oneline(X509_get_subject_name(x), NULL, 0);

		subject = pstrdup(s ? s : "");
		OPENSSL_free(s);
	}
	initStringInfo(&out);
	bc_json_begin(&out);
	bc_json_member(&out, "der", hex_of(der, derlen));
	bc_json_member_bool(&out, "isRoot", is_root);
	bc_json_member(&out, "sha256", hex_of(h, BC_SHA256_LEN));
	bc_json_member(&out, "subject", subject);
	bc_json_end(&out);
	OPENSSL_free(der);
	PG_RETURN_JSONB_P(bc_jsonb(out.data));
}
