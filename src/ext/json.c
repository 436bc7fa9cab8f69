/*
 * json.c: the extension's JSON on the ground floor: the RFC 3339 rendering
 * of a timestamp, jsonb from JSON text and a string member read from it, and
 * the writer every answer, event and audit row is built with (an object over
 * a StringInfo, strings escaped by PostgreSQL's escape_json).
 */
#include "bc_join.h"

#include <time.h>

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"

/* RFC 3339 UTC rendering of a timestamp, to the second. */
char *
bc_rfc3339(TimestampTz t)
{
	time_t		secs = (time_t) bc_timestamp_to_unix(t);
	struct tm	tm;
	char		buf[32];

	if (gmtime_r(&secs, &tm) == NULL)
		elog(ERROR, "timestamp out of range");
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return pstrdup(buf);
}

/* jsonb from JSON text. */
Jsonb *
bc_jsonb(const char *text)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

/* The string member name of a jsonb object, copied; NULL when absent or no string. */
char *
bc_jsonb_string(Jsonb *j, const char *name)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&j->root, name, strlen(name), NULL);

	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* Bytes of a string as compact JSON text writes it: quoted, escaped as escape_json does. */
static size_t
escaped_len(const char *s, int len)
{
	size_t		n = 2;
	int			i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t')
			n += 2;
		else if (c < ' ')
			n += 6;				/* \u00XX */
		else
			n += 1;
	}
	return n;
}

/*
 * Whether the JSON text of jb, written compactly (no whitespace; only the
 * escapes JSON requires, as escape_json writes them; numbers as numeric_out
 * does), is over limit bytes: a request's size as the contract counts it
 * ("a request over 64 KiB"), whatever whitespace or needless escapes its
 * sender wrote (jsonb keeps neither).  jsonb's own size bounds it neither
 * way (its headers make small values larger, escapes make the text larger),
 * so the value is walked, stopping as soon as the count passes limit; a
 * jsonb over 8 times limit is over at once (no JSON text is a quarter of its
 * jsonb: a number in an array, the densest case, is 2 bytes of text and 8 of
 * jsonb).
 */
bool
bc_jsonb_text_over(Jsonb *jb, size_t limit)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	size_t		n = 0;
	uint32		tokens = 0;

	if (VARSIZE_ANY_EXHDR(jb) > 8 * limit)
		return true;
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (++tokens % 1024 == 0)
			CHECK_FOR_INTERRUPTS();
		switch (tok)
		{
			case WJB_BEGIN_ARRAY:
				/* brackets and the commas between its elements */
				if (!v.val.array.rawScalar)
					n += 2 + (v.val.array.nElems > 0 ? v.val.array.nElems - 1 : 0);
				break;
			case WJB_BEGIN_OBJECT:
				/* braces, a colon a member, the commas between them */
				n += 2 + v.val.object.nPairs +
					(v.val.object.nPairs > 0 ? v.val.object.nPairs - 1 : 0);
				break;
			case WJB_KEY:
			case WJB_VALUE:
			case WJB_ELEM:
				switch (v.type)
				{
					case jbvString:
						n += escaped_len(v.val.string.val, v.val.string.len);
						break;
					case jbvNumeric:
						{
							char	   *num = DatumGetCString(DirectFunctionCall1(numeric_out,
																				  NumericGetDatum(v.val.numeric)));

							n += strlen(num);
							pfree(num);
						}
						break;
					case jbvBool:
						n += v.val.boolean ? 4 : 5;
						break;
					case jbvNull:
						n += 4;
						break;
					default:
						break;		/* containers come as their own tokens */
				}
				break;
			default:
				break;
		}
		if (n > limit)
			return true;
	}
	return false;
}

/* Open an object: {. */
void
bc_json_begin(StringInfo buf)
{
	appendStringInfoChar(buf, '{');
}

/* Append "name": after a comma, unless it is the object's first member. */
void
bc_json_key(StringInfo buf, const char *name)
{
	if (buf->len > 0 && buf->data[buf->len - 1] != '{')
		appendStringInfoChar(buf, ',');
	escape_json(buf, name);
	appendStringInfoChar(buf, ':');
}

/* Append the member "name":<JSON string, or null when value is NULL>. */
void
bc_json_member(StringInfo buf, const char *name, const char *value)
{
	bc_json_key(buf, name);
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/* Append the member "name":<integer>. */
void
bc_json_member_int(StringInfo buf, const char *name, int64 value)
{
	bc_json_key(buf, name);
	appendStringInfo(buf, INT64_FORMAT, value);
}

/* Append the member "name":true or false. */
void
bc_json_member_bool(StringInfo buf, const char *name, bool value)
{
	bc_json_key(buf, name);
	appendStringInfoString(buf, value ? "true" : "false");
}

/* Append the member "name":<json>, JSON text the caller made. */
void
bc_json_member_raw(StringInfo buf, const char *name, const char *json)
{
	bc_json_key(buf, name);
	appendStringInfoString(buf, json);
}

/* Close an object: }. */
void
bc_json_end(StringInfo buf)
{
	appendStringInfoChar(buf, '}');
}
