/*
 * workload.c: bcd's SPIFFE Workload API (docs/agent.md, "The SPIFFE
 * Workload API"; docs/design.md for why it is built this way): its life
 * and its completion-queue thread.  What each of its files does:
 * internal.h.
 *
 * The socket.  bcd makes it exactly as its hooks' socket (local_socket.c:
 * 0600 in a 0700 directory of its own, by default workload.sock next to
 * bcd.sock) and accepts every connection itself (accept.c, conn.c), so a
 * caller is read and matched before gRPC sees its connection; each one
 * gets a grpc_server of its own (call.c).
 *
 * The calls.  One thread runs the shared completion queue, with a 100 ms
 * tick for renewals and reaping.  A call's method is a row of methods.c's
 * table; its caller must match a --workload-rule (authorize.c), which
 * names the session and context of its identity.  An identity's X509-SVID
 * is a session credential provisioned through the provisioner the daemon
 * hands it (x509_svids.c); a FetchJWTSVID's JWT-SVID is a provisioning of
 * the provisioner too, coalesced, cached for half its life and
 * rate-limited per uid (jwt_svids.c).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include <openssl/x509.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/* The socket's name, next to the hooks' socket, when --workload-api names none. */
#define WL_SOCKET_NAME "workload.sock"

/*
 * The completion-queue thread: every event handed to the calls (call.c),
 * and at every tick (100 ms): the JWT-SVIDs fetched answered, idle
 * connections reaped, the closed-at-once summary told, the refusals'
 * summary, the X509-SVIDs due provisioned and every stream served.
 */
static void *
cq_main(void *arg)
{
	bcd_workload *w = arg;

	while (!atomic_load(&w->stopping))
	{
		gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
											 gpr_time_from_millis(WL_TICK_MS, GPR_TIMESPAN));
		grpc_event	ev = grpc_completion_queue_next(w->cq, deadline, NULL);
		double		now;

		pthread_mutex_lock(&w->mu);
		while (ev.type == GRPC_OP_COMPLETE)
		{
			wl_handle_event(w, ev);
			ev = grpc_completion_queue_next(w->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
		}
		now = bcd_now_real();
		wl_jwt_take_done(w);
		wl_trust_take(w);
		wl_reap(w);
		/* the connections closed at once, told once per interval */
		if (pthread_mutex_trylock(&w->closed_mu) == 0)
		{
			wl_tell_closed(w, bcd_now_s());
			pthread_mutex_unlock(&w->closed_mu);
		}
		bcd_wl_refusals_tick(w->refusals, bcd_now_s());
		wl_crl_take(w);
		wl_x509_provision_due(w, now);
		for (wl_call *r = w->calls; r != NULL; r = r->next)
			wl_call_serve(w, r, now);
		pthread_mutex_unlock(&w->mu);
	}
	/* stopping: the FetchJWTSVIDs waiting answered, every connection's
	 * server down, every call freed */
	pthread_mutex_lock(&w->mu);
	wl_jwt_drain(w);
	for (wl_conn *c = w->conns; c != NULL; c = c->next)
		wl_conn_shutdown(w, c);
	while (w->conns != NULL)
	{
		grpc_event	ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
													NULL);

		if (ev.type == GRPC_OP_COMPLETE)
			wl_handle_event(w, ev);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

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

/*
 * The Workload API of bcd run (workload.h): the rules, the jwt-svid keys,
 * the bundle, the socket (listening; its mode), the accepting and gRPC;
 * nothing runs yet.
 */
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
	w->methods = wl_methods;
	w->n_methods = wl_n_methods;
	w->sds_validation = o->sds_validation;
	w->rules = bcd_wl_rules_parse(o->workload_rules, o->n_workload_rules, err, errlen);
	if (w->rules == NULL)
		goto fail;
	w->jwt = bcd_wl_jwt_new(keys);
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
	if (bcd_wl_rules_check_federates(w->rules, w->trust_domain, err, errlen) != 0)
		goto fail;
	if (keys->trust != NULL)
		w->fed = bcd_trust_bundles_get(keys->trust);
	if (bcd_wl_files_start(w, o, &w->files, err, errlen) != BC_OK)
		goto fail;
	/* files mode alone (no rule, no --workload-api PATH): no socket */
	if (o->workload_api != NULL ? strcmp(o->workload_api, "off") == 0 : o->n_workload_rules == 0)
	{
		grpc_init();
		w->cq = grpc_completion_queue_create_for_next(NULL);
		w->creds = grpc_insecure_server_credentials_create();
		bcd_log("workload api: no socket; files mode only (%d director%s), trust domain %s",
				o->n_svid_files, o->n_svid_files == 1 ? "y" : "ies", w->trust_domain);
		*out = w;
		return BC_OK;
	}
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
	if ((w->acceptor = bcd_wl_acceptor_new(w->sock.fd, w->rules, wl_accept_one, w)) == NULL)
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

/* Start its completion-queue thread, then its accept threads. */
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
	bcd_wl_files_run(w->files);
	if (w->acceptor != NULL && bcd_wl_acceptor_start(w->acceptor) != BC_OK)
		bcd_workload_stop(w);
}

/* Stop its accept threads, then its completion-queue thread (every call ended). */
void
bcd_workload_stop(bcd_workload *w)
{
	if (w == NULL || !w->running)
		return;
	/* no connection is added after this; then the calls and connections end */
	if (w->acceptor != NULL)
		bcd_wl_acceptor_stop(w->acceptor);
	bcd_wl_files_stop(w->files);
	atomic_store(&w->stopping, 1);
	pthread_join(w->cq_thread, NULL);
	w->running = 0;
}

/* Free it (stopped first): gRPC, the socket, the identities, the caches. */
void
bcd_workload_free(bcd_workload *w)
{
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
	if (w->acceptor != NULL)
		bcd_wl_acceptor_free(w->acceptor);
	bcd_wl_files_free(w->files);
	if (w->path != NULL)
		bcd_socket_close(&w->sock, w->path);
	wl_identities_free(w);
	bcd_wl_rules_free(w->rules);
	bcd_wl_refusals_free(w->refusals);
	bcd_wl_jwt_free(w->jwt);
	bcd_wl_jwt_svids_free(w->jwt_svids);
	if (w->fed != NULL)
		bcd_trust_set_release(w->keys->trust, w->fed);
	free(w->trust_domain);
	free(w->bundle);
	free(w->path);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->closed_mu);
	free(w);
}
