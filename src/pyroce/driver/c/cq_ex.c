/* Extended CQs from C: ibv_create_cq_ex (pyroce.verbs.cq_ex's checks: the standard wc_flags
 * rxe offers, no parent domain; then the CQ ibv_create_cq makes) and the ibv_cq_ex poll
 * functions. start_poll and next_poll take one completion with the data path's poll_cq (its
 * consumer published at once, its naps on empty polls) into the CQ's current WC, which the
 * read_* functions answer from; end_poll has nothing left to hand back. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <stdlib.h>

static struct ibv_wc *current(struct ibv_cq_ex *cq)
{
	return ((struct pr_cq *)cq)->current;
}

/* One completion made current: 0, or ENOENT when there is none (returned, as libmlx5 does). */
static int next_poll(struct ibv_cq_ex *cq)
{
	struct ibv_wc *wc = current(cq);
	int found = pr_poll_cq(ibv_cq_ex_to_cq(cq), 1, wc);

	if (found != 1)
		return found < 0 ? errno : ENOENT;
	cq->status = wc->status;
	cq->wr_id = wc->wr_id;
	return 0;
}

static int start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	return attr && attr->comp_mask ? EINVAL : next_poll(cq);
}

static void end_poll(struct ibv_cq_ex *cq)
{
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cq)
{
	return current(cq)->opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *cq)
{
	return current(cq)->vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cq)
{
	return current(cq)->byte_len;
}

/* The immediate (network order) or, with IBV_WC_WITH_INV, the invalidated rkey (host order,
 * as ibv_wc_read_invalidated_rkey reads it): the WC's union holds each so. */
static __be32 read_imm_data(struct ibv_cq_ex *cq)
{
	return current(cq)->imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *cq)
{
	return current(cq)->qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *cq)
{
	return current(cq)->src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *cq)
{
	return current(cq)->wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *cq)
{
	return current(cq)->slid;
}

static uint8_t read_sl(struct ibv_cq_ex *cq)
{
	return current(cq)->sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cq)
{
	return current(cq)->dlid_path_bits;
}

struct ibv_cq_ex *pr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	int parent_domain = attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD && attr->parent_domain;

	if (pr_run(pr_ctx(context), "ibv_create_cq_ex", "check_cq_ex", "Ki", (unsigned long long)attr->wc_flags,
		   parent_domain))
		return NULL;
	struct ibv_wc *wc = calloc(1, sizeof(*wc));
	struct ibv_cq *ibcq = wc ? ibv_create_cq(context, (int)attr->cqe, attr->cq_context, attr->channel,
						(int)attr->comp_vector)
				 : NULL;
	if (!ibcq) {
		if (!wc)
			errno = ENOMEM;
		free(wc);
		return NULL;
	}
	struct pr_cq *cq = (struct pr_cq *)ibcq;
	struct ibv_cq_ex *cqx = &cq->cq_ex;
	cq->current = wc;
	cqx->start_poll = start_poll;
	cqx->next_poll = next_poll;
	cqx->end_poll = end_poll;
	cqx->read_opcode = read_opcode;
	cqx->read_vendor_err = read_vendor_err;
	cqx->read_byte_len = read_byte_len;
	cqx->read_imm_data = read_imm_data;
	cqx->read_qp_num = read_qp_num;
	cqx->read_src_qp = read_src_qp;
	cqx->read_wc_flags = read_wc_flags;
	cqx->read_slid = read_slid;
	cqx->read_sl = read_sl;
	cqx->read_dlid_path_bits = read_dlid_path_bits;
	return cqx;
}
