/*
 * eventlog_sql.c: bc_join.replay_event_log(log bytea, ima bytea), the
 * operator's view of a machine's measured-boot event log and IMA list
 * (#44.4): both parsed and replayed by src/common/eventlog.c, as the
 * attestation does, and returned as jsonb (algorithms, replayed PCRs per
 * bank, every event, the IMA entries and PCR 10).  Reads and writes no
 * table.  A malformed log is ERROR 22023 with eventlog.c's reason.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "eventlog.h"

PG_FUNCTION_INFO_V1(bc_replay_event_log_sql);

/* Append n bytes as lower-case hex, in quotes. */
static void
append_hex(StringInfo buf, const unsigned char *p, size_t n)
{
	static const char hx[] = "0123456789abcdef";

	enlargeStringInfo(buf, (int) (2 * n + 2));
	appendStringInfoChar(buf, '"');
	for (size_t i = 0; i < n; i++)
	{
		appendStringInfoChar(buf, hx[p[i] >> 4]);
		appendStringInfoChar(buf, hx[p[i] & 15]);
	}
	appendStringInfoChar(buf, '"');
}

/* ERROR 22023 for a refused log or IMA list (what: "event log" or "IMA list"). */
static void
refuse(const char *what, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s", what),
			 errdetail("The %s was refused: %s.", what, why)));
}

/* The "pcrs" and "events" members of a parsed log. */
static void
append_log(StringInfo buf, const bc_evlog *log)
{
	const char *why = NULL;

	bc_json_key(buf, "algorithms");
	appendStringInfoChar(buf, '[');
	for (int b = 0; b < log->n_algs; b++)
	{
		if (b > 0)
			appendStringInfoChar(buf, ',');
		escape_json(buf, bc_evlog_alg_name(log->algs[b].alg));
	}
	appendStringInfoChar(buf, ']');
	bc_json_member_int(buf, "startupLocality", log->startup_locality);

	bc_json_key(buf, "pcrs");
	bc_json_begin(buf);
	for (int b = 0; b < log->n_algs; b++)
	{
		unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST];
		uint32_t	mask = 0;
		int			rc = bc_evlog_replay(log, log->algs[b].alg, pcrs, &mask, &why);

		CHECK_FOR_INTERRUPTS();
		if (rc != BC_OK)
			refuse("event log", why);
		bc_json_key(buf, bc_evlog_alg_name(log->algs[b].alg));
		bc_json_begin(buf);
		for (int p = 0; p < BC_EVLOG_NUM_PCRS; p++)
		{
			char		idx[4];

			if (!(mask & ((uint32_t) 1 << p)))
				continue;
			snprintf(idx, sizeof(idx), "%d", p);
			bc_json_key(buf, idx);
			append_hex(buf, pcrs[p], log->algs[b].size);
		}
		bc_json_end(buf);
	}
	bc_json_end(buf);

	bc_json_key(buf, "events");
	appendStringInfoChar(buf, '[');
	for (size_t i = 0; i < log->n_events; i++)
	{
		const bc_evlog_event *ev = &log->events[i];

		CHECK_FOR_INTERRUPTS();
		if (i > 0)
			appendStringInfoChar(buf, ',');
		bc_json_begin(buf);
		bc_json_member_int(buf, "index", (int64) i);
		bc_json_member_int(buf, "pcr", ev->pcr);
		bc_json_member_int(buf, "type", ev->type);
		bc_json_member(buf, "typeName", bc_evlog_type_name(ev->type));
		bc_json_key(buf, "digests");
		bc_json_begin(buf);
		for (int d = 0; d < ev->n_digests; d++)
		{
			bc_json_key(buf, bc_evlog_alg_name(ev->digests[d].alg));
			append_hex(buf, ev->digests[d].d, ev->digests[d].size);
		}
		bc_json_end(buf);
		/* every digest H(data): the data is what was measured */
		{
			int			all = ev->n_digests > 0 && i > 0;

			for (int d = 0; d < ev->n_digests && all; d++)
			{
				int			m;

				if (bc_evlog_data_matches(ev, ev->digests[d].alg, &m) != BC_OK)
					elog(ERROR, "digest failed");
				all = m;
			}
			bc_json_member_bool(buf, "dataHashed", all);
		}
		bc_json_member_int(buf, "dataSize", ev->data_len);
		bc_json_key(buf, "data");
		append_hex(buf, ev->data, ev->data_len);
		bc_json_end(buf);
	}
	appendStringInfoChar(buf, ']');
}

/* The "ima" member: entries, PCR 10 per bank, the files measured. */
static void
append_ima(StringInfo buf, const bc_ima_entry *e, size_t n, const uint16_t *banks, int n_banks)
{
	static const unsigned char zero[20];
	const char *why = NULL;
	int64		violations = 0;

	bc_json_key(buf, "ima");
	bc_json_begin(buf);
	bc_json_member_int(buf, "entries", (int64) n);
	bc_json_key(buf, "pcr10");
	bc_json_begin(buf);
	for (int b = 0; b < n_banks; b++)
	{
		unsigned char pcr10[BC_EVLOG_MAX_DIGEST] = {0};
		long		at;

		CHECK_FOR_INTERRUPTS();
		if (bc_ima_replay(e, n, banks[b], pcr10, NULL, &at, &why) != BC_OK)
			refuse("IMA list", why);
		bc_json_key(buf, bc_evlog_alg_name(banks[b]));
		append_hex(buf, pcr10, bc_evlog_alg_size(banks[b]));
	}
	bc_json_end(buf);

	bc_json_key(buf, "files");
	appendStringInfoChar(buf, '[');
	for (size_t i = 0; i < n; i++)
	{
		bool		violation = memcmp(e[i].template_sha1, zero, 20) == 0;

		CHECK_FOR_INTERRUPTS();
		violations += violation;
		if (i > 0)
			appendStringInfoChar(buf, ',');
		bc_json_begin(buf);
		bc_json_member_int(buf, "pcr", e[i].pcr);
		bc_json_member(buf, "template", e[i].template_name);
		/* a path not in the database's encoding is given in hex */
		if (pg_verifymbstr(e[i].path, (int) e[i].path_len, true))
			bc_json_member(buf, "path", e[i].path);
		else
		{
			bc_json_key(buf, "pathHex");
			append_hex(buf, (const unsigned char *) e[i].path, e[i].path_len);
		}
		bc_json_member(buf, "alg", e[i].file_alg);
		bc_json_key(buf, "digest");
		append_hex(buf, e[i].file_digest, e[i].file_digest_len);
		bc_json_key(buf, "templateHash");
		append_hex(buf, e[i].template_sha1, 20);
		if (violation)
			bc_json_member_bool(buf, "violation", true);
		bc_json_end(buf);
	}
	appendStringInfoChar(buf, ']');
	bc_json_member_int(buf, "violations", violations);
	bc_json_end(buf);
}

/*
 * replay_event_log(log bytea, ima bytea DEFAULT NULL): the log (or NULL) and
 * the IMA list (or NULL) parsed and replayed; NULL when both are NULL.
 */
Datum
bc_replay_event_log_sql(PG_FUNCTION_ARGS)
{
	bytea	   *logb = PG_ARGISNULL(0) ? NULL : PG_GETARG_BYTEA_PP(0);
	bytea	   *imab = PG_NARGS() < 2 || PG_ARGISNULL(1) ? NULL : PG_GETARG_BYTEA_PP(1);
	bc_evlog	log;
	bc_ima_entry *entries = NULL;
	size_t		n_entries = 0;
	const char *why = NULL;
	StringInfoData buf;
	uint16_t	banks[BC_EVLOG_MAX_BANKS] = {BC_EVLOG_ALG_SHA1, BC_EVLOG_ALG_SHA256};
	int			n_banks = 2;

	if (logb == NULL && imab == NULL)
		PG_RETURN_NULL();
	memset(&log, 0, sizeof(log));

	/* both parsed first: malloc()ed results, freed whatever happens next */
	if (logb != NULL &&
		bc_evlog_parse((const unsigned char *) VARDATA_ANY(logb), VARSIZE_ANY_EXHDR(logb),
					   &log, &why) != BC_OK)
		refuse("event log", why);
	if (imab != NULL &&
		bc_ima_parse((const unsigned char *) VARDATA_ANY(imab), VARSIZE_ANY_EXHDR(imab),
					 &entries, &n_entries, &why) != BC_OK)
	{
		bc_evlog_free(&log);
		refuse("IMA list", why);
	}

	initStringInfo(&buf);
	PG_TRY();
	{
		bc_json_begin(&buf);
		if (logb != NULL)
		{
			append_log(&buf, &log);
			/* PCR 10 in the banks the firmware used */
			n_banks = log.n_algs;
			for (int b = 0; b < n_banks; b++)
				banks[b] = log.algs[b].alg;
		}
		if (imab != NULL)
			append_ima(&buf, entries, n_entries, banks, n_banks);
		bc_json_end(&buf);
	}
	PG_FINALLY();
	{
		bc_evlog_free(&log);
		free(entries);
	}
	PG_END_TRY();
	PG_RETURN_JSONB_P(bc_jsonb(buf.data));
}
