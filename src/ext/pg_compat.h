/*
 * pg_compat.h
 *		What differs between the PostgreSQL majors bc_join builds against
 *		(15 and 17), behind PG_VERSION_NUM as pgvector does it.  Code says
 *		what it means through these; nothing else tests the version.
 *
 * src/ext/pg_compat.h
 */
#ifndef BC_PG_COMPAT_H
#define BC_PG_COMPAT_H

#include "postgres.h"

#include "common/jsonapi.h"
#include "storage/proc.h"

/*
 * A JSON semantic action returns JsonParseErrorType from PostgreSQL 16 on
 * (void before).  Declare an action BC_JSON_ACTION and leave it with
 * BC_JSON_CONTINUE: the parse goes on, and the action's own state says
 * what was wrong, on every major alike.
 */
#if PG_VERSION_NUM >= 160000
#define BC_JSON_ACTION JsonParseErrorType
#define BC_JSON_CONTINUE return JSON_SUCCESS
#else
#define BC_JSON_ACTION void
#define BC_JSON_CONTINUE return
#endif

/*
 * A lexer over a counted string, escapes decoded.  PostgreSQL 17 takes the
 * context to fill first (NULL: allocate one) and the length as size_t.
 */
#if PG_VERSION_NUM >= 170000
#define bc_json_lexer(text, len, encoding) \
	makeJsonLexContextCstringLen(NULL, (text), (size_t) (len), (encoding), true)
#else
#define bc_json_lexer(text, len, encoding) \
	makeJsonLexContextCstringLen((text), (int) (len), (encoding), true)
#endif

/*
 * This backend's local transaction id: PostgreSQL 17 keeps it in
 * MyProc->vxid.  Only while MyProc is set.
 */
#if PG_VERSION_NUM >= 170000
#define BC_MY_LXID (MyProc->vxid.lxid)
#else
#define BC_MY_LXID (MyProc->lxid)
#endif

#endif							/* BC_PG_COMPAT_H */
