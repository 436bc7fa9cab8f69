/*
 * delivery.c: the session credential is written by bcd itself into a
 * directory the caller names, so the key never passes through the caller's
 * process tree (its stdout, its environment, its logs).
 *
 * The directory must be an absolute path strictly under the runtime
 * directory ($XDG_RUNTIME_DIR of bcd, or /run/user/<uid>), written without
 * ".", ".." or empty components.  It is opened component by component from
 * the runtime directory with O_DIRECTORY | O_NOFOLLOW, so no symbolic link
 * is followed anywhere below the runtime directory, and every component must
 * be owned by the caller's uid (which SO_PEERCRED made sure is bcd's own)
 * and writable by nobody else; so must the runtime directory itself.  No
 * component may be bcd's own socket directory or state directory (same
 * device and inode): nothing is delivered into or under them, so a session
 * named "node" never lands on the node key.  The
 * files are then created relative to that descriptor: the key and the chain
 * (and the SSH user certificate when the credential carries one) each to a
 * temporary name with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600 (the SSH
 * certificate 0644, as ssh-keygen writes a -cert.pub), written and
 * fsync()ed; then the old .crt and the old .key-cert.pub are removed, the
 * key renamed over its final name, the SSH certificate renamed to its, the
 * chain renamed to its (the commit point), and the directory fsync()ed.  So
 * a .crt or a .key-cert.pub is only ever beside the .key it certifies, even
 * when bcd is killed (then a new .key may be left without its .crt, and a
 * temporary file may be left behind):
 *
 *   DIR/<session>.key, DIR/<session>.crt                    (no context)
 *   DIR/<session>@<context>.key, DIR/<session>@<context>.crt
 *   DIR/<session>[@<context>].key-cert.pub                  (SSH, docs/agent.md)
 *
 * '@' is not a selector character, so two selectors never share a name.
 * The .key is the session key (PKCS#8 PEM), the .crt its certificate and
 * then the node CA (PEM).  A hook that asks for it (bcd credential --crl)
 * also gets DIR/crl.pem, the node CA's CRL as bcd last verified it (PEM),
 * replaced atomically.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "bc_common.h"
#include "core/delivery.h"
#include "core/fileio.h"
#include "core/local_socket.h"
#include "producers/exec.h"

/* The runtime directory deliveries go under (malloc()ed, no trailing '/'). */
char *
bcd_runtime_dir(void)
{
	const char *x = bcd_xdg_runtime_dir();
	char		buf[64];
	char	   *dir;
	size_t		n;

	if (x != NULL)
		dir = strdup(x);
	else
	{
		snprintf(buf, sizeof(buf), "/run/user/%ld", (long) geteuid());
		dir = strdup(buf);
	}
	if (dir == NULL)
		return NULL;
	n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		dir[--n] = '\0';
	return dir;
}

/*
 * Open and check the runtime directory of bcd run (bcd_open_trusted_dir:
 * ours, writable by nobody else, a symbolic link only when it is ours).
 * $XDG_RUNTIME_DIR must pass; /run/user/<uid>, taken when it is unset, may
 * be missing (*fd is -1 then: every delivery is refused until it exists).
 * BC_OK, or BC_EINVAL with err: bcd run refuses to start.
 */
int
bcd_runtime_dir_open(const char *runtime_dir, int *fd, char *err, size_t errlen)
{
	int			from_env = bcd_xdg_runtime_dir() != NULL;
	char		why[768];
	int			rc;

	rc = bcd_open_trusted_dir(runtime_dir, from_env ? "the runtime directory (XDG_RUNTIME_DIR)" :
							  "the runtime directory", fd, why, sizeof(why));
	if (rc == BC_EINVAL && !from_env && errno == ENOENT)
		return BC_OK;
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "%s; refusing to start (the socket and the hooks' directories "
				 "live there)", why);
		return BC_EINVAL;
	}
	return BC_OK;
}

/*
 * Check an opened directory: ours, writable by nobody else and none of
 * bcd's own (own, n_own: its socket's and its state directory); BC_OK or err.
 */
static int
check_dir_fd(int fd, const char *what, const bcd_dir_id *own, int n_own, char *err, size_t errlen)
{
	struct stat st;
	int			i;

	if (fstat(fd, &st) != 0)
		snprintf(err, errlen, "cannot stat %s: %s", what, strerror(errno));
	else if (st.st_uid != geteuid())
		snprintf(err, errlen, "%s is owned by uid %ld, not by the caller (uid %ld)", what,
				 (long) st.st_uid, (long) geteuid());
	else if ((st.st_mode & 022) != 0)
		snprintf(err, errlen, "%s is writable by its group or others (mode %04o)", what,
				 (unsigned) (st.st_mode & 07777));
	else
	{
		for (i = 0; i < n_own; i++)
			if (st.st_dev == own[i].dev && st.st_ino == own[i].ino)
			{
				snprintf(err, errlen, "%s is bcd's own %s directory: no credential is "
						 "delivered into it or under it", what, i == 0 ? "socket" : "state");
				return BC_EINVAL;
			}
		return BC_OK;
	}
	return BC_EINVAL;
}

/*
 * Open the delivery directory path (see the file comment) into *dirfd;
 * *norm is the path as checked (malloc()ed, no trailing '/').  BC_OK, or
 * BC_EINVAL with a message in err that can be shown to the caller.
 */
int
bcd_delivery_open(const char *runtime_dir, const bcd_dir_id *own, int n_own, const char *path,
				  int *dirfd, char **norm, char *err, size_t errlen)
{
	size_t		rlen = strlen(runtime_dir);
	char	   *copy = NULL;
	char	   *comp;
	char	   *save = NULL;
	size_t		n;
	int			fd = -1;
	int			next;
	int			rc = BC_EINVAL;

	*dirfd = -1;
	*norm = NULL;
	if (path[0] != '/')
	{
		snprintf(err, errlen, "the directory must be an absolute path");
		return BC_EINVAL;
	}
	if (strlen(path) > BCD_DIR_MAX || (copy = strdup(path)) == NULL)
	{
		snprintf(err, errlen, "the directory path is too long");
		return BC_EINVAL;
	}
	n = strlen(copy);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = '\0';
	if (strncmp(copy, runtime_dir, rlen) != 0 || copy[rlen] != '/' || copy[rlen + 1] == '\0' ||
		copy[rlen + 1] == '/')
	{
		snprintf(err, errlen, "the directory must be under the runtime directory %s", runtime_dir);
		goto out;
	}
	fd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "cannot open the runtime directory %s: %s", runtime_dir,
				 strerror(errno));
		goto out;
	}
	if (check_dir_fd(fd, "the runtime directory", NULL, 0, err, errlen) != BC_OK)
		goto out;
	for (comp = strtok_r(copy + rlen + 1, "/", &save); comp != NULL;
		 comp = strtok_r(NULL, "/", &save))
	{
		if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0 ||
			(save != NULL && *save == '/'))
		{
			snprintf(err, errlen, "the directory path has an empty, \".\" or \"..\" component");
			goto out;
		}
		next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
		{
			snprintf(err, errlen, "cannot open %s under %s: %s%s", comp, runtime_dir,
					 strerror(errno), errno == ELOOP || errno == ENOTDIR ?
					 " (a symbolic link or not a directory)" : "");
			goto out;
		}
		close(fd);
		fd = next;
		if (check_dir_fd(fd, comp, own, n_own, err, errlen) != BC_OK)
			goto out;
	}
	/* strtok_r consumed copy: rebuild the checked path from the original */
	memcpy(copy, path, n);
	copy[n] = '\0';
	*dirfd = fd;
	*norm = copy;
	fd = -1;
	copy = NULL;
	rc = BC_OK;
out:
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}

/*
 * Write data (mode) to a new temporary name in dirfd for name, fsync()ed;
 * its name in tmp (tmplen bytes).
 */
static int
write_tmp(int dirfd, const char *name, const char *data, size_t len, mode_t mode, char *tmp,
		  size_t tmplen, char *err, size_t errlen)
{
	unsigned char rnd[8];
	int			fd;
	int			ok;

	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return BC_ECRYPTO;
	snprintf(tmp, tmplen, ".%s.tmp.%02x%02x%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1],
			 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
	{
		snprintf(err, errlen, "cannot create a file in the directory: %s", strerror(errno));
		tmp[0] = '\0';
		return BC_EINVAL;
	}
	ok = fchmod(fd, mode) == 0 && bcd_write_all(fd, data, len) == BC_OK && fsync(fd) == 0;
	if (close(fd) != 0)
		ok = 0;
	if (ok)
		return BC_OK;
	snprintf(err, errlen, "cannot write %s in the directory: %s", name, strerror(errno));
	(void) unlinkat(dirfd, tmp, 0);
	tmp[0] = '\0';
	return BC_EINVAL;
}

/* Rename dirfd/tmp (when tmp is not empty) to name; tmp emptied once renamed. */
static int
rename_in(int dirfd, char *tmp, const char *name, char *err, size_t errlen)
{
	if (tmp[0] == '\0')
		return BC_OK;
	if (renameat(dirfd, tmp, dirfd, name) != 0)
	{
		snprintf(err, errlen, "cannot write %s in the directory: %s", name, strerror(errno));
		return BC_EINVAL;
	}
	tmp[0] = '\0';
	return BC_OK;
}

/* Remove dirfd/name (gone already is fine). */
static int
remove_in(int dirfd, const char *name, char *err, size_t errlen)
{
	if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
	{
		snprintf(err, errlen, "cannot replace %s in the directory: %s", name, strerror(errno));
		return BC_EINVAL;
	}
	return BC_OK;
}

/*
 * Replace dirfd/key_name, dirfd/ssh_name and dirfd/cert_name with key,
 * ssh_line (NULL: none, the old one only removed) and chain so that a .crt
 * or a .key-cert.pub is never beside a .key it does not certify, whenever
 * bcd stops: all are written to temporary names first, then the old .crt
 * and the old .key-cert.pub are removed, the key renamed into place, the
 * SSH certificate renamed into place, the chain renamed into place (the
 * commit point).  A stop before the last leaves the new .key without a
 * .crt (and maybe without its .key-cert.pub); never a mismatched pair.
 */
static int
write_set(int dirfd, const char *key_name, const char *key, size_t key_len,
		  const char *ssh_name, const char *ssh_line, const char *cert_name, const char *chain,
		  size_t chain_len, char *err, size_t errlen)
{
	char		tmp_key[BC_SELECTOR_MAX * 2 + 64] = "";
	char		tmp_ssh[BC_SELECTOR_MAX * 2 + 64] = "";
	char		tmp_crt[BC_SELECTOR_MAX * 2 + 64] = "";
	int			rc;

	rc = write_tmp(dirfd, key_name, key, key_len, 0600, tmp_key, sizeof(tmp_key), err, errlen);
	if (rc == BC_OK && ssh_line != NULL)
		rc = write_tmp(dirfd, ssh_name, ssh_line, strlen(ssh_line), 0644, tmp_ssh,
					   sizeof(tmp_ssh), err, errlen);
	if (rc == BC_OK)
		rc = write_tmp(dirfd, cert_name, chain, chain_len, 0600, tmp_crt, sizeof(tmp_crt), err,
					   errlen);
	if (rc == BC_OK)
		rc = remove_in(dirfd, cert_name, err, errlen);
	if (rc == BC_OK)
		rc = remove_in(dirfd, ssh_name, err, errlen);
	if (rc == BC_OK)
		rc = rename_in(dirfd, tmp_key, key_name, err, errlen);
	if (rc == BC_OK)
		rc = rename_in(dirfd, tmp_ssh, ssh_name, err, errlen);
	if (rc == BC_OK)
		rc = rename_in(dirfd, tmp_crt, cert_name, err, errlen);
	if (tmp_key[0] != '\0')
		(void) unlinkat(dirfd, tmp_key, 0);
	if (tmp_ssh[0] != '\0')
		(void) unlinkat(dirfd, tmp_ssh, 0);
	if (tmp_crt[0] != '\0')
		(void) unlinkat(dirfd, tmp_crt, 0);
	return rc;
}

/*
 * Deliver job's key, SSH certificate (when it holds one) and chain into
 * dirfd (the directory dir, as checked); *key_path, *cert_path and
 * *ssh_path (NULL without an SSH certificate) are malloc()ed.  An old
 * .key-cert.pub is removed even when the new credential has none: it
 * certifies the old key.  With dirfd -1 nothing is written (the same
 * directory was written for this provisioning already): only the paths are
 * made.  BC_OK or BC_EINVAL with err.
 */
int
bcd_delivery_write(int dirfd, const char *dir, const bcd_job *job, char **key_path,
				   char **cert_path, char **ssh_path, char *err, size_t errlen)
{
	char		key_name[BC_SELECTOR_MAX * 2 + 8];
	char		cert_name[BC_SELECTOR_MAX * 2 + 8];
	char		ssh_name[BC_SELECTOR_MAX * 2 + 24];
	const char *at = job->context[0] != '\0' ? "@" : "";
	int			rc;

	*key_path = NULL;
	*cert_path = NULL;
	*ssh_path = NULL;
	snprintf(key_name, sizeof(key_name), "%s%s%s.key", job->session, at, job->context);
	snprintf(cert_name, sizeof(cert_name), "%s%s%s.crt", job->session, at, job->context);
	snprintf(ssh_name, sizeof(ssh_name), "%s%s%s" BCD_SSH_CERT_SUFFIX, job->session, at,
			 job->context);
	if (dirfd >= 0)
	{
		rc = write_set(dirfd, key_name, job->key_pem, job->key_len, ssh_name, job->ssh_cert,
					   cert_name, job->chain_pem, job->chain_len, err, errlen);
		if (rc != BC_OK)
			return rc;
		(void) fsync(dirfd);
	}
	*key_path = bcd_path_join(dir, key_name);
	*cert_path = bcd_path_join(dir, cert_name);
	if (job->ssh_cert != NULL)
		*ssh_path = bcd_path_join(dir, ssh_name);
	if (*key_path == NULL || *cert_path == NULL || (job->ssh_cert != NULL && *ssh_path == NULL))
	{
		free(*key_path);
		free(*cert_path);
		free(*ssh_path);
		*key_path = *cert_path = *ssh_path = NULL;
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	return BC_OK;
}

/*
 * Write data (len bytes, 0600) as dirfd/name, replacing it atomically (a
 * temporary name, fsync()ed, renamed, the directory fsync()ed): the CRL a
 * hook asked for (crl.pem).  BC_OK or BC_EINVAL with err.
 */
int
bcd_delivery_write_file(int dirfd, const char *name, const char *data, size_t len,
						char *err, size_t errlen)
{
	return bcd_delivery_write_file_mode(dirfd, name, data, len, 0600, err, errlen);
}

/*
 * The same with the file's mode: the new file is made O_CREAT | O_EXCL |
 * O_NOFOLLOW under a random name in dirfd (never an existing file or a
 * link), and renamed over name, which replaces whatever name was (a
 * symbolic link included) without following it.
 */
int
bcd_delivery_write_file_mode(int dirfd, const char *name, const char *data, size_t len,
							 mode_t mode, char *err, size_t errlen)
{
	char		tmp[BC_SELECTOR_MAX * 2 + 64] = "";
	int			rc = write_tmp(dirfd, name, data, len, mode, tmp, sizeof(tmp), err, errlen);

	if (rc != BC_OK)
		return rc;
	if (renameat(dirfd, tmp, dirfd, name) != 0)
	{
		snprintf(err, errlen, "cannot write %s in the directory: %s", name, strerror(errno));
		(void) unlinkat(dirfd, tmp, 0);
		return BC_EINVAL;
	}
	(void) fsync(dirfd);
	return BC_OK;
}

/* Open and check a directory bcd keeps files in (delivery.h). */
int
bcd_delivery_open_checked(const char *opt, const char *path, char *err, size_t errlen)
{
	int			pfd = bcd_exec_open_checked_dir(opt, path, err, errlen);
	int			fd;

	if (pfd < 0)
		return -1;
	fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		snprintf(err, errlen, "%s %s cannot be opened: %s", opt, path, strerror(errno));
	close(pfd);
	return fd;
}
