/*
 * fuzz_peer.c: what bcd reads of a local caller's process (core/peer.c):
 * the text of /proc/PID/cgroup, whose path a process may name itself below
 * a delegated cgroup.  Whatever comes in, what comes out is NUL-terminated
 * within its buffer and printable ASCII, and a path cut to size says so.
 * (The unit is libsystemd's answer, sd_pid_get_unit: no text of ours.)
 */
#include <string.h>

#include "core/peer.h"
#include "fuzz_common.h"

/* 1 when s is NUL-terminated within len bytes and printable ASCII. */
static int
bounded_printable(const char *s, size_t len)
{
	const char *nul = memchr(s, '\0', len);

	if (nul == NULL)
		return 0;
	for (; s < nul; s++)
		if ((unsigned char) *s < 0x20 || (unsigned char) *s > 0x7e)
			return 0;
	return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		cgroup[BCD_PEER_CGROUP_MAX];
	int			cut = bcd_peer_cgroup_of((const char *) data, size, cgroup, sizeof(cgroup));

	BC_FUZZ_ASSERT(bounded_printable(cgroup, sizeof(cgroup)));
	/* a cut path is marked, and only a path that fills the buffer is cut */
	BC_FUZZ_ASSERT(!cut || strlen(cgroup) == sizeof(cgroup) - 1);
	BC_FUZZ_ASSERT(!cut || strcmp(cgroup + sizeof(cgroup) - 4, "...") == 0);
	return 0;
}
