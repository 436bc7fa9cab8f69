/*
 * cmd.h: bcd's subcommands, one file each in src/agent/cmd/, each a thin
 * command line over src/agent/core/.  main.c dispatches to them and turns
 * their outcome into the exit status.
 */
#ifndef BCD_CMD_H
#define BCD_CMD_H

#include "core/outcome.h"

bcd_rc		bcd_cmd_join_request(int argc, char **argv);	/* join_request.c */
bcd_rc		bcd_cmd_verify_response(int argc, char **argv); /* verify_response.c */
bcd_rc		bcd_cmd_run(int argc, char **argv); /* run.c */
bcd_rc		bcd_cmd_renew(int argc, char **argv);	/* renew.c */
bcd_rc		bcd_cmd_credential(int argc, char **argv);	/* credential.c */
bcd_rc		bcd_cmd_status(int argc, char **argv);	/* status.c */
bcd_rc		bcd_cmd_tpm_evidence(int argc, char **argv);	/* tpm_evidence.c */
bcd_rc		bcd_cmd_sign_discovery(int argc, char **argv);	/* sign_discovery.c */
bcd_rc		bcd_cmd_serve_discovery(int argc, char **argv);	/* serve_discovery.c */
bcd_rc		bcd_cmd_ramdisk(int argc, char **argv);	/* ramdisk.c */
bcd_rc		bcd_cmd_setup(int argc, char **argv);	/* setup.c */

/* The command line of bcd run (renew_cmd 0) and bcd renew (1), then the daemon. */
bcd_rc		bcd_run_command(int argc, char **argv, int renew_cmd);

#endif							/* BCD_CMD_H */
