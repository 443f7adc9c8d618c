/* mlx5's direct verbs for pyroce0: what pyroce's libmlx5.so.1 (stubs/mlx5_served.c) answers for
 * this library's device, exported under PYROCE_PRIVATE_1. For any other device, and for the
 * direct verbs not here, libmlx5 answers as for a device not its own (EOPNOTSUPP).
 *
 * pyroce's rings are mlx5's layouts, so mlx5dv_init_obj hands a program the very rings, doorbell
 * records and CQEs the verbs use. A QP taken so becomes direct on the NIC (calls.direct_qp): the
 * program posts WQEs and moves the doorbell record itself, and the NIC reads the record on every
 * pass (docs/architecture.md, "Direct verbs": the ordering contract); its BlueFlame register is a
 * page of the connection's shared memory that the NIC does not read. */
#include <errno.h>
#include <string.h>

#include "pyroce_verbs.h"

/* A register page of the NIC's for `obj` (the command names it), or NULL with errno. */
static void *register_page(struct pr_context *ctx, const char *command, uint32_t handle)
{
	struct pr_answer answer;
	void *page = NULL;

	if (pr_command(&answer, ctx, "mlx5dv_init_obj", command, "h", handle))
		return NULL;
	if (pr_unpack(&answer, "A", &page))
		errno = EIO;
	pr_answer_free(&answer);
	return page;
}

PR_SHARED bool pyroce_mlx5dv_is_supported(struct ibv_device *device)
{
	return pr_own_device(device);
}

PR_SHARED int pyroce_mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs)
{
	if (!context || !pr_own_device(context->device))
		return EOPNOTSUPP;
	attrs->version = 0;
	attrs->flags = 0;     /* CQE version 0: an SRQ receive's CQE names the SRQ, not a user index */
	attrs->comp_mask = 0; /* none of the optional capabilities asked for is there */
	return 0;
}

static int dv_qp(struct ibv_qp *in, struct mlx5dv_qp *out)
{
	struct pr_qp *qp = (struct pr_qp *)in;

	if (!pr_own_device(in->context->device))
		return EOPNOTSUPP;
	if (pr_stale(qp->ctx))
		return EIO;
	if (!__atomic_load_n(&qp->uar, __ATOMIC_ACQUIRE)) {
		void *page = register_page(qp->ctx, "direct_qp", qp->handle);

		if (!page)
			return errno;
		__atomic_store_n(&qp->uar, page, __ATOMIC_RELEASE); /* a second caller's page is the NIC's too */
	}
	out->dbrec = (__be32 *)qp->doorbell;
	out->sq.buf = qp->sq;
	out->sq.wqe_cnt = qp->sq_wqebbs;
	out->sq.stride = MLX5_SEND_WQE_BB;
	out->rq.buf = qp->srq ? NULL : qp->rq; /* with an SRQ the receives are the SRQ's, as mlx5 says */
	out->rq.wqe_cnt = qp->srq ? 0 : qp->rq_count;
	out->rq.stride = qp->srq ? 0 : qp->rq_stride;
	out->bf.reg = (uint8_t *)qp->uar + PYROCE_BF_OFFSET;
	out->bf.size = PYROCE_BF_SIZE;
	out->comp_mask = 0; /* no uverbs file to mmap, no raw packet QP's handles */
	return 0;
}

static int dv_cq(struct ibv_cq *in, struct mlx5dv_cq *out, int abi_1_0)
{
	struct pr_cq *cq = (struct pr_cq *)in;

	if (!pr_own_device(in->context->device))
		return EOPNOTSUPP;
	if (pr_stale(pr_ctx(in->context)))
		return EIO;
	if (!__atomic_load_n(&cq->uar, __ATOMIC_ACQUIRE)) {
		void *page = register_page(pr_ctx(in->context), "direct_cq", cq->handle);

		if (!page)
			return errno;
		__atomic_store_n(&cq->uar, page, __ATOMIC_RELEASE);
	}
	out->buf = cq->ring;
	out->dbrec = (__be32 *)cq->consumer_record;
	out->cqe_cnt = cq->count;
	out->cqe_size = sizeof(struct mlx5_cqe64);
	out->cq_uar = abi_1_0 ? (void *)&cq->uar : cq->uar; /* MLX5_1.0 gave a void ** there */
	out->cqn = cq->cqn;
	out->comp_mask = 0;
	__atomic_store_n(&cq->dv_owned, 1, __ATOMIC_RELAXED); /* its consumer is the program's now */
	return 0;
}

static int dv_ah(struct ibv_ah *in, struct mlx5dv_ah *out)
{
	if (!pr_own_device(in->context->device))
		return EOPNOTSUPP;
	out->av = &((struct pr_ah *)in)->av; /* its Q_Key and QPN are each WR's, as mlx5 writes them */
	out->comp_mask = 0;
	return 0;
}

/* An SRQ's WQEs are not mlx5's here (no next segment, taken in ring order, not as a free list):
 * handing its ring to a program that writes mlx5's would be a lie, so it is EOPNOTSUPP, as are a
 * PD (no PD number), work queues and device memory, which pyroce does not have. */
PR_SHARED int pyroce_mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type, int abi_1_0)
{
	int ret = 0;

	if (obj_type & (MLX5DV_OBJ_SRQ | MLX5DV_OBJ_RWQ | MLX5DV_OBJ_DM | MLX5DV_OBJ_PD))
		return EOPNOTSUPP;
	if (obj_type & MLX5DV_OBJ_QP)
		ret = dv_qp(obj->qp.in, obj->qp.out);
	if (!ret && (obj_type & MLX5DV_OBJ_CQ))
		ret = dv_cq(obj->cq.in, obj->cq.out, abi_1_0);
	if (!ret && (obj_type & MLX5DV_OBJ_AH))
		ret = dv_ah(obj->ah.in, obj->ah.out);
	return ret;
}

/* The plain cases: no mlx5 attribute asked for (a DC, streams, send ops of mlx5's own). */
PR_SHARED struct ibv_qp *pyroce_mlx5dv_create_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
						 struct mlx5dv_qp_init_attr *mlx5_attr)
{
	if (!pr_own_device(context->device) ||
	    (mlx5_attr && (mlx5_attr->comp_mask & ~(uint64_t)MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS ||
			   ((mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) && mlx5_attr->create_flags)))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return pr_create_qp_ex(context, attr);
}

PR_SHARED struct ibv_cq_ex *pyroce_mlx5dv_create_cq(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr,
						    struct mlx5dv_cq_init_attr *mlx5_attr)
{
	if (!pr_own_device(context->device) ||
	    (mlx5_attr && (mlx5_attr->comp_mask & ~(uint64_t)MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE ||
			   ((mlx5_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE) &&
			    mlx5_attr->cqe_size != sizeof(struct mlx5_cqe64))))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return pr_create_cq_ex(context, attr);
}
