/* Memory windows from C: a window is a pyroce.verbs.mw.MW (the NIC's memory table holds it
 * beside the MRs); binding is send-queue work the NIC does itself (nic/local_ops.py), so
 * IBV_WR_BIND_MW writes a BIND_MW WQE with pyroce's bind segment (nic/wqe.py MwBindSeg: the
 * range, the MR's key, the access) and the window's new key in the control segment, and
 * ibv_bind_mw (type 1) posts one, as libmlx5 does, and completes as IBV_WC_BIND_MW. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* what a bind may ask (rxe's RXE_ACCESS_SUPPORTED_MW, zero-based aside; pyroce.verbs.mw.MW_ACCESS) */
#define MW_ACCESS                                                                                                      \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct pr_mw {
	struct ibv_mw mw;
	PyObject *obj;
};

int pr_bind_segment(uint8_t *seg, const struct ibv_send_wr *wr)
{
	const struct ibv_mw_bind_info *info = &wr->bind_mw.bind_info;
	uint64_t addr = htobe64(info->addr), length = htobe64(info->length);
	uint32_t key, access = htobe32(info->mw_access_flags);

	if (!wr->bind_mw.mw || info->mw_access_flags & ~MW_ACCESS || (info->length && !info->mr))
		return EINVAL;
	key = htobe32(info->length ? info->mr->lkey : 0); /* a zero-length bind unbinds: no MR */
	memset(seg, 0, PR_BIND_SIZE);
	memcpy(seg, &addr, 8);
	memcpy(seg + 8, &length, 8);
	memcpy(seg + 16, &key, 4);
	memcpy(seg + 20, &access, 4);
	return 0;
}

struct ibv_mw *pr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	PyGILState_STATE state;
	PyObject *result, *obj;
	struct pr_mw *mw = NULL;
	unsigned int rkey;

	if (pr_enter(&state))
		return NULL;
	result = pr_call("ibv_alloc_mw", "alloc_mw", "(Oi)", ((struct pr_pd *)pd)->obj, type);
	if (result && PyArg_ParseTuple(result, "OI", &obj, &rkey)) {
		mw = pr_alloc_for(sizeof(*mw), "ibv_alloc_mw", "dealloc_mw", obj);
		if (mw) {
			mw->obj = obj;
			mw->mw = (struct ibv_mw){.context = pd->context, .pd = pd, .rkey = rkey, .handle = rkey >> 8,
						 .type = type};
		}
	}
	Py_XDECREF(result);
	pr_leave(state);
	return mw ? &mw->mw : NULL;
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
	int ret = pr_destroy("ibv_dealloc_mw", "dealloc_mw", self->obj);

	if (!ret)
		free(self);
	return ret;
}
