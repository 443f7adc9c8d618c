/* Memory windows from C: a window is a pyroce.verbs.mw.MW of the shared NIC's (its memory table holds it
 * beside the MRs); binding is send-queue work the NIC does itself (nic/local_ops.py), so
 * IBV_WR_BIND_MW writes a BIND_MW WQE with pyroce's bind segment (nic/wqe.py MwBindSeg: the
 * range, the MR's key, the access; struct pyroce_bind_seg of pyroce_abi.h) and the window's new
 * key in the control segment, and
 * ibv_bind_mw (type 1) posts one, as libmlx5 does, and completes as IBV_WC_BIND_MW. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pr_mw {
	struct ibv_mw mw;
	uint32_t handle;
};

int pr_bind_segment(uint8_t *seg, const struct ibv_send_wr *wr)
{
	const struct ibv_mw_bind_info *info = &wr->bind_mw.bind_info;
	struct pyroce_bind_seg *bind = (struct pyroce_bind_seg *)seg;

	/* what a bind may ask: pyroce.verbs.mw.MW_ACCESS (rxe's RXE_ACCESS_SUPPORTED_MW, zero-based aside) */
	if (!wr->bind_mw.mw || info->mw_access_flags & ~PYROCE_MW_ACCESS || (info->length && !info->mr))
		return EINVAL;
	memset(bind, 0, sizeof(*bind));
	bind->addr = htobe64(info->addr);
	bind->length = htobe64(info->length);
	bind->mr_key = htobe32(info->length ? info->mr->lkey : 0); /* a zero-length bind unbinds: no MR */
	bind->access = htobe32(info->mw_access_flags);
	return 0;
}

struct ibv_mw *pr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct pr_answer answer;
	struct pr_mw *mw = NULL;
	uint32_t handle, rkey;

	if (pr_command(&answer, ctx, "ibv_alloc_mw", "alloc_mw", "hi", ((struct pr_pd *)pd)->handle, (int)type))
		return NULL;
	if (!pr_unpack(&answer, "hI", &handle, &rkey))
		mw = pr_alloc_for(sizeof(*mw), ctx, "ibv_alloc_mw", "dealloc_mw", handle);
	pr_answer_free(&answer);
	if (!mw)
		return NULL;
	mw->handle = handle;
	mw->mw = (struct ibv_mw){.context = pd->context, .pd = pd, .rkey = rkey, .handle = rkey >> 8, .type = type};
	return &mw->mw;
}

/* libibverbs' inline ibv_bind_mw checked the type (1) and the MR's PD; the QP's PD is the
 * window's (pyroce.verbs.mw: EINVAL), then a BIND_MW with the next key, as libmlx5 posts it. */
int pr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {.wr_id = mw_bind->wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = mw_bind->send_flags,
				 .bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey),
					     .bind_info = mw_bind->bind_info}}, *bad;
	int ret;

	if (qp->pd != mw->pd)
		return EINVAL;
	ret = qp->context->ops.post_send(qp, &wr, &bad);
	if (!ret)
		mw->rkey = wr.bind_mw.rkey;
	return ret;
}

int pr_dealloc_mw(struct ibv_mw *mw)
{
	struct pr_mw *self = (struct pr_mw *)mw;
	int ret = pr_run(pr_ctx(mw->context), "ibv_dealloc_mw", "dealloc_mw", "h", self->handle);

	if (!ret)
		free(self);
	return ret;
}
