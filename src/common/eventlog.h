/*
 * eventlog.h: the measured-boot event log (TCG PC Client Platform Firmware
 * Profile, crypto-agile format) and the Linux IMA binary measurement list:
 * parsed, bounded, and replayed into PCR values per bank.
 *
 * No library owns these formats (tpm2-tss has no public event-log parser and
 * libtss2-mu is the big-endian TPM wire format; both logs are little-endian),
 * so they are parsed here, every length checked before it is read, every
 * count and size bounded, fuzzed (test/fuzz/fuzz_eventlog.c) and checked
 * against tpm2_eventlog (test/tap/eventlog.t).  Digests only through OpenSSL
 * EVP.  No PostgreSQL headers: the extension (bc_join.replay_event_log,
 * bc_join.attest) and host programs share it.
 *
 * Every function returns BC_OK or a negative bc_status and, on failure, sets
 * *why to a static lower-case reason ("eventlog-truncated", "ima-template-hash",
 * ...).  BC_EINVAL: malformed; BC_ETOOBIG: over a bound; BC_EUNSUPPORTED: an
 * algorithm, event type or IMA template not accepted; BC_EVERIFY: well
 * formed, but a check failed (a listed IMA template hash); BC_ENOMEM,
 * BC_ECRYPTO: not the input's doing.
 */
#ifndef BC_EVENTLOG_H
#define BC_EVENTLOG_H

#include <stddef.h>
#include <stdint.h>

#include "bc_common.h"

#define BC_EVLOG_MAX_BYTES   (1024 * 1024)	/* a UEFI log larger is refused */
#define BC_EVLOG_MAX_EVENTS  8192
#define BC_EVLOG_MAX_BANKS   4	/* sha1, sha256, sha384, sha512 */
#define BC_EVLOG_NUM_PCRS    24
#define BC_EVLOG_MAX_DIGEST  64
#define BC_IMA_MAX_BYTES     (4 * 1024 * 1024)	/* one increment of the IMA list */
#define BC_IMA_MAX_ENTRIES   20000
#define BC_IMA_MAX_PATH      4095	/* bytes of a path, without its NUL */

/* TPM_ALG_ID values of the banks accepted. */
#define BC_EVLOG_ALG_SHA1    0x0004
#define BC_EVLOG_ALG_SHA256  0x000B
#define BC_EVLOG_ALG_SHA384  0x000C
#define BC_EVLOG_ALG_SHA512  0x000D

/* Event types used by the code (the full accepted list is in eventlog.c). */
#define BC_EV_NO_ACTION      0x00000003u
#define BC_EV_SEPARATOR      0x00000004u

/* One digest of an event: the bank's algorithm, its size and the bytes. */
typedef struct
{
	uint16_t	alg;
	uint16_t	size;
	unsigned char d[BC_EVLOG_MAX_DIGEST];
} bc_evlog_digest;

/* One TCG_PCR_EVENT2 (or the first TCG_PCR_EVENT, with its SHA-1 digest). */
typedef struct
{
	uint32_t	pcr;
	uint32_t	type;
	int			n_digests;		/* 1..n_algs, each algorithm at most once */
	bc_evlog_digest digests[BC_EVLOG_MAX_BANKS];
	const unsigned char *data;	/* points into the caller's buffer */
	uint32_t	data_len;
} bc_evlog_event;

/* A parsed log.  events[0] is the SpecID event. */
typedef struct
{
	int			n_algs;			/* the SpecID table: 1..BC_EVLOG_MAX_BANKS */
	struct
	{
		uint16_t	alg,
					size;
	}			algs[BC_EVLOG_MAX_BANKS];
	uint8_t		startup_locality;	/* from an EV_NO_ACTION "StartupLocality" event, else 0 */
	size_t		n_events;
	bc_evlog_event *events;		/* malloc()ed; bc_evlog_free() */
} bc_evlog;

/*
 * Parse a crypto-agile log of len bytes (buf must outlive *out: events point
 * into it).  The first event is a TCG_PCR_EVENT on PCR 0, EV_NO_ACTION, zero
 * digest, whose data is the "Spec ID Event03" structure (version 2.0, uintn
 * size 1 or 2, 1..4 algorithms each of sha1/sha256/sha384/sha512 with its
 * right size, vendor info ending the event).  Then TCG_PCR_EVENT2s: PCR < 24,
 * a known event type, digests of algorithms in the SpecID table only (a
 * digest's size is taken from the table), each algorithm once.  Over
 * BC_EVLOG_MAX_BYTES or BC_EVLOG_MAX_EVENTS is BC_ETOOBIG.  On failure *out
 * holds nothing to free.
 */
int			bc_evlog_parse(const unsigned char *buf, size_t len, bc_evlog *out, const char **why);

/*
 * Replay one bank (alg, which must be in the SpecID table) into
 * pcrs[0..23][0..size-1]: PCRs start at zero except PCR 0 (zero with the
 * startup locality as its last byte) and PCRs 17..22 (all 0xff); each event
 * but EV_NO_ACTION extends pcr = H(pcr || digest).  An extended event
 * without a digest of this bank is BC_EINVAL "eventlog-bank-missing".
 * *mask (may be NULL) gets bit i set for each PCR i extended.
 */
int			bc_evlog_replay(const bc_evlog *log, uint16_t alg,
							unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST],
							uint32_t *mask, const char **why);

/*
 * Whether the event's digest of bank alg is H_alg(its data): *matches 1 or 0
 * (0 too when the event has no digest of that bank).  The event type is not
 * covered by any digest, so for the types whose data is the measured thing
 * (EV_SEPARATOR, EV_EFI_ACTION, most EFI variables) a policy can require this;
 * for image loads the digest is the PE's Authenticode hash and never matches.
 * BC_OK, or BC_ECRYPTO.
 */
int			bc_evlog_data_matches(const bc_evlog_event *ev, uint16_t alg, int *matches);

/* Free what bc_evlog_parse allocated (safe on a zeroed or freed log). */
void		bc_evlog_free(bc_evlog *log);

/* "EV_NO_ACTION", ... for an accepted event type, else NULL. */
const char *bc_evlog_type_name(uint32_t type);

/* "sha1", "sha256", "sha384", "sha512" for an accepted algorithm, else NULL. */
const char *bc_evlog_alg_name(uint16_t alg);

/* The algorithm id of one of those names, else 0. */
uint16_t	bc_evlog_alg_from_name(const char *name);

/* The digest size of an accepted algorithm, else 0. */
int			bc_evlog_alg_size(uint16_t alg);

/*
 * IMA binary_runtime_measurements (little-endian: ima_canonical_fmt or an
 * x86 host): per entry pcr u32, template_digest[20] (SHA-1), name_len u32,
 * name, data_len u32, data.  Templates accepted: ima-ng (d-ng|n-ng), ima-sig
 * (d-ng|n-ng|sig), ima-buf (d-ng|n-ng|buf); every field length-prefixed and
 * the template data consumed exactly.  The legacy "ima" template is refused
 * (BC_EUNSUPPORTED "ima-template-unsupported").
 */
typedef struct
{
	uint32_t	pcr;
	unsigned char template_sha1[20];
	char		template_name[16];	/* NUL-terminated */
	char		file_alg[16];	/* from d-ng, NUL-terminated ("sha256") */
	unsigned char file_digest[BC_EVLOG_MAX_DIGEST];
	uint16_t	file_digest_len;
	const char *path;			/* into the caller's buffer: n-ng's bytes, NUL-terminated
								 * there (the NUL is n-ng's last byte, none inside) */
	uint32_t	path_len;		/* without the NUL, <= BC_IMA_MAX_PATH */
	const unsigned char *data;	/* the template data (hashed per bank), into the buffer */
	uint32_t	data_len;
} bc_ima_entry;

/*
 * Parse len bytes (buf must outlive the entries) into *entries (malloc()ed,
 * free() it; NULL when *n is 0).  An empty list is BC_OK with *n 0.
 * Over BC_IMA_MAX_BYTES / BC_IMA_MAX_ENTRIES is BC_ETOOBIG.
 */
int			bc_ima_parse(const unsigned char *buf, size_t len, bc_ima_entry **entries,
						 size_t *n, const char **why);

/*
 * Replay entries e[0..n-1] into pcr10 (in: the running value of bank alg,
 * all zero at boot; out: see below).  For each entry: the listed SHA-1
 * template hash all zero is a violation (open-writers / ToMToU) and extends
 * all 0xff; otherwise it must equal SHA-1(template data) (BC_EVERIFY
 * "ima-template-hash") and pcr10 = H_alg(pcr10 || H_alg(template data)).
 * Entries for another PCR than 10 are checked but not extended.
 *
 * want (may be NULL: no matching; pcr10 is the value after every entry,
 * *match_at -1): the quoted PCR 10.  *match_at is then the smallest k in
 * 0..n such that the value after the first k entries equals want (the quote
 * may lag the list), and pcr10 that value; -1 (and pcr10 the value after
 * every entry) when none does.  Every listed hash is checked in both cases.
 */
int			bc_ima_replay(const bc_ima_entry *e, size_t n, uint16_t alg,
						  unsigned char pcr10[BC_EVLOG_MAX_DIGEST],
						  const unsigned char *want, long *match_at, const char **why);

#endif							/* BC_EVENTLOG_H */
