/* libpyroce_rdmacm.so: the kernel's rdma_cm file (/dev/infiniband/rdma_cm, ucma) for the
 * system's unmodified librdmacm, served by the shared NIC's connection manager.
 *
 * librdmacm opens the file, writes ucma commands to it (struct rdma_ucm_cmd_hdr and the command,
 * <rdma/rdma_user_cm.h>), reads the answers the kernel wrote to the commands' `response`
 * pointers, and polls the file for events. This library, preloaded (LD_PRELOAD, set by `pyroce
 * run`), stands in for that file: open() of that one path gives a real descriptor, the eventfd of
 * a channel of the NIC's CM (pyroce.cm), readable while events wait, so poll, epoll and select
 * work unmodified; write() of a command becomes the `cm_*` command of the same name on the
 * program's connection to the NIC (driver/cm_calls.py, over nic_client.c's connection in
 * pyroce's libibverbs.so.1), its answer written where the kernel would write it. Every other
 * path and descriptor passes through at once (rdma_cm_file.c).
 */
#ifndef PYROCE_RDMA_CM_H
#define PYROCE_RDMA_CM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PR_CM_PATH "/dev/infiniband/rdma_cm"
#define PR_UVERBS_PATH "/dev/infiniband/uverbs0" /* pyroce0's dev_name (devices.c) under /dev/infiniband */
#define PR_UVERBS_MAJOR 231			 /* the kernel's infiniband_verbs devices: 231:192 and on */
#define PR_UVERBS_MINOR 192
#define PR_MISC_MAJOR 10 /* the kernel's rdma_cm is a misc device */
#define PR_INTERPOSE __attribute__((visibility("default"))) /* libc's functions this library stands before */

/* One open of the file: the NIC's channel (a pyroce.driver.cm_calls.CmFile) and the connection
 * it was made on. */
struct pr_cm_file {
	uint32_t handle; /* 0: not a file of ours */
	unsigned int epoch;
};

/* rdma_cm_commands.c */
/* open(): a channel of the NIC's CM; its eventfd is the descriptor returned (O_CLOEXEC and
 * O_NONBLOCK as `flags` ask): the fd, or -1 with errno. */
int pr_cm_open(struct pr_cm_file *file, int flags);
/* write() of `len` bytes of the program's at `buf` to the file `fd`: len, or -1 with errno (what
 * the kernel's ucma_write answers). */
ssize_t pr_cm_write(int fd, const struct pr_cm_file *file, const void *buf, size_t len);
/* close(): the channel goes, and its ids with it (the NIC destroys them). */
void pr_cm_close(int fd, const struct pr_cm_file *file);

/* rdma_cm_sysfs.c: where `path` is read from: under /sys/class/infiniband, infiniband_verbs or
 * misc/rdma_cm, the same path in PYROCE_SYSFS's tree (written into `buf`); else `path`. */
const char *pr_sysfs_path(const char *path, char *buf, size_t size);

/* rdma_cm_sysfs.c: the device number of PR_UVERBS_PATH or PR_CM_PATH, or 0 for another path. */
dev_t pr_device_file(const char *path);

/* rdma_cm_file.c: the open file behind `fd`, or NULL if it is none of ours. */
const struct pr_cm_file *pr_cm_file_of(int fd);

#endif
