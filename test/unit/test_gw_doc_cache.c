/*
 * test_gw_doc_cache.c: cmocka tests of bc-gateway's document cache's
 * freshness decision (doc_cache.c: gw_doc_current, gw_doc_servable,
 * gw_doc_decide, gw_doc_refresh_in), a pure function of what the cache knows
 * at one moment: the MAX_AGE rule of the service keys and the SPIFFE bundle,
 * the NEXT_UPDATE rule of the CRL, a MAX_AGE document's channel (#47: the
 * SSH KRL and signed document, stale on bc_join_crl), and the --retry-after
 * window after a failed fetch, a spec's own stale bound (#48); and the
 * documents' checks (bc_join.metrics()'s text too).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "config.h"
#include "doc_cache.h"
#include "documents.h"

/* A MAX_AGE moment: a copy age seconds old, --service-keys-max-age 10, --retry-after 5. */
static struct gw_doc_moment
max_age_copy(double age)
{
	struct gw_doc_moment m = {
		.rule = GW_DOC_MAX_AGE, .has_copy = 1, .age = age, .max_age = 10,
		.since_failure = 1e9, .retry_after = 5,
	};

	return m;
}

/* A NEXT_UPDATE moment: a copy left seconds before its nextUpdate (both clocks), --retry-after 5. */
static struct gw_doc_moment
next_update_copy(double left)
{
	struct gw_doc_moment m = {
		.rule = GW_DOC_NEXT_UPDATE, .has_copy = 1, .wall_left = left, .mono_left = left,
		.since_failure = 1e9, .retry_after = 5,
	};

	return m;
}

/* The step decided for m, and its max-age when SERVE. */
static enum gw_doc_step
decide(const struct gw_doc_moment *m, long *max_age)
{
	*max_age = -99;
	return gw_doc_decide(m, max_age);
}

/* MAX_AGE: a copy younger than the max age is served, max-age what is left of it; older waits for a fetch. */
static void
test_max_age_fresh_and_stale(void **state)
{
	struct gw_doc_moment m;
	long		ma;

	(void) state;
	m = max_age_copy(3.4);
	assert_true(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 6);
	m = max_age_copy(9.99);
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 0);
	m = max_age_copy(10);
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	m.fetching = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* no copy yet: the first request fetches */
	m = max_age_copy(0);
	m.has_copy = 0;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	assert_int_equal(gw_doc_servable(&m), -1);
}

/* MAX_AGE: after a failed fetch, for --retry-after, the stale copy up to GW_DOC_STALE_MAX or 503, no new fetch. */
static void
test_max_age_after_failure(void **state)
{
	struct gw_doc_moment m;
	long		ma;

	(void) state;
	m = max_age_copy(120);
	m.failed = 1;
	m.since_failure = 2;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 0);
	m.age = GW_DOC_STALE_MAX - 0.5;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.age = GW_DOC_STALE_MAX;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	m.has_copy = 0;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	/* the window over: one more attempt */
	m = max_age_copy(120);
	m.failed = 1;
	m.since_failure = 5;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* a fetch running: wait for it */
	m.since_failure = 1;
	m.fetching = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* the waiters of a failed fetch: the stale copy */
	assert_int_equal(gw_doc_servable(&m), 0);
	/* the waiters of a successful one that took longer than the max age: 503, as ever */
	m = max_age_copy(11);
	assert_int_equal(gw_doc_servable(&m), -1);
}

/*
 * #48 MAX_AGE with the spec's stale_max (bc_join.metrics(): 5 x
 * --metrics-max-age): while fetches fail the copy is served until that old,
 * not GW_DOC_STALE_MAX; while they do not, a copy past its max age waits
 * for the fetch as ever.
 */
static void
test_max_age_stale_factor(void **state)
{
	struct gw_doc_moment m = max_age_copy(20);
	long		ma;

	(void) state;
	m.max_age = 15;
	m.stale_max = 75;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	assert_int_equal(gw_doc_servable(&m), -1);
	m.failed = 1;
	m.since_failure = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 0);
	m.age = 74.9;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.age = 75;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	/* not the 300 s of the other documents */
	m.age = GW_DOC_STALE_MAX - 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	/* closing: the same bound */
	m = max_age_copy(74);
	m.max_age = 15;
	m.stale_max = 75;
	m.closing = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.age = 76;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
}

/*
 * #48: bc_join.metrics()'s text: kept when it is lines a Prometheus parser
 * takes, at most 1 MiB, ending in a newline, without the gateway's own
 * families; refused otherwise, the copy untouched.
 */
static void
test_service_metrics_check(void **state)
{
	static const char good[] =
		"# HELP bc_join_rounds_total Rounds.\n"
		"# TYPE bc_join_rounds_total counter\n"
		"bc_join_rounds_total{attestor=\"join-token\",outcome=\"refused\"} 3\n"
		"\n"
		"bc_join_sessions_live\t0\n"
		"_x 1\n:y 2\n";
	static char big[GW_SERVICE_METRICS_MAX + 1];
	struct gw_doc_copy copy = {0};
	const struct gw_doc_spec *d = &gw_doc_service_metrics;

	(void) state;
	assert_string_equal(d->name, "service_metrics");
	assert_int_equal(d->rule, GW_DOC_MAX_AGE);
	assert_null(d->channel);
	assert_int_equal(d->stale_factor, 5);
	assert_string_equal(d->content_type, "text/plain; version=0.0.4");
	assert_string_equal(d->sql, "SELECT bc_join.metrics()");

	assert_non_null(d->check(NULL, 0, NULL, &copy));
	assert_non_null(d->check("", 0, NULL, &copy));
	assert_string_equal(gw_service_metrics_refusal("a 1", 3),
						"bc_join.metrics() does not end in a newline");
	assert_string_equal(gw_service_metrics_refusal("a 1\0\n", 5),
						"bc_join.metrics() holds a control character");
	assert_string_equal(gw_service_metrics_refusal("a 1\r\n", 5),
						"bc_join.metrics() holds a control character");
	assert_string_equal(gw_service_metrics_refusal("a 1\x7f\n", 5),
						"bc_join.metrics() holds a control character");
	assert_string_equal(gw_service_metrics_refusal("a 1\n<html>\n", 11),
						"bc_join.metrics() has a line that is neither a sample nor a comment");
	assert_string_equal(gw_service_metrics_refusal("a 1\n 1\n", 7),
						"bc_join.metrics() has a line that is neither a sample nor a comment");
	assert_string_equal(gw_service_metrics_refusal("9a 1\n", 5),
						"bc_join.metrics() has a line that is neither a sample nor a comment");
	assert_string_equal(gw_service_metrics_refusal("bc_gateway_db_pool_size 9\n", 26),
						"bc_join.metrics() names a bc_gateway_ family");
	assert_string_equal(gw_service_metrics_refusal("# TYPE bc_gateway_x gauge\n", 26),
						"bc_join.metrics() names a bc_gateway_ family");
	assert_string_equal(gw_service_metrics_refusal("# HELP bc_gateway_x y\n", 22),
						"bc_join.metrics() names a bc_gateway_ family");
	memset(big, 'a', sizeof(big));
	big[sizeof(big) - 1] = '\n';
	assert_string_equal(gw_service_metrics_refusal(big, sizeof(big)),
						"bc_join.metrics() is larger than 1 MiB");
	assert_string_equal(d->check(big, sizeof(big), NULL, &copy), "bc_join.metrics() is larger than 1 MiB");
	assert_null(copy.body);
	/* 1 MiB exactly, one long line, is taken */
	assert_null(gw_service_metrics_refusal(big + 1, sizeof(big) - 1));

	assert_null(gw_service_metrics_refusal(good, sizeof(good) - 1));
	assert_null(d->check(good, sizeof(good) - 1, NULL, &copy));
	assert_int_equal(copy.len, sizeof(good) - 1);
	assert_memory_equal(copy.body, good, sizeof(good) - 1);
	free(copy.body);
}

/* MAX_AGE: a max age longer than GW_DOC_STALE_MAX still serves a current copy after a failure. */
static void
test_max_age_longer_than_stale(void **state)
{
	struct gw_doc_moment m = max_age_copy(400);
	long		ma;

	(void) state;
	m.max_age = 3600;
	m.failed = 1;
	m.since_failure = 1;
	assert_true(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 3200);
}

/* MAX_AGE: closing answers at once, the copy up to GW_DOC_STALE_MAX, else 503. */
static void
test_max_age_closing(void **state)
{
	struct gw_doc_moment m = max_age_copy(200);
	long		ma;

	(void) state;
	m.closing = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.age = 301;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
}

/*
 * MAX_AGE with a channel (#47): a notification, or a gap in listening, since
 * the fetch makes a young copy not current, so the next request fetches; its
 * waiters, and requests while fetches fail, still get the copy within the
 * max age (or GW_DOC_STALE_MAX).
 */
static void
test_max_age_unseen(void **state)
{
	struct gw_doc_moment m = max_age_copy(1);
	long		ma;

	(void) state;
	m.unseen = 1;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	m.fetching = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	assert_int_equal(gw_doc_servable(&m), 9);
	/* a failed fetch: the stale copy for --retry-after, no new attempt */
	m.fetching = 0;
	m.failed = 1;
	m.since_failure = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 9);
	m.since_failure = 5;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* nothing unseen: the same copy is current */
	m = max_age_copy(1);
	assert_true(gw_doc_current(&m));
	/* with a channel, Cache-Control max-age is at most a minute, however long the max age */
	m = max_age_copy(100);
	m.max_age = 3600;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 3500);
	m.channel = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, GW_DOC_NEXT_UPDATE_CC_MAX);
	m.age = 3590;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 10);
	/*
	 * no connection listening: current for GW_DOC_UNLISTENED_MAX_AGE from
	 * its fetch (not a fetch per request, not the whole max age)
	 */
	m = max_age_copy(1);
	m.max_age = 3600;
	m.channel = 1;
	m.unlistened = 1;
	assert_true(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.age = GW_DOC_UNLISTENED_MAX_AGE;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* a max age shorter than that bound stays the bound */
	m = max_age_copy(2);
	m.max_age = 2;
	m.unlistened = 1;
	assert_false(gw_doc_current(&m));
}

/* Which documents are stale on a channel: the CRL, the SSH KRL and signed document on bc_join_crl. */
static void
test_channels(void **state)
{
	(void) state;
	assert_string_equal(gw_doc_ssh_krl.channel, "bc_join_crl");
	assert_int_equal(gw_doc_ssh_krl.rule, GW_DOC_MAX_AGE);
	assert_string_equal(gw_doc_ssh_signed.channel, "bc_join_crl");
	assert_int_equal(gw_doc_ssh_signed.rule, GW_DOC_MAX_AGE);
	assert_null(gw_doc_ssh_host_ca.channel);
	assert_null(gw_doc_ssh_user_ca.channel);
	assert_null(gw_doc_service_keys.channel);
	assert_null(gw_doc_spiffe_bundle.channel);
	assert_string_equal(gw_doc_ssh_krl.content_type, "application/octet-stream");
	assert_string_equal(gw_doc_ssh_signed.content_type, "application/json");
	assert_string_equal(gw_doc_ssh_host_ca.content_type, "text/plain");
	assert_string_equal(gw_doc_ssh_user_ca.content_type, "text/plain");
	assert_string_equal(gw_doc_ssh_krl.sql, "SELECT bc_join.ssh_krl()");
	assert_string_equal(gw_doc_ssh_signed.sql, "SELECT bc_join.signed_ssh()::text");
	assert_string_equal(gw_doc_ssh_host_ca.sql, "SELECT bc_join.ssh_host_ca()");
	assert_string_equal(gw_doc_ssh_user_ca.sql, "SELECT bc_join.ssh_user_ca()");
}

/* bytes as bytea's hex text (malloc'd). */
static char *
to_hex(const unsigned char *b, size_t n)
{
	char	   *hex = malloc(2 + 2 * n + 1);

	assert_non_null(hex);
	strcpy(hex, "\\x");
	for (size_t i = 0; i < n; i++)
		sprintf(hex + 2 + 2 * i, "%02x", b[i]);
	return hex;
}

/* The KRL's check: the magic and format 1, within --crl-max-size and BC_SSH_KRL_MAX, kept to the byte. */
static void
test_ssh_krl_check(void **state)
{
	/* a KRL as ssh-keygen -k writes it, empty: header, version 7, generated, flags, reserved, comment */
	static const unsigned char krl[] = {
		'S', 'S', 'H', 'K', 'R', 'L', '\n', '\0', 0, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0x65, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	struct gw_config cfg = {.crl_max_size = 8 * 1024 * 1024};
	struct gw_doc_copy copy = {0};
	unsigned char bad[sizeof(krl)];
	char	   *hex;
	size_t		big = (size_t) 4 * 1024 * 1024 + 1;
	unsigned char *huge;

	(void) state;
	assert_string_equal(gw_doc_ssh_krl.check(NULL, 0, &cfg, &copy), "bc_join.ssh_krl() returned NULL");
	assert_string_equal(gw_doc_ssh_krl.check("\\x", 2, &cfg, &copy),
						"bc_join.ssh_krl() is not an OpenSSH KRL of format 1");
	hex = to_hex(krl, sizeof(krl));
	assert_null(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy));
	assert_int_equal(copy.len, sizeof(krl));
	assert_memory_equal(copy.body, krl, sizeof(krl));
	free(copy.body);
	memset(&copy, 0, sizeof(copy));
	/* over --crl-max-size */
	cfg.crl_max_size = sizeof(krl) - 1;
	assert_string_equal(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy),
						"the KRL is larger than --crl-max-size or BC_SSH_KRL_MAX");
	cfg.crl_max_size = 8 * 1024 * 1024;
	free(hex);
	/* a truncated header; one bit flipped in the magic or the format version */
	hex = to_hex(krl, 11);
	assert_string_equal(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy),
						"bc_join.ssh_krl() is not an OpenSSH KRL of format 1");
	free(hex);
	for (size_t i = 0; i < 12; i++)
	{
		memcpy(bad, krl, sizeof(krl));
		bad[i] ^= 0x01;
		hex = to_hex(bad, sizeof(bad));
		assert_string_equal(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy),
							"bc_join.ssh_krl() is not an OpenSSH KRL of format 1");
		free(hex);
	}
	/* over BC_SSH_KRL_MAX, though --crl-max-size (8 MiB) allows it: bcd would refuse it */
	huge = calloc(1, big);
	assert_non_null(huge);
	memcpy(huge, krl, sizeof(krl));
	hex = to_hex(huge, big);
	assert_string_equal(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy),
						"the KRL is larger than --crl-max-size or BC_SSH_KRL_MAX");
	free(hex);
	hex = to_hex(huge, big - 1);
	assert_null(gw_doc_ssh_krl.check(hex, strlen(hex), &cfg, &copy));
	assert_int_equal(copy.len, big - 1);
	free(copy.body);
	free(hex);
	free(huge);
}

/* The CA lines' check: printable ASCII lines, each ended by a newline, none empty, at most 64 KiB. */
static void
test_text_check(void **state)
{
	static const char two[] = "ecdsa-sha2-nistp256 AAAAE2Vj bc_join-host-ca@test\n"
		"ecdsa-sha2-nistp256 AAAAE2Vk bc_join-host-ca@test\n";
	static const char *const refused[] = {
		"no newline", "a\n\nb\n", "\n", "tab\there\n", "cr\r\n", "nul\0x\n", "del\x7f\n", "\xc3\xa9\n",
	};
	static char big[64 * 1024 + 1];
	struct gw_doc_copy copy = {0};

	(void) state;
	assert_string_equal(gw_doc_ssh_host_ca.check(NULL, 0, NULL, &copy), "the query returned no lines");
	assert_string_equal(gw_doc_ssh_user_ca.check("", 0, NULL, &copy), "the query returned no lines");
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
	{
		size_t		n = strlen(refused[i]);

		if (i == 5)
			n = 6;				/* "nul\0x\n" */
		assert_non_null(gw_doc_ssh_host_ca.check(refused[i], n, NULL, &copy));
	}
	assert_string_equal(gw_doc_ssh_host_ca.check("no newline", 10, NULL, &copy),
						"the document's last line has no newline");
	assert_string_equal(gw_doc_ssh_host_ca.check("a\n\nb\n", 5, NULL, &copy),
						"the document is not lines of printable ASCII");
	memset(big, 'a', sizeof(big));
	big[sizeof(big) - 1] = '\n';
	assert_string_equal(gw_doc_ssh_host_ca.check(big, sizeof(big), NULL, &copy),
						"the document is larger than 64 KiB");
	assert_null(copy.body);
	assert_null(gw_doc_ssh_host_ca.check(big + 1, sizeof(big) - 1, NULL, &copy));
	assert_int_equal(copy.len, sizeof(big) - 1);
	free(copy.body);
	memset(&copy, 0, sizeof(copy));
	assert_null(gw_doc_ssh_user_ca.check(two, sizeof(two) - 1, NULL, &copy));
	assert_int_equal(copy.len, sizeof(two) - 1);
	assert_memory_equal(copy.body, two, sizeof(two) - 1);
	free(copy.body);
}

/* NEXT_UPDATE: current before nextUpdate with nothing unseen; max-age the time left, at most 60. */
static void
test_next_update_current(void **state)
{
	struct gw_doc_moment m;
	long		ma;

	(void) state;
	m = next_update_copy(30.7);
	assert_true(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 30);
	m = next_update_copy(86400);
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, GW_DOC_NEXT_UPDATE_CC_MAX);
	/* the sooner of the two clocks */
	m = next_update_copy(3600);
	m.mono_left = 20;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 20);
	m.mono_left = 3600;
	m.wall_left = 12;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 12);
	/* past nextUpdate by either clock: fetch */
	m.wall_left = -1;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	m.wall_left = 3600;
	m.mono_left = 0;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
}

/* NEXT_UPDATE: a notification, or a gap in listening, since the fetch: wait for a new fetch. */
static void
test_next_update_unseen(void **state)
{
	struct gw_doc_moment m = next_update_copy(3600);
	long		ma;

	(void) state;
	m.unseen = 1;
	assert_false(gw_doc_current(&m));
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	m.fetching = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* but the waiters of that fetch get the copy while it is before its nextUpdate */
	assert_int_equal(gw_doc_servable(&m), 60);
}

/* NEXT_UPDATE: after a failure the copy is served until its nextUpdate, then 503; never a stale one past it. */
static void
test_next_update_after_failure(void **state)
{
	struct gw_doc_moment m = next_update_copy(45);
	long		ma;

	(void) state;
	m.unseen = 1;
	m.failed = 1;
	m.since_failure = 4.9;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	assert_int_equal(ma, 45);
	m.wall_left = 0;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	m.has_copy = 0;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
	/* the window over: fetch again */
	m = next_update_copy(45);
	m.unseen = 1;
	m.failed = 1;
	m.since_failure = 5;
	assert_int_equal(decide(&m, &ma), GW_DOC_WAIT);
	/* closing: the copy before its nextUpdate, else 503, at once */
	m = next_update_copy(45);
	m.unseen = 1;
	m.closing = 1;
	assert_int_equal(decide(&m, &ma), GW_DOC_SERVE);
	m.mono_left = -3;
	assert_int_equal(decide(&m, &ma), GW_DOC_UNAVAILABLE);
}

/* NEXT_UPDATE: the refresh comes at 3/4 of thisUpdate to nextUpdate. */
static void
test_refresh_in(void **state)
{
	(void) state;
	assert_true(gw_doc_refresh_in(1000, 2000, 1000) == 750);
	assert_true(gw_doc_refresh_in(1000, 2000, 1500) == 250);
	assert_true(gw_doc_refresh_in(1000, 2000, 1900) == -150);
}

/* The three documents, their rules and what they answer. */
static void
test_documents(void **state)
{
	(void) state;
	assert_string_equal(gw_doc_crl.name, "crl");
	assert_int_equal(gw_doc_crl.rule, GW_DOC_NEXT_UPDATE);
	assert_string_equal(gw_doc_crl.channel, "bc_join_crl");
	assert_string_equal(gw_doc_crl.content_type, "application/pkix-crl");
	assert_string_equal(gw_doc_service_keys.name, "service_keys");
	assert_int_equal(gw_doc_service_keys.rule, GW_DOC_MAX_AGE);
	assert_string_equal(gw_doc_service_keys.content_type, "application/json");
	assert_string_equal(gw_doc_spiffe_bundle.name, "spiffe_bundle");
	assert_int_equal(gw_doc_spiffe_bundle.rule, GW_DOC_MAX_AGE);
	assert_string_equal(gw_doc_spiffe_bundle.content_type, "application/json");
}

/* A JSON document's check: NULL, empty and over 256 KiB refused, else kept to the byte. */
static void
test_json_check(void **state)
{
	static char big[256 * 1024 + 1];
	struct gw_doc_copy copy = {0};

	(void) state;
	assert_string_equal(gw_doc_service_keys.check(NULL, 0, NULL, &copy), "the query returned NULL");
	assert_string_equal(gw_doc_service_keys.check("", 0, NULL, &copy), "the query returned NULL");
	assert_string_equal(gw_doc_service_keys.check(big, sizeof(big), NULL, &copy),
						"the document is larger than 256 KiB");
	assert_null(copy.body);
	assert_null(gw_doc_spiffe_bundle.check("{\"keys\":[]}", 11, NULL, &copy));
	assert_int_equal(copy.len, 11);
	assert_memory_equal(copy.body, "{\"keys\":[]}", 11);
	free(copy.body);
}

/* A CRL signed by a fresh P-256 key, valid from now + from_s to now + until_s, as bytea's hex text (malloc'd). */
static char *
crl_hex(long from_s, long until_s, const char *trailer, size_t *der_len)
{
	EVP_PKEY   *key = EVP_EC_gen("P-256");
	X509_CRL   *crl = X509_CRL_new();
	X509_NAME  *name = X509_NAME_new();
	unsigned char *der = NULL;
	int			n;
	char	   *hex;

	assert_non_null(key);
	assert_non_null(crl);
	assert_non_null(name);
	assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
												(const unsigned char *) "test CA", -1, -1, 0), 1);
	assert_int_equal(X509_CRL_set_version(crl, 1), 1);
	assert_int_equal(X509_CRL_set_issuer_name(crl, name), 1);
	{
		ASN1_TIME  *t = X509_time_adj_ex(NULL, 0, from_s, NULL);

		assert_int_equal(X509_CRL_set1_lastUpdate(crl, t), 1);
		ASN1_TIME_free(t);
		t = X509_time_adj_ex(NULL, 0, until_s, NULL);
		assert_int_equal(X509_CRL_set1_nextUpdate(crl, t), 1);
		ASN1_TIME_free(t);
	}
	assert_true(X509_CRL_sign(crl, key, EVP_sha256()) > 0);
	n = i2d_X509_CRL(crl, &der);
	assert_true(n > 0);
	*der_len = (size_t) n;
	hex = malloc(2 + 2 * (size_t) n + 2 * strlen(trailer) + 1);
	assert_non_null(hex);
	strcpy(hex, "\\x");
	for (int i = 0; i < n; i++)
		sprintf(hex + 2 + 2 * i, "%02x", der[i]);
	for (size_t i = 0; trailer[i]; i++)
		sprintf(hex + 2 + 2 * n + 2 * i, "%02x", (unsigned char) trailer[i]);
	OPENSSL_free(der);
	X509_NAME_free(name);
	X509_CRL_free(crl);
	EVP_PKEY_free(key);
	return hex;
}

/* The CRL's check: one DER CRL before its nextUpdate, within --crl-max-size, kept with its times. */
static void
test_crl_check(void **state)
{
	struct gw_config cfg = {.crl_max_size = 8 * 1024 * 1024};
	struct gw_doc_copy copy = {0};
	size_t		der_len;
	char	   *hex;
	time_t		now = time(NULL);

	(void) state;
	assert_string_equal(gw_doc_crl.check(NULL, 0, &cfg, &copy), "bc_join.crl() returned NULL");
	assert_string_equal(gw_doc_crl.check("\\x", 2, &cfg, &copy), "bc_join.crl() is not one DER CRL");

	hex = crl_hex(-60, 3600, "", &der_len);
	assert_null(gw_doc_crl.check(hex, strlen(hex), &cfg, &copy));
	assert_int_equal(copy.len, der_len);
	assert_true(copy.this_update >= now - 61 && copy.this_update <= now - 59 + 2);
	assert_true(copy.next_update - copy.this_update == 3660);
	free(copy.body);
	memset(&copy, 0, sizeof(copy));
	/* over --crl-max-size: refused before decoding */
	cfg.crl_max_size = der_len - 1;
	assert_string_equal(gw_doc_crl.check(hex, strlen(hex), &cfg, &copy),
						"the CRL is larger than --crl-max-size");
	cfg.crl_max_size = 8 * 1024 * 1024;
	free(hex);

	/* anything after the CRL */
	hex = crl_hex(-60, 3600, "x", &der_len);
	assert_string_equal(gw_doc_crl.check(hex, strlen(hex), &cfg, &copy), "bc_join.crl() is not one DER CRL");
	free(hex);

	/* past its nextUpdate */
	hex = crl_hex(-3600, -60, "", &der_len);
	assert_string_equal(gw_doc_crl.check(hex, strlen(hex), &cfg, &copy),
						"the CRL is already past its nextUpdate");
	free(hex);
	assert_null(copy.body);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_max_age_fresh_and_stale),
		cmocka_unit_test(test_max_age_after_failure),
		cmocka_unit_test(test_max_age_longer_than_stale),
		cmocka_unit_test(test_max_age_stale_factor),
		cmocka_unit_test(test_service_metrics_check),
		cmocka_unit_test(test_max_age_closing),
		cmocka_unit_test(test_max_age_unseen),
		cmocka_unit_test(test_channels),
		cmocka_unit_test(test_ssh_krl_check),
		cmocka_unit_test(test_text_check),
		cmocka_unit_test(test_next_update_current),
		cmocka_unit_test(test_next_update_unseen),
		cmocka_unit_test(test_next_update_after_failure),
		cmocka_unit_test(test_refresh_in),
		cmocka_unit_test(test_documents),
		cmocka_unit_test(test_json_check),
		cmocka_unit_test(test_crl_check),
	};

	return cmocka_run_group_tests_name("gw_doc_cache", tests, NULL, NULL);
}
