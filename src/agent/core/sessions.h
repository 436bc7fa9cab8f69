/*
 * sessions.h: the interface of bcd's hooks' socket server (sessions.c;
 * docs/sessions.md, "The host side"), a client of the provisioner
 * (provisioner.h).  A provisioning (bcd_job), its answer codes, outcome and
 * the published numbers are in job.h; the server's state is private to
 * sessions.c.
 */
#ifndef BCD_SESSIONS_H
#define BCD_SESSIONS_H

#include <stddef.h>

#include "core/agent.h"
#include "core/provisioner.h"

/* Connections allowed beyond --max-queue (status requests, callers being read). */
#define BCD_EXTRA_CONNS 64

/* The hooks' socket server of bcd run (sessions.c). */
typedef struct bcd_hook_server bcd_hook_server;

/*
 * Listen on the hooks' socket (o->socket, or the default in runtime_dir,
 * rtfd open on it), asking prov for credentials; nothing runs yet.  BC_OK
 * with *out, or an error in err and nothing left behind.
 */
int			bcd_hook_server_listen(const bcd_run_opts *o, bcd_provisioner *prov,
								   const char *runtime_dir, int rtfd, bcd_hook_server **out,
								   char *err, size_t errlen);
/* The path of its socket (the Workload API's default is next to it). */
const char *bcd_hook_server_path(const bcd_hook_server *s);
/* Start its I/O thread (once the provisioner runs): BC_OK, or an error in err. */
int			bcd_hook_server_run(bcd_hook_server *s, char *err, size_t errlen);
/* Stop its I/O thread: hooks still waiting answered unavailable; nothing is asked after. */
void		bcd_hook_server_stop(bcd_hook_server *s);
/* Free it (stopped first), after the provisioner has stopped. */
void		bcd_hook_server_free(bcd_hook_server *s);
/* The SSH module whose state bcd status shows (ssh_host.c), or NULL; s NULL: nothing. */
struct bcd_ssh;
void		bcd_hook_server_set_ssh(bcd_hook_server *s, struct bcd_ssh *ssh);

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry point (test/fuzz/fuzz_sock_line.c), not used by bcd: the
 * request bytes read and answered as by the hooks' socket server with no
 * node credential; the answer line in answer; its length or -1.
 */
long		bcd_sessions_fuzz_line(const unsigned char *data, size_t n, char *answer, size_t cap);
#endif

#endif							/* BCD_SESSIONS_H */
