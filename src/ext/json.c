/*
 * json.c: the extension's JSON on the ground floor: the RFC 3339 rendering
 * of a timestamp, jsonb from JSON text and a string member read from it, and
 * the writer every answer, event and audit row is built with (an object over
 * a StringInfo, strings escaped by PostgreSQL's escape_json).
 */
#include "bc_join.h"

#include <time.h>

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
