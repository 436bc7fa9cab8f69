/*
 * internal.h: what the Workload API's own files share (never included
 * outside workload/): the server's state, a connection and a call, the
 * method table's row, and each file's functions.
 *
 *   workload.c     its life (start, run, stop, free) and the completion-queue
 *                  thread's tick, which calls each part below
 *   conn.c         connections: accepted (shares of the slots, what /proc says,
 *                  the rules), told about when closed at once, reaped when idle
 *   call.c         a connection's grpc_server and its calls: requested, their
 *                  batches, finished, pushed; each event of the completion queue;
 *                  a call's method looked up in the table, its request unpacked
 *   authorize.c    a call's caller: the identity its rule names, bound to its
 *                  connection, checked again before a secret goes; refusals logged
 *   methods.c      the method table and its handlers
 *   sds.c          Envoy's SDS v3 (StreamSecrets, FetchSecrets): its handlers
 *   x509_svids.c   the X509-SVIDs kept per identity, provisioned again at half life
 *   jwt_svids.c    the JWT-SVIDs FetchJWTSVID answers (jwt_svids.h)
 *   files.c        files mode: identities kept in directories, a reload run (files.h)
 *   protobuf.c     messages to and from gRPC byte buffers; JSON to Struct
 *
 * Locking.  One mutex (w->mu) guards the connections, calls and
 * identities; every function here but those of conn.c that say otherwise
 * runs under it.  The provisioner's call-backs (its thread) take it too.
 * No grpc_* call made under it calls back into these files: completions
 * only come out of the completion queue.
 */
#ifndef BCD_WL_INTERNAL_H
#define BCD_WL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include <grpc/grpc.h>
#include <jansson.h>
#include <openssl/x509.h>

#include "workload.pb-c.h"
#include "sds.pb-c.h"

#include "core/local_socket.h"
#include "core/provisioner.h"
#include "core/trust_bundles.h"
#include "workload/accept.h"
#include "workload/attest.h"
#include "workload/files.h"
#include "workload/jwt.h"
#include "workload/jwt_svids.h"
#include "workload/refusals.h"
#include "workload/rules.h"
#include "workload/workload.h"

/* The completion-queue thread's tick, in milliseconds. */
#define WL_TICK_MS 100

/* What a completion-queue event is about. */
typedef enum wl_tag_kind
{
	WL_TAG_NEW_CALL,
	WL_TAG_RECV_MSG,
	WL_TAG_SEND_MSG,
	WL_TAG_CLOSE,
	WL_TAG_STATUS,
	WL_TAG_SHUTDOWN
} wl_tag_kind;

/* The tag of a batch or a server's shutdown: its kind and its call or connection. */
typedef struct wl_tag
{
	wl_tag_kind kind;
	void	   *obj;
} wl_tag;

/* One session identity: (session, context) and its current X509-SVID (x509_svids.c). */
typedef struct wl_identity
{
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	pthread_mutex_t *mu;		/* the workload's (the call-back takes it) */
	bcd_peer	caller;			/* the first caller's, the claim in the proof */
	int			streams;		/* open FetchX509SVID streams */
	int			in_flight;		/* a provisioning asked for */
	double		next_try;		/* realtime: not before (backoff) */
	double		backoff;
	double		renew_at;		/* realtime: provision again from then */
	/* the current SVID (gen 0: none yet) */
	unsigned long gen;
	char		spiffe_id[512];
	unsigned char *chain;		/* DER, leaf first, no root */
	size_t		chain_len;
	unsigned char *key;			/* PKCS#8 DER: secret */
	size_t		key_len;
	double		not_after;		/* realtime */
	ASN1_INTEGER *serial;		/* the leaf's serial (the CRL is checked against it) */
	int			listed;			/* the leaf is on the CRL: not served, a new one asked for */
	struct wl_identity *next;
} wl_identity;

struct wl_conn;
struct wl_method;
struct bcd_workload;

/* One call on a connection (call.c). */
typedef struct wl_call
{
	struct wl_conn *conn;
	grpc_call  *call;
	grpc_call_details details;
	grpc_metadata_array req_md;
	grpc_byte_buffer *req_payload;
	grpc_byte_buffer *send_buf;
	const struct wl_method *method; /* NULL: not one of the table's */
	wl_identity *id;			/* the identity its caller's rule names */
	wl_identity *streams_of;	/* a FetchX509SVID stream: counted in its identity's streams */
	int			pending;		/* batches started and not completed */
	int			closed;
	int			cancelled;
	int			streaming;
	int			send_in_flight;
	int			finished;		/* a status was sent */
	int			bind;			/* BCD_WL_RULE_*: what its rule asks of the caller */
	const char *federates;		/* its rule's federated trust domains ("td+td...", "" none) */
	int			counted;		/* a call: counted in its connection's calls */
	unsigned long sent_gen;		/* the identity's SVID last sent */
	int			sent_once;		/* bundles: sent */
	unsigned long sent_trust;	/* bundles: the trust generation last sent */
	unsigned long sent_crl;		/* the CRL generation last sent */
	int			got_first;		/* its first request was handed to its method's handle */
	struct wl_sds *sds;			/* an SDS call's state (sds.c) */
	grpc_slice	status_details;
	int			have_details;
	wl_tag		t_new,
				t_recv,
				t_send,
				t_close,
				t_status;
	struct wl_call *next;
} wl_call;

/* One accepted connection and its grpc_server (conn.c, call.c). */
typedef struct wl_conn
{
	int			id;
	int			refs;
	grpc_server *server;
	int			fd;
	dev_t		st_dev;
	ino_t		st_ino;
	int			shutting_down;
	bcd_wl_caller caller;		/* as read at accept */
	bcd_wl_bind bind;			/* the connecting process and its end (attest.c) */
	int			bind_ok;		/* bind was taken: the process was there at accept */
	int			ruled;			/* a rule matched it at accept */
	int			calls;			/* calls open */
	int			had_call;
	double		idle_since;		/* monotonic: accepted, or its last call ended */
	struct bcd_workload *w;
	wl_tag		t_shutdown;
	struct wl_conn *next;
} wl_conn;

/* What a method's answer is (wl_method.flags). */
#define WL_METHOD_SECRET 1		/* a secret: its caller bound as its rule asks, checked before it goes */
#define WL_METHOD_STRINGS 2		/* a request with strings: refused unless packed again to its length */
#define WL_METHOD_BIDI 4		/* a bidirectional stream: every later request goes to more */

/* The services a method is of: its path is the service's, then its name. */
#define WL_SERVICE_WORKLOAD "/SpiffeWorkloadAPI/"
#define WL_SERVICE_SDS "/envoy.service.secret.v3.SecretDiscoveryService/"

/*
 * One method of the Workload API: a row of methods.c's table.  A call of
 * <service><name> has its request unpacked against request
 * (protobuf_c_message_unpack) and handed to handle; a stream (serve not
 * NULL) is then served at once and at every tick.  A bidirectional one
 * (WL_METHOD_BIDI) hands every later request to more.  Only the calls of
 * WL_SERVICE_WORKLOAD must carry the security header (Envoy sends none).
 */
typedef struct wl_method
{
	const char *service;		/* WL_SERVICE_* */
	const char *name;
	const ProtobufCMessageDescriptor *request;
	unsigned	flags;			/* WL_METHOD_* */
	void		(*handle) (struct bcd_workload *w, wl_call *r, const ProtobufCMessage *req);
	void		(*serve) (struct bcd_workload *w, wl_call *r, double now);
	void		(*more) (struct bcd_workload *w, wl_call *r, const ProtobufCMessage *req);
} wl_method;

/* One trust domain a call may see (wl_trust_domains): its name (no scheme) and roots. */
typedef struct wl_trust_domain
{
	const char *name;
	const unsigned char *roots;	/* DER, concatenated */
	size_t		roots_len;
	int			own;			/* bcd's own (the node CA's CRL is about it) */
} wl_trust_domain;

/* The most trust domains wl_trust_domains gives. */
#define WL_TRUST_DOMAINS_MAX 17

/* The Workload API server of bcd run. */
struct bcd_workload
{
	pthread_mutex_t mu;
	grpc_completion_queue *cq;
	grpc_server_credentials *creds;
	bcd_listener sock;
	char	   *path;
	atomic_int	stopping;
	bcd_wl_acceptor *acceptor;	/* its accept threads and connection thread (accept.c) */
	pthread_t	cq_thread;
	int			running;
	bcd_provisioner *prov;
	const bcd_service_keys *keys;
	bcd_wl_rules *rules;
	const wl_method *methods;	/* the table (methods.c), handed over by workload.c */
	int			sds_validation; /* --sds-validation: BCD_SDS_VALIDATION_* (sds.c) */
	int			n_methods;
	bcd_wl_jwt *jwt;
	unsigned long trust_gen;	/* bumped whenever a bundle changes (jwt-svid keys, federated ones) */
	bcd_trust_set *fed;			/* the federated trust domains' bundles (a reference), or NULL */
	bcd_wl_jwt_svids *jwt_svids;	/* FetchJWTSVID's cache, fetches and limits */
	bcd_wl_files *files;		/* files mode (files.c), NULL without --svid-files */
	char	   *trust_domain;
	unsigned char *bundle;		/* DER of the trust domain's root */
	size_t		bundle_len;
	/* the node CA's CRL (the provisioner's copy, taken at the tick): DER, parsed, generation */
	unsigned char *crl;
	size_t		crl_len;
	X509_CRL   *crl_parsed;
	unsigned long crl_gen;
	wl_conn    *conns;
	int			n_conns;
	int			next_conn_id;
	wl_call    *calls;
	wl_identity *identities;
	bcd_wl_refusals *refusals;	/* the refusals' log, rate-limited */
	unsigned long idle_closed;	/* idle connections closed, not yet told */
	double		idle_logged;	/* monotonic: told last */
	/* connections closed at once over a share (the connection thread), under closed_mu */
	pthread_mutex_t closed_mu;
	unsigned long over_share;	/* not yet told */
	uid_t		over_uid;		/* the last of them: its uid and why */
	const char *over_why;
	double		share_logged;	/* monotonic: the connections closed at once told last */
};

/* conn.c */
void		wl_accept_one(void *arg, const bcd_wl_accepted *it);	/* w->mu not held */
void		wl_tell_closed(struct bcd_workload *w, double now); /* under closed_mu */
void		wl_reap(struct bcd_workload *w);

/* call.c */
void		wl_tag_init(wl_tag *t, wl_tag_kind kind, void *obj);
void		wl_call_request(struct bcd_workload *w, wl_conn *c);
void		wl_call_finish(wl_call *r, int send_initial_md, grpc_byte_buffer *msg,
						   grpc_status_code code, const char *details);
void		wl_call_push(wl_call *r, grpc_byte_buffer *bb);
void		wl_call_batch_done(struct bcd_workload *w, wl_call *r);
int			wl_call_secret_may_go(wl_call *r);
void		wl_call_serve(struct bcd_workload *w, wl_call *r, double now);
void		wl_conn_shutdown(struct bcd_workload *w, wl_conn *c);
void		wl_handle_event(struct bcd_workload *w, grpc_event ev);

/* authorize.c */
void		wl_log_refusal(struct bcd_workload *w, const bcd_wl_caller *cl, const char *what,
						   const char *why);
grpc_status_code wl_authorize_call(struct bcd_workload *w, wl_call *r, const char *method,
								   const char **details, int *drop);
int			wl_authorize_secret(wl_call *r, int *drop);
int			wl_trust_domains(const struct bcd_workload *w, const wl_call *r,
							 wl_trust_domain *out, int max);
int			wl_trust_domains_of(const struct bcd_workload *w, const char *federates,
								wl_trust_domain *out, int max);

/* methods.c */
extern const wl_method wl_methods[];
extern const int wl_n_methods;
void		wl_jwt_take_done(struct bcd_workload *w);
void		wl_jwt_drain(struct bcd_workload *w);
void		wl_trust_take(struct bcd_workload *w);

/* sds.c */
void		wl_sds_stream(struct bcd_workload *w, wl_call *r, const ProtobufCMessage *req);
void		wl_sds_stream_more(struct bcd_workload *w, wl_call *r, const ProtobufCMessage *req);
void		wl_sds_stream_serve(struct bcd_workload *w, wl_call *r, double now);
void		wl_sds_fetch(struct bcd_workload *w, wl_call *r, const ProtobufCMessage *req);
void		wl_sds_fetch_serve(struct bcd_workload *w, wl_call *r, double now);
void		wl_sds_free(struct wl_sds *s);

/* x509_svids.c */
wl_identity *wl_identity_get(struct bcd_workload *w, const char *session, const char *context,
							 const bcd_peer *caller);
void		wl_x509_provision_due(struct bcd_workload *w, double now);
void		wl_identities_free(struct bcd_workload *w);
void		wl_crl_take(struct bcd_workload *w);

/* protobuf.c */
grpc_byte_buffer *wl_pack(const ProtobufCMessage *m);
uint8_t    *wl_flatten(grpc_byte_buffer *bb, size_t *len);
Google__Protobuf__Struct *wl_json_to_struct(json_t *obj);

#endif							/* BCD_WL_INTERNAL_H */
