/*
 * daemon.h: what the files of `bcd run` share: pacing (signals, sleeps,
 * jitter, backoff), the HTTPS client, the credential store, the join loop
 * and renewal.
 */
#ifndef BCD_DAEMON_H
#define BCD_DAEMON_H

#include <stdint.h>

#include "bcd.h"

/* Bound of a response body read from the gateway. */
#define BCD_HTTP_BODY_MAX (256 * 1024)

/* What the command line of bcd run / bcd renew asked for. */
typedef struct bcd_run_opts
{
	const char *gateway;		/* https://host:port */
	const char *gateway_ca;		/* PEM file pinned for TLS */
	const char *service_keys;
	const char *state_dir;
	const char *token;
	const char *token_file;
	const char *role;
	const char *attestor;
	const char *claims;
	const char *hostname;
	long		max_retry_after;	/* seconds, clamp of every wait we are told */
	double		renew_at;		/* fraction of the lifetime */
	int			once;
	int			renew_now;
	int			renew_cmd;		/* invoked as `bcd renew` */
	/* the local socket (sessions.c), bcd run without --once only */
	const char *socket;			/* --socket PATH, or NULL for the default */
	const char *metrics_file;	/* --metrics-file PATH, or NULL */
	long		max_provisioning;
	long		max_queue;
} bcd_run_opts;

/* pace.c */
void		bcd_signals_block(void);
int			bcd_stop_requested(void);
void		bcd_stop_now(void);
int			bcd_sleep(double seconds);
double		bcd_jitter(double seconds, double fraction);

/* Exponential backoff: 1 s doubling to 60 s, +-10% jitter, Retry-After honoured. */
typedef struct bcd_backoff
{
	double		next;
} bcd_backoff;
void		bcd_backoff_reset(bcd_backoff *b);
double		bcd_backoff_next(bcd_backoff *b, long retry_after, long max_retry_after);

/* http.c */
typedef struct bcd_http bcd_http;

/* One HTTP answer: status, body (NUL-terminated, malloc()ed), Retry-After. */
typedef struct bcd_http_reply
{
	long		status;
	char	   *body;
	size_t		len;
	long		retry_after;	/* seconds, -1 when absent */
} bcd_http_reply;

bcd_http   *bcd_http_new(const char *base_url, const char *ca_file,
						 char *err, size_t errlen);
void		bcd_http_free(bcd_http *h);
bcd_rc		bcd_http_exchange(bcd_http *h, const char *path, const char *body,
							  bcd_http_reply *reply, char *err, size_t errlen);
void		bcd_http_reply_free(bcd_http_reply *reply);
void		bcd_http_describe(const bcd_http_reply *reply, char *buf, size_t len);

/* store.c: the credential store in the state directory */
typedef struct bcd_credential
{
	EVP_PKEY   *key;			/* node.key */
	X509	   *leaf;			/* first certificate of node-chain.pem */
	char	   *spiffe_id;
	char		serial[41];
	char		not_after_text[64];
	int64_t		not_before;		/* unix seconds */
	int64_t		not_after;
	int64_t		obtained;		/* when we got it: now, or node-chain.pem's mtime */
} bcd_credential;

int			bcd_store_open(const char *dir, int *lock_fd, char *err, size_t errlen);
int			bcd_store_load(const char *dir, const bcd_service_keys *keys,
						   bcd_credential *cred, char *err, size_t errlen);
int			bcd_store_commit(const char *dir, EVP_PKEY *key, const char *chain_pem,
							 size_t chain_len, char *err, size_t errlen);
int			bcd_credential_fill(bcd_credential *cred, EVP_PKEY *key, X509 *leaf);
void		bcd_credential_free(bcd_credential *cred);
int			bcd_key_pem(EVP_PKEY *key, char **out, size_t *len);
char	   *bcd_store_work_dir(const char *dir, const char *name);
void		bcd_store_forget_work(const char *dir, const char *name);

/* The socket server of bcd run (sessions.h). */
struct bcd_server;

/* The daemon's state shared by the join loop and renewal. */
typedef struct bcd_agent
{
	const bcd_run_opts *opts;
	bcd_service_keys keys;
	bcd_http   *http;
	bcd_backoff backoff;
	struct bcd_server *server;	/* NULL with --once and for bcd renew */
} bcd_agent;

/* join_loop.c */
bcd_rc		bcd_join_loop(bcd_agent *a, bcd_credential *cred);

/* renew.c */
bcd_rc		bcd_renew(bcd_agent *a, const bcd_credential *cur, bcd_credential *next,
					  long *retry_after);
int			bcd_proof_request(EVP_PKEY *node_key, const char *serial, const char *purpose,
							  json_t *extra, const unsigned char *csr, size_t csr_len,
							  char **body);

/* Log one line on stderr: "bcd: " and the message (never keys or tokens). */
void		bcd_log(const char *fmt,...) __attribute__((format(printf, 1, 2)));

#endif							/* BCD_DAEMON_H */
