/*
 * evidence.c: a built-in attestor's JSON evidence, read without raising.
 *
 * the rule for every built-in attestor's evidence: after the base64url is decoded, anything
 * wrong with the evidence is the recorded refusal "<attestor>:malformed",
 * never an error: invalid UTF-8 or JSON, a duplicate member name (jsonb
 * would keep the last silently), an unknown member, a wrong JSON type, a
 * fraction or exponent in an integer member, a member over its cap.  The
 * bytes are checked as UTF-8, then read with PostgreSQL's own JSON parser
 * and semantic actions (no jsonb, no numeric conversion).  The same
 * non-raising reader (bc_json_members) reads the TPM evidence, x509pop's
 * payload and the payload of a proof.
 */
#include "bc_join.h"
#include "pg_compat.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"

/* The digits of a number outside the members named (bc_json_members with others). */
#define OTHER_DIGITS_MAX 15

typedef struct EvidenceScan
{
	BcEvidenceMember *members;
	int			n;
	bool		others;			/* other members and nested values allowed */
	List	   *other_names;	/* with others: the other top-level names seen */
	int			depth;
	int			current;		/* member whose value comes next, or -1 */
	bool		bad;
} EvidenceScan;

/* Whether token is a plain integer (no fraction, no exponent) of 1 to max digits. */
static bool
plain_integer(const char *token, int max)
{
	const char *p = token[0] == '-' ? token + 1 : token;
	size_t		digits = strspn(p, "0123456789");

	return digits > 0 && p[digits] == '\0' && (int) digits <= max;
}

/* An object or array opens: nested values only with others, never as a member named. */
static void
ev_container_start(EvidenceScan *es, bool array)
{
	if (es->current >= 0)
		es->bad = true;			/* members named are scalars */
	es->current = -1;
	es->depth++;
	if (!es->others ? (array || es->depth > 1) : (array && es->depth == 1))
		es->bad = true;			/* the root is an object; flat unless others */
}

/* The parser's object start. */
static BC_JSON_ACTION
ev_object_start(void *state)
{
	ev_container_start((EvidenceScan *) state, false);
	BC_JSON_CONTINUE;
}

/* The parser's array start. */
static BC_JSON_ACTION
ev_array_start(void *state)
{
	ev_container_start((EvidenceScan *) state, true);
	BC_JSON_CONTINUE;
}

/* An object or array closes. */
static BC_JSON_ACTION
ev_container_end(void *state)
{
	((EvidenceScan *) state)->depth--;
	BC_JSON_CONTINUE;
}

/* A member starts: one of those named (each once), or with others another (each once). */
static BC_JSON_ACTION
ev_field_start(void *state, char *fname, bool isnull)
{
	EvidenceScan *es = (EvidenceScan *) state;
	ListCell   *lc;
	int			i;

	es->current = -1;
	if (es->depth != 1)
		BC_JSON_CONTINUE;
	for (i = 0; i < es->n; i++)
	{
		if (strcmp(es->members[i].name, fname) == 0)
		{
			if (es->members[i].value != NULL)
				es->bad = true; /* a duplicate */
			es->current = i;
			BC_JSON_CONTINUE;
		}
	}
	if (!es->others)
	{
		es->bad = true;			/* an unknown member */
		BC_JSON_CONTINUE;
	}
	foreach(lc, es->other_names)
	{
		if (strcmp((char *) lfirst(lc), fname) == 0)
			es->bad = true;		/* a duplicate: jsonb would keep the last */
	}
	es->other_names = lappend(es->other_names, fname);
	BC_JSON_CONTINUE;
}

/* A scalar: a named member's value, of its type and within its cap. */
static BC_JSON_ACTION
ev_scalar(void *state, char *token, JsonTokenType type)
{
	EvidenceScan *es = (EvidenceScan *) state;
	BcEvidenceMember *m;

	if (es->depth != 1 || es->current < 0)
	{
		if (!es->others || es->depth == 0)
			es->bad = true;		/* a bare scalar, or an unknown member's */
		else if (type == JSON_TOKEN_NUMBER && !plain_integer(token, OTHER_DIGITS_MAX))
			es->bad = true;		/* only small whole numbers anywhere */
		BC_JSON_CONTINUE;
	}
	m = &es->members[es->current];
	if (m->integer)
	{
		if (type != JSON_TOKEN_NUMBER || !plain_integer(token, m->max))
			es->bad = true;
	}
	else if (type != JSON_TOKEN_STRING || (int) strlen(token) > m->max)
		es->bad = true;
	m->value = pstrdup(token);
	es->current = -1;
	BC_JSON_CONTINUE;
}

/*
 * Read data (len bytes) as a JSON object of the members given, without
 * raising: false for invalid UTF-8 or JSON, a duplicate member, a member of
 * the wrong type or over its cap, a required member absent.  Without others
 * the object holds exactly members of these names, each a scalar; with
 * others it may hold other members too, of any value, but every number in
 * it is a plain integer of at most 15 digits.
 */
bool
bc_json_members(const char *data, int len, BcEvidenceMember *members, int n, bool others)
{
	EvidenceScan es;
	JsonSemAction sem;
	JsonLexContext *lex;
	int			i;

	for (i = 0; i < n; i++)
		members[i].value = NULL;
	if (memchr(data, '\0', len) != NULL || !pg_verify_mbstr(PG_UTF8, data, len, true))
		return false;

	memset(&es, 0, sizeof(es));
	es.members = members;
	es.n = n;
	es.others = others;
	es.current = -1;
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &es;
	sem.object_start = ev_object_start;
	sem.object_end = ev_container_end;
	sem.array_start = ev_array_start;
	sem.array_end = ev_container_end;
	sem.object_field_start = ev_field_start;
	sem.scalar = ev_scalar;
	lex = bc_json_lexer((char *) data, len, PG_UTF8);
	if (pg_parse_json(lex, &sem) != JSON_SUCCESS || es.bad)
		return false;
	for (i = 0; i < n; i++)
	{
		if (members[i].required && members[i].value == NULL)
			return false;
	}
	return true;
}

/* Read evidence as exactly the members given, or refuse "<attestor>:malformed". */
void
bc_evidence_members(const char *attestor, const bytea *evidence, BcEvidenceMember *members,
					int n)
{
	if (evidence == NULL ||
		!bc_json_members(VARDATA_ANY(evidence), VARSIZE_ANY_EXHDR(evidence), members, n, false))
		bc_refuse_join(psprintf("%s:malformed", attestor), NULL);
}

/*
 * Signed documents (a cloud's identity document, a JWT's claims): nested
 * JSON of which the caller reads some scalar members by path ("a.b.c").
 * Other members are ignored; a member read twice (a duplicate) or text that
 * is no JSON object makes the whole document unreadable; a member of the
 * wrong type is reported on that member.
 */
#define DOC_DEPTH_MAX 32

typedef struct DocScan
{
	BcDocField *fields;
	int			n;
	int			depth;			/* containers open */
	char		kind[DOC_DEPTH_MAX];	/* 'o' or 'a' for each */
	char	   *names[DOC_DEPTH_MAX];	/* the member each object is at */
	int			current;		/* field whose value comes next, or -1 */
	bool		bad;
} DocScan;

/* The wanted field at the member just started, or -1. */
static int
doc_match(DocScan *ds)
{
	StringInfoData path;
	int			i;

	for (i = 0; i < ds->depth; i++)
		if (ds->kind[i] != 'o')
			return -1;			/* inside an array: never read */
	initStringInfo(&path);
	for (i = 0; i < ds->depth; i++)
	{
		if (i > 0)
			appendStringInfoChar(&path, '.');
		appendStringInfoString(&path, ds->names[i]);
	}
	for (i = 0; i < ds->n; i++)
		if (strcmp(ds->fields[i].path, path.data) == 0)
			return i;
	return -1;
}

static void
doc_container_start(DocScan *ds, char kind)
{
	if (ds->current >= 0)
	{
		ds->fields[ds->current].wrong_type = true;	/* a scalar was wanted */
		ds->current = -1;
	}
	if (ds->depth >= DOC_DEPTH_MAX)
	{
		ds->bad = true;
		return;
	}
	ds->kind[ds->depth] = kind;
	ds->names[ds->depth] = NULL;
	ds->depth++;
}

static BC_JSON_ACTION
doc_object_start(void *state)
{
	doc_container_start((DocScan *) state, 'o');
	BC_JSON_CONTINUE;
}

static BC_JSON_ACTION
doc_array_start(void *state)
{
	doc_container_start((DocScan *) state, 'a');
	BC_JSON_CONTINUE;
}

static BC_JSON_ACTION
doc_container_end(void *state)
{
	DocScan    *ds = (DocScan *) state;

	if (ds->depth > 0)
		ds->depth--;
	BC_JSON_CONTINUE;
}

static BC_JSON_ACTION
doc_field_start(void *state, char *fname, bool isnull)
{
	DocScan    *ds = (DocScan *) state;
	int			i;

	if (ds->depth < 1 || ds->depth > DOC_DEPTH_MAX)
		BC_JSON_CONTINUE;
	ds->names[ds->depth - 1] = fname;
	ds->current = -1;
	/* match with this member as the last path element */
	i = doc_match(ds);
	if (i >= 0)
	{
		if (ds->fields[i].seen)
			ds->bad = true;		/* a duplicate */
		ds->fields[i].seen = true;
		ds->current = i;
	}
	BC_JSON_CONTINUE;
}

static BC_JSON_ACTION
doc_scalar(void *state, char *token, JsonTokenType type)
{
	DocScan    *ds = (DocScan *) state;
	BcDocField *f;

	if (ds->depth == 0)
	{
		ds->bad = true;			/* a bare scalar document */
		BC_JSON_CONTINUE;
	}
	if (ds->current < 0)
		BC_JSON_CONTINUE;
	f = &ds->fields[ds->current];
	ds->current = -1;
	if (f->integer)
	{
		const char *p = token[0] == '-' ? token + 1 : token;
		size_t		digits = strspn(p, "0123456789");

		if (type != JSON_TOKEN_NUMBER || digits == 0 || p[digits] != '\0' || digits > 18)
		{
			f->wrong_type = true;
			BC_JSON_CONTINUE;
		}
	}
	else if (type != JSON_TOKEN_STRING)
	{
		f->wrong_type = true;
		BC_JSON_CONTINUE;
	}
	f->value = pstrdup(token);
	BC_JSON_CONTINUE;
}

/* Read the fields of a signed JSON document; false when it is unreadable. */
bool
bc_doc_fields(const char *data, int len, BcDocField *fields, int n)
{
	DocScan		ds;
	JsonSemAction sem;
	JsonLexContext *lex;
	int			i;

	for (i = 0; i < n; i++)
	{
		fields[i].value = NULL;
		fields[i].seen = false;
		fields[i].wrong_type = false;
	}
	if (len <= 0 || memchr(data, '\0', len) != NULL || !pg_verify_mbstr(PG_UTF8, data, len, true))
		return false;
	memset(&ds, 0, sizeof(ds));
	ds.fields = fields;
	ds.n = n;
	ds.current = -1;
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &ds;
	sem.object_start = doc_object_start;
	sem.object_end = doc_container_end;
	sem.array_start = doc_array_start;
	sem.array_end = doc_container_end;
	sem.object_field_start = doc_field_start;
	sem.scalar = doc_scalar;
	lex = bc_json_lexer((char *) data, len, PG_UTF8);
	/* the root must be an object */
	{
		int			k = 0;

		while (k < len && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r'))
			k++;
		if (k >= len || data[k] != '{')
			return false;
	}
	if (pg_parse_json(lex, &sem) != JSON_SUCCESS || ds.bad)
		return false;
	return true;
}
