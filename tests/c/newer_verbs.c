/* rdma-core 65's ibv_reg_mr_ex and ibv_query_port_speed, found as a program built against it
 * binds them (dlvsym: the name at its version, IBVERBS_1.15 and 1.16), and one of IBVERBS_1.18's
 * unsupported verbs; rdma-core 65's struct ibv_mr_init_attr written out, since the system's
 * header may predate it. Prints "<what> <errno or value>" lines for tests/test_providers.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

#include "common.h"

struct mr_init_attr { /* rdma-core 65's struct ibv_mr_init_attr */
	size_t length;
	int access;
	uint64_t comp_mask;
	uint64_t iova;
	void *addr;
	int fd;
	uint64_t fd_offset;
	void *dmah;
	void *buf;
};

enum { MASK_IOVA = 1 << 0, MASK_ADDR = 1 << 1, MASK_FD = 1 << 2 };

typedef struct ibv_mr *(*reg_mr_ex_fn)(struct ibv_pd *, struct mr_init_attr *);
typedef int (*query_port_speed_fn)(struct ibv_context *, uint32_t, uint64_t *);
typedef void *(*create_comp_cntr_fn)(struct ibv_context *, void *);

static void *versioned(const char *name, const char *version)
{
	void *found = dlvsym(RTLD_DEFAULT, name, version);

	if (!found) {
		printf("missing %s@%s\n", name, version);
		exit(1);
	}
	return found;
}

int main(void)
{
	static char buf[4096];
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	reg_mr_ex_fn reg_mr_ex = (reg_mr_ex_fn)versioned("ibv_reg_mr_ex", "IBVERBS_1.15");
	query_port_speed_fn query_port_speed = (query_port_speed_fn)versioned("ibv_query_port_speed", "IBVERBS_1.16");
	create_comp_cntr_fn create_comp_cntr = (create_comp_cntr_fn)versioned("ibv_create_comp_cntr", "IBVERBS_1.18");
	struct mr_init_attr attr = {.length = sizeof(buf), .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
				    .comp_mask = MASK_ADDR | MASK_IOVA, .addr = buf, .iova = (uintptr_t)buf};
	struct ibv_port_attr port;
	struct ibv_mr *mr;
	uint64_t speed = 0;

	mr = reg_mr_ex(pd, &attr);
	report("reg_mr_ex", mr ? 0 : errno);
	if (mr)
		printf("mr addr_ok %d length %zu rkey_ok %d\n", mr->addr == buf, mr->length, mr->rkey != 0);
	if (mr)
		report("dereg_mr", ibv_dereg_mr(mr));
	attr.comp_mask = MASK_FD;
	attr.fd = 0;
	errno = 0;
	report("reg_mr_ex_fd", reg_mr_ex(pd, &attr) ? 0 : errno);
	attr.comp_mask = 0;
	report("reg_mr_ex_no_addr", reg_mr_ex(pd, &attr) ? 0 : errno);
	report("query_port_speed", query_port_speed(ctx, 1, &speed));
	report("query_port", ibv_query_port(ctx, 1, &port));
	printf("speed %llu width %u lane %u\n", (unsigned long long)speed, port.active_width, port.active_speed);
	errno = 0;
	report("create_comp_cntr", create_comp_cntr(ctx, NULL) ? 0 : errno);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
