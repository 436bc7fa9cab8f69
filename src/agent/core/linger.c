/*
 * linger.c: is lingering enabled for bcd's user (linger.h).  logind's own
 * record is read, as loginctl's "Linger" property is: the file
 * /var/lib/systemd/linger/<user name>, made by loginctl enable-linger and
 * removed by disable-linger.  Read-only, so it works under bcd.service's
 * ProtectSystem=strict.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/linger.h"

int
bcd_linger_enabled(char *user, size_t userlen, char *path, size_t pathlen)
{
	struct passwd pw;
	struct passwd *res = NULL;
	char		buf[4096];
	struct stat st;

	snprintf(user, userlen, "uid %lu", (unsigned long) getuid());
	snprintf(path, pathlen, "%s/?", BCD_LINGER_DIR);
	if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
		pw.pw_name == NULL || pw.pw_name[0] == '\0' || strchr(pw.pw_name, '/') != NULL)
		return -1;
	snprintf(user, userlen, "%s", pw.pw_name);
	snprintf(path, pathlen, "%s/%s", BCD_LINGER_DIR, pw.pw_name);
	if (lstat(path, &st) == 0)
		return 1;
	return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
}
