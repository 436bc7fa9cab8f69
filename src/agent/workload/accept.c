/*
 * accept.c: the Workload API's accept threads and connection thread.
 *
 * While the listen queue of the socket is full, every caller's connect()
 * fails (gRPC says UNAVAILABLE), whoever it is: the queue is the kernel's,
 * shared by every local user who may connect.  A caller that connects and
 * closes in a loop costs the kernel about what taking the connection off
 * the queue and closing it costs bcd (accept4 and close, some 7 us each
 * way), so whatever else bcd does per connection decides who keeps up.
 * Hence:
 * - ACCEPT_THREADS accept threads do little else: each takes up to
 *   ACCEPT_BATCH connections at a time, polls them together once, closes
 *   those their callers have closed already (nothing of them read), reads
 *   the others' SO_PEERCRED, closes those of a uid known to get nothing over
 *   its rate and those over the waiting ones' bounds, and queues the rest;
 * - they run ACCEPT_NICE below bcd's own nice value where bcd may raise
 *   its priority (root), so that a loop at an ordinary priority does not
 *   keep them from the CPU;
 * - one connection thread takes the queued ones and calls back (fn), which
 *   reads /proc, matches the rules and makes a grpc_server: the slow part,
 *   never in the accept threads' way.
 * A uid is known to get nothing when no rule can match its ids, or when its
 * connections matched no rule in the last RULELESS_MEMORY seconds and none
 * did (what fn tells through bcd_wl_acceptor_seen); the accept threads
 * remember SEEN_UIDS uids.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "workload/accept.h"

#define ACCEPT_THREADS 2
#define ACCEPT_BATCH 64
#define ACCEPT_NICE 10
#define RULELESS_MEMORY 60.0
#define SEEN_UIDS 256

/* What the accept threads remember of a uid's connections. */
typedef struct uid_seen
{
	uid_t		uid;
	double		ruled_at;		/* monotonic: a rule matched one of its connections (0 never) */
	double		ruleless_at;	/* ... none matched one (0 never) */
	double		tokens;			/* its bucket while it is known to get nothing */
	double		refilled;
} uid_seen;

struct bcd_wl_acceptor
{
	int			fd;				/* the listening socket (not ours) */
	const bcd_wl_rules *rules;
	bcd_wl_accept_fn fn;
	void	   *arg;
	int			stop_pipe[2];
	atomic_int	stopping;
	pthread_t	threads[ACCEPT_THREADS];
	int			n_threads;
	pthread_t	conn_thread;
	int			conn_started;
	/* under mu: the connections waiting for the connection thread, the uids seen */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bcd_wl_accepted queue[BCD_WL_ACCEPT_QUEUE];
	int			head;
	int			n;
	uid_seen	seen[SEEN_UIDS];
	int			n_seen;
	/* closed at once, not yet told */
	atomic_ulong early;			/* closed by their callers before bcd read them */
	atomic_ulong over_rate;		/* of a uid known to get nothing, over its rate */
	atomic_ulong over_queue;	/* of a uid with its share of the waiting ones, or none left */
	atomic_int	nice_told;		/* the accept threads' priority could not be raised: told */
};

/* The last time u was seen. */
static double
seen_last(const uid_seen *u)
{
	return u->ruled_at > u->ruleless_at ? u->ruled_at : u->ruleless_at;
}

/* The record of uid (made, or the least recently seen one reused).  Under a->mu. */
static uid_seen *
seen_get(bcd_wl_acceptor *a, uid_t uid)
{
	uid_seen   *oldest = NULL;

	for (int i = 0; i < a->n_seen; i++)
	{
		if (a->seen[i].uid == uid)
			return &a->seen[i];
		if (oldest == NULL || seen_last(&a->seen[i]) < seen_last(oldest))
			oldest = &a->seen[i];
	}
	if (a->n_seen < SEEN_UIDS)
		oldest = &a->seen[a->n_seen++];
	memset(oldest, 0, sizeof(*oldest));
	oldest->uid = uid;
	oldest->tokens = BCD_WL_RULELESS_BURST;
	return oldest;
}

/*
 * Is a connection of (uid, gid) known to get nothing, before anything of
 * it is read: no rule can match its ids, or its uid's connections matched
 * no rule lately and none did?  Under a->mu.
 */
static int
ruleless_known(bcd_wl_acceptor *a, uid_t uid, gid_t gid, double now)
{
	if (!bcd_wl_rules_may_match_ids(a->rules, uid, gid))
		return 1;
	for (int i = 0; i < a->n_seen; i++)
	{
		const uid_seen *u = &a->seen[i];

		if (u->uid == uid)
			return u->ruleless_at > 0 && now - u->ruleless_at < RULELESS_MEMORY &&
				(u->ruled_at == 0 || now - u->ruled_at >= RULELESS_MEMORY);
	}
	return 0;
}

/* A connection of uid known to get nothing: may it be handed over (a token of its bucket)?  Under a->mu. */
static int
ruleless_token(bcd_wl_acceptor *a, uid_t uid, double now)
{
	uid_seen   *u = seen_get(a, uid);

	if (u->refilled > 0)
		u->tokens += (now - u->refilled) * BCD_WL_RULELESS_RATE;
	if (u->tokens > BCD_WL_RULELESS_BURST)
		u->tokens = BCD_WL_RULELESS_BURST;
	u->refilled = now;
	if (u->tokens < 1)
		return 0;
	u->tokens--;
	return 1;
}

/*
 * May the connection of (uid, gid) wait for the connection thread (a slot
 * in the queue, its uid's share of it, its rate when it is known to get
 * nothing)?  1 with it queued; else 0, counted.  Under a->mu.
 */
static int
queue_take(bcd_wl_acceptor *a, int fd, uid_t uid, gid_t gid, double now)
{
	bcd_wl_accepted *it;
	int			of_uid = 0;
	int			ruleless = ruleless_known(a, uid, gid, now);

	if (ruleless && !ruleless_token(a, uid, now))
	{
		atomic_fetch_add_explicit(&a->over_rate, 1, memory_order_relaxed);
		return 0;
	}
	for (int i = 0; i < a->n; i++)
		of_uid += a->queue[(a->head + i) % BCD_WL_ACCEPT_QUEUE].uid == uid;
	if (a->n == BCD_WL_ACCEPT_QUEUE || of_uid >= BCD_WL_ACCEPT_QUEUE_PER_UID)
	{
		atomic_fetch_add_explicit(&a->over_queue, 1, memory_order_relaxed);
		return 0;
	}
	it = &a->queue[(a->head + a->n) % BCD_WL_ACCEPT_QUEUE];
	it->fd = fd;
	it->uid = uid;
	it->gid = gid;
	it->ruleless = ruleless;
	a->n++;
	return 1;
}

/*
 * Take up to ACCEPT_BATCH connections off the listen queue, poll them at
 * once, close those their callers closed already (a connect/close loop:
 * nothing of them read), read the others' SO_PEERCRED and queue them for
 * the connection thread as far as their uids may (queue_take).  The number
 * taken (0: the listen queue is empty).
 */
static int
accept_batch(bcd_wl_acceptor *a)
{
	struct pollfd b[ACCEPT_BATCH];
	struct ucred cred[ACCEPT_BATCH];
	int			live[ACCEPT_BATCH];
	double		now;
	int			n = 0;
	int			fd;
	int			early = 0;

	while (n < ACCEPT_BATCH &&
		   (fd = accept4(a->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
	{
		b[n].fd = fd;
		b[n].events = POLLIN | POLLRDHUP;
		b[n].revents = 0;
		n++;
	}
	if (n < ACCEPT_BATCH && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
		errno != ECONNABORTED)
		bcd_log("workload api: accept: %s", strerror(errno));
	if (n == 0)
		return 0;
	if (poll(b, (nfds_t) n, 0) < 0)
		for (int i = 0; i < n; i++)
			b[i].revents = 0;
	for (int i = 0; i < n; i++)
	{
		socklen_t	clen = sizeof(cred[i]);

		live[i] = 0;
		if ((b[i].revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0)
			early++;
		else
			live[i] = getsockopt(b[i].fd, SOL_SOCKET, SO_PEERCRED, &cred[i], &clen) == 0 &&
				clen == sizeof(cred[i]);
	}
	now = bcd_now_s();
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < n; i++)
		if (live[i] && queue_take(a, b[i].fd, cred[i].uid, cred[i].gid, now))
			b[i].fd = -1;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	for (int i = 0; i < n; i++)
		if (b[i].fd >= 0)
			close(b[i].fd);
	if (early > 0)
		atomic_fetch_add_explicit(&a->early, (unsigned long) early, memory_order_relaxed);
	return n;
}

/* An accept thread (ACCEPT_THREADS of them on the one listening socket). */
static void *
accept_main(void *arg)
{
	bcd_wl_acceptor *a = arg;
	int			nice_now;

	/* this thread alone (a tid), ACCEPT_NICE above bcd's priority where it may */
	errno = 0;
	nice_now = getpriority(PRIO_PROCESS, 0);
	if (errno == 0 &&
		setpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid),
					nice_now - ACCEPT_NICE < -20 ? -20 : nice_now - ACCEPT_NICE) != 0 &&
		!atomic_exchange(&a->nice_told, 1))
		bcd_log("workload api: the accept threads run at bcd's priority (cannot raise it: %s): "
				"a local caller connecting and closing in a loop may fill the listen queue",
				strerror(errno));
	while (!atomic_load(&a->stopping))
	{
		struct pollfd pfd[2] = {{a->fd, POLLIN, 0}, {a->stop_pipe[0], POLLIN, 0}};

		if (poll(pfd, 2, -1) < 0)
			continue;
		if (pfd[1].revents != 0)
			break;
		if (pfd[0].revents == 0)
			continue;
		while (!atomic_load(&a->stopping) && accept_batch(a) == ACCEPT_BATCH)
			;
	}
	return NULL;
}

/* The connection thread: each queued connection to fn; those still queued at the stop closed. */
static void *
conn_main(void *arg)
{
	bcd_wl_acceptor *a = arg;

	pthread_mutex_lock(&a->mu);
	for (;;)
	{
		bcd_wl_accepted it;

		while (a->n == 0 && !atomic_load(&a->stopping))
			pthread_cond_wait(&a->cv, &a->mu);
		if (a->n == 0)
			break;
		it = a->queue[a->head];
		a->head = (a->head + 1) % BCD_WL_ACCEPT_QUEUE;
		a->n--;
		pthread_mutex_unlock(&a->mu);
		if (atomic_load(&a->stopping))
			close(it.fd);
		else
			a->fn(a->arg, &it);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

bcd_wl_acceptor *
bcd_wl_acceptor_new(int listen_fd, const bcd_wl_rules *rules, bcd_wl_accept_fn fn, void *arg)
{
	bcd_wl_acceptor *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	if (pipe2(a->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		free(a);
		return NULL;
	}
	a->fd = listen_fd;
	a->rules = rules;
	a->fn = fn;
	a->arg = arg;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	return a;
}

int
bcd_wl_acceptor_start(bcd_wl_acceptor *a)
{
	if (pthread_create(&a->conn_thread, NULL, conn_main, a) != 0)
	{
		bcd_log("workload api: cannot start its connection thread; not serving");
		return BC_EINVAL;
	}
	a->conn_started = 1;
	for (a->n_threads = 0; a->n_threads < ACCEPT_THREADS; a->n_threads++)
		if (pthread_create(&a->threads[a->n_threads], NULL, accept_main, a) != 0)
		{
			bcd_log("workload api: cannot start its accept threads; not serving");
			bcd_wl_acceptor_stop(a);
			return BC_EINVAL;
		}
	return BC_OK;
}

void
bcd_wl_acceptor_stop(bcd_wl_acceptor *a)
{
	char		c = 1;

	if (a == NULL)
		return;
	atomic_store(&a->stopping, 1);
	(void) !write(a->stop_pipe[1], &c, 1);
	for (int i = 0; i < a->n_threads; i++)
		pthread_join(a->threads[i], NULL);
	a->n_threads = 0;
	if (a->conn_started)
	{
		pthread_mutex_lock(&a->mu);
		pthread_cond_signal(&a->cv);
		pthread_mutex_unlock(&a->mu);
		pthread_join(a->conn_thread, NULL);
		a->conn_started = 0;
	}
}

void
bcd_wl_acceptor_free(bcd_wl_acceptor *a)
{
	if (a == NULL)
		return;
	bcd_wl_acceptor_stop(a);
	close(a->stop_pipe[0]);
	close(a->stop_pipe[1]);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a);
}

void
bcd_wl_acceptor_seen(bcd_wl_acceptor *a, uid_t uid, int ruled)
{
	double		now = bcd_now_s();

	pthread_mutex_lock(&a->mu);
	if (ruled)
		seen_get(a, uid)->ruled_at = now;
	else
		seen_get(a, uid)->ruleless_at = now;
	pthread_mutex_unlock(&a->mu);
}

void
bcd_wl_acceptor_counts(bcd_wl_acceptor *a, unsigned long *early, unsigned long *rate,
					   unsigned long *queue)
{
	*early = atomic_exchange(&a->early, 0);
	*rate = atomic_exchange(&a->over_rate, 0);
	*queue = atomic_exchange(&a->over_queue, 0);
}
