/*
 * peer.h: the process at the other end of a local socket connection, as the
 * kernel tells it (SO_PEERCRED) and as /proc shows it: what bcd records with
 * each session delivery and sends, as its claim, with the session request.
 */
#ifndef BCD_PEER_H
#define BCD_PEER_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/* Bounds of what is kept (longer values are cut, marked with "..."). */
#define BCD_PEER_EXE_MAX 512
#define BCD_PEER_CGROUP_MAX 512
#define BCD_PEER_UNIT_MAX 200

typedef struct bcd_peer
{
	pid_t		pid;			/* 0: not known (another pid namespace, or no SO_PEERCRED) */
	uid_t		uid;
	char		exe[BCD_PEER_EXE_MAX];	/* /proc/PID/exe, "" when unreadable */
	char		cgroup[BCD_PEER_CGROUP_MAX];	/* the cgroup v2 path, "" when unknown */
	char		unit[BCD_PEER_UNIT_MAX];	/* the systemd unit its cgroup names, "" when none */
} bcd_peer;

/*
 * Read the peer of the connected unix socket fd: BC_OK with *p filled (its
 * uid always; pid, exe, cgroup and unit as far as they can be read), or
 * BC_EINVAL when SO_PEERCRED fails.  Printable ASCII only is kept; anything
 * else becomes '?'.
 */
int			bcd_peer_read(int fd, bcd_peer *p);

/* The peer as "pid N (exe E, unit U)" for a log line. */
void		bcd_peer_describe(const bcd_peer *p, char *buf, size_t len);

/* The peer as the proof's "caller": {"pid", "exe"?, "unit"?, "cgroup"?}; NULL when its pid is unknown. */
json_t	   *bcd_peer_json(const bcd_peer *p);

/* The cgroup v2 path in the text of /proc/PID/cgroup (n bytes): its "0::" line's, "" when none. */
void		bcd_peer_cgroup_of(const char *text, size_t n, char *out, size_t len);

/* The unit a cgroup v2 path names: its last component ending in .service or .scope ("" when none). */
void		bcd_peer_unit_of(const char *cgroup, char *unit, size_t len);

#endif							/* BCD_PEER_H */
