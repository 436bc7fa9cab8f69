/* ratelimit.c: a token bucket per client address in a bounded LRU table. */
#include "ratelimit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

/* Indexes are 1-based; 0 is "none". */
struct rl_entry
{
	struct gw_addr addr;
	double		tokens;
	double		last;
	uint32_t	chain;			/* next entry in the same hash bucket */
	uint32_t	prev;			/* LRU neighbours: prev is more recently used */
	uint32_t	next;
};

struct gw_ratelimit
{
	double		rate;
	double		burst;
	uint32_t	capacity;
	uint32_t	used;
	uint32_t	nbuckets;
	uint32_t	seed;
	uint32_t	head;			/* most recently used */
	uint32_t	tail;			/* least recently used */
	uint32_t   *buckets;
	struct rl_entry *e;			/* e[0] unused */
};

/* A table of at most capacity buckets of burst tokens refilled at rate per second. */
struct gw_ratelimit *
gw_ratelimit_new(double rate, double burst, int capacity)
{
	struct gw_ratelimit *rl = calloc(1, sizeof(*rl));

	if (rl == NULL)
		goto fail;
	rl->rate = rate;
	rl->burst = burst;
	rl->capacity = (uint32_t) capacity;
	rl->nbuckets = 1;
	while (rl->nbuckets < rl->capacity)
		rl->nbuckets <<= 1;
	rl->buckets = calloc(rl->nbuckets, sizeof(*rl->buckets));
	rl->e = calloc((size_t) rl->capacity + 1, sizeof(*rl->e));
	if (rl->buckets == NULL || rl->e == NULL)
		goto fail;
	if (getrandom(&rl->seed, sizeof(rl->seed), 0) != (ssize_t) sizeof(rl->seed))
		rl->seed = 0x9e3779b9u;
	return rl;
fail:
	gw_ratelimit_free(rl);
	return NULL;
}

/* Free the table. */
void
gw_ratelimit_free(struct gw_ratelimit *rl)
{
	if (rl == NULL)
		return;
	free(rl->buckets);
	free(rl->e);
	free(rl);
}

/* Seeded FNV-1a over an address: its bucket index. */
static uint32_t
hash_addr(const struct gw_ratelimit *rl, const struct gw_addr *a)
{
	uint32_t	h = 2166136261u ^ rl->seed;
	size_t		n = a->family == AF_INET6 ? 16 : 4;

	h = (h ^ (uint32_t) a->family) * 16777619u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ a->b[i]) * 16777619u;
	return h & (rl->nbuckets - 1);
}

/* Whether two addresses are the same. */
static int
addr_eq(const struct gw_addr *x, const struct gw_addr *y)
{
	return x->family == y->family && memcmp(x->b, y->b, 16) == 0;
}

/* Take entry i out of the LRU list. */
static void
lru_unlink(struct gw_ratelimit *rl, uint32_t i)
{
	struct rl_entry *e = &rl->e[i];

	if (e->prev)
		rl->e[e->prev].next = e->next;
	else
		rl->head = e->next;
	if (e->next)
		rl->e[e->next].prev = e->prev;
	else
		rl->tail = e->prev;
	e->prev = e->next = 0;
}

/* Put entry i at the front of the LRU list. */
static void
lru_push_front(struct gw_ratelimit *rl, uint32_t i)
{
	rl->e[i].prev = 0;
	rl->e[i].next = rl->head;
	if (rl->head)
		rl->e[rl->head].prev = i;
	rl->head = i;
	if (rl->tail == 0)
		rl->tail = i;
}

/* Remove entry i from its hash chain. */
static void
chain_remove(struct gw_ratelimit *rl, uint32_t i)
{
	uint32_t   *link = &rl->buckets[hash_addr(rl, &rl->e[i].addr)];

	while (*link != 0 && *link != i)
		link = &rl->e[*link].chain;
	if (*link == i)
		*link = rl->e[i].chain;
	rl->e[i].chain = 0;
}

/* Find addr's entry, or make one (evicting the least recently used); its index. */
static uint32_t
lookup(struct gw_ratelimit *rl, const struct gw_addr *addr, double now)
{
	uint32_t	b = hash_addr(rl, addr);
	uint32_t	i;

	for (i = rl->buckets[b]; i != 0; i = rl->e[i].chain)
		if (addr_eq(&rl->e[i].addr, addr))
		{
			lru_unlink(rl, i);
			lru_push_front(rl, i);
			return i;
		}
	if (rl->used < rl->capacity)
		i = ++rl->used;
	else
	{
		i = rl->tail;
		lru_unlink(rl, i);
		chain_remove(rl, i);
	}
	memset(&rl->e[i], 0, sizeof(rl->e[i]));
	rl->e[i].addr = *addr;
	rl->e[i].tokens = rl->burst;
	rl->e[i].last = now;
	rl->e[i].chain = rl->buckets[b];
	rl->buckets[b] = i;
	lru_push_front(rl, i);
	return i;
}

/* Take one token for addr: 1 when allowed, 0 when limited (with *retry_after). */
int
gw_ratelimit_take(struct gw_ratelimit *rl, const struct gw_addr *addr,
				  double now, double *retry_after)
{
	struct rl_entry *e = &rl->e[lookup(rl, addr, now)];

	if (now > e->last)
	{
		e->tokens += (now - e->last) * rl->rate;
		if (e->tokens > rl->burst)
			e->tokens = rl->burst;
	}
	e->last = now;
	if (e->tokens >= 1.0)
	{
		e->tokens -= 1.0;
		*retry_after = 0;
		return 1;
	}
	*retry_after = (1.0 - e->tokens) / rl->rate;
	return 0;
}
