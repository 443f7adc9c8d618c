/* mlx5's direct verbs on pyroce0, as a program that posts its own WQEs uses them (RDMAxcel, UCX's
 * mlx5 transports): the QP and CQ taken with mlx5dv_init_obj, WQEs written by hand with
 * mlx5dv.h's segment setters, the doorbell record moved and a doorbell stored to the UAR (a 64-bit
 * store, then a BlueFlame copy), raw CQEs polled by owner bit. QP a (mlx5dv_create_qp, direct) is
 * connected to QP b (ibv_create_qp, posted through the verbs) on the same NIC. Prints
 * "<what> <errno>" per verb and "<what> <value>" per field; tests/test_mlx5dv.py checks them. */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "direct.h"

#define SIZE 4096

static void fail(const char *what)
{
	printf("FAILED %s\n", what);
	exit(1);
}

static void report_cqe(const char *what, struct direct *d)
{
	struct mlx5_cqe64 *cqe = next_cqe(d, CQE_WAIT_S);

	if (!cqe)
		fail(what);
	printf("%s opcode=%d wqe_counter=%u byte_cnt=%u qpn=0x%x\n", what, mlx5dv_get_cqe_opcode(cqe),
	       be16toh(cqe->wqe_counter), be32toh(cqe->byte_cnt), be32toh(cqe->sop_drop_qpn) & 0xffffff);
	consume(d);
}

static void wait_recv(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double until = now() + CQE_WAIT_S;
	int got;

	while (!(got = ibv_poll_cq(cq, 1, &wc)) && now() < until)
		;
	printf("%s status=%d opcode=%d byte_len=%u\n", what, got ? (int)wc.status : -1, got ? (int)wc.opcode : -1,
	       got ? wc.byte_len : 0);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mlx5dv_context attrs = {.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION | MLX5DV_CONTEXT_MASK_SWP};
	struct direct d = {0};
	union ibv_gid gid;

	if (!list || !list[0])
		fail("no device");
	printf("is_supported %d\n", mlx5dv_is_supported(list[0]));
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx)
		fail("open");
	report("query_device", mlx5dv_query_device(ctx, &attrs));
	printf("attrs version=%d flags=%llu comp_mask=%llu\n", attrs.version, (unsigned long long)attrs.flags,
	       (unsigned long long)attrs.comp_mask);
	if (ibv_query_gid(ctx, 1, 0, &gid))
		fail("query_gid");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *a_buf = calloc(1, SIZE), *b_buf = calloc(1, SIZE);
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, SIZE, access), *b_mr = ibv_reg_mr(pd, b_buf, SIZE, access);
	if (!pd || !a_mr || !b_mr)
		fail("pd or mr");

	struct mlx5dv_cq_init_attr compressed = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE};
	struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16};
	report("create_cq_compressed", null_errno(mlx5dv_create_cq(ctx, &cq_attr, &compressed)));
	struct mlx5dv_cq_init_attr plain_cq = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE, .cqe_size = 64};
	struct ibv_cq_ex *a_cq_ex = mlx5dv_create_cq(ctx, &cq_attr, &plain_cq);
	report("create_cq", null_errno(a_cq_ex));
	struct ibv_cq *a_cq = ibv_cq_ex_to_cq(a_cq_ex), *b_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);

	struct ibv_qp_init_attr_ex qp_attr = {.send_cq = a_cq, .recv_cq = a_cq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						      .max_recv_sge = 1},
					      .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	struct mlx5dv_qp_init_attr dc = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC};
	report("create_qp_dc", null_errno(mlx5dv_create_qp(ctx, &qp_attr, &dc)));
	struct mlx5dv_qp_init_attr plain_qp = {0};
	struct ibv_qp *a = mlx5dv_create_qp(ctx, &qp_attr, &plain_qp);
	report("create_qp", null_errno(a));
	struct ibv_qp_init_attr b_attr = {.send_cq = b_cq, .recv_cq = b_cq, .qp_type = IBV_QPT_RC,
					  .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *b = ibv_create_qp(pd, &b_attr);
	if (!a || !b || !b_cq)
		fail("qp or cq");
	report("connect", connect_qp(a, b->qp_num, &gid, access, 0) || connect_qp(b, a->qp_num, &gid, access, 0));

	struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &srq_attr);
	struct mlx5dv_srq dv_srq = {0};
	struct mlx5dv_obj srq_obj = {.srq = {.in = srq, .out = &dv_srq}};
	report("init_obj_srq", mlx5dv_init_obj(&srq_obj, MLX5DV_OBJ_SRQ));
	struct mlx5dv_obj obj = {.qp = {.in = a, .out = &d.qp}, .cq = {.in = a_cq, .out = &d.cq}};
	report("init_obj", mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ));
	printf("qp sq.wqe_cnt=%u sq.stride=%u rq.wqe_cnt=%u rq.stride=%u bf.size=%u dbrec=%d bf.reg=%d\n",
	       d.qp.sq.wqe_cnt, d.qp.sq.stride, d.qp.rq.wqe_cnt, d.qp.rq.stride, d.qp.bf.size, d.qp.dbrec != NULL,
	       d.qp.bf.reg != NULL);
	printf("cq cqe_cnt=%u cqe_size=%u cqn_set=%d cq_uar=%d\n", d.cq.cqe_cnt, d.cq.cqe_size, d.cq.cqn != 0,
	       d.cq.cq_uar != NULL);
	d.qpn = a->qp_num;

	/* A WRITE, a SEND into a receive posted through the verbs, a READ: each its own doorbell */
	struct ibv_sge b_sge = {.addr = (uintptr_t)b_buf + 1024, .length = 512, .lkey = b_mr->lkey};
	struct ibv_recv_wr b_recv = {.wr_id = 7, .sg_list = &b_sge, .num_sge = 1}, *bad_recv;
	report("post_recv_b", ibv_post_recv(b, &b_recv, &bad_recv));
	for (int i = 0; i < SIZE; i++) {
		a_buf[i] = (uint8_t)(i * 7 + 1);
		b_buf[i] = i >= 1024 ? 0 : (uint8_t)(i * 3 + 2);
	}
	ring(&d, write_wqe(&d, MLX5_OPCODE_RDMA_WRITE, d.pi, (uintptr_t)b_buf + 2048, b_mr->rkey, a_mr, a_buf, 300), 0);
	report_cqe("cqe_write", &d);
	printf("write_data %d\n", !memcmp(b_buf + 2048, a_buf, 300));
	ring(&d, write_wqe(&d, MLX5_OPCODE_SEND, d.pi, 0, 0, a_mr, a_buf + 512, 100), 0);
	report_cqe("cqe_send", &d);
	wait_recv(b_cq, "wc_recv_b");
	printf("send_data %d\n", !memcmp(b_buf + 1024, a_buf + 512, 100));
	ring(&d, write_wqe(&d, MLX5_OPCODE_RDMA_READ, d.pi, (uintptr_t)b_buf, b_mr->rkey, a_mr, a_buf + 3072, 200), 1);
	report_cqe("cqe_read", &d);
	printf("read_data %d\n", !memcmp(a_buf + 3072, b_buf, 200));

	/* A receive posted by hand on a: its WQE and the receive doorbell record, nothing rung */
	struct mlx5_wqe_data_seg *rwqe = (struct mlx5_wqe_data_seg *)((uint8_t *)d.qp.rq.buf +
								      (d.rq_head & (d.qp.rq.wqe_cnt - 1)) * d.qp.rq.stride);
	mlx5dv_set_data_seg(rwqe, 256, a_mr->lkey, (uintptr_t)a_buf + 3584);
	if (d.qp.rq.stride > sizeof(*rwqe))
		mlx5dv_set_data_seg(rwqe + 1, 0, MLX5_INVALID_LKEY, 0);
	d.rq_head++;
	__atomic_store_n(&d.qp.dbrec[MLX5_RCV_DBR], htobe32(d.rq_head & 0xffff), __ATOMIC_RELEASE);
	struct ibv_sge b_send_sge = {.addr = (uintptr_t)b_buf + 3000, .length = 64, .lkey = b_mr->lkey};
	struct ibv_send_wr b_send = {.wr_id = 9, .sg_list = &b_send_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				     .send_flags = IBV_SEND_SIGNALED}, *bad_send;
	memset(b_buf + 3000, 0x5a, 64);
	report("post_send_b", ibv_post_send(b, &b_send, &bad_send));
	report_cqe("cqe_recv_a", &d);
	wait_recv(b_cq, "wc_send_b");
	printf("recv_data %d\n", a_buf[3584] == 0x5a && a_buf[3584 + 63] == 0x5a && a_buf[3584 + 64] != 0x5a);

	/* Torn: the record moves past a WQE whose control segment is not written yet (it still holds
	 * the index of the ring's previous lap); nothing happens until it is */
	uint8_t before[64];
	memcpy(before, b_buf + 2560, sizeof(before));
	struct mlx5_wqe_ctrl_seg *torn = write_wqe(&d, MLX5_OPCODE_RDMA_WRITE, (uint16_t)(d.pi - d.qp.sq.wqe_cnt),
						   (uintptr_t)b_buf + 2560, b_mr->rkey, a_mr, a_buf + 100, 64);
	uint16_t torn_index = d.pi;
	ring(&d, torn, 0);
	printf("torn_cqe %d\n", next_cqe(&d, 0.3) != NULL);
	printf("torn_untouched %d\n", !memcmp(before, b_buf + 2560, sizeof(before)));
	mlx5dv_set_ctrl_seg(torn, torn_index, MLX5_OPCODE_RDMA_WRITE, 0, d.qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	report_cqe("cqe_torn_written", &d);
	printf("torn_data %d\n", !memcmp(b_buf + 2560, a_buf + 100, 64));
	ring(&d, write_wqe(&d, MLX5_OPCODE_RDMA_WRITE, d.pi, (uintptr_t)b_buf + 2700, b_mr->rkey, a_mr, a_buf, 8), 1);
	report_cqe("cqe_after", &d);

	/* a direct QP and its CQ go as any others (the first error, if one fails) */
	int gone = ibv_destroy_qp(a) ?: ibv_destroy_qp(b) ?: ibv_destroy_srq(srq) ?: ibv_destroy_cq(a_cq) ?:
		   ibv_destroy_cq(b_cq) ?: ibv_dereg_mr(a_mr) ?: ibv_dereg_mr(b_mr) ?: ibv_dealloc_pd(pd);
	report("destroyed", gone);
	return ibv_close_device(ctx);
}
