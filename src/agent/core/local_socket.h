/*
 * local_socket.h: bcd's local socket, hardened: its path, the listener of
 * bcd run, the peer check, and the clients' trusted connect.
 */
#ifndef BCD_LOCAL_SOCKET_H
#define BCD_LOCAL_SOCKET_H

#include <stddef.h>
#include <sys/types.h>

#include "core/fileio.h"

/* Bound of one answer line read by the clients (a status answer is the largest). */
#define BCD_SOCK_ANSWER_MAX (64 * 1024)

/* The listening socket of bcd run. */
typedef struct bcd_listener
{
	int			fd;				/* listening */
	int			activated;		/* passed by systemd: we made nothing */
	int			dirfd;			/* the socket's directory, opened and checked (-1: activated) */
	dev_t		dev;			/* the socket file we bound */
	ino_t		ino;
	int			have_dir;		/* dir is known */
	bcd_dir_id	dir;			/* the socket's directory */
} bcd_listener;

/* What bcd_socket_connect found. */
#define BCD_CONNECT_OK 0
#define BCD_CONNECT_NONE 1		/* nothing to reach: no-daemon */
#define BCD_CONNECT_UNTRUSTED 2	/* a directory or a listener that is not ours */

const char *bcd_xdg_runtime_dir(void);
int			bcd_socket_daemon_path(const char *option, const char *state_dir,
								   char **out, char *err, size_t errlen);
int			bcd_socket_client_path(const char *option, char **out, char *err, size_t errlen);
int			bcd_open_trusted_dir(const char *path, const char *what, int *fd_out,
								 char *err, size_t errlen);
int			bcd_socket_listen(const char *path, const char *runtime_dir, int rtfd,
							  int managed, bcd_listener *l, char *err, size_t errlen);
int			bcd_socket_listen_at(const char *path, const char *runtime_dir, int rtfd,
								 int managed, bcd_listener *l, char *err, size_t errlen);
void		bcd_socket_close(bcd_listener *l, const char *path);
int			bcd_socket_peer_uid(int fd, uid_t *uid);
int			bcd_socket_connect(const char *path, int *fd_out, char *err, size_t errlen);

#endif							/* BCD_LOCAL_SOCKET_H */
