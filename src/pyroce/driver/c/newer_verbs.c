/* The verbs of rdma-core 45 to 65 (IBVERBS_1.15 to 1.18) that a software NIC does as it is:
 * ibv_reg_mr_ex (an MR by address, as ibv_reg_mr_iova2) and ibv_query_port_speed (the port's
 * width times its lane speed). The system's <infiniband/verbs.h> may be older than these verbs
 * (rdma-core 44 has neither), so the structs they take are rdma-core 65's, under pyroce's names,
 * and each function is bound to its public name by an assembler label, not its C name: a newer
 * header's own declaration of it never clashes. The rest of those versions answer EOPNOTSUPP
 * (newer_unsupported.c). */
#include "pyroce_verbs.h"

#include <errno.h>

/* rdma-core 65's struct ibv_mr_init_attr and its comp_mask bits (enum ibv_mr_init_attr_mask) */
struct pr_mr_init_attr {
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

enum {
	PR_REG_MR_MASK_IOVA = 1 << 0,
	PR_REG_MR_MASK_ADDR = 1 << 1,
	PR_REG_MR_MASK_FD = 1 << 2,
	PR_REG_MR_MASK_FD_OFFSET = 1 << 3,
	PR_REG_MR_MASK_DMAH = 1 << 4,
	PR_REG_MR_MASK_BUF = 1 << 5,
};

PR_EXPORT struct ibv_mr *pr_reg_mr_ex(struct ibv_pd *pd, const struct pr_mr_init_attr *attr) __asm__("ibv_reg_mr_ex");
PR_EXPORT int pr_query_port_speed(struct ibv_context *context, uint32_t port_num,
				  uint64_t *port_speed) __asm__("ibv_query_port_speed");

/* An MR of process memory: the address required, the IOVA (if given) equal to it, as
 * ibv_reg_mr_iova2 serves; a dmabuf (fd), a DMA handle or an ibv_buf is EOPNOTSUPP, as
 * ibv_reg_dmabuf_mr and ibv_alloc_dmah are here; an unknown comp_mask bit is EINVAL. */
PR_EXPORT struct ibv_mr *pr_reg_mr_ex(struct ibv_pd *pd, const struct pr_mr_init_attr *attr)
{
	uint64_t mask = attr->comp_mask;

	if (mask & ~(uint64_t)(PR_REG_MR_MASK_IOVA | PR_REG_MR_MASK_ADDR | PR_REG_MR_MASK_FD | PR_REG_MR_MASK_FD_OFFSET |
			       PR_REG_MR_MASK_DMAH | PR_REG_MR_MASK_BUF)) {
		errno = EINVAL;
		return NULL;
	}
	if (mask & (PR_REG_MR_MASK_FD | PR_REG_MR_MASK_FD_OFFSET | PR_REG_MR_MASK_DMAH | PR_REG_MR_MASK_BUF)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(mask & PR_REG_MR_MASK_ADDR)) {
		errno = EINVAL;
		return NULL;
	}
	return ibv_reg_mr_iova2(pd, attr->addr, attr->length,
				mask & PR_REG_MR_MASK_IOVA ? attr->iova : (uint64_t)(uintptr_t)attr->addr,
				(unsigned int)attr->access);
}

/* A lane's speed in Mb/s by IBV_SPEED_* (Linux's ib_speed_enum_to_int), 0 if unknown. */
static uint64_t lane_mbps(uint8_t speed)
{
	switch (speed) {
	case 1: return 2500;   /* SDR */
	case 2: return 5000;   /* DDR */
	case 4:		       /* QDR */
	case 8: return 10000;  /* FDR10 */
	case 16: return 14000; /* FDR */
	case 32: return 25000; /* EDR */
	case 64: return 50000; /* HDR */
	case 128: return 100000; /* NDR */
	case 256: return 200000; /* XDR */
	}
	return 0;
}

/* Lanes by IBV_WIDTH_* (1x, 4x, 8x, 12x, 2x), 0 if unknown. */
static uint64_t lanes(uint8_t width)
{
	switch (width) {
	case 1: return 1;
	case 2: return 4;
	case 4: return 8;
	case 8: return 12;
	case 16: return 2;
	}
	return 0;
}

/* The port's effective speed in units of 100 Mb/s (rdma-core 65's ibv_query_port_speed). */
PR_EXPORT int pr_query_port_speed(struct ibv_context *context, uint32_t port_num, uint64_t *port_speed)
{
	struct ibv_port_attr attr;
	int error;

	if (port_num > UINT8_MAX)
		return EINVAL;
	error = pr_query_port(context, (uint8_t)port_num, &attr, sizeof(attr));
	if (error)
		return error;
	*port_speed = lanes(attr.active_width) * lane_mbps(attr.active_speed) / 100;
	return 0;
}
