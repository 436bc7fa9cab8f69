/*
 * sessions.c: the socket server of `bcd run`: hooks ask it for session
 * credentials, one JSON request line and one JSON answer line per
 * connection (docs/sessions.md, "The host side").
 *
 * Threads.  The join loop and renewal keep the main thread.  One I/O thread
 * owns the socket and every connection (poll(), non-blocking sockets), the
 * table of provisionings and all the counters, so none of those needs a
 * lock.  --max-provisioning worker threads, each with its own HTTPS client,
 * run provisionings (provision.c, workers.c).  The two sides meet in the
 * workers' queue and their list of finished provisionings (the I/O thread
 * is woken through a pipe), and in the published node credential (the main
 * thread publishes it after a join, a load or a renewal; the others
 * take a snapshot, the key referenced: node_credential.c).  The server's
 * state is this file's own; the workers' is workers.c's.
 *
 * Coalescing.  A provisioning is keyed by (session, context).  The first
 * caller creates it; every caller for the same key that arrives while it is
 * queued or running waits on it, and all of them get its one result: one
 * POST /v1/session however many hooks ask at once.  A result lives only as
 * long as that: the next caller after it is answered starts a new
 * provisioning (a new key, a new certificate; nothing is cached or kept
 * spare).  The credential is written into each waiter's directory (once per
 * distinct directory) by the I/O thread before it answers.
 *
 * JWT-SVIDs.  The Workload API's FetchJWTSVID is a second kind of
 * provisioning (job.h, bcd_server_fetch_jwt): keyed by (session, context,
 * sorted audiences), queued in the same FIFO, run by the same workers
 * (provision_jwt.c), its waiters called back; what it caches and how fast a
 * caller may ask is the Workload API's (workload/jwt_svid.c).
 *
 * Bounds.  At most --max-provisioning provisionings run at once; the others
 * wait in a FIFO (queued).  At most --max-queue callers wait for a
 * credential (the queue depth); the next one is answered busy (retryable)
 * at once.  At most --max-queue + 64 connections are open; beyond that a
 * connection is answered busy and closed.  A request line is at most 8 KiB
 * and must arrive within 5 s of the connection; a longer one is answered
 * bad-request, and what the caller still sends is read (1 MiB and 5 s at
 * most) before the connection is closed, so that it reads the answer rather
 * than a reset.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/delivery.h"
#include "core/json.h"
#include "core/local_socket.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/node_credential.h"
#include "core/sessions.h"
#include "core/signals.h"
#include "core/workers.h"
#include "workload/workload.h"

/* Where a connection is. */
typedef enum conn_state
{
	CONN_READING,				/* reading the request line */
	CONN_WAITING,				/* waiting for a provisioning */
	CONN_WRITING,				/* writing the answer, then closed (or drained) */
	CONN_DRAINING				/* answered: reading what the caller still sends, then closed */
} conn_state;

/* What bcd reads and discards after answering a caller that sent too much. */
#define BCD_SOCK_DRAIN_MAX (1024 * 1024)

/* One caller's connection (owned by the I/O thread). */
typedef struct bcd_conn
{
	int			fd;
	conn_state	state;
	double		deadline;		/* monotonic seconds, while reading or writing */
	char		in[BC_SOCK_REQUEST_MAX + 1];
	size_t		in_len;
	char	   *out;
	size_t		out_len;
	size_t		out_off;
	bcd_peer	peer;			/* who connected (SO_PEERCRED, /proc) */
	int			dirfd;			/* the delivery directory, while waiting */
	char	   *dir;
	dev_t		dir_dev;
	ino_t		dir_ino;
	int			delivered;		/* the credential is in dir */
	int			drain;			/* once answered, read the rest before closing */
	size_t		drained;		/* bytes read and discarded since */
	struct bcd_conn *next;		/* every connection */
	struct bcd_conn *wnext;		/* the waiters of one provisioning */
} bcd_conn;

/* The socket server of bcd run. */
struct bcd_server
{
	const bcd_service_keys *keys;
	char	   *socket_path;
	char	   *metrics_file;
	char	   *runtime_dir;
	bcd_listener sock;
	bcd_dir_id	own_dirs[2];	/* the socket's and the state directory: never a delivery's */
	int			n_own_dirs;
	int			wake[2];		/* the I/O thread's pipe: a job is done, a credential published */
	long		max_provisioning;
	long		max_queue;
	bcd_published_node *node;	/* the node credential, published by the main thread */
	bcd_workers *workers;
	pthread_t	io_thread;
	int			io_started;
	atomic_int	stopping;
	/* the I/O thread's */
	bcd_conn   *conns;
	long		n_conns;
	bcd_job    *jobs;
	bcd_job    *fifo_head;
	bcd_job    *fifo_tail;
	bcd_counters counters;
	int			metrics_dirty;
	double		metrics_next;
	unsigned long metrics_generation;
	/* the Workload API (workload.c): its server, and its requests for the I/O thread */
	bcd_workload *workload;
	pthread_mutex_t ext_mu;
	bcd_ext_waiter *ext_pending;
};

/* Seconds a caller has to send its request line, and we to write an answer. */
#define READ_TIMEOUT 5.0
#define WRITE_TIMEOUT 5.0
/* Shortest interval between two writes of --metrics-file, in seconds. */
#define METRICS_INTERVAL 0.25

/* ------------------------------------------------------------ connections */

/* Close and free a connection, taking it out of the list. */
static void
conn_close(bcd_server *s, bcd_conn *c)
{
	bcd_conn  **p;

	for (p = &s->conns; *p != NULL; p = &(*p)->next)
		if (*p == c)
		{
			*p = c->next;
			break;
		}
	close(c->fd);
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c->dir);
	free(c->out);
	free(c);
	s->n_conns--;
}

/*
 * Write what is left of c's answer; close c once it is written or on error.
 * A caller that may still be sending (c->drain: it was answered before its
 * request was read) is not closed at once: closing with unread data resets
 * the connection, and the caller would lose the answer.  Our side is shut
 * down (it reads the answer, then EOF) and what it sends is read and
 * discarded, BCD_SOCK_DRAIN_MAX bytes and READ_TIMEOUT at most.
 */
static void
conn_flush(bcd_server *s, bcd_conn *c)
{
	while (c->out_off < c->out_len)
	{
		ssize_t		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
							 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0)
			break;
		c->out_off += (size_t) n;
	}
	if (c->drain && c->out_off == c->out_len && shutdown(c->fd, SHUT_WR) == 0)
	{
		c->state = CONN_DRAINING;
		c->deadline = bcd_now_ms() / 1000.0 + READ_TIMEOUT;
		c->drained = 0;
		return;
	}
	conn_close(s, c);
}

/* Read and discard what c still sends; close it at EOF, on error or past the bound. */
static void
conn_drain(bcd_server *s, bcd_conn *c)
{
	for (;;)
	{
		ssize_t		n = read(c->fd, c->in, sizeof(c->in));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0 || (c->drained += (size_t) n) >= BCD_SOCK_DRAIN_MAX)
			break;
	}
	conn_close(s, c);
}

/* Answer c with doc (taken) as one line; c may be closed when this returns. */
static void
answer_doc(bcd_server *s, bcd_conn *c, json_t *doc)
{
	char	   *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
	char	   *grown;
	size_t		n;

	json_decref(doc);
	s->metrics_dirty = 1;
	if (text == NULL)
	{
		conn_close(s, c);
		return;
	}
	n = strlen(text);
	grown = realloc(text, n + 2);
	if (grown == NULL)
	{
		free(text);
		conn_close(s, c);
		return;
	}
	c->out = grown;
	c->out[n] = '\n';
	c->out[n + 1] = '\0';
	c->out_len = n + 1;
	c->out_off = 0;
	c->state = CONN_WRITING;
	c->deadline = bcd_now_ms() / 1000.0 + WRITE_TIMEOUT;
	conn_flush(s, c);
}

/* Answer c with an error: {"ok":false,"error":code,"message":...,"retryable":...}. */
static void
answer_error(bcd_server *s, bcd_conn *c, bcd_code code, const char *fmt,...)
	__attribute__((format(printf, 4, 5)));

/* Answer c with an error: {"ok":false,"error":code,"message":...,"retryable":...}. */
static void
answer_error(bcd_server *s, bcd_conn *c, bcd_code code, const char *fmt,...)
{
	char		message[768];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	s->counters.answers[code]++;
	answer_doc(s, c, json_pack("{s:b, s:s, s:s, s:b}", "ok", 0, "error", bcd_code_name(code),
							   "message", message, "retryable", bcd_code_retryable(code)));
}

/* ------------------------------------------------------------ provisioning */

/* Hand queued provisionings to the workers while fewer than --max-provisioning run. */
static void
dispatch(bcd_server *s)
{
	bcd_job    *job;

	while (s->fifo_head != NULL && s->counters.in_flight < s->max_provisioning)
	{
		job = s->fifo_head;
		s->fifo_head = job->qnext;
		if (s->fifo_head == NULL)
			s->fifo_tail = NULL;
		s->counters.queued--;
		s->counters.in_flight++;
		bcd_workers_submit(s->workers, job);
	}
}

/* Deliver job's credential to waiter w (written once per directory in seen) and answer it. */
static void
deliver_to(bcd_server *s, bcd_job *job, bcd_conn *w, bcd_dir_id *seen, size_t *n_seen)
{
	char	   *key_path = NULL;
	char	   *cert_path = NULL;
	char		err[512];
	size_t		i;
	int			written = 0;

	for (i = 0; seen != NULL && i < *n_seen; i++)
		if (seen[i].dev == w->dir_dev && seen[i].ino == w->dir_ino)
			written = 1;
	if (bcd_delivery_write(written ? -1 : w->dirfd, w->dir, job, &key_path, &cert_path,
						   err, sizeof(err)) != BC_OK)
	{
		answer_error(s, w, BCD_CODE_BAD_DIR, "cannot deliver into %s: %s", w->dir, err);
		return;
	}
	if (!written && seen != NULL)
		seen[(*n_seen)++] = (bcd_dir_id) {w->dir_dev, w->dir_ino};
	{
		char		who[BCD_PEER_EXE_MAX + BCD_PEER_UNIT_MAX + 64];

		bcd_peer_describe(&w->peer, who, sizeof(who));
		bcd_log("session %s%s%s: delivered %s (serial %s) into %s for %s", job->session,
				job->context[0] ? " context " : "", job->context, job->spiffe_id, job->serial,
				w->dir, who);
	}
	s->counters.answers[BCD_CODE_OK]++;
	answer_doc(s, w, json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "ok", 1,
							   "keyPath", key_path, "certPath", cert_path,
							   "notAfter", job->not_after, "spiffeId", job->spiffe_id,
							   "serial", job->serial, "session", job->session,
							   "context", job->context));
	free(key_path);
	free(cert_path);
}

/* A finished provisioning: count it, answer its waiters, forget it. */
static void
complete_job(bcd_server *s, bcd_job *job)
{
	bcd_job   **p;
	bcd_conn   *w;
	bcd_conn   *next;
	bcd_dir_id *seen;
	size_t		n_seen = 0;
	int			delivering;
	unsigned long *counted;

	s->counters.in_flight--;
	counted = job->kind == BCD_JOB_JWT_SVID ? s->counters.jwt_fetches : s->counters.provisionings;
	if (job->outcome < BCD_OUTCOME_COUNT)
		counted[job->outcome]++;
	if (job->dispatched > 1)
		counted[BCD_OUTCOME_REFUSED] += (unsigned long) (job->dispatched - 1);
	s->metrics_dirty = 1;
	for (p = &s->jobs; *p != NULL; p = &(*p)->next)
		if (*p == job)
		{
			*p = job->next;
			break;
		}
	delivering = job->code == BCD_CODE_OK;
	seen = delivering ? calloc((size_t) job->n_waiters, sizeof(*seen)) : NULL;
	for (w = job->waiters; w != NULL; w = next)
	{
		next = w->wnext;
		s->counters.waiting--;
		w->state = CONN_WRITING;	/* no longer waiting, whatever happens next */
		if (delivering)
			deliver_to(s, job, w, seen, &n_seen);
		else
			answer_error(s, w, job->code, "%s", job->message);
	}
	free(seen);
	while (job->ext_waiters != NULL)
	{
		bcd_ext_waiter *x = job->ext_waiters;

		job->ext_waiters = x->next;
		x->cb(x->arg, job);
		free(x);
	}
	bcd_job_clear_result(job);
	free(job);
	dispatch(s);
}

/* 1 when a and b are the same audiences in the same order. */
static int
same_audiences(const bcd_audiences *a, const bcd_audiences *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->v[i], b->v[i]) != 0)
			return 0;
	return 1;
}

/*
 * The provisioning of kind for (session, context), and for a JWT-SVID its
 * audiences (aud, sorted by the caller): found, or created and queued for
 * caller (whose process its request names); NULL on OOM.
 */
static bcd_job *
find_or_queue(bcd_server *s, bcd_job_kind kind, const char *session, const char *context,
			  const bcd_audiences *aud, const bcd_peer *caller)
{
	bcd_job    *job;

	for (job = s->jobs; job != NULL; job = job->next)
		if (job->kind == kind && strcmp(job->session, session) == 0 &&
			strcmp(job->context, context) == 0 &&
			(kind != BCD_JOB_JWT_SVID || same_audiences(&job->audience, aud)))
			return job;
	job = calloc(1, sizeof(*job));
	if (job == NULL)
		return NULL;
	job->kind = kind;
	if (kind == BCD_JOB_JWT_SVID)
		job->audience = *aud;
	snprintf(job->session, sizeof(job->session), "%s", session);
	snprintf(job->context, sizeof(job->context), "%s", context);
	job->caller = *caller;
	job->next = s->jobs;
	s->jobs = job;
	if (s->fifo_tail != NULL)
		s->fifo_tail->qnext = job;
	else
		s->fifo_head = job;
	s->fifo_tail = job;
	s->counters.queued++;
	return job;
}

/* The string member name of req: NULL when absent, *bad when not a string. */
static const char *
req_string(json_t *req, const char *name, int *bad)
{
	const char *s = bcd_json_str(req, name, NULL);

	if (s == NULL && json_object_get(req, name) != NULL)
		*bad = 1;
	return s;
}

/* {"op":"credential","session","context","dir"}: refuse, or wait for a provisioning. */
static void
handle_credential(bcd_server *s, bcd_conn *c, json_t *req)
{
	const char *key;
	json_t	   *value;
	int			bad = 0;
	const char *session = req_string(req, "session", &bad);
	const char *context = req_string(req, "context", &bad);
	const char *dir = req_string(req, "dir", &bad);
	bcd_node_snapshot node;
	char		err[768];
	struct stat st;
	bcd_job    *job;
	int			usable;

	json_object_foreach(req, key, value)
		if (strcmp(key, "op") != 0 && strcmp(key, "session") != 0 &&
			strcmp(key, "context") != 0 && strcmp(key, "dir") != 0)
			bad = 1;
	if (context == NULL)
		context = "";
	if (bad || session == NULL || dir == NULL)
	{
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "a credential request is {\"op\":\"credential\","
					 "\"session\":S,\"context\":C (optional),\"dir\":DIR}, strings only");
		return;
	}
	if (!bc_selector_valid(session, 1) || !bc_selector_valid(context, 0))
	{
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "the session (1 to 128) and context (0 to 128) "
					 "are made of A-Z a-z 0-9 . _ : - only");
		return;
	}
	bcd_node_take(s->node, &node);
	usable = bcd_node_usable(&node);
	if (!usable && node.present)
		snprintf(err, sizeof(err), "the node certificate of this host expired at %s; bcd is "
				 "renewing it or joining again", node.not_after_text);
	bcd_node_release(&node);
	if (!usable)
	{
		answer_error(s, c, BCD_CODE_NO_NODE_CREDENTIAL, "%s", node.present ? err :
					 "this host holds no node credential (bcd has not joined yet, or its "
					 "join was refused)");
		return;
	}
	if (s->counters.waiting >= s->max_queue)
	{
		answer_error(s, c, BCD_CODE_BUSY, "%ld callers are waiting already (--max-queue %ld); "
					 "try again shortly", s->counters.waiting, s->max_queue);
		return;
	}
	if (bcd_delivery_open(s->runtime_dir, s->own_dirs, s->n_own_dirs, dir, &c->dirfd, &c->dir, err, sizeof(err)) != BC_OK ||
		fstat(c->dirfd, &st) != 0)
	{
		answer_error(s, c, BCD_CODE_BAD_DIR, "%s", err);
		return;
	}
	c->dir_dev = st.st_dev;
	c->dir_ino = st.st_ino;
	job = find_or_queue(s, BCD_JOB_SESSION, session, context, NULL, &c->peer);
	if (job == NULL)
	{
		answer_error(s, c, BCD_CODE_FAILED, "out of memory");
		return;
	}
	c->state = CONN_WAITING;
	c->wnext = job->waiters;
	job->waiters = c;
	job->n_waiters++;
	s->counters.waiting++;
	s->metrics_dirty = 1;
	dispatch(s);
}

/* One request line of c (NUL-terminated in c->in): dispatch on its op. */
static void
handle_request(bcd_server *s, bcd_conn *c)
{
	json_error_t jerr;
	json_t	   *req = json_loadb(c->in, c->in_len, JSON_REJECT_DUPLICATES, &jerr);
	json_t	   *op = json_object_get(req, "op");
	bcd_node_snapshot node;
	char	   *text;

	if (!json_is_object(req) || !json_is_string(op))
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "the request is not a JSON object with an \"op\"");
	else if (strcmp(json_string_value(op), BC_SOCK_OP_CREDENTIAL) == 0)
		handle_credential(s, c, req);
	else if (strcmp(json_string_value(op), BC_SOCK_OP_STATUS) == 0 ||
			 strcmp(json_string_value(op), BC_SOCK_OP_METRICS) == 0)
	{
		bcd_node_take(s->node, &node);
		if (strcmp(json_string_value(op), BC_SOCK_OP_STATUS) == 0)
			answer_doc(s, c, bcd_status_json(&s->counters, &node));
		else
		{
			text = bcd_metrics_text(&s->counters, &node);
			answer_doc(s, c, text != NULL ? json_pack("{s:b, s:s}", "ok", 1, "metrics", text) : NULL);
			free(text);
		}
		bcd_node_release(&node);
	}
	else
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "unknown op (credential, status or metrics)");
	json_decref(req);
}

/* Read from c; handle its request once the line (or EOF) is in. */
static void
conn_read(bcd_server *s, bcd_conn *c)
{
	ssize_t		n;
	char	   *nl;

	n = read(c->fd, c->in + c->in_len, BC_SOCK_REQUEST_MAX - c->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n < 0 || (n == 0 && c->in_len == 0))
	{
		conn_close(s, c);
		return;
	}
	c->in_len += (size_t) n;
	c->in[c->in_len] = '\0';
	nl = memchr(c->in, '\n', c->in_len);
	if (nl != NULL)
	{
		*nl = '\0';
		c->in_len = (size_t) (nl - c->in);
	}
	if (nl != NULL || n == 0)
		handle_request(s, c);
	else if (c->in_len >= BC_SOCK_REQUEST_MAX)
	{
		c->drain = 1;
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "the request line is over %d bytes",
					 BC_SOCK_REQUEST_MAX);
	}
}

/* Answer a connection over the bound busy, best effort, and close it at once. */
static void
reject_now(bcd_server *s, int fd)
{
	static const char line[] = "{\"ok\":false,\"error\":\"busy\",\"message\":\"too many "
		"connections; try again shortly\",\"retryable\":true}\n";

	(void) !send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	s->counters.answers[BCD_CODE_BUSY]++;
	s->metrics_dirty = 1;
}

/* Accept every pending connection; check its peer (SO_PEERCRED) and its count. */
static void
accept_all(bcd_server *s)
{
	bcd_conn   *c;
	int			fd;

	for (;;)
	{
		fd = accept4(s->sock.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0)
		{
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				bcd_log("socket: accept: %s", strerror(errno));
			return;
		}
		if (s->n_conns >= s->max_queue + BCD_EXTRA_CONNS)
		{
			reject_now(s, fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL)
		{
			close(fd);
			continue;
		}
		c->fd = fd;
		c->dirfd = -1;
		c->state = CONN_READING;
		c->deadline = bcd_now_ms() / 1000.0 + READ_TIMEOUT;
		c->next = s->conns;
		s->conns = c;
		s->n_conns++;
		if (bcd_peer_read(fd, &c->peer) != BC_OK)
			c->peer.uid = (uid_t) -1;
		if (c->peer.uid != geteuid())
		{
			char		who[BCD_PEER_EXE_MAX + BCD_PEER_UNIT_MAX + 64];

			bcd_peer_describe(&c->peer, who, sizeof(who));
			bcd_log("socket: refused a caller of uid %ld, %s (this bcd serves uid %ld only)",
					(long) c->peer.uid, who, (long) geteuid());
			c->drain = 1;
			answer_error(s, c, BCD_CODE_FORBIDDEN, "this bcd serves uid %ld only; the caller "
						 "is uid %ld", (long) geteuid(), (long) c->peer.uid);
		}
	}
}

/* Call x back at once with a failed provisioning (code, message) and free it. */
static void
ext_fail(bcd_ext_waiter *x, bcd_code code, const char *message)
{
	bcd_job		job;

	memset(&job, 0, sizeof(job));
	job.kind = x->kind;
	snprintf(job.session, sizeof(job.session), "%s", x->session);
	snprintf(job.context, sizeof(job.context), "%s", x->context);
	job.code = code;
	job.outcome = BCD_OUTCOME_FAILED;
	snprintf(job.message, sizeof(job.message), "%s", message);
	x->cb(x->arg, &job);
	free(x);
}

/*
 * The Workload API's requests (bcd_server_provision, bcd_server_fetch_jwt):
 * each joins the provisioning of its key, found or queued, exactly as a
 * hook's credential request does; refused at once without a usable node
 * credential.
 */
static void
take_ext(bcd_server *s)
{
	bcd_ext_waiter *x;
	bcd_ext_waiter *next;
	bcd_node_snapshot node;
	bcd_job    *job;
	int			usable;

	pthread_mutex_lock(&s->ext_mu);
	x = s->ext_pending;
	s->ext_pending = NULL;
	pthread_mutex_unlock(&s->ext_mu);
	if (x == NULL)
		return;
	bcd_node_take(s->node, &node);
	usable = bcd_node_usable(&node);
	bcd_node_release(&node);
	for (; x != NULL; x = next)
	{
		next = x->next;
		x->next = NULL;
		if (!usable)
		{
			ext_fail(x, BCD_CODE_NO_NODE_CREDENTIAL, "this host holds no usable node credential");
			continue;
		}
		job = find_or_queue(s, x->kind, x->session, x->context, &x->audience, &x->caller);
		if (job == NULL)
		{
			ext_fail(x, BCD_CODE_FAILED, "out of memory");
			continue;
		}
		x->next = job->ext_waiters;
		job->ext_waiters = x;
	}
	s->metrics_dirty = 1;
	dispatch(s);
}

/* Fail every request the I/O thread has not taken (it is stopped). */
static void
drop_ext(bcd_server *s)
{
	bcd_ext_waiter *x;

	pthread_mutex_lock(&s->ext_mu);
	x = s->ext_pending;
	s->ext_pending = NULL;
	pthread_mutex_unlock(&s->ext_mu);
	while (x != NULL)
	{
		bcd_ext_waiter *next = x->next;

		ext_fail(x, BCD_CODE_UNAVAILABLE, "bcd is stopping");
		x = next;
	}
}

/* Take the finished provisionings from the workers and complete them. */
static void
take_done(bcd_server *s)
{
	bcd_job    *done;
	bcd_job    *next;
	char		buf[64];

	while (read(s->wake[0], buf, sizeof(buf)) > 0)
		;
	take_ext(s);
	done = bcd_workers_take_done(s->workers);
	for (; done != NULL; done = next)
	{
		next = done->qnext;
		complete_job(s, done);
	}
}

/* Rewrite --metrics-file when a number changed and the last write is old enough. */
static void
write_metrics(bcd_server *s, int force)
{
	bcd_node_snapshot node;

	if (s->metrics_file == NULL)
		return;
	bcd_node_take(s->node, &node);
	if (node.generation != s->metrics_generation)
		s->metrics_dirty = 1;
	if (s->metrics_dirty && (force || bcd_now_ms() / 1000.0 >= s->metrics_next))
	{
		if (bcd_metrics_write(s->metrics_file, &s->counters, &node) != BC_OK)
			bcd_log("cannot write the metrics file %s", s->metrics_file);
		s->metrics_dirty = 0;
		s->metrics_generation = node.generation;
		s->metrics_next = bcd_now_ms() / 1000.0 + METRICS_INTERVAL;
	}
	bcd_node_release(&node);
}

/* Close connections past their deadline (a request not sent in time: bad-request). */
static void
expire(bcd_server *s, double now)
{
	bcd_conn   *c;
	bcd_conn   *next;

	for (c = s->conns; c != NULL; c = next)
	{
		next = c->next;
		if (c->state == CONN_WAITING || c->deadline > now)
			continue;
		if (c->state == CONN_READING)
			answer_error(s, c, BCD_CODE_BAD_REQUEST, "no request line within %.0f s", READ_TIMEOUT);
		else
			conn_close(s, c);
	}
}

/* One round of the I/O loop: poll, then act on what is ready. */
static void
io_round(bcd_server *s, struct pollfd *pfd, bcd_conn **pc, size_t slots)
{
	double		now = bcd_now_ms() / 1000.0;
	double		wait = 1.0;
	bcd_conn   *c;
	int			n = 2;
	int			i;

	pfd[0] = (struct pollfd) {s->wake[0], POLLIN, 0};
	pfd[1] = (struct pollfd) {s->sock.fd, POLLIN, 0};
	for (c = s->conns; c != NULL; c = c->next)
	{
		if (c->state == CONN_WAITING)
			continue;
		if ((size_t) n >= slots)
			break;				/* cannot happen: accept_all keeps the count below slots */
		pfd[n] = (struct pollfd) {c->fd, c->state == CONN_WRITING ? POLLOUT : POLLIN, 0};
		pc[n++] = c;
		if (c->deadline - now < wait)
			wait = c->deadline - now;
	}
	if (s->metrics_file != NULL && s->metrics_dirty && s->metrics_next - now < wait)
		wait = s->metrics_next - now;
	if (poll(pfd, (nfds_t) n, wait > 0 ? (int) (wait * 1000) + 1 : 0) < 0)
	{
		if (errno != EINTR)
			bcd_log("socket: poll: %s", strerror(errno));
		return;
	}
	if (pfd[0].revents != 0)
		take_done(s);
	for (i = 2; i < n; i++)
	{
		if (pfd[i].revents == 0)
			continue;
		if (pc[i]->state == CONN_READING)
			conn_read(s, pc[i]);
		else if (pc[i]->state == CONN_DRAINING)
			conn_drain(s, pc[i]);
		else
			conn_flush(s, pc[i]);
	}
	if (pfd[1].revents != 0)
		accept_all(s);
	expire(s, bcd_now_ms() / 1000.0);
	write_metrics(s, 0);
}

/* Answer everyone still waiting that bcd is stopping; free every connection and job. */
static void
io_shutdown(bcd_server *s)
{
	bcd_job    *job;
	bcd_conn   *w;

	while ((job = s->jobs) != NULL)
	{
		s->jobs = job->next;
		while ((w = job->waiters) != NULL)
		{
			job->waiters = w->wnext;
			s->counters.waiting--;
			w->state = CONN_WRITING;
			answer_error(s, w, BCD_CODE_UNAVAILABLE, "bcd is stopping; try again");
		}
		while (job->ext_waiters != NULL)
		{
			bcd_ext_waiter *x = job->ext_waiters;

			job->ext_waiters = x->next;
			ext_fail(x, BCD_CODE_UNAVAILABLE, "bcd is stopping");
		}
		bcd_job_clear_result(job);
		free(job);
	}
	s->counters.queued = 0;
	s->counters.in_flight = 0;
	while (s->conns != NULL)
		conn_close(s, s->conns);
	write_metrics(s, 1);
}

/* The I/O thread. */
static void *
io_main(void *arg)
{
	bcd_server *s = arg;
	size_t		slots = (size_t) (s->max_queue + BCD_EXTRA_CONNS + 8);
	struct pollfd *pfd = calloc(slots, sizeof(*pfd));
	bcd_conn  **pc = calloc(slots, sizeof(*pc));

	if (pfd == NULL || pc == NULL)
		bcd_log("socket: out of memory; not serving");
	else
	{
		s->metrics_dirty = 1;
		write_metrics(s, 1);
		while (!atomic_load(&s->stopping))
			io_round(s, pfd, pc, slots);
	}
	io_shutdown(s);
	free(pfd);
	free(pc);
	return NULL;
}

/* ------------------------------------------------------------ its life */

/* Wake the I/O thread (a byte in its pipe; a full pipe already wakes it). */
static void
wake_io(bcd_server *s)
{
	char		c = 1;

	(void) !write(s->wake[1], &c, 1);
}

/* Queue a Workload API's request of kind for the I/O thread (take_ext); BC_OK or BC_ENOMEM. */
static int
queue_ext(bcd_server *s, bcd_job_kind kind, const char *session, const char *context,
		  const bcd_audiences *aud, const bcd_peer *caller, bcd_job_cb cb, void *arg)
{
	bcd_ext_waiter *x = calloc(1, sizeof(*x));

	if (x == NULL)
		return BC_ENOMEM;
	x->cb = cb;
	x->arg = arg;
	x->kind = kind;
	if (aud != NULL)
		x->audience = *aud;
	snprintf(x->session, sizeof(x->session), "%s", session);
	snprintf(x->context, sizeof(x->context), "%s", context);
	if (caller != NULL)
		x->caller = *caller;
	pthread_mutex_lock(&s->ext_mu);
	x->next = s->ext_pending;
	s->ext_pending = x;
	pthread_mutex_unlock(&s->ext_mu);
	wake_io(s);
	return BC_OK;
}

/*
 * Ask for the provisioning of (session, context) on behalf of caller, from
 * any thread (the Workload API's): cb(arg, job) is called by the I/O thread
 * when it is done (or at once, failed, when it cannot start); the job and
 * its result are valid during the call only.  Coalesced with every other
 * caller of the same key, hooks included.  BC_OK, or BC_ENOMEM (no call).
 */
int
bcd_server_provision(bcd_server *s, const char *session, const char *context,
					 const bcd_peer *caller, bcd_job_cb cb, void *arg)
{
	return queue_ext(s, BCD_JOB_SESSION, session, context, NULL, caller, cb, arg);
}

/*
 * Ask for a JWT-SVID of (session, context) for aud (sorted, checked) on
 * behalf of caller, from any thread, exactly as bcd_server_provision asks
 * for a session credential: the same queue and --max-provisioning workers,
 * coalesced with every request of the same (session, context, audiences);
 * cb(arg, job) gets job->token, token_ttl and spiffe_id, or the failure.
 */
int
bcd_server_fetch_jwt(bcd_server *s, const char *session, const char *context,
					 const bcd_audiences *aud, const bcd_peer *caller, bcd_job_cb cb, void *arg)
{
	return queue_ext(s, BCD_JOB_JWT_SVID, session, context, aud, caller, cb, arg);
}

/* A snapshot of the published node credential (bcd_node_release it), from any thread. */
void
bcd_server_node_take(bcd_server *s, bcd_node_snapshot *out)
{
	bcd_node_take(s->node, out);
}

/* Publish cred as the node credential the server issues with (NULL: none). */
void
bcd_server_publish(bcd_server *s, const bcd_credential *cred)
{
	if (s == NULL)
		return;
	bcd_node_publish(s->node, cred);
	wake_io(s);
}

/* The main thread starts (on 1) or ends (on 0) a renewal (node_credential.c). */
void
bcd_server_renewing(bcd_server *s, int on)
{
	if (s != NULL)
		bcd_node_renewing(s->node, on);
}

/*
 * Start the socket server of bcd run: the socket (local_socket.c), initial
 * (when not NULL) published before any caller is read, the workers (one
 * HTTPS client each), then the I/O thread.  BC_OK with *out, or an error in
 * err (the socket could not be made safely, ...) and nothing left behind.
 */
int
bcd_server_start(const bcd_run_opts *o, const bcd_service_keys *keys,
				 const bcd_credential *initial, bcd_server **out, char *err, size_t errlen)
{
	bcd_server *s = calloc(1, sizeof(*s));
	struct stat st;
	int			rtfd = -1;
	int			rc = BC_ENOMEM;

	*out = NULL;
	snprintf(err, errlen, "out of memory");
	if (s == NULL)
		return BC_ENOMEM;
	s->keys = keys;
	pthread_mutex_init(&s->ext_mu, NULL);
	s->sock.fd = s->sock.dirfd = s->wake[0] = s->wake[1] = -1;
	s->max_provisioning = o->max_provisioning;
	s->max_queue = o->max_queue;
	s->counters.max_provisioning = o->max_provisioning;
	s->counters.max_queue = o->max_queue;
	s->runtime_dir = bcd_runtime_dir();
	s->node = bcd_node_new();
	if (s->runtime_dir == NULL || s->node == NULL ||
		(o->metrics_file != NULL && (s->metrics_file = strdup(o->metrics_file)) == NULL))
		goto fail;
	rc = BC_EINVAL;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0)
		goto fail;
	if (bcd_runtime_dir_open(s->runtime_dir, &rtfd, err, errlen) != BC_OK ||
		bcd_socket_daemon_path(o->socket, o->state_dir, &s->socket_path, err, errlen) != BC_OK ||
		bcd_socket_listen(s->socket_path, s->runtime_dir, rtfd, o->socket == NULL, &s->sock,
						  err, errlen) != BC_OK)
		goto fail;
	/* no delivery goes into (or under) the socket's directory or the state directory */
	if (s->sock.have_dir)
		s->own_dirs[0] = s->sock.dir;
	if (stat(o->state_dir, &st) == 0)
		s->own_dirs[1] = (bcd_dir_id) {st.st_dev, st.st_ino};
	s->n_own_dirs = 2;
	/* the Workload API: with a rule or a --workload-api PATH (no rule: no identity to give) */
	if (o->workload_api != NULL ? strcmp(o->workload_api, "off") != 0 : o->n_workload_rules > 0)
	{
		rc = bcd_workload_start(o, keys, s->socket_path, s->runtime_dir, rtfd, s,
								&s->workload, err, errlen);
		if (rc != BC_OK)
			goto fail;
		rc = BC_EINVAL;
	}
	close(rtfd);
	rtfd = -1;
	if (initial != NULL)
		bcd_node_publish(s->node, initial);
	rc = bcd_workers_start(s->max_provisioning, o->gateway, o->gateway_ca, keys, s->node,
						   s->wake[1], &s->workers, err, errlen);
	if (rc != BC_OK)
		goto fail;
	rc = BC_EINVAL;
	if (pthread_create(&s->io_thread, NULL, io_main, s) != 0)
	{
		snprintf(err, errlen, "cannot start the socket thread");
		goto fail;
	}
	s->io_started = 1;
	bcd_workload_run(s->workload);
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
	if (s == NULL)
		return;
	bcd_stop_now();
	bcd_workload_stop(s->workload);	/* its threads: no new request after this */
	bcd_workers_stop(s->workers);
	atomic_store(&s->stopping, 1);
	if (s->io_started)
	{
		wake_io(s);
		pthread_join(s->io_thread, NULL);
	}
	drop_ext(s);				/* requests the I/O thread never saw: called back, failed */
	bcd_workload_free(s->workload);	/* every call back has been made */
	bcd_workers_free(s->workers);
	bcd_socket_close(&s->sock, s->socket_path);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	bcd_node_free(s->node);
	free(s->socket_path);
	free(s->metrics_file);
	free(s->runtime_dir);
	pthread_mutex_destroy(&s->ext_mu);
	free(s);
}

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry point (test/fuzz/fuzz_sock_line.c), not used by bcd: what a
 * caller sends on a connection (data, n bytes, then EOF) read and answered
 * by conn_read() and handle_request() exactly as the I/O thread does, by a
 * server that holds no node credential and runs no worker (so a valid
 * credential request ends at no-node-credential).  The answer line is
 * written into answer (NUL-terminated, truncated to cap); returns its
 * length, or -1 when there was no answer or the connection could not be made.
 */
long
bcd_sessions_fuzz_line(const unsigned char *data, size_t n, char *answer, size_t cap)
{
	bcd_server	s;
	bcd_conn   *c;
	int			sv[2];
	size_t		off = 0;
	ssize_t		got;
	long		len = 0;

	if (cap == 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return -1;
	answer[0] = '\0';
	(void) fcntl(sv[0], F_SETFL, O_NONBLOCK);
	(void) fcntl(sv[1], F_SETFL, O_NONBLOCK);
	while (off < n && (got = write(sv[1], data + off, n - off)) > 0)
		off += (size_t) got;
	(void) shutdown(sv[1], SHUT_WR);
	memset(&s, 0, sizeof(s));
	s.max_queue = 1;
	s.wake[0] = s.wake[1] = -1;
	s.node = bcd_node_new();
	c = calloc(1, sizeof(*c));
	if (s.node == NULL || c == NULL)
	{
		free(c);
		bcd_node_free(s.node);
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	c->fd = sv[0];
	c->dirfd = -1;
	c->state = CONN_READING;
	s.conns = c;
	s.n_conns = 1;
	/* conn_read() reads once per call, as after each poll() */
	for (int i = 0; i < 4 && s.n_conns == 1 && c->state == CONN_READING; i++)
		conn_read(&s, c);
	if (s.n_conns == 1)
		conn_close(&s, c);
	while ((size_t) len + 1 < cap && (got = read(sv[1], answer + len, cap - 1 - (size_t) len)) > 0)
		len += got;
	answer[len] = '\0';
	close(sv[1]);
	bcd_node_free(s.node);
	return len > 0 ? len : -1;
}
#endif							/* BC_TEST_BUILD */
