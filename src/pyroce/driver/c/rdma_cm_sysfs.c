/* sysfs as programs read it for an RDMA device, served from a tree of pyroce's own.
 *
 * Programs find an RDMA device's netdev, GIDs and ABI versions under /sys/class/infiniband,
 * /sys/class/infiniband_verbs and /sys/class/misc/rdma_cm (rdma-core's tests pick their IP
 * address from /sys/class/infiniband/<dev>/device/net/). pyroce's device is no kernel device, so
 * `pyroce run` writes what Linux would show for it into a folder of its own (driver/sysfs.py) and
 * names it in PYROCE_SYSFS; these functions read a path under those three folders from there
 * instead, nothing is written under /sys, and every other path passes through untouched. The
 * open() family consults pr_sysfs_path too (rdma_cm_file.c). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

struct statx;
SERVE(int, stat, (const char *path, struct stat *st), (path, st))
SERVE(int, stat64, (const char *path, struct stat64 *st), (path, st))
SERVE(int, lstat, (const char *path, struct stat *st), (path, st))
SERVE(int, lstat64, (const char *path, struct stat64 *st), (path, st))
SERVE(int, __xstat, (int ver, const char *path, struct stat *st), (ver, path, st))
SERVE(int, __xstat64, (int ver, const char *path, struct stat64 *st), (ver, path, st))
SERVE(int, __lxstat, (int ver, const char *path, struct stat *st), (ver, path, st))
SERVE(int, __lxstat64, (int ver, const char *path, struct stat64 *st), (ver, path, st))
SERVE(int, fstatat, (int dirfd, const char *path, struct stat *st, int flags), (dirfd, path, st, flags))
SERVE(int, fstatat64, (int dirfd, const char *path, struct stat64 *st, int flags), (dirfd, path, st, flags))
SERVE(int, statx, (int dirfd, const char *path, int flags, unsigned int mask, struct statx *st),
      (dirfd, path, flags, mask, st))
SERVE(int, access, (const char *path, int mode), (path, mode))
SERVE(int, faccessat, (int dirfd, const char *path, int mode, int flags), (dirfd, path, mode, flags))
SERVE(DIR *, opendir, (const char *path), (path))
SERVE(ssize_t, readlink, (const char *path, char *out, size_t size), (path, out, size))
SERVE(ssize_t, getxattr, (const char *path, const char *name, void *value, size_t size), (path, name, value, size))
SERVE(ssize_t, lgetxattr, (const char *path, const char *name, void *value, size_t size), (path, name, value, size))
