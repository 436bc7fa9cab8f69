/*
 * local_socket.c: bcd's local socket, hardened the way the e-stop admin
 * socket had to be, and its peer check.
 *
 * Under socket activation (sd_listen_fds() passes exactly one listening
 * AF_UNIX stream socket) the unit made the socket (bcd.socket: DirectoryMode
 * 0700, SocketMode 0600) and bcd creates nothing.  Started on its own, bcd
 * makes the same guarantees in code:
 *
 *   1. the socket lives in a directory of its own, created 0700, set back
 *      to 0700 on every start, and refused (nothing bound) when it is a
 *      symbolic link or another user owns it;
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
 * Every connection is then checked with SO_PEERCRED (sessions.c): the
 * caller's uid must be bcd's own.
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

#include "sessions.h"

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
static const char *
xdg_runtime_dir(void)
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
	else if (xdg_runtime_dir() != NULL)
		path = join3(xdg_runtime_dir(), "bcd", SOCKET_NAME);
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
	if (xdg_runtime_dir() == NULL)
	{
		snprintf(err, errlen, "XDG_RUNTIME_DIR is unset: name the socket with --socket "
				 "or BCD_SOCKET");
		return BC_EINVAL;
	}
	return take_path(join3(xdg_runtime_dir(), "bcd", SOCKET_NAME), out, err, errlen);
}

/*
 * Make dir the socket's own directory: created 0700 when missing; refused
 * when it is not a directory, is a symbolic link or another user owns it;
 * set back to 0700 (and logged) when its mode is anything else.
 */
static int
own_socket_dir(const char *dir, char *err, size_t errlen)
{
	struct stat st;
	int			fd;
	int			rc = BC_EINVAL;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
	{
		snprintf(err, errlen, "cannot create the socket directory %s: %s", dir, strerror(errno));
		return BC_EINVAL;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "the socket directory %s is not a directory (a symbolic link "
				 "is not accepted): %s", dir, strerror(errno));
		return BC_EINVAL;
	}
	if (fstat(fd, &st) != 0)
		snprintf(err, errlen, "cannot stat %s: %s", dir, strerror(errno));
	else if (st.st_uid != geteuid())
		snprintf(err, errlen, "the socket directory %s is owned by uid %ld, not by this bcd "
				 "(uid %ld); refusing to bind in it", dir, (long) st.st_uid, (long) geteuid());
	else if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)
		snprintf(err, errlen, "cannot set the mode of %s to 0700: %s", dir, strerror(errno));
	else
	{
		if ((st.st_mode & 07777) != 0700)
			bcd_log("the socket directory %s had mode %04o; set it to 0700", dir,
					(unsigned) (st.st_mode & 07777));
		rc = BC_OK;
	}
	close(fd);
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
 * What is at path before we bind: nothing, or a stale socket (connect
 * refused), which is removed.  Anything else is refused, and left alone.
 */
static int
clear_stale(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	int			fd;
	int			e;

	if (lstat(path, &st) != 0)
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
	fill_addr(&sa, path);
	e = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0 ? 0 : errno;
	close(fd);
	if (e == ECONNREFUSED)
	{
		if (unlink(path) != 0 && errno != ENOENT)
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
take_activated(int *fd_out, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t	len = sizeof(sa);
	int			fd = SD_LISTEN_FDS_START;
	int			flags;

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
	if (getsockname(fd, (struct sockaddr *) &sa, &len) == 0 && sa.sun_path[0] != '\0')
		bcd_log("listening on %.*s (socket activation)", (int) sizeof(sa.sun_path), sa.sun_path);
	else
		bcd_log("listening on the socket systemd passed (socket activation)");
	*fd_out = fd;
	return BC_OK;
}

/*
 * The listening socket: the one systemd passed (*activated = 1), or path
 * made by us with the guarantees in the file comment (*dev, *ino identify
 * it, so that we only ever remove our own).  BC_OK, or BC_EINVAL with err.
 */
int
bcd_socket_listen(const char *path, int *fd_out, int *activated, dev_t *dev,
				  ino_t *ino, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	char	   *dir = NULL;
	mode_t		old_mask;
	int			fd = -1;
	int			n;
	int			rc = BC_EINVAL;

	*fd_out = -1;
	*activated = 0;
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
		*activated = 1;
		return take_activated(fd_out, err, errlen);
	}
	dir = strdup(path);
	if (dir == NULL)
		return BC_ENOMEM;
	*strrchr(dir, '/') = '\0';
	if (own_socket_dir(dir, err, errlen) != BC_OK || clear_stale(path, err, errlen) != BC_OK)
		goto out;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		snprintf(err, errlen, "socket: %s", strerror(errno));
		goto out;
	}
	fill_addr(&sa, path);
	old_mask = umask(0177);
	n = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
	umask(old_mask);
	if (n != 0)
	{
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(errno));
		goto out;
	}
	if (chmod(path, 0600) != 0 || lstat(path, &st) != 0 || listen(fd, SOMAXCONN) != 0)
	{
		snprintf(err, errlen, "cannot set up %s: %s", path, strerror(errno));
		(void) unlink(path);
		goto out;
	}
	*dev = st.st_dev;
	*ino = st.st_ino;
	*fd_out = fd;
	fd = -1;
	bcd_log("listening on %s", path);
	rc = BC_OK;
out:
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* Remove the socket we bound at path, if it is still ours (dev, ino). */
void
bcd_socket_unlink(const char *path, dev_t dev, ino_t ino)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == dev && st.st_ino == ino)
		(void) unlink(path);
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

/* A client connection to the daemon at path, or -1 with err. */
int
bcd_socket_connect(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	int			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
	{
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	fill_addr(&sa, path);
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
	{
		snprintf(err, errlen, "cannot reach bcd at %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}
