/*
 * evidence.c: a built-in attestor's JSON evidence, read without raising.
 *
 * ATTESTORS.md, "General rules": after the base64url is decoded, anything
 * wrong with the evidence is the recorded refusal "<attestor>:malformed",
 * never an error: invalid UTF-8 or JSON, a duplicate member name (jsonb
 * would keep the last silently), an unknown member, a wrong JSON type, a
 * fraction or exponent in an integer member, a member over its cap.  The
 * bytes are checked as UTF-8, then read with PostgreSQL's own JSON parser
 * and semantic actions (no jsonb, no numeric conversion).
 */
#include "bc_join.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"

typedef struct EvidenceScan
{
	BcEvidenceMember *members;
	int			n;
	int			depth;
	int			current;		/* member whose value comes next, or -1 */
	bool		bad;
} EvidenceScan;

static void
ev_object_start(void *state)
{
	EvidenceScan *es = (EvidenceScan *) state;

	if (++es->depth > 1)
		es->bad = true;			/* members are scalars */
}

static void
ev_object_end(void *state)
{
	((EvidenceScan *) state)->depth--;
}

static void
ev_array_start(void *state)
{
	((EvidenceScan *) state)->bad = true;
}

static void
ev_field_start(void *state, char *fname, bool isnull)
{
	EvidenceScan *es = (EvidenceScan *) state;
	int			i;

	es->current = -1;
	if (es->depth != 1)
		return;
	for (i = 0; i < es->n; i++)
	{
		if (strcmp(es->members[i].name, fname) == 0)
		{
			if (es->members[i].value != NULL)
				es->bad = true; /* a duplicate */
			es->current = i;
			return;
		}
	}
	es->bad = true;				/* an unknown member */
}

static void
ev_scalar(void *state, char *token, JsonTokenType type)
{
	EvidenceScan *es = (EvidenceScan *) state;
	BcEvidenceMember *m;

	if (es->depth != 1 || es->current < 0)
	{
		es->bad = true;			/* a bare scalar */
		return;
	}
	m = &es->members[es->current];
	if (m->integer)
	{
		const char *p = token[0] == '-' ? token + 1 : token;
		size_t		digits = strspn(p, "0123456789");

		if (type != JSON_TOKEN_NUMBER || digits == 0 || p[digits] != '\0' ||
			(int) digits > m->max)
			es->bad = true;
	}
	else if (type != JSON_TOKEN_STRING || (int) strlen(token) > m->max)
		es->bad = true;
	m->value = pstrdup(token);
	es->current = -1;
}

/* Read evidence as exactly the members given, or refuse "<attestor>:malformed". */
void
bc_evidence_members(const char *attestor, const bytea *evidence, BcEvidenceMember *members,
					int n)
{
	EvidenceScan es;
	JsonSemAction sem;
	JsonLexContext *lex;
	const char *data;
	int			len;
	int			i;

	for (i = 0; i < n; i++)
		members[i].value = NULL;
	if (evidence == NULL)
		bc_refuse_join(psprintf("%s:malformed", attestor), NULL);
	data = VARDATA_ANY(evidence);
	len = VARSIZE_ANY_EXHDR(evidence);
	if (memchr(data, '\0', len) != NULL || !pg_verify_mbstr(PG_UTF8, data, len, true))
		bc_refuse_join(psprintf("%s:malformed", attestor), NULL);

	memset(&es, 0, sizeof(es));
	es.members = members;
	es.n = n;
	es.current = -1;
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &es;
	sem.object_start = ev_object_start;
	sem.object_end = ev_object_end;
	sem.array_start = ev_array_start;
	sem.object_field_start = ev_field_start;
	sem.scalar = ev_scalar;
	lex = makeJsonLexContextCstringLen((char *) data, len, PG_UTF8, true);
	if (pg_parse_json(lex, &sem) != JSON_SUCCESS || es.bad)
		bc_refuse_join(psprintf("%s:malformed", attestor), NULL);
	for (i = 0; i < n; i++)
	{
		if (members[i].required && members[i].value == NULL)
			bc_refuse_join(psprintf("%s:malformed", attestor), NULL);
	}
}
