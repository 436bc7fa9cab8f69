/*
 * job.h: one provisioning (bcd_job) of a session credential or of a
 * JWT-SVID, its answer code and result, and the numbers published about
 * them (bcd_counters): the types the provisioner (provisioner.c), its
 * workers, provision.c, provision_jwt.c, its clients (the hooks' socket
 * server, the Workload API), delivery.c and metrics.c share.  A plain type
 * header, below the orchestrators.
 */
#ifndef BCD_JOB_H
#define BCD_JOB_H

#include <stdatomic.h>
#include <stddef.h>

#include "bc_protocol.h"
#include "core/peer.h"

/* The answer codes of the socket protocol (bc_protocol.h, BC_SOCK_*). */
typedef enum bcd_code
{
	BCD_CODE_OK = 0,
	BCD_CODE_NO_NODE_CREDENTIAL,
	BCD_CODE_BUSY,
	BCD_CODE_REFUSED,
	BCD_CODE_UNAVAILABLE,
	BCD_CODE_BAD_REQUEST,
	BCD_CODE_BAD_DIR,
	BCD_CODE_FORBIDDEN,
	BCD_CODE_FAILED,
	BCD_CODE_NO_SSH_CERTIFICATE,	/* asked --ssh; the credential carries no SSH certificate */
	BCD_CODE_COUNT
} bcd_code;

/*
 * How one provisioning (one POST /v1/session or /v1/jwt-svid) ended: the
 * metrics' outcome label (the process's outcomes are bcd_rc, outcome.h).
 */
typedef enum bcd_job_result
{
	BCD_RESULT_ISSUED = 0,
	BCD_RESULT_REFUSED,
	BCD_RESULT_UNAVAILABLE,
	BCD_RESULT_FAILED,
	BCD_RESULT_COUNT
} bcd_job_result;

/*
 * What a provisioning makes.  Both kinds are keyed, queued, coalesced and
 * run by the same --max-provisioning workers (provisioner.c, workers.c).
 */
typedef enum bcd_job_kind
{
	BCD_JOB_SESSION = 0,		/* a session credential: POST /v1/session (provision.c) */
	BCD_JOB_JWT_SVID			/* a JWT-SVID for audiences: POST /v1/jwt-svid (provision_jwt.c) */
} bcd_job_kind;

/* The audiences of a JWT-SVID, bounded as the service bounds them (src/ext/jwt_svid.c). */
#define BCD_JWT_AUDIENCES_MAX 8
#define BCD_JWT_AUDIENCE_LEN_MAX 256

/* A JWT-SVID's audiences: 1 to 8 printable ASCII strings, sorted, none twice. */
typedef struct bcd_audiences
{
	int			n;
	char		v[BCD_JWT_AUDIENCES_MAX][BCD_JWT_AUDIENCE_LEN_MAX + 1];
} bcd_audiences;

/* job.c */
/* 1 when a and b are the same audiences in the same order (both sorted: the same set). */
int			bcd_audiences_equal(const bcd_audiences *a, const bcd_audiences *b);
const char *bcd_code_name(bcd_code code);
int			bcd_code_retryable(bcd_code code);
const char *bcd_job_result_name(bcd_job_result result);

struct bcd_job;

/*
 * How a client of the provisioner (provisioner.h: the hooks' socket server,
 * the Workload API) is told that a provisioning it asked for ended: called
 * on the provisioner's thread with the finished job, whose result is valid
 * during the call only (bcd_job_hold keeps it longer).
 */
typedef void (*bcd_job_cb) (void *arg, const struct bcd_job *job);

/* One client waiting for a provisioning. */
typedef struct bcd_job_waiter
{
	bcd_job_cb	cb;
	void	   *arg;
	struct bcd_job_waiter *next;
} bcd_job_waiter;

/* One provisioning: its key (kind, session, context, audiences), its waiters, its result. */
typedef struct bcd_job
{
	bcd_job_kind kind;
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	bcd_audiences audience;		/* BCD_JOB_JWT_SVID: what the JWT-SVID is for */
	bcd_peer	caller;			/* the caller that started it (its claim in the proof) */
	int			ssh_user;		/* BCD_JOB_SESSION: ask for an SSH user certificate too
								 * ("sshUser": true in the proof; ssh_user.c) */
	bcd_job_waiter *waiters;	/* the clients waiting for it, called back when it ends */
	int			dispatched;		/* handed to a worker (and how often) */
	atomic_int	refs;			/* the provisioner's, and bcd_job_hold's */
	struct bcd_job *next;		/* in the provisioner's table of jobs */
	struct bcd_job *qnext;		/* in the provisioner's queue, the workers' queue or done list */
	/* the result, written by the worker that ran it */
	bcd_code	code;
	bcd_job_result result;	/* how it ended, for the metrics */
	char		message[512];
	char	   *key_pem;		/* secret: bc_free_secret */
	size_t		key_len;
	char	   *chain_pem;
	size_t		chain_len;
	char		not_after[64];
	char		serial[41];
	char		spiffe_id[512];
	char	   *ssh_cert;		/* ssh_user: the `.key-cert.pub` line, or NULL (why in ssh_why) */
	char		ssh_serial[21];	/* its serial, decimal */
	char		ssh_why[256];	/* why there is none (asked for) */
	char	   *token;			/* BCD_JOB_JWT_SVID: the JWT-SVID (a bearer token: wiped) */
	long		token_ttl;		/* its lifetime in seconds (the service's expiresAt - issuedAt) */
} bcd_job;

/* A new job of kind for (session, context[, aud]) asked by caller, one reference held; NULL on OOM (job.c). */
bcd_job    *bcd_job_new(bcd_job_kind kind, const char *session, const char *context,
						const bcd_audiences *aud, const bcd_peer *caller);
/* Another reference to a finished job, from any thread (job.c). */
const bcd_job *bcd_job_hold(const bcd_job *job);
/* Drop a reference; the last one releases the result (wiped) and the job (job.c). */
void		bcd_job_release(const bcd_job *job);
/* Release a job's result (the key and the token are wiped; job.c). */
void		bcd_job_clear_result(bcd_job *job);
/* Set job's result to a failure: code, result and a message for the caller (job.c). */
void		bcd_job_fail(bcd_job *job, bcd_code code, bcd_job_result result, const char *fmt,...)
			__attribute__((format(printf, 4, 5)));

/*
 * What the published numbers are made of: the hooks' socket server's
 * (waiting, max_queue, answers) and the provisioner's (the rest).
 */
typedef struct bcd_counters
{
	long		waiting;		/* callers waiting for a credential: the queue depth */
	long		queued;			/* provisionings waiting for a worker */
	long		in_flight;		/* provisionings running */
	long		max_provisioning;
	long		max_queue;
	unsigned long answers[BCD_CODE_COUNT];
	unsigned long provisionings[BCD_RESULT_COUNT];	/* session credentials */
	unsigned long jwt_fetches[BCD_RESULT_COUNT];	/* JWT-SVIDs */
	int			quarantined;	/* the service quarantined the node (attest.c) */
	/* the node certificate revoked (revocation.c): its serial, reason, time, who said so */
	int			revoked;
	char		revoked_serial[41];
	char		revoked_reason[32];
	char		revoked_source[16];
	long long	revoked_at;
	unsigned long crl_gen;		/* the CRL held: its generation, 0 none */
} bcd_counters;

#endif							/* BCD_JOB_H */
