/* The extended verbs from a program built against the system's libibverbs, run on pyroce's:
 * an RC QP made by ibv_create_qp_ex, connected to itself, posts batches through the ibv_qp_ex
 * wr_* builders (each opcode, SGE lists, inline data, windows) and reads its completions
 * through an ibv_cq_ex; a batch with a bad WR, or aborted, posts nothing; a UD QP sends with
 * wr_set_ud_addr. Prints "<what> <errno>" (0: it worked) and one line per completion;
 * tests/test_c_driver.py reads it. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define QKEY 0x11223344

static struct ibv_cq_ex *cqx;
static struct ibv_mr *mr;
static uint64_t buf[1024]; /* 8 KiB, 8-byte aligned for the atomics */
#define AT(offset) ((uintptr_t)buf + (offset))

/* `n` completions through start_poll / next_poll / end_poll, each printed. */
static void poll_n(int n, uint32_t peer_qpn)
{
	int found = 0, ret;

	while ((ret = ibv_start_poll(cqx, NULL)) == ENOENT)
		;
	for (;;) {
		unsigned int flags = ibv_wc_read_wc_flags(cqx);
		printf("wc wr_id=%lu status=%s opcode=%d byte_len=%u imm=0x%08x inv=0x%x grh=%d src_qp_is_peer=%d\n",
		       (unsigned long)cqx->wr_id, ibv_wc_status_str(cqx->status), ibv_wc_read_opcode(cqx),
		       ibv_wc_read_byte_len(cqx), flags & IBV_WC_WITH_IMM ? ntohl(ibv_wc_read_imm_data(cqx)) : 0,
		       flags & IBV_WC_WITH_INV ? ibv_wc_read_invalidated_rkey(cqx) : 0, !!(flags & IBV_WC_GRH),
		       ibv_wc_read_src_qp(cqx) == peer_qpn);
		if (++found == n)
			break;
		while (ibv_next_poll(cqx) == ENOENT)
			;
	}
	ibv_end_poll(cqx);
}

static struct ibv_qp *create(struct ibv_context *ctx, struct ibv_pd *pd, enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex attr = {.send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
					   .qp_type = type, .pd = pd, .send_ops_flags = ops,
					   .comp_mask = IBV_QP_INIT_ATTR_PD | (ops ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0),
					   .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
						   .max_recv_sge = 1, .max_inline_data = 64}};
	return ibv_create_qp_ex(ctx, &attr);
}

static int connect_ud(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};

	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return 1;
	attr.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE))
		return 1;
	attr.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, uintptr_t at, uint32_t length)
{
	struct ibv_sge sge = {.addr = at, .length = length, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	char *bytes = (char *)buf;
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, 0, &gid)) {
		perror("open");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
	struct ibv_cq_init_attr_ex cq_attr = {.cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS};
	cqx = ibv_create_cq_ex(ctx, &cq_attr);
	report("create_cq_ex", null_errno(cqx));
	cq_attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	report("create_cq_ex_timestamp", null_errno(ibv_create_cq_ex(ctx, &cq_attr)));
	uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
	report("create_qp_ex_ud_rdma_write", null_errno(create(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE)));
	struct ibv_qp_init_attr_ex no_pd = {.send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
					    .qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					    .send_ops_flags = IBV_QP_EX_WITH_SEND, .cap = {.max_send_wr = 1}};
	report("create_qp_ex_without_pd", null_errno(ibv_create_qp_ex(ctx, &no_pd)));
	struct ibv_qp *plain = create(ctx, pd, IBV_QPT_RC, 0);
	printf("plain_qp_to_qp_ex_is_null=%d\n", plain && !ibv_qp_to_qp_ex(plain));
	struct ibv_qp *qp = create(ctx, pd, IBV_QPT_RC, ops & ~IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
	struct ibv_qp_ex *qpx = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	report("create_qp_ex", null_errno(qpx));
	if (!pd || !mr || !cqx || !qpx || 
	    connect_to_itself(qp, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 0)) {
		perror("setup");
		return 1;
	}

	/* one batch, one doorbell: WRITE, SEND with immediate of inline data, FETCH_ADD, READ into two SGEs */
	strcpy(bytes, "written by wr_rdma_write");
	buf[256] = 37;
	strcpy(bytes + 1024, "read back by wr_rdma_read");
	report("post_recv", post_recv(qp, 9, AT(5000), 64));
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	qpx->wr_id = 1;
	ibv_wr_rdma_write(qpx, mr->rkey, AT(3000));
	ibv_wr_set_sge(qpx, mr->lkey, AT(0), 25);
	qpx->wr_id = 2;
	ibv_wr_send_imm(qpx, htonl(0x1234abcd));
	char message[] = "inline, copied when set";
	ibv_wr_set_inline_data(qpx, message, sizeof(message));
	memset(message, 'x', sizeof(message) - 1); /* the batch has its own copy */
	qpx->wr_id = 3;
	ibv_wr_atomic_fetch_add(qpx, mr->rkey, AT(2048), 5);
	ibv_wr_set_sge(qpx, mr->lkey, AT(2056), 8);
	qpx->wr_id = 4;
	ibv_wr_rdma_read(qpx, mr->rkey, AT(1024));
	struct ibv_sge halves[2] = {{.addr = AT(4000), .length = 12, .lkey = mr->lkey},
				    {.addr = AT(4100), .length = 14, .lkey = mr->lkey}};
	ibv_wr_set_sge_list(qpx, 2, halves);
	report("wr_complete", ibv_wr_complete(qpx));
	poll_n(5, qp->qp_num);
	printf("written %s\n", bytes + 3000);
	printf("sent %s\n", bytes + 5000);
	printf("fetch_add before=%lu after=%lu\n", (unsigned long)buf[257], (unsigned long)buf[256]);
	printf("read %.12s|%.14s\n", bytes + 4000, bytes + 4100);

	/* a batch with an operation the QP was not created for, an aborted one, one with a setter
	 * and no builder, one with too many SGEs: none posts anything, as the next batch shows */
	ibv_wr_start(qpx);
	qpx->wr_id = 11;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, AT(0), 8);
	ibv_wr_atomic_cmp_swp(qpx, mr->rkey, AT(2048), 42, 1);
	ibv_wr_set_sge(qpx, mr->lkey, AT(2056), 8);
	report("wr_complete_cmp_swp_not_in_send_ops", ibv_wr_complete(qpx));
	ibv_wr_start(qpx);
	qpx->wr_id = 12;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, AT(0), 8);
	ibv_wr_abort(qpx);
	ibv_wr_start(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, AT(0), 8);
	report("wr_complete_setter_without_builder", ibv_wr_complete(qpx));
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	struct ibv_sge three[3] = {halves[0], halves[1], halves[0]};
	ibv_wr_set_sge_list(qpx, 3, three);
	report("wr_complete_three_sges", ibv_wr_complete(qpx));
	report("wr_complete_without_start", ibv_wr_complete(qpx));

	/* a type 2 window bound and invalidated through the builders, a SEND with invalidate */
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind_info range = {.mr = mr, .addr = AT(6000), .length = 64,
					 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	report("post_recv_2", post_recv(qp, 19, AT(5000), 64));
	ibv_wr_start(qpx);
	qpx->wr_id = 20;
	ibv_wr_bind_mw(qpx, mw, ibv_inc_rkey(mw->rkey), &range);
	mw->rkey = ibv_inc_rkey(mw->rkey);
	qpx->wr_id = 21;
	ibv_wr_rdma_write_imm(qpx, mw->rkey, AT(6000), htonl(0xfeed));
	ibv_wr_set_sge(qpx, mr->lkey, AT(0), 8);
	qpx->wr_id = 22;
	ibv_wr_local_inv(qpx, mw->rkey);
	report("wr_complete_window", ibv_wr_complete(qpx));
	poll_n(4, qp->qp_num);
	printf("window %.7s\n", bytes + 6000);

	/* UD: an extended QP sends to a plain one through wr_set_ud_addr */
	struct ibv_qp *ud = create(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_SEND), *peer = create(ctx, pd, IBV_QPT_UD, 0);
	struct ibv_qp_ex *udx = ud ? ibv_qp_to_qp_ex(ud) : NULL;
	struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
	if (!udx || !peer || !ah || connect_ud(ud) || connect_ud(peer)) {
		perror("ud");
		return 1;
	}
	report("post_recv_ud", post_recv(peer, 29, AT(7000), 40 + 64));
	ibv_wr_start(udx);
	udx->wr_flags = IBV_SEND_SIGNALED;
	udx->wr_id = 30;
	ibv_wr_send(udx);
	ibv_wr_set_ud_addr(udx, ah, peer->qp_num, QKEY);
	ibv_wr_set_sge(udx, mr->lkey, AT(0), 16);
	report("wr_complete_ud", ibv_wr_complete(udx));
	poll_n(2, ud->qp_num);
	printf("datagram %.16s\n", bytes + 7040);

	report("destroy_ah", ibv_destroy_ah(ah));
	report("destroy_qp_ud", ibv_destroy_qp(ud));
	report("destroy_qp_peer", ibv_destroy_qp(peer));
	report("dealloc_mw", ibv_dealloc_mw(mw));
	report("destroy_qp", ibv_destroy_qp(qp));
	report("destroy_qp_plain", ibv_destroy_qp(plain));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("destroy_cq", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
