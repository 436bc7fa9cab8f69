/*
 * node_credential.c: the node credential published to the provisioner's
 * threads and clients (node_credential.h): one mutex, one snapshot, the key referenced.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bc_common.h"
#include "core/node_credential.h"
#include "core/store.h"

/* Where the node credential is published. */
struct bcd_published_node
{
	pthread_mutex_t lock;
	pthread_cond_t changed;		/* broadcast by every publish and end of a renewal */
	int			renewing;		/* the main thread is renewing the credential */
	bcd_node_snapshot node;		/* its key referenced */
};

/* An empty place to publish in, or NULL. */
bcd_published_node *
bcd_node_new(void)
{
	bcd_published_node *p = calloc(1, sizeof(*p));

	if (p != NULL)
	{
		pthread_mutex_init(&p->lock, NULL);
		pthread_cond_init(&p->changed, NULL);
	}
	return p;
}

/* Release it (no thread may use it any more). */
void
bcd_node_free(bcd_published_node *p)
{
	if (p == NULL)
		return;
	bcd_node_key_free(p->node.key);
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Publish cred as the node credential (NULL: none). */
void
bcd_node_publish(bcd_published_node *p, const bcd_credential *cred)
{
	pthread_mutex_lock(&p->lock);
	bcd_node_key_free(p->node.key);
	p->node.key = NULL;
	p->node.present = 0;
	if (cred != NULL && cred->key != NULL && EVP_PKEY_up_ref(cred->key) == 1)
	{
		p->node.key = cred->key;
		p->node.present = 1;
		snprintf(p->node.serial, sizeof(p->node.serial), "%s", cred->serial);
		snprintf(p->node.spiffe_id, sizeof(p->node.spiffe_id), "%s", cred->spiffe_id);
		snprintf(p->node.not_after_text, sizeof(p->node.not_after_text), "%s",
				 cred->not_after_text);
		p->node.not_after = cred->not_after;
	}
	p->node.generation++;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
}

/* The main thread starts (on 1) or ends (on 0) a renewal of the credential. */
void
bcd_node_renewing(bcd_published_node *p, int on)
{
	pthread_mutex_lock(&p->lock);
	p->renewing = on;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
}

/*
 * While a renewal is under way and the credential is still that of
 * generation, wait (at most timeout seconds) for it to be published: a
 * session refused because the service has just renewed (revoked) the
 * certificate it was asked with is asked again with the new one.  1 when
 * the generation changed.
 */
int
bcd_node_wait_renewal(bcd_published_node *p, unsigned long generation, double timeout)
{
	struct timespec deadline;
	int			changed;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += (time_t) timeout;
	deadline.tv_nsec += (long) ((timeout - (double) (time_t) timeout) * 1e9);
	if (deadline.tv_nsec >= 1000000000L)
	{
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&p->lock);
	while (p->renewing && p->node.generation == generation &&
		   pthread_cond_timedwait(&p->changed, &p->lock, &deadline) == 0)
		;
	changed = p->node.generation != generation;
	pthread_mutex_unlock(&p->lock);
	return changed;
}

/* A copy of the published node credential (its key referenced); release with bcd_node_release. */
void
bcd_node_take(bcd_published_node *p, bcd_node_snapshot *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->node;
	if (out->key != NULL && EVP_PKEY_up_ref(out->key) != 1)
	{
		out->key = NULL;
		out->present = 0;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Release a snapshot. */
void
bcd_node_release(bcd_node_snapshot *n)
{
	bcd_node_key_free(n->key);
	n->key = NULL;
}

/* 1 when the snapshot holds a node credential that has not expired. */
int
bcd_node_usable(const bcd_node_snapshot *n)
{
	return n->present && (int64_t) time(NULL) < n->not_after;
}
