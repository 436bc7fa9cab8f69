/*
 * renew.c: `bcd renew --once`: one renewal now, the same as `bcd run
 * --renew-now --once` (the command line is run.c's; the renewal
 * core/renewal.c's).
 */
#include "cmd/cmd.h"

/* bcd renew --once ... */
bcd_rc
bcd_cmd_renew(int argc, char **argv)
{
	return bcd_run_command(argc, argv, 1);
}
