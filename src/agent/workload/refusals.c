/*
 * refusals.c: the Workload API's refusals, logged as a rate-limited summary.
 *
 * Any local user who may connect can make bcd refuse as fast as it can ask
 * (hundreds of refusals a second), and one log line each would flood the
 * journal and hide everything else.  Per uid and interval, the first
 * BCD_WL_REFUSALS_FIRST refusals are logged in full (the caller, the
 * reason); the rest are counted and told in one line when the interval
 * ends.  The table holds UIDS_MAX uids an interval; refusals of any further
 * uid are counted together ("other uids").
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "workload/refusals.h"

#define UIDS_MAX 64

typedef struct entry
{
	uid_t		uid;
	unsigned long logged;
	unsigned long counted;
} entry;

struct bcd_wl_refusals
{
	pthread_mutex_t mu;
	double		since;			/* this interval began (0: none yet) */
	entry		uids[UIDS_MAX];
	int			n;
	unsigned long other;		/* refusals of uids beyond the table, counted */
};

/* An empty log of refusals, or NULL. */
bcd_wl_refusals *
bcd_wl_refusals_new(void)
{
	bcd_wl_refusals *r = calloc(1, sizeof(*r));

	if (r != NULL)
		pthread_mutex_init(&r->mu, NULL);
	return r;
}

/* Free it. */
void
bcd_wl_refusals_free(bcd_wl_refusals *r)
{
	if (r == NULL)
		return;
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* A refusal of uid at now: 1 to log it in full, 0 counted (refusals.h). */
int
bcd_wl_refusals_take(bcd_wl_refusals *r, uid_t uid, double now)
{
	int			full = 0;
	int			i;

	if (r == NULL)
		return 1;
	pthread_mutex_lock(&r->mu);
	if (r->since == 0)
		r->since = now;
	for (i = 0; i < r->n && r->uids[i].uid != uid; i++)
		;
	if (i == r->n && r->n < UIDS_MAX)
	{
		r->uids[i].uid = uid;
		r->uids[i].logged = r->uids[i].counted = 0;
		r->n++;
	}
	if (i == r->n)
		r->other++;
	else if (r->uids[i].logged < BCD_WL_REFUSALS_FIRST)
	{
		r->uids[i].logged++;
		full = 1;
	}
	else
		r->uids[i].counted++;
	pthread_mutex_unlock(&r->mu);
	return full;
}

/* At an interval's end: one summary line per uid with refusals counted (refusals.h). */
void
bcd_wl_refusals_tick(bcd_wl_refusals *r, double now)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	if (r->since != 0 && now - r->since >= BCD_WL_REFUSALS_INTERVAL)
	{
		for (int i = 0; i < r->n; i++)
			if (r->uids[i].counted > 0)
				bcd_log("workload api: %lu more refusals of uid %ld in the last %.0f s "
						"(the first %d logged)", r->uids[i].counted, (long) r->uids[i].uid,
						now - r->since, BCD_WL_REFUSALS_FIRST);
		if (r->other > 0)
			bcd_log("workload api: %lu more refusals of other uids in the last %.0f s",
					r->other, now - r->since);
		r->n = 0;
		r->other = 0;
		r->since = 0;
	}
	pthread_mutex_unlock(&r->mu);
}
