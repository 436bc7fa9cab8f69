/*
 * test_bcd_rules.c: cmocka tests of the Workload API's rule matcher
 * (src/agent/workload/rules.c, --workload-rule): parsing and its refusals,
 * two rules with the same selectors and different targets, ambiguity at a
 * match, what a match asks of the caller (bound to its connection, exe:'s
 * close-on-exec), the id a user namespace shows for unmapped ids (never
 * matched by uid: or gid:), unit: and cgroup:, exe: by device and inode in
 * bcd's namespaces with the file mapped executable (against this test's
 * own process and files, as bcd reads any caller's), which callers can be
 * known to get nothing, and the start-up warning of exe: alone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "bcd_capture.h"
#include "workload/rules.h"

/* The rules of texts (n of them) in a namespace that maps every id; the test fails on an error. */
static bcd_wl_rules *
rules_of(const char *const *texts, int n)
{
	char		err[512];
	bcd_wl_rules *r = bcd_wl_rules_parse_ns(texts, n, ULONG_MAX, ULONG_MAX, err, sizeof(err));

	if (r == NULL)
		fail_msg("%s", err);
	return r;
}

/* The error of parsing the one rule text ("" when it parses). */
static const char *
parse_error(const char *text)
{
	static char err[512];
	const char *texts[1] = {text};
	bcd_wl_rules *r;

	err[0] = '\0';
	r = bcd_wl_rules_parse_ns(texts, 1, ULONG_MAX, ULONG_MAX, err, sizeof(err));
	if (r != NULL)
	{
		bcd_wl_rules_free(r);
		return "";
	}
	return err;
}

/* A caller of uid and gid, in no unit or cgroup, its executable unknown. */
static bcd_wl_caller
caller(uid_t uid, gid_t gid)
{
	bcd_wl_caller c;

	memset(&c, 0, sizeof(c));
	c.peer.pid = getpid();
	c.peer.uid = uid;
	c.peer.gid = gid;
	c.gid = gid;
	return c;
}

/* Every malformed rule is refused at start, naming the rule and what is wrong. */
static void
test_parse_refusals(void **state)
{
	static const struct
	{
		const char *rule;
		const char *why;
	}			cases[] = {
		{"uid:1000", "a rule is SELECTOR[,SELECTOR...]=>session=S[,context=C]"},
		{"=>session=a", "a rule is SELECTOR"},
		{"uid1000=>session=a", "a selector is KIND:VALUE"},
		{"pid:1=>session=a", "unknown selector kind pid"},
		{"uid:1000,uid:1001=>session=a", "selector uid given twice in one rule"},
		{"gid:=>session=a", "selector gid has no value"},
		{"uid:abc=>session=a", "uid: must be a number"},
		{"uid:-1=>session=a", "uid: must be a number"},
		{"uid:12x=>session=a", "uid: must be a number"},
		{"uid:4294967295=>session=a", "uid: must be a number"},	/* (uid_t) -1 is no uid */
		{"gid:99999999999999999999=>session=a", "gid: must be a number"},
		{"exe:usr/bin/envoy=>session=a", "exe: must be an absolute path"},
		{"cgroup:system.slice=>session=a", "cgroup: must be an absolute path"},
		{"unit:billing=>session=a", "unit: must name a .service or .scope unit"},
		{"unit:billing.socket=>session=a", "unit: must name a .service or .scope unit"},
		{"uid:1=>sess=a", "the target is session=S[,context=C]"},
		{"uid:1=>session=a,ctx=b", "the target is session=S[,context=C]"},
		{"uid:1=>session=", "the session (1 to 128) and context (0 to 128)"},
		{"uid:1=>session=a b", "the session (1 to 128) and context (0 to 128)"},
		{"uid:1=>session=a,context=b/c", "the session (1 to 128) and context (0 to 128)"},
		{"uid:1=>session=a,federates=", "federates= names 1 to 8 trust domains"},
		{"uid:1=>session=a,federates=B.org", "'B.org' is not a trust domain"},
		{"uid:1=>session=a,federates=spiffe://b.org", "'spiffe://b.org' is not a trust domain"},
		{"uid:1=>session=a,federates=b.org+", "'' is not a trust domain"},
		{"uid:1=>session=a,federates=b.org+c.org+b.org", "federates= names b.org twice"},
		{"uid:1=>session=a,federates=a+b+c+d+e+f+g+h+i", "at most 8 trust domains"},
		{"uid:1=>session=a,federates=b.org,federates=c.org", "the target is session=S"},
		{"uid:1=>session=a,federates=b.org,context=c", "the target is session=S"},
	};
	char		longest[300];

	(void) state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		const char *err = parse_error(cases[i].rule);
		char		want[512];

		snprintf(want, sizeof(want), "--workload-rule '%s': ", cases[i].rule);
		if (strncmp(err, want, strlen(want)) != 0 || strstr(err, cases[i].why) == NULL)
			fail_msg("%s: got \"%s\", want \"%s%s...\"", cases[i].rule, err, want, cases[i].why);
	}
	/* a session of 128 characters is one; of 129, none */
	snprintf(longest, sizeof(longest), "uid:1=>session=%0128d", 7);
	assert_string_equal(parse_error(longest), "");
	snprintf(longest, sizeof(longest), "uid:1=>session=%0129d", 7);
	assert_non_null(strstr(parse_error(longest), "the session is 1 to 128 of"));
	/* every kind, once each, with a context */
	assert_string_equal(parse_error("uid:0,gid:0,exe:/usr/bin/env,unit:web.scope,cgroup:/x"
									"=>session=s.1_:-,context=c"), "");
}

/* Two rules with the same selectors, in any order, and different targets: refused at start. */
static void
test_same_selectors_conflict(void **state)
{
	const char *apart[] = {"uid:1000,unit:billing.service=>session=a",
	"unit:billing.service,uid:1000=>session=b"};
	const char *context[] = {"uid:1000=>session=a", "uid:1000=>session=a,context=x"};
	const char *alike[] = {"uid:1000,gid:100=>session=a", "gid:100,uid:1000=>session=a"};
	const char *other[] = {"uid:1000=>session=a", "uid:1001=>session=b"};
	const char *fed[] = {"uid:1000=>session=a,federates=b.org",
	"uid:1000=>session=a,federates=b.org+c.org"};
	const char *fed_alike[] = {"uid:1000=>session=a,context=x,federates=c.org+b.org",
	"uid:1000=>session=a,context=x,federates=b.org+c.org"};
	char		err[512];
	bcd_wl_rules *r;

	(void) state;
	assert_null(bcd_wl_rules_parse_ns(apart, 2, ULONG_MAX, ULONG_MAX, err, sizeof(err)));
	assert_non_null(strstr(err, "the same selectors give different sessions, contexts or "
						   "federates= sets"));
	assert_non_null(strstr(err, "'uid:1000,unit:billing.service=>session=a' and "
						   "'unit:billing.service,uid:1000=>session=b'"));
	assert_null(bcd_wl_rules_parse_ns(context, 2, ULONG_MAX, ULONG_MAX, err, sizeof(err)));
	assert_null(bcd_wl_rules_parse_ns(fed, 2, ULONG_MAX, ULONG_MAX, err, sizeof(err)));
	assert_non_null(strstr(err, "federates= sets"));
	/* the same set in another order is the same target */
	r = rules_of(fed_alike, 2);
	bcd_wl_rules_free(r);
	/* the same target twice, or other selectors: both kept */
	r = rules_of(alike, 2);
	bcd_wl_rules_free(r);
	r = rules_of(other, 2);
	bcd_wl_rules_free(r);
}

/* federates=: the rule's set, sorted, handed with the match; its own trust domain refused. */
static void
test_federates(void **state)
{
	const char *texts[] = {"uid:1000=>session=a,federates=c.org+b.org", "uid:1001=>session=b"};
	const char *own[] = {"uid:1=>session=a,federates=x.org+agent.test"};
	bcd_wl_rules *r = rules_of(texts, 2);
	bcd_wl_caller c = caller(1000, 1);
	const char *session = NULL;
	const char *context = NULL;
	const char *federates = NULL;
	char		err[512];
	int			bind;

	(void) state;
	assert_int_equal(bcd_wl_rules_match_fed(r, &c, &session, &context, &federates, &bind, err,
											sizeof(err)), 1);
	assert_string_equal(federates, "b.org+c.org");
	assert_true(bcd_wl_federates_has(federates, "b.org") && bcd_wl_federates_has(federates, "c.org"));
	assert_false(bcd_wl_federates_has(federates, "b.or") || bcd_wl_federates_has(federates, "org") ||
				 bcd_wl_federates_has(federates, "b.org+c.org"));
	c = caller(1001, 1);
	assert_int_equal(bcd_wl_rules_match_fed(r, &c, &session, &context, &federates, &bind, err,
											sizeof(err)), 1);
	assert_string_equal(federates, "");
	assert_false(bcd_wl_federates_has(federates, "b.org"));
	assert_int_equal(bcd_wl_rules_check_federates(r, "agent.test", err, sizeof(err)), 0);
	bcd_wl_rules_free(r);
	r = rules_of(own, 1);
	assert_int_equal(bcd_wl_rules_check_federates(r, "agent.test", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "names bcd's own trust domain agent.test"));
	bcd_wl_rules_free(r);
}

/* uid: and gid: are SO_PEERCRED's ids; a caller no rule names gets nothing (0, no reason). */
static void
test_match_ids(void **state)
{
	const char *texts[] = {"uid:1000=>session=a", "gid:200=>session=b,context=c",
	"uid:1001,gid:300=>session=d"};
	bcd_wl_rules *r = rules_of(texts, 3);
	bcd_wl_caller c;
	const char *session = NULL;
	const char *context = NULL;
	char		err[512];
	int			bind = -1;

	(void) state;
	c = caller(1000, 5);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "a");
	assert_string_equal(context, "");
	assert_int_equal(bind, 0);	/* ids need no binding: the kernel's, at connect() */
	c = caller(7, 200);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "b");
	assert_string_equal(context, "c");
	/* every selector of a rule must hold (AND) */
	c = caller(1001, 5);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	c = caller(1001, 300);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "d");
	/* no rules at all: nothing matches */
	assert_int_equal(bcd_wl_rules_match(NULL, &c, &session, &context, &bind, err, sizeof(err)), 0);
	bcd_wl_rules_free(r);
}

/* Rules with different targets that both match a caller: no identity (-1), and why. */
static void
test_ambiguous(void **state)
{
	const char *texts[] = {"uid:1000=>session=a", "gid:100=>session=b",
	"unit:billing.service=>session=a"};
	bcd_wl_rules *r = rules_of(texts, 3);
	bcd_wl_caller c = caller(1000, 100);
	const char *session = NULL;
	const char *context = NULL;
	char		err[512];
	int			bind = -1;

	(void) state;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), -1);
	assert_string_equal(err, "rules 'uid:1000=>session=a' and 'gid:100=>session=b' both match "
						"and give different identities");
	/* two rules with the same target: one identity, the least demanding rule's binding */
	c = caller(1000, 5);
	snprintf(c.peer.unit, sizeof(c.peer.unit), "billing.service");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "a");
	assert_int_equal(bind, 0);
	bcd_wl_rules_free(r);
}

/* An unmapped id (the namespace's overflow id) is any unmapped user: uid: and gid: never match it. */
static void
test_overflow_ids_never_match(void **state)
{
	const char *texts[] = {"uid:65534=>session=a", "gid:65533=>session=b"};
	char		err[512];
	bcd_wl_rules *r = bcd_wl_rules_parse_ns(texts, 2, 65534, 65533, err, sizeof(err));
	bcd_wl_caller c = caller(65534, 1);
	const char *session = NULL;
	const char *context = NULL;
	unsigned long ou;
	unsigned long og;
	int			bind;

	(void) state;
	assert_non_null(r);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	c = caller(1, 65533);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_int_equal(bcd_wl_rules_may_match_ids(r, 65534, 65533), 0);
	assert_int_equal(bcd_wl_rules_unmapped(r, &ou, &og), 1);
	assert_true(ou == 65534 && og == 65533);
	bcd_wl_rules_free(r);
	/* where every id is mapped, the same ids are users like any other */
	r = rules_of(texts, 2);
	c = caller(65534, 1);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_int_equal(bcd_wl_rules_unmapped(r, &ou, &og), 0);
	bcd_wl_rules_free(r);
}

/* The overflow id from the namespace's uid_map and the kernel's overflowuid. */
static void
test_overflow_id(void **state)
{
	(void) state;
	/* no user namespaces (no uid_map), or the initial one: every id is mapped */
	assert_true(bcd_wl_overflow_id(NULL, "65534\n") == ULONG_MAX);
	assert_true(bcd_wl_overflow_id("         0          0 4294967295\n", "65534\n") == ULONG_MAX);
	assert_true(bcd_wl_overflow_id("0 0 4294967295", NULL) == ULONG_MAX);
	/* a namespace of one's own (PrivateUsers=): the overflowuid */
	assert_true(bcd_wl_overflow_id("         0       1000          1\n", "65534\n") == 65534);
	assert_true(bcd_wl_overflow_id("0 1000 1\n", "4242\n") == 4242);
	assert_true(bcd_wl_overflow_id("0 1000 1\n", NULL) == 65534);	/* the kernel's default */
	assert_true(bcd_wl_overflow_id("0 1000 1\n", "x\n") == 65534);
	/* all the ids, but in two ranges, or none mapped yet: unmapped ones exist */
	assert_true(bcd_wl_overflow_id("0 0 1000\n1000 1000 4294966295\n", "65534\n") == 65534);
	assert_true(bcd_wl_overflow_id("", "65534\n") == 65534);
	assert_true(bcd_wl_overflow_id("0 0 4294967294\n", "65534\n") == 65534);
}

/* unit: and cgroup: compare whole names; an unknown (or cut) one never matches; both bind. */
static void
test_unit_and_cgroup(void **state)
{
	const char *texts[] = {"unit:billing.service=>session=a",
	"cgroup:/system.slice/batch.scope=>session=b", "uid:1000,unit:web.scope=>session=c"};
	bcd_wl_rules *r = rules_of(texts, 3);
	bcd_wl_caller c = caller(1000, 1000);
	const char *session = NULL;
	const char *context = NULL;
	char		err[512];
	int			bind = 0;

	(void) state;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	snprintf(c.peer.unit, sizeof(c.peer.unit), "billing.service");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "a");
	assert_int_equal(bind, BCD_WL_RULE_BIND);
	snprintf(c.peer.unit, sizeof(c.peer.unit), "billing.service.d");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	snprintf(c.peer.unit, sizeof(c.peer.unit), "web.scope");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "c");
	c.peer.uid = 1001;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	c.peer.unit[0] = '\0';
	snprintf(c.peer.cgroup, sizeof(c.peer.cgroup), "/system.slice/batch.scope");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "b");
	assert_int_equal(bind, BCD_WL_RULE_BIND);
	/* a path longer than bcd keeps is never matched, though its start is the rule's */
	c.peer.cgroup_cut = 1;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	c.peer.cgroup_cut = 0;
	snprintf(c.peer.cgroup, sizeof(c.peer.cgroup), "/system.slice/batch.scope/child");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	bcd_wl_rules_free(r);
}

/* This process as a caller: its executable by device and inode, in bcd's namespaces. */
static bcd_wl_caller
self_caller(const char *exe_as)
{
	bcd_wl_caller c = caller(getuid(), getgid());
	struct stat st;

	assert_int_equal(stat(exe_as, &st), 0);
	c.peer.exe_known = 1;
	c.peer.exe_dev = st.st_dev;
	c.peer.exe_ino = st.st_ino;
	c.peer.mnt_known = c.peer.mnt_same = 1;
	c.peer.userns_known = c.peer.userns_same = 1;
	return c;
}

/*
 * exe: is the file the process runs (/proc/PID/exe's device and inode
 * against stat(PATH) at the match), in bcd's mount and user namespaces,
 * mapped executable by it (/proc/PID/maps): this test's own executable
 * matches; a file it names but does not map is a masquerade; another
 * namespace is refused, with why.
 */
static void
test_exe_by_identity(void **state)
{
	char		self[PATH_MAX];
	char		text[PATH_MAX + 64];
	char		env_rule[] = "exe:/usr/bin/env=>session=other";
	const char *texts[2] = {text, env_rule};
	ssize_t		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	bcd_wl_rules *r;
	bcd_wl_caller c;
	const char *session = NULL;
	const char *context = NULL;
	char		err[512];
	int			bind = 0;

	(void) state;
	assert_true(n > 0);
	self[n] = '\0';
	snprintf(text, sizeof(text), "exe:%s=>session=self", self);
	r = rules_of(texts, 2);
	c = self_caller("/proc/self/exe");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_string_equal(session, "self");
	assert_int_equal(bind, BCD_WL_RULE_BIND | BCD_WL_RULE_EXE);
	/* in another mount or user namespace: not trusted to name a file */
	c.peer.mnt_same = 0;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "the process is in another mount namespace than bcd's"));
	c.peer.mnt_same = 1;
	c.peer.userns_known = 0;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "another user namespace than bcd's"));
	/* /proc/PID/exe naming /usr/bin/env, which this process does not map: a set executable */
	c = self_caller("/usr/bin/env");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "exe:/usr/bin/env: /proc/PID/exe names it but the process does "
						   "not map it executable"));
	/* the executable unknown: never a match, nothing to tell */
	c.peer.exe_known = 0;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	bcd_wl_rules_free(r);
}

/* exe:PATH is stat()ed at every match: a file put at PATH since is another file. */
static void
test_exe_replaced(void **state)
{
	char		dir[] = "/tmp/test_bcd_rules.XXXXXX";
	char		path[64];
	char		moved[64];
	char		text[128];
	const char *texts[1] = {text};
	bcd_wl_rules *r;
	bcd_wl_caller c;
	const char *session;
	const char *context;
	char		err[512];
	int			bind;
	FILE	   *f;

	(void) state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tool", dir);
	snprintf(moved, sizeof(moved), "%s/tool.old", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(text, sizeof(text), "exe:%s=>session=a", path);
	r = rules_of(texts, 1);
	c = self_caller(path);		/* a process whose /proc/PID/exe is that file */
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "does not map it executable"));	/* the same file: compared further */
	assert_int_equal(rename(path, moved), 0);
	f = fopen(path, "w");		/* another file at PATH */
	assert_non_null(f);
	fclose(f);
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 0);
	assert_string_equal(err, "");	/* another inode: not that file at all */
	bcd_wl_rules_free(r);
	unlink(path);
	unlink(moved);
	rmdir(dir);
}

/* What a match asks: bound for exe:, unit: or cgroup:, close-on-exec for exe:; the least of those that match. */
static void
test_binding_asked(void **state)
{
	const char *texts[] = {"uid:1000,cgroup:/a=>session=s", "gid:100,unit:u.service=>session=s",
	"uid:1000,gid:100=>session=s"};
	bcd_wl_rules *r = rules_of(texts, 3);
	bcd_wl_caller c = caller(1000, 5);
	const char *session;
	const char *context;
	char		err[512];
	int			bind = -1;

	(void) state;
	snprintf(c.peer.cgroup, sizeof(c.peer.cgroup), "/a");
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_int_equal(bind, BCD_WL_RULE_BIND);
	/* a rule of ids alone matches too: nothing more is asked */
	c.gid = 100;
	assert_int_equal(bcd_wl_rules_match(r, &c, &session, &context, &bind, err, sizeof(err)), 1);
	assert_int_equal(bind, 0);
	bcd_wl_rules_free(r);
}

/* Callers known to get nothing before /proc is read: each rule names another uid or gid. */
static void
test_may_match_ids(void **state)
{
	const char *ids[] = {"uid:1000=>session=a", "gid:200,unit:x.service=>session=b"};
	const char *any[] = {"uid:1000=>session=a", "exe:/usr/bin/env=>session=b"};
	bcd_wl_rules *r = rules_of(ids, 2);

	(void) state;
	assert_int_equal(bcd_wl_rules_may_match_ids(r, 1000, 1), 1);
	assert_int_equal(bcd_wl_rules_may_match_ids(r, 5, 200), 1);
	assert_int_equal(bcd_wl_rules_may_match_ids(r, 5, 5), 0);
	bcd_wl_rules_free(r);
	r = rules_of(any, 2);		/* a rule without ids may match anyone */
	assert_int_equal(bcd_wl_rules_may_match_ids(r, 5, 5), 1);
	bcd_wl_rules_free(r);
	assert_int_equal(bcd_wl_rules_may_match_ids(NULL, 5, 5), 0);
}

/* At start: exe: without uid:, gid: or unit: on a socket others may reach is warned about. */
static void
test_warn_exe_alone(void **state)
{
	const char *texts[] = {"exe:/usr/bin/env=>session=a", "exe:/usr/bin/env,uid:1000=>session=b",
	"exe:/usr/bin/env,unit:x.service=>session=c", "cgroup:/y,exe:/usr/bin/env=>session=d"};
	bcd_wl_rules *r = rules_of(texts, 4);
	bcd_capture cap;
	char	   *out;

	(void) state;
	assert_int_equal(bcd_capture_start(&cap), 0);
	bcd_wl_rules_warn(r, 0600);
	out = bcd_capture_end(&cap);
	assert_string_equal(out, "");
	free(out);
	assert_int_equal(bcd_capture_start(&cap), 0);
	bcd_wl_rules_warn(r, 0666);
	out = bcd_capture_end(&cap);
	assert_non_null(strstr(out, "bcd: workload api: warning: rule 'exe:/usr/bin/env=>session=a' "
						   "selects by exe: without uid:, gid: or unit: on a socket other users "
						   "may connect to (mode 0666)"));
	assert_non_null(strstr(out, "rule 'cgroup:/y,exe:/usr/bin/env=>session=d'"));
	assert_null(strstr(out, "session=b'"));
	assert_null(strstr(out, "session=c'"));
	free(out);
	bcd_wl_rules_free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_refusals),
		cmocka_unit_test(test_same_selectors_conflict),
		cmocka_unit_test(test_match_ids),
		cmocka_unit_test(test_ambiguous),
		cmocka_unit_test(test_overflow_ids_never_match),
		cmocka_unit_test(test_overflow_id),
		cmocka_unit_test(test_unit_and_cgroup),
		cmocka_unit_test(test_exe_by_identity),
		cmocka_unit_test(test_exe_replaced),
		cmocka_unit_test(test_binding_asked),
		cmocka_unit_test(test_may_match_ids),
		cmocka_unit_test(test_warn_exe_alone),
		cmocka_unit_test(test_federates),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
