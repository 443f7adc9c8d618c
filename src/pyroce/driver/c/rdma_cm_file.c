/* The file /dev/infiniband/rdma_cm as librdmacm uses it (rdma_cm.h): the system calls' libc
 * functions, interposed for that one path and the descriptors opened on it, every other call
 * passed to the next definition (libc's) at once.
 *
 * What librdmacm does with the file (rdma-core 44: librdmacm/cma.c, util/open_cdev.c): open()
 * with O_RDWR | O_CLOEXEC, fstat() expecting a character device, write() of each command,
 * poll() (and rsockets' epoll and fcntl O_NONBLOCK) on it, close(). The descriptor is a real
 * one, the channel's eventfd, so every wait works as on the kernel's file; read() of it is
 * EINVAL, as the kernel's file has no read. A socket of netlink's RDMA family is refused: there
 * librdmacm would ask the kernel for its rdma_cm device, and the kernel's answer (on a machine
 * with an RDMA stack) names a device number this file does not have; refused, librdmacm reads
 * the ABI version from sysfs (ibv_read_sysfs_file: pyroce's libibverbs answers 4), as on a
 * kernel without netlink's RDMA family. A path under sysfs's RDMA folders opens in pyroce's own
 * tree (rdma_cm_sysfs.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netlink.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "rdma_cm.h"

#define MAX_FILES 4096 /* descriptors below this can be files of ours: a table entry each */

static struct pr_cm_file files[MAX_FILES];

const struct pr_cm_file *pr_cm_file_of(int fd)
{
	if (fd < 0 || fd >= MAX_FILES || !__atomic_load_n(&files[fd].handle, __ATOMIC_ACQUIRE))
		return NULL;
	return &files[fd];
}

/* The next definition of `name` (libc's), found on first use: a constructor of ours may run after
 * another library's that already writes. */
static void *next(void **slot, const char *name)
{
	void *found = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!found) {
		found = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, found, __ATOMIC_RELEASE);
	}
	return found;
}

#define NEXT(name) ((__typeof__(&name))next(&next_##name, #name))

static void *next_open, *next_open64, *next_openat, *next_openat64, *next___open_2, *next___open64_2,
	*next___openat_2, *next___openat64_2, *next_fstat, *next_fstat64, *next_write, *next_read, *next_close,
	*next_socket;

static int is_rdma_cm(const char *path)
{
	return path && !strcmp(path, PR_CM_PATH);
}

/* A new file: the NIC's channel, its eventfd entered in the table under its number. */
static int open_file(int flags)
{
	struct pr_cm_file file;
	int fd = pr_cm_open(&file, flags);

	if (fd >= MAX_FILES) {
		pr_cm_close(fd, &file);
		NEXT(close)(fd);
		errno = EMFILE;
		return -1;
	}
	if (fd >= 0) {
		files[fd].epoch = file.epoch;
		__atomic_store_n(&files[fd].handle, file.handle, __ATOMIC_RELEASE);
	}
	return fd;
}

/* open's mode argument, there only when the flags create a file */
#define MODE(flags, last)                                                                                            \
	mode_t mode = 0;                                                                                             \
	if ((flags) & O_CREAT || ((flags) & O_TMPFILE) == O_TMPFILE) {                                               \
		va_list args;                                                                                        \
		va_start(args, last);                                                                                \
		mode = va_arg(args, mode_t);                                                                         \
		va_end(args);                                                                                        \
	}

PR_INTERPOSE int open(const char *path, int flags, ...)
{
	char buf[PATH_MAX];
	MODE(flags, flags);
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(open)(path, flags, mode);
}

PR_INTERPOSE int open64(const char *path, int flags, ...)
{
	char buf[PATH_MAX];
	MODE(flags, flags);
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(open64)(path, flags, mode);
}

/* openat: the path is absolute, so the directory does not matter */
PR_INTERPOSE int openat(int dirfd, const char *path, int flags, ...)
{
	char buf[PATH_MAX];
	MODE(flags, flags);
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(openat)(dirfd, path, flags, mode);
}

PR_INTERPOSE int openat64(int dirfd, const char *path, int flags, ...)
{
	char buf[PATH_MAX];
	MODE(flags, flags);
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(openat64)(dirfd, path, flags, mode);
}

/* _FORTIFY_SOURCE's open */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

PR_INTERPOSE int __open_2(const char *path, int flags)
{
	char buf[PATH_MAX];
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(__open_2)(path, flags);
}

PR_INTERPOSE int __open64_2(const char *path, int flags)
{
	char buf[PATH_MAX];
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(__open64_2)(path, flags);
}

PR_INTERPOSE int __openat_2(int dirfd, const char *path, int flags)
{
	char buf[PATH_MAX];
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(__openat_2)(dirfd, path, flags);
}

PR_INTERPOSE int __openat64_2(int dirfd, const char *path, int flags)
{
	char buf[PATH_MAX];
	if (is_rdma_cm(path))
		return open_file(flags);
	path = pr_sysfs_path(path, buf, sizeof buf);
	return NEXT(__openat64_2)(dirfd, path, flags);
}

/* The eventfd's own status, made the character device the kernel's file is. */
static void as_device(struct stat *st)
{
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = pr_device_file(PR_CM_PATH);
}

PR_INTERPOSE int fstat(int fd, struct stat *st)
{
	int ret = NEXT(fstat)(fd, st);

	if (!ret && pr_cm_file_of(fd))
		as_device(st);
	return ret;
}

PR_INTERPOSE int fstat64(int fd, struct stat64 *st)
{
	int ret = NEXT(fstat64)(fd, st);

	if (!ret && pr_cm_file_of(fd))
		as_device((struct stat *)st); /* the same struct on 64-bit systems */
	return ret;
}

PR_INTERPOSE ssize_t write(int fd, const void *buf, size_t count)
{
	const struct pr_cm_file *file = pr_cm_file_of(fd);

	return file ? pr_cm_write(fd, file, buf, count) : NEXT(write)(fd, buf, count);
}

PR_INTERPOSE ssize_t read(int fd, void *buf, size_t count)
{
	if (pr_cm_file_of(fd)) {
		errno = EINVAL;
		return -1;
	}
	return NEXT(read)(fd, buf, count);
}

PR_INTERPOSE int close(int fd)
{
	const struct pr_cm_file *file = pr_cm_file_of(fd);

	if (file) {
		struct pr_cm_file gone = *file;
		__atomic_store_n(&files[fd].handle, 0, __ATOMIC_RELEASE);
		pr_cm_close(fd, &gone);
	}
	return NEXT(close)(fd);
}

PR_INTERPOSE int socket(int domain, int type, int protocol)
{
	if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	return NEXT(socket)(domain, type, protocol);
}
