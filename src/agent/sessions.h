/*
 * sessions.h: what the files of bcd's local socket share: the hardened
 * socket (local_socket.c), the server that answers hooks on it and
 * coalesces their provisioning (sessions.c: its I/O thread; server.c: its
 * life, its workers, the published node credential), one provisioning
 * through POST /v1/session (provision.c), the delivery into the caller's
 * directory (deliver.c), the published numbers (status.c) and the hook clients
 * (hook.c).  docs/sessions.md, "The host side", describes all of it.
 */
#ifndef BCD_SESSIONS_H
#define BCD_SESSIONS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"

/* Bound of one answer line read by the clients (a status answer is the largest). */
#define BCD_SOCK_ANSWER_MAX (64 * 1024)
/* Longest delivery directory path. */
#define BCD_DIR_MAX 1024

/* The answer codes of the socket protocol (docs/sessions.md lists them). */
typedef enum bcd_code
{
	BCD_CODE_OK = 0,
	BCD_CODE_NO_NODE_CREDENTIAL,
	BCD_CODE_BUSY,
	BCD_CODE_REFUSED,
	BCD_CODE_UNAVAILABLE,
	BCD_CODE_BAD_REQUEST,
	BCD_CODE_BAD_DIR,
	BCD_CODE_FORBIDDEN,
	BCD_CODE_FAILED,
	BCD_CODE_COUNT
} bcd_code;

/* How one provisioning (one POST /v1/session) ended, for the metrics. */
typedef enum bcd_outcome
{
	BCD_OUTCOME_ISSUED = 0,
	BCD_OUTCOME_REFUSED,
	BCD_OUTCOME_UNAVAILABLE,
	BCD_OUTCOME_FAILED,
	BCD_OUTCOME_COUNT
} bcd_outcome;

const char *bcd_code_name(bcd_code code);
int			bcd_code_retryable(bcd_code code);
const char *bcd_outcome_name(bcd_outcome outcome);

/* The node credential as the socket server sees it (a snapshot under a lock). */
typedef struct bcd_node_snapshot
{
	int			present;
	EVP_PKEY   *key;			/* referenced; NULL when absent */
	char		serial[41];
	char		spiffe_id[512];
	char		not_after_text[64];
	int64_t		not_after;
	unsigned long generation;	/* bumped by every publish */
} bcd_node_snapshot;

/* One provisioning: a session and context, its waiting callers, its result. */
typedef struct bcd_job
{
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	struct bcd_conn *waiters;	/* callers waiting for it (the I/O thread's) */
	int			n_waiters;
	int			dispatched;		/* handed to a worker */
	struct bcd_job *next;		/* in the table of jobs */
	struct bcd_job *qnext;		/* in the I/O queue, the workers' queue or done list */
	/* the result, written by the worker that ran it */
	bcd_code	code;
	bcd_outcome outcome;
	char		message[512];
	char	   *key_pem;		/* secret: bc_free_secret */
	size_t		key_len;
	char	   *chain_pem;
	size_t		chain_len;
	char		not_after[64];
	char		serial[41];
	char		spiffe_id[512];
} bcd_job;

/* What the published numbers are made of (owned by the I/O thread). */
typedef struct bcd_counters
{
	long		waiting;		/* callers waiting for a credential: the queue depth */
	long		queued;			/* provisionings waiting for a worker */
	long		in_flight;		/* provisionings running */
	long		max_provisioning;
	long		max_queue;
	unsigned long answers[BCD_CODE_COUNT];
	unsigned long provisionings[BCD_OUTCOME_COUNT];
} bcd_counters;

/* A directory, by device and inode. */
typedef struct bcd_dir_id
{
	dev_t		dev;
	ino_t		ino;
} bcd_dir_id;

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

/* local_socket.c */
int			bcd_socket_daemon_path(const char *option, const char *state_dir,
								   char **out, char *err, size_t errlen);
int			bcd_socket_client_path(const char *option, char **out, char *err, size_t errlen);
int			bcd_open_trusted_dir(const char *path, const char *what, int *fd_out,
								 char *err, size_t errlen);
int			bcd_socket_listen(const char *path, const char *runtime_dir, int rtfd,
							  bcd_listener *l, char *err, size_t errlen);
void		bcd_socket_close(bcd_listener *l, const char *path);
int			bcd_socket_peer_uid(int fd, uid_t *uid);
int			bcd_socket_connect(const char *path, int *fd_out, char *err, size_t errlen);

/* deliver.c */
char	   *bcd_runtime_dir(void);
int			bcd_runtime_dir_open(const char *runtime_dir, int *fd, char *err, size_t errlen);
int			bcd_delivery_open(const char *runtime_dir, const bcd_dir_id *own, int n_own,
							  const char *path, int *dirfd, char **norm, char *err, size_t errlen);
int			bcd_delivery_write(int dirfd, const char *dir, const bcd_job *job,
							   char **key_path, char **cert_path, char *err, size_t errlen);
int			bcd_selector_valid(const char *s, int required);

/* provision.c */
void		bcd_provision(const bcd_service_keys *keys, bcd_http *http,
						  const bcd_node_snapshot *node, bcd_job *job);
void		bcd_job_clear_result(bcd_job *job);

/* status.c */
json_t	   *bcd_status_json(const bcd_counters *c, const bcd_node_snapshot *node);
char	   *bcd_metrics_text(const bcd_counters *c, const bcd_node_snapshot *node);
int			bcd_metrics_write(const char *path, const bcd_counters *c,
							  const bcd_node_snapshot *node);

/* sessions.c and server.c: the socket server of bcd run */
typedef struct bcd_server bcd_server;

/* Connections allowed beyond --max-queue (status requests, callers being read). */
#define BCD_EXTRA_CONNS 64

/* Where a connection is. */
typedef enum conn_state
{
	CONN_READING,				/* reading the request line */
	CONN_WAITING,				/* waiting for a provisioning */
	CONN_WRITING,				/* writing the answer, then closed (or drained) */
	CONN_DRAINING				/* answered: reading what the caller still sends, then closed */
} conn_state;

/* What bcd reads and discards after answering a caller that sent too much. */
#define BCD_SOCK_DRAIN_MAX (1024 * 1024)

/* One caller's connection (owned by the I/O thread). */
typedef struct bcd_conn
{
	int			fd;
	conn_state	state;
	double		deadline;		/* monotonic seconds, while reading or writing */
	char		in[BC_SOCK_REQUEST_MAX + 1];
	size_t		in_len;
	char	   *out;
	size_t		out_len;
	size_t		out_off;
	int			dirfd;			/* the delivery directory, while waiting */
	char	   *dir;
	dev_t		dir_dev;
	ino_t		dir_ino;
	int			delivered;		/* the credential is in dir */
	int			drain;			/* once answered, read the rest before closing */
	size_t		drained;		/* bytes read and discarded since */
	struct bcd_conn *next;		/* every connection */
	struct bcd_conn *wnext;		/* the waiters of one provisioning */
} bcd_conn;

/* The socket server of bcd run. */
struct bcd_server
{
	const bcd_service_keys *keys;
	char	   *socket_path;
	char	   *metrics_file;
	char	   *runtime_dir;
	bcd_listener sock;
	bcd_dir_id	own_dirs[2];	/* the socket's and the state directory: never a delivery's */
	int			n_own_dirs;
	int			wake[2];
	long		max_provisioning;
	long		max_queue;
	/* threads */
	pthread_t	io_thread;
	int			io_started;
	pthread_t  *workers;
	bcd_http  **https;
	long		n_https;
	long		n_workers;
	atomic_int	stopping;
	/* guarded by lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int			sync_ready;
	int			stop_workers;
	bcd_job    *ready_head;
	bcd_job    *ready_tail;
	bcd_job    *done;
	bcd_node_snapshot node;
	/* the I/O thread's */
	bcd_conn   *conns;
	long		n_conns;
	bcd_job    *jobs;
	bcd_job    *fifo_head;
	bcd_job    *fifo_tail;
	bcd_counters counters;
	int			metrics_dirty;
	double		metrics_next;
	unsigned long metrics_generation;
};


int			bcd_server_start(const bcd_run_opts *o, const bcd_service_keys *keys,
							 const bcd_credential *initial, bcd_server **out,
							 char *err, size_t errlen);
void		bcd_server_publish(bcd_server *s, const bcd_credential *cred);
void		bcd_server_stop(bcd_server *s);
void		bcd_wake_io(bcd_server *s);
void		bcd_node_take(bcd_server *s, bcd_node_snapshot *out);
void		bcd_node_release(bcd_node_snapshot *n);
int			bcd_node_usable(const bcd_node_snapshot *n);
void	   *bcd_io_main(void *arg);

#endif							/* BCD_SESSIONS_H */
