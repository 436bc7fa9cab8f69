/*
 * attest.c: a Workload API caller bound to the process that holds and uses
 * its connection.
 *
 * What SO_PEERCRED names is the process that called connect(), as it was
 * then.  A process can connect and then exec an allowed executable while a
 * child it forked (or a process it handed the descriptor to) reads the
 * answers; its pid can be another process's by the time /proc is read.  So
 * for callers that a rule with an exe:, unit: or cgroup: selector answers,
 * bcd checks, at every SVID call (FetchX509SVID, FetchJWTSVID) and before any
 * secret is sent:
 * - the connecting process is alive: its pidfd (SO_PEERPIDFD, Linux 6.5 and
 *   later) has not signalled an exit; its start time (/proc/PID/stat) is
 *   the one read at accept (without a pidfd, the only check of a reused pid,
 *   and only of one reused after accept);
 * - it runs the file it ran at accept (device and inode of /proc/PID/exe);
 * - it holds the caller's end of the connection (the peer of bcd's end, by
 *   sock_diag's UDIAG_SHOW_PEER) in its descriptor table, with close-on-exec
 *   set for an exe: rule (a descriptor that outlived an exec was opened by
 *   the code that ran before it), and no other process of the caller's uid
 *   does.
 * Which tables are read: those of the connecting process and of every
 * process whose owner (the uid of /proc/PID, its effective uid) is the
 * caller's: a process of another uid holds the connection only when the
 * caller gave it (as it may give its key away); a child the caller forked
 * to hold it has the caller's uid.  For a caller of uid 0, its own
 * process's alone: any root process may take a connection of another.  Of each, its own table (/proc/PID/fd)
 * and the table of every thread that has one of its own (a thread made
 * without CLONE_FILES; or every thread, when the leader thread has exited
 * and /proc/PID/fd shows nothing): kcmp(KCMP_FILES) tells which.  At most
 * BCD_WL_SCAN_MAX descriptors are read in one check; a caller whose uid
 * holds more is refused (logged): a uid with no rule cannot make bcd read
 * its descriptors at all.
 * What no check here sees: a descriptor in flight (sent with SCM_RIGHTS and
 * not yet received) is in no table; processes of other uids; processes
 * whose /proc/PID/fd bcd may not read (other uids, when bcd is not root).
 * docs/security.md says what that leaves open.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/kcmp.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include "bc_common.h"
#include "workload/attest.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77			/* Linux 6.5; not in Debian 12's headers */
#endif

int
bcd_wl_bind_pidfd_used(void)
{
	static int	used = -1;

	if (used < 0)
	{
		int			sv[2];
		int			pidfd = -1;
		socklen_t	len = sizeof(pidfd);
		const char *off = getenv("BCD_NO_PEERPIDFD");

		used = 0;
		if ((off == NULL || off[0] == '\0' || strcmp(off, "0") == 0) &&
			socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0)
		{
			used = getsockopt(sv[0], SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0;
			if (pidfd >= 0)
				close(pidfd);
			close(sv[0]);
			close(sv[1]);
		}
	}
	return used;
}

/* 1 while the process of pidfd has not exited (a pidfd polls readable once it has). */
static int
pidfd_alive(int pidfd)
{
	struct pollfd pfd = {pidfd, POLLIN, 0};

	return poll(&pfd, 1, 0) == 0;
}

/* The inode of the peer of the unix socket whose inode is ino (sock_diag): 0 when unknown. */
static ino_t
peer_inode(ino_t ino)
{
	struct
	{
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	}			q;
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	union
	{
		struct nlmsghdr h;
		char		buf[8192];
	}			ans;
	struct nlmsghdr *h = &ans.h;
	ino_t		peer = 0;
	ssize_t		n;
	int			nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (nl < 0)
		return 0;
	memset(&q, 0, sizeof(q));
	q.nlh.nlmsg_len = sizeof(q);
	q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.nlh.nlmsg_flags = NLM_F_REQUEST;
	q.nlh.nlmsg_seq = 1;
	q.req.sdiag_family = AF_UNIX;
	q.req.udiag_states = ~0U;
	q.req.udiag_ino = (unsigned int) ino;
	q.req.udiag_show = UDIAG_SHOW_PEER;
	q.req.udiag_cookie[0] = q.req.udiag_cookie[1] = ~0U;	/* no cookie: by inode */
	if ((unsigned int) ino != ino ||
		sendto(nl, &q, sizeof(q), 0, (struct sockaddr *) &sa, sizeof(sa)) != (ssize_t) sizeof(q) ||
		(n = recv(nl, ans.buf, sizeof(ans.buf), 0)) <= 0)
	{
		close(nl);
		return 0;
	}
	close(nl);
	for (; NLMSG_OK(h, (size_t) n); h = NLMSG_NEXT(h, n))
	{
		const struct unix_diag_msg *m;
		const struct rtattr *a;
		int			alen;

		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
			h->nlmsg_len < NLMSG_LENGTH(sizeof(struct unix_diag_msg)))
			break;
		m = NLMSG_DATA(h);
		if (m->udiag_ino != (unsigned int) ino)
			continue;
		alen = (int) (h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
		for (a = (const struct rtattr *) (m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen))
			if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t))
			{
				uint32_t	v;

				memcpy(&v, RTA_DATA(a), sizeof(v));
				peer = (ino_t) v;
			}
	}
	return peer;
}

int
bcd_wl_bind_open(int fd, const bcd_peer *p, bcd_wl_bind *b, char *why, size_t len)
{
	struct stat st;

	b->pidfd = -1;
	b->peer_ino = 0;
	if (fstat(fd, &st) == 0)
		b->peer_ino = peer_inode(st.st_ino);
	if (p->pid == 0)
		return BC_OK;
	if (bcd_wl_bind_pidfd_used())
	{
		int			pidfd = -1;
		socklen_t	plen = sizeof(pidfd);

		if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &plen) != 0 || pidfd < 0)
		{
			snprintf(why, len, "the connecting process has exited (no pidfd: %s)", strerror(errno));
			return BC_EINVAL;
		}
		b->pidfd = pidfd;
		/* alive after /proc was read: what was read was this process's */
		if (!pidfd_alive(pidfd))
		{
			snprintf(why, len, "the connecting process exited while it was read");
			bcd_wl_bind_close(b);
			return BC_EINVAL;
		}
	}
	return BC_OK;
}

void
bcd_wl_bind_close(bcd_wl_bind *b)
{
	if (b->pidfd >= 0)
		close(b->pidfd);
	b->pidfd = -1;
}

/* Is descriptor NAME of the table at /proc/TASK (a process or a task) close-on-exec?  1, 0, or -1 when unreadable. */
static int
fd_cloexec(const char *task, const char *name)
{
	char		path[128 + 256];
	char		buf[512];
	ssize_t		n;
	const char *f;
	int			fd;

	snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", task, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if ((f = strstr(buf, "\nflags:")) == NULL)
		return -1;
	return (strtoul(f + 7, NULL, 8) & O_CLOEXEC) != 0;
}

/* One check's scan: what it looks for, what it found, what it may still read. */
typedef struct scan
{
	pid_t		pid;			/* the connecting process */
	char		want[64];		/* "socket:[INO]" */
	int			need_cloexec;
	long		budget;			/* descriptors it may still read */
	int			own;			/* pid holds it */
	int			own_read;		/* pid's table could be read */
	char	   *why;
	size_t		len;
} scan;

/*
 * Read the descriptor table at /proc/TASK/fd (of process p): 0, or -1 with
 * s->why (another holder, no close-on-exec, over the budget); 1 when it
 * cannot be read.
 */
static int
scan_table(scan *s, long p, const char *task)
{
	char		path[128];
	DIR		   *fds;
	struct dirent *f;
	int			dfd;
	int			rc = 0;

	snprintf(path, sizeof(path), "/proc/%s/fd", task);
	if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return 1;				/* gone, or not ours to read */
	if ((fds = fdopendir(dfd)) == NULL)
	{
		close(dfd);
		return 1;
	}
	if (p == (long) s->pid)
		s->own_read = 1;
	while (rc == 0 && (f = readdir(fds)) != NULL)
	{
		char		link[64];
		ssize_t		n;

		if (f->d_name[0] == '.')
			continue;
		if (--s->budget < 0)
		{
			snprintf(s->why, s->len, "the processes of its uid hold more than %d descriptors: "
					 "bcd reads at most that many to bind a caller to its connection",
					 BCD_WL_SCAN_MAX);
			rc = -1;
			break;
		}
		n = readlinkat(dirfd(fds), f->d_name, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, s->want) != 0)
			continue;
		if (p != (long) s->pid)
		{
			snprintf(s->why, s->len, "its connection is also held by pid %ld", p);
			rc = -1;
			break;
		}
		s->own = 1;
		if (s->need_cloexec && fd_cloexec(task, f->d_name) != 1)
		{
			snprintf(s->why, s->len, "it holds its connection without close-on-exec "
					 "(descriptor %s: it may have outlived an exec)", f->d_name);
			rc = -1;
			break;
		}
	}
	closedir(fds);
	return rc;
}

/* kcmp(KCMP_FILES): 0 when tasks a and b share one descriptor table. */
static long
same_table(long a, long b)
{
	return syscall(SYS_kcmp, (pid_t) a, (pid_t) b, KCMP_FILES, 0UL, 0UL);
}

/*
 * Read every descriptor table of process p: its own (/proc/P/fd) and every
 * thread's that is not the leader's (nor one already read).  0, or -1 with
 * s->why.
 */
static int
scan_process(scan *s, long p)
{
	char		task[64];
	long		seen[16];
	int			nseen = 0;
	DIR		   *tasks;
	struct dirent *t;
	int			rc;

	snprintf(task, sizeof(task), "%ld", p);
	if ((rc = scan_table(s, p, task)) < 0)
		return -1;
	snprintf(task, sizeof(task), "/proc/%ld/task", p);
	if ((tasks = opendir(task)) == NULL)
		return 0;
	rc = 0;
	while (rc == 0 && (t = readdir(tasks)) != NULL)
	{
		char	   *end;
		long		tid = strtol(t->d_name, &end, 10);
		int			known = 0;

		if (t->d_name[0] < '1' || t->d_name[0] > '9' || *end != '\0' || tid == p)
			continue;
		/* the leader's table, read above (an exited leader has none: never the same) */
		if (same_table(p, tid) == 0)
			continue;
		for (int i = 0; i < nseen && !known; i++)
			known = same_table(seen[i], tid) == 0;
		if (known)
			continue;
		snprintf(task, sizeof(task), "%ld/task/%ld", p, tid);
		rc = scan_table(s, p, task) < 0 ? -1 : 0;
		if (nseen < (int) (sizeof(seen) / sizeof(seen[0])))
			seen[nseen++] = tid;
	}
	closedir(tasks);
	return rc;
}

/*
 * Which processes hold socket:[ino]: 0 when pid holds it (close-on-exec when
 * need_cloexec) and no other process of uid does (uid 0: pid's alone read);
 * -1 with why.
 */
static int
scan_holders(pid_t pid, uid_t uid, ino_t ino, int need_cloexec, char *why, size_t len)
{
	DIR		   *proc = opendir("/proc");
	struct dirent *e;
	scan		s;
	int			rc = 0;

	memset(&s, 0, sizeof(s));
	s.pid = pid;
	s.need_cloexec = need_cloexec;
	s.budget = BCD_WL_SCAN_MAX;
	s.why = why;
	s.len = len;
	snprintf(s.want, sizeof(s.want), "socket:[%lu]", (unsigned long) ino);
	if (proc == NULL)
	{
		snprintf(why, len, "cannot read /proc: %s", strerror(errno));
		return -1;
	}
	while (rc == 0 && (e = readdir(proc)) != NULL)
	{
		char	   *end;
		long		p = strtol(e->d_name, &end, 10);
		struct stat st;

		if (e->d_name[0] < '1' || e->d_name[0] > '9' || *end != '\0')
			continue;
		/* the connecting process, and the processes of the caller's uid (but root) */
		if (p != (long) pid &&
			(uid == 0 || fstatat(dirfd(proc), e->d_name, &st, 0) != 0 || st.st_uid != uid))
			continue;
		rc = scan_process(&s, p);
	}
	closedir(proc);
	if (rc == 0 && !s.own_read)
	{
		snprintf(why, len, "cannot read /proc/%ld/fd (bcd must run as root, or as the caller's "
				 "user, to bind it to its connection)", (long) pid);
		rc = -1;
	}
	else if (rc == 0 && !s.own)
	{
		snprintf(why, len, "pid %ld no longer holds its connection", (long) pid);
		rc = -1;
	}
	return rc;
}

int
bcd_wl_bind_check(const bcd_wl_bind *b, const bcd_peer *accept, const bcd_peer *now,
				  int flags, char *why, size_t len)
{
	unsigned long long start;

	if (accept->pid == 0)
	{
		snprintf(why, len, "the connecting process is unknown (no pid)");
		return -1;
	}
	if (b->pidfd >= 0 && !pidfd_alive(b->pidfd))
	{
		snprintf(why, len, "the connecting process has exited");
		return -1;
	}
	if (accept->start == 0 || now->start != accept->start)
	{
		snprintf(why, len, "pid %ld is not the process that connected (exited, or another's now)",
				 (long) accept->pid);
		return -1;
	}
	if (accept->exe_known != now->exe_known ||
		(accept->exe_known && (accept->exe_dev != now->exe_dev || accept->exe_ino != now->exe_ino)))
	{
		snprintf(why, len, "it runs another executable than when it connected (an exec since)");
		return -1;
	}
	if (b->peer_ino == 0)
	{
		snprintf(why, len, "the caller's end of its connection is unknown (sock_diag)");
		return -1;
	}
	if (scan_holders(accept->pid, accept->uid, b->peer_ino, flags & BCD_WL_BIND_CLOEXEC,
					 why, len) != 0)
		return -1;
	/* and the pid was that process all along the scan */
	if ((b->pidfd >= 0 && !pidfd_alive(b->pidfd)) ||
		bcd_peer_start_time(accept->pid, &start) != 0 || start != accept->start)
	{
		snprintf(why, len, "the connecting process has exited");
		return -1;
	}
	return 0;
}
