/*
 * body_budget.c: the global budget of large request bodies in flight; see
 * body_budget.h.
 */
#include "body_budget.h"

/* Cover req_bytes with a reservation; see body_budget.h. */
int
gw_body_budget_take(size_t budget, size_t *used, size_t *reserved, size_t req_bytes)
{
	size_t		need = req_bytes > GW_BODY_FREE ? req_bytes - GW_BODY_FREE : 0;
	size_t		more;

	if (need <= *reserved)
		return 0;
	more = need - *reserved;
	if (*used > budget || more > budget - *used)
		return -1;
	*used += more;
	*reserved += more;
	return 0;
}

/* Give a reservation back; see body_budget.h. */
void
gw_body_budget_release(size_t *used, size_t *reserved)
{
	*used = *reserved <= *used ? *used - *reserved : 0;
	*reserved = 0;
}
