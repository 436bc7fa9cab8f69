/*
 * workers.c: the provisioner's worker threads.  Each has its own HTTPS
 * client; it takes a provisioning from the queue, runs it (a session
 * credential: provision.c; a JWT-SVID: provision_jwt.c)
 * with a snapshot of the published node credential (node_credential.c),
 * and hands it back on the done list, waking the provisioner's thread
 * (provisioner.c) through its pipe.  One mutex guards the queue, the done list and the stop
 * flag; the state is this file's own.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/log.h"
#include "core/provision.h"
#include "core/workers.h"

/* The workers and what they share. */
struct bcd_workers
{
	const bcd_service_keys *keys;
	bcd_published_node *node;
	int			wake_fd;		/* written when a provisioning is done */
	pthread_t  *threads;
	long		n_threads;
	bcd_http  **https;			/* one per worker */
	long		n_https;
	/* guarded by lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int			stop;
	bcd_job    *ready_head;
	bcd_job    *ready_tail;
	bcd_job    *done;
};

/* Arguments of a worker thread. */
typedef struct worker_arg
{
	bcd_workers *w;
	bcd_http   *http;
} worker_arg;

/* Wake the provisioner's thread (a byte in its pipe; a full pipe already wakes it). */
static void
wake(bcd_workers *w)
{
	char		c = 1;

	(void) !write(w->wake_fd, &c, 1);
}

/* The longest a refused provisioning waits for a renewal under way to be published. */
#define BCD_RENEWAL_WAIT 15.0

/* Run job's kind of provisioning with node: a session credential or a JWT-SVID. */
static void
provision(bcd_workers *w, bcd_http *http, const bcd_node_snapshot *node, bcd_job *job)
{
	if (job->kind == BCD_JOB_JWT_SVID)
		bcd_provision_jwt(w->keys, http, node, job);
	else
		bcd_provision(w->keys, http, node, job);
}

/*
 * Run job on a worker: provision, and once more if a renewal replaced the
 * node key meanwhile, or replaces it within BCD_RENEWAL_WAIT s when one is
 * under way (the service revokes the old certificate before bcd has stored
 * and published the new one).
 */
static void
run_job(bcd_workers *w, bcd_http *http, bcd_job *job)
{
	bcd_node_snapshot node;
	unsigned long generation;

	bcd_node_take(w->node, &node);
	job->result = BCD_RESULT_COUNT;
	if (!bcd_node_usable(&node))
	{
		job->code = BCD_CODE_NO_NODE_CREDENTIAL;
		snprintf(job->message, sizeof(job->message), "this host holds no valid node credential");
		bcd_node_release(&node);
		return;
	}
	generation = node.generation;
	provision(w, http, &node, job);
	bcd_node_release(&node);
	if (job->code != BCD_CODE_REFUSED)
		return;
	/* refused while a renewal revoked the certificate and is being stored */
	(void) bcd_node_wait_renewal(w->node, generation, BCD_RENEWAL_WAIT);
	bcd_node_take(w->node, &node);
	if (bcd_node_usable(&node) && node.generation != generation)
	{
		bcd_log("session %s: the node credential was renewed meanwhile; asking again",
				job->session);
		job->code = BCD_CODE_OK;
		job->message[0] = '\0';
		pthread_mutex_lock(&w->lock);
		job->dispatched++;		/* counts the refused attempt (read by the provisioner) */
		pthread_mutex_unlock(&w->lock);
		provision(w, http, &node, job);
	}
	bcd_node_release(&node);
}

/* A worker: take a provisioning, run it, hand it back to the provisioner's thread. */
static void *
worker_main(void *arg)
{
	worker_arg	wa = *(worker_arg *) arg;
	bcd_workers *w = wa.w;
	bcd_job    *job;

	free(arg);
	for (;;)
	{
		pthread_mutex_lock(&w->lock);
		while (!w->stop && w->ready_head == NULL)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
		{
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		job = w->ready_head;
		w->ready_head = job->qnext;
		if (w->ready_head == NULL)
			w->ready_tail = NULL;
		pthread_mutex_unlock(&w->lock);
		run_job(w, wa.http, job);
		pthread_mutex_lock(&w->lock);
		job->qnext = w->done;
		w->done = job;
		pthread_mutex_unlock(&w->lock);
		wake(w);
	}
}

/*
 * Start n workers, each with an HTTPS client of gateway (gateway_ca pinned),
 * signing with the node credential published in node.  BC_OK with *out, or
 * an error in err and nothing left behind.
 */
int
bcd_workers_start(long n, const char *gateway, const char *gateway_ca,
				  const bcd_service_keys *keys, bcd_published_node *node, int wake_fd,
				  bcd_workers **out, char *err, size_t errlen)
{
	bcd_workers *w = calloc(1, sizeof(*w));
	worker_arg *wa;
	long		i;

	*out = NULL;
	snprintf(err, errlen, "out of memory");
	if (w == NULL)
		return BC_ENOMEM;
	w->keys = keys;
	w->node = node;
	w->wake_fd = wake_fd;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->threads = calloc((size_t) n, sizeof(*w->threads));
	w->https = calloc((size_t) n, sizeof(*w->https));
	if (w->threads == NULL || w->https == NULL)
		goto fail;
	for (i = 0; i < n; i++, w->n_https++)
		if ((w->https[i] = bcd_http_new(gateway, gateway_ca, err, errlen)) == NULL)
			goto fail;
	for (i = 0; i < n; i++)
	{
		wa = malloc(sizeof(*wa));
		if (wa == NULL)
			goto fail;
		wa->w = w;
		wa->http = w->https[i];
		if (pthread_create(&w->threads[i], NULL, worker_main, wa) != 0)
		{
			free(wa);
			snprintf(err, errlen, "cannot start a worker thread");
			goto fail;
		}
		w->n_threads++;
	}
	*out = w;
	return BC_OK;
fail:
	bcd_workers_free(w);
	return BC_EINVAL;
}

/* Queue job for the next free worker. */
void
bcd_workers_submit(bcd_workers *w, bcd_job *job)
{
	pthread_mutex_lock(&w->lock);
	job->dispatched = 1;
	job->qnext = NULL;
	if (w->ready_tail != NULL)
		w->ready_tail->qnext = job;
	else
		w->ready_head = job;
	w->ready_tail = job;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* The provisionings done since the last call (a list through qnext), or NULL. */
bcd_job *
bcd_workers_take_done(bcd_workers *w)
{
	bcd_job    *done;

	pthread_mutex_lock(&w->lock);
	done = w->done;
	w->done = NULL;
	pthread_mutex_unlock(&w->lock);
	return done;
}

/*
 * Stop and join the workers (bcd_stop_now first aborts a request in
 * flight).  The queue stays usable, so the provisioner may still submit and
 * take until it stops too; then bcd_workers_free.
 */
void
bcd_workers_stop(bcd_workers *w)
{
	long		i;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < w->n_threads; i++)
		pthread_join(w->threads[i], NULL);
	w->n_threads = 0;
}

/* Release the stopped workers. */
void
bcd_workers_free(bcd_workers *w)
{
	long		i;

	if (w == NULL)
		return;
	bcd_workers_stop(w);
	for (i = 0; i < w->n_https; i++)
		bcd_http_free(w->https[i]);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w->threads);
	free(w->https);
	free(w);
}
