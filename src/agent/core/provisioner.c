/*
 * provisioner.c: bcd run's provisioner (provisioner.h; docs/sessions.md,
 * "The host side"): what the hooks' socket server and the Workload API
 * ask of the service on behalf of their callers.
 *
 * Coalescing.  A provisioning is keyed by its kind and (session, context),
 * and for a JWT-SVID its sorted audiences.  The first ask creates it; every
 * ask of the same key that comes while it is queued or running joins it,
 * from either client, and all of them get its one result: one POST
 * /v1/session (or /v1/jwt-svid) however many callers ask at once.  A result
 * lives only as long as that: the next ask after it ended starts a new
 * provisioning (nothing is cached or kept spare here; what the Workload
 * API keeps is its own).
 *
 * Bounds.  At most --max-provisioning provisionings run at once, on as many
 * worker threads, each with its own HTTPS client (workers.c; a session
 * credential: provision.c, a JWT-SVID: provision_jwt.c); the others wait in
 * a FIFO (queued).  How many callers may wait is each client's bound.
 *
 * Threads.  The table, the FIFO and the numbers are under one mutex: an ask
 * is queued on the asking thread, so the numbers a client reads right after
 * count it.  The provisioner's own thread takes the finished provisionings
 * from the workers (woken through a pipe), and the asks that failed at once
 * (no usable node credential), and calls their waiters back, with no lock
 * held: a client may ask again from its call-back's thread while holding a
 * lock of its own that the call-back takes.  The node credential is
 * published by the main thread (after a load, a join or a renewal) and
 * taken as a snapshot, the key referenced, by every other
 * (node_credential.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/log.h"
#include "core/provisioner.h"
#include "core/workers.h"

/* The provisioner of bcd run. */
struct bcd_provisioner
{
	const bcd_service_keys *keys;
	const char *gateway;
	const char *gateway_ca;
	long		max_provisioning;
	bcd_published_node *node;	/* the node credential, published by the main thread */
	bcd_workers *workers;
	int			wake[2];		/* its thread's pipe: a job is done, an ask failed at once */
	pthread_t	thread;
	int			started;
	atomic_int	stopping;
	atomic_int	quarantined;	/* the service quarantined the node (attest.c) */
	atomic_int	revoked;		/* the node certificate is revoked (revocation.c) */
	atomic_ulong crl_gen;		/* the CRL's generation, 0: none yet */
	/* under rmu: the revocation, and the CRL */
	pthread_mutex_t rmu;
	char		revoked_serial[41];
	char		revoked_reason[32];
	char		revoked_source[16];
	int64_t		revoked_at;
	unsigned char *crl;
	size_t		crl_len;
	void		(*watch) (void *arg);
	void	   *watch_arg;
	/* under mu */
	pthread_mutex_t mu;
	int			closed;			/* stopped: every ask refused */
	bcd_job    *jobs;			/* every provisioning asked for and not yet ended */
	bcd_job    *fifo_head;		/* those waiting for a worker */
	bcd_job    *fifo_tail;
	bcd_job    *failed;			/* asks that failed at once, to call back (through qnext) */
	bcd_counters counters;		/* queued, in_flight, provisionings, jwt_fetches */
	unsigned long changes;
};

/* Wake the provisioner's thread (a byte in its pipe; a full pipe already wakes it). */
static void
wake(bcd_provisioner *p)
{
	char		c = 1;

	(void) !write(p->wake[1], &c, 1);
}

/* Tell the watcher that the numbers or the node credential changed. */
static void
changed(bcd_provisioner *p)
{
	if (p->watch != NULL)
		p->watch(p->watch_arg);
}

/* Hand queued provisionings to the workers while fewer than --max-provisioning run (under mu). */
static void
dispatch(bcd_provisioner *p)
{
	bcd_job    *job;

	while (p->fifo_head != NULL && p->counters.in_flight < p->max_provisioning)
	{
		job = p->fifo_head;
		p->fifo_head = job->qnext;
		if (p->fifo_head == NULL)
			p->fifo_tail = NULL;
		p->counters.queued--;
		p->counters.in_flight++;
		bcd_workers_submit(p->workers, job);
	}
	p->changes++;
}

/* Call every waiter of job back (no lock held), then drop the provisioner's reference. */
static void
call_back(bcd_job *job)
{
	bcd_job_waiter *x;

	while ((x = job->waiters) != NULL)
	{
		job->waiters = x->next;
		x->cb(x->arg, job);
		free(x);
	}
	bcd_job_release(job);
}

/* Take job out of the table (under mu). */
static void
unlink_job(bcd_provisioner *p, bcd_job *job)
{
	for (bcd_job **pp = &p->jobs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == job)
		{
			*pp = job->next;
			break;
		}
}

/* A finished provisioning (its thread): count it, start the next, call its waiters back. */
static void
complete(bcd_provisioner *p, bcd_job *job)
{
	unsigned long *counted;

	pthread_mutex_lock(&p->mu);
	p->counters.in_flight--;
	counted = job->kind == BCD_JOB_JWT_SVID ? p->counters.jwt_fetches : p->counters.provisionings;
	if (job->result < BCD_RESULT_COUNT)
		counted[job->result]++;
	if (job->dispatched > 1)
		counted[BCD_RESULT_REFUSED] += (unsigned long) (job->dispatched - 1);
	unlink_job(p, job);
	dispatch(p);
	pthread_mutex_unlock(&p->mu);
	changed(p);
	call_back(job);
}

/* The provisioner's thread: the finished provisionings and the failed asks, called back. */
static void *
provisioner_main(void *arg)
{
	bcd_provisioner *p = arg;
	struct pollfd pfd;
	char		buf[64];
	bcd_job    *job;
	bcd_job    *next;

	while (!atomic_load(&p->stopping))
	{
		pfd = (struct pollfd) {p->wake[0], POLLIN, 0};
		if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
			bcd_log("provisioner: poll: %s", strerror(errno));
		while (read(p->wake[0], buf, sizeof(buf)) > 0)
			;
		pthread_mutex_lock(&p->mu);
		job = p->failed;
		p->failed = NULL;
		pthread_mutex_unlock(&p->mu);
		for (; job != NULL; job = next)
		{
			next = job->qnext;
			call_back(job);
		}
		for (job = bcd_workers_take_done(p->workers); job != NULL; job = next)
		{
			next = job->qnext;
			complete(p, job);
		}
	}
	return NULL;
}

/* The provisioner (provisioner.h); nothing runs yet. */
bcd_provisioner *
bcd_provisioner_new(const bcd_run_opts *o, const bcd_service_keys *keys,
					const bcd_credential *initial)
{
	bcd_provisioner *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_mutex_init(&p->rmu, NULL);
	p->wake[0] = p->wake[1] = -1;
	p->keys = keys;
	p->gateway = o->gateway;
	p->gateway_ca = o->gateway_ca;
	p->max_provisioning = o->max_provisioning;
	p->counters.max_provisioning = o->max_provisioning;
	p->node = bcd_node_new();
	if (p->node == NULL || pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		bcd_provisioner_free(p);
		return NULL;
	}
	if (initial != NULL)
		bcd_node_publish(p->node, initial);
	return p;
}

/* Start the workers and the provisioner's thread: BC_OK, or an error in err. */
int
bcd_provisioner_start(bcd_provisioner *p, char *err, size_t errlen)
{
	int			rc;

	rc = bcd_workers_start(p->max_provisioning, p->gateway, p->gateway_ca, p->keys, p->node,
						   p->wake[1], &p->workers, err, errlen);
	if (rc != BC_OK)
		return rc;
	if (pthread_create(&p->thread, NULL, provisioner_main, p) != 0)
	{
		snprintf(err, errlen, "cannot start the provisioner's thread");
		return BC_EINVAL;
	}
	p->started = 1;
	return BC_OK;
}

/* A job of kind for the key that failed at once: code and message (under mu). */
static bcd_job *
failed_job(bcd_job_kind kind, const char *session, const char *context,
		   const bcd_audiences *aud, bcd_code code, const char *message)
{
	bcd_job    *job = bcd_job_new(kind, session, context, aud, NULL);

	if (job != NULL)
		bcd_job_fail(job, code, BCD_RESULT_FAILED, "%s", message);
	return job;
}

/*
 * The provisioning of kind for (session, context[, aud]): found, or created
 * and queued for caller, asking an SSH user certificate when ssh says so
 * (a session's; one found is taken as it is); NULL on OOM (under mu).
 */
static bcd_job *
find_or_queue(bcd_provisioner *p, bcd_job_kind kind, const char *session, const char *context,
			  const bcd_audiences *aud, const bcd_peer *caller, int ssh)
{
	bcd_job    *job;

	for (job = p->jobs; job != NULL; job = job->next)
		if (job->kind == kind && strcmp(job->session, session) == 0 &&
			strcmp(job->context, context) == 0 &&
			(kind != BCD_JOB_JWT_SVID || bcd_audiences_equal(&job->audience, aud)))
			return job;
	job = bcd_job_new(kind, session, context, aud, caller);
	if (job == NULL)
		return NULL;
	job->ssh_user = kind == BCD_JOB_SESSION && ssh;
	job->next = p->jobs;
	p->jobs = job;
	if (p->fifo_tail != NULL)
		p->fifo_tail->qnext = job;
	else
		p->fifo_head = job;
	p->fifo_tail = job;
	p->counters.queued++;
	return job;
}

/* Ask for a provisioning (ssh: an SSH user certificate too), from any thread. */
static int
ask(bcd_provisioner *p, bcd_job_kind kind, const char *session, const char *context,
	const bcd_audiences *aud, const bcd_peer *caller, int ssh, bcd_job_cb cb, void *arg)
{
	bcd_job_waiter *x = calloc(1, sizeof(*x));
	bcd_node_snapshot node;
	bcd_job    *job;
	char		why[512];
	bcd_refusal refusal;
	int			usable;
	int			queued = 0;

	if (x == NULL)
		return BC_ENOMEM;
	refusal = bcd_provisioner_refusal(p, why, sizeof(why));
	x->cb = cb;
	x->arg = arg;
	bcd_node_take(p->node, &node);
	usable = bcd_node_usable(&node);
	bcd_node_release(&node);
	pthread_mutex_lock(&p->mu);
	if (p->closed)
	{
		pthread_mutex_unlock(&p->mu);
		free(x);
		return BC_EINVAL;
	}
	if (refusal != BCD_REFUSAL_NONE)
	{
		job = failed_job(kind, session, context, aud, BCD_CODE_REFUSED, why);
		if (job != NULL)
		{
			job->qnext = p->failed;
			p->failed = job;
		}
	}
	else if (!usable)
	{
		job = failed_job(kind, session, context, aud, BCD_CODE_NO_NODE_CREDENTIAL,
						 "this host holds no usable node credential");
		if (job != NULL)
		{
			job->qnext = p->failed;
			p->failed = job;
		}
	}
	else if ((job = find_or_queue(p, kind, session, context, aud, caller, ssh)) != NULL)
	{
		queued = 1;
		dispatch(p);
	}
	if (job != NULL)
	{
		x->next = job->waiters;
		job->waiters = x;
	}
	pthread_mutex_unlock(&p->mu);
	if (job == NULL)
	{
		free(x);
		return BC_ENOMEM;
	}
	if (queued)
		changed(p);
	else
		wake(p);
	return BC_OK;
}

/* Ask for a provisioning, from any thread (provisioner.h). */
int
bcd_provisioner_ask(bcd_provisioner *p, bcd_job_kind kind, const char *session,
					const char *context, const bcd_audiences *aud, const bcd_peer *caller,
					bcd_job_cb cb, void *arg)
{
	return ask(p, kind, session, context, aud, caller, 0, cb, arg);
}

/* Ask for a session credential with an SSH user certificate, from any thread (provisioner.h). */
int
bcd_provisioner_ask_ssh(bcd_provisioner *p, const char *session, const char *context,
						const bcd_peer *caller, bcd_job_cb cb, void *arg)
{
	return ask(p, BCD_JOB_SESSION, session, context, NULL, caller, 1, cb, arg);
}

/* Stop the workers (an HTTPS request in flight aborted); the thread calls back what they finished. */
void
bcd_provisioner_stop_workers(bcd_provisioner *p)
{
	if (p != NULL)
		bcd_workers_stop(p->workers);
}

/*
 * Stop: the workers (an HTTPS request in flight aborted), then the thread;
 * every provisioning not called back yet (queued, running, or done and not
 * taken) and every failed ask called back, unavailable.
 */
void
bcd_provisioner_stop(bcd_provisioner *p)
{
	bcd_job    *jobs;
	bcd_job    *failed;
	bcd_job    *next;

	if (p == NULL)
		return;
	bcd_workers_stop(p->workers);
	atomic_store(&p->stopping, 1);
	if (p->started)
	{
		wake(p);
		pthread_join(p->thread, NULL);
		p->started = 0;
	}
	pthread_mutex_lock(&p->mu);
	p->closed = 1;
	jobs = p->jobs;
	failed = p->failed;
	p->jobs = p->fifo_head = p->fifo_tail = p->failed = NULL;
	p->counters.queued = 0;
	p->counters.in_flight = 0;
	p->changes++;
	pthread_mutex_unlock(&p->mu);
	for (; failed != NULL; failed = next)
	{
		next = failed->qnext;
		call_back(failed);
	}
	for (; jobs != NULL; jobs = next)
	{
		next = jobs->next;
		bcd_job_clear_result(jobs);
		bcd_job_fail(jobs, BCD_CODE_UNAVAILABLE, BCD_RESULT_FAILED, "bcd is stopping");
		call_back(jobs);
	}
}

/* Free the provisioner (stopped first). */
void
bcd_provisioner_free(bcd_provisioner *p)
{
	if (p == NULL)
		return;
	bcd_provisioner_stop(p);
	bcd_workers_free(p->workers);
	if (p->wake[0] >= 0)
		close(p->wake[0]);
	if (p->wake[1] >= 0)
		close(p->wake[1]);
	bcd_node_free(p->node);
	free(p->crl);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->rmu);
	free(p);
}

/* Publish cred as the node credential (NULL: none). */
void
bcd_provisioner_publish(bcd_provisioner *p, const bcd_credential *cred)
{
	if (p == NULL)
		return;
	bcd_node_publish(p->node, cred);
	pthread_mutex_lock(&p->rmu);
	if (atomic_load(&p->revoked) && cred != NULL && strcmp(cred->serial, p->revoked_serial) != 0)
	{
		atomic_store(&p->revoked, 0);
		bcd_log("revocation: the node certificate is now %s (not the revoked %s): bcd serves "
				"again", cred->serial, p->revoked_serial);
	}
	pthread_mutex_unlock(&p->rmu);
	pthread_mutex_lock(&p->mu);
	p->changes++;
	pthread_mutex_unlock(&p->mu);
	changed(p);
}

/* The main thread starts (on 1) or ends (on 0) a renewal of the node credential. */
void
bcd_provisioner_renewing(bcd_provisioner *p, int on)
{
	if (p != NULL)
		bcd_node_renewing(p->node, on);
}

/* The node is quarantined (on 1) or attested again (on 0): provisioner.h. */
void
bcd_provisioner_quarantine(bcd_provisioner *p, int on)
{
	if (p == NULL || atomic_exchange(&p->quarantined, on ? 1 : 0) == (on ? 1 : 0))
		return;
	pthread_mutex_lock(&p->mu);
	p->changes++;
	pthread_mutex_unlock(&p->mu);
	changed(p);
}

/* 1 while the node is quarantined (provisioner.h). */
int
bcd_provisioner_quarantined(bcd_provisioner *p)
{
	return p != NULL && atomic_load(&p->quarantined);
}

/* The node certificate serial is revoked (provisioner.h). */
void
bcd_provisioner_revoke(bcd_provisioner *p, const char *serial, const char *reason,
					   int64_t revoked_at, const char *source)
{
	bcd_node_snapshot node;
	int			taken = 0;
	char		at[32] = "?";
	time_t		t = (time_t) revoked_at;
	struct tm	tm;

	if (p == NULL)
		return;
	if (gmtime_r(&t, &tm) != NULL)
		strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
	bcd_node_take(p->node, &node);
	pthread_mutex_lock(&p->rmu);
	if (node.present && strcmp(node.serial, serial) == 0 &&
		!(atomic_load(&p->revoked) && strcmp(p->revoked_serial, serial) == 0))
	{
		snprintf(p->revoked_serial, sizeof(p->revoked_serial), "%s", serial);
		snprintf(p->revoked_reason, sizeof(p->revoked_reason), "%s", reason);
		snprintf(p->revoked_source, sizeof(p->revoked_source), "%s", source);
		p->revoked_at = revoked_at;
		atomic_store(&p->revoked, 1);
		taken = 1;
	}
	pthread_mutex_unlock(&p->rmu);
	bcd_node_release(&node);
	if (!taken)
		return;
	bcd_log("revocation: REVOKED: the node certificate %s was revoked at %s (reason %s), "
			"as %s says: bcd refuses every session credential and JWT-SVID and ends its "
			"Workload API streams until it holds a new node certificate", serial, at, reason,
			source);
	pthread_mutex_lock(&p->mu);
	p->changes++;
	pthread_mutex_unlock(&p->mu);
	changed(p);
}

/* Why every ask is refused now (provisioner.h). */
bcd_refusal
bcd_provisioner_refusal(bcd_provisioner *p, char *msg, size_t len)
{
	bcd_refusal r = BCD_REFUSAL_NONE;
	char		at[32] = "?";
	time_t		t;
	struct tm	tm;

	if (p == NULL)
		return r;
	if (atomic_load(&p->quarantined))
	{
		snprintf(msg, len, "%s", BCD_QUARANTINED_MESSAGE);
		return BCD_REFUSAL_QUARANTINED;
	}
	if (!atomic_load(&p->revoked))
		return r;
	pthread_mutex_lock(&p->rmu);
	if (atomic_load(&p->revoked))
	{
		t = (time_t) p->revoked_at;
		if (gmtime_r(&t, &tm) != NULL)
			strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(msg, len, "this node's certificate %s was revoked at %s (reason %s; said by "
				 "%s): nothing is issued until bcd holds a new node certificate (an operator's "
				 "revocation is in bc_join.audit_log; a new join token in bcd's --token-file "
				 "lets the node join again)", p->revoked_serial, at, p->revoked_reason, p->revoked_source);
		r = BCD_REFUSAL_REVOKED;
	}
	pthread_mutex_unlock(&p->rmu);
	return r;
}

/* Set the CRL the clients hand out (provisioner.h). */
void
bcd_provisioner_set_crl(bcd_provisioner *p, const unsigned char *der, size_t len)
{
	unsigned char *copy = malloc(len ? len : 1);

	if (p == NULL || copy == NULL)
	{
		free(copy);
		return;
	}
	memcpy(copy, der, len);
	pthread_mutex_lock(&p->rmu);
	free(p->crl);
	p->crl = copy;
	p->crl_len = len;
	atomic_fetch_add(&p->crl_gen, 1);
	pthread_mutex_unlock(&p->rmu);
}

/* A copy of the CRL and its generation (provisioner.h). */
unsigned long
bcd_provisioner_crl(bcd_provisioner *p, unsigned char **der, size_t *len)
{
	unsigned long gen;

	*der = NULL;
	*len = 0;
	pthread_mutex_lock(&p->rmu);
	gen = atomic_load(&p->crl_gen);
	if (p->crl != NULL && (*der = malloc(p->crl_len)) != NULL)
	{
		memcpy(*der, p->crl, p->crl_len);
		*len = p->crl_len;
	}
	pthread_mutex_unlock(&p->rmu);
	return *der != NULL ? gen : 0;
}

/* The CRL's generation (provisioner.h). */
unsigned long
bcd_provisioner_crl_gen(bcd_provisioner *p)
{
	return p != NULL ? atomic_load(&p->crl_gen) : 0;
}

/* A snapshot of the published node credential (bcd_node_release it). */
void
bcd_provisioner_node_take(bcd_provisioner *p, bcd_node_snapshot *out)
{
	bcd_node_take(p->node, out);
}

/* The provisioner's numbers into c; how often they or the node credential changed. */
unsigned long
bcd_provisioner_numbers(bcd_provisioner *p, bcd_counters *c)
{
	unsigned long changes;

	pthread_mutex_lock(&p->mu);
	c->queued = p->counters.queued;
	c->in_flight = p->counters.in_flight;
	c->max_provisioning = p->counters.max_provisioning;
	memcpy(c->provisionings, p->counters.provisionings, sizeof(c->provisionings));
	memcpy(c->jwt_fetches, p->counters.jwt_fetches, sizeof(c->jwt_fetches));
	c->quarantined = atomic_load(&p->quarantined);
	changes = p->changes;
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_lock(&p->rmu);
	c->revoked = atomic_load(&p->revoked);
	snprintf(c->revoked_serial, sizeof(c->revoked_serial), "%s", c->revoked ? p->revoked_serial : "");
	snprintf(c->revoked_reason, sizeof(c->revoked_reason), "%s", c->revoked ? p->revoked_reason : "");
	snprintf(c->revoked_source, sizeof(c->revoked_source), "%s", c->revoked ? p->revoked_source : "");
	c->revoked_at = c->revoked ? p->revoked_at : 0;
	c->crl_gen = atomic_load(&p->crl_gen);
	pthread_mutex_unlock(&p->rmu);
	return changes;
}

/* Call fn(arg) at every change of the numbers or the node credential (set before the start). */
void
bcd_provisioner_watch(bcd_provisioner *p, void (*fn) (void *arg), void *arg)
{
	p->watch = fn;
	p->watch_arg = arg;
}
