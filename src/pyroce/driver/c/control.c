/* The control verbs: PDs, MRs, completion channels, CQs and QPs, each a call into
 * pyroce.driver.calls (the verbs objects there check and answer as they do for Python), then
 * the C object the data path uses: the rings' addresses and its own counters. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

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

/* --- protection domains and memory regions ------------------------------------------- */

PR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	PyGILState_STATE state;
	struct pr_pd *pd;
	PyObject *obj;

	if (pr_enter(&state))
		return NULL;
	obj = pr_call("ibv_alloc_pd", "alloc_pd", "(O)", pr_ctx(context)->obj);
	pd = obj ? calloc(1, sizeof(*pd)) : NULL;
	if (obj && !pd) {
		Py_DECREF(obj);
		errno = ENOMEM;
	}
	if (pd) {
		pd->obj = obj;
		pd->pd.context = context;
		pd->pd.handle = pr_long(obj, "pdn");
	}
	pr_leave(state);
	return pd ? &pd->pd : NULL;
}

PR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct pr_pd *self = (struct pr_pd *)pd;
	int ret = pr_destroy("ibv_dealloc_pd", "dealloc_pd", self->obj);

	if (!ret)
		free(self);
	return ret;
}

PR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	PyGILState_STATE state;
	struct pr_mr *mr = NULL;
	PyObject *result, *obj;
	unsigned int lkey, rkey;

	if (pr_enter(&state))
		return NULL;
	result = pr_call("ibv_reg_mr", "reg_mr", "(OKni)", ((struct pr_pd *)pd)->obj,
			 (unsigned long long)(uintptr_t)addr, (Py_ssize_t)length, access);
	if (result && PyArg_ParseTuple(result, "OII", &obj, &lkey, &rkey)) {
		mr = pr_alloc_for(sizeof(*mr), "ibv_reg_mr", "dereg_mr", obj);
		if (mr) {
			mr->obj = obj;
			mr->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = length,
						 .handle = lkey, .lkey = lkey, .rkey = rkey};
		}
	}
	Py_XDECREF(result);
	pr_leave(state);
	return mr ? &mr->mr : NULL;
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
	PyGILState_STATE state;
	PyObject *result;
	unsigned int lkey, rkey;

	if (pr_enter(&state))
		return IBV_REREG_MR_ERR_INPUT;
	result = pr_call("ibv_rereg_mr", "rereg_mr", "(OiOKni)", self->obj, flags,
			 (flags & IBV_REREG_MR_CHANGE_PD) && pd ? ((struct pr_pd *)pd)->obj : Py_None,
			 (unsigned long long)(uintptr_t)addr, (Py_ssize_t)length, access);
	if (result && PyArg_ParseTuple(result, "II", &lkey, &rkey)) {
		mr->lkey = lkey;
		mr->rkey = rkey;
		if (flags & IBV_REREG_MR_CHANGE_PD)
			mr->pd = pd;
		if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
			mr->addr = addr;
			mr->length = length;
		}
	}
	Py_XDECREF(result);
	pr_leave(state);
	return result ? 0 : IBV_REREG_MR_ERR_INPUT;
}

PR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct pr_mr *self = (struct pr_mr *)mr;
	int ret = pr_destroy("ibv_dereg_mr", "dereg_mr", self->obj);

	if (!ret)
		free(self);
	return ret;
}

/* --- completion channels and CQs --------------------------------------------------- */

PR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	PyGILState_STATE state;
	struct pr_channel *channel = NULL;
	PyObject *result, *obj;
	int fd;

	if (pr_enter(&state))
		return NULL;
	result = pr_call("ibv_create_comp_channel", "create_comp_channel", "(O)", pr_ctx(context)->obj);
	if (result && PyArg_ParseTuple(result, "Oi", &obj, &fd)) {
		channel = calloc(1, sizeof(*channel));
		if (channel) {
			Py_INCREF(obj);
			channel->obj = obj;
			channel->channel = (struct ibv_comp_channel){.context = context, .fd = fd, .refcnt = 0};
		} else {
			errno = ENOMEM;
		}
	}
	Py_XDECREF(result);
	pr_leave(state);
	return channel ? &channel->channel : NULL;
}

PR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct pr_channel *self = (struct pr_channel *)channel;
	int ret;

	pthread_mutex_lock(&channel->context->mutex);
	ret = channel->refcnt ? EBUSY : 0;
	pthread_mutex_unlock(&channel->context->mutex);
	if (!ret)
		ret = pr_destroy("ibv_destroy_comp_channel", "destroy_comp_channel", self->obj);
	if (!ret)
		free(self);
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

/* Wait until the event fd is readable, as a read(2) of the kernel's event file would wait, with
 * no GIL held: 0, then the caller takes the event (a Python call that never waits, and says
 * EAGAIN if another thread took it first: the caller comes back here). -1 with errno: EINTR for
 * a signal whose handler did not ask SA_RESTART, EAGAIN at once for a non-blocking fd with
 * nothing ready, EBADF for a closed fd. */
int pr_wait_event(int fd)
{
	struct pollfd readable = {.fd = fd, .events = POLLIN};
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0)
		return -1;
	for (;;) {
		PyThreadState *released = pr_release_gil(); /* the engine thread needs it meanwhile */
		int ready = poll(&readable, 1, flags & O_NONBLOCK ? 0 : -1), error = errno;
		if (released)
			PyEval_RestoreThread(released);
		errno = error;
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

PR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	PyGILState_STATE state;
	PyObject *cqn;
	struct pr_cq *found;
	int error = pr_stale(pr_ctx(channel->context)); /* a child of fork(): no wait on the parent's fd */

	if (error) {
		errno = error;
		return -1;
	}
	do { /* the wait in C, so a signal ends it as it ends a read(2) */
		if (pr_wait_event(channel->fd) || pr_enter(&state))
			return -1;
		cqn = pr_call("ibv_get_cq_event", "get_cq_event", "(O)", ((struct pr_channel *)channel)->obj);
		error = errno;
		found = cqn ? pr_find_cq(pr_ctx(channel->context), PyLong_AsUnsignedLong(cqn)) : NULL;
		Py_XDECREF(cqn);
		pr_leave(state);
	} while (!cqn && error == EAGAIN);
	if (!found) {
		errno = cqn ? EIO : error; /* EIO: an event for a CQ destroyed meanwhile */
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

static void set_ring(struct pr_cq *cq, unsigned long long ring, unsigned int count)
{
	cq->ring = (uint8_t *)(uintptr_t)ring;
	cq->count = count;
	cq->shift = __builtin_ctz(count);
	cq->consumer = 0;
}

PR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct pr_context *ctx = pr_ctx(context);
	PyGILState_STATE state;
	struct pr_cq *cq = NULL;
	PyObject *result, *obj;
	unsigned long long ring, consumer;
	unsigned int cqn, count;
	int size;

	if (pr_enter(&state))
		return NULL;
	result = pr_call("ibv_create_cq", "create_cq", "(OiOi)", ctx->obj, cqe,
			 channel ? ((struct pr_channel *)channel)->obj : Py_None, comp_vector);
	if (result && PyArg_ParseTuple(result, "OIKIKi", &obj, &cqn, &ring, &count, &consumer, &size)) {
		cq = pr_alloc_for(sizeof(*cq), "ibv_create_cq", "destroy_cq", obj);
		if (cq)
			cq->obj = obj;
	}
	Py_XDECREF(result);
	pr_leave(state);
	if (!cq)
		return NULL;
	cq->cqn = cqn;
	set_ring(cq, ring, count);
	cq->consumer_record = (volatile uint32_t *)(uintptr_t)consumer;
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
	PyGILState_STATE state;
	PyObject *result;
	unsigned long long ring;
	unsigned int count;
	int size, ret = 0;

	if (pr_enter(&state))
		return errno;
	pthread_spin_lock(&self->lock);
	result = pr_call("ibv_resize_cq", "resize_cq", "(OiI)", self->obj, cqe, self->consumer);
	if (result && PyArg_ParseTuple(result, "KIi", &ring, &count, &size)) {
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
	} else {
		ret = result ? EIO : errno;
	}
	pthread_spin_unlock(&self->lock);
	Py_XDECREF(result);
	pr_leave(state);
	return ret;
}

int pr_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	PyGILState_STATE state;
	PyObject *result;

	if (pr_enter(&state))
		return errno;
	result = pr_call("ibv_req_notify_cq", "req_notify_cq", "(Oi)", ((struct pr_cq *)cq)->obj, solicited_only);
	Py_XDECREF(result);
	pr_leave(state);
	return result ? 0 : errno;
}

PR_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct pr_cq *self = (struct pr_cq *)cq;
	struct pr_context *ctx = pr_ctx(cq->context);
	int ret = pr_destroy("ibv_destroy_cq", "destroy_cq", self->obj);

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
	free(self->current);
	free(self);
	return 0;
}

/* --- queue pairs ------------------------------------------------------------------- */

PR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct ibv_qp_cap *cap = &attr->cap;
	PyGILState_STATE state;
	struct pr_qp *qp = NULL;
	PyObject *result, *obj = NULL;
	unsigned long long sq, rq, doorbell;
	unsigned int qpn, sq_wqebbs, rq_count, rq_stride;

	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (pr_enter(&state))
		return NULL;
	result = pr_call("ibv_create_qp", "create_qp", "(OOOOiiIIIII)", ((struct pr_pd *)pd)->obj,
			 ((struct pr_cq *)attr->send_cq)->obj, ((struct pr_cq *)attr->recv_cq)->obj,
			 attr->srq ? ((struct pr_srq *)attr->srq)->obj : Py_None, attr->qp_type,
			 attr->sq_sig_all, cap->max_send_wr, cap->max_recv_wr, cap->max_send_sge, cap->max_recv_sge,
			 cap->max_inline_data);
	if (result && PyArg_ParseTuple(result, "OIKIKIIK", &obj, &qpn, &sq, &sq_wqebbs, &rq, &rq_count, &rq_stride,
				       &doorbell)) {
		qp = calloc(1, sizeof(*qp));
		if (qp) {
			qp->sq_entries = calloc(cap->max_send_wr ? cap->max_send_wr : 1, sizeof(*qp->sq_entries));
			qp->rq_wr_ids = calloc(rq_count, sizeof(*qp->rq_wr_ids));
		}
		if (qp && qp->sq_entries && qp->rq_wr_ids) {
			Py_INCREF(obj);
			qp->obj = obj;
		} else {
			PyObject *gone = pr_call("ibv_create_qp", "destroy_qp", "(O)", obj);
			Py_XDECREF(gone);
			if (qp) {
				free(qp->sq_entries);
				free(qp->rq_wr_ids);
				free(qp);
				qp = NULL;
			}
			errno = ENOMEM;
		}
	}
	Py_XDECREF(result);
	pr_leave(state);
	if (!qp)
		return NULL;
	qp->ctx = ctx;
	qp->scq = (struct pr_cq *)attr->send_cq;
	qp->srq = (struct pr_srq *)attr->srq;
	qp->rcq = (struct pr_cq *)attr->recv_cq;
	qp->max_send_wr = cap->max_send_wr;
	qp->max_recv_wr = cap->max_recv_wr;
	qp->max_send_sge = cap->max_send_sge;
	qp->max_recv_sge = cap->max_recv_sge;
	qp->max_inline_data = cap->max_inline_data;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->sq = (uint8_t *)(uintptr_t)sq;
	qp->sq_wqebbs = sq_wqebbs;
	qp->rq = (uint8_t *)(uintptr_t)rq;
	qp->rq_count = rq_count;
	qp->rq_stride = rq_stride;
	qp->doorbell = (volatile uint32_t *)(uintptr_t)doorbell;
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

/* ibv_ah_attr as calls.modify_qp and create_ah read it (a new reference). */
PyObject *pr_ah_fields(const struct ibv_ah_attr *ah)
{
	const struct ibv_global_route *grh = &ah->grh;

	return Py_BuildValue("{s:y#,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "dgid", (const char *)grh->dgid.raw,
			     (Py_ssize_t)sizeof(grh->dgid), "flow_label", grh->flow_label, "sgid_index",
			     grh->sgid_index, "hop_limit", grh->hop_limit, "traffic_class", grh->traffic_class, "dlid",
			     ah->dlid, "sl", ah->sl, "src_path_bits", ah->src_path_bits, "static_rate",
			     ah->static_rate, "is_global", ah->is_global, "port_num", ah->port_num);
}

PR_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct pr_qp *self = (struct pr_qp *)qp;
	PyGILState_STATE state;
	PyObject *fields, *result = NULL;
	unsigned int scq_at, rcq_at;
	int reset = 0;

	if (pr_enter(&state))
		return errno;
	fields = Py_BuildValue(
		"{s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:N}",
		"qp_state", attr->qp_state, "cur_qp_state", attr->cur_qp_state, "path_mtu", attr->path_mtu,
		"path_mig_state", attr->path_mig_state, "qkey", attr->qkey, "rq_psn", attr->rq_psn, "sq_psn",
		attr->sq_psn, "dest_qp_num", attr->dest_qp_num, "qp_access_flags", attr->qp_access_flags,
		"pkey_index", attr->pkey_index, "alt_pkey_index", attr->alt_pkey_index, "en_sqd_async_notify",
		attr->en_sqd_async_notify, "sq_draining", attr->sq_draining, "max_rd_atomic", attr->max_rd_atomic,
		"max_dest_rd_atomic", attr->max_dest_rd_atomic, "min_rnr_timer", attr->min_rnr_timer, "port_num",
		attr->port_num, "timeout", attr->timeout, "retry_cnt", attr->retry_cnt, "rnr_retry", attr->rnr_retry,
		"alt_port_num", attr->alt_port_num, "alt_timeout", attr->alt_timeout, "rate_limit", attr->rate_limit,
		"ah_attr", pr_ah_fields(&attr->ah_attr));
	if (fields)
		result = pr_call("ibv_modify_qp", "modify_qp", "(OiO)", self->obj, attr_mask, fields);
	else
		errno = ENOMEM;
	Py_XDECREF(fields);
	if (result && result != Py_None)
		reset = PyArg_ParseTuple(result, "II", &scq_at, &rcq_at);
	PyErr_Clear();
	Py_XDECREF(result);
	pr_leave(state);
	if (!result)
		return errno;
	if (reset)
		pr_qp_reset(self, scq_at, rcq_at);
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

static void ah_from(PyObject *obj, struct ibv_ah_attr *ah)
{
	PyObject *route = PyObject_GetAttrString(obj, "gr");
	PyObject *dgid = route ? PyObject_GetAttrString(route, "dgid") : NULL;
	PyObject *raw = dgid ? PyObject_GetAttrString(dgid, "raw") : NULL;

	if (raw && PyBytes_Check(raw) && PyBytes_Size(raw) == sizeof(ah->grh.dgid))
		memcpy(ah->grh.dgid.raw, PyBytes_AsString(raw), sizeof(ah->grh.dgid));
	if (route) {
		ah->grh.flow_label = pr_long(route, "flow_label");
		ah->grh.sgid_index = pr_long(route, "sgid_index");
		ah->grh.hop_limit = pr_long(route, "hop_limit");
		ah->grh.traffic_class = pr_long(route, "traffic_class");
	}
	ah->dlid = pr_long(obj, "dlid");
	ah->sl = pr_long(obj, "sl");
	ah->src_path_bits = pr_long(obj, "src_path_bits");
	ah->static_rate = pr_long(obj, "static_rate");
	ah->is_global = pr_long(obj, "is_global");
	ah->port_num = pr_long(obj, "port_num");
	Py_XDECREF(raw);
	Py_XDECREF(dgid);
	Py_XDECREF(route);
	PyErr_Clear();
}

#define FIELD(attr, obj, name) ((attr)->name = pr_long(obj, #name))

PR_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			   struct ibv_qp_init_attr *init_attr)
{
	struct pr_qp *self = (struct pr_qp *)qp;
	PyGILState_STATE state;
	PyObject *found, *ah;

	if (pr_enter(&state))
		return errno;
	found = pr_call("ibv_query_qp", "query_qp", "(O)", self->obj);
	if (!found) {
		pr_leave(state);
		return errno;
	}
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
	ah = PyObject_GetAttrString(found, "ah_attr");
	if (ah)
		ah_from(ah, &attr->ah_attr);
	Py_XDECREF(ah);
	PyErr_Clear();
	Py_DECREF(found);
	pr_leave(state);
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
	int ret = pr_destroy("ibv_destroy_qp", "destroy_qp", self->obj);

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
