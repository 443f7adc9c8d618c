/* The control verbs: PDs, MRs, completion channels, CQs and QPs, each a command to the shared
 * NIC (pyroce.driver.calls there: the verbs objects check and answer as they do for Python), then
 * the C object the data path uses: the rings' addresses and its own counters. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

struct pr_cq *pr_find_cq(struct pr_context *ctx, uint32_t cqn)
{
	struct pr_cq *cq;

	pthread_mutex_lock(&ctx->lock);
	for (cq = ctx->cqs; cq && cq->cqn != cqn; cq = cq->next)
		;
	pthread_mutex_unlock(&ctx->lock);
	return cq;
}

struct pr_qp *pr_find_qp(struct pr_context *ctx, uint32_t qpn)
{
	struct pr_qp *qp;

	pthread_mutex_lock(&ctx->lock);
	for (qp = ctx->qps; qp && qp->qp.qp_num != qpn; qp = qp->next)
		;
	pthread_mutex_unlock(&ctx->lock);
	return qp;
}

void *pr_alloc_for(size_t size, const struct pr_context *ctx, const char *verb, const char *undo, uint32_t handle)
{
	void *self = calloc(1, size);

	if (!self) {
		pr_run(ctx, verb, undo, "h", handle);
		errno = ENOMEM;
	}
	return self;
}

/* A command that destroys the object `handle`: 0 or the errno (the object stays whole on an
 * error, e.g. EBUSY). */
static int destroy(struct ibv_context *context, const char *verb, const char *command, uint32_t handle)
{
	return pr_run(pr_ctx(context), verb, command, "h", handle);
}

/* --- protection domains and memory regions ------------------------------------------- */

PR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	struct pr_pd *pd = NULL;
	uint32_t handle;

	if (pr_command(&answer, ctx, "ibv_alloc_pd", "alloc_pd", "h", ctx->handle))
		return NULL;
	if (!pr_unpack(&answer, "h", &handle))
		pd = pr_alloc_for(sizeof(*pd), ctx, "ibv_alloc_pd", "dealloc_pd", handle);
	pr_answer_free(&answer);
	if (!pd)
		return NULL;
	pd->handle = handle;
	pd->pd.context = context;
	pd->pd.handle = handle;
	return &pd->pd;
}

PR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct pr_pd *self = (struct pr_pd *)pd;
	int ret = destroy(pd->context, "ibv_dealloc_pd", "dealloc_pd", self->handle);

	if (!ret)
		free(self);
	return ret;
}

PR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct pr_answer answer;
	struct pr_mr *mr = NULL;
	uint32_t handle, lkey, rkey;

	if (pr_command(&answer, ctx, "ibv_reg_mr", "reg_mr", "hKKi", ((struct pr_pd *)pd)->handle,
		       (unsigned long long)(uintptr_t)addr, (unsigned long long)length, access))
		return NULL;
	if (!pr_unpack(&answer, "hII", &handle, &lkey, &rkey))
		mr = pr_alloc_for(sizeof(*mr), ctx, "ibv_reg_mr", "dereg_mr", handle);
	pr_answer_free(&answer);
	if (!mr)
		return NULL;
	mr->handle = handle;
	mr->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = length, .handle = lkey,
				 .lkey = lkey, .rkey = rkey};
	return &mr->mr;
}

/* An MR whose RETH addresses differ from its process addresses: pyroce's MRs are named by
 * their process address, so only iova == addr is served. */
PR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					  unsigned int access)
{
	if (iova != (uintptr_t)addr) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return ibv_reg_mr(pd, addr, length, (int)access);
}

PR_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

PR_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct pr_mr *self = (struct pr_mr *)mr;
	struct pr_answer answer;
	uint32_t lkey, rkey;
	int error;

	if (pr_command(&answer, pr_ctx(mr->context), "ibv_rereg_mr", "rereg_mr", "hiHKKi", self->handle, flags,
		       (flags & IBV_REREG_MR_CHANGE_PD) && pd ? ((struct pr_pd *)pd)->handle : 0,
		       (unsigned long long)(uintptr_t)addr, (unsigned long long)length, access))
		return IBV_REREG_MR_ERR_INPUT;
	error = pr_unpack(&answer, "II", &lkey, &rkey);
	pr_answer_free(&answer);
	if (!error) {
		mr->lkey = lkey;
		mr->rkey = rkey;
		if (flags & IBV_REREG_MR_CHANGE_PD)
			mr->pd = pd;
		if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
			mr->addr = addr;
			mr->length = length;
		}
	}
	return error ? IBV_REREG_MR_ERR_INPUT : 0;
}

PR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct pr_mr *self = (struct pr_mr *)mr;
	int ret = destroy(mr->context, "ibv_dereg_mr", "dereg_mr", self->handle);

	if (!ret)
		free(self);
	return ret;
}

/* verbs_context.advise_mr, what ibv_advise_mr (the header's inline) calls: the SGEs cross as
 * their bytes, and pyroce.verbs' PD.advise_mr checks them as the kernel does (and does no more:
 * every MR already pages on demand). libibverbs' own check first: the SGE list is an ioctl
 * attribute, its length 16 bits, so more SGEs than fit are EINVAL before any command. */
int pr_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge)
{
	size_t size = (size_t)num_sge * sizeof(*sg_list);

	if (size > UINT16_MAX)
		return EINVAL;
	return pr_run(pr_ctx(pd->context), "ibv_advise_mr", "advise_mr", "hIIy", ((struct pr_pd *)pd)->handle,
		      (unsigned int)advice, flags, (const void *)sg_list, size);
}

/* --- completion channels and CQs --------------------------------------------------- */

PR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_channel *channel = NULL;
	struct pr_answer answer;
	uint32_t handle;
	int fd;

	if (pr_command(&answer, ctx, "ibv_create_comp_channel", "create_comp_channel", "h", ctx->handle))
		return NULL;
	if (!pr_unpack(&answer, "hf", &handle, &fd)) {
		channel = pr_alloc_for(sizeof(*channel), ctx, "ibv_create_comp_channel", "destroy_comp_channel", handle);
		if (!channel)
			close(fd);
	}
	pr_answer_free(&answer);
	if (!channel)
		return NULL;
	channel->handle = handle;
	channel->channel = (struct ibv_comp_channel){.context = context, .fd = fd, .refcnt = 0};
	return &channel->channel;
}

PR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct pr_channel *self = (struct pr_channel *)channel;
	int ret;

	pthread_mutex_lock(&channel->context->mutex);
	ret = channel->refcnt ? EBUSY : 0;
	pthread_mutex_unlock(&channel->context->mutex);
	if (!ret)
		ret = destroy(channel->context, "ibv_destroy_comp_channel", "destroy_comp_channel", self->handle);
	if (!ret) {
		close(channel->fd); /* this process's copy of the NIC's event fd */
		free(self);
	}
	return ret;
}

/* Whether the read(2) a signal handler just interrupted would go on: the kernel restarts it if
 * that handler asked SA_RESTART. Which signal came is not known here, so only if every handler
 * installed asked it (signals with no handler interrupt nothing). */
static int restarted(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction action;
		if (!sigaction(sig, NULL, &action) && action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN &&
		    !(action.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}

/* Wait until the event fd is readable, as a read(2) of the kernel's event file would wait: 0,
 * then the caller takes the event (a command that never waits, and says EAGAIN if another
 * thread took it first: the caller comes back here). -1 with errno: EINTR for a signal whose
 * handler did not ask SA_RESTART, EAGAIN at once for a non-blocking fd with nothing ready,
 * EBADF for a closed fd. */
int pr_wait_event(int fd)
{
	struct pollfd readable = {.fd = fd, .events = POLLIN};
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0)
		return -1;
	for (;;) {
		int ready = poll(&readable, 1, flags & O_NONBLOCK ? 0 : -1);
		if (ready > 0 && readable.revents & POLLNVAL) {
			errno = EBADF;
			return -1;
		}
		if (ready > 0)
			return 0;
		if (!ready) {
			errno = EAGAIN;
			return -1;
		}
		if (errno != EINTR || !restarted())
			return -1;
	}
}

/* The fd was made non-blocking (fcntl): an event another thread took is EAGAIN, not a wait. */
int pr_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	return flags < 0 || flags & O_NONBLOCK;
}

PR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct pr_context *ctx = pr_ctx(channel->context);
	struct pr_answer answer;
	struct pr_cq *found;
	uint32_t cqn;
	int error = pr_stale(ctx); /* a child of fork(): no wait on the parent's fd */

	if (error) {
		errno = error;
		return -1;
	}
	do { /* the wait here, so a signal ends it as it ends a read(2); then a command that never waits */
		if (pr_wait_event(channel->fd))
			return -1;
		error = pr_command(&answer, ctx, "ibv_get_cq_event", "get_cq_event", "h",
				   ((struct pr_channel *)channel)->handle);
		if (!error) {
			error = pr_unpack(&answer, "I", &cqn);
			pr_answer_free(&answer);
		}
	} while (error == EAGAIN && !pr_nonblocking(channel->fd)); /* another thread took it: wait again */
	found = error ? NULL : pr_find_cq(ctx, cqn);
	if (!found) {
		errno = error ? error : EIO; /* EIO: an event for a CQ destroyed meanwhile */
		return -1;
	}
	*cq = &found->cq;
	*cq_context = found->cq.cq_context;
	return 0;
}

PR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

static void set_ring(struct pr_cq *cq, void *ring, unsigned int count)
{
	cq->ring = ring;
	cq->count = count;
	cq->shift = __builtin_ctz(count);
	cq->consumer = 0;
}

PR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	struct pr_cq *cq = NULL;
	void *ring, *consumer;
	uint32_t handle, cqn, count;
	int size;

	if (pr_command(&answer, ctx, "ibv_create_cq", "create_cq", "hiHi", ctx->handle, cqe,
		       channel ? ((struct pr_channel *)channel)->handle : 0, comp_vector))
		return NULL;
	if (!pr_unpack(&answer, "hIAIAi", &handle, &cqn, &ring, &count, &consumer, &size))
		cq = pr_alloc_for(sizeof(*cq), ctx, "ibv_create_cq", "destroy_cq", handle);
	pr_answer_free(&answer);
	if (!cq)
		return NULL;
	cq->handle = handle;
	cq->cqn = cqn;
	set_ring(cq, ring, count);
	cq->consumer_record = consumer;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = cqn;
	cq->cq.cqe = size;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	pthread_mutex_lock(&context->mutex);
	if (channel)
		channel->refcnt++;
	pthread_mutex_unlock(&context->mutex);
	pthread_mutex_lock(&ctx->lock);
	cq->next = ctx->cqs;
	ctx->cqs = cq;
	pthread_mutex_unlock(&ctx->lock);
	return &cq->cq;
}

PR_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct pr_cq *self = (struct pr_cq *)cq;
	struct pr_context *ctx = pr_ctx(cq->context);
	struct pr_answer answer;
	void *ring;
	uint32_t count;
	int size, ret;

	pthread_spin_lock(&self->lock);
	ret = pr_command(&answer, ctx, "ibv_resize_cq", "resize_cq", "hiI", self->handle, cqe, self->consumer);
	if (!ret) {
		ret = pr_unpack(&answer, "AIi", &ring, &count, &size);
		pr_answer_free(&answer);
	}
	if (!ret) {
		uint32_t polled = self->consumer;
		set_ring(self, ring, count); /* counters restart at 0 in the new ring */
		cq->cqe = size;
		pthread_mutex_lock(&ctx->lock);
		for (struct pr_qp *qp = ctx->qps; qp; qp = qp->next) {
			if (qp->scq == self)
				qp->reset_at_scq = qp->reset_at_scq > polled ? qp->reset_at_scq - polled : 0;
			if (qp->rcq == self)
				qp->reset_at_rcq = qp->reset_at_rcq > polled ? qp->reset_at_rcq - polled : 0;
		}
		pthread_mutex_unlock(&ctx->lock);
	}
	pthread_spin_unlock(&self->lock);
	return ret;
}

int pr_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return pr_run(pr_ctx(cq->context), "ibv_req_notify_cq", "req_notify_cq", "hi", ((struct pr_cq *)cq)->handle,
		      solicited_only);
}

PR_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct pr_cq *self = (struct pr_cq *)cq;
	struct pr_context *ctx = pr_ctx(cq->context);
	int ret = destroy(cq->context, "ibv_destroy_cq", "destroy_cq", self->handle);

	if (ret)
		return ret;
	pthread_mutex_lock(&ctx->lock);
	for (struct pr_cq **link = &ctx->cqs; *link; link = &(*link)->next)
		if (*link == self) {
			*link = self->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	if (cq->channel) {
		pthread_mutex_lock(&cq->context->mutex);
		cq->channel->refcnt--;
		pthread_mutex_unlock(&cq->context->mutex);
	}
	pthread_spin_destroy(&self->lock);
	if (self->wake == PR_WAKE_READY)
		close(self->wake_fd);
	free(self->current);
	free(self);
	return 0;
}

/* --- queue pairs ------------------------------------------------------------------- */

PR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct ibv_qp_cap *cap = &attr->cap;
	struct pr_answer answer;
	struct pr_qp *qp = NULL;
	void *sq, *rq, *doorbell;
	uint32_t handle, qpn, sq_wqebbs, rq_count, rq_stride, max_inline_data;

	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (pr_command(&answer, ctx, "ibv_create_qp", "create_qp", "hhhHiiIIIII", ((struct pr_pd *)pd)->handle,
		       ((struct pr_cq *)attr->send_cq)->handle, ((struct pr_cq *)attr->recv_cq)->handle,
		       attr->srq ? ((struct pr_srq *)attr->srq)->handle : 0, (int)attr->qp_type, attr->sq_sig_all,
		       cap->max_send_wr, cap->max_recv_wr, cap->max_send_sge, cap->max_recv_sge, cap->max_inline_data))
		return NULL;
	if (!pr_unpack(&answer, "hIAIAIIAI", &handle, &qpn, &sq, &sq_wqebbs, &rq, &rq_count, &rq_stride, &doorbell,
		       &max_inline_data)) {
		qp = calloc(1, sizeof(*qp));
		if (qp) {
			qp->sq_entries = calloc(cap->max_send_wr ? cap->max_send_wr : 1, sizeof(*qp->sq_entries));
			qp->rq_wr_ids = calloc(rq_count ? rq_count : 1, sizeof(*qp->rq_wr_ids));
		}
		if (!qp || !qp->sq_entries || !qp->rq_wr_ids) {
			pr_run(ctx, "ibv_create_qp", "destroy_qp", "h", handle);
			if (qp) {
				free(qp->sq_entries);
				free(qp->rq_wr_ids);
				free(qp);
				qp = NULL;
			}
			errno = ENOMEM;
		}
	}
	pr_answer_free(&answer);
	if (!qp)
		return NULL;
	qp->handle = handle;
	qp->ctx = ctx;
	qp->scq = (struct pr_cq *)attr->send_cq;
	qp->srq = (struct pr_srq *)attr->srq;
	qp->rcq = (struct pr_cq *)attr->recv_cq;
	qp->max_send_wr = cap->max_send_wr;
	qp->max_recv_wr = cap->max_recv_wr;
	qp->max_send_sge = cap->max_send_sge;
	qp->max_recv_sge = cap->max_recv_sge;
	cap->max_inline_data = max_inline_data; /* what the WQEs hold, written back as mlx5 writes it */
	qp->max_inline_data = max_inline_data;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->sq = sq;
	qp->sq_wqebbs = sq_wqebbs;
	qp->rq = rq;
	qp->rq_count = rq_count;
	qp->rq_stride = rq_stride;
	qp->doorbell = doorbell;
	pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	qp->qp = (struct ibv_qp){.context = pd->context, .qp_context = attr->qp_context, .pd = pd,
				 .send_cq = attr->send_cq, .recv_cq = attr->recv_cq, .srq = attr->srq, .handle = qpn,
				 .qp_num = qpn,
				 .state = IBV_QPS_RESET, .qp_type = attr->qp_type};
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	pthread_mutex_lock(&ctx->lock);
	qp->next = ctx->qps;
	ctx->qps = qp;
	pthread_mutex_unlock(&ctx->lock);
	return &qp->qp;
}

PR_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct pr_qp *self = (struct pr_qp *)qp;
	struct pr_answer answer;
	const struct pr_value *reset;

	if (pr_command(&answer, self->ctx, "ibv_modify_qp", "modify_qp",
		       "hi{iiiiIIIIIiiiiiiiiiiiiiI" PR_AH_FORMAT "}", self->handle, attr_mask, "qp_state",
		       (int)attr->qp_state, "cur_qp_state", (int)attr->cur_qp_state, "path_mtu", (int)attr->path_mtu,
		       "path_mig_state", (int)attr->path_mig_state, "qkey", attr->qkey, "rq_psn", attr->rq_psn, "sq_psn",
		       attr->sq_psn, "dest_qp_num", attr->dest_qp_num, "qp_access_flags",
		       (unsigned int)attr->qp_access_flags, "pkey_index", (int)attr->pkey_index, "alt_pkey_index",
		       (int)attr->alt_pkey_index, "en_sqd_async_notify", (int)attr->en_sqd_async_notify, "sq_draining",
		       (int)attr->sq_draining, "max_rd_atomic", (int)attr->max_rd_atomic, "max_dest_rd_atomic",
		       (int)attr->max_dest_rd_atomic, "min_rnr_timer", (int)attr->min_rnr_timer, "port_num",
		       (int)attr->port_num, "timeout", (int)attr->timeout, "retry_cnt", (int)attr->retry_cnt,
		       "rnr_retry", (int)attr->rnr_retry, "alt_port_num", (int)attr->alt_port_num, "alt_timeout",
		       (int)attr->alt_timeout, "rate_limit", attr->rate_limit, "ah_attr", PR_AH_ARGS(&attr->ah_attr)))
		return errno;
	reset = answer.value; /* to RESET: where each CQ's CQEs of the QP's new life start */
	if (reset->tag == 'l' && reset->count == 2)
		pr_qp_reset(self, pr_u64(pr_item(reset, 0)), pr_u64(pr_item(reset, 1)));
	pr_answer_free(&answer);
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

/* An AHAttr record of the NIC's (its GlobalRoute `gr`, whose GID's `raw` is 16 bytes). */
static void ah_from(const struct pr_value *found, struct ibv_ah_attr *ah)
{
	const struct pr_value *route = pr_field(found, "gr");

	pr_bytes(pr_field(pr_field(route, "dgid"), "raw"), ah->grh.dgid.raw, sizeof(ah->grh.dgid.raw));
	ah->grh.flow_label = pr_u64(pr_field(route, "flow_label"));
	ah->grh.sgid_index = pr_u64(pr_field(route, "sgid_index"));
	ah->grh.hop_limit = pr_u64(pr_field(route, "hop_limit"));
	ah->grh.traffic_class = pr_u64(pr_field(route, "traffic_class"));
	ah->dlid = pr_u64(pr_field(found, "dlid"));
	ah->sl = pr_u64(pr_field(found, "sl"));
	ah->src_path_bits = pr_u64(pr_field(found, "src_path_bits"));
	ah->static_rate = pr_u64(pr_field(found, "static_rate"));
	ah->is_global = pr_u64(pr_field(found, "is_global"));
	ah->port_num = pr_u64(pr_field(found, "port_num"));
}

#define FIELD(attr, found, name) ((attr)->name = pr_u64(pr_field(found, #name)))

PR_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			   struct ibv_qp_init_attr *init_attr)
{
	struct pr_qp *self = (struct pr_qp *)qp;
	struct pr_answer answer;
	const struct pr_value *found;

	if (pr_command(&answer, self->ctx, "ibv_query_qp", "query_qp", "h", self->handle))
		return errno;
	found = answer.value;
	memset(attr, 0, sizeof(*attr));
	FIELD(attr, found, qp_state);
	FIELD(attr, found, cur_qp_state);
	FIELD(attr, found, path_mtu);
	FIELD(attr, found, path_mig_state);
	FIELD(attr, found, qkey);
	FIELD(attr, found, rq_psn);
	FIELD(attr, found, sq_psn);
	FIELD(attr, found, dest_qp_num);
	FIELD(attr, found, qp_access_flags);
	FIELD(attr, found, pkey_index);
	FIELD(attr, found, alt_pkey_index);
	FIELD(attr, found, en_sqd_async_notify);
	FIELD(attr, found, sq_draining);
	FIELD(attr, found, max_rd_atomic);
	FIELD(attr, found, max_dest_rd_atomic);
	FIELD(attr, found, min_rnr_timer);
	FIELD(attr, found, port_num);
	FIELD(attr, found, timeout);
	FIELD(attr, found, retry_cnt);
	FIELD(attr, found, rnr_retry);
	FIELD(attr, found, alt_port_num);
	FIELD(attr, found, alt_timeout);
	FIELD(attr, found, rate_limit);
	ah_from(pr_field(found, "ah_attr"), &attr->ah_attr);
	pr_answer_free(&answer);
	attr->cap = (struct ibv_qp_cap){.max_send_wr = self->max_send_wr, .max_recv_wr = self->max_recv_wr,
					.max_send_sge = self->max_send_sge, .max_recv_sge = self->max_recv_sge,
					.max_inline_data = self->max_inline_data};
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->cap = attr->cap;
	init_attr->qp_type = qp->qp_type;
	init_attr->sq_sig_all = self->sq_sig_all;
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state; /* the NIC's, as libibverbs' ibv_query_qp keeps it */
	return 0;
}

/* A CQ of a QP being destroyed, locked: nothing of the QP stays in it. */
static void forget(struct pr_cq *cq, struct pr_qp *qp)
{
	if (cq->last == qp)
		cq->last = NULL;
	pr_cq_clean(cq, qp);
}

PR_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct pr_qp *self = (struct pr_qp *)qp;
	struct pr_context *ctx = self->ctx;
	int ret = destroy(qp->context, "ibv_destroy_qp", "destroy_qp", self->handle);

	if (ret)
		return ret;
	/* As libmlx5: with the CQs' locks, which poll_cq holds while it uses a QP it found, the QP
	 * leaves the lookup and its CQEs leave the CQs; then no poller holds it. One order (by
	 * address) for the two locks, so two destroys never wait on each other. */
	struct pr_cq *first = self->scq < self->rcq ? self->scq : self->rcq;
	struct pr_cq *second = self->scq < self->rcq ? self->rcq : self->scq;
	pthread_spin_lock(&first->lock);
	if (second != first)
		pthread_spin_lock(&second->lock);
	pthread_mutex_lock(&ctx->lock);
	for (struct pr_qp **link = &ctx->qps; *link; link = &(*link)->next)
		if (*link == self) {
			*link = self->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	forget(first, self);
	if (second != first) {
		forget(second, self);
		pthread_spin_unlock(&second->lock);
	}
	pthread_spin_unlock(&first->lock);
	pthread_spin_destroy(&self->sq_lock);
	pthread_spin_destroy(&self->rq_lock);
	free(self->sq_entries);
	free(self->rq_wr_ids);
	free(self->batch);
	free(self);
	return 0;
}
