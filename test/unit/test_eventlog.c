/*
 * test_eventlog.c: cmocka tests of src/common/eventlog.c on logs written
 * here in the TCG PC Client crypto-agile format and the IMA binary list
 * format: replay values (computed here, step by step, with OpenSSL), and
 * every refusal (truncated at each byte offset, oversized, unknown
 * algorithm, bad SpecID, unknown event type, count overflow, the IMA
 * violation rule, a wrong listed template hash).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>

#include "eventlog.h"

/* ------------------------------------------------------- log builder */

/* A growing byte buffer; bounds[] are the offsets where an event ends. */
typedef struct
{
	unsigned char *b;
	size_t		len,
				cap;
	size_t		bounds[10000];
	size_t		n_bounds;
} buf;

/* Append n bytes to a buffer. */
static void
put(buf *w, const void *p, size_t n)
{
	if (w->len + n > w->cap)
	{
		w->cap = (w->len + n) * 2 + 64;
		w->b = realloc(w->b, w->cap);
		assert_non_null(w->b);
	}
	memcpy(w->b + w->len, p, n);
	w->len += n;
}

/* Append a little-endian u32. */
static void
put32(buf *w, uint32_t v)
{
	unsigned char b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};

	put(w, b, 4);
}

/* Append a little-endian u16. */
static void
put16(buf *w, uint16_t v)
{
	unsigned char b[2] = {v & 0xff, v >> 8};

	put(w, b, 2);
}

/* Record that an event ends here. */
static void
mark(buf *w)
{
	if (w->n_bounds < sizeof(w->bounds) / sizeof(w->bounds[0]))
		w->bounds[w->n_bounds++] = w->len;
}

/* OpenSSL's digest for a TPM algorithm id. */
static const EVP_MD *
md_of(uint16_t alg)
{
	return alg == BC_EVLOG_ALG_SHA1 ? EVP_sha1() : alg == BC_EVLOG_ALG_SHA256 ? EVP_sha256() :
		alg == BC_EVLOG_ALG_SHA384 ? EVP_sha384() : EVP_sha512();
}

/* out = H_alg(a || b). */
static void
h2(uint16_t alg, const void *a, size_t an, const void *b, size_t bn, unsigned char *out)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();

	assert_int_equal(EVP_DigestInit_ex(c, md_of(alg), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(c, a, an), 1);
	assert_int_equal(EVP_DigestUpdate(c, b, bn), 1);
	assert_int_equal(EVP_DigestFinal_ex(c, out, NULL), 1);
	EVP_MD_CTX_free(c);
}

/* The first event: TCG_PCR_EVENT with the SpecID listing algs (sizes given). */
static void
spec_id(buf *w, int n, const uint16_t *algs, const uint16_t *sizes, uint8_t minor,
		uint8_t vinfo_claimed, uint8_t vinfo_real)
{
	buf			d = {0};
	unsigned char zero[20] = {0};

	put(&d, "Spec ID Event03", 16);
	put32(&d, 0);				/* platformClass */
	put(&d, (unsigned char[]) {minor, 2, 0, 2}, 4);	/* minor, major, errata, uintn */
	put32(&d, (uint32_t) n);
	for (int i = 0; i < n; i++)
	{
		put16(&d, algs[i]);
		put16(&d, sizes[i]);
	}
	put(&d, &vinfo_claimed, 1);
	for (int i = 0; i < vinfo_real; i++)
		put(&d, "v", 1);
	put32(w, 0);
	put32(w, BC_EV_NO_ACTION);
	put(w, zero, 20);
	put32(w, (uint32_t) d.len);
	put(w, d.b, d.len);
	mark(w);
	free(d.b);
}

static const uint16_t two_algs[] = {BC_EVLOG_ALG_SHA1, BC_EVLOG_ALG_SHA256};
static const uint16_t two_sizes[] = {20, 32};

/* A good SpecID with sha1 and sha256. */
static void
spec_id_ok(buf *w)
{
	spec_id(w, 2, two_algs, two_sizes, 0, 0, 0);
}

/* A TCG_PCR_EVENT2 with digests H_alg(data) for each of the n algs. */
static void
event2(buf *w, uint32_t pcr, uint32_t type, int n, const uint16_t *algs,
	   const void *data, uint32_t dlen)
{
	unsigned char d[64];

	put32(w, pcr);
	put32(w, type);
	put32(w, (uint32_t) n);
	for (int i = 0; i < n; i++)
	{
		h2(algs[i], data, dlen, "", 0, d);
		put16(w, algs[i]);
		put(w, d, (size_t) EVP_MD_get_size(md_of(algs[i])));
	}
	put32(w, dlen);
	put(w, data, dlen);
	mark(w);
}

/* Parse and expect a refusal with this status and reason. */
static void
expect_refused(const buf *w, int status, const char *why_want)
{
	bc_evlog	log;
	const char *why = NULL;

	assert_int_equal(bc_evlog_parse(w->b, w->len, &log, &why), status);
	assert_string_equal(why, why_want);
	assert_null(log.events);
}

/* ------------------------------------------------------- event log tests */

/* The events of the good log: (pcr, type, data). */
static const struct
{
	uint32_t	pcr,
				type;
	const char *data;
}			good_events[] = {
	{0, BC_EV_NO_ACTION, "StartupLocality\0\3"},
	{0, 0x00000008, "CRTM version 1"},
	{0, 0x80000008, "firmware blob"},
	{7, 0x80000001, "SecureBoot=1"},
	{4, 0x80000003, "shim authenticode"},
	{4, 0x80000003, "grub authenticode"},
	{8, 0x0000000D, "kernel_cmdline: ro quiet"},
	{17, 0x00000005, "drtm"},
	{0, BC_EV_NO_ACTION, "SP800-155 Event"},
	{0, BC_EV_SEPARATOR, "\0\0\0\0"},
	{7, BC_EV_SEPARATOR, "\0\0\0\0"},
};

/* Data lengths of the good events (the locality event is 17 bytes). */
static uint32_t
good_len(size_t i)
{
	return i == 0 ? 17 : good_events[i].type == BC_EV_SEPARATOR ? 4 :
		(uint32_t) strlen(good_events[i].data);
}

/* Write the good log into w. */
static void
good_log(buf *w)
{
	spec_id_ok(w);
	for (size_t i = 0; i < sizeof(good_events) / sizeof(good_events[0]); i++)
		event2(w, good_events[i].pcr, good_events[i].type, 2, two_algs,
			   good_events[i].data, good_len(i));
}

/* Replay of both banks equals the extends done here, locality and DRTM included. */
static void
test_replay_good(void **state)
{
	buf			w = {0};
	bc_evlog	log;
	const char *why = NULL;

	(void) state;
	good_log(&w);
	assert_int_equal(bc_evlog_parse(w.b, w.len, &log, &why), BC_OK);
	assert_int_equal(log.n_events, 1 + sizeof(good_events) / sizeof(good_events[0]));
	assert_int_equal(log.n_algs, 2);
	assert_int_equal(log.startup_locality, 3);
	assert_int_equal(log.events[3].type, 0x80000008);
	assert_int_equal(log.events[3].data_len, strlen("firmware blob"));
	assert_memory_equal(log.events[3].data, "firmware blob", log.events[3].data_len);
	assert_string_equal(bc_evlog_type_name(log.events[5].type), "EV_EFI_BOOT_SERVICES_APPLICATION");

	for (int b = 0; b < 2; b++)
	{
		uint16_t	alg = two_algs[b];
		size_t		sz = two_sizes[b];
		unsigned char want[24][64],
					got[24][64],
					d[64];
		uint32_t	mask = 0;

		memset(want, 0, sizeof(want));
		for (int p = 17; p <= 22; p++)
			memset(want[p], 0xff, sz);
		want[0][sz - 1] = 3;
		for (size_t i = 0; i < sizeof(good_events) / sizeof(good_events[0]); i++)
		{
			if (good_events[i].type == BC_EV_NO_ACTION)
				continue;
			h2(alg, good_events[i].data, good_len(i), "", 0, d);
			h2(alg, want[good_events[i].pcr], sz, d, sz, want[good_events[i].pcr]);
		}
		assert_int_equal(bc_evlog_replay(&log, alg, got, &mask, &why), BC_OK);
		assert_int_equal(mask, (1u << 0) | (1u << 4) | (1u << 7) | (1u << 8) | (1u << 17));
		for (int p = 0; p < 24; p++)
			assert_memory_equal(got[p], want[p], sz);
	}
	/* the good events' digests are H(data); a separator's retyped data is not */
	{
		int			m = -1;

		assert_int_equal(bc_evlog_data_matches(&log.events[10], BC_EVLOG_ALG_SHA256, &m), BC_OK);
		assert_int_equal(m, 1);
		assert_int_equal(bc_evlog_data_matches(&log.events[10], BC_EVLOG_ALG_SHA384, &m), BC_OK);
		assert_int_equal(m, 0);
		log.events[10].data = (const unsigned char *) "\xff\xff\xff\xff";
		assert_int_equal(bc_evlog_data_matches(&log.events[10], BC_EVLOG_ALG_SHA1, &m), BC_OK);
		assert_int_equal(m, 0);
	}
	/* a bank the log does not have */
	{
		unsigned char got[24][64];

		assert_int_equal(bc_evlog_replay(&log, BC_EVLOG_ALG_SHA384, got, NULL, &why), BC_EINVAL);
		assert_string_equal(why, "eventlog-bank-absent");
	}
	bc_evlog_free(&log);
	bc_evlog_free(&log);
	free(w.b);
}

/* A log cut at any byte offset is refused "truncated", unless the cut ends an event. */
static void
test_truncated_everywhere(void **state)
{
	buf			w = {0};
	size_t		next = 0;

	(void) state;
	good_log(&w);
	for (size_t cut = 0; cut < w.len; cut++)
	{
		bc_evlog	log;
		const char *why = NULL;
		int			rc = bc_evlog_parse(w.b, cut, &log, &why);

		while (next < w.n_bounds && w.bounds[next] < cut)
			next++;
		if (next < w.n_bounds && w.bounds[next] == cut)
		{
			assert_int_equal(rc, BC_OK);
			assert_int_equal(log.n_events, next + 1);
			bc_evlog_free(&log);
		}
		else
		{
			assert_int_not_equal(rc, BC_OK);
			assert_string_equal(why, cut == 0 ? "eventlog-empty" : "eventlog-truncated");
		}
	}
	free(w.b);
}

/* Over BC_EVLOG_MAX_BYTES is refused before anything is read. */
static void
test_oversized(void **state)
{
	buf			w = {0};

	(void) state;
	good_log(&w);
	w.b = realloc(w.b, BC_EVLOG_MAX_BYTES + 1);
	assert_non_null(w.b);
	memset(w.b + w.len, 0, BC_EVLOG_MAX_BYTES + 1 - w.len);
	w.len = BC_EVLOG_MAX_BYTES + 1;
	expect_refused(&w, BC_ETOOBIG, "eventlog-too-large");
	free(w.b);
}

/* SM3 in the SpecID, or a digest of an algorithm the table lacks: fatal. */
static void
test_unknown_alg(void **state)
{
	buf			w = {0};
	uint16_t	algs[] = {BC_EVLOG_ALG_SHA256, 0x0012},
				sizes[] = {32, 32};
	uint16_t	sha384[] = {BC_EVLOG_ALG_SHA384};

	(void) state;
	spec_id(&w, 2, algs, sizes, 0, 0, 0);
	expect_refused(&w, BC_EUNSUPPORTED, "eventlog-unknown-alg");
	w.len = 0;
	spec_id_ok(&w);
	event2(&w, 0, BC_EV_SEPARATOR, 1, sha384, "\0\0\0\0", 4);
	expect_refused(&w, BC_EUNSUPPORTED, "eventlog-unknown-alg");
	free(w.b);
}

/* Every way the SpecID event can be wrong. */
static void
test_bad_specid(void **state)
{
	buf			w = {0};
	uint16_t	bad_size[] = {20, 20};
	uint16_t	dup[] = {BC_EVLOG_ALG_SHA256, BC_EVLOG_ALG_SHA256},
				dup_sizes[] = {32, 32};
	uint16_t	five[] = {4, 11, 12, 13, 4},
				five_sizes[] = {20, 32, 48, 64, 20};

	(void) state;
	spec_id(&w, 2, two_algs, two_sizes, 1, 0, 0);	/* version 2.1 */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 2, two_algs, bad_size, 0, 0, 0);	/* sha256 of 20 bytes */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 2, dup, dup_sizes, 0, 0, 0);
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 0, two_algs, two_sizes, 0, 0, 0);
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 5, five, five_sizes, 0, 0, 0);
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 2, two_algs, two_sizes, 0, 3, 2);	/* vendor info short */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 2, two_algs, two_sizes, 0, 1, 2);	/* vendor info long */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.len = 0;
	spec_id(&w, 2, two_algs, two_sizes, 0, 2, 2);	/* right: accepted */
	{
		bc_evlog	log;
		const char *why;

		assert_int_equal(bc_evlog_parse(w.b, w.len, &log, &why), BC_OK);
		bc_evlog_free(&log);
	}
	w.b[32] = 'X';				/* the signature, after the 32-byte TCG_PCR_EVENT header */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.b[32] = 'S';
	w.b[4] = 4;					/* first event EV_SEPARATOR, not EV_NO_ACTION */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	w.b[4] = 3;
	w.b[8] = 1;					/* non-zero digest */
	expect_refused(&w, BC_EINVAL, "eventlog-specid");
	free(w.b);
}

/* EV_UNUSED, an EFI type outside the table: refused; a PCR over 23 too. */
static void
test_unknown_event_type(void **state)
{
	buf			w = {0};

	(void) state;
	spec_id_ok(&w);
	event2(&w, 4, 0x00000002, 2, two_algs, "x", 1);
	expect_refused(&w, BC_EUNSUPPORTED, "eventlog-unknown-event-type");
	w.len = 0;
	spec_id_ok(&w);
	event2(&w, 4, 0x80000099, 2, two_algs, "x", 1);
	expect_refused(&w, BC_EUNSUPPORTED, "eventlog-unknown-event-type");
	w.len = 0;
	spec_id_ok(&w);
	event2(&w, 24, BC_EV_SEPARATOR, 2, two_algs, "x", 1);
	expect_refused(&w, BC_EINVAL, "eventlog-pcr-index");
	free(w.b);
}

/*
 * PFP 1.06's SPDM device events (EDK2 measures them into PCR 7 on machines
 * with SPDM-capable devices): a log carrying them parses and replays.
 */
static void
test_spdm_event_types(void **state)
{
	static const uint32_t types[] = {0x800000E1, 0x800000E2, 0x800000E3, 0x800000E4};
	buf			w = {0};
	bc_evlog	log;
	const char *why = NULL;
	unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST];
	uint32_t	mask = 0;

	(void) state;
	spec_id_ok(&w);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		event2(&w, 7, types[i], 2, two_algs, "spdm", 4);
	assert_int_equal(bc_evlog_parse(w.b, w.len, &log, &why), BC_OK);
	assert_int_equal(log.n_events, 5);
	assert_int_equal(bc_evlog_replay(&log, BC_EVLOG_ALG_SHA256, pcrs, &mask, &why), BC_OK);
	assert_int_equal(mask, 1u << 7);
	bc_evlog_free(&log);
	assert_string_equal(bc_evlog_type_name(0x800000E3), "EV_EFI_SPDM_DEVICE_POLICY");
	assert_string_equal(bc_evlog_type_name(0x800000E4), "EV_EFI_SPDM_DEVICE_AUTHORITY");
	free(w.b);
}

/* Digest counts 0, over the table and 2^32-1; a digest repeated; too many events. */
static void
test_counts(void **state)
{
	buf			w = {0};
	uint32_t	counts[] = {0, 3, 0xffffffffu};
	uint16_t	twice[] = {BC_EVLOG_ALG_SHA1, BC_EVLOG_ALG_SHA1};

	(void) state;
	for (size_t i = 0; i < 3; i++)
	{
		w.len = 0;
		spec_id_ok(&w);
		put32(&w, 0);
		put32(&w, BC_EV_SEPARATOR);
		put32(&w, counts[i]);
		put(&w, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
		expect_refused(&w, BC_EINVAL, "eventlog-digest-count");
	}
	w.len = 0;
	spec_id_ok(&w);
	event2(&w, 0, BC_EV_SEPARATOR, 2, twice, "\0\0\0\0", 4);
	expect_refused(&w, BC_EINVAL, "eventlog-digest-repeated");

	/* a data size of 2^32-1 is a truncation, not a read past the end */
	w.len = 0;
	spec_id_ok(&w);
	put32(&w, 0);
	put32(&w, BC_EV_SEPARATOR);
	put32(&w, 1);
	put16(&w, BC_EVLOG_ALG_SHA1);
	put(&w, "01234567890123456789", 20);
	put32(&w, 0xffffffffu);
	expect_refused(&w, BC_EINVAL, "eventlog-truncated");

	/* BC_EVLOG_MAX_EVENTS events in all are fine; one more is not */
	w.len = 0;
	spec_id_ok(&w);
	for (int i = 1; i < BC_EVLOG_MAX_EVENTS; i++)
		event2(&w, 1, BC_EV_SEPARATOR, 1, two_algs, "", 0);
	{
		bc_evlog	log;
		const char *why;

		assert_int_equal(bc_evlog_parse(w.b, w.len, &log, &why), BC_OK);
		assert_int_equal(log.n_events, BC_EVLOG_MAX_EVENTS);
		bc_evlog_free(&log);
	}
	event2(&w, 1, BC_EV_SEPARATOR, 1, two_algs, "", 0);
	expect_refused(&w, BC_ETOOBIG, "eventlog-too-many-events");
	free(w.b);
}

/* An extended event without the bank's digest: that bank does not replay. */
static void
test_bank_missing(void **state)
{
	buf			w = {0};
	bc_evlog	log;
	const char *why;
	unsigned char pcrs[24][64];

	(void) state;
	spec_id_ok(&w);
	event2(&w, 0, BC_EV_SEPARATOR, 1, two_algs, "\0\0\0\0", 4);	/* sha1 only */
	assert_int_equal(bc_evlog_parse(w.b, w.len, &log, &why), BC_OK);
	assert_int_equal(bc_evlog_replay(&log, BC_EVLOG_ALG_SHA1, pcrs, NULL, &why), BC_OK);
	assert_int_equal(bc_evlog_replay(&log, BC_EVLOG_ALG_SHA256, pcrs, NULL, &why), BC_EINVAL);
	assert_string_equal(why, "eventlog-bank-missing");
	bc_evlog_free(&log);
	free(w.b);
}

/* ------------------------------------------------------------- IMA */

/* Append one IMA entry: template name, d-ng (alg, digest), path, third field. */
static void
ima_entry(buf *w, uint32_t pcr, const char *tmpl, const char *alg, const unsigned char *dig,
		  size_t dlen, const char *path, size_t plen, const char *third, int zero_hash,
		  int bad_hash)
{
	buf			d = {0};
	unsigned char sha1[20];

	put32(&d, (uint32_t) (strlen(alg) + 2 + dlen));
	put(&d, alg, strlen(alg));
	put(&d, ":", 2);			/* ':' and its NUL */
	put(&d, dig, dlen);
	put32(&d, (uint32_t) plen + 1);
	put(&d, path, plen);
	put(&d, "", 1);
	if (third)
	{
		put32(&d, (uint32_t) strlen(third));
		put(&d, third, strlen(third));
	}
	h2(BC_EVLOG_ALG_SHA1, d.b, d.len, "", 0, sha1);
	if (zero_hash)
		memset(sha1, 0, 20);
	if (bad_hash)
		sha1[0] ^= 1;
	put32(w, pcr);
	put(w, sha1, 20);
	put32(w, (uint32_t) strlen(tmpl));
	put(w, tmpl, strlen(tmpl));
	put32(w, (uint32_t) d.len);
	put(w, d.b, d.len);
	mark(w);
	free(d.b);
}

static const unsigned char file_sha256[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

/* boot_aggregate, two files (ima-ng, ima-sig), a buffer (ima-buf), a violation. */
static void
ima_list(buf *w)
{
	ima_entry(w, 10, "ima-ng", "sha256", file_sha256, 32, "boot_aggregate", 14, NULL, 0, 0);
	ima_entry(w, 10, "ima-ng", "sha256", file_sha256, 32, "/usr/bin/bash", 13, NULL, 0, 0);
	ima_entry(w, 10, "ima-sig", "sha1", file_sha256, 20, "/usr/lib/a b.so", 15, "", 0, 0);
	ima_entry(w, 10, "ima-buf", "sha256", file_sha256, 32, "kernel_cmdline", 14, "ro quiet", 0, 0);
	ima_entry(w, 10, "ima-ng", "sha256", file_sha256, 32, "/var/log/open-writers", 21, NULL, 1, 0);
}

/* Replay per bank equals the extends done here; the violation extends 0xff. */
static void
test_ima_replay(void **state)
{
	buf			w = {0};
	bc_ima_entry *e;
	size_t		n;
	const char *why = NULL;

	(void) state;
	ima_list(&w);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_OK);
	assert_int_equal(n, 5);
	assert_string_equal(e[1].path, "/usr/bin/bash");
	assert_int_equal(e[1].path_len, 13);
	assert_string_equal(e[1].file_alg, "sha256");
	assert_int_equal(e[1].file_digest_len, 32);
	assert_memory_equal(e[1].file_digest, file_sha256, 32);
	assert_string_equal(e[2].template_name, "ima-sig");
	assert_string_equal(e[2].path, "/usr/lib/a b.so");
	assert_string_equal(e[3].template_name, "ima-buf");

	for (int b = 0; b < 2; b++)
	{
		uint16_t	alg = two_algs[b];
		size_t		sz = two_sizes[b];
		unsigned char want[5][64],
					run[64] = {0},
					got[64] = {0},
					ff[64],
					th[64];
		long		at = 99;

		memset(ff, 0xff, sizeof(ff));
		for (size_t i = 0; i < n; i++)
		{
			if (i == 4)
				memcpy(th, ff, sz);
			else
				h2(alg, e[i].data, e[i].data_len, "", 0, th);
			h2(alg, run, sz, th, sz, run);
			memcpy(want[i], run, sz);
		}
		assert_int_equal(bc_ima_replay(e, n, alg, got, NULL, &at, &why), BC_OK);
		assert_int_equal(at, -1);
		assert_memory_equal(got, want[4], sz);

		/* a quote that lags by two entries: matched after the third */
		memset(got, 0, sizeof(got));
		assert_int_equal(bc_ima_replay(e, n, alg, got, want[2], &at, &why), BC_OK);
		assert_int_equal(at, 3);
		assert_memory_equal(got, want[2], sz);

		/* a quote of the value before the increment */
		memcpy(got, want[4], sz);
		assert_int_equal(bc_ima_replay(e, 0, alg, got, want[4], &at, &why), BC_OK);
		assert_int_equal(at, 0);

		/* a PCR 10 no prefix reaches */
		memset(got, 0, sizeof(got));
		assert_int_equal(bc_ima_replay(e, n, alg, got, ff, &at, &why), BC_OK);
		assert_int_equal(at, -1);
		assert_memory_equal(got, want[4], sz);
	}
	free(e);
	free(w.b);
}

/* Without the violation rule the list would not replay: all-zero is not H(data). */
static void
test_ima_violation_rule(void **state)
{
	buf			w = {0};
	bc_ima_entry *e;
	size_t		n;
	const char *why;
	unsigned char got[64] = {0},
				want[64] = {0},
				ff[32];

	(void) state;
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/tmp/x", 6, NULL, 1, 0);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_OK);
	memset(ff, 0xff, sizeof(ff));
	h2(BC_EVLOG_ALG_SHA256, want, 32, ff, 32, want);
	assert_int_equal(bc_ima_replay(e, n, BC_EVLOG_ALG_SHA256, got, NULL, NULL, &why), BC_OK);
	assert_memory_equal(got, want, 32);
	free(e);
	free(w.b);
}

/* A listed template hash that is not SHA-1 of the data: BC_EVERIFY. */
static void
test_ima_wrong_hash(void **state)
{
	buf			w = {0};
	bc_ima_entry *e;
	size_t		n;
	const char *why;
	unsigned char got[64] = {0};

	(void) state;
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/usr/bin/ls", 11, NULL, 0, 0);
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/usr/bin/evil", 13, NULL, 0, 1);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_OK);
	assert_int_equal(bc_ima_replay(e, n, BC_EVLOG_ALG_SHA256, got, NULL, NULL, &why), BC_EVERIFY);
	assert_string_equal(why, "ima-template-hash");
	free(e);
	free(w.b);
}

/* Parse refusals of the IMA list: each cut, template, path, digest field, size. */
static void
test_ima_refusals(void **state)
{
	buf			w = {0};
	bc_ima_entry *e;
	size_t		n,
				next = 0;
	const char *why;

	(void) state;
	ima_list(&w);
	for (size_t cut = 0; cut < w.len; cut++)
	{
		int			rc = bc_ima_parse(w.b, cut, &e, &n, &why);

		while (next < w.n_bounds && w.bounds[next] < cut)
			next++;
		if (cut == 0 || (next < w.n_bounds && w.bounds[next] == cut))
		{
			assert_int_equal(rc, BC_OK);
			assert_int_equal(n, cut == 0 ? 0 : next + 1);
			free(e);
		}
		else
		{
			assert_int_not_equal(rc, BC_OK);
			assert_null(e);
		}
	}
	w.len = 0;
	w.n_bounds = 0;
	ima_entry(&w, 10, "ima", "sha1", file_sha256, 20, "/x", 2, NULL, 0, 0);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_EUNSUPPORTED);
	assert_string_equal(why, "ima-template-unsupported");
	w.len = 0;
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/a\0b", 4, NULL, 0, 0);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_EINVAL);
	assert_string_equal(why, "ima-path");
	w.len = 0;
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 20, "/a", 2, NULL, 0, 0);	/* short */
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_EINVAL);
	assert_string_equal(why, "ima-digest-field");
	w.len = 0;
	ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/a", 2, "extra", 0, 0);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_EINVAL);
	assert_string_equal(why, "ima-template-data");
	w.len = 0;
	{
		char	   *longp = malloc(BC_IMA_MAX_PATH + 1);

		memset(longp, 'a', BC_IMA_MAX_PATH + 1);
		ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, longp, BC_IMA_MAX_PATH, NULL, 0, 0);
		assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_OK);
		free(e);
		w.len = 0;
		ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, longp, BC_IMA_MAX_PATH + 1, NULL, 0, 0);
		assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_EINVAL);
		assert_string_equal(why, "ima-path");
		free(longp);
	}
	w.len = 0;
	while (w.len <= BC_IMA_MAX_BYTES)
		ima_entry(&w, 10, "ima-ng", "sha256", file_sha256, 32, "/x", 2, NULL, 0, 0);
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_ETOOBIG);
	assert_string_equal(why, "ima-too-large");
	w.len = 0;
	for (int i = 0; i <= BC_IMA_MAX_ENTRIES; i++)
	{
		ima_entry(&w, 10, "ima-ng", "sha1", file_sha256, 20, "/x", 2, NULL, 0, 0);
		w.n_bounds = 0;
	}
	assert_int_equal(bc_ima_parse(w.b, w.len, &e, &n, &why), BC_ETOOBIG);
	assert_string_equal(why, "ima-too-many-entries");
	free(w.b);
}

/* The name helpers agree with each other. */
static void
test_names(void **state)
{
	(void) state;
	assert_int_equal(bc_evlog_alg_from_name("sha256"), BC_EVLOG_ALG_SHA256);
	assert_string_equal(bc_evlog_alg_name(BC_EVLOG_ALG_SHA384), "sha384");
	assert_int_equal(bc_evlog_alg_size(BC_EVLOG_ALG_SHA512), 64);
	assert_int_equal(bc_evlog_alg_from_name("sm3_256"), 0);
	assert_null(bc_evlog_alg_name(0x0012));
	assert_string_equal(bc_evlog_type_name(0x800000E0), "EV_EFI_VARIABLE_AUTHORITY");
	assert_null(bc_evlog_type_name(2));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replay_good),
		cmocka_unit_test(test_truncated_everywhere),
		cmocka_unit_test(test_oversized),
		cmocka_unit_test(test_unknown_alg),
		cmocka_unit_test(test_bad_specid),
		cmocka_unit_test(test_unknown_event_type),
		cmocka_unit_test(test_spdm_event_types),
		cmocka_unit_test(test_counts),
		cmocka_unit_test(test_bank_missing),
		cmocka_unit_test(test_ima_replay),
		cmocka_unit_test(test_ima_violation_rule),
		cmocka_unit_test(test_ima_wrong_hash),
		cmocka_unit_test(test_ima_refusals),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
