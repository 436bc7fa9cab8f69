/*
 * attest.h: a Workload API caller bound to the process that holds and uses
 * its connection (docs/security.md, "Workload attestation").  At accept bcd
 * takes, beside what peer.c reads, a pidfd of the connecting process
 * (SO_PEERPIDFD, where the kernel has it) and the inode of the caller's end
 * of the socket (sock_diag); at every SVID call that a rule with an exe:,
 * unit: or cgroup: selector answers, and before any secret is sent on it, it
 * checks that the process is still the one seen at accept and that it alone
 * holds its end.
 */
#ifndef BCD_WL_ATTEST_H
#define BCD_WL_ATTEST_H

#include <stddef.h>
#include <sys/types.h>

#include "core/peer.h"

typedef struct bcd_wl_bind
{
	int			pidfd;			/* the connecting process (SO_PEERPIDFD), -1 when none */
	ino_t		peer_ino;		/* the caller's end of the connection, 0 when unknown */
} bcd_wl_bind;

/* Descriptors one check reads at most (the caller's uid's processes'); beyond, it is refused. */
#define BCD_WL_SCAN_MAX 65536

/* What a check asks beyond the process and its connection being those of accept. */
#define BCD_WL_BIND_CLOEXEC 1	/* its descriptor closes on exec (an exe: rule) */

/*
 * At accept, for the connection fd whose peer is p: take the pidfd and the
 * peer's inode.  BC_OK (b filled as far as the kernel tells), or BC_EINVAL
 * with why when the connecting process is gone already (its pidfd cannot be
 * had, or the pid is another process's by now).
 */
int			bcd_wl_bind_open(int fd, const bcd_peer *p, bcd_wl_bind *b, char *why, size_t len);

/* Release what bcd_wl_bind_open took. */
void		bcd_wl_bind_close(bcd_wl_bind *b);

/*
 * At a call: is the caller (accept: what was read at accept; now: read
 * again just before, bcd_peer_refresh) the same process, alive, running the
 * same file, the only holder of its end of the connection among the
 * processes of its uid (with close-on-exec set when flags has
 * BCD_WL_BIND_CLOEXEC)?  0, or -1 with the reason in why.
 */
int			bcd_wl_bind_check(const bcd_wl_bind *b, const bcd_peer *accept,
							  const bcd_peer *now, int flags, char *why, size_t len);

/* 1 when bcd uses SO_PEERPIDFD (the kernel has it and BCD_NO_PEERPIDFD is not set). */
int			bcd_wl_bind_pidfd_used(void);

#endif							/* BCD_WL_ATTEST_H */
