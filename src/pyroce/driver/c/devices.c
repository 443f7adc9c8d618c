/* The device list, contexts and what they report: pyroce0, its attributes, port and GID
 * table as pyroce.verbs reports them (commands to the shared NIC), and its asynchronous events. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_user_cm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef ibv_get_device_list
#undef ibv_query_port

/* Not in the public header: libibverbs' private ibv_query_gid_type (driver.h), which
 * ibv_devinfo and pyverbs call. */
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };
PR_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
				 enum ibv_gid_type_sysfs *type);

unsigned int pr_generation;

static void count_fork(void)
{
	__atomic_add_fetch(&pr_generation, 1, __ATOMIC_RELAXED);
}

/* Registered as the library loads, before any context can be opened. */
__attribute__((constructor)) static void watch_forks(void)
{
	pthread_atfork(NULL, NULL, count_fork);
}

int pr_forked(void)
{
	static int told;

	if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
		fputs("pyroce: a child of fork() cannot use its parent's verbs objects: open the device again\n", stderr);
	return EIO;
}

static struct ibv_device pyroce0 = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "pyroce0",
	.dev_name = "uverbs0", /* as rxe's first: /dev/infiniband/uverbs0 (rdma_cm_sysfs.c) */
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",  /* pyroce's tree (driver/sysfs.py) */
	.ibdev_path = "/sys/class/infiniband/pyroce0",
};

bool pr_own_device(const struct ibv_device *device)
{
	return device == &pyroce0;
}

PR_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &pyroce0;
	if (num_devices)
		*num_devices = 1;
	return list;
}

PR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

PR_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

PR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return -1; /* no kernel device, so no index */
}

PR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct pr_answer answer;
	uint64_t value = 0;

	if (pr_command(&answer, NULL, "ibv_get_device_guid", "node_guid", "s", device->name))
		return 0;
	pr_unpack(&answer, "K", &value);
	pr_answer_free(&answer);
	return htobe64(value);
}

/* PYROCE_PRINT_STATS=1: the contexts open now, so that a program that exits without closing
 * its device (after a failed completion, say) still prints what pyroce saw, at exit. */
#define PR_OPEN_MAX 64
static struct pr_context *open_contexts[PR_OPEN_MAX];
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

static int print_stats_on(void)
{
	const char *print_stats = getenv("PYROCE_PRINT_STATS");
	return print_stats && !strcmp(print_stats, "1");
}

/* The shared device outlives the program: its counters now, as a device of the program's own
 * would print them as it closed. */
static void print_summary(struct pr_context *ctx)
{
	struct pr_answer answer;

	if (pr_command(&answer, ctx, "ibv_close_device", "summary", "h", ctx->handle))
		return;
	if (answer.value->tag == 's')
		fprintf(stderr, "%.*s\n", (int)answer.value->count, (const char *)answer.value->bytes);
	pr_answer_free(&answer);
}

static void print_open_at_exit(void)
{
	pthread_mutex_lock(&open_lock);
	for (int i = 0; i < PR_OPEN_MAX; i++)
		if (open_contexts[i] && open_contexts[i]->generation == __atomic_load_n(&pr_generation, __ATOMIC_RELAXED))
			print_summary(open_contexts[i]);
	pthread_mutex_unlock(&open_lock);
}

/* Note `ctx` opened (`open`) or closed; whether its counters are to be printed (closing). */
static int remember_open(struct pr_context *ctx, int open)
{
	static int registered;
	int found = 0;

	if (!print_stats_on())
		return 0;
	pthread_mutex_lock(&open_lock);
	if (open && !registered)
		registered = !atexit(print_open_at_exit);
	for (int i = 0; i < PR_OPEN_MAX && !found; i++)
		if (open_contexts[i] == (open ? NULL : ctx)) {
			open_contexts[i] = open ? ctx : NULL;
			found = 1;
		}
	pthread_mutex_unlock(&open_lock);
	return 1;
}

PR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct pr_answer answer;
	struct pr_context *ctx;
	uint32_t handle;
	int doorbell_fd, async_fd, error;

	if (pr_command(&answer, NULL, "ibv_open_device", "open_context", "s", device->name))
		return NULL;
	error = pr_unpack(&answer, "hff", &handle, &doorbell_fd, &async_fd);
	pr_answer_free(&answer);
	ctx = error ? NULL : calloc(1, sizeof(*ctx));
	if (!ctx) {
		if (!error) {
			pr_run(NULL, "ibv_open_device", "close_context", "h", handle);
			close(doorbell_fd);
			close(async_fd);
		}
		errno = error ? error : ENOMEM;
		return NULL;
	}
	ctx->handle = handle;
	ctx->epoch = answer.epoch;
	ctx->doorbell_fd = doorbell_fd;
	ctx->generation = __atomic_load_n(&pr_generation, __ATOMIC_RELAXED);
	pthread_mutex_init(&ctx->lock, NULL);
	ctx->vctx.sz = sizeof(ctx->vctx);
	ctx->vctx.query_port = pr_query_port;
	ctx->vctx.query_device_ex = pr_query_device_ex;
	ctx->vctx.advise_mr = pr_advise_mr;
	ctx->vctx.create_qp_ex = pr_create_qp_ex;
	ctx->vctx.create_cq_ex = pr_create_cq_ex;
	struct ibv_context *context = &ctx->vctx.context;
	context->device = device;
	context->ops.poll_cq = pr_poll_cq;
	context->ops.req_notify_cq = pr_req_notify_cq;
	context->ops.post_send = pr_post_send;
	context->ops.post_recv = pr_post_recv;
	context->ops.post_srq_recv = pr_post_srq_recv;
	context->ops.alloc_mw = pr_alloc_mw;
	context->ops.bind_mw = pr_bind_mw;
	context->ops.dealloc_mw = pr_dealloc_mw;
	/* no kernel file to command: a descriptor that stands for one, so a program may dup or
	 * hand it on as it would the uverbs file; ibv_import_device answers it EOPNOTSUPP */
	context->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	context->async_fd = async_fd;
	context->num_comp_vectors = 1;
	pthread_mutex_init(&context->mutex, NULL);
	context->abi_compat = __VERBS_ABI_IS_EXTENDED;
	remember_open(ctx, 1);
	return context;
}

PR_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct pr_context *ctx = pr_ctx(context);

	/* A child of fork() closes its copies only: the context is its parent's, on the NIC. */
	if (ctx->generation == __atomic_load_n(&pr_generation, __ATOMIC_RELAXED)) {
		/* the shared device outlives the program: its counters now, as a device of the
		 * program's own would print them as it closed */
		if (remember_open(ctx, 0))
			print_summary(ctx);
		pr_run(ctx, "ibv_close_device", "close_context", "h", ctx->handle);
	}
	pthread_mutex_destroy(&ctx->lock);
	close(ctx->doorbell_fd); /* this process's copies of the NIC's descriptors */
	close(context->async_fd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	free(ctx);
	return 0;
}

/* One query of the context's (port, index): 0 with the answer, or the errno. */
static int query(struct pr_answer *answer, const char *verb, const char *command, struct ibv_context *context,
		 int port, int index)
{
	struct pr_context *ctx = pr_ctx(context);

	return pr_command(answer, ctx, verb, command, "hii", ctx->handle, port, index);
}

#define FIELD(attr, found, name) ((attr)->name = pr_u64(pr_field(found, #name)))

PR_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	const struct pr_value *found;

	if (pr_command(&answer, ctx, "ibv_query_device", "query_device", "h", ctx->handle))
		return errno;
	found = answer.value;
	memset(attr, 0, sizeof(*attr));
	pr_text(pr_field(found, "fw_ver"), attr->fw_ver, sizeof(attr->fw_ver));
	attr->node_guid = htobe64(pr_u64(pr_field(found, "node_guid")));
	attr->sys_image_guid = htobe64(pr_u64(pr_field(found, "sys_image_guid")));
	attr->atomic_cap = pr_u64(pr_field(found, "atomic_caps"));
	FIELD(attr, found, max_mr_size);
	FIELD(attr, found, page_size_cap);
	FIELD(attr, found, vendor_id);
	FIELD(attr, found, vendor_part_id);
	FIELD(attr, found, hw_ver);
	FIELD(attr, found, max_qp);
	FIELD(attr, found, max_qp_wr);
	FIELD(attr, found, device_cap_flags);
	FIELD(attr, found, max_sge);
	FIELD(attr, found, max_sge_rd);
	FIELD(attr, found, max_cq);
	FIELD(attr, found, max_cqe);
	FIELD(attr, found, max_mr);
	FIELD(attr, found, max_pd);
	FIELD(attr, found, max_qp_rd_atom);
	FIELD(attr, found, max_ee_rd_atom);
	FIELD(attr, found, max_res_rd_atom);
	FIELD(attr, found, max_qp_init_rd_atom);
	FIELD(attr, found, max_ee_init_rd_atom);
	FIELD(attr, found, max_ee);
	FIELD(attr, found, max_rdd);
	FIELD(attr, found, max_mw);
	FIELD(attr, found, max_raw_ipv6_qp);
	FIELD(attr, found, max_raw_ethy_qp);
	FIELD(attr, found, max_mcast_grp);
	FIELD(attr, found, max_mcast_qp_attach);
	FIELD(attr, found, max_total_mcast_qp_attach);
	FIELD(attr, found, max_ah);
	FIELD(attr, found, max_fmr);
	FIELD(attr, found, max_map_per_fmr);
	FIELD(attr, found, max_srq);
	FIELD(attr, found, max_srq_wr);
	FIELD(attr, found, max_srq_sge);
	FIELD(attr, found, max_pkeys);
	FIELD(attr, found, local_ca_ack_delay);
	FIELD(attr, found, phys_port_cnt);
	pr_answer_free(&answer);
	return 0;
}

/* verbs_context.query_port, what ibv_query_port (the header's inline) calls: the first
 * `size` bytes of the program's ibv_port_attr (an older program's is shorter). */
int pr_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *out, size_t size)
{
	struct pr_context *ctx = pr_ctx(context);
	struct ibv_port_attr attr = {0};
	struct pr_answer answer;
	const struct pr_value *found;

	if (pr_command(&answer, ctx, "ibv_query_port", "query_port", "hi", ctx->handle, port_num))
		return errno;
	found = answer.value;
	FIELD(&attr, found, state);
	FIELD(&attr, found, max_mtu);
	FIELD(&attr, found, active_mtu);
	FIELD(&attr, found, gid_tbl_len);
	FIELD(&attr, found, port_cap_flags);
	FIELD(&attr, found, max_msg_sz);
	FIELD(&attr, found, bad_pkey_cntr);
	FIELD(&attr, found, qkey_viol_cntr);
	FIELD(&attr, found, pkey_tbl_len);
	FIELD(&attr, found, lid);
	FIELD(&attr, found, sm_lid);
	FIELD(&attr, found, lmc);
	FIELD(&attr, found, max_vl_num);
	FIELD(&attr, found, sm_sl);
	FIELD(&attr, found, subnet_timeout);
	FIELD(&attr, found, init_type_reply);
	FIELD(&attr, found, active_width);
	FIELD(&attr, found, active_speed);
	FIELD(&attr, found, phys_state);
	FIELD(&attr, found, link_layer);
	FIELD(&attr, found, flags);
	FIELD(&attr, found, port_cap_flags2);
	pr_answer_free(&answer);
	memcpy(out, &attr, size < sizeof(attr) ? size : sizeof(attr));
	return 0;
}

/* The exported ibv_query_port, for programs built before the header made it an inline: their
 * struct ends at `flags` (libibverbs' _compat_ibv_port_attr). */
PR_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *attr)
{
	return pr_query_port(context, port_num, (struct ibv_port_attr *)attr,
			     offsetof(struct ibv_port_attr, port_cap_flags2));
}

PR_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	struct pr_answer answer;
	union ibv_gid found;
	int error;

	if (query(&answer, "ibv_query_gid", "query_gid", context, port_num, index))
		return -1;
	error = pr_unpack(&answer, "y", found.raw, sizeof(found.raw));
	pr_answer_free(&answer);
	if (error)
		return -1;
	*gid = found;
	return 0;
}

PR_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
				 enum ibv_gid_type_sysfs *type)
{
	struct pr_answer answer;
	uint32_t found;
	int error;

	if (query(&answer, "ibv_query_gid_type", "query_gid_type", context, port_num, (int)index))
		return -1;
	error = pr_unpack(&answer, "I", &found);
	pr_answer_free(&answer);
	if (error)
		return -1;
	*type = found;
	return 0;
}

/* One GID entry: 0, or the errno. */
static int gid_entry(struct ibv_context *context, uint32_t port_num, uint32_t index, struct ibv_gid_entry *entry)
{
	struct pr_answer answer;
	uint32_t gid_type, ifindex;
	int error;

	if (query(&answer, "ibv_query_gid_ex", "query_gid_entry", context, (int)port_num, (int)index))
		return errno;
	memset(entry, 0, sizeof(*entry));
	error = pr_unpack(&answer, "yII", entry->gid.raw, sizeof(entry->gid.raw), &gid_type, &ifindex);
	pr_answer_free(&answer);
	if (error)
		return error;
	entry->gid_index = index;
	entry->port_num = port_num;
	entry->gid_type = gid_type;
	entry->ndev_ifindex = ifindex;
	return 0;
}

PR_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry found;
	int ret;

	if (flags)
		return EOPNOTSUPP;
	ret = gid_entry(context, port_num, gid_index, &found);
	if (!ret)
		memcpy(entry, &found, entry_size < sizeof(found) ? entry_size : sizeof(found));
	return ret;
}

PR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
				       size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	uint32_t length;
	ssize_t count = -1;
	int ret = 0;

	if (flags)
		return -EOPNOTSUPP;
	ret = pr_command(&answer, ctx, "ibv_query_gid_table", "gid_table_len", "h", ctx->handle);
	if (!ret) {
		ret = pr_unpack(&answer, "I", &length);
		pr_answer_free(&answer);
		count = length;
	}
	if (ret)
		;
	else if ((size_t)count > max_entries)
		ret = EINVAL;
	for (ssize_t i = 0; !ret && i < count; i++) {
		struct ibv_gid_entry found;
		ret = gid_entry(context, 1, i, &found);
		if (!ret)
			memcpy((uint8_t *)entries + i * entry_size, &found,
			       entry_size < sizeof(found) ? entry_size : sizeof(found));
	}
	return ret ? -ret : count;
}

PR_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	struct pr_answer answer;
	uint32_t found;
	int error;

	if (query(&answer, "ibv_query_pkey", "query_pkey", context, port_num, index))
		return -1;
	error = pr_unpack(&answer, "I", &found);
	pr_answer_free(&answer);
	if (error)
		return -1;
	*pkey = htobe16(found);
	return 0;
}

PR_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	__be16 found;

	if (ibv_query_pkey(context, port_num, 0, &found))
		return -1;
	return (found & htobe16(0x7fff)) == (pkey & htobe16(0x7fff)) ? 0 : -1;
}

PR_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	int type, element, error = pr_stale(ctx); /* a child of fork(): no wait on the parent's fd */

	if (error) {
		errno = error;
		return -1;
	}
	do { /* the wait here (pr_wait_event), then a command that never waits */
		if (pr_wait_event(context->async_fd))
			return -1;
		error = pr_command(&answer, ctx, "ibv_get_async_event", "get_async_event", "h", ctx->handle);
		if (!error) {
			error = pr_unpack(&answer, "ii", &type, &element);
			pr_answer_free(&answer);
		}
	} while (error == EAGAIN && !pr_nonblocking(context->async_fd)); /* another thread took it */
	if (error) {
		errno = error;
		return -1;
	}
	event->event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = (struct ibv_cq *)pr_find_cq(ctx, element);
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		event->element.qp = (struct ibv_qp *)pr_find_qp(ctx, element);
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = (struct ibv_srq *)pr_find_srq(ctx, element);
		break;
	default:
		event->element.port_num = element;
	}
	return 0;
}

PR_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	/* Destroying an object never waits for its events in pyroce: nothing to count. */
}

PR_EXPORT int ibv_fork_init(void)
{
	return 0; /* MRs are plain memory: a child's copy-on-write pages never reach the NIC */
}

PR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

PR_EXPORT const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

/* pyroce0 has no sysfs: what a program reads there it does without, but for the ABI of the
 * rdma_cm file, which libpyroce_rdmacm.so serves (librdmacm reads it when the kernel's netlink
 * does not answer: rdma_cm_file.c). As libibverbs' own: the text without its newline, its length. */
PR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	if (strcmp(dir, ibv_get_sysfs_path()) || strcmp(file, "class/misc/rdma_cm/abi_version")) {
		errno = ENOENT;
		return -1;
	}
	snprintf(buf, size, "%d", RDMA_USER_CM_ABI_VERSION);
	return size ? (int)strlen(buf) : 0;
}

