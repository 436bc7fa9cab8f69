/*
 * listener.c: accepting connections, within bounds.
 *
 * Every client connection costs one descriptor.  The gateway accepts at most
 * gw->max_connections at once (--max-connections, never more than
 * RLIMIT_NOFILE leaves after the pool and a reserve): at the cap the
 * listener is disabled, so further clients wait in the kernel's backlog, and
 * it is enabled again as soon as a connection closes.  When accept() fails
 * anyway (EMFILE or ENFILE because something else holds descriptors, ENOBUFS,
 * ENOMEM), the listener is disabled too and enabled again after a back-off
 * (50 ms doubling to 1 s) or at the next close.  Without this, libevent's
 * listener stays readable, accept() fails at once, and the loop spins at 100%
 * of a core writing one warning per attempt.
 *
 * Each kind of pause is logged at most once per GW_PAUSE_LOG_INTERVAL with
 * the number of pauses since the previous line, and counted in /metrics.
 */
#include "listener.h"
#include "clock.h"
#include "gateway.h"
#include "log.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/util.h>

#define GW_PAUSE_LOG_INTERVAL	10.0	/* seconds */
#define GW_BACKOFF_MIN_MS		50
#define GW_BACKOFF_MAX_MS		1000

/* The one gateway: libevent passes the evhttp, not us, to the error callback. */
static struct gateway *the_gw;

/* Last line and pauses not yet reported, per kind of pause. */
static double last_log[GW_PAUSE_COUNT];
static unsigned long unlogged[GW_PAUSE_COUNT];

/* Set gw->max_connections from the option and RLIMIT_NOFILE; 0 on success. */
int
gw_listener_limits(struct gateway *gw)
{
	struct rlimit rl;
	long long	soft = 1 << 20;
	long long	budget;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		rl.rlim_cur < (rlim_t) soft)
		soft = (long long) rl.rlim_cur;
	gw->nofile = soft;
	budget = soft - gw->cfg.db_pool - GW_FD_RESERVE;
	if (budget < 1)
	{
		gw_log(GW_LOG_ERROR, "RLIMIT_NOFILE too low: no descriptor left for a client connection",
			   json_pack("{s:I,s:i,s:i}", "nofile", (json_int_t) soft,
						 "db_pool", gw->cfg.db_pool, "reserve", GW_FD_RESERVE));
		return -1;
	}
	gw->max_connections = gw->cfg.max_connections;
	if ((long long) gw->max_connections > budget)
	{
		gw->max_connections = (unsigned) budget;
		if (gw->cfg.max_connections_set)
			gw_log(GW_LOG_WARN, "--max-connections lowered to what RLIMIT_NOFILE allows",
				   json_pack("{s:i,s:I,s:I}", "requested", gw->cfg.max_connections,
							 "max_connections", (json_int_t) budget, "nofile", (json_int_t) soft));
	}
	return 0;
}

/* Log a pause of kind k, unless one was logged less than an interval ago. */
static void
log_pause(struct gateway *gw, enum gw_pause k, int err, long retry_ms)
{
	double		t = gw_mono_now();
	json_t	   *f;

	unlogged[k]++;
	if (last_log[k] != 0 && t - last_log[k] < GW_PAUSE_LOG_INTERVAL)
		return;
	f = json_pack("{s:i,s:i,s:I}", "connections", (int) gw->connections,
				  "max_connections", (int) gw->max_connections,
				  "pauses", (json_int_t) unlogged[k]);
	if (f != NULL && k != GW_PAUSE_LIMIT)
	{
		json_object_set_new(f, "error", json_string(strerror(err)));
		json_object_set_new(f, "retry_ms", json_integer(retry_ms));
	}
	gw_log(GW_LOG_WARN, k == GW_PAUSE_LIMIT ?
		   "connection limit reached; not accepting until a connection closes" :
		   "accept failed; not accepting for a while", f);
	last_log[k] = t;
	unlogged[k] = 0;
}

/* Stop accepting. */
static void
pause_accepting(struct gateway *gw, enum gw_pause k)
{
	if (gw->listener == NULL)
		return;
	evconnlistener_disable(gw->listener);
	gw->accept_paused = (int) k + 1;
	gw->metrics.accept_paused[k]++;
}

/* Accept again. */
static void
resume_accepting(struct gateway *gw)
{
	if (gw->listener == NULL || !gw->accept_paused)
		return;
	evtimer_del(gw->accept_timer);
	gw->accept_paused = 0;
	evconnlistener_enable(gw->listener);
}

/* The metrics listener's accept() failed: pause it for a second (a close resumes it sooner). */
static void
metrics_accept_error(struct gateway *gw, int err)
{
	static double last;
	double		t = gw_mono_now();
	struct timeval tv = {.tv_sec = 1, .tv_usec = 0};

	evconnlistener_disable(gw->mlistener);
	gw->maccept_paused = 1;
	evtimer_add(gw->maccept_timer, &tv);
	if (last == 0 || t - last >= GW_PAUSE_LOG_INTERVAL)
	{
		gw_log(GW_LOG_WARN, "metrics listener: accept failed; not accepting for a while",
			   json_pack("{s:s,s:i}", "error", strerror(err), "connections", (int) gw->mconnections));
		last = t;
	}
}

/* accept() failed with something other than EAGAIN/EINTR/ECONNABORTED. */
static void
accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct gateway *gw = the_gw;
	int			err = EVUTIL_SOCKET_ERROR();
	enum gw_pause k = (err == EMFILE || err == ENFILE) ? GW_PAUSE_NOFD : GW_PAUSE_ERROR;
	struct timeval tv;

	(void) arg;
	if (gw != NULL && lev != NULL && lev == gw->mlistener)
	{
		metrics_accept_error(gw, err);
		return;
	}
	if (gw == NULL || lev != gw->listener)
		return;
	gw->accept_backoff_ms = gw->accept_backoff_ms == 0 ? GW_BACKOFF_MIN_MS :
		gw->accept_backoff_ms * 2 > GW_BACKOFF_MAX_MS ? GW_BACKOFF_MAX_MS :
		gw->accept_backoff_ms * 2;
	pause_accepting(gw, k);
	log_pause(gw, k, err, gw->accept_backoff_ms);
	tv.tv_sec = gw->accept_backoff_ms / 1000;
	tv.tv_usec = (gw->accept_backoff_ms % 1000) * 1000;
	evtimer_add(gw->accept_timer, &tv);
}

/* The back-off after an accept() error is over. */
static void
accept_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;

	(void) fd;
	(void) what;
	if (gw->connections >= gw->max_connections)
	{
		/* a close will resume */
		gw->accept_paused = GW_PAUSE_LIMIT + 1;
		return;
	}
	resume_accepting(gw);
}

/* Take over the bound socket's listener; 0 on success. */
int
gw_listener_setup(struct gateway *gw)
{
	gw->listener = evhttp_bound_socket_get_listener(gw->bound);
	gw->accept_timer = evtimer_new(gw->base, accept_timer_cb, gw);
	if (gw->listener == NULL || gw->accept_timer == NULL)
		return -1;
	the_gw = gw;
	evconnlistener_set_error_cb(gw->listener, accept_error_cb);
	return 0;
}

/* A connection was accepted: pause at the cap. */
void
gw_listener_conn_opened(struct gateway *gw)
{
	gw->accept_backoff_ms = 0;
	if (gw->connections >= gw->max_connections && gw->listener != NULL)
	{
		pause_accepting(gw, GW_PAUSE_LIMIT);
		log_pause(gw, GW_PAUSE_LIMIT, 0, 0);
	}
}

/* A connection went away: a descriptor and a slot are free, accept again. */
void
gw_listener_conn_closed(struct gateway *gw)
{
	if (gw->accept_paused && gw->connections < gw->max_connections)
		resume_accepting(gw);
}

/* Forget the listener before libevent frees it. */
void
gw_listener_close(struct gateway *gw)
{
	if (gw->accept_timer != NULL)
	{
		event_free(gw->accept_timer);
		gw->accept_timer = NULL;
	}
	gw->listener = NULL;
	gw->accept_paused = 0;
	the_gw = NULL;
}

/* The metrics listener's back-off is over: accept again unless at its cap (a close resumes). */
static void
maccept_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;

	(void) fd;
	(void) what;
	if (gw->mlistener == NULL || gw->mconnections >= GW_METRICS_MAX_CONNECTIONS)
		return;
	gw->maccept_paused = 0;
	evconnlistener_enable(gw->mlistener);
}

/* Take over the metrics listener's bound socket; see listener.h. */
int
gw_listener_metrics_setup(struct gateway *gw)
{
	gw->mlistener = evhttp_bound_socket_get_listener(gw->mbound);
	gw->maccept_timer = evtimer_new(gw->base, maccept_timer_cb, gw);
	if (gw->mlistener == NULL || gw->maccept_timer == NULL)
		return -1;
	the_gw = gw;
	evconnlistener_set_error_cb(gw->mlistener, accept_error_cb);
	return 0;
}

/* A metrics connection was accepted: pause at its cap. */
void
gw_listener_metrics_conn_opened(struct gateway *gw)
{
	if (gw->mlistener != NULL && gw->mconnections >= GW_METRICS_MAX_CONNECTIONS)
	{
		evconnlistener_disable(gw->mlistener);
		gw->maccept_paused = 1;
	}
}

/* A metrics connection went away: below the cap, accept again. */
void
gw_listener_metrics_conn_closed(struct gateway *gw)
{
	if (gw->mlistener != NULL && gw->maccept_paused &&
		gw->mconnections < GW_METRICS_MAX_CONNECTIONS)
	{
		evtimer_del(gw->maccept_timer);
		gw->maccept_paused = 0;
		evconnlistener_enable(gw->mlistener);
	}
}

/* Forget the metrics listener before libevent frees it. */
void
gw_listener_metrics_close(struct gateway *gw)
{
	if (gw->maccept_timer != NULL)
	{
		event_free(gw->maccept_timer);
		gw->maccept_timer = NULL;
	}
	gw->mlistener = NULL;
	gw->maccept_paused = 0;
}
