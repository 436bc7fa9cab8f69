/*
 * attest.c: bc_join.attest(request jsonb), continuous attestation of a
 * TPM-bound node (issue 44; docs/attestation.md, docs/protocol.md
 * "Continuous attestation").
 *
 * Two rounds, each proven by the node key (proof.c, purpose "attest"; the
 * certificate's node key statement must be urn:bc:tpm-ak:):
 *
 *   round 1  {"proof"} -> signed {"status":"challenge","nonce","state",
 *            "notAfter","pcrs","bank","imaOffset","intervalSeconds"}; the
 *            state is sealed (challenge_state.c) around the nonce, the node
 *            and the PCR selection, bound to the proving certificate.
 *   round 2  {"proof","state","akPub","quote","quoteSignature","pcrValues",
 *            "eventLog"?,"ima"?} -> signed {"status":"attested"|"quarantined",
 *            "nodeId","serial","nonce" (round 1's: the answer is this
 *            round's),"nextSeconds","imaOffset"}, or the one refusal.
 *
 * What is refused without touching the node (the request proves nothing
 * about the machine): a bad or reused proof, a state that does not open or
 * was used, another AK than the certificate's, a quote whose nonce is not
 * this round's (a replayed or foreign quote), a signature that does not
 * verify, PCR values that are not the ones quoted, a log that does not parse
 * or is over its bound, an IMA offset that is not the one told.  What the
 * TPM signed for this nonce and fails quarantines the node in the same
 * transaction (bc_join.quarantine_node): the TPM clock rolled back, the
 * event log or the IMA list not replaying to the quoted PCRs (enforce mode;
 * observe mode refuses them without quarantine), an event or a file the
 * policy does not allow (enforce mode).  Refusals are "attest:<reason>".
 */
#include "bc_join.h"

#include <openssl/rand.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/numeric.h"

#include "bc_tpm.h"
#include "eventlog.h"

#define ATTEST_WHO "attest"
#define ATTEST_LABEL "bc_join/attest"
#define ATTEST_STATE_VERSION 1
#define ATTEST_NONCE_LEN 32
/* How long a round 1's nonce may be answered. */
#define ATTEST_CHALLENGE_TTL 60
/* PCR 10: IMA's, quoted always, never replayed from the UEFI log. */
#define IMA_PCR 10
/* The whole request: a proof, TPM structures, the UEFI log and one IMA increment, base64url. */
#define ATTEST_REQUEST_MAX ((BC_EVLOG_MAX_BYTES + BC_IMA_MAX_BYTES) / 3 * 4 + 64 * 1024)

typedef struct AttestRequest
{
	char	   *proof;
	char	   *state;
	char	   *ak_pub;
	char	   *quote;
	char	   *quote_sig;
	Jsonb	   *pcr_values;
	char	   *event_log;
	bool		has_ima;
	int64		ima_offset;
	char	   *ima_entries;
} AttestRequest;

/* The node's pool settings (defaults when its pool has no row). */
typedef struct AttestSettings
{
	int			interval;
	uint32		pcrs;			/* bit i: PCR i is quoted */
	bool		enforce;
	char	   *pool;
} AttestSettings;

/* ----------------------------------------------------------- the request */

/* A string member, decoded from base64url, at most max bytes; NULL when absent. */
static unsigned char *
decode_member(const char *b64, size_t max, size_t *len, const char *what, const char *tenant)
{
	size_t		n;
	unsigned char *out;

	*len = 0;
	if (b64 == NULL)
		return NULL;
	n = strlen(b64);
	if (n == 0 || bc_b64url_decoded_maxlen(n) > max + 3)
		bc_refuse_join(psprintf("attest:%s-malformed", what), tenant);
	out = palloc(bc_b64url_decoded_maxlen(n) + 1);
	if (bc_b64url_decode(b64, n, out, bc_b64url_decoded_maxlen(n), len) != BC_OK ||
		*len == 0 || *len > max)
		bc_refuse_join(psprintf("attest:%s-malformed", what), tenant);
	return out;
}

/* Parse and bound the request; 22023 for what is no attest request at all. */
static void
parse_attest_request(Jsonb *jb, AttestRequest *a)
{
	JsonbIterator *it;
	JsonbValue	v;

	memset(a, 0, sizeof(*a));
	if (VARSIZE_ANY_EXHDR(jb) > ATTEST_REQUEST_MAX)
		bc_invalid_input("the request is over %d bytes", ATTEST_REQUEST_MAX);
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		bc_invalid_input("the request must be a JSON object");
	it = JsonbIteratorInit(&jb->root);
	(void) JsonbIteratorNext(&it, &v, true);
	while (JsonbIteratorNext(&it, &v, true) == WJB_KEY)
	{
		char	   *key = pnstrdup(v.val.string.val, v.val.string.len);

		(void) JsonbIteratorNext(&it, &v, true);
		if (strcmp(key, "proof") == 0)
			a->proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else if (strcmp(key, "state") == 0)
			a->state = bc_json_string_value(&v, key, BC_STATE_MAX);
		else if (strcmp(key, "akPub") == 0)
			a->ak_pub = bc_json_string_value(&v, key, BC_TPM_STRUCT_MAX * 2);
		else if (strcmp(key, "quote") == 0)
			a->quote = bc_json_string_value(&v, key, BC_TPM_STRUCT_MAX * 2);
		else if (strcmp(key, "quoteSignature") == 0)
			a->quote_sig = bc_json_string_value(&v, key, BC_TPM_STRUCT_MAX * 2);
		else if (strcmp(key, "eventLog") == 0)
			a->event_log = bc_json_string_value(&v, key, BC_EVLOG_MAX_BYTES / 3 * 4 + 4);
		else if (strcmp(key, "pcrValues") == 0)
		{
			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				bc_invalid_input("\"pcrValues\" must be a JSON object");
			a->pcr_values = JsonbValueToJsonb(&v);
		}
		else if (strcmp(key, "ima") == 0)
		{
			Jsonb	   *ima;
			JsonbValue *off;
			JsonbValue *ent;

			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				bc_invalid_input("\"ima\" must be a JSON object");
			ima = JsonbValueToJsonb(&v);
			off = getKeyJsonValueFromContainer(&ima->root, "offset", 6, NULL);
			ent = getKeyJsonValueFromContainer(&ima->root, "entries", 7, NULL);
			if (off == NULL || off->type != jbvNumeric || ent == NULL)
				bc_invalid_input("\"ima\" must have a number \"offset\" and a string \"entries\"");
			/* A whole number of at most 15 digits: read as text, nothing can raise. */
			{
				char	   *t = DatumGetCString(DirectFunctionCall1(numeric_out,
																	NumericGetDatum(off->val.numeric)));

				if (strlen(t) < 1 || strlen(t) > 15 || strspn(t, "0123456789") != strlen(t))
					bc_invalid_input("\"ima\".\"offset\" must be a whole number from 0 to 10^15 - 1");
				a->ima_offset = strtoll(t, NULL, 10);
			}
			a->ima_entries = bc_json_string_value(ent, "entries", BC_IMA_MAX_BYTES / 3 * 4 + 4);
			a->has_ima = true;
		}
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (a->proof == NULL)
		bc_invalid_input("\"proof\" is required");
	if (a->state != NULL && (a->ak_pub == NULL || a->quote == NULL || a->quote_sig == NULL ||
							 a->pcr_values == NULL))
		bc_invalid_input("round 2 needs \"akPub\", \"quote\", \"quoteSignature\" and \"pcrValues\"");
	if (a->state == NULL && (a->ak_pub != NULL || a->quote != NULL || a->quote_sig != NULL ||
							 a->pcr_values != NULL || a->event_log != NULL || a->has_ima))
		bc_invalid_input("a quote is sent with the \"state\" of round 1");
}

/* ---------------------------------------------------------------- state */

static BcPlan settings_plan = {
	"SELECT coalesce(s.interval_seconds, 60), coalesce(s.pcrs, '{0,1,2,3,4,5,6,7}'), "
	"       coalesce(s.mode, 'observe') = 'enforce', n.pool_id "
	"FROM bc_join.nodes n LEFT JOIN bc_join.attestation_settings s ON s.pool_id = n.pool_id "
	"WHERE n.id = $1",
	1, {TEXTOID}
};

/* The node's pool settings. */
static void
load_settings(const char *node_id, AttestSettings *s)
{
	Datum		v = CStringGetTextDatum(node_id);
	bool		isnull;
	ArrayType  *arr;
	Datum	   *elems;
	int			n;
	int			i;

	if (bc_spi_exec(&settings_plan, &v, NULL, true, 1) != 1)
		elog(ERROR, "node %s vanished during its attestation", node_id);
	s->interval = bc_spi_int4(1);
	arr = DatumGetArrayTypeP(bc_spi_datum(2, &isnull));
	deconstruct_array(arr, INT4OID, 4, true, TYPALIGN_INT, &elems, NULL, &n);
	s->pcrs = 1u << IMA_PCR;
	for (i = 0; i < n; i++)
		s->pcrs |= 1u << DatumGetInt32(elems[i]);
	s->enforce = bc_spi_bool(3);
	s->pool = bc_spi_text(4);
}

/* The round's binding of the sealed state: SHA-256("bc_join/attest" || serial). */
static void
begin_state_round(BcJoinRequest *req, const char *serial)
{
	StringInfoData m;

	initStringInfo(&m);
	appendStringInfoString(&m, ATTEST_LABEL);
	appendStringInfoString(&m, serial);
	bc_sha256(m.data, m.len, req->csr_sha256);
	bc_b64url_encode(req->csr_sha256, BC_SHA256_LEN, req->csr_sha256_b64);
	req->attestor = ATTEST_WHO;
	req->role = BC_ROLE_NODE;
	bc_challenge_round_begin(req);
}

/* version | nonce | u32be pcr mask | u8 len, node id */
static StringInfo
state_payload(const unsigned char *nonce, uint32 pcrs, const char *node_id)
{
	StringInfo	b = makeStringInfo();
	unsigned char m[4] = {pcrs >> 24, pcrs >> 16, pcrs >> 8, pcrs};

	appendStringInfoChar(b, ATTEST_STATE_VERSION);
	appendBinaryStringInfo(b, (const char *) nonce, ATTEST_NONCE_LEN);
	appendBinaryStringInfo(b, (const char *) m, 4);
	appendStringInfoChar(b, (char) strlen(node_id));
	appendStringInfoString(b, node_id);
	return b;
}

/* The sealed state of this certificate's round 1 ("attest:state-mismatch", "attest:challenge-expired"). */
static bytea *
open_state(BcJoinRequest *req, const BcProofCert *c, const char *state, TimestampTz *na)
{
	bytea	   *volatile payload = NULL;

	begin_state_round(req, c->serial);
	PG_TRY();
	{
		payload = bc_challenge_open(ATTEST_WHO, state, c->tenant, na);
	}
	PG_FINALLY();
	{
		bc_challenge_round_end();
	}
	PG_END_TRY();
	return payload;
}

/* ------------------------------------------------------------- the proof */

static BcPlan use_nonce = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ('" ATTEST_WHO "', $1, $2, $3) ON CONFLICT DO NOTHING",
	3, {BYTEAOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * The proving certificate, locked for share, the proof checked; it must be
 * live, or revoked by the node's own quarantine (a quarantined node keeps
 * attesting, so that it can be readmitted).  Its statement must be a TPM
 * AK's.
 */
static void
prove(BcJoinRequest *req, const char *proof, BcProofCert *c)
{
	char	   *serial = bc_proof_serial(proof, ATTEST_WHO);

	bc_lock_proof_cert(ATTEST_WHO, serial, false, c);
	(void) bc_check_node_proof(ATTEST_WHO, req, proof, serial, c->der, c->node_id, c->tenant);
	if (!(c->quarantined && c->revoked && c->revocation_reason != NULL &&
		  strcmp(c->revocation_reason, "attestation-failed") == 0))
	{
		BcProofCert live = *c;

		live.quarantined = false;
		bc_require_live_cert(ATTEST_WHO, &live);
	}
	else if (c->generation != c->node_generation || c->expired ||
			 strcmp(c->state, "retired") == 0)
		bc_refuse_join("attest:revoked", c->tenant);
	if (c->node_key_uri == NULL ||
		strncmp(c->node_key_uri, BC_TPM_AK_URN_PREFIX, strlen(BC_TPM_AK_URN_PREFIX)) != 0)
		bc_refuse_join("attest:not-tpm-bound", c->tenant);
}

/* base64url of bytes, palloc'd. */
static char *
b64u(const unsigned char *b, size_t n)
{
	char	   *s = palloc(bc_b64url_encoded_len(n) + 1);

	bc_b64url_encode(b, n, s);
	return s;
}

/* lower-case hex, palloc'd */
static char *
hex(const unsigned char *b, size_t n)
{
	char	   *s = palloc(n * 2 + 1);
	size_t		i;

	for (i = 0; i < n; i++)
		snprintf(s + 2 * i, 3, "%02x", b[i]);
	return s;
}

static BcPlan attestation_row = {
	"SELECT state, reset_count, restart_count, clock, ima_offset, ima_pcr10 "
	"FROM bc_join.node_attestation WHERE node_id = $1",
	1, {TEXTOID}
};

/* ---------------------------------------------------------------- round 1 */

/* Round 1: a nonce, sealed with the node and the PCRs to quote. */
static Jsonb *
challenge_round(BcJoinRequest *req, AttestRequest *a, MemoryContext outcxt)
{
	BcProofCert c;
	AttestSettings s;
	unsigned char nonce[ATTEST_NONCE_LEN];
	StringInfo	sp;
	StringInfoData pl;
	StringInfoData pcrs;
	TimestampTz na = bc_now() + (int64) ATTEST_CHALLENGE_TTL * USECS_PER_SEC;
	Datum		v;
	int64		ima_offset = 0;
	char	   *volatile state = NULL;
	int			i;
	bool		first = true;

	prove(req, a->proof, &c);
	load_settings(c.node_id, &s);
	v = CStringGetTextDatum(c.node_id);
	if (bc_spi_exec(&attestation_row, &v, NULL, true, 1) == 1)
		ima_offset = bc_spi_int8(5);

	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
		elog(ERROR, "RAND_bytes failed");
	begin_state_round(req, c.serial);
	sp = state_payload(nonce, s.pcrs, c.node_id);
	PG_TRY();
	{
		state = bc_challenge_seal(ATTEST_WHO, na, (unsigned char *) sp->data, sp->len);
		(void) bc_challenge_sealed_not_after(&na);
	}
	PG_FINALLY();
	{
		bc_challenge_round_end();
	}
	PG_END_TRY();

	initStringInfo(&pcrs);
	appendStringInfoChar(&pcrs, '[');
	for (i = 0; i < 24; i++)
		if (s.pcrs & (1u << i))
		{
			appendStringInfo(&pcrs, "%s%d", first ? "" : ",", i);
			first = false;
		}
	appendStringInfoChar(&pcrs, ']');

	initStringInfo(&pl);
	bc_json_begin(&pl);
	bc_json_member(&pl, "status", BC_STATUS_CHALLENGE);
	bc_json_member(&pl, "purpose", ATTEST_WHO);
	bc_json_member(&pl, "nodeId", c.node_id);
	bc_json_member(&pl, "serial", c.serial);
	bc_json_member(&pl, "nonce", b64u(nonce, sizeof(nonce)));
	bc_json_member(&pl, "state", state);
	bc_json_member(&pl, "notAfter", bc_rfc3339(na));
	bc_json_member_raw(&pl, "pcrs", pcrs.data);
	bc_json_member(&pl, "bank", "sha256");
	bc_json_member_int(&pl, "imaOffset", ima_offset);
	bc_json_member_int(&pl, "intervalSeconds", s.interval);
	bc_json_end(&pl);
	return bc_signed_response(BC_STATUS_CHALLENGE, &pl, outcxt);
}

/* ---------------------------------------------------------------- round 2 */

/* What round 2 found; fail_reason non-NULL: the node is quarantined for it. */
typedef struct AttestVerdict
{
	const char *fail_reason;
	StringInfoData detail;		/* JSON object members, without braces */
	int64		ima_offset;
	unsigned char ima_pcr10[BC_SHA256_LEN];
	bool		ima_known;
	bool		rebooted;
} AttestVerdict;

/* The first failure the TPM's report shows: reason and JSON members of what failed. */
static void
verdict_fail(AttestVerdict *v, const char *reason, const char *fmt,...) pg_attribute_printf(3, 4);

static void
verdict_fail(AttestVerdict *v, const char *reason, const char *fmt,...)
{
	va_list		ap;

	if (v->fail_reason != NULL)
		return;
	v->fail_reason = reason;
	for (;;)
	{
		int			needed;

		va_start(ap, fmt);
		needed = appendStringInfoVA(&v->detail, fmt, ap);
		va_end(ap);
		if (needed == 0)
			break;
		enlargeStringInfo(&v->detail, needed);
	}
}

/* The quoted values: pcrValues {"sha256": {"<i>": "<hex>"}} for exactly the selection. */
static unsigned char *
parse_pcr_values(Jsonb *pv, uint32 sel, unsigned char quoted[24][BC_SHA256_LEN], size_t *len,
				 const char *tenant)
{
	JsonbValue *bank = getKeyJsonValueFromContainer(&pv->root, "sha256", 6, NULL);
	JsonbIterator *it;
	JsonbValue	k;
	uint32		seen = 0;
	unsigned char *cat;
	int			i;
	int			n = 0;

	if (bank == NULL || bank->type != jbvBinary || !JsonContainerIsObject(bank->val.binary.data) ||
		JsonContainerSize(&pv->root) != 1)
		bc_refuse_join("attest:pcr-values-malformed", tenant);
	it = JsonbIteratorInit(bank->val.binary.data);
	(void) JsonbIteratorNext(&it, &k, true);
	while (JsonbIteratorNext(&it, &k, true) == WJB_KEY)
	{
		JsonbValue	val;
		char		name[4];
		int			idx;
		size_t		got;
		char	   *end;

		if (k.val.string.len < 1 || k.val.string.len > 2)
			bc_refuse_join("attest:pcr-values-malformed", tenant);
		memcpy(name, k.val.string.val, k.val.string.len);
		name[k.val.string.len] = '\0';
		idx = (int) strtol(name, &end, 10);
		(void) JsonbIteratorNext(&it, &val, true);
		if (*end != '\0' || strspn(name, "0123456789") != strlen(name) || idx < 0 || idx > 23 ||
			(strlen(name) > 1 && name[0] == '0') || !(sel & (1u << idx)) ||
			val.type != jbvString || val.val.string.len != 2 * BC_SHA256_LEN)
			bc_refuse_join("attest:pcr-values-malformed", tenant);
		got = 0;
		for (i = 0; i < BC_SHA256_LEN; i++)
		{
			char		h[3] = {val.val.string.val[2 * i], val.val.string.val[2 * i + 1], '\0'};

			if (strspn(h, "0123456789abcdef") != 2)
				bc_refuse_join("attest:pcr-values-malformed", tenant);
			quoted[idx][i] = (unsigned char) strtol(h, NULL, 16);
			got++;
		}
		seen |= 1u << idx;
	}
	if (seen != sel)
		bc_refuse_join("attest:pcr-values-malformed", tenant);
	cat = palloc(24 * BC_SHA256_LEN);
	for (i = 0; i < 24; i++)
		if (sel & (1u << i))
			memcpy(cat + BC_SHA256_LEN * n++, quoted[i], BC_SHA256_LEN);
	*len = (size_t) n * BC_SHA256_LEN;
	return cat;
}

/* The first of n (pcr, type, digest) not in the boot policy of tenant/pool; -1 when all are. */
static BcPlan boot_violation = {
	"SELECT e.i::int FROM unnest($1::int[], $2::text[], $3::bytea[]) WITH ORDINALITY AS e(pcr, typ, digest, i) "
	"WHERE NOT EXISTS (SELECT 1 FROM bc_join.boot_policy p WHERE p.tenant_id = $4 "
	"  AND (p.pool_id IS NULL OR p.pool_id = $5) AND p.pcr = e.pcr AND p.event_type = e.typ "
	"  AND p.digest = e.digest) ORDER BY e.i LIMIT 1",
	5, {INT4ARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, TEXTOID, TEXTOID}
};

/* Observed rows are written at most once an hour each: a fleet at 60 s would rewrite them every minute. */
static BcPlan boot_observe = {
	"INSERT INTO bc_join.boot_observations AS o (node_id, pcr, event_type, digest) "
	"SELECT DISTINCT $4, e.pcr, e.typ, e.digest FROM unnest($1::int[], $2::text[], $3::bytea[]) AS e(pcr, typ, digest) "
	"ON CONFLICT ON CONSTRAINT boot_observations_pkey DO UPDATE SET last_seen = bc_join.compute_now(), "
	"  seen = o.seen + 1 WHERE o.last_seen < bc_join.compute_now() - interval '1 hour'",
	4, {INT4ARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, TEXTOID}
};

static BcPlan ima_violation = {
	"SELECT e.i::int FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS e(path, digest, i) "
	"WHERE NOT EXISTS (SELECT 1 FROM bc_join.ima_policy p WHERE p.tenant_id = $3 "
	"  AND (p.pool_id IS NULL OR p.pool_id = $4) AND p.path = e.path AND p.digest = e.digest) "
	"  AND NOT EXISTS (SELECT 1 FROM bc_join.ima_excludes x WHERE x.tenant_id = $3 "
	"  AND (x.pool_id IS NULL OR x.pool_id = $4) AND e.path ~ x.path_regex) ORDER BY e.i LIMIT 1",
	4, {TEXTARRAYOID, BYTEAARRAYOID, TEXTOID, TEXTOID}
};

static BcPlan ima_observe = {
	"INSERT INTO bc_join.ima_observations AS o (node_id, path, digest) "
	"SELECT DISTINCT $3, e.path, e.digest FROM unnest($1::text[], $2::bytea[]) AS e(path, digest) "
	"ON CONFLICT ON CONSTRAINT ima_observations_pkey DO UPDATE SET last_seen = bc_join.compute_now(), "
	"  seen = o.seen + 1 WHERE o.last_seen < bc_join.compute_now() - interval '1 hour'",
	3, {TEXTARRAYOID, BYTEAARRAYOID, TEXTOID}
};

/* The name of an event type as policy rows write it. */
static char *
event_type_name(uint32 type)
{
	const char *n = bc_evlog_type_name(type);

	if (n != NULL && strncmp(n, "EV_", 3) == 0)
		return pstrdup(n);
	return psprintf("0x%08x", type);
}

/* The UEFI event log: parsed, replayed (SHA-256) against the quote, judged by the policy. */
static void
check_event_log(const unsigned char *buf, size_t len, uint32 sel,
				unsigned char quoted[24][BC_SHA256_LEN], const AttestSettings *s,
				const BcProofCert *c, AttestVerdict *v)
{
	bc_evlog	log;
	const char *why = NULL;
	unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST];
	uint32_t	mask = 0;
	int			i;
	size_t		e;
	int			n = 0;
	Datum	   *pd;
	Datum	   *td;
	Datum	   *dd;
	Datum		args[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	memset(&log, 0, sizeof(log));
	if (bc_evlog_parse(buf, len, &log, &why) != BC_OK)
	{
		bc_evlog_free(&log);
		bc_refuse_join(psprintf("attest:%s", why ? why : "eventlog-malformed"), c->tenant);
	}
	/* The events into this memory context: nothing malloc()ed outlives an ERROR. */
	{
		bc_evlog_event *copy = palloc(sizeof(bc_evlog_event) * (log.n_events + 1));

		if (log.n_events > 0)
			memcpy(copy, log.events, sizeof(bc_evlog_event) * log.n_events);
		free(log.events);
		log.events = copy;
	}
	if (bc_evlog_replay(&log, BC_EVLOG_ALG_SHA256, pcrs, &mask, &why) != BC_OK)
		bc_refuse_join(psprintf("attest:%s", why ? why : "eventlog-no-sha256"), c->tenant);
	for (i = 0; i < 24; i++)
	{
		if (!(sel & (1u << i)) || i == IMA_PCR)
			continue;
		if (memcmp(pcrs[i], quoted[i], BC_SHA256_LEN) != 0)
		{
			char	   *q = hex(quoted[i], BC_SHA256_LEN);
			char	   *r = hex(pcrs[i], BC_SHA256_LEN);

			if (!s->enforce)
				bc_refuse_join("attest:eventlog-replay", c->tenant);
			verdict_fail(v, "eventlog-replay", "\"pcr\":%d,\"quoted\":\"%s\",\"replayed\":\"%s\"", i, q, r);
			return;
		}
	}

	/* Every extending event on a quoted PCR: (pcr, type name, SHA-256 digest). */
	pd = palloc(sizeof(Datum) * (log.n_events + 1));
	td = palloc(sizeof(Datum) * (log.n_events + 1));
	dd = palloc(sizeof(Datum) * (log.n_events + 1));
	for (e = 0; e < log.n_events; e++)
	{
		const bc_evlog_event *ev = &log.events[e];
		int			d;

		if (ev->type == BC_EV_NO_ACTION || ev->pcr >= 24 || !(sel & (1u << ev->pcr)) ||
			ev->pcr == IMA_PCR)
			continue;
		for (d = 0; d < ev->n_digests; d++)
			if (ev->digests[d].alg == BC_EVLOG_ALG_SHA256)
				break;
		if (d == ev->n_digests)
			continue;
		pd[n] = Int32GetDatum((int32) ev->pcr);
		td[n] = CStringGetTextDatum(event_type_name(ev->type));
		dd[n] = PointerGetDatum(bc_bytea(ev->digests[d].d, BC_SHA256_LEN));
		n++;
	}
	args[0] = PointerGetDatum(construct_array(pd, n, INT4OID, 4, true, TYPALIGN_INT));
	args[1] = PointerGetDatum(construct_array(td, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[2] = PointerGetDatum(construct_array(dd, n, BYTEAOID, -1, false, TYPALIGN_INT));
	if (!s->enforce)
	{
		args[3] = CStringGetTextDatum(c->node_id);
		bc_spi_exec(&boot_observe, args, NULL, false, 0);
		return;
	}
	args[3] = CStringGetTextDatum(c->tenant);
	if (s->pool)
		args[4] = CStringGetTextDatum(s->pool);
	else
		nulls[4] = 'n';
	if (bc_spi_exec(&boot_violation, args, nulls, true, 1) == 1)
	{
		int			k = bc_spi_int4(1) - 1;
		bytea	   *dg = DatumGetByteaPP(dd[k]);

		verdict_fail(v, "boot-policy", "\"pcr\":%d,\"eventType\":\"%s\",\"digest\":\"%s\",\"event\":%d",
					 DatumGetInt32(pd[k]), TextDatumGetCString(td[k]),
					 hex((unsigned char *) VARDATA_ANY(dg), BC_SHA256_LEN), k);
	}
}

/* The IMA increment: replayed from the kept PCR 10 to the quoted one, judged by the policy. */
static void
check_ima(const AttestRequest *a, int64 kept_offset, const unsigned char *kept_pcr10,
		  const unsigned char quoted10[BC_SHA256_LEN], const AttestSettings *s,
		  const BcProofCert *c, AttestVerdict *v)
{
	unsigned char *buf = NULL;
	size_t		len = 0;
	bc_ima_entry *ents = NULL;
	size_t		n = 0;
	const char *why = NULL;
	unsigned char pcr10[BC_EVLOG_MAX_DIGEST];
	long		match_at = -1;
	Datum	   *pathd;
	Datum	   *dd;
	Datum		args[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	long		i;
	int			st;

	/* From the start (a reboot, or bcd starting over), or from where the last quote matched. */
	if (a->ima_offset != 0 && a->ima_offset != kept_offset)
		bc_refuse_join("attest:ima-offset", c->tenant);
	memset(pcr10, 0, sizeof(pcr10));
	if (a->ima_offset != 0 && kept_pcr10 != NULL)
		memcpy(pcr10, kept_pcr10, BC_SHA256_LEN);
	if (a->ima_entries[0] != '\0')
	{
		size_t		bl = strlen(a->ima_entries);

		buf = palloc(bc_b64url_decoded_maxlen(bl) + 1);
		if (bc_b64url_decode(a->ima_entries, bl, buf, bc_b64url_decoded_maxlen(bl), &len) != BC_OK)
			bc_refuse_join("attest:ima-malformed", c->tenant);
	}
	st = bc_ima_parse(buf, len, &ents, &n, &why);
	if (st != BC_OK)
	{
		free(ents);
		bc_refuse_join(psprintf("attest:%s", why ? why : "ima-malformed"), c->tenant);
	}
	/* The entries into this memory context: nothing malloc()ed outlives an ERROR. */
	{
		bc_ima_entry *copy = palloc(sizeof(bc_ima_entry) * (n + 1));

		if (n > 0)
			memcpy(copy, ents, sizeof(bc_ima_entry) * n);
		free(ents);
		ents = copy;
	}
	st = bc_ima_replay(ents, n, BC_EVLOG_ALG_SHA256, pcr10, quoted10, &match_at, &why);
	if (st != BC_OK)
		bc_refuse_join(psprintf("attest:%s", why ? why : "ima-malformed"), c->tenant);
	if (match_at < 0)
	{
		if (!s->enforce)
			bc_refuse_join("attest:ima-replay", c->tenant);
		verdict_fail(v, "ima-replay", "\"pcr\":10,\"quoted\":\"%s\",\"offset\":" INT64_FORMAT ",\"entries\":%zu",
					 hex(quoted10, BC_SHA256_LEN), a->ima_offset, n);
		return;
	}
	v->ima_offset = a->ima_offset + match_at;
	memcpy(v->ima_pcr10, quoted10, BC_SHA256_LEN);
	v->ima_known = true;

	pathd = palloc(sizeof(Datum) * (match_at + 1));
	dd = palloc(sizeof(Datum) * (match_at + 1));
	for (i = 0; i < match_at; i++)
	{
		pathd[i] = PointerGetDatum(cstring_to_text_with_len(ents[i].path, ents[i].path_len));
		dd[i] = PointerGetDatum(bc_bytea(ents[i].file_digest, ents[i].file_digest_len));
	}
	args[0] = PointerGetDatum(construct_array(pathd, (int) match_at, TEXTOID, -1, false, TYPALIGN_INT));
	args[1] = PointerGetDatum(construct_array(dd, (int) match_at, BYTEAOID, -1, false, TYPALIGN_INT));
	if (!s->enforce)
	{
		if (match_at > 0)
		{
			args[2] = CStringGetTextDatum(c->node_id);
			bc_spi_exec(&ima_observe, args, NULL, false, 0);
		}
		return;
	}
	args[2] = CStringGetTextDatum(c->tenant);
	if (s->pool)
		args[3] = CStringGetTextDatum(s->pool);
	else
		nulls[3] = 'n';
	if (match_at > 0 && bc_spi_exec(&ima_violation, args, nulls, true, 1) == 1)
	{
		int			k = bc_spi_int4(1) - 1;

		StringInfoData pj;

		initStringInfo(&pj);
		escape_json(&pj, pnstrdup(ents[k].path, ents[k].path_len));
		verdict_fail(v, "ima-policy", "\"pcr\":10,\"path\":%s,\"alg\":\"%s\",\"digest\":\"%s\",\"entry\":" INT64_FORMAT,
					 pj.data, ents[k].file_alg, hex(ents[k].file_digest, ents[k].file_digest_len),
					 a->ima_offset + k);
	}
}

static BcPlan ensure_row = {
	"INSERT INTO bc_join.node_attestation (node_id) VALUES ($1) "
	"ON CONFLICT ON CONSTRAINT node_attestation_pkey DO NOTHING",
	1, {TEXTOID}
};

static BcPlan lock_row = {
	"SELECT state, reset_count, restart_count, clock, ima_offset, ima_pcr10 "
	"FROM bc_join.node_attestation WHERE node_id = $1 FOR UPDATE",
	1, {TEXTOID}
};

static BcPlan record_pass = {
	"UPDATE bc_join.node_attestation SET "
	"  state = CASE WHEN state = 'quarantined' THEN state ELSE 'healthy' END, "
	"  last_quote_at = bc_join.compute_now(), last_result = 'passed', last_reason = NULL, "
	"  last_passed_at = bc_join.compute_now(), reset_count = $2, restart_count = $3, clock = $4, "
	"  ima_offset = $5, ima_pcr10 = $6, missed_reported_at = NULL, "
	"  failures = CASE WHEN state = 'quarantined' THEN failures ELSE 0 END "
	"WHERE node_id = $1 RETURNING state",
	6, {TEXTOID, INT8OID, INT8OID, INT8OID, INT8OID, BYTEAOID}
};

static BcPlan record_clock = {
	"UPDATE bc_join.node_attestation SET last_quote_at = bc_join.compute_now(), "
	"  reset_count = $2, restart_count = $3, clock = $4 WHERE node_id = $1",
	4, {TEXTOID, INT8OID, INT8OID, INT8OID}
};

static BcPlan quarantine = {
	"SELECT bc_join.quarantine_node($1, $2, $3)",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

/* Round 2: the quote by the certificate's AK over this round's nonce, judged. */
static Jsonb *
quote_round(BcJoinRequest *req, AttestRequest *a, MemoryContext outcxt)
{
	BcProofCert c;
	AttestSettings s;
	bytea	   *payload;
	const unsigned char *p;
	size_t		plen;
	unsigned char nonce[ATTEST_NONCE_LEN];
	uint32		sel;
	TimestampTz na;
	Datum		args[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	unsigned char *bin;
	size_t		len;
	bc_tpm_public ak;
	bc_tpm_attest quote;
	TPMT_SIGNATURE sig;
	unsigned char name[BC_TPM_NAME_MAX];
	size_t		name_len;
	const char *reason = NULL;
	char	   *statement;
	unsigned char quoted[24][BC_SHA256_LEN];
	unsigned char *cat;
	bc_tpm_pcr_bank bank;
	unsigned char extra[BC_SHA256_LEN];
	StringInfoData m;
	const TPMS_CLOCK_INFO *ci;
	bool		has_row_clock;
	int64		kept_reset = 0;
	int64		kept_restart = 0;
	int64		kept_clock = 0;
	int64		kept_offset = 0;
	bytea	   *kept_pcr10 = NULL;
	bool		isnull;
	AttestVerdict v;
	StringInfoData pl;
	const char *status;
	int			st;

	prove(req, a->proof, &c);

	/* The state: this certificate's round 1, unexpired, this node, used once. */
	payload = open_state(req, &c, a->state, &na);
	p = (unsigned char *) VARDATA(payload);
	plen = VARSIZE(payload) - VARHDRSZ;
	if (plen < 1 + ATTEST_NONCE_LEN + 4 + 1 || p[0] != ATTEST_STATE_VERSION ||
		plen != 1 + ATTEST_NONCE_LEN + 4 + 1 + (size_t) p[1 + ATTEST_NONCE_LEN + 4] ||
		strlen(c.node_id) != p[1 + ATTEST_NONCE_LEN + 4] ||
		memcmp(p + 1 + ATTEST_NONCE_LEN + 5, c.node_id, strlen(c.node_id)) != 0)
		bc_refuse_join("attest:state-mismatch", c.tenant);
	memcpy(nonce, p + 1, ATTEST_NONCE_LEN);
	sel = ((uint32) p[1 + ATTEST_NONCE_LEN] << 24) | ((uint32) p[2 + ATTEST_NONCE_LEN] << 16) |
		((uint32) p[3 + ATTEST_NONCE_LEN] << 8) | p[4 + ATTEST_NONCE_LEN];
	if (sel == 0 || sel >= (1u << 24) || !(sel & (1u << IMA_PCR)))
		bc_refuse_join("attest:state-mismatch", c.tenant);
	bc_sha256(nonce, ATTEST_NONCE_LEN, extra);
	args[0] = PointerGetDatum(bc_bytea(extra, BC_SHA256_LEN));
	args[1] = CStringGetTextDatum(c.node_id);
	args[2] = TimestampTzGetDatum(na);
	if (bc_spi_exec(&use_nonce, args, NULL, false, 0) != 1)
		bc_refuse_join("attest:nonce-reused", c.tenant);

	/* The AK is the certificate's. */
	bin = decode_member(a->ak_pub, BC_TPM_STRUCT_MAX, &len, "ak", c.tenant);
	if (bc_tpm_public_parse(bin, len, &ak) != BC_OK)
		bc_refuse_join("attest:ak-malformed", c.tenant);
	if (bc_tpm_check_ak(&ak, &reason) != BC_OK)
		bc_refuse_join(psprintf("attest:%s", reason), c.tenant);
	if (bc_tpm_name(&ak, name, &name_len) != BC_OK)
		bc_refuse_join("attest:ak-name-alg", c.tenant);
	statement = psprintf(BC_TPM_AK_URN_PREFIX "sha256:%s", hex(name + 2, name_len - 2));
	if (strcmp(statement, c.node_key_uri) != 0)
		bc_refuse_join("attest:ak-mismatch", c.tenant);

	/* The quote: signed by the AK, over this nonce, over exactly these PCR values. */
	bin = decode_member(a->quote, BC_TPM_STRUCT_MAX, &len, "quote", c.tenant);
	if (bc_tpm_attest_parse(bin, len, &quote) != BC_OK)
		bc_refuse_join("attest:quote-malformed", c.tenant);
	bin = decode_member(a->quote_sig, BC_TPM_STRUCT_MAX, &len, "quote-signature", c.tenant);
	if (bc_tpm_signature_parse(bin, len, &sig) != BC_OK)
		bc_refuse_join("attest:quote-signature-malformed", c.tenant);
	if (bc_tpm_verify_attest(&ak, &quote, &sig, &reason) != BC_OK)
		bc_refuse_join(psprintf("attest:%s", reason), c.tenant);
	memset(quoted, 0, sizeof(quoted));
	cat = parse_pcr_values(a->pcr_values, sel, quoted, &len, c.tenant);
	bank.hash_alg = TPM2_ALG_SHA256;
	bank.pcrs = sel;
	bank.values = cat;
	bank.values_len = len;
	initStringInfo(&m);
	appendStringInfoString(&m, ATTEST_LABEL);
	appendBinaryStringInfo(&m, (const char *) nonce, ATTEST_NONCE_LEN);
	bc_sha256(m.data, m.len, extra);
	st = bc_tpm_check_quote(&quote, &sig, extra, BC_SHA256_LEN, &bank, 1, &reason);
	if (st != BC_OK)
		bc_refuse_join(psprintf("attest:%s", reason ? reason : "quote"), c.tenant);

	/*
	 * From here on what is judged is what this node's TPM signed for this
	 * round: a failure is the machine's.
	 */
	load_settings(c.node_id, &s);
	args[0] = CStringGetTextDatum(c.node_id);
	bc_spi_exec(&ensure_row, args, NULL, false, 0);
	if (bc_spi_exec(&lock_row, args, NULL, false, 1) != 1)
		elog(ERROR, "node_attestation of node %s vanished", c.node_id);
	(void) bc_spi_datum(2, &isnull);
	has_row_clock = !isnull;
	if (has_row_clock)
	{
		kept_reset = bc_spi_int8(2);
		kept_restart = bc_spi_int8(3);
		kept_clock = bc_spi_int8(4);
	}
	kept_offset = bc_spi_int8(5);
	(void) bc_spi_datum(6, &isnull);
	if (!isnull)
		kept_pcr10 = bc_spi_bytea_copy(6);

	memset(&v, 0, sizeof(v));
	initStringInfo(&v.detail);
	v.ima_offset = kept_offset;
	if (kept_pcr10 != NULL && VARSIZE_ANY_EXHDR(kept_pcr10) == BC_SHA256_LEN)
		memcpy(v.ima_pcr10, VARDATA_ANY(kept_pcr10), BC_SHA256_LEN);

	/* The TPM clock (keylime's rules): a reset or restart is a reboot, a step back a rollback. */
	ci = &quote.attest.clockInfo;
	if (ci->clock > (uint64) PG_INT64_MAX)
		bc_refuse_join("attest:quote-malformed", c.tenant);
	if (has_row_clock)
	{
		if ((int64) ci->resetCount < kept_reset)
			verdict_fail(&v, "clock-rollback", "\"resetCount\":%u,\"keptResetCount\":" INT64_FORMAT,
						 ci->resetCount, kept_reset);
		else if ((int64) ci->resetCount == kept_reset && (int64) ci->restartCount < kept_restart)
			verdict_fail(&v, "clock-rollback", "\"restartCount\":%u,\"keptRestartCount\":" INT64_FORMAT,
						 ci->restartCount, kept_restart);
		else if ((int64) ci->resetCount == kept_reset && (int64) ci->restartCount == kept_restart &&
				 (int64) ci->clock <= kept_clock)
			verdict_fail(&v, "clock-rollback", "\"clock\":" UINT64_FORMAT ",\"keptClock\":" INT64_FORMAT,
						 (uint64) ci->clock, kept_clock);
		v.rebooted = (int64) ci->resetCount != kept_reset;
	}
	if (v.rebooted)
	{
		/* A new boot: a new IMA list, from PCR 10 zero. */
		v.ima_offset = 0;
		memset(v.ima_pcr10, 0, BC_SHA256_LEN);
		kept_offset = 0;
		kept_pcr10 = NULL;
	}

	/* The measured boot, then IMA. */
	if (v.fail_reason == NULL && a->event_log != NULL)
	{
		bin = decode_member(a->event_log, BC_EVLOG_MAX_BYTES, &len, "eventlog", c.tenant);
		check_event_log(bin, len, sel, quoted, &s, &c, &v);
	}
	else if (v.fail_reason == NULL && s.enforce)
		bc_refuse_join("attest:eventlog-missing", c.tenant);
	/* Enforce mode: a PCR 10 that moved is judged by its list, never skipped. */
	if (v.fail_reason == NULL && s.enforce && !a->has_ima)
	{
		static const unsigned char zero[BC_SHA256_LEN];

		if (memcmp(quoted[IMA_PCR], zero, BC_SHA256_LEN) != 0)
			bc_refuse_join("attest:ima-missing", c.tenant);
	}

	/*
	 * After a reboot an increment from the old list's offset (round 1 told
	 * it before the reboot was seen) is not replayed: the answer says offset
	 * 0, and the next round replays the new list whole.
	 */
	if (v.fail_reason == NULL && a->has_ima && !(v.rebooted && a->ima_offset != 0))
	{
		check_ima(a, kept_offset, kept_pcr10 ? (unsigned char *) VARDATA_ANY(kept_pcr10) : NULL,
				  quoted[IMA_PCR], &s, &c, &v);
	}

	args[0] = CStringGetTextDatum(c.node_id);
	args[1] = Int64GetDatum((int64) ci->resetCount);
	args[2] = Int64GetDatum((int64) ci->restartCount);
	args[3] = Int64GetDatum((int64) ci->clock);
	if (v.fail_reason != NULL)
	{
		StringInfoData d;

		/* The clock moves only forward: a rollback keeps the old values. */
		if (strcmp(v.fail_reason, "clock-rollback") != 0)
			bc_spi_exec(&record_clock, args, NULL, false, 0);
		initStringInfo(&d);
		appendStringInfo(&d, "{%s%s\"serial\":\"%s\",\"mode\":\"%s\",\"resetCount\":%u,\"restartCount\":%u}",
						 v.detail.data, v.detail.len > 0 ? "," : "", c.serial,
						 s.enforce ? "enforce" : "observe", ci->resetCount, ci->restartCount);
		args[1] = CStringGetTextDatum(v.fail_reason);
		args[2] = JsonbPGetDatum(bc_jsonb(d.data));
		bc_spi_exec(&quarantine, args, NULL, false, 1);
		bc_stats_attest_failure(v.fail_reason);
		status = "quarantined";
	}
	else
	{
		args[4] = Int64GetDatum(v.ima_offset);
		if (v.ima_known || kept_pcr10 != NULL || v.rebooted)
			args[5] = PointerGetDatum(bc_bytea(v.ima_pcr10, BC_SHA256_LEN));
		else
			nulls[5] = 'n';
		if (bc_spi_exec(&record_pass, args, nulls, false, 1) != 1)
			elog(ERROR, "node_attestation of node %s vanished", c.node_id);
		status = strcmp(bc_spi_text_req(1), "quarantined") == 0 ? "quarantined" : "attested";
		if (!c.quarantined)
			bc_node_seen(c.node_id, false);
	}

	initStringInfo(&pl);
	bc_json_begin(&pl);
	bc_json_member(&pl, "status", status);
	bc_json_member(&pl, "purpose", ATTEST_WHO);
	bc_json_member(&pl, "nodeId", c.node_id);
	bc_json_member(&pl, "serial", c.serial);
	bc_json_member(&pl, "nonce", b64u(nonce, ATTEST_NONCE_LEN));
	bc_json_member_int(&pl, "nextSeconds", s.interval);
	bc_json_member_int(&pl, "imaOffset", v.ima_offset);
	if (strcmp(status, "quarantined") == 0)
		bc_json_member(&pl, "reason", "attestation-failed");
	bc_json_end(&pl);
	return bc_signed_response(status, &pl, outcxt);
}

/* One round of attest: the first ({"proof"}) or the second (with "state"). */
static Jsonb *
attest_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	AttestRequest *a = (AttestRequest *) arg;

	if (a->state == NULL)
		return challenge_round(req, a, outcxt);
	return quote_round(req, a, outcxt);
}

PG_FUNCTION_INFO_V1(bc_attest_request);

/* bc_join.attest(request jsonb): continuous attestation of a TPM-bound node. */
Datum
bc_attest_request(PG_FUNCTION_ARGS)
{
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	AttestRequest a;
	Jsonb	   *out;

	bc_require_sql_version();
	parse_attest_request(PG_GETARG_JSONB_P(0), &a);
	memset(&req, 0, sizeof(req));
	req.attestor = ATTEST_WHO;
	req.role = BC_ROLE_NODE;
	req.claims = bc_jsonb("{}");
	bc_require_config();
	bc_require_primary();

	bc_spi_connect();
	out = bc_run_round(&req, attest_round, &a, ATTEST_WHO, callcxt);
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}
