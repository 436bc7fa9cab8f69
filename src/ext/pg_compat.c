/*
 * pg_compat.c: bc_parse_json (pg_compat.h), pg_parse_json with actions
 * that return nothing, on PostgreSQL 15, 16 and 17.
 */
#include "postgres.h"

#include "common/jsonapi.h"

#include "pg_compat.h"

#if PG_VERSION_NUM >= 160000
/*
 * PostgreSQL 16+: the actions return JsonParseErrorType.  The parser gets
 * these trampolines with sem itself as its state; each calls the scanner's
 * action on the scanner's state and lets the parse go on.
 */
static JsonParseErrorType
tr_object_start(void *s)
{
	((BcJsonSem *) s)->object_start(((BcJsonSem *) s)->semstate);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_object_end(void *s)
{
	((BcJsonSem *) s)->object_end(((BcJsonSem *) s)->semstate);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_array_start(void *s)
{
	((BcJsonSem *) s)->array_start(((BcJsonSem *) s)->semstate);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_array_end(void *s)
{
	((BcJsonSem *) s)->array_end(((BcJsonSem *) s)->semstate);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_object_field_start(void *s, char *fname, bool isnull)
{
	((BcJsonSem *) s)->object_field_start(((BcJsonSem *) s)->semstate, fname, isnull);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_object_field_end(void *s, char *fname, bool isnull)
{
	((BcJsonSem *) s)->object_field_end(((BcJsonSem *) s)->semstate, fname, isnull);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_array_element_start(void *s, bool isnull)
{
	((BcJsonSem *) s)->array_element_start(((BcJsonSem *) s)->semstate, isnull);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_array_element_end(void *s, bool isnull)
{
	((BcJsonSem *) s)->array_element_end(((BcJsonSem *) s)->semstate, isnull);
	return JSON_SUCCESS;
}

static JsonParseErrorType
tr_scalar(void *s, char *token, JsonTokenType tokentype)
{
	((BcJsonSem *) s)->scalar(((BcJsonSem *) s)->semstate, token, tokentype);
	return JSON_SUCCESS;
}
#endif

JsonParseErrorType
bc_parse_json(const char *text, int len, int encoding, BcJsonSem *sem)
{
	JsonSemAction real;
	JsonParseErrorType rc;
#if PG_VERSION_NUM >= 170000
	JsonLexContext lexbuf;
#endif
	JsonLexContext *lex;

	memset(&real, 0, sizeof(real));
#if PG_VERSION_NUM >= 160000
	real.semstate = sem;
	real.object_start = sem->object_start ? tr_object_start : NULL;
	real.object_end = sem->object_end ? tr_object_end : NULL;
	real.array_start = sem->array_start ? tr_array_start : NULL;
	real.array_end = sem->array_end ? tr_array_end : NULL;
	real.object_field_start = sem->object_field_start ? tr_object_field_start : NULL;
	real.object_field_end = sem->object_field_end ? tr_object_field_end : NULL;
	real.array_element_start = sem->array_element_start ? tr_array_element_start : NULL;
	real.array_element_end = sem->array_element_end ? tr_array_element_end : NULL;
	real.scalar = sem->scalar ? tr_scalar : NULL;
#else
	real.semstate = sem->semstate;
	real.object_start = sem->object_start;
	real.object_end = sem->object_end;
	real.array_start = sem->array_start;
	real.array_end = sem->array_end;
	real.object_field_start = sem->object_field_start;
	real.object_field_end = sem->object_field_end;
	real.array_element_start = sem->array_element_start;
	real.array_element_end = sem->array_element_end;
	real.scalar = sem->scalar;
#endif

#if PG_VERSION_NUM >= 170000
	lex = makeJsonLexContextCstringLen(&lexbuf, (char *) text, len, encoding, true);
	rc = pg_parse_json(lex, &real);
	freeJsonLexContext(lex);
#else
	lex = makeJsonLexContextCstringLen((char *) text, len, encoding, true);
	rc = pg_parse_json(lex, &real);
#endif
	return rc;
}
