/* Shared receive queues: the control verbs are commands to the shared NIC (the SRQ's checks,
 * limit and resize are pyroce.verbs.srq's); ibv_post_srq_recv writes WQEs into its ring and the
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

/* The ring (and sizes) after a modify, from its command's answer: 0 or EIO. */
static int take_ring(struct pr_srq *srq, struct pr_answer *answer)
{
	void *ring;
	uint32_t count, stride;

	if (pr_unpack(answer, "AII", &ring, &count, &stride))
		return EIO;
	srq->ring = ring;
	srq->count = count;
	srq->stride = stride;
	return 0;
}

PR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct pr_srq *srq = calloc(1, sizeof(*srq));
	uint64_t *wr_ids = calloc(PR_SRQ_COUNTERS, sizeof(*wr_ids));
	struct pr_answer answer;
	void *ring, *doorbell;
	uint32_t handle, srqn, count, stride;
	int error = !srq || !wr_ids ? ENOMEM : 0;

	if (!error)
		error = pr_command(&answer, ctx, "ibv_create_srq", "create_srq", "hII", ((struct pr_pd *)pd)->handle,
				   attr->attr.max_wr, attr->attr.max_sge);
	if (srq && wr_ids && !error) {
		error = pr_unpack(&answer, "hIAIIA", &handle, &srqn, &ring, &count, &stride, &doorbell);
		pr_answer_free(&answer);
	}
	if (error) {
		free(srq);
		free(wr_ids);
		errno = error;
		return NULL;
	}
	srq->handle = handle;
	srq->ring = ring;
	srq->count = count;
	srq->stride = stride;
	srq->srqn = srqn;
	srq->doorbell = doorbell;
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
	struct pr_answer answer;
	int ret;

	pthread_spin_lock(&srq->lock); /* no post while the WQEs move to the new ring */
	ret = pr_command(&answer, pr_ctx(ibsrq->context), "ibv_modify_srq", "modify_srq", "hIIi", srq->handle,
			 attr->max_wr, attr->srq_limit, attr_mask);
	if (!ret) {
		ret = take_ring(srq, &answer);
		pr_answer_free(&answer);
	}
	if (!ret && attr_mask & IBV_SRQ_MAX_WR)
		srq->max_wr = attr->max_wr;
	pthread_spin_unlock(&srq->lock);
	return ret;
}

PR_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct pr_answer answer;
	uint32_t max_wr, max_sge, srq_limit;
	int ret;

	ret = pr_command(&answer, pr_ctx(ibsrq->context), "ibv_query_srq", "query_srq", "h",
			 ((struct pr_srq *)ibsrq)->handle);
	if (ret)
		return ret;
	ret = pr_unpack(&answer, "III", &max_wr, &max_sge, &srq_limit);
	pr_answer_free(&answer);
	if (!ret) {
		attr->max_wr = max_wr;
		attr->max_sge = max_sge;
		attr->srq_limit = srq_limit;
	}
	return ret;
}

PR_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct pr_srq *srq = (struct pr_srq *)ibsrq;
	struct pr_context *ctx = pr_ctx(ibsrq->context);
	int ret = pr_run(ctx, "ibv_destroy_srq", "destroy_srq", "h", srq->handle);

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
