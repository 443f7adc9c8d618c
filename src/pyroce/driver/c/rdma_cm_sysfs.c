/* sysfs as programs read it for an RDMA device, served from a tree of pyroce's own.
 *
 * Programs find an RDMA device's netdev, GIDs and ABI versions under /sys/class/infiniband,
 * /sys/class/infiniband_verbs and /sys/class/misc/rdma_cm (rdma-core's tests pick their IP
 * address from /sys/class/infiniband/<dev>/device/net/). pyroce's device is no kernel device, so
 * `pyroce run` writes what Linux would show for it into a folder of its own (driver/sysfs.py) and
 * names it in PYROCE_SYSFS; these functions read a path under those three folders from there
 * instead, nothing is written under /sys, and every other path passes through untouched. The
 * open() family consults pr_sysfs_path too (rdma_cm_file.c).
 *
 * The device's files under /dev/infiniband are there too, for a program that looks before it
 * opens (UCX lists only a device whose /dev/infiniband/<dev_name> is a character device it may
 * read and write): the stat() family answers for uverbs0 and rdma_cm what it answers for
 * /dev/null, a character device everyone may read and write, with the kernel's device number
 * (infiniband_verbs' 231:192, the misc device rdma_cm), and access() lets it read and write. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "rdma_cm.h"

static const char *const SERVED[] = {"/sys/class/infiniband", "/sys/class/infiniband_verbs", "/sys/class/misc/rdma_cm"};

const char *pr_sysfs_path(const char *path, char *buf, size_t size)
{
	const char *root;
	size_t i;

	if (!path || strncmp(path, "/sys/class/", 11))
		return path;
	for (i = 0; i < sizeof(SERVED) / sizeof(SERVED[0]); i++) {
		size_t len = strlen(SERVED[i]);

		if (!strncmp(path, SERVED[i], len) && (path[len] == '\0' || path[len] == '/'))
			break;
	}
	root = getenv("PYROCE_SYSFS");
	if (i == sizeof(SERVED) / sizeof(SERVED[0]) || !root || !*root)
		return path;
	if ((size_t)snprintf(buf, size, "%s%s", root, path + strlen("/sys")) >= size)
		return path;
	return buf;
}

/* The device number of one of pyroce0's files under /dev/infiniband, or 0 for any other path. */
dev_t pr_device_file(const char *path)
{
	if (!path)
		return 0;
	if (!strcmp(path, PR_UVERBS_PATH))
		return makedev(PR_UVERBS_MAJOR, PR_UVERBS_MINOR);
	if (!strcmp(path, PR_CM_PATH))
		return makedev(PR_MISC_MAJOR, 0);
	return 0;
}

/* one interposer per libc function that takes a path: the path read from our tree if served */
#define SERVE(ret, name, params, args)                                                                               \
	PR_INTERPOSE ret name params                                                                                 \
	{                                                                                                            \
		static ret(*next_fn) params;                                                                         \
		char buf[PATH_MAX];                                                                                  \
		if (!next_fn)                                                                                        \
			next_fn = (ret(*) params)dlsym(RTLD_NEXT, #name);                                            \
		path = pr_sysfs_path(path, buf, sizeof buf);                                                         \
		return next_fn args;                                                                                 \
	}

/* the stat() family: a device file's status is /dev/null's with the device's number (`rdev` sets it) */
#define SERVE_STAT(name, params, args, rdev)                                                                         \
	PR_INTERPOSE int name params                                                                                 \
	{                                                                                                            \
		static int(*next_fn) params;                                                                         \
		char buf[PATH_MAX];                                                                                  \
		dev_t device = pr_device_file(path);                                                                 \
		int ret;                                                                                             \
		if (!next_fn)                                                                                        \
			next_fn = (int(*) params)dlsym(RTLD_NEXT, #name);                                            \
		path = device ? "/dev/null" : pr_sysfs_path(path, buf, sizeof buf);                                  \
		ret = next_fn args;                                                                                  \
		if (!ret && device)                                                                                  \
			rdev;                                                                                        \
		return ret;                                                                                          \
	}

#define STAT_RDEV (st->st_rdev = device)
#define STATX_RDEV (st->stx_rdev_major = major(device), st->stx_rdev_minor = minor(device))

SERVE_STAT(stat, (const char *path, struct stat *st), (path, st), STAT_RDEV)
SERVE_STAT(stat64, (const char *path, struct stat64 *st), (path, st), STAT_RDEV)
SERVE_STAT(lstat, (const char *path, struct stat *st), (path, st), STAT_RDEV)
SERVE_STAT(lstat64, (const char *path, struct stat64 *st), (path, st), STAT_RDEV)
SERVE_STAT(__xstat, (int ver, const char *path, struct stat *st), (ver, path, st), STAT_RDEV)
SERVE_STAT(__xstat64, (int ver, const char *path, struct stat64 *st), (ver, path, st), STAT_RDEV)
SERVE_STAT(__lxstat, (int ver, const char *path, struct stat *st), (ver, path, st), STAT_RDEV)
SERVE_STAT(__lxstat64, (int ver, const char *path, struct stat64 *st), (ver, path, st), STAT_RDEV)
SERVE_STAT(fstatat, (int dirfd, const char *path, struct stat *st, int flags), (dirfd, path, st, flags), STAT_RDEV)
SERVE_STAT(fstatat64, (int dirfd, const char *path, struct stat64 *st, int flags), (dirfd, path, st, flags),
	   STAT_RDEV)
SERVE_STAT(statx, (int dirfd, const char *path, int flags, unsigned int mask, struct statx *st),
	   (dirfd, path, flags, mask, st), STATX_RDEV)
/* access(): a device file may be read and written (/dev/null's answer: not executed) */
SERVE_STAT(access, (const char *path, int mode), (path, mode), (void)0)
SERVE_STAT(faccessat, (int dirfd, const char *path, int mode, int flags), (dirfd, path, mode, flags), (void)0)
SERVE(DIR *, opendir, (const char *path), (path))
SERVE(ssize_t, readlink, (const char *path, char *out, size_t size), (path, out, size))
SERVE(ssize_t, getxattr, (const char *path, const char *name, void *value, size_t size), (path, name, value, size))
SERVE(ssize_t, lgetxattr, (const char *path, const char *name, void *value, size_t size), (path, name, value, size))
