/* UD from a program built against the system's libibverbs, run on pyroce's: two UD QPs of one
 * device, a datagram each way through address handles (the answer's AH made from the received
 * WC and its GRH), the receive WC's UD fields, and the errnos of AHs and UD posts misused.
 * Prints "<what> <errno>" (0: it worked) and one line per WC; tests/test_c_driver.py reads it. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define QKEY 0x11223344
#define GRH_ROOM 40

/* A UD QP in RTS; `max_inline` gets the max_inline_data ibv_create_qp wrote back into its cap. */
static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t *max_inline)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};

	*max_inline = init.cap.max_inline_data;
	if (!qp || ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	attr.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE))
		return NULL;
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = 0;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN) ? NULL : qp;
}

/* `n` completions, spinning (a hang fails the test by its timeout); each printed. */
static void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, const struct ibv_qp *from)
{
	int found = 0;

	while (found < n)
		found += ibv_poll_cq(cq, n - found, wc + found);
	for (int i = 0; i < n; i++)
		printf("wc wr_id=%lu status=%s opcode=%d byte_len=%u grh=%d src_qp_is_peer=%d sl=%u pkey_index=%u "
		       "imm=0x%08x\n", (unsigned long)wc[i].wr_id, ibv_wc_status_str(wc[i].status), wc[i].opcode,
		       wc[i].byte_len, !!(wc[i].wc_flags & IBV_WC_GRH),
		       wc[i].opcode == IBV_WC_RECV && wc[i].src_qp == from->qp_num, wc[i].sl, wc[i].pkey_index,
		       wc[i].wc_flags & IBV_WC_WITH_IMM ? ntohl(wc[i].imm_data) : 0);
}

static int post_recv(struct ibv_qp *qp, char *at, uint32_t length, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)at, .length = length, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static int post_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, enum ibv_wr_opcode opcode, char *at,
		     uint32_t length, uint32_t lkey, unsigned int flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)at, .length = length, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = length, .sg_list = &sge, .num_sge = 1, .opcode = opcode,
				 .send_flags = IBV_SEND_SIGNALED | flags, .imm_data = htonl(0xabcd0123),
				 .wr = {.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = QKEY}}}, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	static char buf[8192];
	union ibv_gid gid;
	struct ibv_wc wc[2];

	if (ibv_query_gid(ctx, 1, 3, &gid)) { /* RoCE v2 over the address */
		perror("open");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	uint32_t max_inline;
	struct ibv_qp *a = ud_qp(pd, cq, &max_inline), *b = ud_qp(pd, cq, &max_inline);
	if (!pd || !cq || !mr || !a || !b) {
		perror("setup");
		return 1;
	}
	/* what the WQE holds, as libmlx5 writes it back: UCX reads it to send its CREQ inline */
	printf("max_inline_data_written_back %u\n", max_inline);

	/* AHs misused: no GRH (RoCE needs one), a GID no link reaches, a GID index outside the table */
	struct ibv_ah_attr attr = {.port_num = 1};
	report("create_ah_without_grh", null_errno(ibv_create_ah(pd, &attr)));
	attr.is_global = 1;
	report("create_ah_to_gid_zero", null_errno(ibv_create_ah(pd, &attr)));
	attr.grh = (struct ibv_global_route){.dgid = gid, .sgid_index = 7, .hop_limit = 1};
	report("create_ah_sgid_index_7", null_errno(ibv_create_ah(pd, &attr)));
	attr.grh.sgid_index = 3;
	struct ibv_ah *to_self = ibv_create_ah(pd, &attr);
	report("create_ah", null_errno(to_self));

	/* what a UD QP may not post */
	report("post_rdma_write_on_ud", post_send(a, to_self, b->qp_num, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, 0));
	report("post_send_without_ah", post_send(a, NULL, b->qp_num, IBV_WR_SEND, buf, 8, mr->lkey, 0));
	report("post_send_qpn_above_24_bits", post_send(a, to_self, 1u << 24, IBV_WR_SEND, buf, 8, mr->lkey, 0));

	/* a to b: a SEND with immediate lands after 40 bytes of network header */
	strcpy(buf, "a datagram from C");
	report("post_recv_b", post_recv(b, buf + 4096, GRH_ROOM + 100, mr->lkey, 1));
	report("post_send_a", post_send(a, to_self, b->qp_num, IBV_WR_SEND_WITH_IMM, buf, 100, mr->lkey, 0));
	poll_n(cq, wc, 2, a);
	struct ibv_wc *received = wc[0].opcode == IBV_WC_RECV ? &wc[0] : &wc[1];
	printf("received %s\n", buf + 4096 + GRH_ROOM);

	/* the answer's AH from the WC and its GRH: a's GID (our own), its RoCE v2 entry at index 3 */
	struct ibv_ah_attr back;
	report("init_ah_from_wc", ibv_init_ah_from_wc(ctx, 1, received, (struct ibv_grh *)(buf + 4096), &back));
	printf("back is_global=%d dgid_is_own=%d sgid_index=%u port_num=%u\n", back.is_global,
	       !memcmp(&back.grh.dgid, &gid, sizeof(gid)), back.grh.sgid_index, back.port_num);
	struct ibv_ah *answer = ibv_create_ah_from_wc(pd, received, (struct ibv_grh *)(buf + 4096), 1);
	report("create_ah_from_wc", null_errno(answer));

	/* b answers a, inline */
	strcpy(buf + 200, "an answer");
	report("post_recv_a", post_recv(a, buf + 6144, GRH_ROOM + 100, mr->lkey, 2));
	report("post_send_b_inline", post_send(b, answer, a->qp_num, IBV_WR_SEND, buf + 200, 50, mr->lkey,
					       IBV_SEND_INLINE));
	poll_n(cq, wc, 2, b);
	printf("received %s\n", buf + 6144 + GRH_ROOM);

	/* a WC without a GRH makes a non-global attr (libibverbs), an empty header no AH */
	struct ibv_wc no_grh = *received;
	no_grh.wc_flags &= ~IBV_WC_GRH;
	report("init_ah_from_wc_without_grh", ibv_init_ah_from_wc(ctx, 1, &no_grh, (struct ibv_grh *)buf, &back));
	printf("no_grh is_global=%d\n", back.is_global);
	memset(buf + 2048, 0, GRH_ROOM);
	report("create_ah_from_an_empty_header",
	       null_errno(ibv_create_ah_from_wc(pd, received, (struct ibv_grh *)(buf + 2048), 1)));

	report("destroy_ah", ibv_destroy_ah(answer));
	report("destroy_ah_to_self", ibv_destroy_ah(to_self));
	report("destroy_qp_a", ibv_destroy_qp(a));
	report("destroy_qp_b", ibv_destroy_qp(b));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("destroy_cq", ibv_destroy_cq(cq));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
