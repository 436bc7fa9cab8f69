/*
 * eventlog.c: parse and replay of the TCG PC Client crypto-agile event log
 * and of the IMA binary measurement list (eventlog.h says why by hand).
 *
 * Both are little-endian and read through one bounded cursor: every read
 * checks the bytes left first, so a short log is "...-truncated" at any
 * offset and never an out-of-bounds read.  Digests only through OpenSSL EVP.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "eventlog.h"

/* A bounded little-endian reader over a caller's buffer. */
typedef struct
{
	const unsigned char *p;
	size_t		left;
} cursor;

/* Read a u32 (little-endian): 0, or -1 when fewer than 4 bytes are left. */
static int
rd_u32(cursor *c, uint32_t *v)
{
	if (c->left < 4)
		return -1;
	*v = (uint32_t) c->p[0] | ((uint32_t) c->p[1] << 8) |
		((uint32_t) c->p[2] << 16) | ((uint32_t) c->p[3] << 24);
	c->p += 4;
	c->left -= 4;
	return 0;
}

/* Read a u16 (little-endian): 0, or -1 when fewer than 2 bytes are left. */
static int
rd_u16(cursor *c, uint16_t *v)
{
	if (c->left < 2)
		return -1;
	*v = (uint16_t) (c->p[0] | (c->p[1] << 8));
	c->p += 2;
	c->left -= 2;
	return 0;
}

/* Point *out at the next n bytes and step over them: 0, or -1 when short. */
static int
rd_bytes(cursor *c, size_t n, const unsigned char **out)
{
	if (c->left < n)
		return -1;
	*out = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

/* ------------------------------------------------------------ tables */

static const struct
{
	uint16_t	alg;
	int			size;
	const char *name;
}			known_algs[] = {
	{BC_EVLOG_ALG_SHA1, 20, "sha1"},
	{BC_EVLOG_ALG_SHA256, 32, "sha256"},
	{BC_EVLOG_ALG_SHA384, 48, "sha384"},
	{BC_EVLOG_ALG_SHA512, 64, "sha512"},
};

/* The event types of the PC Client PFP accepted in a log. */
static const struct
{
	uint32_t	type;
	const char *name;
}			known_types[] = {
	{0x00000000, "EV_PREBOOT_CERT"},
	{0x00000001, "EV_POST_CODE"},
	{0x00000003, "EV_NO_ACTION"},
	{0x00000004, "EV_SEPARATOR"},
	{0x00000005, "EV_ACTION"},
	{0x00000006, "EV_EVENT_TAG"},
	{0x00000007, "EV_S_CRTM_CONTENTS"},
	{0x00000008, "EV_S_CRTM_VERSION"},
	{0x00000009, "EV_CPU_MICROCODE"},
	{0x0000000A, "EV_PLATFORM_CONFIG_FLAGS"},
	{0x0000000B, "EV_TABLE_OF_DEVICES"},
	{0x0000000C, "EV_COMPACT_HASH"},
	{0x0000000D, "EV_IPL"},
	{0x0000000E, "EV_IPL_PARTITION_DATA"},
	{0x0000000F, "EV_NONHOST_CODE"},
	{0x00000010, "EV_NONHOST_CONFIG"},
	{0x00000011, "EV_NONHOST_INFO"},
	{0x00000012, "EV_OMIT_BOOT_DEVICE_EVENTS"},
	{0x80000001, "EV_EFI_VARIABLE_DRIVER_CONFIG"},
	{0x80000002, "EV_EFI_VARIABLE_BOOT"},
	{0x80000003, "EV_EFI_BOOT_SERVICES_APPLICATION"},
	{0x80000004, "EV_EFI_BOOT_SERVICES_DRIVER"},
	{0x80000005, "EV_EFI_RUNTIME_SERVICES_DRIVER"},
	{0x80000006, "EV_EFI_GPT_EVENT"},
	{0x80000007, "EV_EFI_ACTION"},
	{0x80000008, "EV_EFI_PLATFORM_FIRMWARE_BLOB"},
	{0x80000009, "EV_EFI_HANDOFF_TABLES"},
	{0x8000000A, "EV_EFI_PLATFORM_FIRMWARE_BLOB2"},
	{0x8000000B, "EV_EFI_HANDOFF_TABLES2"},
	{0x8000000C, "EV_EFI_VARIABLE_BOOT2"},
	{0x80000010, "EV_EFI_HCRTM_EVENT"},
	{0x800000E0, "EV_EFI_VARIABLE_AUTHORITY"},
	{0x800000E1, "EV_EFI_SPDM_FIRMWARE_BLOB"},
	{0x800000E2, "EV_EFI_SPDM_FIRMWARE_CONFIG"},
	{0x800000E3, "EV_EFI_SPDM_DEVICE_POLICY"},
	{0x800000E4, "EV_EFI_SPDM_DEVICE_AUTHORITY"},
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* The name of an accepted event type, else NULL. */
const char *
bc_evlog_type_name(uint32_t type)
{
	for (size_t i = 0; i < N_ELEMS(known_types); i++)
		if (known_types[i].type == type)
			return known_types[i].name;
	return NULL;
}

/* The name of an accepted algorithm, else NULL. */
const char *
bc_evlog_alg_name(uint16_t alg)
{
	for (size_t i = 0; i < N_ELEMS(known_algs); i++)
		if (known_algs[i].alg == alg)
			return known_algs[i].name;
	return NULL;
}

/* The algorithm id of an accepted algorithm's name, else 0. */
uint16_t
bc_evlog_alg_from_name(const char *name)
{
	if (name == NULL)
		return 0;
	for (size_t i = 0; i < N_ELEMS(known_algs); i++)
		if (strcmp(known_algs[i].name, name) == 0)
			return known_algs[i].alg;
	return 0;
}

/* The digest size of an accepted algorithm, else 0. */
int
bc_evlog_alg_size(uint16_t alg)
{
	for (size_t i = 0; i < N_ELEMS(known_algs); i++)
		if (known_algs[i].alg == alg)
			return known_algs[i].size;
	return 0;
}

/* OpenSSL's digest for an accepted algorithm, else NULL. */
static const EVP_MD *
alg_md(uint16_t alg)
{
	switch (alg)
	{
		case BC_EVLOG_ALG_SHA1:
			return EVP_sha1();
		case BC_EVLOG_ALG_SHA256:
			return EVP_sha256();
		case BC_EVLOG_ALG_SHA384:
			return EVP_sha384();
		case BC_EVLOG_ALG_SHA512:
			return EVP_sha512();
	}
	return NULL;
}

/* out = H_alg(a[0..alen) || b[0..blen)): 0, or -1 when OpenSSL fails. */
static int
digest2(uint16_t alg, const unsigned char *a, size_t alen,
		const unsigned char *b, size_t blen, unsigned char *out)
{
	const EVP_MD *md = alg_md(alg);
	EVP_MD_CTX *ctx;
	int			ok;

	if (md == NULL || (ctx = EVP_MD_CTX_new()) == NULL)
		return -1;
	ok = EVP_DigestInit_ex(ctx, md, NULL) == 1 &&
		EVP_DigestUpdate(ctx, a, alen) == 1 &&
		(blen == 0 || EVP_DigestUpdate(ctx, b, blen) == 1) &&
		EVP_DigestFinal_ex(ctx, out, NULL) == 1;
	EVP_MD_CTX_free(ctx);
	return ok ? 0 : -1;
}

/* ---------------------------------------------------------- event log */

static const char spec_id_sig[16] = "Spec ID Event03";	/* with its NUL */
static const char locality_sig[16] = "StartupLocality";	/* with its NUL */

/* Parse the SpecID event's data into log->algs: BC_OK or a reason. */
static int
parse_spec_id(const unsigned char *data, uint32_t len, bc_evlog *log, const char **why)
{
	cursor		c = {data, len};
	const unsigned char *sig,
			   *ver;
	uint32_t	platform_class,
				n_algs;
	const unsigned char *vinfo;

	if (rd_bytes(&c, 16, &sig) < 0 || memcmp(sig, spec_id_sig, 16) != 0)
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	/* platformClass, then specVersionMinor, Major, specErrata, uintnSize */
	if (rd_u32(&c, &platform_class) < 0 || rd_bytes(&c, 4, &ver) < 0 ||
		rd_u32(&c, &n_algs) < 0)
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	(void) platform_class;
	if (ver[0] != 0 || ver[1] != 2 || (ver[3] != 1 && ver[3] != 2))
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	if (n_algs == 0 || n_algs > BC_EVLOG_MAX_BANKS)
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	log->n_algs = 0;
	for (uint32_t i = 0; i < n_algs; i++)
	{
		uint16_t	alg,
					size;

		if (rd_u16(&c, &alg) < 0 || rd_u16(&c, &size) < 0)
		{
			*why = "eventlog-specid";
			return BC_EINVAL;
		}
		if (bc_evlog_alg_size(alg) == 0)
		{
			*why = "eventlog-unknown-alg";
			return BC_EUNSUPPORTED;
		}
		if (size != bc_evlog_alg_size(alg))
		{
			*why = "eventlog-specid";
			return BC_EINVAL;
		}
		for (int j = 0; j < log->n_algs; j++)
			if (log->algs[j].alg == alg)
			{
				*why = "eventlog-specid";
				return BC_EINVAL;
			}
		log->algs[log->n_algs].alg = alg;
		log->algs[log->n_algs].size = size;
		log->n_algs++;
	}
	/* vendorInfoSize u8 and exactly that many bytes end the event */
	if (rd_bytes(&c, 1, &vinfo) < 0 || c.left != vinfo[0])
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	return BC_OK;
}

/* The size of alg's digest from the log's SpecID table, else 0. */
static int
table_size(const bc_evlog *log, uint16_t alg)
{
	for (int i = 0; i < log->n_algs; i++)
		if (log->algs[i].alg == alg)
			return log->algs[i].size;
	return 0;
}

/* Append ev to log->events, growing the array: BC_OK or a reason. */
static int
push_event(bc_evlog *log, size_t *cap, const bc_evlog_event *ev, const char **why)
{
	if (log->n_events >= BC_EVLOG_MAX_EVENTS)
	{
		*why = "eventlog-too-many-events";
		return BC_ETOOBIG;
	}
	if (log->n_events == *cap)
	{
		size_t		ncap = *cap ? *cap * 2 : 64;
		bc_evlog_event *n;

		if (ncap > BC_EVLOG_MAX_EVENTS)
			ncap = BC_EVLOG_MAX_EVENTS;
		n = realloc(log->events, ncap * sizeof(*n));
		if (n == NULL)
		{
			*why = "out-of-memory";
			return BC_ENOMEM;
		}
		log->events = n;
		*cap = ncap;
	}
	log->events[log->n_events++] = *ev;
	return BC_OK;
}

/* Parse the first event (TCG_PCR_EVENT with the SpecID): BC_OK or a reason. */
static int
parse_first(cursor *c, bc_evlog *log, bc_evlog_event *ev, const char **why)
{
	const unsigned char *digest;
	static const unsigned char zero[20];
	int			rc;

	memset(ev, 0, sizeof(*ev));
	if (rd_u32(c, &ev->pcr) < 0 || rd_u32(c, &ev->type) < 0 ||
		rd_bytes(c, 20, &digest) < 0 || rd_u32(c, &ev->data_len) < 0)
	{
		*why = "eventlog-truncated";
		return BC_EINVAL;
	}
	if (ev->pcr != 0 || ev->type != BC_EV_NO_ACTION || memcmp(digest, zero, 20) != 0)
	{
		*why = "eventlog-specid";
		return BC_EINVAL;
	}
	if (rd_bytes(c, ev->data_len, &ev->data) < 0)
	{
		*why = "eventlog-truncated";
		return BC_EINVAL;
	}
	if ((rc = parse_spec_id(ev->data, ev->data_len, log, why)) != BC_OK)
		return rc;
	ev->n_digests = 1;
	ev->digests[0].alg = BC_EVLOG_ALG_SHA1;
	ev->digests[0].size = 20;
	return BC_OK;
}

/* Parse one TCG_PCR_EVENT2 at c: BC_OK or a reason. */
static int
parse_event2(cursor *c, bc_evlog *log, bc_evlog_event *ev, const char **why)
{
	uint32_t	count;

	memset(ev, 0, sizeof(*ev));
	if (rd_u32(c, &ev->pcr) < 0 || rd_u32(c, &ev->type) < 0 || rd_u32(c, &count) < 0)
	{
		*why = "eventlog-truncated";
		return BC_EINVAL;
	}
	if (ev->pcr >= BC_EVLOG_NUM_PCRS)
	{
		*why = "eventlog-pcr-index";
		return BC_EINVAL;
	}
	if (bc_evlog_type_name(ev->type) == NULL)
	{
		*why = "eventlog-unknown-event-type";
		return BC_EUNSUPPORTED;
	}
	if (count == 0 || count > (uint32_t) log->n_algs)
	{
		*why = "eventlog-digest-count";
		return BC_EINVAL;
	}
	for (uint32_t i = 0; i < count; i++)
	{
		uint16_t	alg;
		int			size;
		const unsigned char *d;

		if (rd_u16(c, &alg) < 0)
		{
			*why = "eventlog-truncated";
			return BC_EINVAL;
		}
		if ((size = table_size(log, alg)) == 0)
		{
			*why = "eventlog-unknown-alg";
			return BC_EUNSUPPORTED;
		}
		for (uint32_t j = 0; j < i; j++)
			if (ev->digests[j].alg == alg)
			{
				*why = "eventlog-digest-repeated";
				return BC_EINVAL;
			}
		if (rd_bytes(c, (size_t) size, &d) < 0)
		{
			*why = "eventlog-truncated";
			return BC_EINVAL;
		}
		ev->digests[i].alg = alg;
		ev->digests[i].size = (uint16_t) size;
		memcpy(ev->digests[i].d, d, (size_t) size);
	}
	ev->n_digests = (int) count;
	if (rd_u32(c, &ev->data_len) < 0 || rd_bytes(c, ev->data_len, &ev->data) < 0)
	{
		*why = "eventlog-truncated";
		return BC_EINVAL;
	}
	/* PFP: "StartupLocality\0" + the locality, on PCR 0 */
	if (ev->type == BC_EV_NO_ACTION && ev->pcr == 0 && ev->data_len == 17 &&
		memcmp(ev->data, locality_sig, 16) == 0)
		log->startup_locality = ev->data[16];
	return BC_OK;
}

/* Parse a crypto-agile event log (see eventlog.h). */
int
bc_evlog_parse(const unsigned char *buf, size_t len, bc_evlog *out, const char **why)
{
	cursor		c = {buf, len};
	size_t		cap = 0;
	bc_evlog_event ev;
	int			rc;

	memset(out, 0, sizeof(*out));
	if (len > BC_EVLOG_MAX_BYTES)
	{
		*why = "eventlog-too-large";
		return BC_ETOOBIG;
	}
	if (buf == NULL || len == 0)
	{
		*why = "eventlog-empty";
		return BC_EINVAL;
	}
	if ((rc = parse_first(&c, out, &ev, why)) != BC_OK ||
		(rc = push_event(out, &cap, &ev, why)) != BC_OK)
		goto fail;
	while (c.left > 0)
	{
		if ((rc = parse_event2(&c, out, &ev, why)) != BC_OK ||
			(rc = push_event(out, &cap, &ev, why)) != BC_OK)
			goto fail;
	}
	return BC_OK;

fail:
	bc_evlog_free(out);
	return rc;
}

/* Replay one bank of a parsed log (see eventlog.h). */
int
bc_evlog_replay(const bc_evlog *log, uint16_t alg,
				unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST],
				uint32_t *mask, const char **why)
{
	int			size = table_size(log, alg);
	uint32_t	m = 0;

	if (size == 0)
	{
		*why = "eventlog-bank-absent";
		return BC_EINVAL;
	}
	for (int i = 0; i < BC_EVLOG_NUM_PCRS; i++)
		memset(pcrs[i], (i >= 17 && i <= 22) ? 0xff : 0, BC_EVLOG_MAX_DIGEST);
	pcrs[0][size - 1] = log->startup_locality;

	/* events[0] is the SpecID (EV_NO_ACTION): never extended */
	for (size_t k = 1; k < log->n_events; k++)
	{
		const bc_evlog_event *ev = &log->events[k];
		const bc_evlog_digest *d = NULL;

		if (ev->type == BC_EV_NO_ACTION)
			continue;
		for (int j = 0; j < ev->n_digests; j++)
			if (ev->digests[j].alg == alg)
				d = &ev->digests[j];
		if (d == NULL)
		{
			*why = "eventlog-bank-missing";
			return BC_EINVAL;
		}
		if (digest2(alg, pcrs[ev->pcr], (size_t) size, d->d, d->size, pcrs[ev->pcr]) < 0)
		{
			*why = "digest-failed";
			return BC_ECRYPTO;
		}
		m |= (uint32_t) 1 << ev->pcr;
	}
	if (mask)
		*mask = m;
	return BC_OK;
}

/* Whether an event's digest of bank alg is H_alg(its data) (see eventlog.h). */
int
bc_evlog_data_matches(const bc_evlog_event *ev, uint16_t alg, int *matches)
{
	unsigned char h[BC_EVLOG_MAX_DIGEST];

	*matches = 0;
	for (int j = 0; j < ev->n_digests; j++)
	{
		if (ev->digests[j].alg != alg)
			continue;
		if (digest2(alg, ev->data, ev->data_len, NULL, 0, h) < 0)
			return BC_ECRYPTO;
		*matches = memcmp(h, ev->digests[j].d, ev->digests[j].size) == 0;
	}
	return BC_OK;
}

/* Free a parsed log's events. */
void
bc_evlog_free(bc_evlog *log)
{
	if (log == NULL)
		return;
	free(log->events);
	log->events = NULL;
	log->n_events = 0;
}

/* ---------------------------------------------------------------- IMA */

/* Read one length-prefixed template field: 0, or -1 when it does not fit. */
static int
rd_field(cursor *c, const unsigned char **f, uint32_t *flen)
{
	if (rd_u32(c, flen) < 0 || rd_bytes(c, *flen, f) < 0)
		return -1;
	return 0;
}

/* Parse an entry's template data (d-ng|n-ng[|sig|buf]) into e: BC_OK or a reason. */
static int
parse_template_data(bc_ima_entry *e, int n_fields, const char **why)
{
	cursor		c = {e->data, e->data_len};
	const unsigned char *f,
			   *colon;
	uint32_t	flen;
	size_t		alen;

	/* d-ng: "<alg>:\0" then the digest */
	if (rd_field(&c, &f, &flen) < 0)
	{
		*why = "ima-template-data";
		return BC_EINVAL;
	}
	colon = memchr(f, ':', flen);
	if (colon == NULL || (alen = (size_t) (colon - f)) == 0 ||
		alen >= sizeof(e->file_alg) || (size_t) flen < alen + 2 || colon[1] != '\0')
	{
		*why = "ima-digest-field";
		return BC_EINVAL;
	}
	for (size_t i = 0; i < alen; i++)
		if (!((f[i] >= 'a' && f[i] <= 'z') || (f[i] >= '0' && f[i] <= '9') || f[i] == '-' || f[i] == '_'))
		{
			*why = "ima-digest-field";
			return BC_EINVAL;
		}
	memcpy(e->file_alg, f, alen);
	e->file_alg[alen] = '\0';
	flen -= (uint32_t) (alen + 2);
	if (flen == 0 || flen > BC_EVLOG_MAX_DIGEST)
	{
		*why = "ima-digest-field";
		return BC_EINVAL;
	}
	{
		uint16_t	a = bc_evlog_alg_from_name(e->file_alg);

		if (a != 0 && (int) flen != bc_evlog_alg_size(a))
		{
			*why = "ima-digest-field";
			return BC_EINVAL;
		}
	}
	memcpy(e->file_digest, colon + 2, flen);
	e->file_digest_len = (uint16_t) flen;

	/* n-ng: the path and its NUL, none inside */
	if (rd_field(&c, &f, &flen) < 0)
	{
		*why = "ima-template-data";
		return BC_EINVAL;
	}
	if (flen == 0 || flen - 1 > BC_IMA_MAX_PATH || f[flen - 1] != '\0' ||
		memchr(f, '\0', flen - 1) != NULL)
	{
		*why = "ima-path";
		return BC_EINVAL;
	}
	e->path = (const char *) f;
	e->path_len = flen - 1;

	/* sig or buf: any bytes, possibly none */
	if (n_fields == 3 && rd_field(&c, &f, &flen) < 0)
	{
		*why = "ima-template-data";
		return BC_EINVAL;
	}
	if (c.left != 0)
	{
		*why = "ima-template-data";
		return BC_EINVAL;
	}
	return BC_OK;
}

/* Parse one binary list entry at c into e: BC_OK or a reason. */
static int
parse_ima_entry(cursor *c, bc_ima_entry *e, const char **why)
{
	const unsigned char *sha1,
			   *name;
	uint32_t	name_len;
	int			n_fields;

	memset(e, 0, sizeof(*e));
	if (rd_u32(c, &e->pcr) < 0 || rd_bytes(c, 20, &sha1) < 0 || rd_u32(c, &name_len) < 0)
	{
		*why = "ima-truncated";
		return BC_EINVAL;
	}
	if (e->pcr >= BC_EVLOG_NUM_PCRS)
	{
		*why = "ima-pcr-index";
		return BC_EINVAL;
	}
	memcpy(e->template_sha1, sha1, 20);
	if (name_len == 0 || name_len >= sizeof(e->template_name))
	{
		*why = "ima-template-name";
		return BC_EINVAL;
	}
	if (rd_bytes(c, name_len, &name) < 0)
	{
		*why = "ima-truncated";
		return BC_EINVAL;
	}
	memcpy(e->template_name, name, name_len);
	e->template_name[name_len] = '\0';
	if (strcmp(e->template_name, "ima-ng") == 0)
		n_fields = 2;
	else if (strcmp(e->template_name, "ima-sig") == 0 ||
			 strcmp(e->template_name, "ima-buf") == 0)
		n_fields = 3;
	else
	{
		/* the legacy "ima" template has no data length: nothing after it can be read */
		*why = "ima-template-unsupported";
		return BC_EUNSUPPORTED;
	}
	if (rd_u32(c, &e->data_len) < 0 || rd_bytes(c, e->data_len, &e->data) < 0)
	{
		*why = "ima-truncated";
		return BC_EINVAL;
	}
	return parse_template_data(e, n_fields, why);
}

/* Parse an IMA binary measurement list (see eventlog.h). */
int
bc_ima_parse(const unsigned char *buf, size_t len, bc_ima_entry **entries,
			 size_t *n, const char **why)
{
	cursor		c = {buf, len};
	bc_ima_entry *arr = NULL;
	size_t		cap = 0,
				cnt = 0;
	int			rc;

	*entries = NULL;
	*n = 0;
	if (len > BC_IMA_MAX_BYTES)
	{
		*why = "ima-too-large";
		return BC_ETOOBIG;
	}
	while (c.left > 0)
	{
		if (cnt >= BC_IMA_MAX_ENTRIES)
		{
			*why = "ima-too-many-entries";
			rc = BC_ETOOBIG;
			goto fail;
		}
		if (cnt == cap)
		{
			size_t		ncap = cap ? cap * 2 : 64;
			bc_ima_entry *na;

			if (ncap > BC_IMA_MAX_ENTRIES)
				ncap = BC_IMA_MAX_ENTRIES;
			na = realloc(arr, ncap * sizeof(*na));
			if (na == NULL)
			{
				*why = "out-of-memory";
				rc = BC_ENOMEM;
				goto fail;
			}
			arr = na;
			cap = ncap;
		}
		if ((rc = parse_ima_entry(&c, &arr[cnt], why)) != BC_OK)
			goto fail;
		cnt++;
	}
	*entries = arr;
	*n = cnt;
	return BC_OK;

fail:
	free(arr);
	return rc;
}

/* Replay IMA entries into PCR 10 of one bank (see eventlog.h). */
int
bc_ima_replay(const bc_ima_entry *e, size_t n, uint16_t alg,
			  unsigned char pcr10[BC_EVLOG_MAX_DIGEST],
			  const unsigned char *want, long *match_at, const char **why)
{
	static const unsigned char zero[20];
	unsigned char ff[BC_EVLOG_MAX_DIGEST];
	unsigned char sha1[20],
				th[BC_EVLOG_MAX_DIGEST],
				matched[BC_EVLOG_MAX_DIGEST];
	int			size = bc_evlog_alg_size(alg);
	long		at = -1;

	if (size == 0)
	{
		*why = "ima-bank-unsupported";
		return BC_EUNSUPPORTED;
	}
	memset(ff, 0xff, sizeof(ff));
	if (want != NULL && memcmp(pcr10, want, (size_t) size) == 0)
	{
		at = 0;
		memcpy(matched, pcr10, (size_t) size);
	}
	for (size_t i = 0; i < n; i++)
	{
		const unsigned char *ext;

		if (memcmp(e[i].template_sha1, zero, 20) == 0)
			ext = ff;			/* a violation: the kernel extends all 0xff */
		else
		{
			if (digest2(BC_EVLOG_ALG_SHA1, e[i].data, e[i].data_len, NULL, 0, sha1) < 0 ||
				digest2(alg, e[i].data, e[i].data_len, NULL, 0, th) < 0)
			{
				*why = "digest-failed";
				return BC_ECRYPTO;
			}
			if (memcmp(sha1, e[i].template_sha1, 20) != 0)
			{
				*why = "ima-template-hash";
				return BC_EVERIFY;
			}
			ext = th;
		}
		if (e[i].pcr != 10)
			continue;
		if (digest2(alg, pcr10, (size_t) size, ext, (size_t) size, pcr10) < 0)
		{
			*why = "digest-failed";
			return BC_ECRYPTO;
		}
		if (want != NULL && at < 0 && memcmp(pcr10, want, (size_t) size) == 0)
		{
			at = (long) i + 1;
			memcpy(matched, pcr10, (size_t) size);
		}
	}
	if (at >= 0)
		memcpy(pcr10, matched, (size_t) size);
	if (match_at)
		*match_at = at;
	return BC_OK;
}
