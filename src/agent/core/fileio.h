/*
 * fileio.h: bounded reads and atomic writes of the agent's files.
 */
#ifndef BCD_FILEIO_H
#define BCD_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* A directory, by device and inode. */
typedef struct bcd_dir_id
{
	dev_t		dev;
	ino_t		ino;
} bcd_dir_id;

int			bcd_read_file(const char *path, size_t max, char **out, size_t *len);
int			bcd_read_file_at(int dirfd, const char *name, size_t max, char **out, size_t *len);
int			bcd_ensure_dir(const char *path);
int			bcd_write_all(int fd, const void *data, size_t len);
int			bcd_write_file_atomic(const char *dir, const char *name,
								  const void *data, size_t len, mode_t mode);
char	   *bcd_path_join(const char *dir, const char *name);

#endif							/* BCD_FILEIO_H */
