/* Extended QPs from C: ibv_create_qp_ex (pyroce.verbs.qp_ex's checks of comp_mask and
 * send_ops_flags, then the QP ibv_create_qp makes) and the ibv_qp_ex wr_* builders. As in
 * libmlx5, wr_start takes the send queue's lock and wr_complete rings once and lets it go; a
 * builder writes the WR before it with the data path's encoder (pr_post_one: the same WQEs and
 * checks as ibv_post_send), and the first error is latched: wr_complete returns it and posts
 * nothing of the batch (the producer goes back to where wr_start found it, the doorbell record
 * was never moved), as pyroce.verbs.qp_ex.QPEx.wr_complete. Inline data is copied when it is
 * set, so the program may reuse its buffer at once. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pr_wr_batch {
	uint64_t ops;              /* the send_ops_flags the QP was created with */
	int open;                  /* between wr_start and wr_complete or wr_abort */
	int error;                 /* the first error of the batch, or 0 */
	int pending;               /* wr is built and not yet written */
	uint32_t producer, count;  /* the send queue's counters at wr_start */
	struct ibv_send_wr wr;
	uint32_t max_sge, max_inline;
	uint8_t *inline_data;      /* max_inline bytes, after sges */
	struct ibv_sge sges[];     /* max_sge of them */
};

static struct pr_qp *of(struct ibv_qp_ex *qpx)
{
	return (struct pr_qp *)qpx;
}

static void latch(struct pr_wr_batch *batch, int error)
{
	if (!batch->error)
		batch->error = error;
}

/* Write the WR built before, if any (the caller holds sq_lock). */
static void flush(struct pr_qp *qp)
{
	struct pr_wr_batch *batch = qp->batch;

	if (batch->pending && !batch->error)
		latch(batch, pr_post_one(qp, &batch->wr));
	batch->pending = 0;
}

/* Start a WR of `opcode`, which send_ops_flags must name (`op`): the builders' common part. */
static struct ibv_send_wr *build(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode, uint64_t op)
{
	struct pr_wr_batch *batch = of(qpx)->batch;

	if (!batch->open)
		return &batch->wr; /* no batch to post it in: wr_complete fails (EINVAL) */
	flush(of(qpx));
	if (!(batch->ops & op))
		latch(batch, EOPNOTSUPP);
	batch->wr = (struct ibv_send_wr){.wr_id = qpx->wr_id, .opcode = opcode, .sg_list = batch->sges,
					 .send_flags = qpx->wr_flags & ~IBV_SEND_INLINE};
	batch->pending = 1;
	return &batch->wr;
}

/* The WR a setter completes, or NULL (latched EINVAL) when no builder started one. */
static struct ibv_send_wr *last(struct ibv_qp_ex *qpx)
{
	struct pr_wr_batch *batch = of(qpx)->batch;

	if (batch->open && batch->pending)
		return &batch->wr;
	latch(batch, EINVAL);
	return NULL;
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	build(qpx, IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	build(qpx, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM)->imm_data = imm_data;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	build(qpx, IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV)->invalidate_rkey = invalidate_rkey;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
	wr->imm_data = imm_data;
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
			      uint64_t swap)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);

	wr->wr.atomic.remote_addr = remote_addr;
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.compare_add = compare;
	wr->wr.atomic.swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);

	wr->wr.atomic.remote_addr = remote_addr;
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.compare_add = add;
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *wr = build(qpx, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW);

	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *info;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	build(qpx, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV)->invalidate_rkey = invalidate_rkey;
}

/* What pyroce does not do (TSO, XRC, atomic write): the batch fails with EOPNOTSUPP. */
static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	latch(of(qpx)->batch, EOPNOTSUPP);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	latch(of(qpx)->batch, EOPNOTSUPP);
}

static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr)
{
	latch(of(qpx)->batch, EOPNOTSUPP);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *wr = last(qpx);

	if (wr) {
		wr->wr.ud.ah = ah;
		wr->wr.ud.remote_qpn = remote_qpn;
		wr->wr.ud.remote_qkey = remote_qkey;
	}
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge, const struct ibv_sge *sg_list)
{
	struct pr_wr_batch *batch = of(qpx)->batch;
	struct ibv_send_wr *wr = last(qpx);

	if (!wr)
		return;
	if (num_sge > batch->max_sge) { /* more than max_send_sge: EINVAL, as ibv_post_send */
		latch(batch, EINVAL);
		return;
	}
	memcpy(batch->sges, sg_list, num_sge * sizeof(*sg_list));
	wr->sg_list = batch->sges;
	wr->num_sge = (int)num_sge;
	wr->send_flags &= ~IBV_SEND_INLINE;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};

	wr_set_sge_list(qpx, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf, const struct ibv_data_buf *buf_list)
{
	struct pr_wr_batch *batch = of(qpx)->batch;
	struct ibv_send_wr *wr = last(qpx);
	size_t length = 0;

	if (!wr)
		return;
	for (size_t i = 0; i < num_buf; i++)
		length += buf_list[i].length;
	if (num_buf > batch->max_sge || length > batch->max_inline) { /* as ibv_post_send refuses them */
		latch(batch, EINVAL);
		return;
	}
	for (size_t i = 0, at = 0; i < num_buf; at += buf_list[i].length, i++)
		memcpy(batch->inline_data + at, buf_list[i].addr, buf_list[i].length);
	batch->sges[0] = (struct ibv_sge){.addr = (uintptr_t)batch->inline_data, .length = (uint32_t)length};
	wr->sg_list = batch->sges;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf buf = {.addr = addr, .length = length};

	wr_set_inline_data_list(qpx, 1, &buf);
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct pr_qp *qp = of(qpx);
	struct pr_wr_batch *batch = qp->batch;

	pthread_spin_lock(&qp->sq_lock);
	batch->open = 1;
	batch->pending = 0;
	batch->error = pr_stale(qp->ctx); /* a child of fork(): wr_complete posts nothing, EIO */
	batch->producer = qp->sq_producer;
	batch->count = qp->sq_count;
}

/* End the batch: post it (ring once) unless an error was latched; the lock is let go. */
static int finish(struct pr_qp *qp, int post)
{
	struct pr_wr_batch *batch = qp->batch;
	int error;

	if (!batch->open)
		return EINVAL; /* no wr_start: nothing is locked */
	if (post)
		flush(qp);
	error = post ? batch->error : 0;
	if (!post || error) {
		qp->sq_producer = batch->producer;
		qp->sq_count = batch->count;
	} else if (qp->sq_producer != batch->producer) {
		pr_send_doorbell(qp);
	}
	batch->open = batch->pending = 0;
	pthread_spin_unlock(&qp->sq_lock);
	return error;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	return finish(of(qpx), 1);
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	finish(of(qpx), 0);
}

struct ibv_qp *pr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	uint64_t send_ops = 0;
	int error;

	if (pr_command(&answer, ctx, "ibv_create_qp_ex", "qp_ex_send_ops", "iIKI", (int)attr->qp_type, attr->comp_mask,
		       (unsigned long long)attr->send_ops_flags, attr->create_flags))
		return NULL;
	error = pr_unpack(&answer, "K", &send_ops);
	pr_answer_free(&answer);
	if (error)
		return NULL;
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp *ibqp = ibv_create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
	if (!ibqp || !(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return ibqp;
	struct pr_qp *qp = (struct pr_qp *)ibqp;
	uint32_t max_sge = qp->max_send_sge, max_inline = qp->max_inline_data;
	struct pr_wr_batch *batch = calloc(1, sizeof(*batch) + max_sge * sizeof(struct ibv_sge) + max_inline);
	if (!batch) {
		ibv_destroy_qp(ibqp);
		errno = ENOMEM;
		return NULL;
	}
	*batch = (struct pr_wr_batch){.ops = send_ops, .max_sge = max_sge, .max_inline = max_inline,
				      .inline_data = (uint8_t *)&batch->sges[max_sge]};
	qp->batch = batch;
	struct ibv_qp_ex *qpx = &qp->qp_ex;
	qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
	qpx->wr_bind_mw = wr_bind_mw;
	qpx->wr_local_inv = wr_local_inv;
	qpx->wr_rdma_read = wr_rdma_read;
	qpx->wr_rdma_write = wr_rdma_write;
	qpx->wr_rdma_write_imm = wr_rdma_write_imm;
	qpx->wr_send = wr_send;
	qpx->wr_send_imm = wr_send_imm;
	qpx->wr_send_inv = wr_send_inv;
	qpx->wr_send_tso = wr_send_tso;
	qpx->wr_set_ud_addr = wr_set_ud_addr;
	qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
	qpx->wr_set_inline_data = wr_set_inline_data;
	qpx->wr_set_inline_data_list = wr_set_inline_data_list;
	qpx->wr_set_sge = wr_set_sge;
	qpx->wr_set_sge_list = wr_set_sge_list;
	qpx->wr_start = wr_start;
	qpx->wr_complete = wr_complete;
	qpx->wr_abort = wr_abort;
	qpx->wr_atomic_write = wr_atomic_write;
	return ibqp;
}

PR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct pr_qp *self = (struct pr_qp *)qp;

	return self->batch ? &self->qp_ex : NULL; /* only a QP created with send_ops_flags has builders */
}
