/*
 * db_pool.c: a bounded pool of non-blocking libpq connections on the event loop.
 *
 * Each connection is a slot: DOWN, CONNECTING (PQconnectPoll driven by socket
 * events), IDLE (its socket watched, so a server that goes away is noticed at
 * once) or BUSY (PQsendQueryPrepared, then PQflush/PQconsumeInput/PQgetResult
 * as the socket allows).  A statement is prepared on a connection at its
 * first use there (a Prepare, its result, then the statement by name, all in
 * the same BUSY turn), so each later call skips the server's parse and plan.
 * Jobs wait in a bounded FIFO with a wait timer.  A slot whose connection
 * breaks goes back to DOWN and is reconnected lazily, when a
 * job needs it.  Nothing here blocks the event loop.
 *
 * With gw_db_pool_listen, one connection at a time runs LISTEN (a job of the
 * pool's own, sent before any queued job when it is a new connection): the
 * first to connect, and when that one is lost, the next idle one at the next
 * dispatch.  One listener, so a notification arrives once.  Notifications are
 * handed to the callbacks (the CRL's cache, the OCSP cache: one channel, each
 * subscriber called in turn) from the idle read path and after every statement.
 */
#include "db_pool.h"
#include "clock.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <libpq-fe.h>

/* Distinct statements prepared per connection; more are sent unprepared. */
#define GW_DB_MAX_STMTS 32

/* After a failed connect with no connection alive, refuse at once for this long. */
#define RECONNECT_BACKOFF_S 0.25
/* The client-side guard fires this long after statement_timeout should have. */
#define GUARD_GRACE_MS 2000

enum slot_state
{
	SLOT_DOWN,
	SLOT_CONNECTING,
	SLOT_IDLE,
	SLOT_BUSY
};

struct job
{
	TAILQ_ENTRY(job) link;
	struct gw_db_pool *pool;
	const char *sql;
	const char *param;
	int			stmt;			/* prepared statement number, or -1: sent as it is */
	gw_db_cb	cb;
	void	   *arg;
	struct event *wait;			/* queue wait timer */
};

struct slot
{
	struct gw_db_pool *pool;
	int			index;
	enum slot_state state;
	PGconn	   *conn;
	struct event *io;
	int			io_fd;
	short		io_what;
	struct event *guard;		/* connect timeout or statement guard */
	struct job *job;
	PGresult   *res;			/* the first result of the running statement */
	int			listening;		/* LISTEN is in force on this connection */
	int			listen_failed;	/* LISTEN raised an error here: not again */
	uint32_t	prepared;		/* bit n: statement n is prepared on this connection */
	int			preparing;		/* the running command is the job's Prepare */
};

struct gw_db_pool
{
	struct event_base *base;
	const struct gw_config *cfg;
	char	   *conninfo;
	struct slot *slots;
	int			nslots;
	TAILQ_HEAD(, job) queue;
	int			nqueued;
	double		last_fail;
	char	   *listen_sql;		/* "LISTEN channel", or NULL */
	char	   *listen_channel;	/* that channel */
	struct
	{
		gw_db_notify_cb cb;
		void	   *arg;
	}			notify[GW_DB_MAX_LISTENERS];	/* called for each notification, in order */
	int			nnotify;
	int			nlistening;		/* connections with LISTEN in force (0 or 1) */
	int			listen_pending; /* a LISTEN is running */
	unsigned long listen_period;	/* bumped when nlistening goes 0 -> 1 */
	const char *stmts[GW_DB_MAX_STMTS];	/* the statements prepared per connection */
	int			stmt_nparams[GW_DB_MAX_STMTS];	/* each one's parameter count */
	int			nstmts;
};

static void slot_io_cb(evutil_socket_t fd, short what, void *arg);
static void dispatch(struct gw_db_pool *pool);
static int	start_query(struct slot *s, struct job *j);

/* A timeval of ms milliseconds. */
static struct timeval
ms_tv(long ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	return tv;
}

/* Append key='value' (libpq quoting) to buf at *off; 0 on success. */
static int
append_kv(char *buf, size_t cap, size_t *off, const char *key, const char *val)
{
	int			n = snprintf(buf + *off, cap - *off, "%s%s='", *off ? " " : "", key);

	if (n < 0 || (size_t) n >= cap - *off)
		return -1;
	*off += (size_t) n;
	for (const char *p = val; *p; p++)
	{
		if (*off + 3 >= cap)
			return -1;
		if (*p == '\'' || *p == '\\')
			buf[(*off)++] = '\\';
		buf[(*off)++] = *p;
	}
	if (*off + 2 >= cap)
		return -1;
	buf[(*off)++] = '\'';
	buf[*off] = '\0';
	return 0;
}

/*
 * The operator's conninfo with statement_timeout added to its options,
 * application_name defaulted to bc-gateway and client_encoding UTF8 whatever
 * the operator or PGCLIENTENCODING says (the bodies relayed are JSON, UTF-8 by
 * RFC 8259, and Prometheus refuses a scrape with a label that is not UTF-8);
 * malloc'd, NULL on error.
 */
static char *
build_conninfo(const struct gw_config *cfg)
{
	PQconninfoOption *opts = NULL;
	char	   *err = NULL;
	char	   *buf = NULL;
	size_t		cap = strlen(cfg->db_conninfo) * 2 + 512;
	size_t		off = 0;
	char		options[1024];
	int			have_app = 0;
	const char *old_opts = "";

	opts = PQconninfoParse(cfg->db_conninfo, &err);
	if (opts == NULL)
	{
		gw_logf(GW_LOG_ERROR, "invalid --db: %s", err ? err : "out of memory");
		goto out;
	}
	buf = malloc(cap);
	if (buf == NULL)
		goto out;
	buf[0] = '\0';
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
	{
		if (o->val == NULL || o->val[0] == '\0')
			continue;
		if (strcmp(o->keyword, "options") == 0)
		{
			old_opts = o->val;
			continue;
		}
		if (strcmp(o->keyword, "client_encoding") == 0)
			continue;
		if (strcmp(o->keyword, "application_name") == 0)
			have_app = 1;
		if (append_kv(buf, cap, &off, o->keyword, o->val) != 0)
			goto fail;
	}
	if (!have_app && append_kv(buf, cap, &off, "application_name", "bc-gateway") != 0)
		goto fail;
	if (append_kv(buf, cap, &off, "client_encoding", "UTF8") != 0)
		goto fail;
	if (snprintf(options, sizeof(options), "%s%s-c statement_timeout=%ld",
				 old_opts, old_opts[0] ? " " : "", cfg->db_statement_ms) >= (int) sizeof(options))
		goto fail;
	if (append_kv(buf, cap, &off, "options", options) != 0)
		goto fail;
	goto out;
fail:
	gw_logf(GW_LOG_ERROR, "--db is too long");
	free(buf);
	buf = NULL;
out:
	PQfreemem(err);
	PQconninfoFree(opts);
	return buf;
}

/* libpq's last error as one line, for the operator's log. */
static void
conn_error_line(PGconn *conn, char *buf, size_t len)
{
	const char *msg = conn ? PQerrorMessage(conn) : "out of memory";

	snprintf(buf, len, "%s", msg ? msg : "");
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	for (size_t n = strlen(buf); n > 0 && buf[n - 1] == ' '; n--)
		buf[n - 1] = '\0';
}

/* Watch the slot's socket fd for what (EV_READ and/or EV_WRITE). */
static int
watch(struct slot *s, int fd, short what)
{
	if (s->io != NULL && s->io_fd == fd && s->io_what == what)
		return 0;
	if (s->io != NULL)
	{
		event_free(s->io);
		s->io = NULL;
	}
	s->io = event_new(s->pool->base, fd, what | EV_PERSIST, slot_io_cb, s);
	if (s->io == NULL || event_add(s->io, NULL) != 0)
		return -1;
	s->io_fd = fd;
	s->io_what = what;
	return 0;
}

/* Close the slot's connection and forget its events; it becomes DOWN. */
static void
slot_close(struct slot *s)
{
	if (s->io != NULL)
	{
		event_free(s->io);
		s->io = NULL;
	}
	evtimer_del(s->guard);
	PQclear(s->res);
	s->res = NULL;
	PQfinish(s->conn);
	s->conn = NULL;
	s->state = SLOT_DOWN;
	s->listen_failed = 0;
	s->prepared = 0;
	s->preparing = 0;
	if (s->listening)
	{
		s->listening = 0;
		s->pool->nlistening--;
	}
}

/* Hand every notification libpq has buffered on the slot to the callback. */
static void
drain_notifies(struct slot *s)
{
	PGnotify   *n;

	while (s->conn != NULL && (n = PQnotifies(s->conn)) != NULL)
	{
		for (int i = 0; i < s->pool->nnotify; i++)
			s->pool->notify[i].cb(n->relname, n->extra, s->pool->notify[i].arg);
		PQfreemem(n);
	}
}

/* Free a job and its wait timer. */
static void
job_free(struct job *j)
{
	if (j == NULL)
		return;
	if (j->wait != NULL)
		event_free(j->wait);
	free(j);
}

/* Call a job's callback with a result that carries no data, then free it. */
static void
job_fail(struct job *j, enum gw_db_status status, const char *reason)
{
	struct gw_db_result r = {.status = status, .reason = reason};

	j->cb(&r, j->arg);
	job_free(j);
}

/* Fail every queued job as unavailable. */
static void
fail_queue(struct gw_db_pool *pool, const char *reason)
{
	struct job *j;

	while ((j = TAILQ_FIRST(&pool->queue)) != NULL)
	{
		TAILQ_REMOVE(&pool->queue, j, link);
		pool->nqueued--;
		job_fail(j, GW_DB_UNAVAILABLE, reason);
	}
}

/* Count slots in the given state. */
static int
count_state(const struct gw_db_pool *pool, enum slot_state st)
{
	int			n = 0;

	for (int i = 0; i < pool->nslots; i++)
		n += pool->slots[i].state == st;
	return n;
}

/* Slots that are connected or connecting. */
static int
count_live(const struct gw_db_pool *pool)
{
	return pool->nslots - count_state(pool, SLOT_DOWN);
}

/* A connect failed: log it, close the slot, fail the queue if nothing else can serve it. */
static void
connect_failed(struct slot *s, const char *why)
{
	char		line[512];
	struct gw_db_pool *pool = s->pool;

	conn_error_line(s->conn, line, sizeof(line));
	gw_log(GW_LOG_WARN, "database connection failed",
		   json_pack("{s:i,s:s,s:s}", "slot", s->index, "reason", why, "error", line));
	slot_close(s);
	pool->last_fail = gw_mono_now();
	if (count_live(pool) == 0)
		fail_queue(pool, "database unavailable");
}

/* The LISTEN of a new connection finished. */
static void
listen_done(const struct gw_db_result *r, void *arg)
{
	struct slot *s = arg;
	struct gw_db_pool *pool = s->pool;

	pool->listen_pending = 0;
	if (r->status != GW_DB_OK)
	{
		if (r->status == GW_DB_ERROR)
			s->listen_failed = 1;
		gw_log(GW_LOG_WARN, "database LISTEN failed",
			   json_pack("{s:i,s:s,s:s?}", "slot", s->index, "reason", r->reason ? r->reason : "",
						 "sqlstate", r->sqlstate));
		return;
	}
	/* complete() made the slot idle (or closed it) before calling us */
	if (s->state != SLOT_IDLE || s->listening)
		return;
	s->listening = 1;
	if (pool->nlistening++ == 0)
		pool->listen_period++;
}

/* Send LISTEN on a freshly connected (idle) slot; -1 when it cannot be sent. */
static int
start_listen(struct slot *s)
{
	struct job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return -1;
	j->pool = s->pool;
	j->sql = s->pool->listen_sql;
	j->stmt = -1;
	j->cb = listen_done;
	j->arg = s;
	/* set first: start_query may complete the job (and clear it) before it returns */
	s->pool->listen_pending = 1;
	if (start_query(s, j) != 0)
	{
		s->pool->listen_pending = 0;
		job_free(j);
		return -1;
	}
	return 0;
}

/* Whether the pool wants a LISTEN started now (none in force, none running). */
static int
want_listener(const struct gw_db_pool *pool)
{
	return pool->listen_sql != NULL && pool->nlistening == 0 && !pool->listen_pending;
}

/* No connection listens: start LISTEN on an idle one, if any. */
static void
ensure_listener(struct gw_db_pool *pool)
{
	for (int i = 0; i < pool->nslots && want_listener(pool); i++)
	{
		struct slot *s = &pool->slots[i];

		if (s->state == SLOT_IDLE && !s->listen_failed && start_listen(s) != 0)
			slot_close(s);
	}
}

/* Drive a connecting slot one step with PQconnectPoll. */
static void
connect_step(struct slot *s)
{
	PostgresPollingStatusType st = PQconnectPoll(s->conn);

	/*
	 * With a multi-host conninfo PQconnectPoll closes a refused host's socket
	 * and opens the next host's, which the kernel usually gives the same fd
	 * number: an event kept on that number would never fire again (epoll
	 * dropped the closed socket).  Re-register on every step of a connect.
	 */
	if (s->io != NULL)
	{
		event_free(s->io);
		s->io = NULL;
	}
	switch (st)
	{
		case PGRES_POLLING_READING:
			if (watch(s, PQsocket(s->conn), EV_READ) != 0)
				connect_failed(s, "event");
			return;
		case PGRES_POLLING_WRITING:
			if (watch(s, PQsocket(s->conn), EV_WRITE) != 0)
				connect_failed(s, "event");
			return;
		case PGRES_POLLING_OK:
			evtimer_del(s->guard);
			if (PQsetnonblocking(s->conn, 1) != 0 ||
				watch(s, PQsocket(s->conn), EV_READ) != 0)
			{
				connect_failed(s, "setup");
				return;
			}
			s->state = SLOT_IDLE;
			gw_log(GW_LOG_INFO, "database connected", json_pack("{s:i}", "slot", s->index));
			if (want_listener(s->pool) && start_listen(s) != 0)
			{
				connect_failed(s, "listen");
				return;
			}
			dispatch(s->pool);
			return;
		case PGRES_POLLING_FAILED:
		default:
			connect_failed(s, "refused");
			return;
	}
}

/* Start connecting a DOWN slot. */
static void
connect_start(struct slot *s)
{
	struct timeval tv = ms_tv(s->pool->cfg->db_wait_ms);

	s->conn = PQconnectStart(s->pool->conninfo);
	s->state = SLOT_CONNECTING;
	if (s->conn == NULL || PQstatus(s->conn) == CONNECTION_BAD)
	{
		connect_failed(s, "start");
		return;
	}
	evtimer_add(s->guard, &tv);
	if (watch(s, PQsocket(s->conn), EV_WRITE) != 0)
		connect_failed(s, "event");
}

/* Start connections for queued jobs; fail the queue when the database is known down. */
static void
ensure_connecting(struct gw_db_pool *pool)
{
	while (pool->nqueued > count_state(pool, SLOT_CONNECTING))
	{
		struct slot *down = NULL;

		for (int i = 0; i < pool->nslots && down == NULL; i++)
			if (pool->slots[i].state == SLOT_DOWN)
				down = &pool->slots[i];
		if (down == NULL)
			break;
		if (count_live(pool) == 0 && gw_mono_now() - pool->last_fail < RECONNECT_BACKOFF_S)
			break;
		connect_start(down);
	}
	if (pool->nqueued > 0 && count_live(pool) == 0)
		fail_queue(pool, "database unavailable");
}

/*
 * SQLSTATEs after which a connection is not reused: 25006 (the server is, or
 * has become, a standby: read-only), 57P01/57P02/57P03 (shutting down,
 * crashed, starting) and class 08 (connection exception).  The next
 * connection goes through libpq's host list again, and with
 * target_session_attrs=read-write finds the current primary.
 */
static int
drop_for_sqlstate(const char *ss)
{
	return ss != NULL && (strcmp(ss, "25006") == 0 || strncmp(ss, "57P0", 4) == 0 ||
						  strncmp(ss, "08", 2) == 0);
}

/* Deliver the running statement's result to its job and make the slot idle (or DOWN). */
static void
complete(struct slot *s, enum gw_db_status forced, const char *reason)
{
	struct job *j = s->job;
	struct gw_db_result r = {.status = forced, .reason = reason};
	PGresult   *res = s->res;
	int			broken = s->conn == NULL || PQstatus(s->conn) == CONNECTION_BAD ||
		(forced == GW_DB_OK && res == NULL);

	s->job = NULL;
	s->res = NULL;
	evtimer_del(s->guard);
	if (forced == GW_DB_OK)
	{
		ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

		if (res != NULL && st == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) >= 1)
		{
			r.value = PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0);
			r.value_len = r.value ? (size_t) PQgetlength(res, 0, 0) : 0;
			if (PQnfields(res) >= 2 && !PQgetisnull(res, 0, 1))
				r.tag = PQgetvalue(res, 0, 1);
		}
		else if (res != NULL && st == PGRES_COMMAND_OK)
			;					/* LISTEN: OK, no value */
		else if (res != NULL && st == PGRES_FATAL_ERROR &&
				 PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL)
		{
			r.status = GW_DB_ERROR;
			r.sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			r.message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
			r.reason = "server error";
			if (drop_for_sqlstate(r.sqlstate))
			{
				/* a standby, a server shutting down, a broken link: reconnect */
				gw_log(GW_LOG_INFO, "database connection dropped",
					   json_pack("{s:i,s:s}", "slot", s->index, "sqlstate", r.sqlstate));
				broken = 1;
			}
		}
		else if (res == NULL || broken)
		{
			r.status = GW_DB_UNAVAILABLE;
			r.reason = "connection lost";
		}
		else
		{
			r.status = GW_DB_ERROR;
			r.reason = "unexpected result";
		}
	}
	if (broken || forced != GW_DB_OK)
		slot_close(s);
	else
	{
		s->state = SLOT_IDLE;
		if (watch(s, PQsocket(s->conn), EV_READ) != 0)
			slot_close(s);
	}
	if (j != NULL)
		j->cb(&r, j->arg);
	PQclear(res);
	job_free(j);
	if (s->state == SLOT_IDLE)
		drain_notifies(s);
}

/*
 * Send the slot's job: its Prepare when the statement is numbered and not yet
 * prepared on this connection, else the statement itself (by name when
 * prepared); 0 when sent.
 */
static int
send_job(struct slot *s)
{
	struct job *j = s->job;
	const char *values[1] = {j->param};
	int			nparams = j->param ? 1 : 0;
	char		name[32];

	if (j->stmt < 0)
		return PQsendQueryParams(s->conn, j->sql, nparams, NULL, values, NULL, NULL, 0) ? 0 : -1;
	snprintf(name, sizeof(name), "bc_gw_%d", j->stmt);
	s->preparing = !(s->prepared & (UINT32_C(1) << j->stmt));
	if (s->preparing)
		return PQsendPrepare(s->conn, name, j->sql, nparams, NULL) ? 0 : -1;
	return PQsendQueryPrepared(s->conn, name, nparams, values, NULL, NULL, 0) ? 0 : -1;
}

/* Flush what was sent and watch the socket; -1 when the connection is broken. */
static int
flush_and_watch(struct slot *s)
{
	int			fl = PQflush(s->conn);

	if (fl < 0 || watch(s, PQsocket(s->conn), fl ? (EV_READ | EV_WRITE) : EV_READ) != 0)
		return -1;
	return 0;
}

/* Send a job's statement on an idle slot; -1 when the connection turned out broken. */
static int
start_query(struct slot *s, struct job *j)
{
	struct timeval tv = ms_tv(s->pool->cfg->db_statement_ms + GUARD_GRACE_MS);

	s->job = j;
	if (send_job(s) != 0)
	{
		s->job = NULL;
		s->preparing = 0;
		return -1;
	}
	if (j->wait != NULL)
	{
		event_free(j->wait);
		j->wait = NULL;
	}
	s->state = SLOT_BUSY;
	evtimer_add(s->guard, &tv);
	if (flush_and_watch(s) != 0)
		complete(s, GW_DB_UNAVAILABLE, "send failed");
	return 0;
}

/* Hand queued jobs to idle slots, then make sure enough slots are connecting. */
static void
dispatch(struct gw_db_pool *pool)
{
	ensure_listener(pool);
	for (int i = 0; i < pool->nslots && !TAILQ_EMPTY(&pool->queue); i++)
	{
		struct slot *s = &pool->slots[i];
		struct job *j;

		if (s->state != SLOT_IDLE)
			continue;
		j = TAILQ_FIRST(&pool->queue);
		TAILQ_REMOVE(&pool->queue, j, link);
		pool->nqueued--;
		if (start_query(s, j) != 0)
		{
			/* nothing was sent: the job goes back to the head of the queue */
			gw_log(GW_LOG_INFO, "database connection lost", json_pack("{s:i}", "slot", s->index));
			TAILQ_INSERT_HEAD(&pool->queue, j, link);
			pool->nqueued++;
			slot_close(s);
		}
	}
	ensure_connecting(pool);
}

/* A BUSY slot's socket is ready: flush what is left, read what arrived; 1 when done. */
static int
query_step(struct slot *s, short what)
{
	if (what & EV_WRITE)
	{
		int			fl = PQflush(s->conn);

		if (fl < 0)
		{
			complete(s, GW_DB_OK, NULL);
			return 1;
		}
		if (fl == 0 && watch(s, PQsocket(s->conn), EV_READ) != 0)
		{
			complete(s, GW_DB_UNAVAILABLE, "event");
			return 1;
		}
	}
	if (!(what & EV_READ))
		return 0;
	if (!PQconsumeInput(s->conn))
	{
		complete(s, GW_DB_OK, NULL);
		return 1;
	}
	while (!PQisBusy(s->conn))
	{
		PGresult   *r = PQgetResult(s->conn);

		if (r == NULL)
		{
			if (s->preparing && s->res != NULL &&
				PQresultStatus(s->res) == PGRES_COMMAND_OK)
			{
				/* the Prepare is done: now the statement itself, by name */
				s->prepared |= UINT32_C(1) << s->job->stmt;
				PQclear(s->res);
				s->res = NULL;
				if (send_job(s) != 0 || flush_and_watch(s) != 0)
				{
					complete(s, GW_DB_UNAVAILABLE, "send failed");
					return 1;
				}
				continue;
			}
			/* a statement's result, or a failed Prepare's error for the job */
			s->preparing = 0;
			complete(s, GW_DB_OK, NULL);
			return 1;
		}
		if (s->res == NULL)
			s->res = r;
		else
			PQclear(r);
	}
	return 0;
}

/* A BUSY slot's socket is ready; when its statement is done, serve the queue. */
static void
query_io(struct slot *s, short what)
{
	if (query_step(s, what))
		dispatch(s->pool);
}

/* An IDLE slot's socket is readable: the server said something, most likely goodbye. */
static void
idle_read(struct slot *s)
{
	if (!PQconsumeInput(s->conn) || PQstatus(s->conn) == CONNECTION_BAD)
	{
		gw_log(GW_LOG_INFO, "database connection lost", json_pack("{s:i}", "slot", s->index));
		slot_close(s);
		ensure_listener(s->pool);
		return;
	}
	drain_notifies(s);
}

/* Socket event on a slot. */
static void
slot_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct slot *s = arg;

	(void) fd;
	switch (s->state)
	{
		case SLOT_CONNECTING:
			connect_step(s);
			break;
		case SLOT_IDLE:
			idle_read(s);
			break;
		case SLOT_BUSY:
			query_io(s, what);
			break;
		case SLOT_DOWN:
		default:
			break;
	}
}

/* The slot's guard fired: a connect or a statement took too long. */
static void
slot_guard_cb(evutil_socket_t fd, short what, void *arg)
{
	struct slot *s = arg;

	(void) fd;
	(void) what;
	if (s->state == SLOT_CONNECTING)
		connect_failed(s, "connect timeout");
	else if (s->state == SLOT_BUSY)
	{
		gw_log(GW_LOG_WARN, "database statement guard fired; connection dropped",
			   json_pack("{s:i}", "slot", s->index));
		complete(s, GW_DB_TIMEOUT, "statement guard");
		dispatch(s->pool);
	}
}

/* A queued job waited too long for a connection. */
static void
job_wait_cb(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;
	struct gw_db_pool *pool = j->pool;

	(void) fd;
	(void) what;
	TAILQ_REMOVE(&pool->queue, j, link);
	pool->nqueued--;
	job_fail(j, GW_DB_UNAVAILABLE, "pool wait timeout");
}

/* A pool of cfg->db_pool connections to cfg->db_conninfo; NULL on failure. */
struct gw_db_pool *
gw_db_pool_new(struct event_base *base, const struct gw_config *cfg)
{
	struct gw_db_pool *pool = calloc(1, sizeof(*pool));

	if (pool == NULL)
		return NULL;
	pool->base = base;
	pool->cfg = cfg;
	TAILQ_INIT(&pool->queue);
	pool->conninfo = build_conninfo(cfg);
	pool->slots = calloc((size_t) cfg->db_pool, sizeof(*pool->slots));
	if (pool->conninfo == NULL || pool->slots == NULL)
		goto fail;
	pool->nslots = cfg->db_pool;
	for (int i = 0; i < pool->nslots; i++)
	{
		struct slot *s = &pool->slots[i];

		s->pool = pool;
		s->index = i;
		s->state = SLOT_DOWN;
		s->guard = evtimer_new(base, slot_guard_cb, s);
		if (s->guard == NULL)
			goto fail;
	}
	return pool;
fail:
	gw_db_pool_free(pool);
	return NULL;
}

/* Close every connection; jobs still queued or running get GW_DB_UNAVAILABLE. */
void
gw_db_pool_free(struct gw_db_pool *pool)
{
	if (pool == NULL)
		return;
	for (int i = 0; i < pool->nslots; i++)
	{
		struct slot *s = &pool->slots[i];

		if (s->job != NULL)
			complete(s, GW_DB_UNAVAILABLE, "shutting down");
		slot_close(s);
	}
	fail_queue(pool, "shutting down");
	for (int i = 0; pool->slots != NULL && i < pool->nslots; i++)
		if (pool->slots[i].guard != NULL)
			event_free(pool->slots[i].guard);
	free(pool->slots);
	free(pool->conninfo);
	free(pool->listen_sql);
	free(pool->listen_channel);
	free(pool);
}

/* LISTEN channel on every new connection; see db_pool.h. */
int
gw_db_pool_listen(struct gw_db_pool *pool, const char *channel,
				  gw_db_notify_cb cb, void *arg)
{
	size_t		n = strlen(channel) + 16;

	if (pool->nnotify >= GW_DB_MAX_LISTENERS ||
		(pool->listen_channel != NULL && strcmp(pool->listen_channel, channel) != 0))
		return -1;
	if (pool->listen_channel == NULL)
	{
		pool->listen_channel = strdup(channel);
		pool->listen_sql = malloc(n);
		if (pool->listen_channel == NULL || pool->listen_sql == NULL)
		{
			free(pool->listen_channel);
			free(pool->listen_sql);
			pool->listen_channel = pool->listen_sql = NULL;
			return -1;
		}
		snprintf(pool->listen_sql, n, "LISTEN \"%s\"", channel);
	}
	pool->notify[pool->nnotify].cb = cb;
	pool->notify[pool->nnotify].arg = arg;
	pool->nnotify++;
	return 0;
}

/* The current listening period, 0 while nobody listens; see db_pool.h. */
unsigned long
gw_db_pool_listen_period(const struct gw_db_pool *pool)
{
	return pool->nlistening > 0 ? pool->listen_period : 0;
}

/*
 * The number under which sql is prepared on every connection, numbered at its
 * first use; -1 (sent unprepared) with --db-no-prepare or once GW_DB_MAX_STMTS
 * statements are numbered.  The gateway's statements are a fixed set.  The
 * same text with another parameter count is another statement.
 */
static int
stmt_number(struct gw_db_pool *pool, const char *sql, int nparams)
{
	if (!pool->cfg->db_prepare)
		return -1;
	for (int i = 0; i < pool->nstmts; i++)
		if (pool->stmt_nparams[i] == nparams &&
			(pool->stmts[i] == sql || strcmp(pool->stmts[i], sql) == 0))
			return i;
	if (pool->nstmts >= GW_DB_MAX_STMTS)
		return -1;
	pool->stmts[pool->nstmts] = sql;
	pool->stmt_nparams[pool->nstmts] = nparams;
	return pool->nstmts++;
}

/* Queue sql with param for the next free connection; see db_pool.h. */
int
gw_db_submit(struct gw_db_pool *pool, const char *sql, const char *param,
			 gw_db_cb cb, void *arg, const char **why)
{
	struct job *j;
	struct timeval tv = ms_tv(pool->cfg->db_wait_ms);

	if (pool->nqueued >= pool->cfg->db_queue && count_state(pool, SLOT_IDLE) == 0)
	{
		*why = "queue full";
		return -1;
	}
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		goto oom;
	j->pool = pool;
	j->sql = sql;
	j->param = param;
	j->stmt = stmt_number(pool, sql, param != NULL ? 1 : 0);
	j->cb = cb;
	j->arg = arg;
	j->wait = evtimer_new(pool->base, job_wait_cb, j);
	if (j->wait == NULL || evtimer_add(j->wait, &tv) != 0)
		goto oom;
	TAILQ_INSERT_TAIL(&pool->queue, j, link);
	pool->nqueued++;
	dispatch(pool);
	return 0;
oom:
	job_free(j);
	*why = "out of memory";
	return -1;
}

/* Connections running a statement. */
int
gw_db_pool_in_use(const struct gw_db_pool *pool)
{
	return count_state(pool, SLOT_BUSY);
}

/* Connections established (idle or busy). */
int
gw_db_pool_connected(const struct gw_db_pool *pool)
{
	return count_state(pool, SLOT_IDLE) + count_state(pool, SLOT_BUSY);
}

/* Append a Prometheus label value, escaped, to buf. */
static int
add_label(struct evbuffer *buf, const char *v)
{
	for (const char *p = v ? v : ""; *p; p++)
	{
		int			rc;

		if (*p == '\\' || *p == '"')
			rc = evbuffer_add_printf(buf, "\\%c", *p);
		else if (*p == '\n')
			rc = evbuffer_add(buf, "\\n", 2);
		else
			rc = evbuffer_add(buf, p, 1);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/*
 * bc_gateway_db_primary{host,port} 1 for each distinct server the
 * established connections are on (PQhost/PQport: the host of a multi-host
 * conninfo that libpq picked).  With target_session_attrs=read-write that is
 * the primary; two lines only while old connections drain after a failover.
 */
int
gw_db_pool_render_primary(const struct gw_db_pool *pool, struct evbuffer *buf)
{
	int			rc = evbuffer_add_printf(buf,
										 "# HELP bc_gateway_db_primary The database server the pool's established connections are on.\n"
										 "# TYPE bc_gateway_db_primary gauge\n") < 0;

	for (int i = 0; i < pool->nslots; i++)
	{
		const struct slot *s = &pool->slots[i];
		int			seen = 0;

		if (s->state != SLOT_IDLE && s->state != SLOT_BUSY)
			continue;
		for (int k = 0; k < i && !seen; k++)
		{
			const struct slot *o = &pool->slots[k];

			seen = (o->state == SLOT_IDLE || o->state == SLOT_BUSY) &&
				strcmp(PQhost(o->conn) ? PQhost(o->conn) : "", PQhost(s->conn) ? PQhost(s->conn) : "") == 0 &&
				strcmp(PQport(o->conn) ? PQport(o->conn) : "", PQport(s->conn) ? PQport(s->conn) : "") == 0;
		}
		if (seen)
			continue;
		rc |= evbuffer_add_printf(buf, "bc_gateway_db_primary{host=\"") < 0;
		rc |= add_label(buf, PQhost(s->conn));
		rc |= evbuffer_add_printf(buf, "\",port=\"") < 0;
		rc |= add_label(buf, PQport(s->conn));
		rc |= evbuffer_add_printf(buf, "\"} 1\n") < 0;
	}
	return rc ? -1 : 0;
}
