/* db_pool.h: a bounded pool of non-blocking libpq connections on the event loop. */
#ifndef BC_GATEWAY_DB_POOL_H
#define BC_GATEWAY_DB_POOL_H

#include "config.h"

struct event_base;
struct gw_db_pool;

enum gw_db_status
{
	GW_DB_OK,					/* one row: value (column 0) and tag (column 1) */
	GW_DB_ERROR,				/* the server raised an error: sqlstate, message */
	GW_DB_UNAVAILABLE,			/* no connection, connection lost, queue wait over */
	GW_DB_TIMEOUT				/* the client-side statement guard fired */
};

struct gw_db_result
{
	enum gw_db_status status;
	const char *value;			/* GW_DB_OK: column 0 text, NULL when SQL NULL */
	size_t		value_len;
	const char *tag;			/* GW_DB_OK: column 1 text or NULL */
	const char *sqlstate;		/* GW_DB_ERROR: five characters, or NULL */
	const char *message;		/* GW_DB_ERROR: the primary message, or NULL */
	const char *reason;			/* a short reason for the logs, never from the server */
};

/* Called exactly once per accepted job; res and its strings live only during the call. */
typedef void (*gw_db_cb) (const struct gw_db_result *res, void *arg);

/* A pool of cfg->db_pool connections to cfg->db_conninfo; NULL on failure. */
struct gw_db_pool *gw_db_pool_new(struct event_base *base, const struct gw_config *cfg);

/* Close every connection; jobs still queued or running get GW_DB_UNAVAILABLE. */
void		gw_db_pool_free(struct gw_db_pool *pool);

/*
 * Run sql with one text parameter param (NUL-terminated, or NULL for none;
 * it must stay valid until cb runs).  sql must live as long as the pool: it
 * is prepared once per connection under a number kept with the pool (unless
 * --db-no-prepare).  0 when accepted: cb will be called
 * exactly once, possibly before this returns.  -1 when refused at once (the
 * queue is full): cb is not called and *why says why.
 */
int			gw_db_submit(struct gw_db_pool *pool, const char *sql, const char *param,
						 gw_db_cb cb, void *arg, const char **why);

/* Called for each notification on the channel given to gw_db_pool_listen. */
typedef void (*gw_db_notify_cb) (const char *channel, const char *extra, void *arg);

/* Subscribers of the pool's one channel at most. */
#define GW_DB_MAX_LISTENERS 8

/*
 * Run LISTEN channel on every connection right after it is made (before any
 * job runs on it) and call cb for every notification, whether it arrives on
 * an idle connection or during a statement.  Call before the first submit.
 * Several subscribers (up to GW_DB_MAX_LISTENERS) may share the one channel,
 * each called in turn; 0 when subscribed, -1 for another channel, too many
 * subscribers or out of memory.
 */
int			gw_db_pool_listen(struct gw_db_pool *pool, const char *channel,
							  gw_db_notify_cb cb, void *arg);

/*
 * The current listening period: 0 while no connection has LISTEN in force,
 * else a number that changes every time the pool goes from none listening
 * to one.  While it stays the same (and not 0), no notification was missed.
 */
unsigned long gw_db_pool_listen_period(const struct gw_db_pool *pool);

/* Connections running a statement. */
int			gw_db_pool_in_use(const struct gw_db_pool *pool);

/* Connections established (idle or busy). */
int			gw_db_pool_connected(const struct gw_db_pool *pool);

/* Append bc_gateway_db_primary{host,port} 1 per server connected to; 0 on success. */
struct evbuffer;
int			gw_db_pool_render_primary(const struct gw_db_pool *pool, struct evbuffer *buf);

#endif
