// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A FUSE file system whose one file, /mem (16 MiB), a VMM may open and map
 * once: every later open is never answered, as a hostile daemon would.
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <string.h>
#include <unistd.h>

#define SIZE (16 << 20)

static int opens;

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (!strcmp(path, "/")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (strcmp(path, "/mem"))
		return -ENOENT;
	st->st_mode = S_IFREG | 0666;
	st->st_nlink = 1;
	st->st_size = SIZE;
	return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	(void)fi;
	if (strcmp(path, "/mem"))
		return -ENOENT;
	if (__atomic_fetch_add(&opens, 1, __ATOMIC_SEQ_CST))
		for (;;)
			pause();	/* never answers */
	return 0;
}

static int fs_read(const char *path, char *buf, size_t n, off_t off,
		   struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	if (off >= SIZE)
		return 0;
	if (n > (size_t)(SIZE - off))
		n = (size_t)(SIZE - off);
	memset(buf, 0, n);
	return (int)n;
}

static int fs_write(const char *path, const char *buf, size_t n, off_t off,
		    struct fuse_file_info *fi)
{
	(void)path;
	(void)buf;
	(void)off;
	(void)fi;
	return (int)n;
}

static const struct fuse_operations ops = {
	.getattr = fs_getattr,
	.open = fs_open,
	.read = fs_read,
	.write = fs_write,
};

int main(int argc, char **argv)
{
	return fuse_main(argc, argv, &ops, NULL);
}
