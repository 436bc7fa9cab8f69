/*
 * rules.c: --workload-rule 'SELECTORS=>session=S[,context=C][,federates=TD[+TD...]]':
 * which caller of the Workload API gets which session identity, and which
 * federated trust domains' bundles it is given besides its own.
 *
 * SELECTORS is one or more of uid:N, gid:N, exe:/ABS/PATH, unit:NAME
 * (a .service or .scope unit) and cgroup:/PATH, separated by ','; every one
 * must match (AND).  Each kind at most once in a rule.  The target is the
 * session, the context and the set of federated trust domains (kept sorted,
 * joined by '+': "" for none).  Two rules with the
 * same selectors (in any order) and different targets are refused at start;
 * a caller that rules with different targets match at call time (e.g.
 * uid:1000 and exe:/usr/bin/envoy, both true of it) is given no identity.
 *
 * What each selector is true of (docs/agent.md, "The SPIFFE Workload API"):
 * uid and gid are SO_PEERCRED's; exe:PATH is a process running the file
 * PATH names in bcd's own view now (device and inode of /proc/PID/exe
 * against stat(PATH) at the match, so a replaced file is followed), in
 * bcd's own mount and user namespaces, that maps that file executable
 * (/proc/PID/maps: a process that made /proc/PID/exe name a file with
 * prctl(PR_SET_MM) runs code from elsewhere); unit: is the unit systemd's rules put it in
 * (sd_pid_get_unit, peer.c); cgroup: its whole cgroup v2 path.  A rule with
 * exe:, unit: or cgroup: also binds the caller to its connection
 * (attest.c): bcd_wl_rules_match says so.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/delivery.h"
#include "core/log.h"
#include "workload/rules.h"

typedef enum sel_kind
{
	SEL_UID,
	SEL_GID,
	SEL_EXE,
	SEL_UNIT,
	SEL_CGROUP,
	SEL_KINDS
} sel_kind;

static const char *const sel_names[SEL_KINDS] = {"uid", "gid", "exe", "unit", "cgroup"};

typedef struct rule
{
	int			has[SEL_KINDS];
	unsigned long id[2];		/* uid, gid */
	char	   *str[SEL_KINDS];	/* exe, unit, cgroup */
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	char		federates[BCD_WL_FEDERATES_LEN];	/* "td+td..." sorted, "" for none */
	const char *text;
} rule;

struct bcd_wl_rules
{
	rule	   *rules;
	int			n;
	/* the ids the kernel shows for every unmapped one, when bcd's user namespace maps not all */
	unsigned long overflow[2];	/* uid, gid; ULONG_MAX when every id is mapped */
};

/*
 * The id SO_PEERCRED shows for any id that bcd's user namespace does not
 * map (the kernel's overflowuid or overflowgid), or ULONG_MAX when the
 * namespace maps every id (the initial one: "0 0 4294967295").  Under a
 * user namespace of its own (systemd's PrivateUsers=) every other user is
 * that one id, so a uid: or gid: selector must never match it.  map is
 * the start of /proc/self/uid_map (or gid_map), NULL when it cannot be read
 * (no user namespaces); overflow that of /proc/sys/kernel/overflowuid (or
 * gid), NULL when unreadable (the kernel's default, 65534).
 */
unsigned long
bcd_wl_overflow_id(const char *map, const char *overflow)
{
	unsigned long a,
				b,
				c;
	unsigned long v;
	const char *nl;

	if (map == NULL)
		return ULONG_MAX;		/* no user namespaces */
	nl = strchr(map, '\n');
	if (sscanf(map, "%lu %lu %lu", &a, &b, &c) == 3 && a == 0 && b == 0 && c == 4294967295UL &&
		(nl == NULL || nl[1] == '\0'))
		return ULONG_MAX;		/* the initial one */
	if (overflow == NULL || sscanf(overflow, "%lu", &v) != 1)
		v = 65534;				/* the kernel's default */
	return v;
}

/* The start of the text of path (len - 1 bytes at most) in buf; NULL when it cannot be read. */
static const char *
read_start(const char *path, char *buf, size_t len)
{
	FILE	   *f = fopen(path, "re");
	size_t		n;

	if (f == NULL)
		return NULL;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The overflow id of bcd's user namespace for uids (map, overflow: /proc's files) or gids. */
static unsigned long
overflow_id(const char *map, const char *overflow)
{
	char		mbuf[256];
	char		obuf[32];

	return bcd_wl_overflow_id(read_start(map, mbuf, sizeof(mbuf)),
							  read_start(overflow, obuf, sizeof(obuf)));
}

/* Free what a rule holds and zero it. */
static void
rule_clear(rule *r)
{
	for (int k = 0; k < SEL_KINDS; k++)
		free(r->str[k]);
	memset(r, 0, sizeof(*r));
}

/* Parse one selector (len bytes at s) into r; 0 or -1 with err. */
static int
parse_selector(rule *r, const char *s, size_t len, char *err, size_t errlen)
{
	const char *colon = memchr(s, ':', len);
	size_t		klen;
	size_t		vlen;
	const char *v;
	int			k;
	char		num[32];
	char	   *end;

	if (colon == NULL)
	{
		snprintf(err, errlen, "a selector is KIND:VALUE (uid, gid, exe, unit or cgroup)");
		return -1;
	}
	klen = (size_t) (colon - s);
	v = colon + 1;
	vlen = len - klen - 1;
	for (k = 0; k < SEL_KINDS; k++)
		if (strlen(sel_names[k]) == klen && strncmp(s, sel_names[k], klen) == 0)
			break;
	if (k == SEL_KINDS)
	{
		snprintf(err, errlen, "unknown selector kind %.*s (uid, gid, exe, unit or cgroup)",
				 (int) klen, s);
		return -1;
	}
	if (r->has[k])
	{
		snprintf(err, errlen, "selector %s given twice in one rule", sel_names[k]);
		return -1;
	}
	if (vlen == 0)
	{
		snprintf(err, errlen, "selector %s has no value", sel_names[k]);
		return -1;
	}
	r->has[k] = 1;
	if (k == SEL_UID || k == SEL_GID)
	{
		if (vlen >= sizeof(num) || v[0] < '0' || v[0] > '9')
		{
			snprintf(err, errlen, "%s: must be a number", sel_names[k]);
			return -1;
		}
		memcpy(num, v, vlen);
		num[vlen] = '\0';
		r->id[k] = strtoul(num, &end, 10);
		if (*end != '\0' || r->id[k] > 0xfffffffeUL)
		{
			snprintf(err, errlen, "%s: must be a number", sel_names[k]);
			return -1;
		}
		return 0;
	}
	if ((k == SEL_EXE || k == SEL_CGROUP) && v[0] != '/')
	{
		snprintf(err, errlen, "%s: must be an absolute path", sel_names[k]);
		return -1;
	}
	if (k == SEL_UNIT && (vlen < 8 || (strncmp(v + vlen - 8, ".service", 8) != 0 &&
									   (vlen < 6 || strncmp(v + vlen - 6, ".scope", 6) != 0))))
	{
		snprintf(err, errlen, "unit: must name a .service or .scope unit");
		return -1;
	}
	r->str[k] = strndup(v, vlen);
	if (r->str[k] == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* The target's syntax, for messages. */
#define TARGET_SYNTAX "session=S[,context=C][,federates=TD[+TD...]]"

/* qsort order of trust domains. */
static int
td_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* 1 when the len bytes at s are a trust domain as a SPIFFE ID spells one (no scheme). */
static int
trust_domain_ok(const char *s, size_t len)
{
	if (len == 0 || len > 255)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
			  s[i] == '-' || s[i] == '_'))
			return 0;
	return 1;
}

/* Parse "TD[+TD...]" (len bytes at v) into r->federates, sorted; 0 or -1 with err. */
static int
parse_federates(rule *r, const char *v, size_t len, char *err, size_t errlen)
{
	char		buf[BCD_WL_FEDERATES_LEN];
	char	   *tds[BCD_WL_FEDERATES_MAX];
	int			n = 0;
	char	   *p;

	if (len == 0 || len >= sizeof(buf))
	{
		snprintf(err, errlen, "federates= names 1 to %d trust domains joined by '+' "
				 "(at most %d bytes)", BCD_WL_FEDERATES_MAX, BCD_WL_FEDERATES_LEN - 1);
		return -1;
	}
	memcpy(buf, v, len);
	buf[len] = '\0';
	for (p = buf;;)
	{
		char	   *plus = strchr(p, '+');
		size_t		tlen = plus != NULL ? (size_t) (plus - p) : strlen(p);

		if (!trust_domain_ok(p, tlen))
		{
			snprintf(err, errlen, "federates=: '%.*s' is not a trust domain (lower-case "
					 "a-z 0-9 . - _, without spiffe://)", (int) tlen, p);
			return -1;
		}
		if (n == BCD_WL_FEDERATES_MAX)
		{
			snprintf(err, errlen, "federates= names at most %d trust domains", BCD_WL_FEDERATES_MAX);
			return -1;
		}
		tds[n++] = p;
		if (plus == NULL)
			break;
		*plus = '\0';
		p = plus + 1;
	}
	qsort(tds, (size_t) n, sizeof(tds[0]), td_cmp);
	for (int i = 0; i < n; i++)
	{
		if (i > 0 && strcmp(tds[i - 1], tds[i]) == 0)
		{
			snprintf(err, errlen, "federates= names %s twice", tds[i]);
			return -1;
		}
		snprintf(r->federates + strlen(r->federates), sizeof(r->federates) - strlen(r->federates),
				 "%s%s", i > 0 ? "+" : "", tds[i]);
	}
	return 0;
}

/* Parse "session=S[,context=C][,federates=TD[+TD...]]" into r. */
static int
parse_target(rule *r, const char *t, char *err, size_t errlen)
{
	int			seen_context = 0;
	int			seen_federates = 0;

	if (strncmp(t, "session=", 8) != 0)
	{
		snprintf(err, errlen, "the target is " TARGET_SYNTAX);
		return -1;
	}
	for (int first = 1;; first = 0)
	{
		const char *comma = strchr(t, ',');
		size_t		len = comma != NULL ? (size_t) (comma - t) : strlen(t);

		if (first)
		{
			if (len - 8 > BC_SELECTOR_MAX)
			{
				snprintf(err, errlen, "the session is 1 to 128 of A-Z a-z 0-9 . _ : -");
				return -1;
			}
			memcpy(r->session, t + 8, len - 8);
			r->session[len - 8] = '\0';
		}
		else if (strncmp(t, "context=", 8) == 0 && !seen_context && !seen_federates)
		{
			seen_context = 1;
			if (len - 8 > BC_SELECTOR_MAX)
			{
				snprintf(err, errlen, "the context is 0 to 128 of A-Z a-z 0-9 . _ : -");
				return -1;
			}
			memcpy(r->context, t + 8, len - 8);
			r->context[len - 8] = '\0';
		}
		else if (strncmp(t, "federates=", 10) == 0 && !seen_federates)
		{
			seen_federates = 1;
			if (parse_federates(r, t + 10, len - 10, err, errlen) != 0)
				return -1;
		}
		else
		{
			snprintf(err, errlen, "the target is " TARGET_SYNTAX);
			return -1;
		}
		if (comma == NULL)
			break;
		t = comma + 1;
	}
	if (!bc_selector_valid(r->session, 1) || !bc_selector_valid(r->context, 0))
	{
		snprintf(err, errlen, "the session (1 to 128) and context (0 to 128) are made of "
				 "A-Z a-z 0-9 . _ : - only");
		return -1;
	}
	return 0;
}

/*
 * Parse "session=S[,context=C][,federates=TD[+TD...]]" into session,
 * context and federates ("td+td..." sorted, "" for none; BCD_WL_FEDERATES_LEN
 * bytes) (rules.h); 0 or -1 with err.
 */
int
bcd_wl_target_parse_fed(const char *t, char *session, char *context, char *federates,
						char *err, size_t errlen)
{
	rule		r;

	memset(&r, 0, sizeof(r));
	if (parse_target(&r, t, err, errlen) != 0)
		return -1;
	memcpy(session, r.session, sizeof(r.session));
	memcpy(context, r.context, sizeof(r.context));
	memcpy(federates, r.federates, sizeof(r.federates));
	return 0;
}

/* Parse one rule, "SELECTOR[,SELECTOR...]=>TARGET", into r; 0 or -1 with err. */
static int
parse_rule(rule *r, const char *text, char *err, size_t errlen)
{
	const char *arrow = strstr(text, "=>");
	const char *p = text;

	memset(r, 0, sizeof(*r));
	r->text = text;
	if (arrow == NULL || arrow == text)
	{
		snprintf(err, errlen, "a rule is SELECTOR[,SELECTOR...]=>" TARGET_SYNTAX);
		return -1;
	}
	while (p < arrow)
	{
		const char *comma = memchr(p, ',', (size_t) (arrow - p));
		const char *end = comma != NULL ? comma : arrow;

		if (parse_selector(r, p, (size_t) (end - p), err, errlen) != 0)
			return -1;
		p = end + 1;
	}
	return parse_target(r, arrow + 2, err, errlen);
}

/* 1 when a and b have the same selectors (in any order). */
static int
same_selectors(const rule *a, const rule *b)
{
	for (int k = 0; k < SEL_KINDS; k++)
	{
		if (a->has[k] != b->has[k])
			return 0;
		if (!a->has[k])
			continue;
		if (k == SEL_UID || k == SEL_GID)
		{
			if (a->id[k] != b->id[k])
				return 0;
		}
		else if (strcmp(a->str[k], b->str[k]) != 0)
			return 0;
	}
	return 1;
}

/* 1 when a and b name the same session, context and federated trust domains. */
static int
same_target(const rule *a, const rule *b)
{
	return strcmp(a->session, b->session) == 0 && strcmp(a->context, b->context) == 0 &&
		strcmp(a->federates, b->federates) == 0;
}

/* Parse the rules for bcd's own user namespace (rules.h). */
bcd_wl_rules *
bcd_wl_rules_parse(const char *const *texts, int n, char *err, size_t errlen)
{
	return bcd_wl_rules_parse_ns(texts, n,
								 overflow_id("/proc/self/uid_map", "/proc/sys/kernel/overflowuid"),
								 overflow_id("/proc/self/gid_map", "/proc/sys/kernel/overflowgid"),
								 err, errlen);
}

/* Parse the rules for a user namespace whose unmapped ids show as overflow_uid and overflow_gid (rules.h). */
bcd_wl_rules *
bcd_wl_rules_parse_ns(const char *const *texts, int n, unsigned long overflow_uid,
					  unsigned long overflow_gid, char *err, size_t errlen)
{
	bcd_wl_rules *r = calloc(1, sizeof(*r));
	char		why[512];

	if (r == NULL || (n > 0 && (r->rules = calloc((size_t) n, sizeof(rule))) == NULL))
	{
		free(r);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->overflow[SEL_UID] = overflow_uid;
	r->overflow[SEL_GID] = overflow_gid;
	for (int i = 0; i < n; i++)
	{
		if (parse_rule(&r->rules[i], texts[i], why, sizeof(why)) != 0)
		{
			snprintf(err, errlen, "--workload-rule '%s': %s", texts[i], why);
			r->n = i + 1;
			bcd_wl_rules_free(r);
			return NULL;
		}
		r->n = i + 1;
		for (int j = 0; j < i; j++)
			if (same_selectors(&r->rules[i], &r->rules[j]) &&
				!same_target(&r->rules[i], &r->rules[j]))
			{
				snprintf(err, errlen, "--workload-rule '%s' and '%s': the same selectors give "
						 "different sessions, contexts or federates= sets", texts[j], texts[i]);
				bcd_wl_rules_free(r);
				return NULL;
			}
	}
	return r;
}

/* Free the rules. */
void
bcd_wl_rules_free(bcd_wl_rules *r)
{
	if (r == NULL)
		return;
	for (int i = 0; i < r->n; i++)
		rule_clear(&r->rules[i]);
	free(r->rules);
	free(r);
}

/*
 * 1 when every selector of r is true of c (rs: the rules, for the unmapped
 * ids).  When the process names r's exe: file but is not running it as
 * bcd sees it, note says why (for the log; left alone otherwise).
 */
static int
rule_matches(const bcd_wl_rules *rs, const rule *r, const bcd_wl_caller *c, char *note,
			 size_t notelen)
{
	const bcd_peer *p = &c->peer;

	/* an unmapped id is any of the ids bcd's namespace does not map: never a match */
	if (r->has[SEL_UID] && ((unsigned long) p->uid != r->id[SEL_UID] ||
							(unsigned long) p->uid == rs->overflow[SEL_UID]))
		return 0;
	if (r->has[SEL_GID] && ((unsigned long) c->gid != r->id[SEL_GID] ||
							(unsigned long) c->gid == rs->overflow[SEL_GID]))
		return 0;
	/* exe, unit and cgroup: unknown never matches */
	if (r->has[SEL_UNIT] && (p->unit[0] == '\0' || strcmp(p->unit, r->str[SEL_UNIT]) != 0))
		return 0;
	if (r->has[SEL_CGROUP] &&
		(p->cgroup[0] == '\0' || p->cgroup_cut || strcmp(p->cgroup, r->str[SEL_CGROUP]) != 0))
		return 0;
	if (r->has[SEL_EXE])
	{
		struct stat st;
		int			mapped;

		/* the file the process runs is the file PATH names in bcd's view now */
		if (!p->exe_known || stat(r->str[SEL_EXE], &st) != 0 ||
			st.st_dev != p->exe_dev || st.st_ino != p->exe_ino)
			return 0;
		/*
		 * in bcd's namespaces: in another mount namespace its view of every
		 * path may be its own; in a user namespace of its own a process may
		 * set its /proc/PID/exe to any file it can read (prctl PR_SET_MM_MAP)
		 */
		if (!p->mnt_known || !p->mnt_same)
		{
			snprintf(note, notelen, "exe:%s: the process is in another mount namespace than "
					 "bcd's", r->str[SEL_EXE]);
			return 0;
		}
		if (!p->userns_known || !p->userns_same)
		{
			snprintf(note, notelen, "exe:%s: the process is in another user namespace than "
					 "bcd's, where it may name any file it can read as its executable",
					 r->str[SEL_EXE]);
			return 0;
		}
		/* and runs code of that file: a masquerade runs it from anonymous memory */
		mapped = bcd_peer_maps_exec(p->pid, p->exe_dev, p->exe_ino);
		if (mapped != 1)
		{
			snprintf(note, notelen, mapped == 0 ?
					 "exe:%s: /proc/PID/exe names it but the process does not map it "
					 "executable (its executable was set, not run: prctl PR_SET_MM)" :
					 "exe:%s: cannot read /proc/PID/maps (or it is over 64 KiB before a "
					 "mapping of it)", r->str[SEL_EXE]);
			return 0;
		}
	}
	return 1;
}

/* 0 when no rule can match a caller of uid and gid (rules.h). */
int
bcd_wl_rules_may_match_ids(const bcd_wl_rules *r, uid_t uid, gid_t gid)
{
	for (int i = 0; r != NULL && i < r->n; i++)
	{
		const rule *x = &r->rules[i];

		if (x->has[SEL_UID] && ((unsigned long) uid != x->id[SEL_UID] ||
								(unsigned long) uid == r->overflow[SEL_UID]))
			continue;
		if (x->has[SEL_GID] && ((unsigned long) gid != x->id[SEL_GID] ||
								(unsigned long) gid == r->overflow[SEL_GID]))
			continue;
		return 1;
	}
	return 0;
}

/* Warn of every exe:-only rule on a socket other users may reach (rules.h). */
void
bcd_wl_rules_warn(const bcd_wl_rules *r, int mode)
{
	if ((mode & 077) == 0)
		return;
	for (int i = 0; r != NULL && i < r->n; i++)
	{
		const rule *x = &r->rules[i];

		if (x->has[SEL_EXE] && !x->has[SEL_UID] && !x->has[SEL_GID] && !x->has[SEL_UNIT])
			bcd_log("workload api: warning: rule '%s' selects by exe: without uid:, gid: or "
					"unit: on a socket other users may connect to (mode %04o): exe: is no "
					"boundary between users who may read %s (a process in a user namespace of "
					"its own may name it as its executable, and any process may map it); "
					"pair it with uid:, gid: or unit: (docs/security.md, \"Workload "
					"attestation\")", x->text, (unsigned int) mode, x->str[SEL_EXE]);
	}
}

/* The identity the rules give caller c, and what it must hold to (rules.h). */
int
bcd_wl_rules_match(const bcd_wl_rules *r, const bcd_wl_caller *c, const char **session,
				   const char **context, int *bind, char *err, size_t errlen)
{
	const char *federates;

	return bcd_wl_rules_match_fed(r, c, session, context, &federates, bind, err, errlen);
}

/* The same, with the federated trust domains of the rule (rules.h). */
int
bcd_wl_rules_match_fed(const bcd_wl_rules *r, const bcd_wl_caller *c, const char **session,
					   const char **context, const char **federates, int *bind, char *err,
					   size_t errlen)
{
	const rule *found = NULL;
	int			need = BCD_WL_RULE_BIND | BCD_WL_RULE_EXE;

	if (errlen > 0)
		err[0] = '\0';
	for (int i = 0; r != NULL && i < r->n; i++)
	{
		const rule *x = &r->rules[i];

		if (!rule_matches(r, x, c, err, errlen))
			continue;
		if (found != NULL && !same_target(found, x))
		{
			snprintf(err, errlen, "rules '%s' and '%s' both match and give different identities",
					 found->text, x->text);
			return -1;
		}
		if (found == NULL)
			found = x;
		/* what the caller must hold to: the least any matching rule asks */
		if (!x->has[SEL_EXE] && !x->has[SEL_UNIT] && !x->has[SEL_CGROUP])
			need = 0;
		else if (!x->has[SEL_EXE])
			need &= ~BCD_WL_RULE_EXE;
	}
	if (found == NULL)
		return 0;
	if (errlen > 0)
		err[0] = '\0';			/* a rule matched: no near miss to tell */
	*session = found->session;
	*context = found->context;
	*federates = found->federates;
	*bind = need;
	return 1;
}

/* The ids the kernel shows for unmapped ones; 1 when some are (rules.h). */
int
bcd_wl_rules_unmapped(const bcd_wl_rules *r, unsigned long *uid, unsigned long *gid)
{
	*uid = r->overflow[SEL_UID];
	*gid = r->overflow[SEL_GID];
	return r->overflow[SEL_UID] != ULONG_MAX || r->overflow[SEL_GID] != ULONG_MAX;
}

/* 1 when td is one of the trust domains of federates ("td+td...") (rules.h). */
int
bcd_wl_federates_has(const char *federates, const char *td)
{
	size_t		n = strlen(td);

	for (const char *p = federates; p != NULL && *p != '\0';)
	{
		const char *plus = strchr(p, '+');
		size_t		len = plus != NULL ? (size_t) (plus - p) : strlen(p);

		if (len == n && strncmp(p, td, n) == 0)
			return 1;
		p = plus != NULL ? plus + 1 : NULL;
	}
	return 0;
}

/* "" when no rule federates with own_td, else the first rule that does in err (rules.h). */
int
bcd_wl_rules_check_federates(const bcd_wl_rules *r, const char *own_td, char *err, size_t errlen)
{
	for (int i = 0; r != NULL && i < r->n; i++)
		if (bcd_wl_federates_has(r->rules[i].federates, own_td))
		{
			snprintf(err, errlen, "--workload-rule '%s': federates= names bcd's own trust "
					 "domain %s (its bundle is always given)", r->rules[i].text, own_td);
			return -1;
		}
	return 0;
}
