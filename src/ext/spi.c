/*
 * spi.c: statements prepared once per backend and kept (SPI_keepplan), so a
 * join does not plan its SQL again on every call.  The plan cache
 * revalidates kept plans after DDL.
 */
#include "bc_join.h"

#include "utils/builtins.h"

/* Execute a kept plan, preparing it on first use; returns SPI_processed. */
uint64
bc_spi_exec(BcPlan *p, Datum *values, const char *nulls, bool read_only, long count)
{
	int			rc;

	if (p->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(p->sql, p->nargs, p->argtypes);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 p->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		p->plan = plan;
	}
	rc = SPI_execute_plan(p->plan, values, nulls, read_only, count);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 p->sql, SPI_result_code_string(rc));
	return SPI_processed;
}

/* Column col (1-based) of row 0 as a C string in the caller's context, or NULL. */
char *
bc_spi_text(int col)
{
	bool		isnull;
	Datum		d;

	if (SPI_processed < 1)
		return NULL;
	if (SPI_tuptable == NULL)
		elog(ERROR, "the last SPI statement returned no rows to read");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);
	if (isnull)
		return NULL;
	return TextDatumGetCString(d);
}

/* Column col (1-based) of row 0 as a Datum (valid until SPI_finish). */
Datum
bc_spi_datum(int col, bool *isnull)
{
	if (SPI_processed < 1)
	{
		*isnull = true;
		return (Datum) 0;
	}
	if (SPI_tuptable == NULL)
		elog(ERROR, "the last SPI statement returned no rows to read");
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, isnull);
}

/* Column col (1-based) of row `row` of the last result as a Datum (valid until SPI_finish). */
Datum
bc_spi_row_datum(uint64 row, int col, bool *isnull)
{
	if (row >= SPI_processed)
	{
		*isnull = true;
		return (Datum) 0;
	}
	if (SPI_tuptable == NULL)
		elog(ERROR, "the last SPI statement returned no rows to read");
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * Column col of row `row` of the last result in its text form (SPI_getvalue:
 * palloc()ed in the current context), NULL when NULL or past the last row.
 */
char *
bc_spi_row_text(uint64 row, int col)
{
	if (row >= SPI_processed)
		return NULL;
	if (SPI_tuptable == NULL)
		elog(ERROR, "the last SPI statement returned no rows to read");
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/* A new bytea holding data[0..n), in the current memory context. */
bytea *
bc_bytea(const void *data, size_t n)
{
	bytea	   *b = palloc(VARHDRSZ + n);

	SET_VARSIZE(b, VARHDRSZ + n);
	memcpy(VARDATA(b), data, n);
	return b;
}

/* Column col of row 0, which the query guarantees is not NULL; elog otherwise. */
static Datum
spi_required(int col)
{
	bool		isnull;
	Datum		d = bc_spi_datum(col, &isnull);

	if (isnull)
		elog(ERROR, "column %d of the last SPI result is unexpectedly NULL", col);
	return d;
}

/* A text column that is never NULL, as a C string. */
char *
bc_spi_text_req(int col)
{
	return TextDatumGetCString(spi_required(col));
}

/* A boolean column that is never NULL. */
bool
bc_spi_bool(int col)
{
	return DatumGetBool(spi_required(col));
}

/* An integer column that is never NULL. */
int32
bc_spi_int4(int col)
{
	return DatumGetInt32(spi_required(col));
}

/* A bigint column that is never NULL. */
int64
bc_spi_int8(int col)
{
	return DatumGetInt64(spi_required(col));
}

/* A bytea column that is never NULL, copied out of SPI's memory. */
bytea *
bc_spi_bytea_copy(int col)
{
	return DatumGetByteaPCopy(spi_required(col));
}

/*
 * The function a registered callback names (row 0: its OID from
 * to_regprocedure in column 1, its text in column 2), or INVALID_CONFIG
 * when it no longer exists (dropped since it was registered).
 */
Oid
bc_spi_callback_oid(const char *what)
{
	enum
	{
		Anum_cb_oid = 1,
		Anum_cb_text
	};
	bool		isnull;
	Datum		d = bc_spi_datum(Anum_cb_oid, &isnull);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the registered %s %s does not exist", what,
						bc_spi_text(Anum_cb_text) ? bc_spi_text(Anum_cb_text) : "(unknown)"),
				 errdetail("INVALID_CONFIG: the function was dropped or renamed after it was registered."),
				 errhint("Register it again, or remove the registration.")));
	return DatumGetObjectId(d);
}
