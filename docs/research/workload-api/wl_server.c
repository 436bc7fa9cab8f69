/*
 * wl_server.c - research prototype for bc_join issue #33.
 *
 * A SPIFFE Workload API server on gRPC's C core (Debian 12: libgrpc-dev
 * 1.51.1) with protobuf-c messages, that keeps the caller's kernel
 * identity (SO_PEERCRED) EXACTLY per connection.
 *
 * How identity is kept exact (the crux):
 *   - We own the listening unix socket (socket/bind/listen, 0600 in a 0700
 *     directory), and accept() every connection ourselves.
 *   - Right after accept() we read SO_PEERCRED (+ /proc/PID/exe and
 *     /proc/PID/cgroup) into a `struct conn`.
 *   - For EVERY accepted connection we create a separate grpc_server
 *     (grpc_server_create + grpc_server_register_completion_queue +
 *     grpc_server_start) and give it that single fd with
 *     grpc_server_add_channel_from_fd().  All these servers share one
 *     completion queue.
 *   - Calls are requested per server with grpc_server_request_call(); the
 *     tag we pass points to a `struct rpc` that points to its `struct conn`.
 *     So when a new call completes on the queue, the tag itself says which
 *     connection (hence which peer credentials) it arrived on.  No lookup by
 *     fd number, no string parsing, no race with fd-number reuse.
 *   - grpc_call_get_peer() returns "fd:N" for fd-added channels (N = the fd
 *     number we handed over).  We log it and cross-check it, but we do NOT
 *     use it for attribution: fd numbers are reused after gRPC closes them.
 *
 * Connection teardown: gRPC owns (and closes) the fd.  There is no public C
 * API telling us "the transport of this server is gone", and holding a dup()
 * of the fd is unsafe (gRPC's epoll1 engine does not EPOLL_CTL_DEL on close,
 * so a surviving dup keeps a stale epoll registration).  Instead we remember
 * the socket's (st_dev, st_ino) at accept and, on every loop tick, fstat()
 * fd N: EBADF or a different inode means gRPC has closed it -> we shut that
 * per-connection server down and free it.
 *
 * Threads: an accept thread blocks in accept4(), reads the identity, creates
 * the per-connection grpc_server and arms its first request.  The main
 * thread loops around grpc_completion_queue_next() with a short deadline
 * (TICK_MS); between events it checks for dead connections and pushes
 * "renewed" X509-SVIDs on open streams.  One coarse mutex (g_mu) protects
 * our lists; none of the grpc_* calls made under it call back into our code
 * (completions only ever arrive through the completion queue).
 * (A first version accepted on the tick too: every new connection then
 * waited up to TICK_MS before its HTTP/2 handshake - see FINDINGS.md.)
 *
 * Usage: wl_server [-s SOCKET] [-r RENEW_SECONDS] [-o]
 *   -o  "open" test mode: directory 0755 and socket 0666, so that other uids
 *       can connect in the two-uid test.  Default is 0700 / 0600.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h> /* grpc_insecure_server_credentials_create */
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "gen/workload.pb-c.h"

#define TICK_MS 100
#define SECURITY_HEADER "workload.spiffe.io"

/* ------------------------------------------------------------------ */
/* logging                                                            */
/* ------------------------------------------------------------------ */
static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	struct timespec ts;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(stderr, "[%ld.%03ld] ", (long)ts.tv_sec % 100000,
		ts.tv_nsec / 1000000);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ */
/* tags: every completion-queue tag is a pointer to one of these,     */
/* embedded in the object it concerns.                                 */
/* ------------------------------------------------------------------ */
enum tag_kind {
	TAG_NEW_CALL,   /* grpc_server_request_call finished         */
	TAG_RECV_MSG,   /* SEND_INITIAL_METADATA + RECV_MESSAGE done */
	TAG_SEND_MSG,   /* SEND_MESSAGE done (stream push)           */
	TAG_CLOSE,      /* RECV_CLOSE_ON_SERVER done (call is over)  */
	TAG_STATUS,     /* SEND_STATUS_FROM_SERVER batch done        */
	TAG_SHUTDOWN,   /* grpc_server_shutdown_and_notify done      */
};

struct tag {
	enum tag_kind kind;
	void *obj;
};

/* ------------------------------------------------------------------ */
/* per connection                                                      */
/* ------------------------------------------------------------------ */
struct conn {
	int id;
	int refs;               /* 1 for the server itself + 1 per struct rpc */
	grpc_server *server;    /* one grpc_server per accepted connection    */
	int fd;                 /* the number handed to gRPC (gRPC owns it)   */
	dev_t st_dev;           /* identity of the socket, to notice close     */
	ino_t st_ino;
	int shutting_down;
	struct ucred cred;      /* SO_PEERCRED at accept time                 */
	char exe[PATH_MAX];
	char cgroup[256];
	struct tag t_shutdown;
	struct conn *next;
};

enum method {
	M_UNKNOWN,
	M_FETCH_X509_SVID,
	M_FETCH_JWT_SVID,
};

/* per call (also used as the "waiting for a call" slot) */
struct rpc {
	struct conn *conn;
	grpc_call *call;
	grpc_call_details details;
	grpc_metadata_array req_md;
	grpc_byte_buffer *req_payload;
	grpc_byte_buffer *send_buf;
	enum method method;
	int pending;            /* batches started and not yet completed */
	int closed;             /* RECV_CLOSE_ON_SERVER has completed    */
	int cancelled;          /* ... and said the call was cancelled   */
	int streaming;          /* open FetchX509SVID stream             */
	int send_in_flight;
	int sent;
	double next_send;
	char peer[64];
	grpc_slice status_details; /* kept until the status batch is done */
	struct tag t_new, t_recv, t_send, t_close, t_status;
	struct rpc *next;       /* list of live calls */
};

static grpc_completion_queue *g_cq;
static struct conn *g_conns;
static struct rpc *g_rpcs;
static int g_next_conn_id = 1;
static int g_renew_secs = 5;
static volatile sig_atomic_t g_stop;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* lists + objects */
static int g_lfd = -1;
static grpc_server_credentials *g_creds;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void tag_init(struct tag *t, enum tag_kind k, void *obj)
{
	t->kind = k;
	t->obj = obj;
}

/* ------------------------------------------------------------------ */
/* peer identity                                                       */
/* ------------------------------------------------------------------ */
static void read_identity(struct conn *c)
{
	socklen_t len = sizeof(c->cred);
	char path[64];
	ssize_t n;
	FILE *f;

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) != 0) {
		logf_("SO_PEERCRED: %s", strerror(errno));
		c->cred.pid = 0;
		c->cred.uid = c->cred.gid = (uid_t)-1;
	}
	/*
	 * NB: the pid can exit and be reused between connect() and here; the
	 * product should prefer SO_PEERPIDFD (Linux >= 6.5) where available.
	 * uid/gid from SO_PEERCRED are exact (taken at connect()).
	 */
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)c->cred.pid);
	n = readlink(path, c->exe, sizeof(c->exe) - 1);
	if (n < 0)
		snprintf(c->exe, sizeof(c->exe), "?(%s)", strerror(errno));
	else
		c->exe[n] = '\0';

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)c->cred.pid);
	c->cgroup[0] = '\0';
	f = fopen(path, "r");
	if (f) {
		if (fgets(c->cgroup, sizeof(c->cgroup), f))
			c->cgroup[strcspn(c->cgroup, "\n")] = '\0';
		fclose(f);
	}
}

/* ------------------------------------------------------------------ */
/* helpers for byte buffers / metadata                                 */
/* ------------------------------------------------------------------ */
static grpc_byte_buffer *pack_to_bb(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	grpc_slice s;
	grpc_byte_buffer *bb;

	protobuf_c_message_pack(m, buf);
	s = grpc_slice_from_copied_buffer((const char *)buf, n);
	bb = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	free(buf);
	return bb;
}

/* returns a malloc'd flat copy of the payload (caller frees) */
static uint8_t *bb_flatten(grpc_byte_buffer *bb, size_t *len)
{
	grpc_byte_buffer_reader r;
	grpc_slice s;
	uint8_t *out;

	*len = 0;
	if (!bb || !grpc_byte_buffer_reader_init(&r, bb))
		return NULL;
	s = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*len = GRPC_SLICE_LENGTH(s);
	out = malloc(*len ? *len : 1);
	memcpy(out, GRPC_SLICE_START_PTR(s), *len);
	grpc_slice_unref(s);
	return out;
}

/* The spec: every request must carry "workload.spiffe.io: true". */
static int has_security_header(const grpc_metadata_array *md)
{
	for (size_t i = 0; i < md->count; i++) {
		if (grpc_slice_str_cmp(md->metadata[i].key, SECURITY_HEADER) == 0 &&
		    grpc_slice_str_cmp(md->metadata[i].value, "true") == 0)
			return 1;
	}
	return 0;
}

static void slice_to_cstr(grpc_slice s, char *out, size_t outlen)
{
	size_t n = GRPC_SLICE_LENGTH(s);

	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, GRPC_SLICE_START_PTR(s), n);
	out[n] = '\0';
}

/* ------------------------------------------------------------------ */
/* object lifetime                                                     */
/* ------------------------------------------------------------------ */
static void conn_unref(struct conn *c)
{
	struct conn **pp;

	if (--c->refs > 0)
		return;
	/* shutdown has completed and no call refers to us any more */
	grpc_server_destroy(c->server);
	for (pp = &g_conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	logf_("conn#%d freed (uid=%u pid=%d)", c->id, (unsigned)c->cred.uid,
	      (int)c->cred.pid);
	free(c);
}

static void rpc_request(struct conn *c);

static void rpc_free(struct rpc *r)
{
	struct rpc **pp;

	for (pp = &g_rpcs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	if (r->call)
		grpc_call_unref(r->call);
	grpc_call_details_destroy(&r->details);
	grpc_metadata_array_destroy(&r->req_md);
	if (r->req_payload)
		grpc_byte_buffer_destroy(r->req_payload);
	if (r->send_buf)
		grpc_byte_buffer_destroy(r->send_buf);
	conn_unref(r->conn);
	free(r);
}

/* a batch of this rpc finished; free it when nothing is outstanding */
static void rpc_batch_done(struct rpc *r)
{
	if (--r->pending == 0 && r->closed)
		rpc_free(r);
}

static void conn_shutdown(struct conn *c, const char *why)
{
	if (c->shutting_down)
		return;
	c->shutting_down = 1;
	logf_("conn#%d shutting down grpc_server (%s)", c->id, why);
	/* completes on g_cq with c->t_shutdown; pending request_call tags come
	 * back with success=0; live calls get cancelled. */
	grpc_server_shutdown_and_notify(c->server, g_cq, &c->t_shutdown);
	grpc_server_cancel_all_calls(c->server);
}

/* ------------------------------------------------------------------ */
/* calls                                                               */
/* ------------------------------------------------------------------ */

/* Arm one "give me the next call on this connection's server". */
static void rpc_request(struct conn *c)
{
	struct rpc *r = calloc(1, sizeof(*r));
	grpc_call_error e;

	r->conn = c;
	c->refs++;
	grpc_call_details_init(&r->details);
	grpc_metadata_array_init(&r->req_md);
	tag_init(&r->t_new, TAG_NEW_CALL, r);
	tag_init(&r->t_recv, TAG_RECV_MSG, r);
	tag_init(&r->t_send, TAG_SEND_MSG, r);
	tag_init(&r->t_close, TAG_CLOSE, r);
	tag_init(&r->t_status, TAG_STATUS, r);
	r->next = g_rpcs;
	g_rpcs = r;
	e = grpc_server_request_call(c->server, &r->call, &r->details,
				     &r->req_md, g_cq, g_cq, &r->t_new);
	if (e != GRPC_CALL_OK) {
		logf_("grpc_server_request_call: %d", e);
		r->closed = 1;
		rpc_free(r);
	}
}

static void start_batch(struct rpc *r, const grpc_op *ops, size_t n,
			struct tag *t)
{
	grpc_call_error e = grpc_call_start_batch(r->call, ops, n, t, NULL);

	if (e != GRPC_CALL_OK) {
		logf_("grpc_call_start_batch: error %d", e);
		abort(); /* a programming error in this prototype */
	}
	r->pending++;
}

/* End the call with a status (and initial metadata if not sent yet). */
static void finish_with_status(struct rpc *r, int send_initial_md,
			       grpc_byte_buffer *msg, grpc_status_code code,
			       const char *details)
{
	grpc_op ops[3];
	size_t n = 0;

	memset(ops, 0, sizeof(ops));
	if (send_initial_md) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		ops[n].data.send_initial_metadata.count = 0;
		n++;
	}
	if (msg) {
		r->send_buf = msg;
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n].data.send_message.send_message = msg;
		n++;
	}
	/* static strings only in this prototype; keep the slice in the rpc
	 * so the pointer stays valid until the batch completes */
	r->status_details = grpc_slice_from_static_string(details);
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.trailing_metadata_count = 0;
	ops[n].data.send_status_from_server.status = code;
	ops[n].data.send_status_from_server.status_details = &r->status_details;
	n++;
	start_batch(r, ops, n, &r->t_status);
}

static void send_x509_update(struct rpc *r)
{
	struct conn *c = r->conn;
	X509SVIDResponse resp = X509_SVIDRESPONSE__INIT;
	X509SVID svid = X509_SVID__INIT;
	X509SVID *svids[1] = { &svid };
	char id[128], cert[128], key[64];
	grpc_op op;

	snprintf(id, sizeof(id), "spiffe://bcj.test/uid/%u",
		 (unsigned)c->cred.uid);
	snprintf(cert, sizeof(cert), "TEST-CERT #%d for uid=%u pid=%d conn#%d",
		 r->sent + 1, (unsigned)c->cred.uid, (int)c->cred.pid, c->id);
	snprintf(key, sizeof(key), "TEST-KEY #%d", r->sent + 1);
	svid.spiffe_id = id;
	svid.x509_svid.data = (uint8_t *)cert;
	svid.x509_svid.len = strlen(cert);
	svid.x509_svid_key.data = (uint8_t *)key;
	svid.x509_svid_key.len = strlen(key);
	svid.bundle.data = (uint8_t *)"TEST-BUNDLE";
	svid.bundle.len = 11;
	resp.n_svids = 1;
	resp.svids = svids;

	if (r->send_buf)
		grpc_byte_buffer_destroy(r->send_buf);
	r->send_buf = pack_to_bb(&resp.base);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = r->send_buf;
	r->send_in_flight = 1;
	r->sent++;
	r->next_send = now_mono() + g_renew_secs;
	start_batch(r, &op, 1, &r->t_send);
	logf_("conn#%d %s: pushed X509SVIDResponse #%d to uid=%u pid=%d",
	      c->id, r->peer, r->sent, (unsigned)c->cred.uid, (int)c->cred.pid);
}

static void on_new_call(struct rpc *r, int ok)
{
	struct conn *c = r->conn;
	char method[128];
	grpc_op ops[2];
	char *peer;

	if (!ok) {
		/* server is shutting down: no call was created */
		r->closed = 1;
		rpc_free(r);
		return;
	}
	/* keep one request armed on this connection's server */
	if (!c->shutting_down)
		rpc_request(c);

	slice_to_cstr(r->details.method, method, sizeof(method));
	peer = grpc_call_get_peer(r->call);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	gpr_free(peer);
	if (!strcmp(method, "/SpiffeWorkloadAPI/FetchX509SVID"))
		r->method = M_FETCH_X509_SVID;
	else if (!strcmp(method, "/SpiffeWorkloadAPI/FetchJWTSVID"))
		r->method = M_FETCH_JWT_SVID;
	else
		r->method = M_UNKNOWN;

	{
		char want[32];
		snprintf(want, sizeof(want), "fd:%d", c->fd);
		logf_("CALL %s on conn#%d -> attributed to uid=%u gid=%u pid=%d "
		      "exe=%s cgroup=%s | grpc_call_get_peer=\"%s\"%s",
		      method, c->id, (unsigned)c->cred.uid,
		      (unsigned)c->cred.gid, (int)c->cred.pid, c->exe,
		      c->cgroup, r->peer,
		      strcmp(want, r->peer) ? " (MISMATCH with conn fd!)" : "");
	}

	/* Always watch for the end of the call (client cancel / disconnect).
	 * RECV_CLOSE_ON_SERVER completes when the call is over, with
	 * cancelled=1 if it did not end by our status. */
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[0].data.recv_close_on_server.cancelled = &r->cancelled;
	start_batch(r, ops, 1, &r->t_close);

	if (!has_security_header(&r->req_md)) {
		logf_("conn#%d %s: no '%s: true' header -> INVALID_ARGUMENT",
		      c->id, method, SECURITY_HEADER);
		finish_with_status(r, 1, NULL, GRPC_STATUS_INVALID_ARGUMENT,
				   "security header missing from request");
		return;
	}
	if (r->method == M_UNKNOWN) {
		finish_with_status(r, 1, NULL, GRPC_STATUS_UNIMPLEMENTED,
				   "not implemented in prototype");
		return;
	}
	/* send initial metadata and read the (single) request message */
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].data.send_initial_metadata.count = 0;
	ops[1].op = GRPC_OP_RECV_MESSAGE;
	ops[1].data.recv_message.recv_message = &r->req_payload;
	start_batch(r, ops, 2, &r->t_recv);
}

static void on_request_message(struct rpc *r, int ok)
{
	struct conn *c = r->conn;
	uint8_t *data;
	size_t len;

	if (!ok || r->closed || !r->req_payload) {
		logf_("conn#%d: request message not received (ok=%d)", c->id, ok);
		return; /* RECV_CLOSE will finish the rpc */
	}
	data = bb_flatten(r->req_payload, &len);

	if (r->method == M_FETCH_X509_SVID) {
		X509SVIDRequest *req = x509_svidrequest__unpack(NULL, len, data);
		if (!req) {
			finish_with_status(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "bad X509SVIDRequest");
		} else {
			x509_svidrequest__free_unpacked(req, NULL);
			/* server stream: first response now, more on renewal
			 * ticks; never send a status while the client listens */
			r->streaming = 1;
			send_x509_update(r);
		}
	} else if (r->method == M_FETCH_JWT_SVID) {
		JWTSVIDRequest *req = jwtsvidrequest__unpack(NULL, len, data);
		if (!req) {
			finish_with_status(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "bad JWTSVIDRequest");
		} else if (req->n_audience == 0) {
			jwtsvidrequest__free_unpacked(req, NULL);
			finish_with_status(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "audience must be specified");
		} else {
			JWTSVIDResponse resp = JWTSVIDRESPONSE__INIT;
			JWTSVID js = JWTSVID__INIT;
			JWTSVID *arr[1] = { &js };
			char id[128], tok[256];

			snprintf(id, sizeof(id), "spiffe://bcj.test/uid/%u",
				 (unsigned)c->cred.uid);
			snprintf(tok, sizeof(tok), "test.jwt.aud=%s.uid=%u",
				 req->audience[0], (unsigned)c->cred.uid);
			js.spiffe_id = id;
			js.svid = tok;
			resp.n_svids = 1;
			resp.svids = arr;
			logf_("conn#%d %s: FetchJWTSVID aud=%s -> OK", c->id,
			      r->peer, req->audience[0]);
			/* unary: message + OK status in one batch */
			finish_with_status(r, 0, pack_to_bb(&resp.base),
					   GRPC_STATUS_OK, "");
			jwtsvidrequest__free_unpacked(req, NULL);
		}
	}
	free(data);
}

/* ------------------------------------------------------------------ */
/* listening socket and accept                                         */
/* ------------------------------------------------------------------ */
static int make_listener(const char *path, int open_mode)
{
	struct sockaddr_un sa;
	char dir[sizeof(sa.sun_path)];
	char *slash;
	mode_t old;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "socket path too long\n");
		exit(1);
	}
	strcpy(sa.sun_path, path);
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			perror("mkdir");
			exit(1);
		}
		if (chmod(dir, open_mode ? 0755 : 0700) != 0) {
			perror("chmod dir");
			exit(1);
		}
	}
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0); /* blocking */
	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	old = umask(0177); /* socket node created 0600, no window */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		perror("bind");
		exit(1);
	}
	umask(old);
	if (open_mode && chmod(path, 0666) != 0) {
		perror("chmod sock");
		exit(1);
	}
	if (listen(fd, 64) != 0) {
		perror("listen");
		exit(1);
	}
	return fd;
}

static void *accept_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct stat st;
		struct conn *c;
		/* blocking listener; the accepted socket is made non-blocking
		 * because gRPC's tcp endpoint expects that */
		int fd = accept4(g_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (g_stop)
				return NULL; /* main did shutdown(g_lfd) */
			if (errno != EINTR && errno != ECONNABORTED)
				logf_("accept4: %s", strerror(errno));
			continue;
		}
		c = calloc(1, sizeof(*c));
		c->fd = fd;
		c->refs = 1;
		tag_init(&c->t_shutdown, TAG_SHUTDOWN, c);
		read_identity(c); /* BEFORE handing the fd to gRPC */
		fstat(fd, &st);
		c->st_dev = st.st_dev;
		c->st_ino = st.st_ino;

		/* one grpc_server per connection: the server IS the identity */
		c->server = grpc_server_create(NULL, NULL);
		grpc_server_register_completion_queue(c->server, g_cq, NULL);
		grpc_server_start(c->server);
		pthread_mutex_lock(&g_mu);
		c->id = g_next_conn_id++;
		/* gRPC takes ownership of fd (it will close it).  Done under the
		 * lock so that reap_dead_conns() never sees a conn whose fd was
		 * not yet handed over. */
		grpc_server_add_channel_from_fd(c->server, fd, g_creds);
		c->next = g_conns;
		g_conns = c;
		logf_("ACCEPT conn#%d fd=%d uid=%u gid=%u pid=%d exe=%s", c->id,
		      fd, (unsigned)c->cred.uid, (unsigned)c->cred.gid,
		      (int)c->cred.pid, c->exe);
		rpc_request(c);
		pthread_mutex_unlock(&g_mu);
	}
}

/* gRPC closed the fd of a connection?  (EBADF, or number reused) */
static void reap_dead_conns(void)
{
	for (struct conn *c = g_conns; c; c = c->next) {
		struct stat st;

		if (c->shutting_down)
			continue;
		if (fstat(c->fd, &st) != 0 || st.st_ino != c->st_ino ||
		    st.st_dev != c->st_dev)
			conn_shutdown(c, "transport closed its fd");
	}
}

static void push_renewals(void)
{
	double t = now_mono();

	for (struct rpc *r = g_rpcs; r; r = r->next)
		if (r->streaming && !r->closed && !r->send_in_flight &&
		    t >= r->next_send)
			send_x509_update(r);
}

/* ------------------------------------------------------------------ */
/* main loop                                                           */
/* ------------------------------------------------------------------ */
static void handle_event(grpc_event ev)
{
	struct tag *t = ev.tag;
	struct rpc *r = t->obj;
	struct conn *c = t->obj;

	switch (t->kind) {
	case TAG_NEW_CALL:
		on_new_call(r, ev.success);
		break;
	case TAG_RECV_MSG:
		on_request_message(r, ev.success);
		rpc_batch_done(r);
		break;
	case TAG_SEND_MSG:
		r->send_in_flight = 0;
		if (!ev.success) /* stream broken; RECV_CLOSE will tell more */
			r->streaming = 0;
		rpc_batch_done(r);
		break;
	case TAG_STATUS:
		rpc_batch_done(r);
		break;
	case TAG_CLOSE:
		r->closed = 1;
		r->streaming = 0;
		logf_("conn#%d %s: call over (%s) after %d pushes, uid=%u",
		      r->conn->id, r->peer,
		      r->cancelled ? "cancelled / client went away" : "status sent",
		      r->sent, (unsigned)r->conn->cred.uid);
		rpc_batch_done(r);
		break;
	case TAG_SHUTDOWN:
		logf_("conn#%d grpc_server shutdown complete", c->id);
		conn_unref(c); /* drop the server's own reference */
		break;
	}
}

int main(int argc, char **argv)
{
	const char *sock = "/run/bcd-proto/workload.sock";
	int open_mode = 0, opt;
	pthread_t acc;

	while ((opt = getopt(argc, argv, "s:r:o")) != -1) {
		switch (opt) {
		case 's': sock = optarg; break;
		case 'r': g_renew_secs = atoi(optarg); break;
		case 'o': open_mode = 1; break;
		default:
			fprintf(stderr, "usage: %s [-s sock] [-r secs] [-o]\n",
				argv[0]);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	grpc_init();
	g_cq = grpc_completion_queue_create_for_next(NULL);
	g_creds = grpc_insecure_server_credentials_create();
	g_lfd = make_listener(sock, open_mode);
	pthread_create(&acc, NULL, accept_thread, NULL);
	logf_("listening on %s (renewal every %ds, %s)", sock, g_renew_secs,
	      open_mode ? "OPEN test mode 0666" : "0600 in 0700 dir");

	while (!g_stop) {
		gpr_timespec deadline = gpr_time_add(
			gpr_now(GPR_CLOCK_MONOTONIC),
			gpr_time_from_millis(TICK_MS, GPR_TIMESPAN));
		grpc_event ev = grpc_completion_queue_next(g_cq, deadline, NULL);

		pthread_mutex_lock(&g_mu);
		if (ev.type == GRPC_OP_COMPLETE)
			handle_event(ev);
		/* drain whatever else is ready without waiting */
		while (ev.type == GRPC_OP_COMPLETE) {
			ev = grpc_completion_queue_next(
				g_cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
			if (ev.type == GRPC_OP_COMPLETE)
				handle_event(ev);
		}
		reap_dead_conns();
		push_renewals();
		pthread_mutex_unlock(&g_mu);
	}

	/* orderly shutdown: stop all servers, wait until all freed */
	logf_("stopping");
	shutdown(g_lfd, SHUT_RDWR); /* wakes the blocked accept4() */
	pthread_join(acc, NULL);
	close(g_lfd);
	unlink(sock);
	/* single-threaded again from here */
	for (struct conn *c = g_conns; c; c = c->next)
		conn_shutdown(c, "daemon stopping");
	while (g_conns) {
		grpc_event ev = grpc_completion_queue_next(
			g_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		if (ev.type == GRPC_OP_COMPLETE)
			handle_event(ev);
	}
	grpc_completion_queue_shutdown(g_cq);
	while (grpc_completion_queue_next(g_cq,
					  gpr_inf_future(GPR_CLOCK_MONOTONIC),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(g_cq);
	grpc_server_credentials_release(g_creds);
	grpc_shutdown();
	logf_("stopped");
	return 0;
}
