/*
 * version.c: the library refuses to work on an SQL schema it was not built
 * for.  A new bc_join.so installed beside a database still at an older
 * version (the packages upgraded, ALTER EXTENSION bc_join UPDATE not yet
 * run) would otherwise run its statements against tables and functions of
 * another shape: columns missing, checks the old schema does not make.
 * Every C function that reads or writes the extension's tables connects to
 * SPI through bc_spi_connect(), which checks the installed version once per
 * backend and raises INVALID_CONFIG, naming both versions and the command
 * that fixes it, until they agree.  PostGIS checks its scripts against its
 * library the same way.
 */
#include "bc_join.h"
#include "pg_compat.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#ifndef BC_EXTVERSION
#error "BC_EXTVERSION (the version of bc_join.control) must be defined by the Makefile"
#endif

/* The SQL version this library was built for. */
const char *const bc_library_version = BC_EXTVERSION;

/*
 * The local transaction in which the installed version was last seen to be
 * ours: checked once per transaction (a catalog index lookup), so a DROP and
 * CREATE EXTENSION of another version in a long-lived backend is seen too.
 */
static LocalTransactionId version_checked_in = InvalidLocalTransactionId;

/* The installed version of bc_join in this database, palloc'd, or NULL. */
char *
bc_installed_sql_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("bc_join"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/* Raise INVALID_CONFIG unless the installed SQL version is the library's. */
void
bc_require_sql_version(void)
{
	char	   *installed;

	if (version_checked_in != InvalidLocalTransactionId && version_checked_in == BC_MY_LXID())
		return;
	installed = bc_installed_sql_version();
	if (installed == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join is not installed in this database"),
				 errdetail("INVALID_CONFIG: the library was called without its schema."),
				 errhint("CREATE EXTENSION bc_join;")));
	if (strcmp(installed, bc_library_version) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join's library is version %s but the database has bc_join %s",
						bc_library_version, installed),
				 errdetail("INVALID_CONFIG: the library works only on the schema it was built for; "
						   "nothing was read or written."),
				 errhint("Run ALTER EXTENSION bc_join UPDATE; in this database (docs/operator.md, "
						 "\"Backups, restores and upgrades\").")));
	pfree(installed);
	version_checked_in = BC_MY_LXID();
}

/* SPI_connect, after checking that the schema is the library's. */
void
bc_spi_connect(void)
{
	bc_require_sql_version();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

PG_FUNCTION_INFO_V1(bc_library_version_sql);

/* bc_join.library_version(): the version this library was built for. */
Datum
bc_library_version_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(bc_library_version));
}
