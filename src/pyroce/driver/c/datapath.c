/* The data path, in C over the shared rings: post_send writes mlx5 send WQEs into the QP's ring,
 * post_recv receive WQEs, each publishes its producer counter in the doorbell record and
 * rings the doorbell (a record in the device's pipe, host/handoff.py); poll_cq reads CQEs whose
 * owner bit is valid and turns them into ibv_wc. The layouts are src/pyroce/nic/wqe.py and
 * cqe.py, mlx5dv.h's structs and values (pyroce_abi.h's for pyroce's own); the checks and
 * errnos are pyroce.verbs.qp's and recv_queue's, so a C program and a Python one are refused
 * alike. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#define SEG PYROCE_SEND_WQE_DS /* the unit of the control segment's ds */
#define SPIN_POLLS 256

/* The largest WQE built on the stack fits it: ds counts at most PYROCE_MAX_DS segments, and the
 * inline data is copied in before ds is checked */
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_datagram_seg) +
		       sizeof(struct mlx5_wqe_inl_data_seg) + PYROCE_MAX_INLINE_DATA <= PYROCE_MAX_DS * SEG,
	       "an inline WQE of max_inline_data bytes overruns the WQE buffer");
_Static_assert(sizeof(uint32_t) == PYROCE_DOORBELL_RECORD_SIZE, "a doorbell pipe record is a u32");

/* mlx5dv_set_data_seg, with the address a uint64_t as ibv_sge holds it (not a uintptr_t) */
static void set_data_seg(struct mlx5_wqe_data_seg *seg, uint32_t length, uint32_t lkey, uint64_t addr)
{
	seg->byte_count = htobe32(length);
	seg->lkey = htobe32(lkey);
	seg->addr = htobe64(addr);
}

/* Tell the engine: one 4-byte record, atomic in a pipe; a full pipe is readable, so the
 * engine empties it and the write is retried. */
static void ring_doorbell(struct pr_qp *qp, uint32_t kind)
{
	uint32_t record = kind | qp->qp.qp_num; /* PYROCE_DOORBELL_RECORD_SIZE bytes */
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
	case IBV_WR_RDMA_WRITE: return MLX5_OPCODE_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return MLX5_OPCODE_RDMA_WRITE_IMM;
	case IBV_WR_SEND: return MLX5_OPCODE_SEND;
	case IBV_WR_SEND_WITH_IMM: return MLX5_OPCODE_SEND_IMM;
	case IBV_WR_RDMA_READ: return MLX5_OPCODE_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return MLX5_OPCODE_ATOMIC_CS;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return MLX5_OPCODE_ATOMIC_FA;
	case IBV_WR_LOCAL_INV: return MLX5_OPCODE_LOCAL_INVAL;
	case IBV_WR_SEND_WITH_INV: return MLX5_OPCODE_SEND_INVAL;
	case IBV_WR_BIND_MW: return PYROCE_OPCODE_BIND_MW;
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
	return opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM || opcode == MLX5_OPCODE_RDMA_WRITE ||
	       opcode == MLX5_OPCODE_RDMA_WRITE_IMM || opcode == PYROCE_OPCODE_BIND_MW ||
	       opcode == MLX5_OPCODE_LOCAL_INVAL;
}

/* Write one WQE at the producer counter (the caller holds sq_lock): 0 or the errno. */
int pr_post_one(struct pr_qp *qp, const struct ibv_send_wr *wr)
{
	uint8_t wqe[PYROCE_MAX_DS * SEG] __attribute__((aligned(SEG)));
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
		int bad = opcode != MLX5_OPCODE_SEND && opcode != MLX5_OPCODE_SEND_IMM ? EINVAL
										 : pr_datagram_segment(wqe + off, wr);
		if (bad)
			return bad;
		off += sizeof(struct mlx5_wqe_datagram_seg);
	}
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		length += wr->sg_list[i].length;
	if (length > PYROCE_MAX_MSG_SZ)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_SIGNALED || qp->sq_sig_all)
		flags |= MLX5_WQE_CTRL_CQ_UPDATE;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		flags |= MLX5_WQE_CTRL_SOLICITED;
	if (wr->send_flags & IBV_SEND_FENCE)
		flags |= MLX5_WQE_CTRL_FENCE;

	int atomic = opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA;
	if (opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
	    opcode == MLX5_OPCODE_RDMA_READ) {
		struct mlx5_wqe_raddr_seg *raddr = (struct mlx5_wqe_raddr_seg *)(wqe + off);
		raddr->raddr = htobe64(wr->wr.rdma.remote_addr);
		raddr->rkey = htobe32(wr->wr.rdma.rkey);
		raddr->reserved = 0;
		off += sizeof(*raddr);
	} else if (atomic) {
		struct mlx5_wqe_raddr_seg *raddr = (struct mlx5_wqe_raddr_seg *)(wqe + off);
		struct mlx5_wqe_atomic_seg *operands = (struct mlx5_wqe_atomic_seg *)(raddr + 1);
		raddr->raddr = htobe64(wr->wr.atomic.remote_addr);
		raddr->rkey = htobe32(wr->wr.atomic.rkey);
		raddr->reserved = 0;
		operands->swap_add =
			htobe64(opcode == MLX5_OPCODE_ATOMIC_CS ? wr->wr.atomic.swap : wr->wr.atomic.compare_add);
		operands->compare = htobe64(opcode == MLX5_OPCODE_ATOMIC_CS ? wr->wr.atomic.compare_add : 0);
		off += sizeof(*raddr) + sizeof(*operands);
	}
	if (opcode == PYROCE_OPCODE_BIND_MW) {
		int bad = pr_bind_segment(wqe + off, wr);
		if (bad)
			return bad;
		ds = (off + sizeof(struct pyroce_bind_seg)) / SEG;
	} else if (opcode == MLX5_OPCODE_LOCAL_INVAL) {
		ds = off / SEG;
	} else if (wr->send_flags & IBV_SEND_INLINE && !atomic && opcode != MLX5_OPCODE_RDMA_READ) {
		if (length > qp->max_inline_data)
			return EINVAL;
		struct mlx5_wqe_inl_data_seg *inl = (struct mlx5_wqe_inl_data_seg *)(wqe + off);
		inl->byte_count = htobe32((uint32_t)length | MLX5_INLINE_SEG);
		uint8_t *data = (uint8_t *)(inl + 1);
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(data, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			data += wr->sg_list[i].length;
		}
		ds = off / SEG + (sizeof(*inl) + length + SEG - 1) / SEG;
	} else {
		for (int i = 0; i < wr->num_sge; i++, off += SEG)
			set_data_seg((struct mlx5_wqe_data_seg *)(wqe + off), wr->sg_list[i].length,
				     wr->sg_list[i].lkey, wr->sg_list[i].addr);
		ds = off / SEG;
	}
	if (ds > PYROCE_MAX_DS)
		return EINVAL;
	wqebbs = (ds * SEG + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	if (qp->sq_count >= qp->max_send_wr || qp->sq_producer - qp->sq_retired + wqebbs > qp->sq_wqebbs)
		return ENOMEM;

	uint32_t imm = 0; /* the WQE's imm bytes: a __be32 as the program holds it, or the rkey */
	if (opcode == MLX5_OPCODE_SEND_IMM || opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
		imm = be32toh(wr->imm_data);
	else if (opcode == MLX5_OPCODE_SEND_INVAL || opcode == MLX5_OPCODE_LOCAL_INVAL)
		imm = wr->invalidate_rkey;
	else if (opcode == PYROCE_OPCODE_BIND_MW)
		imm = wr->bind_mw.rkey; /* the window's new key */
	struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)wqe;
	memset(ctrl, 0, sizeof(*ctrl)); /* signature, stream id */
	mlx5dv_set_ctrl_seg(ctrl, qp->sq_producer & PYROCE_COUNTER_MASK, opcode, 0, qp->qp.qp_num, flags, ds, 0,
			    htobe32(imm));

	uint32_t size = qp->sq_wqebbs * MLX5_SEND_WQE_BB;
	uint32_t start = (qp->sq_producer % qp->sq_wqebbs) * MLX5_SEND_WQE_BB;
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
	__atomic_store_n(&qp->doorbell[MLX5_SND_DBR], htobe32(qp->sq_producer & PYROCE_COUNTER_MASK),
			 __ATOMIC_RELEASE);
	ring_doorbell(qp, PYROCE_SEND_DOORBELL);
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
	struct mlx5_wqe_data_seg *seg = (struct mlx5_wqe_data_seg *)wqe;

	for (int i = 0; i < wr->num_sge; i++, seg++)
		set_data_seg(seg, wr->sg_list[i].length, wr->sg_list[i].lkey, wr->sg_list[i].addr);
	if ((uint32_t)wr->num_sge * sizeof(*seg) < stride)
		set_data_seg(seg, 0, MLX5_INVALID_LKEY, 0);
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
		__atomic_store_n(&qp->doorbell[MLX5_RCV_DBR], htobe32(qp->rq_producer & PYROCE_COUNTER_MASK),
				 __ATOMIC_RELEASE);
		ring_doorbell(qp, PYROCE_RECV_DOORBELL);
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
		if ((entry->start & PYROCE_COUNTER_MASK) == counter)
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
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

static enum ibv_wc_opcode send_opcode(uint8_t wqe_opcode)
{
	switch (wqe_opcode) {
	case MLX5_OPCODE_RDMA_WRITE: return IBV_WC_RDMA_WRITE;
	case MLX5_OPCODE_RDMA_READ: return IBV_WC_RDMA_READ;
	case MLX5_OPCODE_ATOMIC_CS: return IBV_WC_COMP_SWAP;
	case MLX5_OPCODE_ATOMIC_FA: return IBV_WC_FETCH_ADD;
	case PYROCE_OPCODE_BIND_MW: return IBV_WC_BIND_MW;
	case MLX5_OPCODE_LOCAL_INVAL: return IBV_WC_LOCAL_INV;
	default: return IBV_WC_SEND;
	}
}

static int is_recv_cqe(uint32_t opcode)
{
	return opcode == MLX5_CQE_RESP_WR_IMM || opcode == MLX5_CQE_RESP_SEND || opcode == MLX5_CQE_RESP_SEND_IMM ||
	       opcode == MLX5_CQE_RESP_SEND_INV || opcode == MLX5_CQE_RESP_ERR;
}

static uint32_t cqe_qpn(const struct mlx5_cqe64 *cqe)
{
	return be32toh(cqe->sop_drop_qpn) & PYROCE_QPN_MASK;
}

/* A receive CQE of a QP on an SRQ that will not be polled gives its WQE back to the SRQ
 * (libmlx5's mlx5_cq_clean frees it). */
static void give_back_srq_wqe(struct pr_qp *qp, const struct mlx5_cqe64 *cqe)
{
	if (qp->srq && is_recv_cqe(cqe->op_own >> 4))
		pr_retire_srq(qp->srq, be16toh(cqe->wqe_counter));
}

/* Whether the CQE at counter `index`, of `qp`, is of the QP's life before a reset. */
static int before_reset(struct pr_cq *cq, struct pr_qp *qp, const struct mlx5_cqe64 *cqe, uint32_t index)
{
	if (index >= (cq == qp->scq ? qp->reset_at_scq : qp->reset_at_rcq))
		return 0;
	give_back_srq_wqe(qp, cqe);
	return 1;
}

/* The WC of the CQE at `cqe` (counter `index`); 0 for a CQE of a QP reset since it was
 * written, which libmlx5 would have cleaned out of the CQ (mlx5_cq_clean). */
static int to_wc(struct pr_cq *cq, const struct mlx5_cqe64 *cqe, uint32_t index, uint8_t op_own,
		 struct ibv_wc *wc)
{
	uint32_t opcode = op_own >> 4, word = be32toh(cqe->sop_drop_qpn), qpn = word & PYROCE_QPN_MASK;
	uint16_t counter = be16toh(cqe->wqe_counter);
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
	if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
		const struct mlx5_err_cqe *err = (const struct mlx5_err_cqe *)cqe;
		wc->status = status_of(err->syndrome);
		wc->vendor_err = err->vendor_err_synd;
		wc->opcode = is_recv ? IBV_WC_RECV : send_opcode(word >> 24);
		return 1;
	}
	wc->status = IBV_WC_SUCCESS;
	wc->byte_len = be32toh(cqe->byte_cnt);
	if (!is_recv) {
		wc->opcode = send_opcode(word >> 24);
		return 1;
	}
	wc->opcode = opcode == MLX5_CQE_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	if (opcode == MLX5_CQE_RESP_WR_IMM || opcode == MLX5_CQE_RESP_SEND_IMM) {
		wc->wc_flags = IBV_WC_WITH_IMM;
		wc->imm_data = cqe->imm_inval_pkey; /* network order, as the wire carried it */
	} else if (opcode == MLX5_CQE_RESP_SEND_INV) {
		wc->wc_flags = IBV_WC_WITH_INV;
		wc->invalidated_rkey = be32toh(cqe->imm_inval_pkey);
	}
	uint32_t flags_rqpn = be32toh(cqe->flags_rqpn);
	wc->src_qp = flags_rqpn & PYROCE_QPN_MASK;
	wc->sl = flags_rqpn >> 24 & 0xf;
	if (flags_rqpn & PYROCE_CQE_GRH_MASK)
		wc->wc_flags |= IBV_WC_GRH;
	return 1;
}

/* The CQE at counter `index` if the NIC has written it (owner byte read with acquire), else NULL. */
static struct mlx5_cqe64 *valid_cqe(struct pr_cq *cq, uint32_t index)
{
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)cq->ring + (index & (cq->count - 1));
	uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);

	return op_own >> 4 == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != ((index >> cq->shift) & 1) ? NULL
																		     : cqe;
}

/* Take the unpolled CQEs of `gone`, a QP being destroyed, out of `cq` (the caller holds its
 * lock), as libmlx5's mlx5_cq_clean: the CQEs after them move up over them, keeping each slot's
 * owner bit, and the consumer moves past the room made; the SRQ WQEs they consumed go back to
 * the SRQ. CQEs of a QP reset since are dropped too (a moved one would no longer be before its
 * QP's reset counter). The NIC writes only past the CQEs found here, so none is moved under it. */
void pr_cq_clean(struct pr_cq *cq, struct pr_qp *gone)
{
	uint32_t producer = cq->consumer, freed = 0;

	if (__atomic_load_n(&cq->dv_owned, __ATOMIC_RELAXED))
		return; /* the program polls its CQEs itself (mlx5dv_init_obj), as libmlx5 leaves a DV-owned CQ */

	while (producer - cq->consumer < cq->count && valid_cqe(cq, producer))
		producer++;
	while (producer-- != cq->consumer) {
		struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)cq->ring + (producer & (cq->count - 1));
		uint32_t qpn = cqe_qpn(cqe);
		struct pr_qp *qp = qpn == gone->qp.qp_num ? gone : pr_find_qp(pr_ctx(cq->cq.context), qpn);

		if (qp == gone) {
			give_back_srq_wqe(gone, cqe);
			freed++;
		} else if (qp && before_reset(cq, qp, cqe, producer)) {
			freed++;
		} else if (freed) {
			struct mlx5_cqe64 *to = (struct mlx5_cqe64 *)cq->ring + ((producer + freed) & (cq->count - 1));
			uint8_t owner = to->op_own & MLX5_CQE_OWNER_MASK;
			memcpy(to, cqe, sizeof(*to));
			to->op_own = (to->op_own & ~MLX5_CQE_OWNER_MASK) | owner;
		}
	}
	if (freed) {
		cq->consumer += freed;
		__atomic_store_n(cq->consumer_record, htobe32(cq->consumer & PYROCE_CQ_COUNTER_MASK), __ATOMIC_RELEASE);
	}
}

/* The nap's wake-up, asked of the NIC by the first poll that naps (one thread; the others nap
 * without it meanwhile). */
static int wake_ready(struct pr_cq *cq)
{
	int state = PR_WAKE_UNASKED;
	void *napping;
	int fd;

	if (__atomic_load_n(&cq->wake, __ATOMIC_ACQUIRE) == PR_WAKE_READY)
		return 1;
	if (!__atomic_compare_exchange_n(&cq->wake, &state, PR_WAKE_ASKING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 0;
	struct pr_answer answer;
	state = PR_WAKE_REFUSED;
	if (!pr_command(&answer, pr_ctx(cq->cq.context), "ibv_poll_cq", "cq_poller_wakeup", "h", cq->handle)) {
		if (!pr_unpack(&answer, "fA", &fd, &napping)) {
			cq->wake_fd = fd;
			cq->napping = napping;
			state = PR_WAKE_READY;
		}
		pr_answer_free(&answer);
	}
	__atomic_store_n(&cq->wake, state, __ATOMIC_RELEASE);
	return state == PR_WAKE_READY;
}

/* Past SPIN_POLLS empty polls in a row, each one naps, so that a program polling in a loop leaves
 * the NIC's engine the CPU (two pollers and the engine share this 2-core host's cores). The nap
 * ends with the CQ's next CQE: the flag set, the CQ looked at once more, a sleep on the NIC's
 * eventfd, which the engine writes when it writes a CQE and finds the flag (NicDevice.wake_poller).
 * A nap is never longer than a 1 ns sleep takes with the kernel's timer slack (~50 us), as the
 * plain nap it replaces: a program polling several CQs is not held on one, and a wake-up lost to
 * the race the engine does not fence costs no more than that. */
static void nap(struct pr_cq *cq)
{
	struct timespec nap = {0, 1};
	struct pollfd wake = {.events = POLLIN};
	uint64_t count;

	if (!wake_ready(cq)) {
		nanosleep(&nap, NULL);
		return;
	}
	wake.fd = cq->wake_fd;
	__atomic_store_n(cq->napping, 1, __ATOMIC_SEQ_CST); /* before the look: the engine's look is after its CQE */
	if (!valid_cqe(cq, __atomic_load_n(&cq->consumer, __ATOMIC_RELAXED)) && ppoll(&wake, 1, &nap, NULL) > 0)
		(void)!read(cq->wake_fd, &count, sizeof(count)); /* non-blocking: resets the counter */
	__atomic_store_n(cq->napping, 0, __ATOMIC_RELAXED);
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
		const struct mlx5_cqe64 *cqe = (const struct mlx5_cqe64 *)cq->ring + (index & (cq->count - 1));
		/* the owner byte first (acquire), then the body: the engine writes it last */
		uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
		if (op_own >> 4 == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != ((index >> cq->shift) & 1))
			break;
		cq->consumer++;
		found += to_wc(cq, cqe, index, op_own, &wc[found]);
	}
	if (cq->consumer != first) /* the NIC may reuse the entries read */
		__atomic_store_n(cq->consumer_record, htobe32(cq->consumer & PYROCE_CQ_COUNTER_MASK), __ATOMIC_RELEASE);
	pthread_spin_unlock(&cq->lock);
	if (cq->consumer != first)
		cq->empty_polls = 0;
	else if (++cq->empty_polls > SPIN_POLLS)
		nap(cq);
	return found;
}
