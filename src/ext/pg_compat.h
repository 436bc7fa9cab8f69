/*
 * pg_compat.h: PostgreSQL's own JSON parser (common/jsonapi.h) for
 * bc_join's bounded scanners, the same on every supported major
 * (pg_compat.c).  Version-specific code lives there, behind
 * PG_VERSION_NUM, as pgvector does it:
 *
 *   PostgreSQL 16 made the semantic actions return JsonParseErrorType;
 *   PostgreSQL 17 made makeJsonLexContextCstringLen fill a context the
 *   caller passes (and freeJsonLexContext release it).
 *
 * The scanners keep actions that return nothing (they record a fault in
 * their state and the caller checks it after the parse).
 */
#ifndef BC_PG_COMPAT_H
#define BC_PG_COMPAT_H

#include "postgres.h"

#include "common/jsonapi.h"
#include "storage/proc.h"

/* This backend's local transaction id (MyProc must not be NULL). */
#if PG_VERSION_NUM >= 170000
#define BC_MY_LXID() (MyProc->vxid.lxid)
#else
#define BC_MY_LXID() (MyProc->lxid)
#endif

typedef void (*bc_json_struct_action) (void *state);
typedef void (*bc_json_ofield_action) (void *state, char *fname, bool isnull);
typedef void (*bc_json_aelem_action) (void *state, bool isnull);
typedef void (*bc_json_scalar_action) (void *state, char *token, JsonTokenType tokentype);

/* JsonSemAction's members, with actions that return nothing; NULL: none. */
typedef struct BcJsonSem
{
	void	   *semstate;
	bc_json_struct_action object_start;
	bc_json_struct_action object_end;
	bc_json_struct_action array_start;
	bc_json_struct_action array_end;
	bc_json_ofield_action object_field_start;
	bc_json_ofield_action object_field_end;
	bc_json_aelem_action array_element_start;
	bc_json_aelem_action array_element_end;
	bc_json_scalar_action scalar;
} BcJsonSem;

/* pg_parse_json over text[0..len) in encoding, with sem's actions; its result. */
JsonParseErrorType bc_parse_json(const char *text, int len, int encoding, BcJsonSem *sem);

#endif							/* BC_PG_COMPAT_H */
