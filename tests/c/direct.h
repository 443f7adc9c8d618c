/* A program's side of a direct QP (mlx5dv_init_obj's rings): WQEs written with mlx5dv.h's setters,
 * the doorbell as a ConnectX program rings it, raw CQEs by owner bit. Shared by
 * tests/c/mlx5dv_direct.c and benchmarks/mlx5dv_post.c. */
#ifndef PYROCE_TEST_DIRECT_H
#define PYROCE_TEST_DIRECT_H

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <time.h>

#define CQE_WAIT_S 10

struct direct {
	struct mlx5dv_qp qp;
	struct mlx5dv_cq cq;
	uint32_t qpn, pi, ci, rq_head;
	unsigned int bf_offset;
};

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The next CQE of the direct CQ once its owner bit says it is this lap's, or NULL after `wait_s`. */
static inline struct mlx5_cqe64 *next_cqe(struct direct *d, double wait_s)
{
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)d->cq.buf + (d->ci & (d->cq.cqe_cnt - 1));
	double until = now() + wait_s;

	do {
		uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);

		if (op_own >> 4 != MLX5_CQE_INVALID && (op_own & MLX5_CQE_OWNER_MASK) == !!(d->ci & d->cq.cqe_cnt))
			return cqe;
	} while (now() < until);
	return NULL;
}

/* Take the CQE and publish the consumer index in the CQ's doorbell record, as libmlx5 does. */
static inline void consume(struct direct *d)
{
	d->ci++;
	__atomic_store_n(&d->cq.dbrec[0] /* the consumer index (libmlx5: MLX5_CQ_SET_CI) */, htobe32(d->ci & 0xffffff), __ATOMIC_RELEASE);
}

/* The WQE at the producer: control, [remote address], one data segment; `index` is what its
 * control segment says (the producer's, unless a test writes another). Returns its control
 * segment; the producer is not moved. */
static inline struct mlx5_wqe_ctrl_seg *write_wqe(struct direct *d, uint8_t opcode, uint16_t index, uint64_t raddr,
					   uint32_t rkey, struct ibv_mr *mr, void *addr, uint32_t length)
{
	uint8_t *wqe = (uint8_t *)d->qp.sq.buf + (d->pi & (d->qp.sq.wqe_cnt - 1)) * d->qp.sq.stride;
	struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)wqe;
	struct mlx5_wqe_data_seg *data = (struct mlx5_wqe_data_seg *)(ctrl + 1);
	uint8_t ds = 2;

	if (opcode != MLX5_OPCODE_SEND) {
		struct mlx5_wqe_raddr_seg *remote = (struct mlx5_wqe_raddr_seg *)(ctrl + 1);

		remote->raddr = htobe64(raddr);
		remote->rkey = htobe32(rkey);
		remote->reserved = 0;
		data = (struct mlx5_wqe_data_seg *)(remote + 1);
		ds = 3;
	}
	mlx5dv_set_data_seg(data, length, mr->lkey, (uintptr_t)addr);
	mlx5dv_set_ctrl_seg(ctrl, index, opcode, 0, d->qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
	return ctrl;
}

/* The doorbell as a ConnectX program rings it: the WQE written, a fence, the doorbell record,
 * then the control segment's first 8 bytes stored to the UAR (or, `blueflame`, the whole basic
 * block copied to the BlueFlame register, whose two halves alternate). */
static inline void ring(struct direct *d, struct mlx5_wqe_ctrl_seg *ctrl, int blueflame)
{
	d->pi++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&d->qp.dbrec[MLX5_SND_DBR], htobe32(d->pi & 0xffff), __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (blueflame) {
		volatile uint64_t *reg = (volatile uint64_t *)((uint8_t *)d->qp.bf.reg + d->bf_offset);

		for (unsigned int i = 0; i < MLX5_SEND_WQE_BB / 8; i++)
			reg[i] = ((uint64_t *)ctrl)[i];
		d->bf_offset ^= d->qp.bf.size;
	} else {
		*(volatile uint64_t *)d->qp.bf.reg = *(uint64_t *)ctrl;
	}
}

#endif
