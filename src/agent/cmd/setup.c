/*
 * setup.c: `bcd setup apply | check | print`: bcd's user units, and nothing
 * else (a narrow setup command: no settings file of anyone's edited,
 * no ledger to undo).
 *
 * The units are src/agent/systemd/bcd.socket and bcd.service, compiled in
 * (mk/agent.mk generates build/gen/bcd_units.c from them), with ExecStart
 * naming the bcd that writes them.  apply writes them into the user's unit
 * directory (~/.config/systemd/user) unless the same units are installed for
 * every user already (the Debian package's /usr/lib/systemd/user), and
 * enables bcd.socket (the sockets.target.wants link systemctl --user enable
 * makes).  check probes without writing: the units present and current
 * (what this bcd would write), bcd.socket enabled, bcd.env present, the
 * socket listening, the daemon answering, lingering off; one line on stderr
 * per problem and exit 1.  print writes one unit to stdout (what debian/rules
 * installs).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/client.h"
#include "core/fileio.h"
#include "core/linger.h"
#include "core/local_socket.h"

/* build/gen/bcd_units.c (mk/agent.mk) */
extern const char bcd_unit_socket[];
extern const char bcd_unit_service[];

/* The ExecStart of the units in the source tree; replaced by this bcd's path. */
#define SOURCE_BCD "/usr/local/bin/bcd"
/* Unit directories for every user, in systemd's order after the user's own. */
static const char *const system_unit_dirs[] = {"/etc/systemd/user", "/usr/lib/systemd/user", NULL};
static const char *const unit_names[] = {"bcd.socket", "bcd.service", NULL};

#define MAX_UNIT_SIZE (64 * 1024)

/* Print the usage of bcd setup to stream. */
static void
setup_usage(FILE *stream)
{
	fputs("usage: bcd setup apply [--unit-dir DIR] [--bcd PATH]\n"
		  "       bcd setup check [--unit-dir DIR] [--bcd PATH] [--socket PATH] [--timeout S]\n"
		  "       bcd setup print bcd.socket|bcd.service [--bcd PATH]\n"
		  "\n"
		  "bcd's systemd user units (bcd.socket, bcd.service), and nothing else.\n"
		  "\n"
		  "  apply   write the units into DIR (default $XDG_CONFIG_HOME/systemd/user,\n"
		  "          i.e. ~/.config/systemd/user), ExecStart naming this bcd, unless\n"
		  "          the same units are installed for every user (/etc/systemd/user,\n"
		  "          /usr/lib/systemd/user: the Debian package); enable bcd.socket\n"
		  "          (DIR/sockets.target.wants/bcd.socket, as systemctl --user enable);\n"
		  "          say what is present and enabled.  Nothing else is written: not\n"
		  "          bcd.env, not the state directory; nothing is started.\n"
		  "  check   the same, probed without writing: the units present and current\n"
		  "          (what apply would write), bcd.socket enabled, %E/bcd/bcd.env\n"
		  "          present, the socket listening, the daemon answering (bcd status;\n"
		  "          under socket activation this starts it), lingering off for this\n"
		  "          user.  What holds on stdout, one line per problem on stderr;\n"
		  "          exit 0 when all holds, 1 otherwise.\n"
		  "  print   one unit as apply writes it, on stdout.\n"
		  "\n"
		  "  --unit-dir DIR  the user's unit directory (default as above)\n"
		  "  --bcd PATH      the bcd named in ExecStart (default: this one)\n"
		  "  --socket PATH   check: the socket (default $XDG_RUNTIME_DIR/bcd/bcd.sock)\n"
		  "  --timeout S     check: how long the daemon may take to answer (default 10)\n",
		  stream);
}

/* The user's home directory: $HOME, else the password database; NULL if none. */
static const char *
home_dir(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h != NULL && h[0] == '/')
		return h;
	pw = getpwuid(getuid());
	return pw != NULL && pw->pw_dir != NULL && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
}

/* $XDG_CONFIG_HOME/sub or ~/.config/sub (what %E/sub is in a user unit); malloc'd or NULL. */
static char *
config_path(const char *sub)
{
	const char *x = getenv("XDG_CONFIG_HOME");
	const char *h;
	char	   *out = NULL;

	if (x != NULL && x[0] == '/')
		return asprintf(&out, "%s/%s", x, sub) < 0 ? NULL : out;
	h = home_dir();
	if (h == NULL)
		return NULL;
	return asprintf(&out, "%s/.config/%s", h, sub) < 0 ? NULL : out;
}

/* The unit text of name with ExecStart naming bcd; malloc'd, NULL for an unknown name. */
static char *
unit_text(const char *name, const char *bcd)
{
	const char *tmpl;
	const char *p;
	const char *hit;
	size_t		need;
	char	   *out;
	char	   *w;
	static const char key[] = "ExecStart=" SOURCE_BCD " ";

	if (strcmp(name, "bcd.socket") == 0)
		tmpl = bcd_unit_socket;
	else if (strcmp(name, "bcd.service") == 0)
		tmpl = bcd_unit_service;
	else
		return NULL;
	need = strlen(tmpl) + 1;
	for (p = tmpl; (hit = strstr(p, key)) != NULL; p = hit + 1)
		need += strlen(bcd);
	out = malloc(need);
	if (out == NULL)
		return NULL;
	w = out;
	for (p = tmpl; (hit = strstr(p, key)) != NULL; p = hit + strlen(key))
	{
		memcpy(w, p, (size_t) (hit - p));
		w += hit - p;
		w += sprintf(w, "ExecStart=%s ", bcd);
	}
	strcpy(w, p);
	return out;
}

/* This bcd's absolute path into buf (size PATH_MAX); 0 on success. */
static int
self_path(char *buf)
{
	return realpath("/proc/self/exe", buf) == NULL ? -1 : 0;
}

/* What is found of one unit. */
typedef struct unit_state
{
	char		path[PATH_MAX];	/* the unit systemd would load (empty: none) */
	int			in_user_dir;	/* path is in the user's own directory */
	int			current;		/* its text is what this bcd writes */
} unit_state;

/* Find name as systemd would (the user's directory first); fill st. */
static void
find_unit(const char *user_dir, const char *name, const char *want, unit_state *st)
{
	char	   *text = NULL;
	size_t		len = 0;
	char		p[PATH_MAX];
	int			i;

	memset(st, 0, sizeof(*st));
	for (i = -1; i < 0 || system_unit_dirs[i] != NULL; i++)
	{
		snprintf(p, sizeof(p), "%s/%s", i < 0 ? user_dir : system_unit_dirs[i], name);
		if (access(p, F_OK) != 0)
			continue;
		snprintf(st->path, sizeof(st->path), "%s", p);
		st->in_user_dir = i < 0;
		if (bcd_read_file(p, MAX_UNIT_SIZE, &text, &len) == BC_OK)
			st->current = len == strlen(want) && memcmp(text, want, len) == 0;
		free(text);
		return;
	}
}

/* The sockets.target.wants link that enables bcd.socket, if any, into link; 1 if found. */
static int
find_enabled(const char *user_dir, char *link, size_t linklen)
{
	struct stat st;

	snprintf(link, linklen, "%s/sockets.target.wants/bcd.socket", user_dir);
	if (lstat(link, &st) == 0)
		return 1;
	/* systemctl --global enable: for every user */
	snprintf(link, linklen, "%s/sockets.target.wants/bcd.socket", system_unit_dirs[0]);
	return lstat(link, &st) == 0;
}

/* mkdir -p path at mode 0755 for what it creates; 0 on success. */
static int
mkdir_p(const char *path)
{
	char		buf[PATH_MAX];
	char	   *s;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int) sizeof(buf))
		return -1;
	for (s = buf + 1; *s; s++)
	{
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* link -> target, replacing what link was, atomically; 0 on success. */
static int
symlink_atomic(const char *target, const char *link)
{
	char		tmp[PATH_MAX];

	if (snprintf(tmp, sizeof(tmp), "%s.bcd-tmp", link) >= (int) sizeof(tmp))
		return -1;
	unlink(tmp);
	if (symlink(target, tmp) != 0)
		return -1;
	if (rename(tmp, link) != 0)
	{
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* The lingering line: a warning (apply) or a problem (check); 1 if lingering is on. */
static int
linger_line(const char *cmd)
{
	char		user[256];
	char		path[PATH_MAX];
	int			l = bcd_linger_enabled(user, sizeof(user), path, sizeof(path));

	if (l == 0)
	{
		printf("lingering: off for %s (%s absent)\n", user, path);
		return 0;
	}
	if (l < 0)
		fprintf(stderr, "bcd setup %s: lingering: cannot tell for %s (%s)\n", cmd, user, path);
	else
		fprintf(stderr, "bcd setup %s: lingering: enabled for %s (%s): the node credential "
				"would stay resident while nobody is logged in, and bcd run refuses to start; "
				"loginctl disable-linger %s\n", cmd, user, path, user);
	return 1;
}

/* bcd setup apply */
static bcd_rc
setup_apply(const char *user_dir, const char *bcd)
{
	unit_state st;
	char		link[PATH_MAX];
	char		target[PATH_MAX];
	char		old[PATH_MAX];
	char	   *want;
	char	   *env;
	ssize_t		n;
	int			i;
	int			write_user = 0;

	/*
	 * Both units come from one place: the user's directory, or (both present
	 * and current there) the directory for every user.
	 */
	for (i = 0; unit_names[i] != NULL; i++)
	{
		want = unit_text(unit_names[i], bcd);
		if (want == NULL)
			return bcd_client_refuse("setup apply", BC_SOCK_FAILED, "out of memory", 0);
		find_unit(user_dir, unit_names[i], want, &st);
		if (st.path[0] == '\0' || st.in_user_dir || !st.current)
			write_user = 1;
		free(want);
	}
	for (i = 0; unit_names[i] != NULL; i++)
	{
		want = unit_text(unit_names[i], bcd);
		if (want == NULL)
			return bcd_client_refuse("setup apply", BC_SOCK_FAILED, "out of memory", 0);
		find_unit(user_dir, unit_names[i], want, &st);
		if (write_user && !(st.in_user_dir && st.current))
		{
			if (mkdir_p(user_dir) != 0 ||
				bcd_write_file_atomic(user_dir, unit_names[i], want, strlen(want), 0644) != BC_OK)
			{
				fprintf(stderr, "bcd setup apply: cannot write %s/%s: %s\n", user_dir,
						unit_names[i], strerror(errno));
				free(want);
				return BCD_RC_FAILED;
			}
			printf("%s: written: %s/%s (ExecStart %s)\n", unit_names[i], user_dir,
				   unit_names[i], bcd);
		}
		else
			printf("%s: present and current: %s\n", unit_names[i], st.path);
		free(want);
	}

	/* enable bcd.socket: sockets.target.wants/bcd.socket -> the unit */
	want = unit_text("bcd.socket", bcd);
	if (want == NULL)
		return bcd_client_refuse("setup apply", BC_SOCK_FAILED, "out of memory", 0);
	find_unit(user_dir, "bcd.socket", want, &st);
	free(want);
	snprintf(target, sizeof(target), "%s", st.path);
	snprintf(link, sizeof(link), "%s/sockets.target.wants/bcd.socket", user_dir);
	n = readlink(link, old, sizeof(old) - 1);
	if (n > 0 && (size_t) n < sizeof(old) && (old[n] = '\0', strcmp(old, target) == 0))
		printf("bcd.socket: enabled: %s -> %s\n", link, target);
	else
	{
		snprintf(old, sizeof(old), "%s/sockets.target.wants", user_dir);
		if (mkdir_p(old) != 0 || symlink_atomic(target, link) != 0)
		{
			fprintf(stderr, "bcd setup apply: cannot enable bcd.socket (%s): %s\n", link,
					strerror(errno));
			return BCD_RC_FAILED;
		}
		printf("bcd.socket: enabled now: %s -> %s\n", link, target);
	}

	env = config_path("bcd/bcd.env");
	if (env != NULL && access(env, F_OK) != 0)
		printf("note: %s is missing: bcd.service reads BCD_OPTIONS there "
			   "(bcd.env.example shows them); bcd setup writes no settings\n", env);
	free(env);
	linger_line("apply");
	printf("next: systemctl --user daemon-reload && systemctl --user start bcd.socket\n");
	return BCD_RC_OK;
}

/* bcd setup check */
static bcd_rc
setup_check(const char *user_dir, const char *bcd, const char *socket_opt, double timeout)
{
	unit_state st;
	char		link[PATH_MAX];
	char		err[512];
	char	   *want;
	char	   *env;
	char	   *path = NULL;
	json_t	   *req;
	json_t	   *answer = NULL;
	int			problems = 0;
	int			fd = -1;
	int			i;
	bcd_rc		rc;

	for (i = 0; unit_names[i] != NULL; i++)
	{
		want = unit_text(unit_names[i], bcd);
		if (want == NULL)
			return bcd_client_refuse("setup check", BC_SOCK_FAILED, "out of memory", 0);
		find_unit(user_dir, unit_names[i], want, &st);
		free(want);
		if (st.path[0] == '\0')
		{
			fprintf(stderr, "bcd setup check: %s: missing (not in %s, %s or %s; bcd setup apply)\n",
					unit_names[i], user_dir, system_unit_dirs[0], system_unit_dirs[1]);
			problems++;
		}
		else if (!st.current)
		{
			fprintf(stderr, "bcd setup check: %s: %s is not current (not what %s writes; "
					"bcd setup apply)\n", unit_names[i], st.path, bcd);
			problems++;
		}
		else
			printf("%s: present and current: %s\n", unit_names[i], st.path);
	}
	if (find_enabled(user_dir, link, sizeof(link)))
		printf("bcd.socket: enabled: %s\n", link);
	else
	{
		fprintf(stderr, "bcd setup check: bcd.socket: not enabled (no %s/sockets.target.wants/bcd.socket; "
				"bcd setup apply)\n", user_dir);
		problems++;
	}
	env = config_path("bcd/bcd.env");
	if (env == NULL || access(env, R_OK) != 0)
	{
		fprintf(stderr, "bcd setup check: bcd.env: %s missing or unreadable (bcd.service "
				"cannot start without it; see bcd.env.example)\n", env != NULL ? env : "~/.config/bcd/bcd.env");
		problems++;
	}
	else
		printf("bcd.env: present: %s\n", env);
	free(env);

	if (bcd_socket_client_path(socket_opt, &path, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd setup check: socket: %s\n", err);
		problems++;
	}
	else
	{
		switch (bcd_socket_connect(path, &fd, err, sizeof(err)))
		{
			case BCD_CONNECT_OK:
				printf("socket: listening: %s\n", path);
				close(fd);
				req = json_pack("{s:s}", "op", BC_SOCK_OP_STATUS);
				rc = req == NULL ? BCD_RC_SOFTWARE :
					bcd_client_exchange("setup check", path, req, timeout, &answer);
				json_decref(req);
				if (rc == BCD_RC_OK && json_is_true(json_object_get(answer, "ok")))
					printf("daemon: answering on %s\n", path);
				else
				{
					if (rc == BCD_RC_OK)
						bcd_client_report("setup check", answer);
					fprintf(stderr, "bcd setup check: daemon: no answer on %s within %g s "
							"(journalctl --user -u bcd.service)\n", path, timeout);
					problems++;
				}
				json_decref(answer);
				break;
			case BCD_CONNECT_UNTRUSTED:
				fprintf(stderr, "bcd setup check: socket: %s: %s\n", path, err);
				problems++;
				break;
			default:
				fprintf(stderr, "bcd setup check: socket: not listening: %s (%s; "
						"systemctl --user start bcd.socket)\n", path, err);
				problems++;
				break;
		}
	}
	free(path);
	problems += linger_line("check");
	return problems == 0 ? BCD_RC_OK : BCD_RC_FAILED;
}

/* bcd setup apply|check|print ... */
bcd_rc
bcd_cmd_setup(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"unit-dir", required_argument, NULL, 'u'},
		{"bcd", required_argument, NULL, 'b'},
		{"socket", required_argument, NULL, 'S'},
		{BC_SOCK_TIMEOUT, required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *unit_dir_opt = NULL;
	const char *bcd_opt = NULL;
	const char *socket_opt = NULL;
	const char *action;
	char		self[PATH_MAX];
	char	   *user_dir = NULL;
	char	   *text;
	double		timeout = 10;
	int			c;
	bcd_rc		rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'u': unit_dir_opt = optarg; break;
			case 'b': bcd_opt = optarg; break;
			case 'S': socket_opt = optarg; break;
			case 't':
				if (bcd_client_parse_timeout(optarg, &timeout))
				{
					fputs("bcd setup: --timeout must be seconds in (0, 86400]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'h':
				setup_usage(stdout);
				return BCD_RC_OK;
			default:
				setup_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind >= argc)
	{
		setup_usage(stderr);
		return BCD_RC_USAGE;
	}
	action = argv[optind];
	if ((strcmp(action, "print") == 0) != (optind + 2 == argc) ||
		(strcmp(action, "print") != 0 && optind + 1 != argc))
	{
		setup_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (bcd_opt != NULL && (bcd_opt[0] != '/' || strpbrk(bcd_opt, " \t\n\"'\\%$") != NULL))
	{
		fputs("bcd setup: --bcd must be an absolute path without spaces, quotes, % or $\n", stderr);
		return BCD_RC_USAGE;
	}
	if (bcd_opt == NULL)
	{
		if (self_path(self) != 0 || strpbrk(self, " \t\n\"'\\%$") != NULL)
		{
			fputs("bcd setup: cannot name this bcd in ExecStart (use --bcd PATH)\n", stderr);
			return BCD_RC_FAILED;
		}
		bcd_opt = self;
	}
	if (strcmp(action, "print") == 0)
	{
		text = unit_text(argv[optind + 1], bcd_opt);
		if (text == NULL)
		{
			fprintf(stderr, "bcd setup print: no unit \"%s\" (bcd.socket or bcd.service)\n",
					argv[optind + 1]);
			return BCD_RC_USAGE;
		}
		rc = fputs(text, stdout) >= 0 && fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_FAILED;
		free(text);
		return rc;
	}
	if (unit_dir_opt != NULL)
	{
		if (unit_dir_opt[0] != '/')
		{
			fputs("bcd setup: --unit-dir must be an absolute path\n", stderr);
			return BCD_RC_USAGE;
		}
		user_dir = strdup(unit_dir_opt);
	}
	else
		user_dir = config_path("systemd/user");
	if (user_dir == NULL)
	{
		fputs("bcd setup: no home directory to find ~/.config/systemd/user in (--unit-dir)\n", stderr);
		return BCD_RC_FAILED;
	}
	if (strcmp(action, "apply") == 0)
		rc = setup_apply(user_dir, bcd_opt);
	else if (strcmp(action, "check") == 0)
		rc = setup_check(user_dir, bcd_opt, socket_opt, timeout);
	else
	{
		setup_usage(stderr);
		rc = BCD_RC_USAGE;
	}
	free(user_dir);
	return rc;
}
