/*
 * accept.h: the Workload API's accepting (docs/security.md, "Workload
 * attestation": one local user cannot lock the others out).  Accept
 * threads drain the listen queue and hand each connection that may be
 * served, with its SO_PEERCRED, to one connection thread, which calls back
 * into workload.c to read the caller and make its grpc_server.
 */
#ifndef BCD_WL_ACCEPT_H
#define BCD_WL_ACCEPT_H

#include <sys/types.h>

#include "workload/rules.h"

/*
 * A uid known to get nothing (no rule can match its ids, or its
 * connections matched no rule lately and none did): BCD_WL_RULELESS_RATE of
 * its connections a second (BCD_WL_RULELESS_BURST at once) are handed
 * over, the rest closed before anything of them is read.
 */
#define BCD_WL_RULELESS_RATE 32.0
#define BCD_WL_RULELESS_BURST 64.0
/* Connections waiting for the connection thread, at most; of one uid. */
#define BCD_WL_ACCEPT_QUEUE 256
#define BCD_WL_ACCEPT_QUEUE_PER_UID 32

/* A connection handed over: its descriptor and what SO_PEERCRED says. */
typedef struct bcd_wl_accepted
{
	int			fd;
	uid_t		uid;
	gid_t		gid;
	int			ruleless;		/* its uid is known to get nothing */
} bcd_wl_accepted;

/* Called on the connection thread for each connection handed over (it owns the fd). */
typedef void (*bcd_wl_accept_fn) (void *arg, const bcd_wl_accepted *a);

typedef struct bcd_wl_acceptor bcd_wl_acceptor;

/* The accepting of listen_fd (nothing runs yet); NULL when out of memory. */
bcd_wl_acceptor *bcd_wl_acceptor_new(int listen_fd, const bcd_wl_rules *rules,
									 bcd_wl_accept_fn fn, void *arg);

/* Start its threads: BC_OK, or BC_EINVAL (logged; none left running). */
int			bcd_wl_acceptor_start(bcd_wl_acceptor *a);

/* Stop its threads (fn is not called after); connections still waiting are closed. */
void		bcd_wl_acceptor_stop(bcd_wl_acceptor *a);

/* Free it (stopped first). */
void		bcd_wl_acceptor_free(bcd_wl_acceptor *a);

/* What the rules said of a connection of uid (the connection thread tells it). */
void		bcd_wl_acceptor_seen(bcd_wl_acceptor *a, uid_t uid, int ruled);

/*
 * The connections closed at once since the last call: their callers had
 * closed them already; of a uid known to get nothing, over its rate; over
 * the waiting ones' bounds.
 */
void		bcd_wl_acceptor_counts(bcd_wl_acceptor *a, unsigned long *early, unsigned long *rate,
								   unsigned long *queue);

#endif							/* BCD_WL_ACCEPT_H */
