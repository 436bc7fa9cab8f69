/*
 * workload.c: bcd's SPIFFE Workload API (docs/agent.md, "The SPIFFE
 * Workload API"; docs/design.md for why it is built this way).
 *
 * The socket.  bcd makes it exactly as its hooks' socket (local_socket.c:
 * 0600 in a 0700 directory of its own, by default workload.sock next to
 * bcd.sock) and accepts every connection itself (accept.c: accept threads
 * that drop at once what can get nothing, and a connection thread that
 * calls accept_one): the caller's SO_PEERCRED and /proc/PID (peer.c) are
 * read before gRPC sees the connection.  Each accepted fd then gets a grpc_server of its own
 * (grpc_server_add_channel_from_fd); every call is requested on that server
 * with a tag pointing at the connection, so a call is attributed to the
 * credentials of its own connection by construction (grpc_call_get_peer
 * only gives "fd:N", and fd numbers are reused).
 *
 * The calls.  One thread runs the shared completion queue (a 100 ms tick
 * for renewals and reaping).  Every call must carry "workload.spiffe.io:
 * true" (else INVALID_ARGUMENT); its caller must match a --workload-rule
 * (else PERMISSION_DENIED: no identity issued), which names the session and
 * context of its identity.  An identity's X509-SVID is a session credential
 * provisioned through the provisioner (bcd_provisioner_ask: coalesced
 * with the hooks' requests, at most one in flight per (session, context)),
 * kept while streams want it, provisioned again at half of its remaining
 * life and pushed on every open stream; while the gateway is down the last
 * one is still served until it expires, and the provisioning is retried
 * with a backoff (1 s doubling to 30 s).  A FetchJWTSVID's JWT-SVID is a
 * provisioning of the provisioner too, coalesced, cached for half its
 * life and rate-limited per uid by jwt_svid.c.
 *
 * Locking.  One mutex (w->mu) guards the connections, calls and
 * identities; the provisioning call-back (the provisioner's thread)
 * takes it too.  No grpc_* call made under it calls back into this file:
 * completions only come out of the completion queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "workload.pb-c.h"

#include "bc_common.h"
#include "core/clock.h"
#include "core/local_socket.h"
#include "core/log.h"
#include "workload/accept.h"
#include "workload/attest.h"
#include "workload/jwt.h"
#include "workload/jwt_svid.h"
#include "workload/refusals.h"
#include "workload/workload.h"

#define TICK_MS 100
#define SECURITY_HEADER "workload.spiffe.io"
#define WL_SOCKET_NAME "workload.sock"
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
/* How connections are accepted, and closed at once before anything of them is read: accept.c. */
/* A connection with no call open is closed: before its first call after, after one after */
#define WL_FIRST_CALL_SECONDS 5.0
#define WL_IDLE_SECONDS 60.0
#define WL_IDLE_RULELESS_SECONDS 5.0
/* What one caller may send in one message, and how many calls it may have open on one connection. */
#define WL_MESSAGE_MAX (64 * 1024)
#define WL_STREAMS_MAX 16
/* Backoff of a failed provisioning, in seconds. */
#define RETRY_MIN 1.0
#define RETRY_MAX 30.0

enum tag_kind
{
	TAG_NEW_CALL,
	TAG_RECV_MSG,
	TAG_SEND_MSG,
	TAG_CLOSE,
	TAG_STATUS,
	TAG_SHUTDOWN
};

struct tag
{
	enum tag_kind kind;
	void	   *obj;
};

/* One session identity: (session, context) and its current X509-SVID. */
typedef struct ident
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
	struct ident *next;
} ident;

struct conn;

enum method
{
	M_UNKNOWN,
	M_X509_SVID,
	M_X509_BUNDLES,
	M_JWT_SVID,
	M_JWT_BUNDLES,
	M_VALIDATE_JWT
};

typedef struct rpc
{
	struct conn *conn;
	grpc_call  *call;
	grpc_call_details details;
	grpc_metadata_array req_md;
	grpc_byte_buffer *req_payload;
	grpc_byte_buffer *send_buf;
	enum method method;
	ident	   *id;
	int			pending;
	int			closed;
	int			cancelled;
	int			streaming;
	int			send_in_flight;
	int			finished;		/* a status was sent */
	int			bind;			/* BCD_WL_RULE_*: what its rule asks of the caller */
	int			counted;		/* a call: counted in its connection's calls */
	unsigned long sent_gen;		/* the identity's SVID last sent */
	int			sent_once;		/* bundles: sent */
	grpc_slice	status_details;
	int			have_details;
	struct tag	t_new,
				t_recv,
				t_send,
				t_close,
				t_status;
	struct rpc *next;
} rpc;

typedef struct conn
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
	struct tag	t_shutdown;
	struct conn *next;
} conn;

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
	bcd_wl_jwt *jwt;
	bcd_wl_jwt_svids *jwt_svids;	/* FetchJWTSVID's cache, fetches and limits */
	char	   *trust_domain;
	unsigned char *bundle;		/* DER of the trust domain's root */
	size_t		bundle_len;
	conn	   *conns;
	int			n_conns;
	int			next_conn_id;
	rpc		   *rpcs;
	ident	   *idents;
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

static void
tag_init(struct tag *t, enum tag_kind k, void *obj)
{
	t->kind = k;
	t->obj = obj;
}

/* ------------------------------------------------------------ identities */

static ident *
ident_get(bcd_workload *w, const char *session, const char *context, const bcd_peer *caller)
{
	ident	   *id;

	for (id = w->idents; id != NULL; id = id->next)
		if (strcmp(id->session, session) == 0 && strcmp(id->context, context) == 0)
			return id;
	id = calloc(1, sizeof(*id));
	if (id == NULL)
		return NULL;
	snprintf(id->session, sizeof(id->session), "%s", session);
	snprintf(id->context, sizeof(id->context), "%s", context);
	id->caller = *caller;
	id->mu = &w->mu;
	id->backoff = RETRY_MIN;
	id->next = w->idents;
	w->idents = id;
	return id;
}

/* Append the DER of cert to *buf. */
static int
append_der(X509 *cert, unsigned char **buf, size_t *len)
{
	int			n = i2d_X509(cert, NULL);
	unsigned char *grown;
	unsigned char *p;

	if (n <= 0 || (grown = realloc(*buf, *len + (size_t) n)) == NULL)
		return -1;
	*buf = grown;
	p = grown + *len;
	if (i2d_X509(cert, &p) != n)
		return -1;
	*len += (size_t) n;
	return 0;
}

static double
asn1_time_real(const ASN1_TIME *t)
{
	struct tm	tm;

	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (double) timegm(&tm);
}

/*
 * A provisioning is done (the provisioner's thread): take its key and
 * chain as the identity's new SVID, or schedule a retry.
 */
static void
on_provisioned(void *arg, const bcd_job *job)
{
	ident	   *id = arg;
	BIO		   *bio = NULL;
	X509	   *cert;
	EVP_PKEY   *pkey = NULL;
	PKCS8_PRIV_KEY_INFO *p8 = NULL;
	unsigned char *chain = NULL;
	size_t		chain_len = 0;
	unsigned char *key = NULL;
	int			key_len = 0;
	double		not_after = 0;
	double		now = bcd_now_real();
	int			ok = job->code == BCD_CODE_OK;

	if (ok)
	{
		bio = BIO_new_mem_buf(job->chain_pem, (int) job->chain_len);
		while (bio != NULL && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
		{
			int			self = X509_check_issued(cert, cert) == X509_V_OK;

			if (chain_len == 0)
				not_after = asn1_time_real(X509_get0_notAfter(cert));
			if (!self && append_der(cert, &chain, &chain_len) != 0)
				ok = 0;
			X509_free(cert);
		}
		BIO_free(bio);
		bio = BIO_new_mem_buf(job->key_pem, (int) job->key_len);
		pkey = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
		p8 = pkey != NULL ? EVP_PKEY2PKCS8(pkey) : NULL;
		key_len = p8 != NULL ? i2d_PKCS8_PRIV_KEY_INFO(p8, &key) : -1;
		if (chain_len == 0 || key_len <= 0 || not_after <= now)
			ok = 0;
		BIO_free(bio);
		EVP_PKEY_free(pkey);
		PKCS8_PRIV_KEY_INFO_free(p8);
	}
	pthread_mutex_lock(id->mu);
	id->in_flight = 0;
	if (ok)
	{
		free(id->chain);
		bc_free_secret(id->key, id->key_len);
		id->chain = chain;
		id->chain_len = chain_len;
		id->key = malloc((size_t) key_len);
		if (id->key != NULL)
			memcpy(id->key, key, (size_t) key_len);
		id->key_len = id->key != NULL ? (size_t) key_len : 0;
		snprintf(id->spiffe_id, sizeof(id->spiffe_id), "%s", job->spiffe_id);
		id->not_after = not_after;
		id->renew_at = now + (not_after - now) / 2;
		id->backoff = RETRY_MIN;
		id->next_try = 0;
		id->gen++;
		chain = NULL;
	}
	else
	{
		id->next_try = now + id->backoff;
		id->backoff = id->backoff * 2 > RETRY_MAX ? RETRY_MAX : id->backoff * 2;
	}
	pthread_mutex_unlock(id->mu);
	if (ok)
		bcd_log("workload api: session %s%s%s: X509-SVID %s (serial %s, not after %s)",
				job->session, job->context[0] ? " context " : "", job->context,
				job->spiffe_id, job->serial, job->not_after);
	else
		bcd_log("workload api: session %s%s%s: no new X509-SVID (%s: %s); retrying",
				job->session, job->context[0] ? " context " : "", job->context,
				bcd_code_name(job->code), job->code == BCD_CODE_OK ? "cannot read it" : job->message);
	free(chain);
	if (key != NULL)
	{
		OPENSSL_cleanse(key, (size_t) key_len);
		OPENSSL_free(key);
	}
}

/* ------------------------------------------------------------ buffers */

static grpc_byte_buffer *
pack_to_bb(const ProtobufCMessage *m)
{
	size_t		n = protobuf_c_message_get_packed_size(m);
	uint8_t    *buf = malloc(n ? n : 1);
	grpc_slice	sl;
	grpc_byte_buffer *bb;

	if (buf == NULL)
		return NULL;
	protobuf_c_message_pack(m, buf);
	sl = grpc_slice_from_copied_buffer((const char *) buf, n);
	bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	OPENSSL_cleanse(buf, n);	/* an X509-SVID response holds the key */
	free(buf);
	return bb;
}

static uint8_t *
bb_flatten(grpc_byte_buffer *bb, size_t *len)
{
	grpc_byte_buffer_reader r;
	grpc_slice	sl;
	uint8_t    *out;

	*len = 0;
	if (bb == NULL || !grpc_byte_buffer_reader_init(&r, bb))
		return NULL;
	sl = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*len = GRPC_SLICE_LENGTH(sl);
	out = malloc(*len ? *len : 1);
	if (out != NULL)
		memcpy(out, GRPC_SLICE_START_PTR(sl), *len);
	grpc_slice_unref(sl);
	return out;
}

static int
has_security_header(const grpc_metadata_array *md)
{
	for (size_t i = 0; i < md->count; i++)
		if (grpc_slice_str_cmp(md->metadata[i].key, SECURITY_HEADER) == 0 &&
			grpc_slice_str_cmp(md->metadata[i].value, "true") == 0)
			return 1;
	return 0;
}

/* ------------------------------------------------------------ lifetimes */

/*
 * r's stream ends (sent its status, failed, closed, freed): an X509-SVID
 * stream no longer counts among its identity's open streams, which keep
 * its SVID provisioned.  Once only.
 */
static void
stream_stop(rpc *r)
{
	if (r->streaming && r->method == M_X509_SVID && r->id != NULL)
		r->id->streams--;
	r->streaming = 0;
}

static void
conn_unref(bcd_workload *w, conn *c)
{
	conn	  **pp;

	if (--c->refs > 0)
		return;
	grpc_server_destroy(c->server);
	for (pp = &w->conns; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c)
		{
			*pp = c->next;
			break;
		}
	w->n_conns--;
	bcd_wl_bind_close(&c->bind);
	free(c);
}

static void
rpc_free(bcd_workload *w, rpc *r)
{
	rpc		  **pp;

	for (pp = &w->rpcs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == r)
		{
			*pp = r->next;
			break;
		}
	stream_stop(r);
	if (r->counted && --r->conn->calls == 0)
		r->conn->idle_since = bcd_now_s();
	if (r->call != NULL)
		grpc_call_unref(r->call);
	grpc_call_details_destroy(&r->details);
	grpc_metadata_array_destroy(&r->req_md);
	if (r->req_payload != NULL)
		grpc_byte_buffer_destroy(r->req_payload);
	if (r->send_buf != NULL)
		grpc_byte_buffer_destroy(r->send_buf);
	if (r->have_details)
		grpc_slice_unref(r->status_details);
	conn_unref(w, r->conn);
	free(r);
}

static void
rpc_batch_done(bcd_workload *w, rpc *r)
{
	if (--r->pending == 0 && r->closed)
		rpc_free(w, r);
}

static void
conn_shutdown(bcd_workload *w, conn *c)
{
	if (c->shutting_down)
		return;
	c->shutting_down = 1;
	grpc_server_shutdown_and_notify(c->server, w->cq, &c->t_shutdown);
	grpc_server_cancel_all_calls(c->server);
}

/* ------------------------------------------------------------ binding */

static const char *const method_names[] = {
	"a call", "FetchX509SVID", "FetchX509Bundles", "FetchJWTSVID", "FetchJWTBundles",
	"ValidateJWTSVID"
};

/* A refusal of caller cl: logged in full, or counted for the uid's summary (refusals.c). */
static void
log_refusal(bcd_workload *w, const bcd_wl_caller *cl, const char *what, const char *why)
{
	char		who[BCD_PEER_EXE_MAX + BCD_PEER_UNIT_MAX + 96];

	if (!bcd_wl_refusals_take(w->refusals, cl->peer.uid, bcd_now_s()))
		return;
	bcd_peer_describe(&cl->peer, who, sizeof(who));
	bcd_log("workload api: %s by uid %ld gid %ld, %s: no identity (%s)", what,
			(long) cl->peer.uid, (long) cl->gid, who, why);
}

/*
 * Is r's caller (now: as /proc shows it now) still the process that
 * connected, alone holding its end (attest.c), as its rule asks (r->bind)?
 * 0, or -1 with why.
 */
static int
rpc_bound(rpc *r, const bcd_wl_caller *now, char *why, size_t len)
{
	conn	   *c = r->conn;

	if (!(r->bind & BCD_WL_RULE_BIND))
		return 0;
	if (!c->bind_ok)
	{
		snprintf(why, len, "the connecting process was gone at accept");
		return -1;
	}
	return bcd_wl_bind_check(&c->bind, &c->caller.peer, &now->peer,
							 (r->bind & BCD_WL_RULE_EXE) ? BCD_WL_BIND_CLOEXEC : 0, why, len);
}

/*
 * Before a secret goes to r's caller: is it, as /proc shows it now, still
 * one a rule gives r's identity (it may have left its unit or cgroup since
 * the call began), and bound to its connection as that rule asks?  0 when
 * the secret may go; else -1 having logged why, and closed the connection
 * when the caller is no longer the process that holds it alone.
 */
static int
secret_may_go(rpc *r)
{
	bcd_workload *w = r->conn->w;
	bcd_wl_caller now = r->conn->caller;
	const char *session = NULL;
	const char *context = NULL;
	char		why[768];
	int			bind = 0;
	int			m;

	why[0] = '\0';
	bcd_peer_refresh(&now.peer);
	m = r->id == NULL ? 0 :
		bcd_wl_rules_match(w->rules, &now, &session, &context, &bind, why, sizeof(why));
	if (m <= 0 || strcmp(session, r->id->session) != 0 || strcmp(context, r->id->context) != 0)
	{
		if (m > 0)
			snprintf(why, sizeof(why), "a rule gives it another identity now (session %s), "
					 "not the one of its call (session %s)", session, r->id->session);
		else if (m == 0 && why[0] == '\0')
			snprintf(why, sizeof(why), "no --workload-rule matches it any more");
		log_refusal(w, &now, method_names[r->method], why);
		return -1;
	}
	r->bind = bind;
	if (rpc_bound(r, &now, why, sizeof(why)) == 0)
		return 0;
	log_refusal(w, &now, method_names[r->method], why);
	conn_shutdown(w, r->conn);
	return -1;
}

/* ------------------------------------------------------------ calls */

static void
rpc_request(bcd_workload *w, conn *c)
{
	rpc		   *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return;
	r->conn = c;
	c->refs++;
	grpc_call_details_init(&r->details);
	grpc_metadata_array_init(&r->req_md);
	tag_init(&r->t_new, TAG_NEW_CALL, r);
	tag_init(&r->t_recv, TAG_RECV_MSG, r);
	tag_init(&r->t_send, TAG_SEND_MSG, r);
	tag_init(&r->t_close, TAG_CLOSE, r);
	tag_init(&r->t_status, TAG_STATUS, r);
	r->next = w->rpcs;
	w->rpcs = r;
	if (grpc_server_request_call(c->server, &r->call, &r->details, &r->req_md, w->cq, w->cq,
								 &r->t_new) != GRPC_CALL_OK)
	{
		r->closed = 1;
		rpc_free(w, r);
	}
}

static int
start_batch(rpc *r, const grpc_op *ops, size_t n, struct tag *t)
{
	grpc_call_error e = grpc_call_start_batch(r->call, ops, n, t, NULL);

	if (e != GRPC_CALL_OK)
	{
		bcd_log("workload api: grpc_call_start_batch: error %d", (int) e);
		return -1;
	}
	r->pending++;
	return 0;
}

/* End the call: initial metadata when not sent, msg (taken) when not NULL, the status. */
static void
finish(rpc *r, int send_initial_md, grpc_byte_buffer *msg, grpc_status_code code,
	   const char *details)
{
	grpc_op		ops[3];
	size_t		n = 0;

	if (r->finished)
	{
		if (msg != NULL)
			grpc_byte_buffer_destroy(msg);
		return;
	}
	if (msg != NULL && code == GRPC_STATUS_OK &&
		(r->method == M_JWT_SVID || r->method == M_X509_SVID) && secret_may_go(r) != 0)
	{
		grpc_byte_buffer_destroy(msg);
		msg = NULL;
		code = GRPC_STATUS_PERMISSION_DENIED;
		details = "no identity issued";
	}
	r->finished = 1;
	stream_stop(r);
	memset(ops, 0, sizeof(ops));
	if (send_initial_md)
	{
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		n++;
	}
	if (msg != NULL)
	{
		if (r->send_buf != NULL)
			grpc_byte_buffer_destroy(r->send_buf);
		r->send_buf = msg;
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n].data.send_message.send_message = msg;
		n++;
	}
	r->status_details = grpc_slice_from_copied_string(details);
	r->have_details = 1;
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = code;
	ops[n].data.send_status_from_server.status_details = &r->status_details;
	n++;
	(void) start_batch(r, ops, n, &r->t_status);
}

/* Push bb (taken) on r's stream. */
static void
push(rpc *r, grpc_byte_buffer *bb)
{
	grpc_op		op;

	if (bb == NULL)
		return;
	if (r->send_buf != NULL)
		grpc_byte_buffer_destroy(r->send_buf);
	r->send_buf = bb;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	if (start_batch(r, &op, 1, &r->t_send) == 0)
		r->send_in_flight = 1;
}

static grpc_byte_buffer *
x509_svid_response(bcd_workload *w, const ident *id)
{
	X509SVIDResponse resp = X509_SVIDRESPONSE__INIT;
	X509SVID	svid = X509_SVID__INIT;
	X509SVID   *svids[1] = {&svid};

	svid.spiffe_id = (char *) id->spiffe_id;
	svid.x509_svid.data = id->chain;
	svid.x509_svid.len = id->chain_len;
	svid.x509_svid_key.data = id->key;
	svid.x509_svid_key.len = id->key_len;
	svid.bundle.data = w->bundle;
	svid.bundle.len = w->bundle_len;
	resp.n_svids = 1;
	resp.svids = svids;
	return pack_to_bb(&resp.base);
}

/*
 * The key of a bundle in the bundles maps: the trust domain's SPIFFE ID
 * (spiffe://example.org), as workload.proto says and SPIRE sends
 * (malloc()ed, or NULL).
 */
static char *
bundle_key(const bcd_workload *w)
{
	size_t		n = strlen(BC_SPIFFE_SCHEME) + strlen(w->trust_domain) + 1;
	char	   *key = malloc(n);

	if (key != NULL)
		snprintf(key, n, BC_SPIFFE_SCHEME "%s", w->trust_domain);
	return key;
}

/* FetchX509Bundles' message: {spiffe://TD: DER of the root}. */
static grpc_byte_buffer *
x509_bundles_response(bcd_workload *w)
{
	X509BundlesResponse resp = X509_BUNDLES_RESPONSE__INIT;
	X509BundlesResponse__BundlesEntry e = X509_BUNDLES_RESPONSE__BUNDLES_ENTRY__INIT;
	X509BundlesResponse__BundlesEntry *es[1] = {&e};
	grpc_byte_buffer *bb;

	e.key = bundle_key(w);
	if (e.key == NULL)
		return NULL;
	e.value.data = w->bundle;
	e.value.len = w->bundle_len;
	resp.n_bundles = 1;
	resp.bundles = es;
	bb = pack_to_bb(&resp.base);
	free(e.key);
	return bb;
}

/* the summary of connections closed at once, below */
static void tell_closed(bcd_workload *w, double now);

/* the JWT profile, below */
static grpc_byte_buffer *jwt_bundles_response(bcd_workload *w);
static void start_jwt_svid(bcd_workload *w, rpc *r, const JWTSVIDRequest *req);
static void validate_jwt(bcd_workload *w, rpc *r, const ValidateJWTSVIDRequest *req);

/* What a stream should be sent now, if anything (the tick and a new stream). */
static void
serve_stream(bcd_workload *w, rpc *r, double now)
{
	if (!r->streaming || r->closed || r->send_in_flight || r->finished)
		return;
	if (r->method == M_X509_SVID)
	{
		ident	   *id = r->id;

		if (id->gen != 0 && id->gen != r->sent_gen && id->not_after > now)
		{
			if (secret_may_go(r) != 0)
			{
				finish(r, 0, NULL, GRPC_STATUS_PERMISSION_DENIED, "no identity issued");
				return;
			}
			r->sent_gen = id->gen;
			push(r, x509_svid_response(w, id));
		}
	}
	else if (r->method == M_X509_BUNDLES && !r->sent_once)
	{
		r->sent_once = 1;
		push(r, x509_bundles_response(w));
	}
	else if (r->method == M_JWT_BUNDLES && !r->sent_once)
	{
		r->sent_once = 1;
		push(r, jwt_bundles_response(w));
	}
}

/*
 * Resolve r's caller to an identity (as /proc shows it now; bound to its
 * connection when its rule asks): 0, or -1 having refused the call.
 */
static int
resolve(bcd_workload *w, rpc *r, const char *method)
{
	const char *session;
	const char *context;
	char		why[768];
	bcd_wl_caller now = r->conn->caller;
	int			bind = 0;
	int			m;

	bcd_peer_refresh(&now.peer);
	m = bcd_wl_rules_match(w->rules, &now, &session, &context, &bind, why, sizeof(why));
	if (m <= 0)
	{
		log_refusal(w, &now, method, m < 0 || why[0] != '\0' ? why : "no --workload-rule matches");
		finish(r, 1, NULL, GRPC_STATUS_PERMISSION_DENIED, "no identity issued");
		return -1;
	}
	r->bind = bind;
	/* the calls that get a secret: bound now, and again before it is sent */
	if ((r->method == M_X509_SVID || r->method == M_JWT_SVID) &&
		rpc_bound(r, &now, why, sizeof(why)) != 0)
	{
		log_refusal(w, &now, method, why);
		finish(r, 1, NULL, GRPC_STATUS_PERMISSION_DENIED, "no identity issued");
		conn_shutdown(w, r->conn);
		return -1;
	}
	r->id = ident_get(w, session, context, &now.peer);
	if (r->id == NULL)
	{
		finish(r, 1, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	return 0;
}

static void
on_new_call(bcd_workload *w, rpc *r, int ok)
{
	conn	   *c = r->conn;
	char		method[128];
	size_t		mlen;
	grpc_op		ops[2];

	if (!ok)
	{
		r->closed = 1;
		rpc_free(w, r);
		return;
	}
	r->counted = 1;
	c->calls++;
	c->had_call = 1;
	if (!c->shutting_down)
		rpc_request(w, c);
	mlen = GRPC_SLICE_LENGTH(r->details.method);
	if (mlen >= sizeof(method))
		mlen = sizeof(method) - 1;
	memcpy(method, GRPC_SLICE_START_PTR(r->details.method), mlen);
	method[mlen] = '\0';
	if (strcmp(method, "/SpiffeWorkloadAPI/FetchX509SVID") == 0)
		r->method = M_X509_SVID;
	else if (strcmp(method, "/SpiffeWorkloadAPI/FetchX509Bundles") == 0)
		r->method = M_X509_BUNDLES;
	else if (strcmp(method, "/SpiffeWorkloadAPI/FetchJWTSVID") == 0)
		r->method = M_JWT_SVID;
	else if (strcmp(method, "/SpiffeWorkloadAPI/FetchJWTBundles") == 0)
		r->method = M_JWT_BUNDLES;
	else if (strcmp(method, "/SpiffeWorkloadAPI/ValidateJWTSVID") == 0)
		r->method = M_VALIDATE_JWT;
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[0].data.recv_close_on_server.cancelled = &r->cancelled;
	if (start_batch(r, ops, 1, &r->t_close) != 0)
	{
		r->closed = 1;
		rpc_free(w, r);
		return;
	}
	if (!has_security_header(&r->req_md))
	{
		finish(r, 1, NULL, GRPC_STATUS_INVALID_ARGUMENT, "security header missing from request");
		return;
	}
	if (r->method == M_UNKNOWN)
	{
		finish(r, 1, NULL, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
		return;
	}
	if (resolve(w, r, method + sizeof("/SpiffeWorkloadAPI/") - 1) != 0)
		return;
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_RECV_MESSAGE;
	ops[1].data.recv_message.recv_message = &r->req_payload;
	(void) start_batch(r, ops, 2, &r->t_recv);
}

static void
on_request(bcd_workload *w, rpc *r, int ok)
{
	uint8_t    *data;
	size_t		len;
	ProtobufCMessage *req = NULL;

	if (!ok || r->closed || r->req_payload == NULL)
		return;					/* RECV_CLOSE ends it */
	data = bb_flatten(r->req_payload, &len);
	if (data == NULL)
	{
		finish(r, 0, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	switch (r->method)
	{
		case M_X509_SVID:
			req = (ProtobufCMessage *) x509_svidrequest__unpack(NULL, len, data);
			break;
		case M_X509_BUNDLES:
			req = (ProtobufCMessage *) x509_bundles_request__unpack(NULL, len, data);
			break;
		case M_JWT_SVID:
			req = (ProtobufCMessage *) jwtsvidrequest__unpack(NULL, len, data);
			break;
		case M_JWT_BUNDLES:
			req = (ProtobufCMessage *) jwtbundles_request__unpack(NULL, len, data);
			break;
		case M_VALIDATE_JWT:
			req = (ProtobufCMessage *) validate_jwtsvidrequest__unpack(NULL, len, data);
			break;
		case M_UNKNOWN:
			break;
	}
	free(data);
	if (req == NULL)
	{
		finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, "malformed request");
		return;
	}
	/*
	 * Requests with strings: protobuf-c keeps a string as a C string, cut at
	 * its first NUL ("svc-a\0evil" would be asked for as "svc-a"), and keeps
	 * the last of a singular field given twice.  Packed again, such a
	 * request is shorter than its bytes: refused, never read as another.
	 */
	if ((r->method == M_JWT_SVID || r->method == M_VALIDATE_JWT) &&
		protobuf_c_message_get_packed_size(req) != len)
	{
		protobuf_c_message_free_unpacked(req, NULL);
		finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
			   "malformed request: a string holds a NUL byte (U+0000), or a field is given "
			   "twice or not in protobuf's canonical encoding");
		return;
	}
	switch (r->method)
	{
		case M_X509_SVID:
			r->streaming = 1;
			r->id->streams++;
			serve_stream(w, r, bcd_now_real());
			break;
		case M_X509_BUNDLES:
		case M_JWT_BUNDLES:
			r->streaming = 1;
			serve_stream(w, r, bcd_now_real());
			break;
		case M_JWT_SVID:
			start_jwt_svid(w, r, (const JWTSVIDRequest *) req);
			break;
		case M_VALIDATE_JWT:
			validate_jwt(w, r, (const ValidateJWTSVIDRequest *) req);
			break;
		case M_UNKNOWN:
			break;
	}
	protobuf_c_message_free_unpacked(req, NULL);
}

/* ------------------------------------------------------------ JWT */

/* End a FetchJWTSVID: OK with one JWTSVID (spiffe_id, token), else code and message. */
static void
jwt_finish(rpc *r, grpc_status_code code, const char *spiffe_id, const char *token,
		   const char *message)
{
	JWTSVIDResponse resp = JWTSVIDRESPONSE__INIT;
	JWTSVID		js = JWTSVID__INIT;
	JWTSVID    *arr[1] = {&js};
	grpc_byte_buffer *bb;

	if (code != GRPC_STATUS_OK)
	{
		finish(r, 0, NULL, code, message);
		return;
	}
	js.spiffe_id = (char *) spiffe_id;
	js.svid = (char *) token;
	resp.n_svids = 1;
	resp.svids = arr;
	bb = pack_to_bb(&resp.base);
	finish(r, 0, bb, bb != NULL ? GRPC_STATUS_OK : GRPC_STATUS_RESOURCE_EXHAUSTED,
		   bb != NULL ? "" : "out of memory");
}

/* A FetchJWTSVID that waited for a fetch is answered (jwt_svid.c calls it, under w->mu). */
static void
jwt_answered(void *arg, void *waiter, grpc_status_code code, const char *spiffe_id,
			 const char *token, const char *message)
{
	bcd_workload *w = arg;
	rpc		   *r = waiter;

	if (!r->closed)				/* else the caller went away */
		jwt_finish(r, code, spiffe_id, token, message);
	rpc_batch_done(w, r);		/* the hold start_jwt_svid took */
}

/* Answer the FetchJWTSVIDs whose fetch has ended (the tick). */
static void
jwt_take_done(bcd_workload *w)
{
	bcd_wl_jwt_svids_answer(w->jwt_svids, jwt_answered, w);
}

/*
 * FetchJWTSVID: its audiences checked here (INVALID_ARGUMENT, nothing
 * asked of anyone), then answered from the cache or refused at once, or
 * held (a pending count) until its fetch ends (jwt_svid.c).
 */
static void
start_jwt_svid(bcd_workload *w, rpc *r, const JWTSVIDRequest *req)
{
	bcd_audiences aud;
	grpc_status_code code;
	const char *spiffe_id;
	const char *token;
	char		msg[640];

	if (bcd_wl_jwt_audiences(req->audience, req->n_audience, &aud, msg, sizeof(msg)) != BC_OK)
	{
		finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
		return;
	}
	if (bcd_wl_jwt_svids_fetch(w->jwt_svids, &r->conn->caller.peer, r->id->session,
							   r->id->context, &aud, req->spiffe_id != NULL ? req->spiffe_id : "",
							   r, &code, &spiffe_id, &token, msg, sizeof(msg)))
	{
		r->pending++;			/* held until jwt_answered */
		return;
	}
	jwt_finish(r, code, spiffe_id, token, msg);
}

/* json as a google.protobuf.Value (malloc()ed, free with protobuf_c_message_free_unpacked). */
static Google__Protobuf__Struct *json_to_struct(json_t *obj);

static Google__Protobuf__Value *
json_to_value(json_t *v)
{
	Google__Protobuf__Value *pv = malloc(sizeof(*pv));
	json_t	   *e;
	size_t		i;

	if (pv == NULL)
		return NULL;
	google__protobuf__value__init(pv);
	switch (json_typeof(v))
	{
		case JSON_OBJECT:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
			pv->struct_value = json_to_struct(v);
			break;
		case JSON_ARRAY:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
			pv->list_value = malloc(sizeof(*pv->list_value));
			if (pv->list_value == NULL)
				break;
			google__protobuf__list_value__init(pv->list_value);
			pv->list_value->values = calloc(json_array_size(v) + 1, sizeof(*pv->list_value->values));
			if (pv->list_value->values == NULL)
				break;
			json_array_foreach(v, i, e)
				if ((pv->list_value->values[pv->list_value->n_values] = json_to_value(e)) != NULL)
				pv->list_value->n_values++;
			break;
		case JSON_STRING:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
			pv->string_value = strdup(json_string_value(v));
			break;
		case JSON_INTEGER:
		case JSON_REAL:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
			pv->number_value = json_number_value(v);
			break;
		case JSON_TRUE:
		case JSON_FALSE:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
			pv->bool_value = json_is_true(v);
			break;
		case JSON_NULL:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
			pv->null_value = GOOGLE__PROTOBUF__NULL_VALUE__NULL_VALUE;
			break;
	}
	if ((pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE && pv->struct_value == NULL) ||
		(pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE &&
		 (pv->list_value == NULL || pv->list_value->values == NULL)) ||
		(pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && pv->string_value == NULL))
	{
		protobuf_c_message_free_unpacked(&pv->base, NULL);
		return NULL;
	}
	return pv;
}

static Google__Protobuf__Struct *
json_to_struct(json_t *obj)
{
	Google__Protobuf__Struct *st = malloc(sizeof(*st));
	const char *k;
	json_t	   *v;

	if (st == NULL)
		return NULL;
	google__protobuf__struct__init(st);
	st->fields = calloc(json_object_size(obj) + 1, sizeof(*st->fields));
	if (st->fields == NULL)
	{
		free(st);
		return NULL;
	}
	json_object_foreach(obj, k, v)
	{
		Google__Protobuf__Struct__FieldsEntry *fe = malloc(sizeof(*fe));

		if (fe == NULL)
			continue;
		google__protobuf__struct__fields_entry__init(fe);
		fe->key = strdup(k);
		fe->value = json_to_value(v);
		if (fe->key == NULL || fe->value == NULL)
		{
			protobuf_c_message_free_unpacked(&fe->base, NULL);
			continue;
		}
		st->fields[st->n_fields++] = fe;
	}
	return st;
}

static void
validate_jwt(bcd_workload *w, rpc *r, const ValidateJWTSVIDRequest *req)
{
	ValidateJWTSVIDResponse resp = VALIDATE_JWTSVIDRESPONSE__INIT;
	char	   *spiffe_id = NULL;
	json_t	   *claims = NULL;
	char		err[512];

	if (bcd_wl_jwt_validate(w->jwt, w->trust_domain, req->svid, req->audience, &spiffe_id,
							&claims, err, sizeof(err)) != BC_OK)
	{
		finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, err);
		return;
	}
	resp.spiffe_id = spiffe_id;
	resp.claims = json_to_struct(claims);
	finish(r, 0, pack_to_bb(&resp.base), resp.claims != NULL ? GRPC_STATUS_OK :
		   GRPC_STATUS_RESOURCE_EXHAUSTED, "");
	if (resp.claims != NULL)
		protobuf_c_message_free_unpacked(&resp.claims->base, NULL);
	json_decref(claims);
	free(spiffe_id);
}

/* FetchJWTBundles' message: {spiffe://TD: JWKS of the jwt-svid keys}. */
static grpc_byte_buffer *
jwt_bundles_response(bcd_workload *w)
{
	JWTBundlesResponse resp = JWTBUNDLES_RESPONSE__INIT;
	JWTBundlesResponse__BundlesEntry e = JWTBUNDLES_RESPONSE__BUNDLES_ENTRY__INIT;
	JWTBundlesResponse__BundlesEntry *es[1] = {&e};
	grpc_byte_buffer *bb;
	size_t		len;

	e.key = bundle_key(w);
	if (e.key == NULL)
		return NULL;
	e.value.data = (uint8_t *) bcd_wl_jwt_bundle(w->jwt, &len);
	e.value.len = len;
	resp.n_bundles = 1;
	resp.bundles = es;
	bb = pack_to_bb(&resp.base);
	free(e.key);
	return bb;
}

/* ------------------------------------------------------------ the tick */

/* Ask for a provisioning of every identity a stream wants that is due. */
static void
provision_due(bcd_workload *w, double now)
{
	for (ident *id = w->idents; id != NULL; id = id->next)
	{
		if (id->streams <= 0 || id->in_flight || now < id->next_try)
			continue;
		if (id->gen != 0 && now < id->renew_at)
			continue;
		id->in_flight = 1;
		if (bcd_provisioner_ask(w->prov, BCD_JOB_SESSION, id->session, id->context, NULL,
								&id->caller, on_provisioned, id) != BC_OK)
		{
			id->in_flight = 0;
			id->next_try = now + RETRY_MIN;
		}
	}
}

/* Close the connections gRPC has closed, and those idle past their deadline. */
static void
reap(bcd_workload *w)
{
	double		now = bcd_now_s();
	int			idle = 0;

	for (conn *c = w->conns; c != NULL; c = c->next)
	{
		struct stat st;

		if (c->shutting_down)
			continue;
		if (fstat(c->fd, &st) != 0 || st.st_ino != c->st_ino || st.st_dev != c->st_dev)
			conn_shutdown(w, c);
		else if (c->calls == 0 &&
				 now - c->idle_since >= (!c->had_call ? WL_FIRST_CALL_SECONDS :
										 c->ruled ? WL_IDLE_SECONDS : WL_IDLE_RULELESS_SECONDS))
		{
			idle++;
			conn_shutdown(w, c);
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

static void
handle_event(bcd_workload *w, grpc_event ev)
{
	struct tag *t = ev.tag;
	rpc		   *r = t->obj;

	switch (t->kind)
	{
		case TAG_NEW_CALL:
			on_new_call(w, r, ev.success);
			break;
		case TAG_RECV_MSG:
			on_request(w, r, ev.success);
			rpc_batch_done(w, r);
			break;
		case TAG_SEND_MSG:
			r->send_in_flight = 0;
			if (!ev.success)
				stream_stop(r);
			rpc_batch_done(w, r);
			break;
		case TAG_STATUS:
			rpc_batch_done(w, r);
			break;
		case TAG_CLOSE:
			r->closed = 1;
			stream_stop(r);
			rpc_batch_done(w, r);
			break;
		case TAG_SHUTDOWN:
			conn_unref(w, (conn *) t->obj);
			break;
	}
}

static void *
cq_main(void *arg)
{
	bcd_workload *w = arg;

	while (!atomic_load(&w->stopping))
	{
		gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
											 gpr_time_from_millis(TICK_MS, GPR_TIMESPAN));
		grpc_event	ev = grpc_completion_queue_next(w->cq, deadline, NULL);
		double		now;

		pthread_mutex_lock(&w->mu);
		while (ev.type == GRPC_OP_COMPLETE)
		{
			handle_event(w, ev);
			ev = grpc_completion_queue_next(w->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
		}
		now = bcd_now_real();
		jwt_take_done(w);
		reap(w);
		/* the connections closed at once, told once per interval */
		if (pthread_mutex_trylock(&w->closed_mu) == 0)
		{
			tell_closed(w, bcd_now_s());
			pthread_mutex_unlock(&w->closed_mu);
		}
		bcd_wl_refusals_tick(w->refusals, bcd_now_s());
		provision_due(w, now);
		for (rpc *r = w->rpcs; r != NULL; r = r->next)
			serve_stream(w, r, now);
		pthread_mutex_unlock(&w->mu);
	}
	/* stopping: the FetchJWTSVIDs waiting answered, every connection's
	 * server down, every call freed */
	pthread_mutex_lock(&w->mu);
	bcd_wl_jwt_svids_drain(w->jwt_svids, jwt_answered, w);
	for (conn *c = w->conns; c != NULL; c = c->next)
		conn_shutdown(w, c);
	while (w->conns != NULL)
	{
		grpc_event	ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
													NULL);

		if (ev.type == GRPC_OP_COMPLETE)
			handle_event(w, ev);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ------------------------------------------------------------ accept */

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

	for (conn *c = w->conns; c != NULL; c = c->next)
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
static void
tell_closed(bcd_workload *w, double now)
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
	tell_closed(w, bcd_now_s());
	pthread_mutex_unlock(&w->closed_mu);
}

/*
 * A connection accepted (it: its fd and SO_PEERCRED, handed over by an
 * accept thread; the connection thread, accept.c): its shares of the
 * slots, then what /proc says of it, the rules, and its grpc_server.
 */
static void
accept_one(void *arg, const bcd_wl_accepted *it)
{
	bcd_workload *w = arg;
	conn	   *c;
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
	tag_init(&c->t_shutdown, TAG_SHUTDOWN, c);
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
	rpc_request(w, c);
	pthread_mutex_unlock(&w->mu);
}

/* ------------------------------------------------------------ its life */

/* The default path: workload.sock next to the hooks' socket. */
static char *
default_path(const char *socket_path)
{
	const char *slash = strrchr(socket_path, '/');
	size_t		dlen = slash != NULL ? (size_t) (slash - socket_path) : 0;
	char	   *p = malloc(dlen + sizeof("/" WL_SOCKET_NAME));

	if (p != NULL)
	{
		memcpy(p, socket_path, dlen);
		strcpy(p + dlen, "/" WL_SOCKET_NAME);
	}
	return p;
}

int
bcd_workload_start(const bcd_run_opts *o, const bcd_service_keys *keys, const char *socket_path,
				   const char *runtime_dir, int rtfd, bcd_provisioner *prov,
				   bcd_workload **out, char *err, size_t errlen)
{
	bcd_workload *w = calloc(1, sizeof(*w));
	int			n;
	unsigned char *p;

	*out = NULL;
	if (w == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_mutex_init(&w->closed_mu, NULL);
	w->sock.fd = w->sock.dirfd = -1;
	w->prov = prov;
	w->keys = keys;
	w->refusals = bcd_wl_refusals_new();
	w->idle_logged = w->share_logged = -BCD_WL_REFUSALS_INTERVAL;
	w->rules = bcd_wl_rules_parse(o->workload_rules, o->n_workload_rules, err, errlen);
	if (w->rules == NULL)
		goto fail;
	w->jwt = bcd_wl_jwt_new(o->service_keys);
	w->jwt_svids = bcd_wl_jwt_svids_new(&w->mu, prov);
	if (w->jwt == NULL || w->jwt_svids == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	w->trust_domain = strdup(keys->trust_domain);
	n = i2d_X509(keys->node_ca, NULL);
	if (w->trust_domain == NULL || n <= 0 || (w->bundle = malloc((size_t) n)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	p = w->bundle;
	w->bundle_len = (size_t) i2d_X509(keys->node_ca, &p);
	w->path = o->workload_api != NULL ? strdup(o->workload_api) : default_path(socket_path);
	if (w->path == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (w->path[0] != '/')
	{
		snprintf(err, errlen, "--workload-api must be an absolute path (or off)");
		goto fail;
	}
	if (bcd_socket_listen_at(w->path, runtime_dir, rtfd,
							 o->workload_api == NULL && o->socket == NULL, &w->sock,
							 err, errlen) != BC_OK)
		goto fail;
	if ((w->acceptor = bcd_wl_acceptor_new(w->sock.fd, w->rules, accept_one, w)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* --workload-api-mode: opened to the group or every local user, the rules deciding */
	if (o->workload_api_mode != 0 && o->workload_api_mode != 0600 &&
		fchmodat(w->sock.dirfd, strrchr(w->path, '/') + 1, (mode_t) o->workload_api_mode, 0) != 0)
	{
		snprintf(err, errlen, "cannot set the mode of %s: %s", w->path, strerror(errno));
		goto fail;
	}
	bcd_wl_rules_warn(w->rules, o->workload_api_mode != 0 ? o->workload_api_mode : 0600);
	{
		unsigned long ou;
		unsigned long og;

		if (bcd_wl_rules_unmapped(w->rules, &ou, &og))
			bcd_log("workload api: bcd's user namespace does not map every user: uid %ld and "
					"gid %ld stand for every unmapped one and never match uid: or gid:",
					ou == ULONG_MAX ? -1L : (long) ou, og == ULONG_MAX ? -1L : (long) og);
	}
	grpc_init();
	w->cq = grpc_completion_queue_create_for_next(NULL);
	w->creds = grpc_insecure_server_credentials_create();
	bcd_log("workload api: %d rule(s), trust domain %s, %d jwt-svid key(s); callers bound by %s",
			o->n_workload_rules, w->trust_domain, bcd_wl_jwt_keys(w->jwt),
			bcd_wl_bind_pidfd_used() ? "pidfd (SO_PEERPIDFD)" :
			"/proc start time (no SO_PEERPIDFD)");
	*out = w;
	return BC_OK;
fail:
	bcd_workload_free(w);
	return BC_EINVAL;
}

void
bcd_workload_run(bcd_workload *w)
{
	if (w == NULL)
		return;
	if (pthread_create(&w->cq_thread, NULL, cq_main, w) != 0)
	{
		bcd_log("workload api: cannot start its thread; not serving");
		return;
	}
	w->running = 1;
	if (bcd_wl_acceptor_start(w->acceptor) != BC_OK)
		bcd_workload_stop(w);
}

void
bcd_workload_stop(bcd_workload *w)
{
	if (w == NULL || !w->running)
		return;
	/* no connection is added after this; then the calls and connections end */
	bcd_wl_acceptor_stop(w->acceptor);
	atomic_store(&w->stopping, 1);
	pthread_join(w->cq_thread, NULL);
	w->running = 0;
}

void
bcd_workload_free(bcd_workload *w)
{
	ident	   *id;

	if (w == NULL)
		return;
	bcd_workload_stop(w);
	if (w->cq != NULL)
	{
		grpc_completion_queue_shutdown(w->cq);
		while (grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
										  NULL).type != GRPC_QUEUE_SHUTDOWN)
			;
		grpc_completion_queue_destroy(w->cq);
		grpc_server_credentials_release(w->creds);
		grpc_shutdown();
	}
	bcd_wl_acceptor_free(w->acceptor);
	if (w->path != NULL)
		bcd_socket_close(&w->sock, w->path);
	while ((id = w->idents) != NULL)
	{
		w->idents = id->next;
		free(id->chain);
		bc_free_secret(id->key, id->key_len);
		free(id);
	}
	bcd_wl_rules_free(w->rules);
	bcd_wl_refusals_free(w->refusals);
	bcd_wl_jwt_free(w->jwt);
	bcd_wl_jwt_svids_free(w->jwt_svids);
	free(w->trust_domain);
	free(w->bundle);
	free(w->path);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->closed_mu);
	free(w);
}
