/*
 * crl.c: bc_join.crl(), the node CA's certificate revocation list.
 *
 * Every revoked certificate the node CA issued (node and session) that has
 * not expired yet, with its revocation date and reason code; thisUpdate is
 * the service clock, nextUpdate bc_join.crl_validity seconds later, the CRL
 * number the service clock's current instant in microseconds since 1970, and
 * above the last number this backend made (RFC 5280 5.2.3: it increases
 * with every CRL issued; thisUpdate has whole seconds only, so a number in
 * seconds gave a CRL fetched just before a revocation and the one fetched
 * just after it the same number; the transaction's clock gave two CRLs made
 * in one transaction, a revocation between them, the same one); signed by
 * the node CA key, which never leaves the server.  bc-gateway serves it at
 * GET /v1/crl.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

static BcPlan revoked = {
	"SELECT serial, floor(extract(epoch FROM revoked_at))::bigint, revocation_reason "
	"FROM bc_join.node_certs WHERE revoked_at IS NOT NULL AND not_after > bc_join.compute_now() "
	"UNION ALL "
	"SELECT serial, floor(extract(epoch FROM revoked_at))::bigint, revocation_reason "
	"FROM bc_join.session_certs WHERE revoked_at IS NOT NULL AND not_after > bc_join.compute_now()",
	0, {InvalidOid}
};

enum
{
	Anum_rev_serial = 1,
	Anum_rev_at,
	Anum_rev_reason
};

/* 16 bytes from 32 lower-case hex digits. */
static void
serial_bytes(const char *hex, unsigned char out[16])
{
	int			i;

	if (!bc_serial_valid(hex))
		elog(ERROR, "stored serial \"%s\" is not 32 hex digits", hex);
	for (i = 0; i < 16; i++)
	{
		char		byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};

		out[i] = (unsigned char) strtoul(byte, NULL, 16);
	}
}

PG_FUNCTION_INFO_V1(bc_crl);

/* bc_join.crl(): the CRL, DER. */
Datum
bc_crl(PG_FUNCTION_ARGS)
{
	const BcKeys *keys;
	bc_crl_entry *entries;
	uint64		n;
	uint64		i;
	TimestampTz at;
	int64		now;
	uint64		number;
	TimestampTz instant;
	static uint64 last_number = 0;
	unsigned char *der = NULL;
	size_t		len = 0;
	int			st;

	bc_require_config();
	keys = bc_keys();
	bc_spi_connect();
	n = bc_spi_exec(&revoked, NULL, NULL, true, 0);
	entries = palloc0(sizeof(bc_crl_entry) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		char	   *reason;

		CHECK_FOR_INTERRUPTS();
		serial_bytes(TextDatumGetCString(bc_spi_row_datum(i, Anum_rev_serial, &isnull)),
					 entries[i].serial);
		entries[i].revoked_at = DatumGetInt64(bc_spi_row_datum(i, Anum_rev_at, &isnull));
		reason = bc_spi_row_text(i, Anum_rev_reason);
		entries[i].reason = bc_crl_reason_code(reason);
	}
	at = bc_now();
	now = bc_timestamp_to_unix(at);
	/* the number: the clock's instant now (not the transaction's start) in microseconds */
	instant = bc_clock_instant();
	number = (uint64) bc_timestamp_to_unix(instant) * USECS_PER_SEC + (uint64) (instant % USECS_PER_SEC);
	if (number <= last_number)
		number = last_number + 1;
	st = bc_crl_build(keys->node_ca, keys->node_ca_key, entries, (size_t) n, now,
					  now + bc_crl_validity, number, &der, &len);
	SPI_finish();
	if (st != BC_OK)
		bc_key_failed("sign the CRL with node-ca.key", keys->node_ca_key, st);
	last_number = number;
	PG_RETURN_BYTEA_P(bc_take_bytea(der, len, false));
}
