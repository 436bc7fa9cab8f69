/*
 * peer.c: the process at the other end of a local socket connection.
 *
 * SO_PEERCRED gives the uid (the peer check) and the pid the kernel saw at
 * connect().  For that pid, /proc gives the executable (readlink of
 * /proc/PID/exe, which names the file even when the process lies in argv)
 * and the cgroup (/proc/PID/cgroup, its "0::" line on cgroup v2), whose
 * last .service or .scope component is the systemd unit.  All of it is
 * read with bounded reads of files the kernel writes, never parsed beyond
 * finding one line.  What it is worth (docs/sessions.md, "Who asked"): the
 * uid is the kernel's and is enforced; the rest is a record, not a check: a
 * process of the same uid can exec the same binary, run in the same unit, or
 * exit so that its pid is reused before /proc is read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* Copy src into dst (len bytes), marking a cut with "...". */
static void
copy_cut(char *dst, size_t len, const char *src, size_t n)
{
	if (n < len)
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
}

void
bcd_peer_unit_of(const char *cgroup, char *unit, size_t len)
{
	const char *p = cgroup;
	const char *best = NULL;
	size_t		best_n = 0;

	unit[0] = '\0';
	while (*p != '\0')
	{
		const char *end = strchr(p, '/');
		size_t		n = end != NULL ? (size_t) (end - p) : strlen(p);

		if ((n > 8 && memcmp(p + n - 8, ".service", 8) == 0) ||
			(n > 6 && memcmp(p + n - 6, ".scope", 6) == 0))
		{
			best = p;
			best_n = n;
		}
		p += n;
		if (*p == '/')
			p++;
	}
	if (best != NULL)
		copy_cut(unit, len, best, best_n);
}

void
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

			copy_cut(out, len, line + 3, nul != NULL ? (size_t) (nul - line - 3) : ln - 3);
			return;
		}
		line += ln + 1;
	}
}

/* The cgroup v2 path of pid into out ("" when unknown). */
static void
read_cgroup(pid_t pid, char *out, size_t len)
{
	char		path[64];
	char		buf[4096];
	ssize_t		n;
	int			fd;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long) pid);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n > 0)
		bcd_peer_cgroup_of(buf, (size_t) n, out, len);
}

int
bcd_peer_read(int fd, bcd_peer *p)
{
	struct ucred cred;
	socklen_t	clen = sizeof(cred);
	char		path[64];
	char		exe[BCD_PEER_EXE_MAX + 1];
	ssize_t		n;

	memset(p, 0, sizeof(*p));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || clen != sizeof(cred))
		return BC_EINVAL;
	p->uid = cred.uid;
	p->pid = cred.pid > 0 ? cred.pid : 0;
	if (p->pid == 0)
		return BC_OK;
	snprintf(path, sizeof(path), "/proc/%ld/exe", (long) p->pid);
	n = readlink(path, exe, sizeof(exe));
	if (n > 0)
		copy_cut(p->exe, sizeof(p->exe), exe, (size_t) n);
	read_cgroup(p->pid, p->cgroup, sizeof(p->cgroup));
	bcd_peer_unit_of(p->cgroup, p->unit, sizeof(p->unit));
	return BC_OK;
}

void
bcd_peer_describe(const bcd_peer *p, char *buf, size_t len)
{
	if (p->pid == 0)
		snprintf(buf, len, "pid unknown");
	else
		snprintf(buf, len, "pid %ld (exe %s, unit %s)", (long) p->pid,
				 p->exe[0] ? p->exe : "?", p->unit[0] ? p->unit : "none");
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
