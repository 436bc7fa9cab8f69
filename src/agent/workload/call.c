/*
 * call.c: the Workload API's per-connection gRPC plumbing.  Each accepted
 * connection has a grpc_server of its own (conn.c makes it); every call is
 * requested on that server with a tag pointing at it, so a call is
 * attributed to the credentials of its own connection by construction
 * (grpc_call_get_peer only gives "fd:N", and fd numbers are reused).
 *
 * A call.  Every call of the SPIFFE Workload API must carry
 * "workload.spiffe.io: true" (else INVALID_ARGUMENT; Envoy's SDS calls carry
 * none, as with SPIRE); its method is looked up in the method table
 * (methods.c, handed over as w->methods: else UNIMPLEMENTED); its caller
 * must match a --workload-rule (authorize.c: else PERMISSION_DENIED, no
 * identity issued), which names the session and context of its identity.
 * Its request is unpacked against the method's descriptor and handed
 * to the method's handler; a stream is then served by the method, at once,
 * at every tick and once a push is sent; a bidirectional stream's later
 * requests are read one after the other and handed to its method's more.  Every event of the shared completion queue is handed
 * here (wl_handle_event); a call is freed once closed with no batch
 * pending, and a connection once its server is shut down and no call is
 * left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/* The metadata every call must carry, with the value "true". */
#define SECURITY_HEADER "workload.spiffe.io"

/* Set a tag's kind and object. */
void
wl_tag_init(wl_tag *t, wl_tag_kind kind, void *obj)
{
	t->kind = kind;
	t->obj = obj;
}

/* ------------------------------------------------------------ lifetimes */

/*
 * r's stream ends (sent its status, failed, closed, freed): an X509-SVID
 * stream no longer counts among its identity's open streams, which keep
 * its SVID provisioned.  Once only.
 */
static void
stream_stop(wl_call *r)
{
	if (r->streaming && r->streams_of != NULL)
		r->streams_of->streams--;
	r->streaming = 0;
}

/* Drop a reference to c: the last one destroys its server and frees it. */
static void
conn_unref(bcd_workload *w, wl_conn *c)
{
	wl_conn   **pp;

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

/* Free r, taking it out of the calls (its connection's reference dropped). */
static void
call_free(bcd_workload *w, wl_call *r)
{
	wl_call   **pp;

	for (pp = &w->calls; *pp != NULL; pp = &(*pp)->next)
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
	wl_sds_free(r->sds);
	conn_unref(w, r->conn);
	free(r);
}

/* A batch of r completed: free r once it is closed and none is pending. */
void
wl_call_batch_done(bcd_workload *w, wl_call *r)
{
	if (--r->pending == 0 && r->closed)
		call_free(w, r);
}

/* Shut c's server down (its calls cancelled); freed once the shutdown completes. */
void
wl_conn_shutdown(bcd_workload *w, wl_conn *c)
{
	if (c->shutting_down)
		return;
	c->shutting_down = 1;
	grpc_server_shutdown_and_notify(c->server, w->cq, &c->t_shutdown);
	grpc_server_cancel_all_calls(c->server);
}

/* ------------------------------------------------------------ calls */

/* 1 when md holds "workload.spiffe.io: true". */
static int
has_security_header(const grpc_metadata_array *md)
{
	for (size_t i = 0; i < md->count; i++)
		if (grpc_slice_str_cmp(md->metadata[i].key, SECURITY_HEADER) == 0 &&
			grpc_slice_str_cmp(md->metadata[i].value, "true") == 0)
			return 1;
	return 0;
}

/* Request the next call on c's server (its tag: a new wl_call). */
void
wl_call_request(bcd_workload *w, wl_conn *c)
{
	wl_call    *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return;
	r->conn = c;
	c->refs++;
	grpc_call_details_init(&r->details);
	grpc_metadata_array_init(&r->req_md);
	wl_tag_init(&r->t_new, WL_TAG_NEW_CALL, r);
	wl_tag_init(&r->t_recv, WL_TAG_RECV_MSG, r);
	wl_tag_init(&r->t_send, WL_TAG_SEND_MSG, r);
	wl_tag_init(&r->t_close, WL_TAG_CLOSE, r);
	wl_tag_init(&r->t_status, WL_TAG_STATUS, r);
	r->next = w->calls;
	w->calls = r;
	if (grpc_server_request_call(c->server, &r->call, &r->details, &r->req_md, w->cq, w->cq,
								 &r->t_new) != GRPC_CALL_OK)
	{
		r->closed = 1;
		call_free(w, r);
	}
}

/* Start a batch of n ops on r, tagged t: 0 (pending counted), or -1 logged. */
static int
start_batch(wl_call *r, const grpc_op *ops, size_t n, wl_tag *t)
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

/*
 * End the call: initial metadata when not sent, msg (taken) when not NULL,
 * the status.  A secret (WL_METHOD_SECRET, OK) goes only to a caller that
 * still may have it (wl_call_secret_may_go); else PERMISSION_DENIED.
 */
void
wl_call_finish(wl_call *r, int send_initial_md, grpc_byte_buffer *msg, grpc_status_code code,
			   const char *details)
{
	grpc_op		ops[3];
	size_t		n = 0;
	char		why[512];

	if (r->finished)
	{
		if (msg != NULL)
			grpc_byte_buffer_destroy(msg);
		return;
	}
	if (msg != NULL && code == GRPC_STATUS_OK && (r->method->flags & WL_METHOD_SECRET) &&
		bcd_provisioner_refusal(r->conn->w->prov, why, sizeof(why)) != BCD_REFUSAL_NONE)
	{
		/* the node was quarantined (core/attest.c) or its certificate revoked meanwhile */
		grpc_byte_buffer_destroy(msg);
		msg = NULL;
		code = GRPC_STATUS_PERMISSION_DENIED;
		details = why;
	}
	if (msg != NULL && code == GRPC_STATUS_OK && (r->method->flags & WL_METHOD_SECRET) &&
		wl_call_secret_may_go(r) != 0)
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
void
wl_call_push(wl_call *r, grpc_byte_buffer *bb)
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

/*
 * Before a secret goes on r: may its caller still have it (authorize.c)?
 * 0, or -1 (logged), its connection shut down when its caller no longer
 * holds it alone.
 */
int
wl_call_secret_may_go(wl_call *r)
{
	int			drop;
	int			rc = wl_authorize_secret(r, &drop);

	if (drop)
		wl_conn_shutdown(r->conn->w, r->conn);
	return rc;
}

/* What r's stream should be sent now, if anything (the tick and a new stream): its method's. */
void
wl_call_serve(bcd_workload *w, wl_call *r, double now)
{
	char		why[512];

	if (!r->streaming || r->closed || r->send_in_flight || r->finished)
		return;
	/* a quarantined or revoked node's streams of secrets end, with why */
	if ((r->method->flags & WL_METHOD_SECRET) &&
		bcd_provisioner_refusal(w->prov, why, sizeof(why)) != BCD_REFUSAL_NONE)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_PERMISSION_DENIED, why);
		return;
	}
	r->method->serve(w, r, now);
}

/* The row of w's method table whose path (its service, then its name) is path, or NULL. */
static const wl_method *
method_of(const bcd_workload *w, const char *path)
{
	for (int i = 0; i < w->n_methods; i++)
	{
		size_t		n = strlen(w->methods[i].service);

		if (strncmp(path, w->methods[i].service, n) == 0 &&
			strcmp(path + n, w->methods[i].name) == 0)
			return &w->methods[i];
	}
	return NULL;
}

/*
 * A call came on one of c's server's requests: the next one requested,
 * then its security header, its method and its caller checked before its
 * request is read.
 */
static void
on_new_call(bcd_workload *w, wl_call *r, int ok)
{
	wl_conn    *c = r->conn;
	char		path[128];
	size_t		plen;
	grpc_op		ops[2];
	grpc_status_code code;
	const char *details;
	int			drop;

	if (!ok)
	{
		r->closed = 1;
		call_free(w, r);
		return;
	}
	r->counted = 1;
	c->calls++;
	c->had_call = 1;
	if (!c->shutting_down)
		wl_call_request(w, c);
	plen = GRPC_SLICE_LENGTH(r->details.method);
	if (plen >= sizeof(path))
		plen = sizeof(path) - 1;
	memcpy(path, GRPC_SLICE_START_PTR(r->details.method), plen);
	path[plen] = '\0';
	r->method = method_of(w, path);
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[0].data.recv_close_on_server.cancelled = &r->cancelled;
	if (start_batch(r, ops, 1, &r->t_close) != 0)
	{
		r->closed = 1;
		call_free(w, r);
		return;
	}
	/* the SPIFFE Workload API's calls (known or not) only: Envoy sends no such header */
	if ((r->method != NULL ? strcmp(r->method->service, WL_SERVICE_WORKLOAD) == 0 :
		 strncmp(path, WL_SERVICE_WORKLOAD, strlen(WL_SERVICE_WORKLOAD)) == 0) &&
		!has_security_header(&r->req_md))
	{
		wl_call_finish(r, 1, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "security header missing from request");
		return;
	}
	if (r->method == NULL)
	{
		wl_call_finish(r, 1, NULL, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
		return;
	}
	code = wl_authorize_call(w, r, r->method->name, &details, &drop);
	if (code != GRPC_STATUS_OK)
	{
		wl_call_finish(r, 1, NULL, code, details);
		if (drop)
			wl_conn_shutdown(w, r->conn);
		return;
	}
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_RECV_MESSAGE;
	ops[1].data.recv_message.recv_message = &r->req_payload;
	(void) start_batch(r, ops, 2, &r->t_recv);
}

/*
 * r's request came: unpacked against its method's descriptor, then handed
 * to the method's handler (its first) or more (a later one of a
 * bidirectional stream, whose next request is then read); a stream is
 * served at once.
 */
static void
on_request(bcd_workload *w, wl_call *r, int ok)
{
	const wl_method *m = r->method;
	uint8_t    *data;
	size_t		len;
	ProtobufCMessage *req;
	char		why[512];

	if (!ok || r->closed || r->req_payload == NULL)
		return;					/* RECV_CLOSE ends it */
	data = wl_flatten(r->req_payload, &len);
	grpc_byte_buffer_destroy(r->req_payload);
	r->req_payload = NULL;		/* a bidirectional stream's next request comes there */
	if (data == NULL)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	req = protobuf_c_message_unpack(m->request, NULL, len, data);
	free(data);
	if (req == NULL)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, "malformed request");
		return;
	}
	/*
	 * Requests with strings: protobuf-c keeps a string as a C string, cut at
	 * its first NUL ("svc-a\0evil" would be asked for as "svc-a"), and keeps
	 * the last of a singular field given twice.  Packed again, such a
	 * request is shorter than its bytes: refused, never read as another.
	 */
	if ((m->flags & WL_METHOD_STRINGS) && protobuf_c_message_get_packed_size(req) != len)
	{
		protobuf_c_message_free_unpacked(req, NULL);
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "malformed request: a string holds a NUL byte (U+0000), or a field is "
					   "given twice or not in protobuf's canonical encoding");
		return;
	}
	if ((m->flags & WL_METHOD_SECRET) &&
		bcd_provisioner_refusal(w->prov, why, sizeof(why)) != BCD_REFUSAL_NONE)
	{
		protobuf_c_message_free_unpacked(req, NULL);
		wl_call_finish(r, 0, NULL, GRPC_STATUS_PERMISSION_DENIED, why);
		return;
	}
	if (r->got_first)
	{
		if (m->more != NULL)
			m->more(w, r, req);
	}
	else
	{
		r->got_first = 1;
		if (m->serve != NULL)
			r->streaming = 1;
		if (m->handle != NULL)
			m->handle(w, r, req);
	}
	if (m->serve != NULL)
		wl_call_serve(w, r, bcd_now_real());
	protobuf_c_message_free_unpacked(req, NULL);
	if ((m->flags & WL_METHOD_BIDI) && !r->finished && !r->closed)
	{
		grpc_op		op;

		memset(&op, 0, sizeof(op));
		op.op = GRPC_OP_RECV_MESSAGE;
		op.data.recv_message.recv_message = &r->req_payload;
		(void) start_batch(r, &op, 1, &r->t_recv);
	}
}

/* One event of the completion queue: the batch or the shutdown its tag names. */
void
wl_handle_event(bcd_workload *w, grpc_event ev)
{
	wl_tag	   *t = ev.tag;
	wl_call    *r = t->obj;

	switch (t->kind)
	{
		case WL_TAG_NEW_CALL:
			on_new_call(w, r, ev.success);
			break;
		case WL_TAG_RECV_MSG:
			on_request(w, r, ev.success);
			wl_call_batch_done(w, r);
			break;
		case WL_TAG_SEND_MSG:
			r->send_in_flight = 0;
			if (!ev.success)
				stream_stop(r);
			else if (r->method != NULL && (r->method->flags & WL_METHOD_BIDI))
				wl_call_serve(w, r, bcd_now_real());	/* what waited for this push */
			wl_call_batch_done(w, r);
			break;
		case WL_TAG_STATUS:
			wl_call_batch_done(w, r);
			break;
		case WL_TAG_CLOSE:
			r->closed = 1;
			stream_stop(r);
			wl_call_batch_done(w, r);
			break;
		case WL_TAG_SHUTDOWN:
			conn_unref(w, (wl_conn *) t->obj);
			break;
	}
}
