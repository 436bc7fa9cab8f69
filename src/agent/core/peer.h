/*
 * peer.h: the process at the other end of a local socket connection, as the
 * kernel tells it (SO_PEERCRED) and as /proc shows it: what bcd records with
 * each session delivery and sends, as its claim, with the session request,
 * and what the Workload API's selectors are matched against.
 */
#ifndef BCD_PEER_H
#define BCD_PEER_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/* Bounds of what is kept (longer values are cut, marked with "..."). */
#define BCD_PEER_EXE_MAX 512
#define BCD_PEER_CGROUP_MAX 512
#define BCD_PEER_UNIT_MAX 256

typedef struct bcd_peer
{
	pid_t		pid;			/* 0: not known (another pid namespace, or no SO_PEERCRED) */
	uid_t		uid;
	gid_t		gid;
	unsigned long long start;	/* /proc/PID/stat's starttime (clock ticks after boot), 0 unknown */
	char		exe[BCD_PEER_EXE_MAX];	/* readlink of /proc/PID/exe (a record), "" when unreadable */
	int			exe_known;		/* exe_dev, exe_ino: stat() of /proc/PID/exe, the file it runs */
	dev_t		exe_dev;
	ino_t		exe_ino;
	int			mnt_known;		/* mnt_same: /proc/PID/ns/mnt is bcd's own mount namespace */
	int			mnt_same;
	int			userns_known;	/* userns_same: /proc/PID/ns/user is bcd's own user namespace */
	int			userns_same;
	char		cgroup[BCD_PEER_CGROUP_MAX];	/* the cgroup v2 path, "" when unknown */
	int			cgroup_cut;		/* the path was longer than the buffer: never matched */
	char		unit[BCD_PEER_UNIT_MAX];	/* the unit systemd's rules give it (sd_pid_get_unit), "" when none */
} bcd_peer;

/*
 * Read the peer of the connected unix socket fd: BC_OK with *p filled (its
 * uid and gid always; pid, exe, cgroup and unit as far as they can be
 * read), or BC_EINVAL when SO_PEERCRED fails.  Printable ASCII only is kept
 * of the texts; anything else becomes '?'.
 */
int			bcd_peer_read(int fd, bcd_peer *p);

/*
 * Read again what /proc says of p->pid now (start time, exe, mount
 * namespace, cgroup, unit; pid, uid and gid kept): the Workload API's view
 * at a call, compared with the one taken at accept.
 */
void		bcd_peer_refresh(bcd_peer *p);

/*
 * The most of /proc/PID/maps bcd_peer_maps_exec reads before it gives up:
 * a program's own executable is mapped among its first few mappings, and a
 * caller that is refused may ask again at once.
 */
#define BCD_PEER_MAPS_MAX (64 * 1024)

/*
 * Does pid map the file (dev, ino) executable: a mapping with 'x' of that
 * file in /proc/PID/maps (read up to BCD_PEER_MAPS_MAX bytes, stopping at
 * the first)?  1; 0 when it does not; -1 when its maps cannot be read or
 * are longer than the bound before such a mapping.
 */
int			bcd_peer_maps_exec(pid_t pid, dev_t dev, ino_t ino);

/* /proc/PID/stat's starttime of pid into *start: 0, or -1 when unreadable. */
int			bcd_peer_start_time(pid_t pid, unsigned long long *start);

/* The peer as "pid N (exe E, unit U)" for a log line. */
void		bcd_peer_describe(const bcd_peer *p, char *buf, size_t len);

/* The peer as the proof's "caller": {"pid", "exe"?, "unit"?, "cgroup"?}; NULL when its pid is unknown. */
json_t	   *bcd_peer_json(const bcd_peer *p);

/*
 * The cgroup v2 path in the text of /proc/PID/cgroup (n bytes): its "0::"
 * line's, "" when none; 1 when it was cut to fit len, else 0.
 */
int			bcd_peer_cgroup_of(const char *text, size_t n, char *out, size_t len);

#endif							/* BCD_PEER_H */
