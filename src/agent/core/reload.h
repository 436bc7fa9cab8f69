/*
 * reload.h: running a reload command once (files mode's --svid-files-reload,
 * workload/files.c; SSH's --ssh-reload, core/ssh_host.c): an executable
 * opened and checked as --producer's is (bcd_exec_open_checked), run by
 * that descriptor through core/child.c with no arguments, a clean
 * environment and cwd /, killed with its process group after a deadline;
 * its exit and the start of its output logged.
 */
#ifndef BCD_RELOAD_H
#define BCD_RELOAD_H

#include <stdatomic.h>

/* How long a reload may run (s), and how much of its output is logged. */
#define BCD_RELOAD_TIMEOUT 30.0
#define BCD_RELOAD_OUTPUT_MAX 2048

/*
 * Run exe (its checked descriptor fd) once: argv [exe], environment PATH,
 * LC_ALL and env_extra ("NAME=value", or NULL); every descriptor but 0-2
 * closed, cwd /.  It counts as done when it exits; killed with its process
 * group after BCD_RELOAD_TIMEOUT or once *stopping (may be NULL) is set.
 * Logged as "<prefix>: reload <exe> done|failed (...)|killed ...".  0 when it
 * exited 0, else -1.
 */
int			bcd_reload_run(const char *prefix, const char *exe, int fd, const char *env_extra,
						   atomic_int *stopping);

#endif							/* BCD_RELOAD_H */
