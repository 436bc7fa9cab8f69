/*
 * jwt_svids.h: the JWT-SVIDs FetchJWTSVID answers (jwt_svids.c), bounded:
 * fetched as provisionings of the provisioner (its queue and
 * --max-provisioning workers, bcd_provisioner_ask), one fetch per
 * (session, context, audiences) at a time with every caller of that key
 * waiting on it, kept until half their life, a token bucket per caller's
 * uid for the fetches it starts, and RESOURCE_EXHAUSTED past any bound.
 * Every function is called with the Workload API's mutex held.
 */
#ifndef BCD_WL_JWT_SVIDS_H
#define BCD_WL_JWT_SVIDS_H

#include <pthread.h>
#include <stddef.h>

#include <grpc/status.h>

#include "core/job.h"
#include "core/peer.h"
#include "core/provisioner.h"

/* The JWT-SVIDs of one Workload API. */
typedef struct bcd_wl_jwt_svids bcd_wl_jwt_svids;

/* How a waiting call is answered: OK with spiffe_id and token, else code and message. */
typedef void (*bcd_wl_jwt_answer_fn) (void *arg, void *waiter, grpc_status_code code,
									  const char *spiffe_id, const char *token,
									  const char *message);

/* mu: the Workload API's (the provisioning call-back takes it); prov: whose workers fetch. */
bcd_wl_jwt_svids *bcd_wl_jwt_svids_new(pthread_mutex_t *mu, bcd_provisioner *prov);
/* Free it, once no fetch is in flight (the provisioner has stopped). */
void		bcd_wl_jwt_svids_free(bcd_wl_jwt_svids *c);

/*
 * A FetchJWTSVID of caller for (session, context) and aud (checked, sorted);
 * want_id its spiffe_id ("" for any).  1: waiter is kept and answered later
 * by bcd_wl_jwt_svids_answer (or _drain).  0: answered now, in *code
 * (GRPC_STATUS_OK with *spiffe_id and *token, valid while the mutex is
 * held; else why in msg).
 */
int			bcd_wl_jwt_svids_fetch(bcd_wl_jwt_svids *c, const bcd_peer *caller,
								   const char *session, const char *context,
								   const bcd_audiences *aud, const char *want_id, void *waiter,
								   grpc_status_code *code, const char **spiffe_id,
								   const char **token, char *msg, size_t msglen);
/* Forget every cached JWT-SVID whose kid known(arg, kid) no longer knows (a retired key). */
void		bcd_wl_jwt_svids_forget(bcd_wl_jwt_svids *c, int (*known) (void *arg, const char *kid),
									void *arg);
/* Answer (through fn) every waiter whose fetch has ended. */
void		bcd_wl_jwt_svids_answer(bcd_wl_jwt_svids *c, bcd_wl_jwt_answer_fn fn, void *arg);
/* Stopping: answer every waiter UNAVAILABLE now; later fetches answer no one. */
void		bcd_wl_jwt_svids_drain(bcd_wl_jwt_svids *c, bcd_wl_jwt_answer_fn fn, void *arg);

#endif							/* BCD_WL_JWT_SVIDS_H */
