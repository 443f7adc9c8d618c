/* The data path, in C with no GIL: post_send writes mlx5 send WQEs into the QP's ring,
 * post_recv receive WQEs, each publishes its producer counter in the doorbell record and
 * rings the doorbell (a record in the device's pipe, nic/handoff.py); poll_cq reads CQEs whose
 * owner bit is valid and turns them into ibv_wc. The layouts are src/pyroce/nic/wqe.py and
 * cqe.py; the checks and errnos are pyroce.verbs.qp's and recv_queue's, so a C program and a
 * Python one are refused alike. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#define WQEBB 64
#define SEG 16
#define MAX_DS 0x3f
#define MAX_MSG_SZ (8u << 20) /* rxe's max_msg_sz (pyroce.ib.limits) */
#define INLINE_FLAG 0x80000000u
#define INVALID_LKEY 0x100u
#define CQE_SIZE 64
#define SPIN_POLLS 256

enum { /* MLX5_OPCODE_* */
	OP_SEND_INVAL = 0x01,
	OP_RDMA_WRITE = 0x08,
	OP_RDMA_WRITE_IMM = 0x09,
	OP_SEND = 0x0a,
	OP_SEND_IMM = 0x0b,
	OP_RDMA_READ = 0x10,
	OP_ATOMIC_CS = 0x11,
	OP_ATOMIC_FA = 0x12,
	OP_BIND_MW = 0x18,
	OP_LOCAL_INVAL = 0x1b,
};

enum { /* control segment fm_ce_se */
	CE_SOLICITED = 0x02,
	CE_CQ_UPDATE = 0x08,
	CE_FENCE = 0x80,
};

enum { /* MLX5_CQE_*: op_own bits 7:4 */
	CQE_REQ = 0,
	CQE_RESP_WR_IMM = 1,
	CQE_RESP_SEND = 2,
	CQE_RESP_SEND_IMM = 3,
	CQE_RESP_SEND_INV = 4,
	CQE_REQ_ERR = 13,
	CQE_RESP_ERR = 14,
	CQE_INVALID = 15,
};

static void put32(uint8_t *at, uint32_t value)
{
	value = htobe32(value);
	memcpy(at, &value, 4);
}

static void put64(uint8_t *at, uint64_t value)
{
	value = htobe64(value);
	memcpy(at, &value, 8);
}

static uint32_t get32(const uint8_t *at)
{
	uint32_t value;

	memcpy(&value, at, 4);
	return be32toh(value);
}

/* Tell the engine: one 4-byte record, atomic in a pipe; a full pipe is readable, so the
 * engine empties it and the write is retried. */
static void ring_doorbell(struct pr_qp *qp, uint32_t kind)
{
	uint32_t record = kind | qp->qp.qp_num;
	int fd = qp->ctx->doorbell_fd;

	while (write(fd, &record, sizeof(record)) != sizeof(record)) {
		if (errno == EAGAIN) {
			struct pollfd writable = {.fd = fd, .events = POLLOUT};
			poll(&writable, 1, -1);
		} else if (errno != EINTR) {
			return; /* the device is closed: nothing will read it */
		}
	}
}

/* The MLX5 opcode of a work request, or -errno: EOPNOTSUPP for libibverbs opcodes pyroce
 * does not post from C, EINVAL for no opcode at all (as pyroce.verbs.qp answers). */
static int wqe_opcode(unsigned int opcode)
{
	switch (opcode) {
	case IBV_WR_RDMA_WRITE: return OP_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return OP_RDMA_WRITE_IMM;
	case IBV_WR_SEND: return OP_SEND;
	case IBV_WR_SEND_WITH_IMM: return OP_SEND_IMM;
	case IBV_WR_RDMA_READ: return OP_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return OP_ATOMIC_CS;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return OP_ATOMIC_FA;
	case IBV_WR_LOCAL_INV: return OP_LOCAL_INVAL;
	case IBV_WR_SEND_WITH_INV: return OP_SEND_INVAL;
	case IBV_WR_BIND_MW: return OP_BIND_MW;
	case IBV_WR_TSO:
	case IBV_WR_DRIVER1:
	case 14: /* IBV_WR_FLUSH, in newer headers */
	case IBV_WR_ATOMIC_WRITE: return -EOPNOTSUPP;
	default: return -EINVAL;
	}
}

/* What a UC QP may post (IBA 9.8): no READ, atomics or SEND with invalidate. */
static int uc_allows(int opcode)
{
	return opcode == OP_SEND || opcode == OP_SEND_IMM || opcode == OP_RDMA_WRITE || opcode == OP_RDMA_WRITE_IMM ||
	       opcode == OP_BIND_MW || opcode == OP_LOCAL_INVAL;
}

/* Write one WQE at the producer counter (the caller holds sq_lock): 0 or the errno. */
int pr_post_one(struct pr_qp *qp, const struct ibv_send_wr *wr)
{
	uint8_t wqe[MAX_DS * SEG];
	enum ibv_qp_state state = qp->qp.state;
	int opcode = wqe_opcode(wr->opcode);
	uint64_t length = 0;
	unsigned int off = SEG, ds, wqebbs;
	uint8_t flags = 0;

	if (state != IBV_QPS_RTS && state != IBV_QPS_SQD && state != IBV_QPS_ERR)
		return EINVAL;
	if (opcode < 0)
		return -opcode;
	if (qp->qp.qp_type == IBV_QPT_UC && !uc_allows(opcode))
		return EINVAL;
	if (qp->qp.qp_type == IBV_QPT_UD) { /* a UD message is a SEND (IBA 9.8.3), to its WR's AH */
		int bad = opcode != OP_SEND && opcode != OP_SEND_IMM ? EINVAL : pr_datagram_segment(wqe + off, wr);
		if (bad)
			return bad;
		off += PR_AV_SIZE;
	}
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		length += wr->sg_list[i].length;
	if (length > MAX_MSG_SZ)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_SIGNALED || qp->sq_sig_all)
		flags |= CE_CQ_UPDATE;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		flags |= CE_SOLICITED;
	if (wr->send_flags & IBV_SEND_FENCE)
		flags |= CE_FENCE;

	int atomic = opcode == OP_ATOMIC_CS || opcode == OP_ATOMIC_FA;
	if (opcode == OP_RDMA_WRITE || opcode == OP_RDMA_WRITE_IMM || opcode == OP_RDMA_READ) {
		put64(wqe + off, wr->wr.rdma.remote_addr);
		put32(wqe + off + 8, wr->wr.rdma.rkey);
		put32(wqe + off + 12, 0);
		off += SEG;
	} else if (atomic) {
		put64(wqe + off, wr->wr.atomic.remote_addr);
		put32(wqe + off + 8, wr->wr.atomic.rkey);
		put32(wqe + off + 12, 0);
		put64(wqe + off + SEG, opcode == OP_ATOMIC_CS ? wr->wr.atomic.swap : wr->wr.atomic.compare_add);
		put64(wqe + off + SEG + 8, opcode == OP_ATOMIC_CS ? wr->wr.atomic.compare_add : 0);
		off += 2 * SEG;
	}
	if (opcode == OP_BIND_MW) {
		int bad = pr_bind_segment(wqe + off, wr);
		if (bad)
			return bad;
		ds = (off + PR_BIND_SIZE) / SEG;
	} else if (opcode == OP_LOCAL_INVAL) {
		ds = off / SEG;
	} else if (wr->send_flags & IBV_SEND_INLINE && !atomic && opcode != OP_RDMA_READ) {
		if (length > qp->max_inline_data)
			return EINVAL;
		put32(wqe + off, (uint32_t)length | INLINE_FLAG);
		uint8_t *data = wqe + off + 4;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(data, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			data += wr->sg_list[i].length;
		}
		ds = off / SEG + (4 + length + SEG - 1) / SEG;
	} else {
		for (int i = 0; i < wr->num_sge; i++, off += SEG) {
			put32(wqe + off, wr->sg_list[i].length);
			put32(wqe + off + 4, wr->sg_list[i].lkey);
			put64(wqe + off + 8, wr->sg_list[i].addr);
		}
		ds = off / SEG;
	}
	if (ds > MAX_DS)
		return EINVAL;
	wqebbs = (ds * SEG + WQEBB - 1) / WQEBB;
	if (qp->sq_count >= qp->max_send_wr || qp->sq_producer - qp->sq_retired + wqebbs > qp->sq_wqebbs)
		return ENOMEM;

	uint32_t imm = 0; /* the WQE's imm bytes: a __be32 as the program holds it, or the rkey */
	if (opcode == OP_SEND_IMM || opcode == OP_RDMA_WRITE_IMM)
		imm = be32toh(wr->imm_data);
	else if (opcode == OP_SEND_INVAL || opcode == OP_LOCAL_INVAL)
		imm = wr->invalidate_rkey;
	else if (opcode == OP_BIND_MW)
		imm = wr->bind_mw.rkey; /* the window's new key */
	put32(wqe, ((qp->sq_producer & 0xffff) << 8) | opcode);
	put32(wqe + 4, (qp->qp.qp_num << 8) | ds);
	memset(wqe + 8, 0, 3); /* signature, stream id */
	wqe[11] = flags;
	put32(wqe + 12, imm);

	uint32_t size = qp->sq_wqebbs * WQEBB, start = (qp->sq_producer % qp->sq_wqebbs) * WQEBB;
	uint32_t first = ds * SEG < size - start ? ds * SEG : size - start;
	memcpy(qp->sq + start, wqe, first);
	memcpy(qp->sq, wqe + first, ds * SEG - first); /* a WQE may wrap to the ring's start */
	qp->sq_entries[(qp->sq_head + qp->sq_count) % qp->max_send_wr] =
		(struct pr_send_entry){.start = qp->sq_producer, .wqebbs = wqebbs, .wr_id = wr->wr_id};
	qp->sq_count++;
	qp->sq_producer += wqebbs;
	return 0;
}

/* Publish the producer in the doorbell record and ring (the caller holds sq_lock). */
void pr_send_doorbell(struct pr_qp *qp)
{
	__atomic_store_n(&qp->doorbell[1], htobe32(qp->sq_producer & 0xffff), __ATOMIC_RELEASE);
	ring_doorbell(qp, PR_SEND_DOORBELL);
}

int pr_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct pr_qp *qp = (struct pr_qp *)ibqp;
	int ret = pr_stale(qp->ctx);

	if (ret) {
		*bad_wr = wr;
		return ret;
	}
	pthread_spin_lock(&qp->sq_lock);
	uint32_t first = qp->sq_producer;
	for (; wr; wr = wr->next) {
		ret = pr_post_one(qp, wr);
		if (ret) {
			*bad_wr = wr;
			break;
		}
	}
	if (qp->sq_producer != first) /* the WRs before a bad one are posted, as in libibverbs */
		pr_send_doorbell(qp);
	pthread_spin_unlock(&qp->sq_lock);
	return ret;
}

/* A receive WQE: the WR's data segments, then a terminator if room is left (nic/wqe.py). */
void pr_write_recv_wqe(uint8_t *wqe, uint32_t stride, const struct ibv_recv_wr *wr)
{
	for (int i = 0; i < wr->num_sge; i++, wqe += SEG) {
		put32(wqe, wr->sg_list[i].length);
		put32(wqe + 4, wr->sg_list[i].lkey);
		put64(wqe + 8, wr->sg_list[i].addr);
	}
	if ((uint32_t)wr->num_sge * SEG < stride) {
		put32(wqe, 0);
		put32(wqe + 4, INVALID_LKEY);
		put64(wqe + 8, 0);
	}
}

int pr_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct pr_qp *qp = (struct pr_qp *)ibqp;
	int ret = pr_stale(qp->ctx);

	if (!ret && (qp->qp.state == IBV_QPS_RESET || qp->srq)) /* rxe: a QP on an SRQ has no receive queue */
		ret = EINVAL;
	if (ret) {
		*bad_wr = wr;
		return ret;
	}
	pthread_spin_lock(&qp->rq_lock);
	uint32_t first = qp->rq_producer;
	for (; wr; wr = wr->next) {
		if (qp->rq_outstanding >= qp->max_recv_wr)
			ret = ENOMEM;
		else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_recv_sge)
			ret = EINVAL;
		if (ret) {
			*bad_wr = wr;
			break;
		}
		uint32_t slot = qp->rq_producer % qp->rq_count;
		pr_write_recv_wqe(qp->rq + slot * qp->rq_stride, qp->rq_stride, wr);
		qp->rq_wr_ids[slot] = wr->wr_id;
		qp->rq_producer++;
		qp->rq_outstanding++;
	}
	if (qp->rq_producer != first) {
		__atomic_store_n(&qp->doorbell[0], htobe32(qp->rq_producer & 0xffff), __ATOMIC_RELEASE);
		ring_doorbell(qp, PR_RECV_DOORBELL);
	}
	pthread_spin_unlock(&qp->rq_lock);
	return ret;
}

void pr_qp_reset(struct pr_qp *qp, uint32_t scq_at, uint32_t rcq_at)
{
	pthread_spin_lock(&qp->sq_lock);
	qp->sq_producer = qp->sq_retired = qp->sq_head = qp->sq_count = 0;
	qp->reset_at_scq = scq_at;
	qp->reset_at_rcq = rcq_at;
	pthread_spin_unlock(&qp->sq_lock);
	pthread_spin_lock(&qp->rq_lock);
	qp->rq_producer = qp->rq_outstanding = 0;
	pthread_spin_unlock(&qp->rq_lock);
}

/* The send WQEs up to the one at `counter` are done (unsignaled ones included, as libmlx5
 * frees send-queue space): that one's wr_id. */
static uint64_t retire_send(struct pr_qp *qp, uint16_t counter)
{
	uint64_t wr_id = 0;

	pthread_spin_lock(&qp->sq_lock);
	while (qp->sq_count) {
		struct pr_send_entry *entry = &qp->sq_entries[qp->sq_head];
		qp->sq_head = (qp->sq_head + 1) % qp->max_send_wr;
		qp->sq_count--;
		qp->sq_retired = entry->start + entry->wqebbs;
		wr_id = entry->wr_id;
		if ((entry->start & 0xffff) == counter)
			break;
	}
	pthread_spin_unlock(&qp->sq_lock);
	return wr_id;
}

static uint64_t retire_recv(struct pr_qp *qp, uint16_t counter)
{
	uint64_t wr_id;

	pthread_spin_lock(&qp->rq_lock);
	wr_id = qp->rq_wr_ids[counter % qp->rq_count];
	if (qp->rq_outstanding)
		qp->rq_outstanding--;
	pthread_spin_unlock(&qp->rq_lock);
	return wr_id;
}

static enum ibv_wc_status status_of(uint8_t syndrome)
{
	switch (syndrome) { /* mlx5's error CQE syndromes (pyroce.nic.cqe) */
	case 0x01: return IBV_WC_LOC_LEN_ERR;
	case 0x02: return IBV_WC_LOC_QP_OP_ERR;
	case 0x04: return IBV_WC_LOC_PROT_ERR;
	case 0x05: return IBV_WC_WR_FLUSH_ERR;
	case 0x06: return IBV_WC_MW_BIND_ERR;
	case 0x10: return IBV_WC_BAD_RESP_ERR;
	case 0x11: return IBV_WC_LOC_ACCESS_ERR;
	case 0x12: return IBV_WC_REM_INV_REQ_ERR;
	case 0x13: return IBV_WC_REM_ACCESS_ERR;
	case 0x14: return IBV_WC_REM_OP_ERR;
	case 0x15: return IBV_WC_RETRY_EXC_ERR;
	case 0x16: return IBV_WC_RNR_RETRY_EXC_ERR;
	case 0x22: return IBV_WC_REM_ABORT_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

static enum ibv_wc_opcode send_opcode(uint8_t wqe_opcode)
{
	switch (wqe_opcode) {
	case OP_RDMA_WRITE: return IBV_WC_RDMA_WRITE;
	case OP_RDMA_READ: return IBV_WC_RDMA_READ;
	case OP_ATOMIC_CS: return IBV_WC_COMP_SWAP;
	case OP_ATOMIC_FA: return IBV_WC_FETCH_ADD;
	case 0x18: return IBV_WC_BIND_MW;
	case OP_LOCAL_INVAL: return IBV_WC_LOCAL_INV;
	default: return IBV_WC_SEND;
	}
}

static int is_recv_cqe(uint32_t opcode)
{
	return opcode == CQE_RESP_WR_IMM || opcode == CQE_RESP_SEND || opcode == CQE_RESP_SEND_IMM ||
	       opcode == CQE_RESP_SEND_INV || opcode == CQE_RESP_ERR;
}

/* Whether the CQE at counter `index`, of `qp`, is of the QP's life before a reset; the SRQ WQE
 * such a receive CQE consumed goes back to the SRQ (libmlx5's mlx5_cq_clean frees it). */
static int before_reset(struct pr_cq *cq, struct pr_qp *qp, const uint8_t *cqe, uint32_t index)
{
	if (index >= (cq == qp->scq ? qp->reset_at_scq : qp->reset_at_rcq))
		return 0;
	if (qp->srq && is_recv_cqe(cqe[CQE_SIZE - 1] >> 4))
		pr_retire_srq(qp->srq, (uint16_t)(cqe[60] << 8 | cqe[61]));
	return 1;
}

/* The WC of the CQE at `cqe` (counter `index`); 0 for a CQE of a QP reset since it was
 * written, which libmlx5 would have cleaned out of the CQ (mlx5_cq_clean). */
static int to_wc(struct pr_cq *cq, const uint8_t *cqe, uint32_t index, uint8_t op_own, struct ibv_wc *wc)
{
	uint32_t opcode = op_own >> 4, word = get32(cqe + 56), qpn = word & 0xffffff;
	uint16_t counter = (uint16_t)(cqe[60] << 8 | cqe[61]);
	int is_recv = is_recv_cqe(opcode);
	struct pr_qp *qp = cq->last;

	if (!qp || qp->qp.qp_num != qpn)
		qp = cq->last = pr_find_qp(pr_ctx(cq->cq.context), qpn);
	if (qp && before_reset(cq, qp, cqe, index))
		return 0;
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = !qp ? 0 : !is_recv ? retire_send(qp, counter) : qp->srq ? pr_retire_srq(qp->srq, counter)
										: retire_recv(qp, counter);
	wc->qp_num = qpn;
	if (opcode == CQE_REQ_ERR || opcode == CQE_RESP_ERR) {
		wc->status = status_of(cqe[55]);
		wc->vendor_err = cqe[54];
		wc->opcode = is_recv ? IBV_WC_RECV : send_opcode(word >> 24);
		return 1;
	}
	wc->status = IBV_WC_SUCCESS;
	wc->byte_len = get32(cqe + 44);
	if (!is_recv) {
		wc->opcode = send_opcode(word >> 24);
		return 1;
	}
	wc->opcode = opcode == CQE_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	if (opcode == CQE_RESP_WR_IMM || opcode == CQE_RESP_SEND_IMM) {
		wc->wc_flags = IBV_WC_WITH_IMM;
		memcpy(&wc->imm_data, cqe + 36, 4); /* network order, as the wire carried it */
	} else if (opcode == CQE_RESP_SEND_INV) {
		wc->wc_flags = IBV_WC_WITH_INV;
		wc->invalidated_rkey = get32(cqe + 36);
	}
	uint32_t flags_rqpn = get32(cqe + 24);
	wc->src_qp = flags_rqpn & 0xffffff;
	wc->sl = flags_rqpn >> 24 & 0xf;
	if (flags_rqpn >> 28 & 3)
		wc->wc_flags |= IBV_WC_GRH;
	return 1;
}

/* The CQE at counter `index` if the NIC has written it (owner byte read with acquire), else NULL. */
static const uint8_t *valid_cqe(struct pr_cq *cq, uint32_t index)
{
	const uint8_t *cqe = cq->ring + (index & (cq->count - 1)) * CQE_SIZE;
	uint8_t op_own = __atomic_load_n(&cqe[CQE_SIZE - 1], __ATOMIC_ACQUIRE);

	return op_own >> 4 == CQE_INVALID || (op_own & 1) != ((index >> cq->shift) & 1) ? NULL : cqe;
}

/* Take the unpolled CQEs of `gone`, a QP being destroyed, out of `cq` (the caller holds its
 * lock), as libmlx5's mlx5_cq_clean: the CQEs after them move up over them, keeping each slot's
 * owner bit, and the consumer moves past the room made; the SRQ WQEs they consumed go back to
 * the SRQ. CQEs of a QP reset since are dropped too (a moved one would no longer be before its
 * QP's reset counter). The NIC writes only past the CQEs found here, so none is moved under it. */
void pr_cq_clean(struct pr_cq *cq, struct pr_qp *gone)
{
	uint32_t producer = cq->consumer, freed = 0;

	while (producer - cq->consumer < cq->count && valid_cqe(cq, producer))
		producer++;
	while (producer-- != cq->consumer) {
		uint8_t *cqe = cq->ring + (producer & (cq->count - 1)) * CQE_SIZE;
		uint32_t qpn = get32(cqe + 56) & 0xffffff;
		struct pr_qp *qp = qpn == gone->qp.qp_num ? gone : pr_find_qp(pr_ctx(cq->cq.context), qpn);

		if (qp == gone) {
			if (gone->srq && is_recv_cqe(cqe[CQE_SIZE - 1] >> 4))
				pr_retire_srq(gone->srq, (uint16_t)(cqe[60] << 8 | cqe[61]));
			freed++;
		} else if (qp && before_reset(cq, qp, cqe, producer)) {
			freed++;
		} else if (freed) {
			uint8_t *to = cq->ring + ((producer + freed) & (cq->count - 1)) * CQE_SIZE;
			uint8_t owner = to[CQE_SIZE - 1] & 1;
			memcpy(to, cqe, CQE_SIZE);
			to[CQE_SIZE - 1] = (to[CQE_SIZE - 1] & ~1) | owner;
		}
	}
	if (freed) {
		cq->consumer += freed;
		__atomic_store_n(cq->consumer_record, htobe32(cq->consumer & 0xffffff), __ATOMIC_RELEASE);
	}
}

int pr_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct pr_cq *cq = (struct pr_cq *)ibcq;
	int found = 0;

	if (pr_stale(pr_ctx(cq->cq.context))) {
		errno = EIO;
		return -1;
	}
	pthread_spin_lock(&cq->lock);
	uint32_t first = cq->consumer;
	while (found < num_entries) {
		uint32_t index = cq->consumer;
		const uint8_t *cqe = cq->ring + (index & (cq->count - 1)) * CQE_SIZE;
		/* the owner byte first (acquire), then the body: the engine writes it last */
		uint8_t op_own = __atomic_load_n(&cqe[CQE_SIZE - 1], __ATOMIC_ACQUIRE);
		if (op_own >> 4 == CQE_INVALID || (op_own & 1) != ((index >> cq->shift) & 1))
			break;
		cq->consumer++;
		found += to_wc(cq, cqe, index, op_own, &wc[found]);
	}
	if (cq->consumer != first) /* the NIC may reuse the entries read */
		__atomic_store_n(cq->consumer_record, htobe32(cq->consumer & 0xffffff), __ATOMIC_RELEASE);
	pthread_spin_unlock(&cq->lock);
	if (cq->consumer != first) {
		cq->empty_polls = 0;
	} else if (!pr_nap_without_gil() && ++cq->empty_polls > SPIN_POLLS) {
		struct timespec nap = {0, 1};
		nanosleep(&nap, NULL);
	}
	return found;
}
