/*
 * server.c: the life of bcd's socket server (sessions.c serves the
 * connections): start and stop, the published node credential, and the
 * worker threads that run provisionings (provision.c).
 *
 * One mutex guards what the threads share: the workers' queue (ready), the
 * finished provisionings (done: the I/O thread is woken through a pipe and
 * takes them) and the node credential the main thread publishes after a
 * join, a load or a renewal; the others take a snapshot with the key
 * referenced, so a renewal never frees a key a worker is signing with.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sessions.h"

/* Wake the I/O thread (a byte in its pipe; a full pipe already wakes it). */
void
bcd_wake_io(bcd_server *s)
{
	char		c = 1;

	(void) !write(s->wake[1], &c, 1);
}

/* A copy of the published node credential (its key referenced); release with bcd_node_release. */
void
bcd_node_take(bcd_server *s, bcd_node_snapshot *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->node;
	if (out->key != NULL && EVP_PKEY_up_ref(out->key) != 1)
	{
		out->key = NULL;
		out->present = 0;
	}
	pthread_mutex_unlock(&s->lock);
}

/* Release a snapshot. */
void
bcd_node_release(bcd_node_snapshot *n)
{
	EVP_PKEY_free(n->key);
	n->key = NULL;
}

/* 1 when the snapshot holds a node credential that has not expired. */
int
bcd_node_usable(const bcd_node_snapshot *n)
{
	return n->present && (int64_t) time(NULL) < n->not_after;
}

/* Publish cred as the node credential the server issues with (NULL: none). */
void
bcd_server_publish(bcd_server *s, const bcd_credential *cred)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	EVP_PKEY_free(s->node.key);
	s->node.key = NULL;
	s->node.present = 0;
	if (cred != NULL && cred->key != NULL && EVP_PKEY_up_ref(cred->key) == 1)
	{
		s->node.key = cred->key;
		s->node.present = 1;
		snprintf(s->node.serial, sizeof(s->node.serial), "%s", cred->serial);
		snprintf(s->node.spiffe_id, sizeof(s->node.spiffe_id), "%s", cred->spiffe_id);
		snprintf(s->node.not_after_text, sizeof(s->node.not_after_text), "%s",
				 cred->not_after_text);
		s->node.not_after = cred->not_after;
	}
	s->node.generation++;
	pthread_mutex_unlock(&s->lock);
	bcd_wake_io(s);
}

/* Run job on a worker: provision, and once more if a renewal replaced the node key meanwhile. */
static void
run_job(bcd_server *s, bcd_http *http, bcd_job *job)
{
	bcd_node_snapshot node;
	unsigned long generation;

	bcd_node_take(s, &node);
	job->outcome = BCD_OUTCOME_COUNT;
	if (!bcd_node_usable(&node))
	{
		job->code = BCD_CODE_NO_NODE_CREDENTIAL;
		snprintf(job->message, sizeof(job->message), "this host holds no valid node credential");
		bcd_node_release(&node);
		return;
	}
	generation = node.generation;
	bcd_provision(s->keys, http, &node, job);
	bcd_node_release(&node);
	if (job->code != BCD_CODE_REFUSED)
		return;
	bcd_node_take(s, &node);
	if (bcd_node_usable(&node) && node.generation != generation)
	{
		bcd_log("session %s: the node credential was renewed meanwhile; asking again",
				job->session);
		job->code = BCD_CODE_OK;
		job->message[0] = '\0';
		pthread_mutex_lock(&s->lock);
		job->dispatched++;		/* counts the refused attempt (read by the I/O thread) */
		pthread_mutex_unlock(&s->lock);
		bcd_provision(s->keys, http, &node, job);
	}
	bcd_node_release(&node);
}

/* Arguments of a worker thread. */
typedef struct worker_arg
{
	bcd_server *s;
	bcd_http   *http;
} worker_arg;

/* A worker: take a provisioning, run it, hand it back to the I/O thread. */
static void *
worker_main(void *arg)
{
	worker_arg	wa = *(worker_arg *) arg;
	bcd_server *s = wa.s;
	bcd_job    *job;

	free(arg);
	for (;;)
	{
		pthread_mutex_lock(&s->lock);
		while (!s->stop_workers && s->ready_head == NULL)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->stop_workers)
		{
			pthread_mutex_unlock(&s->lock);
			return NULL;
		}
		job = s->ready_head;
		s->ready_head = job->qnext;
		if (s->ready_head == NULL)
			s->ready_tail = NULL;
		pthread_mutex_unlock(&s->lock);
		run_job(s, wa.http, job);
		pthread_mutex_lock(&s->lock);
		job->qnext = s->done;
		s->done = job;
		pthread_mutex_unlock(&s->lock);
		bcd_wake_io(s);
	}
}

/* Start the threads: the workers, then the I/O thread. */
static int
start_threads(bcd_server *s, char *err, size_t errlen)
{
	worker_arg *wa;
	long		i;

	s->workers = calloc((size_t) s->max_provisioning, sizeof(*s->workers));
	if (s->workers == NULL)
		return BC_ENOMEM;
	for (i = 0; i < s->max_provisioning; i++)
	{
		wa = malloc(sizeof(*wa));
		if (wa == NULL)
			return BC_ENOMEM;
		wa->s = s;
		wa->http = s->https[i];
		if (pthread_create(&s->workers[i], NULL, worker_main, wa) != 0)
		{
			free(wa);
			snprintf(err, errlen, "cannot start a worker thread");
			return BC_EINVAL;
		}
		s->n_workers++;
	}
	if (pthread_create(&s->io_thread, NULL, bcd_io_main, s) != 0)
	{
		snprintf(err, errlen, "cannot start the socket thread");
		return BC_EINVAL;
	}
	s->io_started = 1;
	return BC_OK;
}

/*
 * Start the socket server of bcd run: the socket (local_socket.c), one
 * HTTPS client per worker, initial (when not NULL) published before any
 * caller is read, the threads.  BC_OK with *out, or an error in err (the
 * socket could not be made safely, ...) and nothing left behind.
 */
int
bcd_server_start(const bcd_run_opts *o, const bcd_service_keys *keys,
				 const bcd_credential *initial, bcd_server **out, char *err, size_t errlen)
{
	bcd_server *s = calloc(1, sizeof(*s));
	struct stat st;
	long		i;
	int			rtfd = -1;
	int			rc = BC_ENOMEM;

	*out = NULL;
	snprintf(err, errlen, "out of memory");
	if (s == NULL)
		return BC_ENOMEM;
	s->keys = keys;
	s->sock.fd = s->sock.dirfd = s->wake[0] = s->wake[1] = -1;
	s->max_provisioning = o->max_provisioning;
	s->max_queue = o->max_queue;
	s->counters.max_provisioning = o->max_provisioning;
	s->counters.max_queue = o->max_queue;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->sync_ready = 1;
	s->runtime_dir = bcd_runtime_dir();
	if (s->runtime_dir == NULL ||
		(o->metrics_file != NULL && (s->metrics_file = strdup(o->metrics_file)) == NULL) ||
		(s->https = calloc((size_t) s->max_provisioning, sizeof(*s->https))) == NULL)
		goto fail;
	rc = BC_EINVAL;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0)
		goto fail;
	for (i = 0; i < s->max_provisioning; i++, s->n_https++)
		if ((s->https[i] = bcd_http_new(o->gateway, o->gateway_ca, err, errlen)) == NULL)
			goto fail;
	if (bcd_runtime_dir_open(s->runtime_dir, &rtfd, err, errlen) != BC_OK ||
		bcd_socket_daemon_path(o->socket, o->state_dir, &s->socket_path, err, errlen) != BC_OK ||
		bcd_socket_listen(s->socket_path, s->runtime_dir, rtfd, &s->sock, err, errlen) != BC_OK)
		goto fail;
	/* no delivery goes into (or under) the socket's directory or the state directory */
	if (s->sock.have_dir)
		s->own_dirs[0] = s->sock.dir;
	if (stat(o->state_dir, &st) == 0)
		s->own_dirs[1] = (bcd_dir_id) {st.st_dev, st.st_ino};
	s->n_own_dirs = 2;
	close(rtfd);
	rtfd = -1;
	if (initial != NULL)
		bcd_server_publish(s, initial);
	rc = start_threads(s, err, errlen);
	if (rc != BC_OK)
		goto fail;
	*out = s;
	return BC_OK;
fail:
	if (rtfd >= 0)
		close(rtfd);
	bcd_server_stop(s);
	return rc;
}

/* Stop the server: the workers (an HTTPS request in flight is aborted), then the I/O thread. */
void
bcd_server_stop(bcd_server *s)
{
	long		i;

	if (s == NULL)
		return;
	if (s->sync_ready)
	{
		bcd_stop_now();
		pthread_mutex_lock(&s->lock);
		s->stop_workers = 1;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
	for (i = 0; i < s->n_workers; i++)
		pthread_join(s->workers[i], NULL);
	atomic_store(&s->stopping, 1);
	if (s->io_started)
	{
		bcd_wake_io(s);
		pthread_join(s->io_thread, NULL);
	}
	bcd_socket_close(&s->sock, s->socket_path);
	for (i = 0; i < s->n_https; i++)
		bcd_http_free(s->https[i]);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	EVP_PKEY_free(s->node.key);
	if (s->sync_ready)
	{
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->cond);
	}
	free(s->workers);
	free(s->https);
	free(s->socket_path);
	free(s->metrics_file);
	free(s->runtime_dir);
	free(s);
}
