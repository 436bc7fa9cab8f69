/*
 * fileio.c: bounded reads and atomic writes of the agent's files.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/fileio.h"

/* "dir/name", malloc()ed, or NULL. */
char *
bcd_path_join(const char *dir, const char *name)
{
	size_t		len = strlen(dir) + 1 + strlen(name) + 1;
	char	   *path = malloc(len);

	if (path != NULL)
		snprintf(path, len, "%s/%s", dir, name);
	return path;
}

/*
 * Read at most max bytes of the open fd into a malloc()ed, NUL-terminated
 * buffer (the fd is left open).  BC_ETOOBIG when the file is longer.
 */
static int
read_fd(int fd, size_t max, char **out, size_t *len)
{
	char	   *buf = malloc(max + 2);
	size_t		got = 0;
	int			rc = BC_EINVAL;

	if (buf == NULL)
		return BC_ENOMEM;
	for (;;)
	{
		ssize_t		n = read(fd, buf + got, max + 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto out;
		if (n == 0)
			break;
		got += (size_t) n;
		if (got > max)
		{
			rc = BC_ETOOBIG;
			goto out;
		}
	}
	buf[got] = '\0';
	*out = buf;
	*len = got;
	buf = NULL;
	rc = BC_OK;
out:
	if (buf != NULL)
		bc_free_secret(buf, max + 2);
	return rc;
}

/*
 * Read at most max bytes of path ("-" is standard input) into a malloc()ed,
 * NUL-terminated buffer.  BC_ETOOBIG when the file is longer.
 */
int
bcd_read_file(const char *path, size_t max, char **out, size_t *len)
{
	int			fd;
	int			rc;

	*out = NULL;
	*len = 0;
	fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return BC_EINVAL;
	rc = read_fd(fd, max, out, len);
	if (fd != STDIN_FILENO)
		close(fd);
	return rc;
}

/*
 * The same for name in the directory dirfd, a regular file opened
 * O_NOFOLLOW (a symbolic link there is refused): BC_OK, BC_ETOOBIG, or
 * BC_EINVAL with errno (ENOENT: there is none).
 */
int
bcd_read_file_at(int dirfd, const char *name, size_t max, char **out, size_t *len)
{
	struct stat st;
	int			fd;
	int			rc;

	*out = NULL;
	*len = 0;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return BC_EINVAL;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		close(fd);
		errno = EINVAL;
		return BC_EINVAL;
	}
	rc = read_fd(fd, max, out, len);
	close(fd);
	return rc;
}

/* Create directory path with mode 0700 when missing; it must be a directory. */
int
bcd_ensure_dir(const char *path)
{
	struct stat st;

	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return BC_EINVAL;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return BC_EINVAL;
	return BC_OK;
}

/* Write all of data to fd, retrying on EINTR: BC_OK or BC_EINVAL. */
int
bcd_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0)
	{
		ssize_t		n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return BC_EINVAL;
		p += n;
		len -= (size_t) n;
	}
	return BC_OK;
}

/*
 * Replace dir/name with data atomically: a temporary file in dir, written,
 * given mode, fsync()ed, renamed over the target, then the directory synced.
 */
int
bcd_write_file_atomic(const char *dir, const char *name, const void *data,
					  size_t len, mode_t mode)
{
	char	   *target = bcd_path_join(dir, name);
	char	   *tmp = NULL;
	size_t		tmp_len;
	int			fd = -1;
	int			dfd = -1;
	int			rc = BC_ENOMEM;

	if (target == NULL)
		goto out;
	tmp_len = strlen(target) + sizeof(".tmp.XXXXXX");
	tmp = malloc(tmp_len);
	if (tmp == NULL)
		goto out;
	snprintf(tmp, tmp_len, "%s.tmp.XXXXXX", target);
	rc = BC_EINVAL;
	fd = mkstemp(tmp);
	if (fd < 0)
	{
		free(tmp);
		tmp = NULL;
		goto out;
	}
	if (fchmod(fd, mode) != 0 || bcd_write_all(fd, data, len) != BC_OK ||
		fsync(fd) != 0)
		goto out;
	if (close(fd) != 0)
	{
		fd = -1;
		goto out;
	}
	fd = -1;
	if (rename(tmp, target) != 0)
		goto out;
	free(tmp);
	tmp = NULL;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		(void) fsync(dfd);
	rc = BC_OK;
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (tmp != NULL)
	{
		unlink(tmp);
		free(tmp);
	}
	free(target);
	return rc;
}
