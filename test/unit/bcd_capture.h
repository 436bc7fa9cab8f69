/*
 * bcd_capture.h: what bcd's log (core/log.c: one line on stderr per event)
 * said while a unit test ran code that logs: stderr sent to a temporary
 * file and read back.  Shared by test/unit/test_bcd_*.c.
 */
#ifndef BCD_CAPTURE_H
#define BCD_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where stderr goes while captured, and where it went before. */
typedef struct bcd_capture
{
	FILE	   *file;
	int			saved;
} bcd_capture;

/* Send stderr to a new temporary file; 0, or -1. */
static inline int
bcd_capture_start(bcd_capture *c)
{
	fflush(stderr);
	c->file = tmpfile();
	c->saved = dup(STDERR_FILENO);
	if (c->file == NULL || c->saved < 0 || dup2(fileno(c->file), STDERR_FILENO) < 0)
		return -1;
	return 0;
}

/* stderr back as it was; what was written meanwhile (malloc()ed, NUL-terminated), or NULL. */
static inline char *
bcd_capture_end(bcd_capture *c)
{
	long		n;
	char	   *text = NULL;

	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	n = ftell(c->file);
	if (n >= 0 && (text = calloc(1, (size_t) n + 1)) != NULL)
	{
		rewind(c->file);
		if (fread(text, 1, (size_t) n, c->file) != (size_t) n)
			text[0] = '\0';
	}
	fclose(c->file);
	return text;
}

#endif							/* BCD_CAPTURE_H */
