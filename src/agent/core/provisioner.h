/*
 * provisioner.h: bcd run's provisioner (provisioner.c): the node credential
 * it signs with, and the session credentials and JWT-SVIDs it provisions
 * for its clients, the hooks' socket server (sessions.c) and the Workload
 * API (workload/): coalesced by key, queued, run by --max-provisioning
 * workers, each waiting client called back.  The daemon makes it and hands
 * it to both servers, as SPIRE's agent hands its SVID manager to its
 * endpoints; it knows neither of them.
 */
#ifndef BCD_PROVISIONER_H
#define BCD_PROVISIONER_H

#include <stddef.h>
#include <stdint.h>

#include "core/agent.h"
#include "core/job.h"
#include "core/node_credential.h"
#include "core/peer.h"
#include "core/service_keys.h"
#include "core/store.h"

typedef struct bcd_provisioner bcd_provisioner;

/*
 * The provisioner of o's gateway and --max-provisioning, signing requests
 * checked against keys; initial (when not NULL) published as the node
 * credential.  Nothing runs yet.  NULL when out of memory.
 */
bcd_provisioner *bcd_provisioner_new(const bcd_run_opts *o, const bcd_service_keys *keys,
									 const bcd_credential *initial);
/* Start its workers (one HTTPS client each) and its thread: BC_OK, or an error in err. */
int			bcd_provisioner_start(bcd_provisioner *p, char *err, size_t errlen);
/*
 * Stop the workers (bcd_stop_now first aborts a request in flight); what
 * they finished is still called back by the provisioner's thread.
 */
void		bcd_provisioner_stop_workers(bcd_provisioner *p);
/*
 * Stop: the workers, then its thread; every client still waiting is called
 * back, unavailable (bcd is stopping).  No call back after this; an ask is
 * refused.
 */
void		bcd_provisioner_stop(bcd_provisioner *p);
/* Free it (stopped first). */
void		bcd_provisioner_free(bcd_provisioner *p);

/*
 * Ask, from any thread, for the provisioning of kind for (session, context)
 * (a JWT-SVID: for aud, checked and sorted) on behalf of caller (its claim
 * in the proof): joined to the one of the same key queued or running,
 * whoever asked for it, or queued.  cb(arg, job) is called on the
 * provisioner's thread when it ends, or failed when it cannot start (no
 * usable node credential); never before this returns.  BC_OK, or BC_ENOMEM
 * / BC_EINVAL (stopped): no call back.
 */
int			bcd_provisioner_ask(bcd_provisioner *p, bcd_job_kind kind, const char *session,
								const char *context, const bcd_audiences *aud,
								const bcd_peer *caller, bcd_job_cb cb, void *arg);
/*
 * The same for a session credential that asks an SSH user certificate too
 * ("sshUser": true in the proof; the hooks' socket asks it for bcd
 * credential --ssh, or for every hook with bcd run --ssh-user-certs).
 * Joined to the provisioning of the same key already queued or running as
 * it is: when that one was asked without it, its result carries no SSH
 * certificate (job->ssh_cert NULL, ssh_user 0).
 */
int			bcd_provisioner_ask_ssh(bcd_provisioner *p, const char *session,
									const char *context, const bcd_peer *caller,
									bcd_job_cb cb, void *arg);

/* Publish cred as the node credential (NULL: none), from the main thread. */
void		bcd_provisioner_publish(bcd_provisioner *p, const bcd_credential *cred);
/* The main thread starts (on 1) or ends (on 0) a renewal (node_credential.c). */
void		bcd_provisioner_renewing(bcd_provisioner *p, int on);
/*
 * Continuous attestation's word (core/attest.c): on 1 the service
 * quarantined the node: every ask fails at once, refused with
 * BCD_QUARANTINED_MESSAGE, and the Workload API ends its streams; on 0 it
 * was attested again.  From any thread.
 */
void		bcd_provisioner_quarantine(bcd_provisioner *p, int on);
/* 1 while the node is quarantined, from any thread (an atomic read). */
int			bcd_provisioner_quarantined(bcd_provisioner *p);

/* What a caller is told while the node is quarantined. */
#define BCD_QUARANTINED_MESSAGE "this node is quarantined: the service found its TPM's " \
	"measurements failing (continuous attestation) and revoked its certificates; nothing is " \
	"issued until an operator readmits it (bc_join.readmit_node; the reason is in " \
	"bc_join.events, node.quarantined)"

/*
 * The revocation watch's word (core/revocation.c): the node certificate
 * serial was revoked at revoked_at (Unix seconds) for reason (its RFC 5280
 * name), as source ("OCSP", "the CRL") says.  Taken only while serial is
 * the published node credential's: then every ask fails at once, refused
 * with a message naming the revocation, and the Workload API ends its
 * streams, until a credential of another serial is published.  From any
 * thread; logged once.
 */
void		bcd_provisioner_revoke(bcd_provisioner *p, const char *serial, const char *reason,
								   int64_t revoked_at, const char *source);

/* Why every ask is refused now: none, quarantined, or the node certificate revoked. */
typedef enum bcd_refusal
{
	BCD_REFUSAL_NONE = 0,
	BCD_REFUSAL_QUARANTINED,
	BCD_REFUSAL_REVOKED
} bcd_refusal;

/*
 * Why every ask is refused now, from any thread; when refused, the message
 * a caller is told in msg (quarantine first: it is what an operator must
 * act on).
 */
bcd_refusal bcd_provisioner_refusal(bcd_provisioner *p, char *msg, size_t len);

/*
 * The node CA's CRL (DER, verified by the watch: revocation.c) that the
 * Workload API and the hooks hand out: set it (a copy kept; its generation
 * bumped), and take a copy (malloc()ed, *der NULL when none yet) with its
 * generation.  From any thread.
 */
void		bcd_provisioner_set_crl(bcd_provisioner *p, const unsigned char *der, size_t len);
unsigned long bcd_provisioner_crl(bcd_provisioner *p, unsigned char **der, size_t *len);
/* The CRL's generation (0: none yet), an atomic read. */
unsigned long bcd_provisioner_crl_gen(bcd_provisioner *p);

/* A snapshot of the published node credential (bcd_node_release it), from any thread. */
void		bcd_provisioner_node_take(bcd_provisioner *p, bcd_node_snapshot *out);

/*
 * Its numbers into c (queued, in_flight, max_provisioning, provisionings,
 * jwt_fetches, quarantined; the rest untouched); returns how often they or the node
 * credential changed so far.
 */
unsigned long bcd_provisioner_numbers(bcd_provisioner *p, bcd_counters *c);
/*
 * fn(arg) is called, from any thread and without a lock held, each time the
 * numbers or the node credential change (the hooks' socket server rewrites
 * --metrics-file).  Set before the provisioner starts.
 */
void		bcd_provisioner_watch(bcd_provisioner *p, void (*fn) (void *arg), void *arg);

#endif							/* BCD_PROVISIONER_H */
