/*
 * sessions.c: the hooks' socket server of `bcd run`: hooks ask it for
 * session credentials, one JSON request line and one JSON answer line per
 * connection (docs/sessions.md, "The host side").  It is a client of the
 * provisioner (provisioner.c), which the daemon hands it, as it hands it
 * to the Workload API.
 *
 * Threads.  One I/O thread owns the socket and every connection (poll(),
 * non-blocking sockets), the hooks waiting for each provisioning and the
 * server's own numbers, so none of those needs a lock.  It asks the
 * provisioner for a provisioning once per key that hooks wait for; the
 * provisioner's thread calls back with the finished provisioning, which is
 * held and handed to the I/O thread (a list under a mutex, and its pipe).
 *
 * Coalescing.  Hooks asking for the same (session, context) while a
 * provisioning of it is asked for and not yet answered wait on it, and all
 * of them get its one result; the provisioner joins it with the Workload
 * API's asks of the same key.  The credential is written into each
 * waiter's directory (once per distinct directory) by the I/O thread before
 * it answers.  The next hook after they are answered starts a new
 * provisioning (a new key, a new certificate; nothing is cached or kept
 * spare).
 *
 * Bounds.  At most --max-queue callers wait for a credential (the queue
 * depth); the next one is answered busy (retryable) at once.  At most
 * --max-queue + 64 connections are open; beyond that a connection is
 * answered busy and closed.  A request line is at most 8 KiB and must
 * arrive within 5 s of the connection; a longer one is answered
 * bad-request, and what the caller still sends is read (1 MiB and 5 s at
 * most) before the connection is closed, so that it reads the answer rather
 * than a reset.  How many provisionings run at once is the provisioner's
 * bound (--max-provisioning).
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
#include "core/revocation.h"
#include "core/sessions.h"
#include "core/ssh_host.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

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
	int			want_crl;		/* the hook asked for crl.pem too ("crl": true) */
	int			want_ssh;		/* the hook asked for the SSH user certificate ("ssh": true) */
	int			drain;			/* once answered, read the rest before closing */
	size_t		drained;		/* bytes read and discarded since */
	struct bcd_conn *next;		/* every connection */
	struct bcd_conn *wnext;		/* the hooks waiting for one provisioning */
} bcd_conn;

/*
 * The hooks waiting for the provisioning of one (session, context), asked
 * of the provisioner once.  In the I/O thread's table from the ask until
 * the I/O thread has answered its hooks; job is set (held) by the
 * provisioner's call-back, which also puts it on the done list.
 */
typedef struct hook_wait
{
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	bcd_conn   *conns;			/* the hooks waiting (the I/O thread's) */
	int			n_conns;
	const bcd_job *job;			/* the finished provisioning, held */
	struct bcd_hook_server *s;
	struct hook_wait *next;		/* in the table */
	struct hook_wait *dnext;	/* in the done list */
} hook_wait;

/* The hooks' socket server of bcd run. */
struct bcd_hook_server
{
	bcd_provisioner *prov;		/* what it asks for credentials (the daemon's) */
	char	   *socket_path;
	char	   *metrics_file;
	char	   *runtime_dir;
	bcd_listener sock;
	bcd_dir_id	own_dirs[2];	/* the socket's and the state directory: never a delivery's */
	int			n_own_dirs;
	int			wake[2];		/* the I/O thread's pipe: a provisioning ended, a number changed */
	long		max_queue;
	int			crl_fetched;	/* the daemon fetches the CRL (revocation.c): hooks may ask for it */
	int			ssh_user_certs; /* --ssh-user-certs: every provisioning asks an SSH user cert */
	pthread_t	io_thread;
	int			io_started;
	int			io_stopped;		/* it ran, and stopped */
	atomic_int	stopping;
	/* the provisionings ended, handed over by the provisioner's call-back */
	pthread_mutex_t done_mu;
	hook_wait  *done;
	/* the I/O thread's */
	bcd_conn   *conns;
	long		n_conns;
	hook_wait  *waits;
	bcd_counters counters;		/* waiting, max_queue, answers (the provisioner has the rest) */
	int			metrics_dirty;
	double		metrics_next;
	unsigned long prov_changes;	/* the provisioner's changes written in the metrics file */
	_Atomic(struct bcd_ssh *) ssh;	/* bcd status's SSH members (ssh_host.c), or NULL */
};

/* Seconds a caller has to send its request line, and we to write an answer. */
#define READ_TIMEOUT 5.0
#define WRITE_TIMEOUT 5.0
/* Shortest interval between two writes of --metrics-file, in seconds. */
#define METRICS_INTERVAL 0.25

/* ------------------------------------------------------------ connections */

/* Close and free a connection, taking it out of the list. */
static void
conn_close(bcd_hook_server *s, bcd_conn *c)
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
conn_flush(bcd_hook_server *s, bcd_conn *c)
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
conn_drain(bcd_hook_server *s, bcd_conn *c)
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
answer_doc(bcd_hook_server *s, bcd_conn *c, json_t *doc)
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
answer_error(bcd_hook_server *s, bcd_conn *c, bcd_code code, const char *fmt,...)
	__attribute__((format(printf, 4, 5)));

/* Answer c with an error: {"ok":false,"error":code,"message":...,"retryable":...}. */
static void
answer_error(bcd_hook_server *s, bcd_conn *c, bcd_code code, const char *fmt,...)
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

/* Wake the I/O thread (a byte in its pipe; a full pipe already wakes it). */
static void
wake_io(bcd_hook_server *s)
{
	char		c = 1;

	(void) !write(s->wake[1], &c, 1);
}

/* ------------------------------------------------------------ provisioning */

/*
 * Write the CRL the provisioner holds (verified by the watch) as PEM into
 * w's directory (crl.pem); its path (malloc()ed) or NULL with err.
 */
static char *
deliver_crl(bcd_hook_server *s, bcd_conn *w, char *err, size_t errlen)
{
	unsigned char *der = NULL;
	size_t		len = 0;
	const unsigned char *p;
	X509_CRL   *crl = NULL;
	BIO		   *bio = NULL;
	char	   *pem = NULL;
	long		n;
	char	   *path = NULL;

	(void) bcd_provisioner_crl(s->prov, &der, &len);
	p = der;
	if (der == NULL || (crl = d2i_X509_CRL(NULL, &p, (long) len)) == NULL ||
		(bio = BIO_new(BIO_s_mem())) == NULL || PEM_write_bio_X509_CRL(bio, crl) != 1 ||
		(n = BIO_get_mem_data(bio, &pem)) <= 0)
		snprintf(err, errlen, "bcd holds no CRL to write (out of memory?)");
	else if (bcd_delivery_write_file(w->dirfd, BCD_CRL_FILE, pem, (size_t) n, err,
									 errlen) == BC_OK &&
			 (path = bcd_path_join(w->dir, BCD_CRL_FILE)) == NULL)
		snprintf(err, errlen, "out of memory");
	BIO_free(bio);
	X509_CRL_free(crl);
	free(der);
	return path;
}

/* Deliver job's credential to waiter w (written once per directory in seen) and answer it. */
static void
deliver_to(bcd_hook_server *s, const bcd_job *job, bcd_conn *w, bcd_dir_id *seen, size_t *n_seen)
{
	char	   *key_path = NULL;
	char	   *cert_path = NULL;
	char	   *crl_path = NULL;
	char	   *ssh_path = NULL;
	char		err[512];
	size_t		i;
	int			written = 0;
	json_t	   *doc;

	if (w->want_ssh && job->ssh_cert == NULL)
	{
		/* nothing written: the hook asked for what this credential lacks */
		bcd_log("session %s%s%s: no-ssh-certificate for a hook that asked --ssh: %s",
				job->session, job->context[0] ? " context " : "", job->context,
				job->ssh_user ? job->ssh_why : "its provisioning was asked without one");
		if (job->ssh_user)
			answer_error(s, w, BCD_CODE_NO_SSH_CERTIFICATE, "the session credential carries "
						 "no SSH certificate: %s", job->ssh_why);
		else
			answer_error(s, w, BCD_CODE_NO_SSH_CERTIFICATE, "the provisioning of this session "
						 "was already running, asked without an SSH certificate (by another "
						 "hook or the Workload API); ask again once it ended, or run bcd "
						 "with --ssh-user-certs");
		return;
	}
	for (i = 0; seen != NULL && i < *n_seen; i++)
		if (seen[i].dev == w->dir_dev && seen[i].ino == w->dir_ino)
			written = 1;
	if (bcd_delivery_write(written ? -1 : w->dirfd, w->dir, job, &key_path, &cert_path,
						   &ssh_path, err, sizeof(err)) != BC_OK)
	{
		answer_error(s, w, BCD_CODE_BAD_DIR, "cannot deliver into %s: %s", w->dir, err);
		return;
	}
	if (!written && seen != NULL)
		seen[(*n_seen)++] = (bcd_dir_id) {w->dir_dev, w->dir_ino};
	if (w->want_crl && (crl_path = deliver_crl(s, w, err, sizeof(err))) == NULL)
	{
		answer_error(s, w, BCD_CODE_BAD_DIR, "cannot deliver the CRL into %s: %s", w->dir, err);
		free(key_path);
		free(cert_path);
		free(ssh_path);
		return;
	}
	{
		char		who[BCD_PEER_EXE_MAX + BCD_PEER_UNIT_MAX + 64];

		bcd_peer_describe(&w->peer, who, sizeof(who));
		bcd_log("session %s%s%s: delivered %s (serial %s)%s%s%s%s into %s for %s", job->session,
				job->context[0] ? " context " : "", job->context, job->spiffe_id, job->serial,
				ssh_path != NULL ? ", the SSH certificate (serial " : "",
				ssh_path != NULL ? job->ssh_serial : "", ssh_path != NULL ? ")" : "",
				crl_path != NULL ? " and the CRL" : "", w->dir, who);
	}
	s->counters.answers[BCD_CODE_OK]++;
	doc = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "ok", 1,
					"keyPath", key_path, "certPath", cert_path,
					"notAfter", job->not_after, "spiffeId", job->spiffe_id,
					"serial", job->serial, "session", job->session,
					"context", job->context);
	if (doc != NULL && crl_path != NULL)
		json_object_set_new(doc, "crlPath", json_string(crl_path));
	if (doc != NULL && ssh_path != NULL)
	{
		json_object_set_new(doc, "sshCertPath", json_string(ssh_path));
		json_object_set_new(doc, "sshSerial", json_string(job->ssh_serial));
	}
	answer_doc(s, w, doc);
	free(key_path);
	free(cert_path);
	free(crl_path);
	free(ssh_path);
}

/* Take hw out of the I/O thread's table. */
static void
wait_unlink(bcd_hook_server *s, hook_wait *hw)
{
	for (hook_wait **pp = &s->waits; *pp != NULL; pp = &(*pp)->next)
		if (*pp == hw)
		{
			*pp = hw->next;
			break;
		}
}

/* A provisioning hooks waited for has ended: answer them, forget it. */
static void
complete_wait(bcd_hook_server *s, hook_wait *hw)
{
	const bcd_job *job = hw->job;
	bcd_conn   *w;
	bcd_conn   *next;
	bcd_dir_id *seen;
	size_t		n_seen = 0;
	int			delivering = job->code == BCD_CODE_OK;

	wait_unlink(s, hw);
	s->metrics_dirty = 1;
	seen = delivering ? calloc((size_t) hw->n_conns, sizeof(*seen)) : NULL;
	for (w = hw->conns; w != NULL; w = next)
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
	bcd_job_release(job);
	free(hw);
}

/*
 * The provisioner's call-back (its thread): hold the finished provisioning
 * and hand hw to the I/O thread.
 */
static void
on_provisioned(void *arg, const bcd_job *job)
{
	hook_wait  *hw = arg;
	bcd_hook_server *s = hw->s;

	hw->job = bcd_job_hold(job);
	pthread_mutex_lock(&s->done_mu);
	hw->dnext = s->done;
	s->done = hw;
	pthread_mutex_unlock(&s->done_mu);
	wake_io(s);
}

/*
 * The hooks waiting for (session, context): found (until the I/O thread
 * has answered them, even once their provisioning ended: then as it was
 * asked, with or without an SSH certificate), or made and asked of the
 * provisioner on behalf of caller, with an SSH user certificate when ssh;
 * NULL when out of memory.
 */
static hook_wait *
find_or_ask(bcd_hook_server *s, const char *session, const char *context, const bcd_peer *caller,
			int ssh)
{
	hook_wait  *hw;

	for (hw = s->waits; hw != NULL; hw = hw->next)
		if (strcmp(hw->session, session) == 0 && strcmp(hw->context, context) == 0)
			return hw;
	hw = calloc(1, sizeof(*hw));
	if (hw == NULL)
		return NULL;
	snprintf(hw->session, sizeof(hw->session), "%s", session);
	snprintf(hw->context, sizeof(hw->context), "%s", context);
	hw->s = s;
	if ((ssh ? bcd_provisioner_ask_ssh(s->prov, session, context, caller, on_provisioned, hw) :
		 bcd_provisioner_ask(s->prov, BCD_JOB_SESSION, session, context, NULL, caller,
							 on_provisioned, hw)) != BC_OK)
	{
		free(hw);
		return NULL;
	}
	hw->next = s->waits;
	s->waits = hw;
	return hw;
}

/*
 * The published numbers, the server's and the provisioner's, into c, and
 * the node credential into node (bcd_node_release it); how often the
 * provisioner's changed.
 */
static unsigned long
numbers(bcd_hook_server *s, bcd_counters *c, bcd_node_snapshot *node)
{
	*c = s->counters;
	bcd_provisioner_node_take(s->prov, node);
	return bcd_provisioner_numbers(s->prov, c);
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

/* {"op":"credential","session","context","dir"[,"crl"][,"ssh"]}: refuse, or wait for a provisioning. */
static void
handle_credential(bcd_hook_server *s, bcd_conn *c, json_t *req)
{
	const char *key;
	json_t	   *value;
	int			bad = 0;
	const char *session = req_string(req, "session", &bad);
	const char *context = req_string(req, "context", &bad);
	const char *dir = req_string(req, "dir", &bad);
	json_t	   *want_crl = json_object_get(req, "crl");
	json_t	   *want_ssh = json_object_get(req, "ssh");
	bcd_node_snapshot node;
	char		err[768];
	struct stat st;
	hook_wait  *hw;
	int			usable;

	json_object_foreach(req, key, value)
		if (strcmp(key, "op") != 0 && strcmp(key, "session") != 0 &&
			strcmp(key, "context") != 0 && strcmp(key, "dir") != 0 && strcmp(key, "crl") != 0 &&
			strcmp(key, "ssh") != 0)
			bad = 1;
	if (context == NULL)
		context = "";
	if ((want_crl != NULL && !json_is_boolean(want_crl)) ||
		(want_ssh != NULL && !json_is_boolean(want_ssh)))
		bad = 1;
	if (bad || session == NULL || dir == NULL)
	{
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "a credential request is {\"op\":\"credential\","
					 "\"session\":S,\"context\":C (optional),\"dir\":DIR,\"crl\":true "
					 "(optional),\"ssh\":true (optional)}, strings only but crl and ssh");
		return;
	}
	c->want_crl = json_is_true(want_crl);
	c->want_ssh = json_is_true(want_ssh);
	if (c->want_crl && !s->crl_fetched)
	{
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "this bcd does not fetch the CRL: start it with "
					 "--hook-crl (or the Workload API), and a --status-interval above 0");
		return;
	}
	if (c->want_crl && bcd_provisioner_crl_gen(s->prov) == 0)
	{
		answer_error(s, c, BCD_CODE_UNAVAILABLE, "bcd holds no verified CRL yet (it fetches "
					 "GET /v1/crl every --status-interval; its log says why it has none); try "
					 "again shortly");
		return;
	}
	if (!bc_selector_valid(session, 1) || !bc_selector_valid(context, 0))
	{
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "the session (1 to 128) and context (0 to 128) "
					 "are made of A-Z a-z 0-9 . _ : - only");
		return;
	}
	bcd_provisioner_node_take(s->prov, &node);
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
	hw = find_or_ask(s, session, context, &c->peer, c->want_ssh || s->ssh_user_certs);
	if (hw == NULL)
	{
		answer_error(s, c, BCD_CODE_FAILED, "out of memory");
		return;
	}
	c->state = CONN_WAITING;
	c->wnext = hw->conns;
	hw->conns = c;
	hw->n_conns++;
	s->counters.waiting++;
	s->metrics_dirty = 1;
}

/* One request line of c (NUL-terminated in c->in): dispatch on its op. */
static void
handle_request(bcd_hook_server *s, bcd_conn *c)
{
	json_error_t jerr;
	json_t	   *req = json_loadb(c->in, c->in_len, JSON_REJECT_DUPLICATES, &jerr);
	json_t	   *op = json_object_get(req, "op");
	bcd_node_snapshot node;
	bcd_counters counters;
	char	   *text;

	if (!json_is_object(req) || !json_is_string(op))
		answer_error(s, c, BCD_CODE_BAD_REQUEST, "the request is not a JSON object with an \"op\"");
	else if (strcmp(json_string_value(op), BC_SOCK_OP_CREDENTIAL) == 0)
		handle_credential(s, c, req);
	else if (strcmp(json_string_value(op), BC_SOCK_OP_STATUS) == 0 ||
			 strcmp(json_string_value(op), BC_SOCK_OP_METRICS) == 0)
	{
		numbers(s, &counters, &node);
		if (strcmp(json_string_value(op), BC_SOCK_OP_STATUS) == 0)
		{
			json_t	   *doc = bcd_status_json(&counters, &node);

			bcd_ssh_status(atomic_load(&s->ssh), doc);
			answer_doc(s, c, doc);
		}
		else
		{
			text = bcd_metrics_text(&counters, &node);
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
conn_read(bcd_hook_server *s, bcd_conn *c)
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
reject_now(bcd_hook_server *s, int fd)
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
accept_all(bcd_hook_server *s)
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


/* Take the provisionings the provisioner has called back for, and answer their hooks. */
static void
take_done(bcd_hook_server *s)
{
	hook_wait  *done;
	hook_wait  *next;
	char		buf[64];

	while (read(s->wake[0], buf, sizeof(buf)) > 0)
		;
	pthread_mutex_lock(&s->done_mu);
	done = s->done;
	s->done = NULL;
	pthread_mutex_unlock(&s->done_mu);
	for (; done != NULL; done = next)
	{
		next = done->dnext;
		complete_wait(s, done);
	}
}


/* Rewrite --metrics-file when a number changed and the last write is old enough. */
static void
write_metrics(bcd_hook_server *s, int force)
{
	bcd_node_snapshot node;
	bcd_counters counters;
	unsigned long changes;

	if (s->metrics_file == NULL)
		return;
	changes = numbers(s, &counters, &node);
	if (changes != s->prov_changes)
		s->metrics_dirty = 1;
	if (s->metrics_dirty && (force || bcd_now_ms() / 1000.0 >= s->metrics_next))
	{
		if (bcd_metrics_write(s->metrics_file, &counters, &node) != BC_OK)
			bcd_log("cannot write the metrics file %s", s->metrics_file);
		s->metrics_dirty = 0;
		s->prov_changes = changes;
		s->metrics_next = bcd_now_ms() / 1000.0 + METRICS_INTERVAL;
	}
	bcd_node_release(&node);
}

/* Close connections past their deadline (a request not sent in time: bad-request). */
static void
expire(bcd_hook_server *s, double now)
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
io_round(bcd_hook_server *s, struct pollfd *pfd, bcd_conn **pc, size_t slots)
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

/*
 * Answer every hook still waiting that bcd is stopping, and close every
 * connection.  What they waited for stays in the table: the provisioner
 * calls back for it until it stops (bcd_hook_server_free releases it).
 */
static void
io_shutdown(bcd_hook_server *s)
{
	bcd_conn   *w;

	for (hook_wait *hw = s->waits; hw != NULL; hw = hw->next)
	{
		while ((w = hw->conns) != NULL)
		{
			hw->conns = w->wnext;
			s->counters.waiting--;
			w->state = CONN_WRITING;
			answer_error(s, w, BCD_CODE_UNAVAILABLE, "bcd is stopping; try again");
		}
		hw->n_conns = 0;
	}
	while (s->conns != NULL)
		conn_close(s, s->conns);
	write_metrics(s, 1);
}

/* The I/O thread. */
static void *
io_main(void *arg)
{
	bcd_hook_server *s = arg;
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

/* The provisioner's watch (any thread): a number or the node credential changed. */
static void
on_change(void *arg)
{
	wake_io(arg);
}

/*
 * Make the hooks' socket server of bcd run, a client of prov: the socket
 * (local_socket.c) in runtime_dir (rtfd open on it), listening; nothing
 * runs yet.  BC_OK with *out, or an error in err (the socket could not be
 * made safely, ...) and nothing left behind.
 */
int
bcd_hook_server_listen(const bcd_run_opts *o, bcd_provisioner *prov, const char *runtime_dir,
					   int rtfd, bcd_hook_server **out, char *err, size_t errlen)
{
	bcd_hook_server *s = calloc(1, sizeof(*s));
	struct stat st;
	int			rc = BC_ENOMEM;

	*out = NULL;
	snprintf(err, errlen, "out of memory");
	if (s == NULL)
		return BC_ENOMEM;
	s->prov = prov;
	pthread_mutex_init(&s->done_mu, NULL);
	s->sock.fd = s->sock.dirfd = s->wake[0] = s->wake[1] = -1;
	s->max_queue = o->max_queue;
	s->counters.max_queue = o->max_queue;
	s->crl_fetched = bcd_crl_wanted(o);
	s->ssh_user_certs = o->ssh_user_certs;
	s->runtime_dir = strdup(runtime_dir);
	if (s->runtime_dir == NULL ||
		(o->metrics_file != NULL && (s->metrics_file = strdup(o->metrics_file)) == NULL))
		goto fail;
	rc = BC_EINVAL;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0)
		goto fail;
	if (bcd_socket_daemon_path(o->socket, o->state_dir, &s->socket_path, err, errlen) != BC_OK ||
		bcd_socket_listen(s->socket_path, s->runtime_dir, rtfd, o->socket == NULL, &s->sock,
						  err, errlen) != BC_OK)
		goto fail;
	/* no delivery goes into (or under) the socket's directory or the state directory */
	if (s->sock.have_dir)
		s->own_dirs[0] = s->sock.dir;
	if (stat(o->state_dir, &st) == 0)
		s->own_dirs[1] = (bcd_dir_id) {st.st_dev, st.st_ino};
	s->n_own_dirs = 2;
	bcd_provisioner_watch(prov, on_change, s);
	*out = s;
	return BC_OK;
fail:
	bcd_hook_server_free(s);
	return rc;
}

/* The path of its socket. */
const char *
bcd_hook_server_path(const bcd_hook_server *s)
{
	return s->socket_path;
}

/* Start its I/O thread: BC_OK, or an error in err. */
int
bcd_hook_server_run(bcd_hook_server *s, char *err, size_t errlen)
{
	if (pthread_create(&s->io_thread, NULL, io_main, s) != 0)
	{
		snprintf(err, errlen, "cannot start the socket thread");
		return BC_EINVAL;
	}
	s->io_started = 1;
	return BC_OK;
}

/* Stop its I/O thread: every hook still waiting answered; nothing asked of the provisioner after. */
void
bcd_hook_server_stop(bcd_hook_server *s)
{
	if (s == NULL || !s->io_started)
		return;
	atomic_store(&s->stopping, 1);
	wake_io(s);
	pthread_join(s->io_thread, NULL);
	s->io_started = 0;
	s->io_stopped = 1;
}

/* Free it, once the provisioner has stopped (no call back comes any more). */
void
bcd_hook_server_free(bcd_hook_server *s)
{
	hook_wait  *hw;

	if (s == NULL)
		return;
	bcd_hook_server_stop(s);
	if (s->io_stopped)
		write_metrics(s, 1);	/* the provisioner's numbers once it stopped */
	while ((hw = s->waits) != NULL)
	{
		s->waits = hw->next;
		bcd_job_release(hw->job);
		free(hw);
	}
	bcd_socket_close(&s->sock, s->socket_path);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	free(s->socket_path);
	free(s->metrics_file);
	free(s->runtime_dir);
	pthread_mutex_destroy(&s->done_mu);
	free(s);
}

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry point (test/fuzz/fuzz_sock_line.c), not used by bcd: what a
 * caller sends on a connection (data, n bytes, then EOF) read and answered
 * by conn_read() and handle_request() exactly as the I/O thread does, by a
 * server whose provisioner holds no node credential and runs no worker (so
 * a valid credential request ends at no-node-credential).  The answer line
 * is written into answer (NUL-terminated, truncated to cap); returns its
 * length, or -1 when there was no answer or the connection could not be made.
 */
long
bcd_sessions_fuzz_line(const unsigned char *data, size_t n, char *answer, size_t cap)
{
	bcd_hook_server s;
	bcd_run_opts o;
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
	memset(&o, 0, sizeof(o));
	o.max_provisioning = 1;
	o.max_queue = 1;
	s.max_queue = 1;
	s.wake[0] = s.wake[1] = -1;
	s.prov = bcd_provisioner_new(&o, NULL, NULL);
	c = calloc(1, sizeof(*c));
	if (s.prov == NULL || c == NULL)
	{
		free(c);
		bcd_provisioner_free(s.prov);
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
	bcd_provisioner_free(s.prov);
	return len > 0 ? len : -1;
}
#endif							/* BC_TEST_BUILD */

/* The SSH module bcd status shows (sessions.h). */
void
bcd_hook_server_set_ssh(bcd_hook_server *s, struct bcd_ssh *ssh)
{
	if (s != NULL)
		atomic_store(&s->ssh, ssh);
}
