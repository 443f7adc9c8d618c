/* Shared receive queues: the control verbs call pyroce.driver.calls (the SRQ's checks, limit
 * and resize are pyroce.verbs.srq's); ibv_post_srq_recv writes WQEs into its ring and the
 * producer into its doorbell record, with no doorbell to ring: the NIC reads the record when a
 * message needs a WQE (nic/srq.py). */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>

struct pr_srq *pr_find_srq(struct pr_context *ctx, uint32_t srqn)
{
	struct pr_srq *srq;

	pthread_mutex_lock(&ctx->lock);
	for (srq = ctx->srqs; srq && srq->srqn != srqn; srq = srq->next)
		;
	pthread_mutex_unlock(&ctx->lock);
	return srq;
}

/* The ring (and sizes) after a modify, from its call's result (GIL held). */
static int take_ring(struct pr_srq *srq, PyObject *ring_info)
{
	unsigned long long ring;
	unsigned int count, stride;

	if (!PyArg_ParseTuple(ring_info, "KII", &ring, &count, &stride)) {
		PyErr_Clear();
		return EIO;
	}
	srq->ring = (uint8_t *)(uintptr_t)ring;
	srq->count = count;
	srq->stride = stride;
	return 0;
}

PR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct pr_srq *srq = calloc(1, sizeof(*srq));
	uint64_t *wr_ids = calloc(PR_SRQ_COUNTERS, sizeof(*wr_ids));
	PyGILState_STATE state;
	PyObject *result = NULL, *obj;
	unsigned long long ring, doorbell;
	unsigned int srqn, count, stride;

	if (!srq || !wr_ids || pr_enter(&state)) {
		if (!srq || !wr_ids)
			errno = ENOMEM;
		free(srq);
		free(wr_ids);
		return NULL;
	}
	result = pr_call("ibv_create_srq", "create_srq", "(OII)", ((struct pr_pd *)pd)->obj, attr->attr.max_wr,
			 attr->attr.max_sge);
	if (result && PyArg_ParseTuple(result, "OIKIIK", &obj, &srqn, &ring, &count, &stride, &doorbell)) {
		Py_INCREF(obj);
		srq->obj = obj;
	} else if (result) {
		PyErr_Clear();
		errno = EIO;
	}
	Py_XDECREF(result);
	pr_leave(state);
	if (!srq->obj) {
		free(srq);
		free(wr_ids);
		return NULL;
	}
	srq->ring = (uint8_t *)(uintptr_t)ring;
	srq->count = count;
	srq->stride = stride;
	srq->srqn = srqn;
	srq->doorbell = (volatile uint32_t *)(uintptr_t)doorbell;
	srq->wr_ids = wr_ids;
	srq->max_wr = attr->attr.max_wr;
	srq->max_sge = attr->attr.max_sge ? attr->attr.max_sge : 1;
	pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
	srq->srq = (struct ibv_srq){.context = pd->context, .srq_context = attr->srq_context, .pd = pd, .handle = srqn};
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	pthread_mutex_lock(&ctx->lock);
	srq->next = ctx->srqs;
	ctx->srqs = srq;
	pthread_mutex_unlock(&ctx->lock);
	return &srq->srq;
}

PR_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int attr_mask)
{
	struct pr_srq *srq = (struct pr_srq *)ibsrq;
	PyGILState_STATE state;
	PyObject *ring;
	int ret;

	if (pr_enter(&state))
		return errno;
	pthread_spin_lock(&srq->lock); /* no post while the WQEs move to the new ring */
	ring = pr_call("ibv_modify_srq", "modify_srq", "(OIIi)", srq->obj, attr->max_wr, attr->srq_limit, attr_mask);
	ret = ring ? take_ring(srq, ring) : errno;
	if (!ret && attr_mask & IBV_SRQ_MAX_WR)
		srq->max_wr = attr->max_wr;
	pthread_spin_unlock(&srq->lock);
	Py_XDECREF(ring);
	pr_leave(state);
	return ret;
}

PR_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	PyGILState_STATE state;
	PyObject *found;
	int ret = 0;

	if (pr_enter(&state))
		return errno;
	found = pr_call("ibv_query_srq", "query_srq", "(O)", ((struct pr_srq *)ibsrq)->obj);
	if (!found)
		ret = errno;
	else if (!PyArg_ParseTuple(found, "III", &attr->max_wr, &attr->max_sge, &attr->srq_limit))
		ret = EIO;
	PyErr_Clear();
	Py_XDECREF(found);
	pr_leave(state);
	return ret;
}

PR_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct pr_srq *srq = (struct pr_srq *)ibsrq;
	struct pr_context *ctx = pr_ctx(ibsrq->context);
	int ret = pr_destroy("ibv_destroy_srq", "destroy_srq", srq->obj);

	if (ret)
		return ret; /* EBUSY while a QP takes its receives from it */
	pthread_mutex_lock(&ctx->lock);
	for (struct pr_srq **link = &ctx->srqs; *link; link = &(*link)->next)
		if (*link == srq) {
			*link = srq->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	pthread_spin_destroy(&srq->lock);
	free(srq->wr_ids);
	free(srq);
	return 0;
}

int pr_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct pr_srq *srq = (struct pr_srq *)ibsrq;
	int ret = pr_stale(pr_ctx(ibsrq->context));

	if (ret) {
		*bad_wr = wr;
		return ret;
	}
	pthread_spin_lock(&srq->lock);
	uint32_t first = srq->producer;
	for (; wr; wr = wr->next) { /* rxe's errnos: ENOMEM when full, EINVAL for too many SGEs */
		if (srq->outstanding >= srq->max_wr)
			ret = ENOMEM;
		else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > srq->max_sge)
			ret = EINVAL;
		if (ret) {
			*bad_wr = wr;
			break;
		}
		pr_write_recv_wqe(srq->ring + (srq->producer % srq->count) * srq->stride, srq->stride, wr);
		srq->wr_ids[srq->producer % PR_SRQ_COUNTERS] = wr->wr_id;
		srq->producer++;
		srq->outstanding++;
	}
	if (srq->producer != first)
		__atomic_store_n(&srq->doorbell[MLX5_RCV_DBR], htobe32(srq->producer & PYROCE_COUNTER_MASK),
				 __ATOMIC_RELEASE);
	pthread_spin_unlock(&srq->lock);
	return ret;
}

uint64_t pr_retire_srq(struct pr_srq *srq, uint16_t counter)
{
	uint64_t wr_id;

	pthread_spin_lock(&srq->lock);
	wr_id = srq->wr_ids[counter];
	if (srq->outstanding)
		srq->outstanding--;
	pthread_spin_unlock(&srq->lock);
	return wr_id;
}
