/*
 * conn.c: the Workload API's connections (docs/security.md, "Workload
 * attestation").  bcd accepts every connection itself (accept.c: accept
 * threads that drop at once what can get nothing, and a connection thread
 * that calls wl_accept_one): the caller's SO_PEERCRED and /proc/PID
 * (peer.c) are read, the rules matched and its shares of the connection
 * slots checked before gRPC sees the connection; then it gets a
 * grpc_server of its own (grpc_server_add_channel_from_fd; its calls:
 * call.c).  The connections closed at once are told in one line per
 * interval, and connections with no call open are closed once idle
 * (wl_reap, at every tick).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/*
 * Connections open at once, at most; beyond, a new one is closed at once.
 * One uid holds WL_CONNS_PER_UID of them at most, and callers that no rule
 * matches (they can only ever be refused) WL_RULELESS_MAX together and
 * WL_RULELESS_PER_UID per uid: callers with a rule always find a slot that
 * no caller without one can take.
 */
#define WL_CONNS_MAX 256
#define WL_CONNS_PER_UID 64
#define WL_RULELESS_MAX 32
#define WL_RULELESS_PER_UID 8
/* A connection with no call open is closed: before its first call after, after one after */
#define WL_FIRST_CALL_SECONDS 5.0
#define WL_IDLE_SECONDS 60.0
#define WL_IDLE_RULELESS_SECONDS 5.0
/*
 * What one caller may send in one message, and how many calls it may have
 * open on one connection.  256 KiB: Envoy puts every extension compiled in
 * into its SDS requests' node (node.extensions, 40-80 KB by estimate) and
 * resends it; memory stays bounded by the 64 connections of a uid.
 */
#define WL_MESSAGE_MAX (256 * 1024)
#define WL_STREAMS_MAX 16

/*
 * May a connection of uid (ruled: a rule matches it) have a slot?  NULL, or
 * which share it is over.  Under w->mu.
 */
static const char *
over_share(bcd_workload *w, uid_t uid, int ruled)
{
	int			all = 0;
	int			of_uid = 0;
	int			ruleless = 0;
	int			ruleless_of_uid = 0;

	for (wl_conn *c = w->conns; c != NULL; c = c->next)
	{
		all++;
		of_uid += c->caller.peer.uid == uid;
		ruleless += !c->ruled;
		ruleless_of_uid += !c->ruled && c->caller.peer.uid == uid;
	}
	if (all >= WL_CONNS_MAX)
		return "every connection slot is taken";
	if (of_uid >= WL_CONNS_PER_UID)
		return "its uid holds its share of the connection slots already";
	if (ruled == 0 && ruleless >= WL_RULELESS_MAX)
		return "the slots for callers no rule matches are taken";
	if (ruled == 0 && ruleless_of_uid >= WL_RULELESS_PER_UID)
		return "its uid holds its share of the slots for callers no rule matches";
	return NULL;
}

/*
 * Tell the connections closed at once since the last time, at most once per
 * interval, in one line: those their callers had closed already, those over
 * a rate or a share of the waiting ones (the accept threads), and those over
 * a share of the connection slots (the last one's uid and why).  Under
 * closed_mu.
 */
void
wl_tell_closed(bcd_workload *w, double now)
{
	unsigned long early;
	unsigned long rate;
	unsigned long queue;
	char		line[1024];
	size_t		n = 0;

	if (w->acceptor == NULL || now - w->share_logged < BCD_WL_REFUSALS_INTERVAL)
		return;
	bcd_wl_acceptor_counts(w->acceptor, &early, &rate, &queue);
	if (early + rate + queue + w->over_share == 0)
		return;
	if (early > 0)
		n += (size_t) snprintf(line + n, sizeof(line) - n, ", %lu closed by their callers "
							   "before bcd read them", early);
	if (rate > 0 && n < sizeof(line))
		n += (size_t) snprintf(line + n, sizeof(line) - n, ", %lu of a uid no rule matched "
							   "lately over its rate (%.0f a second)", rate, BCD_WL_RULELESS_RATE);
	if (queue > 0 && n < sizeof(line))
		n += (size_t) snprintf(line + n, sizeof(line) - n, ", %lu of a uid with %d accepted "
							   "connections waiting to be read already (or %d of all)", queue,
							   BCD_WL_ACCEPT_QUEUE_PER_UID, BCD_WL_ACCEPT_QUEUE);
	if (w->over_share > 0 && n < sizeof(line))
		snprintf(line + n, sizeof(line) - n, ", %lu over a share of the connection slots (the "
				 "last of uid %ld: %s)", w->over_share, (long) w->over_uid, w->over_why);
	bcd_log("workload api: %lu connection(s) closed at once in the last %.0f s%s",
			early + rate + queue + w->over_share, BCD_WL_REFUSALS_INTERVAL, line);
	w->share_logged = now;
	w->over_share = 0;
}

/* A connection closed over a share: counted, told by tell_closed. */
static void
log_over_share(bcd_workload *w, uid_t uid, const char *why)
{
	pthread_mutex_lock(&w->closed_mu);
	w->over_share++;
	w->over_uid = uid;
	w->over_why = why;
	wl_tell_closed(w, bcd_now_s());
	pthread_mutex_unlock(&w->closed_mu);
}

/*
 * A connection accepted (it: its fd and SO_PEERCRED, handed over by an
 * accept thread; the connection thread, accept.c): its shares of the
 * slots, then what /proc says of it, the rules, and its grpc_server.
 */
void
wl_accept_one(void *arg, const bcd_wl_accepted *it)
{
	bcd_workload *w = arg;
	wl_conn    *c;
	struct stat st;
	const char *session;
	const char *context;
	const char *over = NULL;
	char		why[512];
	int			fd = it->fd;
	int			bind = 0;
	int			m;

	/* its uid's shares (of callers no rule matches, when known to be one), nothing read yet */
	pthread_mutex_lock(&w->mu);
	over = over_share(w, it->uid, it->ruleless ? 0 : -1);
	pthread_mutex_unlock(&w->mu);
	if (over != NULL || (c = calloc(1, sizeof(*c))) == NULL)
	{
		if (over != NULL)
			log_over_share(w, it->uid, over);
		close(fd);
		return;
	}
	c->fd = fd;
	c->refs = 1;
	c->w = w;
	c->bind.pidfd = -1;
	wl_tag_init(&c->t_shutdown, WL_TAG_SHUTDOWN, c);
	/* the caller, read before gRPC has the connection */
	if (bcd_peer_read(fd, &c->caller.peer) != BC_OK || fstat(fd, &st) != 0)
	{
		close(fd);
		free(c);
		return;
	}
	c->caller.gid = c->caller.peer.gid;
	c->st_dev = st.st_dev;
	c->st_ino = st.st_ino;
	m = bcd_wl_rules_match(w->rules, &c->caller, &session, &context, &bind, why, sizeof(why));
	c->ruled = m > 0;
	bcd_wl_acceptor_seen(w->acceptor, it->uid, c->ruled);
	pthread_mutex_lock(&w->mu);
	over = over_share(w, it->uid, c->ruled);
	pthread_mutex_unlock(&w->mu);
	if (over != NULL)
	{
		log_over_share(w, it->uid, over);
		close(fd);
		free(c);
		return;
	}
	/* the process and its end of the connection, for the checks of its calls (attest.c) */
	c->bind_ok = bcd_wl_bind_open(fd, &c->caller.peer, &c->bind, why, sizeof(why)) == BC_OK;
	{
		/* a caller's messages are small: 64 KiB at most, 16 calls at once per connection */
		grpc_arg	args[2];
		grpc_channel_args cargs = {2, args};

		args[0].type = GRPC_ARG_INTEGER;
		args[0].key = (char *) GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
		args[0].value.integer = WL_MESSAGE_MAX;
		args[1].type = GRPC_ARG_INTEGER;
		args[1].key = (char *) GRPC_ARG_MAX_CONCURRENT_STREAMS;
		args[1].value.integer = WL_STREAMS_MAX;
		c->server = grpc_server_create(&cargs, NULL);
	}
	grpc_server_register_completion_queue(c->server, w->cq, NULL);
	grpc_server_start(c->server);
	pthread_mutex_lock(&w->mu);
	c->id = ++w->next_conn_id;
	c->idle_since = bcd_now_s();
	/* gRPC owns fd from here (the creds are insecure: the only kind it takes) */
	grpc_server_add_channel_from_fd(c->server, fd, w->creds);
	c->next = w->conns;
	w->conns = c;
	w->n_conns++;
	wl_call_request(w, c);
	pthread_mutex_unlock(&w->mu);
}

/* Close the connections gRPC has closed, and those idle past their deadline. */
void
wl_reap(bcd_workload *w)
{
	double		now = bcd_now_s();
	int			idle = 0;

	for (wl_conn *c = w->conns; c != NULL; c = c->next)
	{
		struct stat st;

		if (c->shutting_down)
			continue;
		if (fstat(c->fd, &st) != 0 || st.st_ino != c->st_ino || st.st_dev != c->st_dev)
			wl_conn_shutdown(w, c);
		else if (c->calls == 0 &&
				 now - c->idle_since >= (!c->had_call ? WL_FIRST_CALL_SECONDS :
										 c->ruled ? WL_IDLE_SECONDS : WL_IDLE_RULELESS_SECONDS))
		{
			idle++;
			wl_conn_shutdown(w, c);
		}
	}
	/* told at most once per interval */
	w->idle_closed += idle;
	if (w->idle_closed > 0 && now - w->idle_logged >= BCD_WL_REFUSALS_INTERVAL)
	{
		bcd_log("workload api: %lu idle connection(s) closed (no call within %.0f s of "
				"connecting, or none open for %.0f s, %.0f s without a rule)", w->idle_closed,
				WL_FIRST_CALL_SECONDS, WL_IDLE_SECONDS, WL_IDLE_RULELESS_SECONDS);
		w->idle_closed = 0;
		w->idle_logged = now;
	}
}
