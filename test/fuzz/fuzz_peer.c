/*
 * fuzz_peer.c: what bcd reads of a local caller's process (core/peer.c):
 * the text of /proc/PID/cgroup, whose path a process may name itself below
 * a delegated cgroup, and the unit taken from it.  Whatever comes in, what
 * comes out is NUL-terminated within its buffer and printable ASCII.
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

/* 1 when s ends in suffix. */
static int
ends_with(const char *s, const char *suffix)
{
	size_t		n = strlen(s);
	size_t		m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		cgroup[BCD_PEER_CGROUP_MAX];
	char		unit[BCD_PEER_UNIT_MAX];

	bcd_peer_cgroup_of((const char *) data, size, cgroup, sizeof(cgroup));
	BC_FUZZ_ASSERT(bounded_printable(cgroup, sizeof(cgroup)));
	bcd_peer_unit_of(cgroup, unit, sizeof(unit));
	BC_FUZZ_ASSERT(bounded_printable(unit, sizeof(unit)));
	/* a unit is a whole component ending in .service or .scope, or one cut to size ("...") */
	BC_FUZZ_ASSERT(unit[0] == '\0' || strchr(unit, '/') == NULL);
	BC_FUZZ_ASSERT(unit[0] == '\0' || ends_with(unit, ".service") || ends_with(unit, ".scope") ||
				   ends_with(unit, "..."));
	return 0;
}
