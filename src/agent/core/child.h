/*
 * child.h: a child process run with a deadline, the common core of the
 * command handlers (commands.c) and the external producer (producers/exec.c):
 * spawned on pipes in its own process group, its exit waited for until the
 * deadline, killed with its process group when it is not reaped.  What it
 * is given, how its output is read and what its end means stay with each
 * caller.
 */
#ifndef BCD_CHILD_H
#define BCD_CHILD_H

#include <sys/types.h>

/* A spawned child and our ends of its pipes (-1 once closed). */
typedef struct bcd_child
{
	pid_t		pid;
	int			in;				/* its stdin */
	int			out;			/* its stdout (and stderr, unless err is its own) */
	int			err;			/* its stderr; -1 when it shares out */
} bcd_child;

/*
 * Run in the child after its stdin, stdout and stderr are set (and, for
 * bcd_child_spawn_fd, the file to run at descriptor 3), just before the
 * exec: 0, else the child exits 127.
 */
typedef int (*bcd_child_setup) (void *arg);

/* What bcd_child_wait saw. */
#define BCD_CHILD_EXITED 0		/* reaped */
#define BCD_CHILD_TIMED_OUT 1	/* the deadline passed first */
#define BCD_CHILD_STOPPED 2		/* SIGTERM/SIGINT arrived first */

int			bcd_child_spawn(bcd_child *c, const char *path, char *const argv[],
							char *const envp[], int own_stderr,
							bcd_child_setup setup, void *arg);
int			bcd_child_spawn_fd(bcd_child *c, int fd, char *const argv[],
							   char *const envp[], int own_stderr,
							   bcd_child_setup setup, void *arg);
int			bcd_child_wait(bcd_child *c, double deadline, int stoppable, int *status);
void		bcd_child_end(bcd_child *c, int reaped, int *status);
void		bcd_child_close(int *fd);

#endif							/* BCD_CHILD_H */
