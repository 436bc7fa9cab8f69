/*
 * rules.h: --workload-rule 'SELECTORS=>session=S[,context=C][,federates=TD[+TD...]]'
 * (rules.c): which caller of the Workload API gets which session identity,
 * which federated trust domains it sees, and what it must hold to
 * (docs/agent.md, "The SPIFFE Workload API").
 */
#ifndef BCD_WL_RULES_H
#define BCD_WL_RULES_H

#include <stddef.h>
#include <sys/types.h>

#include "core/peer.h"

/* What a caller is, for the selectors. */
typedef struct bcd_wl_caller
{
	bcd_peer	peer;			/* uid, pid, exe, cgroup, unit */
	gid_t		gid;
} bcd_wl_caller;

/* Most trust domains one rule federates with, and the longest federates= set ("td+td...", NUL). */
#define BCD_WL_FEDERATES_MAX 8
#define BCD_WL_FEDERATES_LEN 1024

/* What a match asks of the caller (bcd_wl_rules_match's *bind). */
#define BCD_WL_RULE_BIND 1		/* bound to its connection: exe:, unit: or cgroup: (attest.c) */
#define BCD_WL_RULE_EXE 2		/* ... by an exe: selector: close-on-exec too */

typedef struct bcd_wl_rules bcd_wl_rules;

/*
 * Parse the rules for bcd's own user namespace (its unmapped ids read from
 * /proc): NULL with err (a bad rule, or two with the same selectors and
 * targets apart).
 */
bcd_wl_rules *bcd_wl_rules_parse(const char *const *rules, int n, char *err, size_t errlen);
/*
 * The same for a user namespace whose unmapped ids show as overflow_uid
 * and overflow_gid (ULONG_MAX: every id is mapped), which uid: and gid:
 * never match.
 */
bcd_wl_rules *bcd_wl_rules_parse_ns(const char *const *rules, int n, unsigned long overflow_uid,
									unsigned long overflow_gid, char *err, size_t errlen);
/*
 * The id a user namespace shows for the ids it does not map: map is the
 * start of its uid_map (or gid_map) text, NULL when unreadable (no user
 * namespaces: ULONG_MAX); overflow the text of the kernel's overflowuid
 * (or gid), NULL when unreadable (65534).  ULONG_MAX when every id is
 * mapped ("0 0 4294967295", alone).
 */
unsigned long bcd_wl_overflow_id(const char *map, const char *overflow);
void		bcd_wl_rules_free(bcd_wl_rules *r);
/*
 * A rule's target alone (--svid-files), "session=S[,context=C][,federates=TD[+TD...]]",
 * parsed as a rule's is: 0 with session and context (each BC_SELECTOR_MAX
 * + 1 bytes) and federates ("td+td..." sorted, "" for none;
 * BCD_WL_FEDERATES_LEN bytes), or -1 with err.
 */
int			bcd_wl_target_parse_fed(const char *t, char *session, char *context,
									char *federates, char *err, size_t errlen);
/*
 * The (session, context) of caller: 1 with them and *bind (BCD_WL_RULE_*:
 * what the least demanding matching rule asks), 0 when no rule matches
 * (err "" or, when the caller names an exe: rule's file without running
 * it as bcd sees it, why), -1 when rules naming different targets match
 * (ambiguous: why in err).
 */
int			bcd_wl_rules_match(const bcd_wl_rules *r, const bcd_wl_caller *caller,
							   const char **session, const char **context, int *bind,
							   char *err, size_t errlen);

/*
 * bcd_wl_rules_match, with *federates the rule's federated trust domains
 * ("td+td..." sorted, "" for none; valid while r is).
 */
int			bcd_wl_rules_match_fed(const bcd_wl_rules *r, const bcd_wl_caller *caller,
								   const char **session, const char **context,
								   const char **federates, int *bind, char *err, size_t errlen);
/* 1 when trust domain td (no scheme) is one of federates ("td+td..."). */
int			bcd_wl_federates_has(const char *federates, const char *td);
/* 0, or -1 with err when a rule federates with own_td (bcd's own trust domain). */
int			bcd_wl_rules_check_federates(const bcd_wl_rules *r, const char *own_td,
										 char *err, size_t errlen);

/*
 * 0 when no rule can ever match a caller of uid and gid (each names another
 * uid or gid): such a caller is known to get nothing before /proc is read.
 */
int			bcd_wl_rules_may_match_ids(const bcd_wl_rules *r, uid_t uid, gid_t gid);

/*
 * At start, for a socket of mode (other users may connect when it opens
 * group or other bits): log a warning for every rule that selects by exe:
 * without uid:, gid: or unit:.
 */
void		bcd_wl_rules_warn(const bcd_wl_rules *r, int mode);

/*
 * 1 when bcd's user namespace does not map every id: *uid and *gid are the
 * ids the kernel shows for the unmapped ones (never matched by uid:/gid:).
 */
int			bcd_wl_rules_unmapped(const bcd_wl_rules *r, unsigned long *uid, unsigned long *gid);

#endif							/* BCD_WL_RULES_H */
