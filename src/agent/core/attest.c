/*
 * attest.c: continuous attestation of a TPM-bound node (attest.h; issue
 * 44; docs/agent.md, "Continuous attestation"; the wire in docs/protocol.md).
 *
 * Every interval (the service's "intervalSeconds" / "nextSeconds", 60 s
 * until it says), on its own thread with its own HTTPS client:
 *
 *   round 1  {"proof": JWS by the node key over {purpose "attest", serial,
 *            iat}} -> a signed challenge: nonce, sealed state, the PCRs and
 *            bank to quote, the IMA offset the service holds, the interval;
 *   quote    by the producer (tpm: TPM2_Quote by the AK, loaded from its
 *            blobs, with extraData SHA-256("bc_join/attest" || nonce),
 *            the PCRs read so that the quote's digest is theirs);
 *   logs     the UEFI event log whole (at most 1 MiB) and the IMA binary
 *            list from the offset (whole entries, at most 4 MiB), both read
 *            after the quote (the list may be ahead of the quote, never
 *            behind it: the service replays up to where PCR 10 matches);
 *   round 2  {"proof" (a new one), "state", "akPub", "quote",
 *            "quoteSignature", "pcrValues", "eventLog"?, "ima"?} -> signed
 *            "attested" or "quarantined", with "nextSeconds".
 *
 * Every answer is verified as every node-proven answer is (proof.c:
 * signed by the pinned signing key, purpose "attest", this node).  On
 * "quarantined" the provisioner is told (its clients refuse, the Workload
 * API ends its streams of secrets) and the loop goes on at the interval so
 * that an operator can readmit the node; "attested" again lifts it.  A
 * refusal proves nothing about the machine (bad proof, stale state): the
 * state stays as it was, and the next round comes at the interval.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/attest.h"
#include "core/attest_rules.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/ticker.h"

/* Bound of the challenge's members we take: the sealed state, the nonce. */
#define STATE_MAX 4096
#define NONCE_MIN 16
#define NONCE_MAX 64
/* The largest IMA offset we skip to (entries). */
#define IMA_OFFSET_MAX 100000000L
/* Bytes read from the IMA list at once while skipping and collecting. */
#define IMA_WINDOW (BC_ATTEST_IMA_MAX + 64 * 1024)
/* A join again is asked for at most this often, seconds (each refused one is an event). */
#define REJOIN_AGAIN_S 300

struct bcd_attest
{
	const bcd_run_opts *o;
	const bcd_service_keys *keys;
	bcd_provisioner *prov;
	bcd_http   *http;
	const char *event_log;
	const char *ima_log;
	bcd_ticker	ticker;			/* the thread: attest_round at the interval */
	atomic_int	rejoin;			/* quarantined and round 1 refused: join again (daemon.c) */
	time_t		rejoin_asked;	/* when it was last asked for */
	/* the thread's own */
	bcd_attest_state state;
	long		interval;
	bcd_said	said;			/* the last line said */
	int			event_log_said;	/* absence of the event log logged */
	int			ima_said;		/* absence of the IMA list logged */
	int			soon;			/* a local failure: again after BC_ATTEST_INTERVAL_MIN */
};

/* Log a line "attest: ...", unless it is the one said last (bcd_vlog_again). */
static void
say(bcd_attest *at, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
say(bcd_attest *at, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	bcd_vlog_again(&at->said, "attest", fmt, ap);
	va_end(ap);
}

/* 1 when the node attests: a producer that quotes, --no-attest not given. */
int
bcd_attest_wanted(const bcd_run_opts *o)
{
	return !o->no_attest && !o->once && !o->memory_only && o->producer != NULL &&
		o->producer->quote != NULL;
}

/* Set doc[name] to base64url of n bytes; 0 on success. */
static int
set_b64(json_t *doc, const char *name, const unsigned char *data, size_t n)
{
	char	   *b64 = bc_b64url_encode_alloc(data, n);
	int			rc = b64 == NULL || json_object_set_new(doc, name, json_string(b64)) != 0;

	free(b64);
	return rc ? -1 : 0;
}

/* {"proof": a new JWS by the node key over {purpose "attest", serial, iat}} plus doc's members. */
static char *
proven_body(const bcd_credential *cred, json_t *doc)
{
	char	   *proof = bcd_node_proof(cred, BC_PURPOSE_ATTEST, NULL);
	char	   *body = NULL;

	if (proof != NULL && json_object_set_new(doc, "proof", json_string(proof)) == 0)
		body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	free(proof);
	return body;
}

/* The members of the challenge round 2 needs. */
typedef struct challenge
{
	unsigned char nonce[NONCE_MAX];
	size_t		nonce_len;
	const char *state;			/* into the payload */
	uint16_t	bank;
	uint32_t	pcrs;
	long		ima_offset;
} challenge;

/* Take the signed challenge's members: 0, or -1 with why. */
static int
take_challenge(json_t *payload, challenge *c, const char **why)
{
	const char *nonce = bcd_json_str(payload, "nonce", NULL);
	const json_t *off = json_object_get(payload, "imaOffset");

	memset(c, 0, sizeof(*c));
	c->state = bcd_json_str(payload, "state", NULL);
	if (nonce == NULL || strlen(nonce) > 2 * NONCE_MAX ||
		bc_b64url_decode(nonce, strlen(nonce), c->nonce, sizeof(c->nonce), &c->nonce_len) != BC_OK ||
		c->nonce_len < NONCE_MIN)
	{
		*why = "the challenge has no nonce of 16 to 64 bytes";
		return -1;
	}
	if (c->state == NULL || strlen(c->state) > STATE_MAX)
	{
		*why = "the challenge has no state";
		return -1;
	}
	if (bcd_attest_selection(json_object_get(payload, "pcrs"),
							 bcd_json_str(payload, "bank", NULL), &c->bank, &c->pcrs, why) != 0)
		return -1;
	if (off != NULL && (!json_is_integer(off) || json_integer_value(off) < 0 ||
						json_integer_value(off) > IMA_OFFSET_MAX))
	{
		*why = "the challenge's imaOffset is not a whole number of entries";
		return -1;
	}
	c->ima_offset = off != NULL ? (long) json_integer_value(off) : 0;
	return 0;
}

/* "pcrValues": {"<bank>": {"<pcr>": "<hex>", ...}} of the quote's PCRs. */
static json_t *
pcr_values(const challenge *c, const bcd_quote *q)
{
	json_t	   *bank = json_object();
	json_t	   *all = json_object();

	if (bank == NULL || all == NULL)
		goto fail;
	for (int i = 0; i < 24; i++)
		if (c->pcrs & (1u << i))
		{
			char		hex[2 * 64 + 1];
			char		key[4];

			for (size_t k = 0; k < q->digest_len; k++)
			{
				hex[2 * k] = BC_HEX_LOWER[q->values[i][k] >> 4];
				hex[2 * k + 1] = BC_HEX_LOWER[q->values[i][k] & 0xf];
			}
			hex[2 * q->digest_len] = '\0';
			snprintf(key, sizeof(key), "%d", i);
			if (json_object_set_new(bank, key, json_string(hex)) != 0)
				goto fail;
		}
	if (json_object_set_new(all, bcd_attest_bank_name(c->bank), bank) != 0)
	{
		bank = NULL;
		goto fail;
	}
	return all;
fail:
	json_decref(bank);
	json_decref(all);
	return NULL;
}

/* doc["eventLog"] = the whole UEFI event log, when there is one we may read (bounded). */
static int
add_event_log(bcd_attest *at, json_t *doc)
{
	char	   *buf = NULL;
	size_t		len = 0;
	int			rc;

	if (access(at->event_log, R_OK) != 0)
	{
		if (!at->event_log_said)
			bcd_log("attest: no event log sent: %s: %s", at->event_log, strerror(errno));
		at->event_log_said = 1;
		return 0;
	}
	rc = bcd_read_file(at->event_log, BC_ATTEST_EVENT_LOG_MAX, &buf, &len);
	if (rc == BC_ETOOBIG)
	{
		say(at, "the event log %s is over %d bytes: not sent (the service cannot replay it)",
			at->event_log, BC_ATTEST_EVENT_LOG_MAX);
		return 0;
	}
	if (rc != BC_OK)
	{
		say(at, "cannot read the event log %s: not sent", at->event_log);
		return 0;
	}
	at->event_log_said = 0;
	rc = len > 0 ? set_b64(doc, "eventLog", (const unsigned char *) buf, len) : 0;
	free(buf);
	return rc;
}

/* Read into buf (have bytes of cap) what fits; *eof at its end.  0, or -1 on an error. */
static int
fill(int fd, unsigned char *buf, size_t cap, size_t *have, int *eof)
{
	while (!*eof && *have < cap)
	{
		ssize_t		n = read(fd, buf + *have, cap - *have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			*eof = 1;
		*have += (size_t) n;
	}
	return 0;
}

/*
 * The IMA binary list from entry *offset: its whole entries, at most
 * BC_ATTEST_IMA_MAX bytes, into a malloc()ed *out of *len bytes.  A list
 * shorter than *offset (the host booted again) is sent from 0 (*offset
 * set to 0).  0, or 1 when there is no list to send (absent, unreadable or
 * malformed: logged), -1 when out of memory.
 */
static int
read_ima(bcd_attest *at, long *offset, unsigned char **out, size_t *len)
{
	unsigned char *buf = NULL;
	size_t		have = 0;
	size_t		used = 0;
	long		skipped = 0;
	long		n;
	int			eof = 0;
	int			fd;
	int			rc = -1;

	*out = NULL;
	*len = 0;
	fd = open(at->ima_log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
	{
		if (!at->ima_said)
			bcd_log("attest: no IMA list sent: %s: %s", at->ima_log, strerror(errno));
		at->ima_said = 1;
		return 1;
	}
	at->ima_said = 0;
	buf = malloc(IMA_WINDOW);
	if (buf == NULL)
		goto out;
	/* skip the entries the service has */
	while (skipped < *offset)
	{
		if (fill(fd, buf, IMA_WINDOW, &have, &eof) != 0)
			goto io;
		n = bcd_ima_whole_entries(buf, have, *offset - skipped, IMA_WINDOW, &used);
		if (n < 0)
			goto malformed;
		skipped += n;
		memmove(buf, buf + used, have - used);
		have -= used;
		if (n == 0 && (eof || have == IMA_WINDOW))
			break;
	}
	if (skipped < *offset)
	{
		if (!eof)
			goto malformed;
		/* shorter than the service's offset: a new boot's list, sent from its start */
		say(at, "the IMA list has %ld entries, fewer than the service's offset %ld: sent "
			"from its start (a new boot)", skipped, *offset);
		*offset = 0;
		have = 0;
		eof = 0;
		if (lseek(fd, 0, SEEK_SET) != 0)
			goto io;
	}
	if (fill(fd, buf, IMA_WINDOW, &have, &eof) != 0)
		goto io;
	n = bcd_ima_whole_entries(buf, have, BC_ATTEST_IMA_MAX_ENTRIES, BC_ATTEST_IMA_MAX, &used);
	if (n < 0)
		goto malformed;
	if (used < have || !eof)
		say(at, "the IMA list grew by over %d entries or %d bytes since the last accepted "
			"quote: its first %ld new entries sent", BC_ATTEST_IMA_MAX_ENTRIES,
			BC_ATTEST_IMA_MAX, n);
	*out = buf;
	*len = used;
	buf = NULL;
	rc = 0;
	goto out;
io:
	say(at, "cannot read the IMA list %s: %s; not sent", at->ima_log, strerror(errno));
	rc = 1;
	goto out;
malformed:
	say(at, "the IMA list %s is not a binary measurement list bcd can read: not sent",
		at->ima_log);
	rc = 1;
out:
	free(buf);
	close(fd);
	return rc;
}

/* doc["ima"] = {"offset", "entries"} when there is a list. */
static int
add_ima(bcd_attest *at, json_t *doc, long offset)
{
	unsigned char *buf = NULL;
	size_t		len = 0;
	json_t	   *ima;
	int			rc;

	rc = read_ima(at, &offset, &buf, &len);
	if (rc != 0)
		return rc > 0 ? 0 : -1;
	ima = json_pack("{s:I}", "offset", (json_int_t) offset);
	rc = ima == NULL || set_b64(ima, "entries", buf, len) != 0 ||
		json_object_set_new(doc, "ima", ima) != 0 ? -1 : 0;
	if (rc != 0)
		json_decref(ima);
	free(buf);
	return rc;
}

/*
 * Round 2's body: the quote of the challenge's PCRs, the logs, the state,
 * a new proof.  NULL (logged) when the quote or the body cannot be made.
 */
static char *
round2_body(bcd_attest *at, const bcd_credential *cred, const challenge *c)
{
	static const char label[] = BC_ATTEST_QUOTE_LABEL;
	unsigned char in[sizeof(label) - 1 + NONCE_MAX];
	unsigned char extra[BC_SHA256_LEN];
	bcd_quote  *q = calloc(1, sizeof(*q));
	json_t	   *doc = NULL;
	json_t	   *pv = NULL;
	char		err[512];
	char	   *body = NULL;

	if (q == NULL)
		return NULL;
	memcpy(in, label, sizeof(label) - 1);
	memcpy(in + sizeof(label) - 1, c->nonce, c->nonce_len);
	if (bc_sha256(in, sizeof(label) - 1 + c->nonce_len, extra) != BC_OK)
		goto out;
	if (at->o->producer->quote(c->bank, c->pcrs, extra, sizeof(extra), q, err,
							   sizeof(err)) != BC_OK)
	{
		say(at, "no quote: %s", err);
		goto out;
	}
	doc = json_pack("{s:s}", "state", c->state);
	pv = pcr_values(c, q);
	if (doc == NULL || pv == NULL ||
		set_b64(doc, "akPub", q->ak_pub, q->ak_pub_len) != 0 ||
		set_b64(doc, "quote", q->attest, q->attest_len) != 0 ||
		set_b64(doc, "quoteSignature", q->sig, q->sig_len) != 0 ||
		json_object_set_new(doc, "pcrValues", pv) != 0)
	{
		pv = NULL;
		goto oom;
	}
	pv = NULL;
	if (add_event_log(at, doc) != 0 || add_ima(at, doc, c->ima_offset) != 0)
		goto oom;
	body = proven_body(cred, doc);
	if (body == NULL)
		goto oom;
	goto out;
oom:
	say(at, "cannot make the second round's request (out of memory?)");
out:
	json_decref(pv);
	json_decref(doc);
	bcd_quote_free(q);
	free(q);
	return body;
}

/* What an answer to round 2 does: the state, the interval, the provisioner told, logged. */
static void
take_verdict(bcd_attest *at, bcd_rc rc, json_t *payload, const char *err)
{
	const char *status = bcd_json_str(payload, "status", NULL);
	bcd_attest_state was = at->state;

	at->state = bcd_attest_decide(at->state, rc, status);
	if (payload != NULL)
		at->interval = bcd_attest_interval(json_object_get(payload, "nextSeconds"), at->interval);
	if (rc == BCD_RC_REFUSED)
		say(at, "the service refused the quote without judging the machine (the reason is in "
			"bc_join.events, security.join.refused); next in %ld s", at->interval);
	else if (rc != BCD_RC_OK)
		say(at, "round 2: %s; next in %ld s", err, at->interval);
	if (at->state == BCD_ATTEST_QUARANTINED)
	{
		bcd_provisioner_quarantine(at->prov, 1);
		if (was != BCD_ATTEST_QUARANTINED)
			bcd_log("attest: QUARANTINED: the service refused this node's measurements%s%s "
					"(the PCR, event or file that failed is in bc_join.events, "
					"node.quarantined), revoked its certificates; bcd refuses every session "
					"credential and JWT-SVID and ends its Workload API streams; it attests "
					"again every %ld s so that an operator can readmit the node",
					bcd_json_str(payload, "reason", NULL) ? ": " : "",
					bcd_json_str(payload, "reason", ""), at->interval);
		else
			say(at, "still quarantined; next in %ld s", at->interval);
	}
	else if (at->state == BCD_ATTEST_HEALTHY && rc == BCD_RC_OK)
	{
		if (was == BCD_ATTEST_QUARANTINED)
		{
			bcd_provisioner_quarantine(at->prov, 0);
			bcd_log("attest: attested again: the node is no longer quarantined (readmitted "
					"by an operator)");
			/* the next quarantine is another: its readmission is taken at once */
			at->rejoin_asked = 0;
		}
		else if (was != BCD_ATTEST_HEALTHY)
			bcd_log("attest: attested (next in %ld s)", at->interval);
		at->said.line[0] = '\0';
	}
}

/* One attestation: both rounds with cred. */
static void
attest_once(bcd_attest *at, const bcd_credential *cred)
{
	static const char *const first[] = {BC_STATUS_CHALLENGE, NULL};
	static const char *const second[] = {BC_STATUS_ATTESTED, BC_STATUS_QUARANTINED, NULL};
	json_t	   *doc = json_object();
	json_t	   *payload = NULL;
	json_t	   *verdict = NULL;
	char	   *body = NULL;
	char		err[512] = "";
	const char *why = NULL;
	challenge	c;
	bcd_rc		rc;

	body = doc != NULL ? proven_body(cred, doc) : NULL;
	if (body == NULL)
	{
		say(at, "cannot make the first round's proof; again in %d s", BC_ATTEST_INTERVAL_MIN);
		at->soon = 1;
		goto out;
	}
	payload = bcd_node_exchange_status(at->http, at->keys, cred, BC_PATH_ATTEST, body,
									   BC_PURPOSE_ATTEST, first, &rc, err, sizeof(err));
	if (rc == BCD_RC_STOPPED)
		goto out;
	if (rc == BCD_RC_REFUSED && at->state == BCD_ATTEST_QUARANTINED)
	{
		/*
		 * A quarantined node attests with the certificate its quarantine
		 * revoked; once an operator readmitted it, that certificate proves
		 * nothing any more: the node joins again by its attestor.
		 */
		if (at->rejoin_asked == 0 || time(NULL) - at->rejoin_asked >= REJOIN_AGAIN_S)
		{
			say(at, "the service no longer takes the quarantined certificate (readmitted, "
				"or retired): joining again");
			at->rejoin_asked = time(NULL);
			atomic_store(&at->rejoin, 1);
		}
		goto out;
	}
	if (rc == BCD_RC_REFUSED)
	{
		say(at, "the service refused round 1 (the reason is in bc_join.events, "
			"security.join.refused); next in %ld s", at->interval);
		goto out;
	}
	if (payload == NULL)
	{
		say(at, "round 1: %s; next in %ld s", err, at->interval);
		goto out;
	}
	at->interval = bcd_attest_interval(json_object_get(payload, "intervalSeconds"), at->interval);
	if (take_challenge(payload, &c, &why) != 0)
	{
		say(at, "%s; ignored", why);
		goto out;
	}
	free(body);
	body = round2_body(at, cred, &c);
	if (body == NULL)
		goto out;
	verdict = bcd_node_exchange_status(at->http, at->keys, cred, BC_PATH_ATTEST, body,
									   BC_PURPOSE_ATTEST, second, &rc, err, sizeof(err));
	if (rc == BCD_RC_STOPPED)
		goto out;
	if (verdict != NULL && json_is_string(json_object_get(verdict, "nonce")) &&
		strcmp(bcd_json_str(verdict, "nonce", ""), bcd_json_str(payload, "nonce", "")) != 0)
	{
		json_decref(verdict);
		verdict = NULL;
		rc = BCD_RC_FAILED;
		snprintf(err, sizeof(err), "the answer is for another round (its nonce); ignored");
	}
	take_verdict(at, rc, verdict, err);
out:
	json_decref(verdict);
	json_decref(payload);
	json_decref(doc);
	free(body);
}

/* The ticker's round: attest with the published node credential; the wait until the next. */
static long
attest_round(void *arg)
{
	bcd_attest *at = arg;
	bcd_node_snapshot node;
	long		wait;

	bcd_provisioner_node_take(at->prov, &node);
	if (bcd_node_usable(&node))
	{
		bcd_credential cred;

		memset(&cred, 0, sizeof(cred));
		cred.key = node.key;
		cred.spiffe_id = node.spiffe_id;
		snprintf(cred.serial, sizeof(cred.serial), "%s", node.serial);
		attest_once(at, &cred);
	}
	else
	{
		say(at, "no usable node credential yet");
		at->soon = 1;
	}
	bcd_node_release(&node);
	wait = at->soon ? BC_ATTEST_INTERVAL_MIN : at->interval;
	at->soon = 0;
	return wait;
}

/* Start the loop (attest.h). */
int
bcd_attest_start(const bcd_run_opts *o, const bcd_service_keys *keys, bcd_provisioner *prov,
				 bcd_attest **out, char *err, size_t errlen)
{
	bcd_attest *at = calloc(1, sizeof(*at));

	*out = NULL;
	if (at == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	at->o = o;
	at->keys = keys;
	at->prov = prov;
	at->interval = BC_ATTEST_INTERVAL_DEFAULT;
	at->event_log = o->event_log != NULL ? o->event_log : BCD_EVENT_LOG_DEFAULT;
	at->ima_log = o->ima_log != NULL ? o->ima_log : BCD_IMA_LOG_DEFAULT;
	bcd_ticker_init(&at->ticker);
	at->http = bcd_http_new(o->gateway, o->gateway_ca, err, errlen);
	if (at->http == NULL)
	{
		bcd_attest_free(at);
		return BC_EINVAL;
	}
	if (bcd_ticker_start(&at->ticker, attest_round, at) != 0)
	{
		snprintf(err, errlen, "cannot start the attestation thread");
		bcd_attest_free(at);
		return BC_EINVAL;
	}
	bcd_log("attest: continuous attestation of this node through %s (event log %s, IMA "
			"list %s)", BC_PATH_ATTEST, at->event_log, at->ima_log);
	*out = at;
	return BC_OK;
}

/* 1 once after the loop asked for a join again (attest.h). */
int
bcd_attest_take_rejoin(bcd_attest *at)
{
	return at != NULL && atomic_exchange(&at->rejoin, 0) != 0;
}

/* Stop the loop's thread (attest.h). */
void
bcd_attest_stop(bcd_attest *at)
{
	if (at != NULL)
		bcd_ticker_stop(&at->ticker);
}

/* Free it (attest.h). */
void
bcd_attest_free(bcd_attest *at)
{
	if (at == NULL)
		return;
	bcd_ticker_destroy(&at->ticker);
	bcd_http_free(at->http);
	free(at);
}
