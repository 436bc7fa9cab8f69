/*
 * delivery.h: the runtime directory, and the delivery of a session
 * credential into the directory a caller names.
 */
#ifndef BCD_DELIVERY_H
#define BCD_DELIVERY_H

#include <stddef.h>

#include "core/fileio.h"
#include "core/job.h"

/* Longest delivery directory path. */
#define BCD_DIR_MAX 1024

/* What the SSH user certificate's name adds to the session's (ssh -i S.key reads S.key-cert.pub). */
#define BCD_SSH_CERT_SUFFIX ".key-cert.pub"

char	   *bcd_runtime_dir(void);
int			bcd_runtime_dir_open(const char *runtime_dir, int *fd, char *err, size_t errlen);
int			bcd_delivery_open(const char *runtime_dir, const bcd_dir_id *own, int n_own,
							  const char *path, int *dirfd, char **norm, char *err, size_t errlen);
int			bcd_delivery_write(int dirfd, const char *dir, const bcd_job *job,
							   char **key_path, char **cert_path, char **ssh_path, char *err,
							   size_t errlen);
int			bcd_delivery_write_file(int dirfd, const char *name, const char *data, size_t len,
									char *err, size_t errlen);
int			bcd_delivery_write_file_mode(int dirfd, const char *name, const char *data,
										 size_t len, mode_t mode, char *err, size_t errlen);
/*
 * A directory bcd keeps files in (--svid-files DIR, --ssh-cert-dir DIR, the
 * directory of --ssh-krl FILE), walked from / as --producer's path is
 * (bcd_exec_open_checked_dir: owned by bcd's uid, it and every directory
 * above it writable by root or bcd's uid only), then opened for reading and
 * writing relative to that descriptor: its descriptor, or -1 with err
 * naming opt.
 */
int			bcd_delivery_open_checked(const char *opt, const char *path, char *err,
									  size_t errlen);

/* The name of the CRL a hook asks for (bcd credential --crl), in its directory. */
#define BCD_CRL_FILE "crl.pem"

#endif							/* BCD_DELIVERY_H */
