/*
 * files.h: files mode of the Workload API (files.c; docs/agent.md, "Files
 * mode"): a session identity's X509-SVID, key, bundle and CRL kept in a
 * directory (--svid-files), a reload command run after each change
 * (--svid-files-reload).
 */
#ifndef BCD_WL_FILES_H
#define BCD_WL_FILES_H

#include <stddef.h>

#include "core/agent.h"

struct bcd_workload;
typedef struct bcd_wl_files bcd_wl_files;

/*
 * --svid-files and --svid-files-reload as given, their syntax only (bcd
 * run's option check): NULL, or what is wrong.
 */
const char *bcd_wl_files_check(const char *const *files, int n_files,
							   const char *const *reloads, int n_reloads);
/*
 * Open and check every DIR and EXECUTABLE, hold every identity (nothing
 * runs yet): BC_OK with *out (NULL without --svid-files), or BC_EINVAL with
 * err (bcd refuses to start).
 */
int			bcd_wl_files_start(struct bcd_workload *w, const bcd_run_opts *o,
							   bcd_wl_files **out, char *err, size_t errlen);
/* Start its thread (after the Workload API's). */
void		bcd_wl_files_run(bcd_wl_files *f);
/* Stop its thread (a reload running is killed at once). */
void		bcd_wl_files_stop(bcd_wl_files *f);
/* Free it (stopped first). */
void		bcd_wl_files_free(bcd_wl_files *f);

#endif							/* BCD_WL_FILES_H */
