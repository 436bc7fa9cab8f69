/*
 * peer.c: the process at the other end of a local socket connection.
 *
 * SO_PEERCRED gives the uid and gid (the peer check) and the pid the kernel
 * saw at connect().  For that pid, /proc gives:
 * - the executable: readlink of /proc/PID/exe names it (a record for logs
 *   and claims: the path as the caller's mount namespace shows it), and
 *   stat() of /proc/PID/exe gives the file itself (device and inode, the
 *   kernel resolving the link to what the process runs, in any namespace);
 * - its mount and user namespaces (/proc/PID/ns/mnt, /proc/PID/ns/user)
 *   against bcd's own;
 * - the cgroup (/proc/PID/cgroup, its "0::" line on cgroup v2) and the
 *   systemd unit, which is systemd's own answer (libsystemd's
 *   sd_pid_get_unit: the first unit below the slices, so a process anywhere
 *   in user@UID.service's delegated subtree is in user@UID.service, whatever
 *   it names its own cgroups);
 * - its start time (/proc/PID/stat), read before and after the rest: a pid
 *   reused meanwhile leaves the exe, cgroup and unit unknown.
 * - on demand, whether it maps a file executable (/proc/PID/maps, read up to
 *   a bound: bcd_peer_maps_exec, for exe: rules).
 * All of it is read with bounded reads of files the kernel writes.  What it
 * is worth: docs/security.md, "Workload attestation"; for the hooks' socket
 * it is a record, not a check (docs/sessions.md, "Who asked").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <systemd/sd-login.h>

#include "bc_common.h"
#include "core/peer.h"

/* Keep only printable ASCII in s (in place). */
static void
printable(char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char) *s < 0x20 || (unsigned char) *s > 0x7e)
			*s = '?';
}

/* Copy src into dst (len bytes), marking a cut with "..."; 1 when cut. */
static int
copy_cut(char *dst, size_t len, const char *src, size_t n)
{
	int			cut = n >= len;

	if (!cut)
	{
		memcpy(dst, src, n);
		dst[n] = '\0';
	}
	else
	{
		memcpy(dst, src, len - 4);
		memcpy(dst + len - 4, "...", 4);
	}
	printable(dst);
	return cut;
}

int
bcd_peer_cgroup_of(const char *text, size_t n, char *out, size_t len)
{
	const char *line = text;
	const char *end = text + n;

	out[0] = '\0';
	/* cgroup v2: "0::/path"; a hybrid system lists it among the v1 lines */
	while (line < end)
	{
		const char *nl = memchr(line, '\n', (size_t) (end - line));
		size_t		ln = nl != NULL ? (size_t) (nl - line) : (size_t) (end - line);

		if (ln >= 3 && memcmp(line, "0::", 3) == 0)
		{
			const char *nul = memchr(line + 3, '\0', ln - 3);

			return copy_cut(out, len, line + 3, nul != NULL ? (size_t) (nul - line - 3) : ln - 3);
		}
		line += ln + 1;
	}
	return 0;
}

/* Read /proc/PID/NAME (at most len - 1 bytes) into buf, NUL-terminated: its length, or -1. */
static ssize_t
read_proc(pid_t pid, const char *name, char *buf, size_t len)
{
	char		path[64];
	ssize_t		n;
	int			fd;

	snprintf(path, sizeof(path), "/proc/%ld/%s", (long) pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

int
bcd_peer_start_time(pid_t pid, unsigned long long *start)
{
	char		buf[1024];
	ssize_t		n = read_proc(pid, "stat", buf, sizeof(buf));
	const char *p;
	char	   *end;

	*start = 0;
	/* "PID (COMM) S ..." where COMM may hold anything: fields count from the last ')' */
	if (n <= 0 || (p = strrchr(buf, ')')) == NULL)
		return -1;
	p++;
	/* starttime is field 22; field 3 (the state) follows ") " */
	for (int field = 3; field < 22; field++)
	{
		p = strchr(p + 1, ' ');
		if (p == NULL)
			return -1;
	}
	errno = 0;
	*start = strtoull(p + 1, &end, 10);
	if (errno != 0 || end == p + 1 || *start == 0)
	{
		*start = 0;
		return -1;
	}
	return 0;
}

/* The process's view of pid: everything but pid, uid and gid, read again. */
static void
read_process(bcd_peer *p)
{
	char		path[64];
	char		exe[BCD_PEER_EXE_MAX + 1];
	char		buf[4096];
	char	   *unit = NULL;
	struct stat st;
	struct stat self;
	unsigned long long again;
	ssize_t		n;

	p->start = 0;
	p->exe[0] = p->cgroup[0] = p->unit[0] = '\0';
	p->exe_known = p->mnt_known = p->mnt_same = p->cgroup_cut = 0;
	p->userns_known = p->userns_same = 0;
	if (p->pid == 0 || bcd_peer_start_time(p->pid, &p->start) != 0)
		return;
	snprintf(path, sizeof(path), "/proc/%ld/exe", (long) p->pid);
	n = readlink(path, exe, sizeof(exe));
	if (n > 0)
		copy_cut(p->exe, sizeof(p->exe), exe, (size_t) n);
	if (stat(path, &st) == 0)
	{
		p->exe_known = 1;
		p->exe_dev = st.st_dev;
		p->exe_ino = st.st_ino;
	}
	snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", (long) p->pid);
	if (stat(path, &st) == 0 && stat("/proc/self/ns/mnt", &self) == 0)
	{
		p->mnt_known = 1;
		p->mnt_same = st.st_dev == self.st_dev && st.st_ino == self.st_ino;
	}
	snprintf(path, sizeof(path), "/proc/%ld/ns/user", (long) p->pid);
	if (stat(path, &st) == 0 && stat("/proc/self/ns/user", &self) == 0)
	{
		p->userns_known = 1;
		p->userns_same = st.st_dev == self.st_dev && st.st_ino == self.st_ino;
	}
	n = read_proc(p->pid, "cgroup", buf, sizeof(buf));
	if (n > 0)
		p->cgroup_cut = bcd_peer_cgroup_of(buf, (size_t) n, p->cgroup, sizeof(p->cgroup));
	if (sd_pid_get_unit(p->pid, &unit) >= 0 && unit != NULL)
	{
		if (copy_cut(p->unit, sizeof(p->unit), unit, strlen(unit)))
			p->unit[0] = '\0';	/* longer than any unit name: none */
		free(unit);
	}
	/* another process behind the same pid by now: nothing of it is taken */
	if (bcd_peer_start_time(p->pid, &again) != 0 || again != p->start)
	{
		p->start = 0;
		p->exe[0] = p->cgroup[0] = p->unit[0] = '\0';
		p->exe_known = p->mnt_known = p->mnt_same = p->cgroup_cut = 0;
		p->userns_known = p->userns_same = 0;
	}
}

/*
 * Is the maps line (NUL-terminated) an executable mapping of (dev, ino) in
 * pid?  The line names the inode and its device; the device is confirmed
 * by stat() of /proc/PID/map_files/START-END, the file itself as the
 * kernel resolves it (as for /proc/PID/exe), or, where bcd may not follow
 * map_files (it needs CAP_SYS_ADMIN), by the line's major:minor.
 */
static int
maps_line_is(pid_t pid, const char *line, dev_t dev, ino_t ino)
{
	unsigned long start,
				end,
				off,
				inode;
	unsigned int maj,
				min;
	char		perms[5];
	char		path[96];
	struct stat st;

	if (sscanf(line, "%lx-%lx %4s %lx %x:%x %lu", &start, &end, perms, &off, &maj, &min,
			   &inode) != 7 || perms[2] != 'x' || (ino_t) inode != ino || inode == 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/map_files/%lx-%lx", (long) pid, start, end);
	if (stat(path, &st) == 0)
		return st.st_dev == dev && st.st_ino == ino;
	if (errno != EPERM && errno != EACCES)
		return 0;
	return makedev(maj, min) == dev;
}

int
bcd_peer_maps_exec(pid_t pid, dev_t dev, ino_t ino)
{
	char		path[64];
	char		buf[16384];
	size_t		have = 0;
	size_t		total = 0;
	int			skip = 0;		/* in a line longer than buf: no mapping of a file */
	int			found = 0;
	int			fd;

	snprintf(path, sizeof(path), "/proc/%ld/maps", (long) pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return -1;
	while (!found && total < BCD_PEER_MAPS_MAX)
	{
		ssize_t		n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char	   *line = buf;
		char	   *nl;

		if (n < 0)
		{
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		have += (size_t) n;
		total += (size_t) n;
		buf[have] = '\0';
		while (!found && (nl = memchr(line, '\n', have - (size_t) (line - buf))) != NULL)
		{
			*nl = '\0';
			if (!skip)
				found = maps_line_is(pid, line, dev, ino);
			skip = 0;
			line = nl + 1;
		}
		/* keep the unfinished line, unless it fills the buffer */
		have -= (size_t) (line - buf);
		if (have == sizeof(buf) - 1)
		{
			skip = 1;
			have = 0;
		}
		memmove(buf, line, have);
	}
	close(fd);
	if (found)
		return 1;
	return total >= BCD_PEER_MAPS_MAX ? -1 : 0;
}

int
bcd_peer_read(int fd, bcd_peer *p)
{
	struct ucred cred;
	socklen_t	clen = sizeof(cred);

	memset(p, 0, sizeof(*p));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || clen != sizeof(cred))
		return BC_EINVAL;
	p->uid = cred.uid;
	p->gid = cred.gid;
	p->pid = cred.pid > 0 ? cred.pid : 0;
	read_process(p);
	return BC_OK;
}

void
bcd_peer_refresh(bcd_peer *p)
{
	read_process(p);
}

void
bcd_peer_describe(const bcd_peer *p, char *buf, size_t len)
{
	if (p->pid == 0)
		snprintf(buf, len, "pid unknown");
	else
		snprintf(buf, len, "pid %ld (exe %s%s%s, unit %s)", (long) p->pid,
				 p->exe[0] ? p->exe : "?",
				 p->mnt_known && !p->mnt_same ? " in another mount namespace" : "",
				 p->userns_known && !p->userns_same ? " in another user namespace" : "",
				 p->unit[0] ? p->unit : "none");
}

json_t *
bcd_peer_json(const bcd_peer *p)
{
	json_t	   *o;

	if (p->pid == 0 || (o = json_pack("{s:I}", "pid", (json_int_t) p->pid)) == NULL)
		return NULL;
	if (p->exe[0] != '\0')
		json_object_set_new(o, "exe", json_string(p->exe));
	if (p->unit[0] != '\0')
		json_object_set_new(o, "unit", json_string(p->unit));
	if (p->cgroup[0] != '\0')
		json_object_set_new(o, "cgroup", json_string(p->cgroup));
	return o;
}
