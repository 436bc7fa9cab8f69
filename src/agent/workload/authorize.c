/*
 * authorize.c: who a Workload API call's caller is, and what it may be
 * given (docs/security.md, "Workload attestation").  At the call, and
 * again before any secret goes to it, the caller is read again from /proc
 * (bcd_peer_refresh) and matched by the rules (rules.c); a rule with exe:,
 * unit: or cgroup: also asks that it still be the process that connected,
 * alone holding its end of the connection (attest.c).  These functions
 * decide and log the refusals (refusals.c: a rate-limited summary per
 * uid); the call's plumbing (call.c) answers and closes the connection.
 */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/* A refusal of caller cl: logged in full, or counted for the uid's summary (refusals.c). */
void
wl_log_refusal(bcd_workload *w, const bcd_wl_caller *cl, const char *what, const char *why)
{
	char		who[BCD_PEER_EXE_MAX + BCD_PEER_UNIT_MAX + 96];

	if (!bcd_wl_refusals_take(w->refusals, cl->peer.uid, bcd_now_s()))
		return;
	bcd_peer_describe(&cl->peer, who, sizeof(who));
	bcd_log("workload api: %s by uid %ld gid %ld, %s: no identity (%s)", what,
			(long) cl->peer.uid, (long) cl->gid, who, why);
}

/*
 * Is r's caller (now: as /proc shows it now) still the process that
 * connected, alone holding its end (attest.c), as its rule asks (r->bind)?
 * 0, or -1 with why.
 */
static int
bound(wl_call *r, const bcd_wl_caller *now, char *why, size_t len)
{
	wl_conn    *c = r->conn;

	if (!(r->bind & BCD_WL_RULE_BIND))
		return 0;
	if (!c->bind_ok)
	{
		snprintf(why, len, "the connecting process was gone at accept");
		return -1;
	}
	return bcd_wl_bind_check(&c->bind, &c->caller.peer, &now->peer,
							 (r->bind & BCD_WL_RULE_EXE) ? BCD_WL_BIND_CLOEXEC : 0, why, len);
}

/*
 * r's caller (as /proc shows it now) resolved to the identity its rule
 * names (r->id, r->bind), and bound to its connection when its rule asks
 * and the method answers with a secret: GRPC_STATUS_OK, or the status to
 * end the call with (*details its message; *drop: close the connection
 * too, its caller not the process that holds it alone), the refusal logged.
 */
grpc_status_code
wl_authorize_call(bcd_workload *w, wl_call *r, const char *method, const char **details,
				  int *drop)
{
	const char *session;
	const char *context;
	const char *federates = "";
	char		why[768];
	bcd_wl_caller now = r->conn->caller;
	int			bind = 0;
	int			m;

	*drop = 0;
	*details = "no identity issued";
	bcd_peer_refresh(&now.peer);
	m = bcd_wl_rules_match_fed(w->rules, &now, &session, &context, &federates, &bind, why,
							   sizeof(why));
	if (m <= 0)
	{
		wl_log_refusal(w, &now, method, m < 0 || why[0] != '\0' ? why : "no --workload-rule matches");
		return GRPC_STATUS_PERMISSION_DENIED;
	}
	r->bind = bind;
	r->federates = federates;	/* the federated trust domains whose bundles it is given */
	/* the calls that get a secret: bound now, and again before it is sent */
	if ((r->method->flags & WL_METHOD_SECRET) && bound(r, &now, why, sizeof(why)) != 0)
	{
		wl_log_refusal(w, &now, method, why);
		*drop = 1;
		return GRPC_STATUS_PERMISSION_DENIED;
	}
	r->id = wl_identity_get(w, session, context, &now.peer);
	if (r->id == NULL)
	{
		*details = "out of memory";
		return GRPC_STATUS_RESOURCE_EXHAUSTED;
	}
	return GRPC_STATUS_OK;
}

/*
 * Before a secret goes to r's caller: is it, as /proc shows it now, still
 * one a rule gives r's identity (it may have left its unit or cgroup since
 * the call began), and bound to its connection as that rule asks?  0 when
 * the secret may go; else -1 having logged why, with *drop set when the
 * caller is no longer the process that holds the connection alone.
 */
int
wl_authorize_secret(wl_call *r, int *drop)
{
	bcd_workload *w = r->conn->w;
	bcd_wl_caller now = r->conn->caller;
	const char *session = NULL;
	const char *context = NULL;
	char		why[768];
	int			bind = 0;
	int			m;

	*drop = 0;
	why[0] = '\0';
	bcd_peer_refresh(&now.peer);
	m = r->id == NULL ? 0 :
		bcd_wl_rules_match(w->rules, &now, &session, &context, &bind, why, sizeof(why));
	if (m <= 0 || strcmp(session, r->id->session) != 0 || strcmp(context, r->id->context) != 0)
	{
		if (m > 0)
			snprintf(why, sizeof(why), "a rule gives it another identity now (session %s), "
					 "not the one of its call (session %s)", session, r->id->session);
		else if (m == 0 && why[0] == '\0')
			snprintf(why, sizeof(why), "no --workload-rule matches it any more");
		wl_log_refusal(w, &now, r->method->name, why);
		return -1;
	}
	r->bind = bind;
	if (bound(r, &now, why, sizeof(why)) == 0)
		return 0;
	wl_log_refusal(w, &now, r->method->name, why);
	*drop = 1;
	return -1;
}

/*
 * The trust domains a holder of federates ("td+td...", NULL or "" for
 * none) may see, bcd's own first, at most max of them in out; how many.
 * The one place that says so: SDS (sds.c) serves from it for a call's
 * rule, files mode (files.c) writes from it for --svid-files' federates=.
 * After bcd's own, the federated domains federates names whose bundles bcd
 * holds (w->fed), each its own entry (never merged); valid while w->fed
 * is, under w->mu.
 */
int
wl_trust_domains_of(const bcd_workload *w, const char *federates, wl_trust_domain *out, int max)
{
	int			n = 0;

	if (max < 1)
		return 0;
	out[n].name = w->trust_domain;
	out[n].roots = w->bundle;
	out[n].roots_len = w->bundle_len;
	out[n].own = 1;
	n++;
	for (int i = 0; w->fed != NULL && i < w->fed->n && n < max; i++)
	{
		const bcd_trust_domain *d = &w->fed->d[i];

		if (federates == NULL || !bcd_wl_federates_has(federates, d->td))
			continue;
		out[n].name = d->td;
		out[n].roots = d->x509;
		out[n].roots_len = d->x509_len;
		out[n].own = 0;
		n++;
	}
	return n;
}

/* The trust domains r's caller may see: those of its rule's federates= (wl_trust_domains_of). */
int
wl_trust_domains(const bcd_workload *w, const wl_call *r, wl_trust_domain *out, int max)
{
	return wl_trust_domains_of(w, r->federates, out, max);
}
