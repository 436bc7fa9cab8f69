/*
 * sessions.h: the interface of bcd's socket server (docs/sessions.md, "The
 * host side").  A provisioning (bcd_job), its answer codes, outcome and the
 * published numbers are in job.h; the server's state is private to
 * sessions.c, the workers' to workers.c.
 */
#ifndef BCD_SESSIONS_H
#define BCD_SESSIONS_H

#include <stddef.h>

#include "core/agent.h"
#include "core/job.h"
#include "core/node_credential.h"
#include "core/peer.h"
#include "core/store.h"

/* Connections allowed beyond --max-queue (status requests, callers being read). */
#define BCD_EXTRA_CONNS 64

/* The socket server of bcd run (sessions.c). */
typedef struct bcd_server bcd_server;

int			bcd_server_start(const bcd_run_opts *o, const bcd_service_keys *keys,
							 const bcd_credential *initial, bcd_server **out,
							 char *err, size_t errlen);
void		bcd_server_publish(bcd_server *s, const bcd_credential *cred);
void		bcd_server_renewing(bcd_server *s, int on);
void		bcd_server_stop(bcd_server *s);
void		bcd_server_node_take(bcd_server *s, bcd_node_snapshot *out);
int			bcd_server_provision(bcd_server *s, const char *session, const char *context,
								 const bcd_peer *caller, bcd_job_cb cb, void *arg);
int			bcd_server_fetch_jwt(bcd_server *s, const char *session, const char *context,
								 const bcd_audiences *aud, const bcd_peer *caller,
								 bcd_job_cb cb, void *arg);

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry point (test/fuzz/fuzz_sock_line.c), not used by bcd: the
 * request bytes read and answered as by the socket server with no node
 * credential; the answer line in answer; its length or -1.
 */
long		bcd_sessions_fuzz_line(const unsigned char *data, size_t n, char *answer, size_t cap);
#endif

#endif							/* BCD_SESSIONS_H */
