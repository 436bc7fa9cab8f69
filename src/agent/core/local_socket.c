/*
 * local_socket.c: bcd's local socket, hardened the way the e-stop admin
 * socket had to be, and its peer check.
 *
 * bcd run first checks the runtime directory (delivery.c,
 * bcd_runtime_dir_open): ours, writable by nobody else, a symbolic link only
 * when the link is ours; else it refuses to start.
 *
 * Under socket activation (sd_listen_fds() passes exactly one listening
 * AF_UNIX stream socket) the unit made the socket (bcd.socket: DirectoryMode
 * 0700, SocketMode 0600) and bcd creates nothing.  Started on its own, bcd
 * makes the same guarantees in code:
 *
 *   1. the socket lives in a directory of its own, created 0700, and
 *      refused (nothing bound) when it is a symbolic link or another user
 *      owns it; bcd's own default directories ($XDG_RUNTIME_DIR/bcd,
 *      STATE-DIR/run) are set back to 0700 on every start, but the parent
 *      of --socket PATH is changed only when bcd creates it (it may be
 *      anyone's directory, a home directory say): an existing one is used
 *      as it is when writable by neither its group nor others, else refused;
 *   2. the socket is bound under umask 0177 and chmod()ed 0600 after bind,
 *      whatever the umask was;
 *   3. the default path is never world-writable: $XDG_RUNTIME_DIR/bcd/
 *      bcd.sock, or STATE-DIR/run/bcd.sock (inside the 0700 state
 *      directory) when XDG_RUNTIME_DIR is unset; never /tmp;
 *   4. a socket file already at the path is removed only when connecting
 *      to it fails with ECONNREFUSED (nobody listens); any other outcome
 *      (someone answers, the backlog is full, a permission error, a file
 *      that is not a socket) means someone may be there, and bcd refuses to
 *      start rather than hand the name to whoever binds next.
 *
 * The directory is made and opened relative to its parent's descriptor
 * (the runtime directory's, when that is the parent), and the socket bound,
 * cleared and removed through the directory's own descriptor.
 *
 * Every connection is then checked with SO_PEERCRED (sessions.c): the
 * caller's uid must be bcd's own.  The clients check the other way round
 * (bcd_socket_connect): the socket's directory must be theirs and writable
 * by nobody else, the listener of their own uid, before they send anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "bc_common.h"
#include "core/local_socket.h"
#include "core/log.h"

/* Name of the socket inside its directory, and of the default directories. */
#define SOCKET_NAME "bcd.sock"

/* 1 when path fits in sockaddr_un.sun_path (with its NUL). */
static int
fits_sun_path(const char *path)
{
	struct sockaddr_un sa;

	return strlen(path) < sizeof(sa.sun_path);
}

/* "a/b/c", malloc()ed, or NULL. */
static char *
join3(const char *a, const char *b, const char *c)
{
	size_t		len = strlen(a) + strlen(b) + strlen(c) + 3;
	char	   *p = malloc(len);

	if (p != NULL)
		snprintf(p, len, "%s/%s/%s", a, b, c);
	return p;
}

/* $XDG_RUNTIME_DIR when it is set to an absolute path, else NULL. */
const char *
bcd_xdg_runtime_dir(void)
{
	const char *x = getenv("XDG_RUNTIME_DIR");

	return x != NULL && x[0] == '/' ? x : NULL;
}

/* Check and copy a socket path into *out; BC_OK or BC_EINVAL with err. */
static int
take_path(char *path, char **out, char *err, size_t errlen)
{
	const char *slash = path != NULL ? strrchr(path, '/') : NULL;

	*out = NULL;
	if (path == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	if (path[0] != '/' || slash == path || slash[1] == '\0')
		snprintf(err, errlen, "the socket path %s must be absolute and name a file "
				 "inside a directory other than /", path);
	else if (!fits_sun_path(path))
		snprintf(err, errlen, "the socket path %s is too long for a unix socket", path);
	else
	{
		*out = path;
		return BC_OK;
	}
	free(path);
	return BC_EINVAL;
}

/*
 * The daemon's socket path: option (--socket), else
 * $XDG_RUNTIME_DIR/bcd/bcd.sock, else STATE-DIR/run/bcd.sock.
 */
int
bcd_socket_daemon_path(const char *option, const char *state_dir, char **out,
					   char *err, size_t errlen)
{
	char	   *path;

	if (option != NULL)
		path = strdup(option);
	else if (bcd_xdg_runtime_dir() != NULL)
		path = join3(bcd_xdg_runtime_dir(), "bcd", SOCKET_NAME);
	else if (state_dir[0] == '/')
		path = join3(state_dir, "run", SOCKET_NAME);
	else
	{
		char		cwd[4096];

		if (getcwd(cwd, sizeof(cwd)) == NULL)
		{
			snprintf(err, errlen, "cannot name the socket: %s", strerror(errno));
			return BC_EINVAL;
		}
		path = malloc(strlen(cwd) + strlen(state_dir) + sizeof("//run/" SOCKET_NAME));
		if (path != NULL)
			sprintf(path, "%s/%s/run/%s", cwd, state_dir, SOCKET_NAME);
	}
	return take_path(path, out, err, errlen);
}

/* The clients' socket path: option, else $BCD_SOCKET, else $XDG_RUNTIME_DIR/bcd/bcd.sock. */
int
bcd_socket_client_path(const char *option, char **out, char *err, size_t errlen)
{
	const char *env = getenv("BCD_SOCKET");

	*out = NULL;
	if (option == NULL && env != NULL && env[0] != '\0')
		option = env;
	if (option != NULL)
		return take_path(strdup(option), out, err, errlen);
	if (bcd_xdg_runtime_dir() == NULL)
	{
		snprintf(err, errlen, "XDG_RUNTIME_DIR is unset: name the socket with --socket "
				 "or BCD_SOCKET");
		return BC_EINVAL;
	}
	return take_path(join3(bcd_xdg_runtime_dir(), "bcd", SOCKET_NAME), out, err, errlen);
}

/*
 * Open a directory that nobody but us can change: path may be a symbolic
 * link only when we own the link; the directory itself (fstat() of the
 * opened descriptor, so what was checked is what is used) must be ours and
 * writable by neither its group nor others.  what names it in messages.
 * BC_OK with *fd_out; BC_EVERIFY (not trustworthy) or BC_EINVAL (cannot
 * be opened: errno is kept) with err.
 */
int
bcd_open_trusted_dir(const char *path, const char *what, int *fd_out, char *err, size_t errlen)
{
	struct stat lst;
	struct stat st;
	int			fd;
	int			e;

	*fd_out = -1;
	if (lstat(path, &lst) != 0)
	{
		e = errno;
		snprintf(err, errlen, "cannot open %s %s: %s", what, path, strerror(e));
		errno = e;
		return BC_EINVAL;
	}
	if (S_ISLNK(lst.st_mode) && lst.st_uid != geteuid())
	{
		snprintf(err, errlen, "%s %s is a symbolic link owned by uid %ld, not by uid %ld (this "
				 "process); refusing to use it", what, path, (long) lst.st_uid, (long) geteuid());
		return BC_EVERIFY;
	}
	/* a link is followed only when lstat() saw one of ours; a swap meanwhile fails here */
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (S_ISLNK(lst.st_mode) ? 0 : O_NOFOLLOW));
	if (fd < 0)
	{
		e = errno;
		snprintf(err, errlen, "cannot open %s %s: %s", what, path, strerror(e));
		errno = e;
		return e == ELOOP || e == ENOTDIR ? BC_EVERIFY : BC_EINVAL;
	}
	if (fstat(fd, &st) != 0)
		snprintf(err, errlen, "cannot stat %s %s: %s", what, path, strerror(errno));
	else if (st.st_uid != geteuid())
	{
		snprintf(err, errlen, "%s %s is owned by uid %ld, not by uid %ld (this process); "
				 "refusing to use it", what, path, (long) st.st_uid, (long) geteuid());
		close(fd);
		return BC_EVERIFY;
	}
	else if ((st.st_mode & 022) != 0)
	{
		snprintf(err, errlen, "%s %s is writable by its group or others (mode %04o); refusing "
				 "to use it", what, path, (unsigned) (st.st_mode & 07777));
		close(fd);
		return BC_EVERIFY;
	}
	else
	{
		*fd_out = fd;
		return BC_OK;
	}
	close(fd);
	return BC_EINVAL;
}

/*
 * dirfd/name as a path that bind() and connect() resolve through the open
 * descriptor (/proc/self/fd/N/name), so nothing renamed after the checks can
 * redirect them; path itself when that does not fit or /proc is absent.
 */
static const char *
at_path(char *buf, size_t len, int dirfd, const char *name, const char *path)
{
	struct sockaddr_un sa;
	int			n;

	if (dirfd < 0)
		return path;
	n = snprintf(buf, len, "/proc/self/fd/%d", dirfd);
	if (n < 0 || (size_t) n >= len || access(buf, F_OK) != 0)
		return path;
	n = snprintf(buf, len, "/proc/self/fd/%d/%s", dirfd, name);
	if (n < 0 || (size_t) n >= len || (size_t) n >= sizeof(sa.sun_path))
		return path;
	return buf;
}

/*
 * Make dir the socket's own directory: created 0700 when missing; refused
 * when it is not a directory, is a symbolic link or another user owns it.
 * One bcd creates now, or one of its own defaults (managed), is set to 0700
 * (logged when it was anything else); any other existing one (the parent of
 * --socket) keeps its mode and is refused when its group or others may
 * write it.  It is created and opened relative to its parent, which is rtfd
 * when the parent is the runtime directory (opened and checked by the
 * caller); *dirfd_out stays open for the socket's life, *st_out is its fstat().
 */
static int
own_socket_dir(const char *dir, const char *runtime_dir, int rtfd, int managed, int *dirfd_out,
			   struct stat *st_out, char *err, size_t errlen)
{
	int			created;
	char	   *parent = strdup(dir);
	char	   *base;
	struct stat st;
	int			pfd = -1;
	int			fd = -1;
	int			rc = BC_EINVAL;

	*dirfd_out = -1;
	if (parent == NULL)
		return BC_ENOMEM;
	base = strrchr(parent, '/');
	*base++ = '\0';
	if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
	{
		snprintf(err, errlen, "the socket directory %s must not end in \".\" or \"..\"", dir);
		goto out;
	}
	if (rtfd >= 0 && runtime_dir != NULL && strcmp(parent, runtime_dir) == 0)
		pfd = rtfd;
	else if ((pfd = open(parent[0] != '\0' ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
	{
		snprintf(err, errlen, "cannot open %s: %s", parent[0] != '\0' ? parent : "/", strerror(errno));
		goto out;
	}
	created = mkdirat(pfd, base, 0700) == 0;
	if (!created && errno != EEXIST)
	{
		snprintf(err, errlen, "cannot create the socket directory %s: %s", dir, strerror(errno));
		goto out;
	}
	fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "the socket directory %s is not a directory (a symbolic link "
				 "is not accepted): %s", dir, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) != 0)
		snprintf(err, errlen, "cannot stat %s: %s", dir, strerror(errno));
	else if (st.st_uid != geteuid())
		snprintf(err, errlen, "the socket directory %s is owned by uid %ld, not by this bcd "
				 "(uid %ld); refusing to bind in it", dir, (long) st.st_uid, (long) geteuid());
	else if (!created && !managed && (st.st_mode & 022) != 0)
		snprintf(err, errlen, "the socket directory %s (the parent of --socket) is writable by "
				 "its group or others (mode %04o); bcd changes the mode only of a directory it "
				 "creates: name a socket in a directory of its own", dir,
				 (unsigned) (st.st_mode & 07777));
	else if ((created || managed) && (st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)
		snprintf(err, errlen, "cannot set the mode of %s to 0700: %s", dir, strerror(errno));
	else
	{
		if (!created && managed && (st.st_mode & 07777) != 0700)
			bcd_log("the socket directory %s had mode %04o; set it to 0700", dir,
					(unsigned) (st.st_mode & 07777));
		*st_out = st;
		*dirfd_out = fd;
		fd = -1;
		rc = BC_OK;
	}
out:
	if (fd >= 0)
		close(fd);
	if (pfd >= 0 && pfd != rtfd)
		close(pfd);
	free(parent);
	return rc;
}

/* Fill sa with path (which fits). */
static void
fill_addr(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, strlen(path) + 1);
}

/*
 * What is at path (dirfd/name) before we bind: nothing, or a stale socket
 * (connect refused), which is removed.  Anything else is refused, and left
 * alone.
 */
static int
clear_stale(int dirfd, const char *name, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	char		buf[sizeof(sa.sun_path) + 32];
	int			fd;
	int			e;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
	{
		if (errno == ENOENT)
			return BC_OK;
		snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
		return BC_EINVAL;
	}
	if (!S_ISSOCK(st.st_mode))
	{
		snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
		return BC_EINVAL;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return BC_EINVAL;
	}
	fill_addr(&sa, at_path(buf, sizeof(buf), dirfd, name, path));
	e = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0 ? 0 : errno;
	close(fd);
	if (e == ECONNREFUSED)
	{
		if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
		{
			snprintf(err, errlen, "cannot remove the stale socket %s: %s", path, strerror(errno));
			return BC_EINVAL;
		}
		bcd_log("removed the stale socket %s (nobody listens on it)", path);
		return BC_OK;
	}
	if (e == 0)
		snprintf(err, errlen, "another process listens on %s; refusing to start "
				 "(the socket was left in place)", path);
	else
		snprintf(err, errlen, "cannot tell whether %s is in use (%s); refusing to remove it",
				 path, strerror(e));
	return BC_EINVAL;
}

/* Take the one socket systemd passed: a listening AF_UNIX stream socket. */
static int
take_activated(bcd_listener *l, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t	len = sizeof(sa);
	struct stat st;
	int			fd = SD_LISTEN_FDS_START;
	int			flags;
	char	   *slash;

	if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
	{
		snprintf(err, errlen, "the socket passed by systemd (fd %d) is not a listening "
				 "unix stream socket", fd);
		return BC_EINVAL;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
		fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
	{
		snprintf(err, errlen, "cannot set up fd %d: %s", fd, strerror(errno));
		return BC_EINVAL;
	}
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *) &sa, &len) == 0 && sa.sun_path[0] == '/' &&
		memchr(sa.sun_path, '\0', sizeof(sa.sun_path)) != NULL)
	{
		bcd_log("listening on %s (socket activation)", sa.sun_path);
		/* its directory, which deliveries must not name */
		slash = strrchr(sa.sun_path, '/');
		*slash = '\0';
		if (stat(sa.sun_path[0] != '\0' ? sa.sun_path : "/", &st) == 0)
		{
			l->have_dir = 1;
			l->dir = (bcd_dir_id) {st.st_dev, st.st_ino};
		}
	}
	else
		bcd_log("listening on the socket systemd passed (socket activation)");
	l->fd = fd;
	return BC_OK;
}

/*
 * The listening socket: the one systemd passed (l->activated), or path made
 * by us with the guarantees in the file comment, its directory created and
 * opened relative to rtfd when that is its parent, the runtime directory
 * runtime_dir (l->dirfd and l->dev, l->ino identify what we bound, so that
 * we only ever remove our own).  managed: path is bcd's default, whose
 * directory is bcd's to set to 0700; else (--socket) an existing directory
 * keeps its mode.  BC_OK, or BC_EINVAL with err.
 */
int
bcd_socket_listen(const char *path, const char *runtime_dir, int rtfd, int managed,
				  bcd_listener *l, char *err, size_t errlen)
{
	int			n;

	memset(l, 0, sizeof(*l));
	l->fd = l->dirfd = -1;
	n = sd_listen_fds(1);
	if (n < 0)
	{
		snprintf(err, errlen, "sd_listen_fds: %s", strerror(-n));
		return BC_EINVAL;
	}
	if (n > 1)
	{
		snprintf(err, errlen, "systemd passed %d sockets; bcd takes exactly one", n);
		return BC_EINVAL;
	}
	if (n == 1)
	{
		l->activated = 1;
		return take_activated(l, err, errlen);
	}
	return bcd_socket_listen_at(path, runtime_dir, rtfd, managed, l, err, errlen);
}

/*
 * The same as bcd_socket_listen without socket activation: always bound
 * here, at path, its directory made or checked as for the hooks' socket
 * (the Workload API's socket, workload.c).
 */
int
bcd_socket_listen_at(const char *path, const char *runtime_dir, int rtfd, int managed,
					 bcd_listener *l, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	char		buf[sizeof(sa.sun_path) + 32];
	char	   *dir = NULL;
	const char *name;
	mode_t		old_mask;
	int			fd = -1;
	int			n;
	int			rc = BC_EINVAL;

	memset(l, 0, sizeof(*l));
	l->fd = l->dirfd = -1;
	dir = strdup(path);
	if (dir == NULL)
		return BC_ENOMEM;
	*strrchr(dir, '/') = '\0';
	name = strrchr(path, '/') + 1;
	if (own_socket_dir(dir, runtime_dir, rtfd, managed, &l->dirfd, &st, err, errlen) != BC_OK)
		goto out;
	l->have_dir = 1;
	l->dir = (bcd_dir_id) {st.st_dev, st.st_ino};
	if (clear_stale(l->dirfd, name, path, err, errlen) != BC_OK)
		goto out;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		snprintf(err, errlen, "socket: %s", strerror(errno));
		goto out;
	}
	fill_addr(&sa, at_path(buf, sizeof(buf), l->dirfd, name, path));
	old_mask = umask(0177);
	n = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
	umask(old_mask);
	if (n != 0)
	{
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(errno));
		goto out;
	}
	if (fchmodat(l->dirfd, name, 0600, 0) != 0 ||
		fstatat(l->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || listen(fd, SOMAXCONN) != 0)
	{
		snprintf(err, errlen, "cannot set up %s: %s", path, strerror(errno));
		(void) unlinkat(l->dirfd, name, 0);
		goto out;
	}
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	l->fd = fd;
	fd = -1;
	bcd_log("listening on %s", path);
	rc = BC_OK;
out:
	if (fd >= 0)
		close(fd);
	if (rc != BC_OK && l->dirfd >= 0)
	{
		close(l->dirfd);
		l->dirfd = -1;
	}
	free(dir);
	return rc;
}

/* Close the listener; remove the socket we bound at path, if it is still ours. */
void
bcd_socket_close(bcd_listener *l, const char *path)
{
	struct stat st;
	const char *name = path != NULL ? strrchr(path, '/') : NULL;

	if (l->fd >= 0)
		close(l->fd);
	if (!l->activated && l->dirfd >= 0 && name != NULL &&
		fstatat(l->dirfd, name + 1, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
		st.st_dev == l->dev && st.st_ino == l->ino)
		(void) unlinkat(l->dirfd, name + 1, 0);
	if (l->dirfd >= 0)
		close(l->dirfd);
	l->fd = l->dirfd = -1;
}

/* The uid of the process at the other end of the connected socket fd. */
int
bcd_socket_peer_uid(int fd, uid_t *uid)
{
	struct ucred cred;
	socklen_t	len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred))
		return BC_EINVAL;
	*uid = cred.uid;
	return BC_OK;
}

/*
 * A client connection to the daemon at path, made only when it can be
 * trusted: the socket's directory is ours and writable by nobody else
 * (bcd_open_trusted_dir), the connection is made through that descriptor,
 * and the process listening is of our own uid (SO_PEERCRED) before
 * anything is sent.  BCD_CONNECT_OK with *fd_out; BCD_CONNECT_NONE when
 * nothing can be reached, BCD_CONNECT_UNTRUSTED otherwise, with err.
 */
int
bcd_socket_connect(const char *path, int *fd_out, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	char		buf[sizeof(sa.sun_path) + 32];
	char	   *dir = strdup(path);
	const char *name = strrchr(path, '/') + 1;
	uid_t		uid = (uid_t) -1;
	int			dirfd = -1;
	int			fd = -1;
	int			rc = BCD_CONNECT_NONE;
	int			r;

	*fd_out = -1;
	if (dir == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BCD_CONNECT_NONE;
	}
	*strrchr(dir, '/') = '\0';
	r = bcd_open_trusted_dir(dir[0] != '\0' ? dir : "/", "the socket directory", &dirfd, err, errlen);
	if (r != BC_OK)
	{
		if (r == BC_EVERIFY)
			rc = BCD_CONNECT_UNTRUSTED;
		else
			snprintf(err, errlen, "cannot reach bcd at %s: %s", path, strerror(errno));
		goto out;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		snprintf(err, errlen, "socket: %s", strerror(errno));
		goto out;
	}
	fill_addr(&sa, at_path(buf, sizeof(buf), dirfd, name, path));
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
	{
		snprintf(err, errlen, "cannot reach bcd at %s: %s", path, strerror(errno));
		goto out;
	}
	if (bcd_socket_peer_uid(fd, &uid) != BC_OK || uid != geteuid())
	{
		snprintf(err, errlen, "the process listening on %s runs as uid %ld, not as uid %ld "
				 "(this process): it is not our bcd; nothing was sent to it", path,
				 (long) uid, (long) geteuid());
		rc = BCD_CONNECT_UNTRUSTED;
		goto out;
	}
	*fd_out = fd;
	fd = -1;
	rc = BCD_CONNECT_OK;
out:
	if (fd >= 0)
		close(fd);
	if (dirfd >= 0)
		close(dirfd);
	free(dir);
	return rc;
}
