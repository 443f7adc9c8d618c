/* Memory windows from a program built against the system's libibverbs, run on pyroce's: an RC
 * QP connected to itself binds a type 1 window (ibv_bind_mw) and a type 2 one (IBV_WR_BIND_MW),
 * writes through each, invalidates the type 2 one by a SEND with invalidate and, bound again,
 * by LOCAL_INV; a write through an invalidated window fails. Prints "<what> <errno>" (0: it
 * worked) and one line per WC; tests/test_c_driver.py reads it. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char buf[8192];

/* `n` completions, spinning (a hang fails the test by its timeout); each printed. */
static void poll_n(int n)
{
	struct ibv_wc wc[2];
	int found = 0;

	while (found < n)
		found += ibv_poll_cq(cq, n - found, wc + found);
	for (int i = 0; i < n; i++)
		printf("wc wr_id=%lu status=%s opcode=%d with_inv=%d\n", (unsigned long)wc[i].wr_id,
		       ibv_wc_status_str(wc[i].status), wc[i].opcode, !!(wc[i].wc_flags & IBV_WC_WITH_INV));
}

static int post(uint64_t wr_id, enum ibv_wr_opcode opcode, uint32_t offset, uint32_t length, uint64_t remote,
		uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + offset, .length = length, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = opcode,
				 .send_flags = IBV_SEND_SIGNALED, .wr = {.rdma = {.remote_addr = remote, .rkey = rkey}}},
			   *bad;

	wr.invalidate_rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int post_bind(struct ibv_mw *mw, uint64_t wr_id, uint32_t offset, int access)
{
	struct ibv_send_wr wr = {.wr_id = wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
				 .bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey),
					     .bind_info = {.mr = mr, .addr = (uintptr_t)buf + offset, .length = 256,
							   .mw_access_flags = access}}},
			   *bad;
	int ret = ibv_post_send(qp, &wr, &bad);

	if (!ret)
		mw->rkey = wr.bind_mw.rkey; /* the program keeps a type 2 window's key */
	return ret;
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, 0, &gid)) {
		perror("open");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1}};
	qp = ibv_create_qp(pd, &init);
	if (!pd || !cq || !mr || !qp || 
	    connect_to_itself(qp, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0)) {
		perror("setup");
		return 1;
	}

	struct ibv_mw *one = ibv_alloc_mw(pd, IBV_MW_TYPE_1), *two = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	report("alloc_mw_type_1", null_errno(one));
	report("alloc_mw_type_2", null_errno(two));
	report("alloc_mw_type_3", null_errno(ibv_alloc_mw(pd, 3)));
	report("dealloc_pd_with_windows", ibv_dealloc_pd(pd));

	/* type 1: ibv_bind_mw gives it the next key and completes as IBV_WC_BIND_MW */
	uint32_t old = one->rkey;
	struct ibv_mw_bind bind = {.wr_id = 21, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = mr, .addr = (uintptr_t)buf + 1024, .length = 256,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ}};
	report("bind_mw_type_2_by_verb", ibv_bind_mw(qp, two, &bind));
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED;
	report("bind_mw_zero_based", ibv_bind_mw(qp, one, &bind));
	bind.bind_info.mw_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	report("bind_mw", ibv_bind_mw(qp, one, &bind));
	poll_n(1);
	printf("type1 rkey_is_next=%d\n", one->rkey == ibv_inc_rkey(old));
	strcpy(buf, "through a type 1 window");
	report("write_type_1", post(22, IBV_WR_RDMA_WRITE, 0, 32, (uintptr_t)buf + 1024, one->rkey));
	poll_n(1);
	printf("window1 %s\n", buf + 1024);

	/* type 2: IBV_WR_BIND_MW, a write through it, then a SEND with invalidate takes it back */
	report("post_bind_type_2", post_bind(two, 31, 2048, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	poll_n(1);
	strcpy(buf, "through a type 2 window");
	report("write_type_2", post(32, IBV_WR_RDMA_WRITE, 0, 32, (uintptr_t)buf + 2048, two->rkey));
	poll_n(1);
	printf("window2 %s\n", buf + 2048);
	struct ibv_sge into = {.addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr recv = {.wr_id = 33, .sg_list = &into, .num_sge = 1}, *bad_recv;
	report("post_recv", ibv_post_recv(qp, &recv, &bad_recv));
	report("send_with_inv", post(34, IBV_WR_SEND_WITH_INV, 0, 8, 0, two->rkey));
	poll_n(2);

	/* bound again, and taken back by LOCAL_INV */
	report("post_bind_type_2_again", post_bind(two, 41, 2048, IBV_ACCESS_REMOTE_WRITE));
	poll_n(1);
	report("local_inv", post(42, IBV_WR_LOCAL_INV, 0, 0, 0, two->rkey));
	poll_n(1);

	/* a write through the invalidated window: the responder refuses it (the QP being its own
	 * responder, the refusal's error flushes the write) and nothing lands */
	strcpy(buf, "refused");
	report("write_invalidated", post(43, IBV_WR_RDMA_WRITE, 0, 8, (uintptr_t)buf + 2048, two->rkey));
	poll_n(1);
	printf("window2 %s\n", buf + 2048);

	report("dealloc_mw_type_1", ibv_dealloc_mw(one));
	report("dealloc_mw_type_2", ibv_dealloc_mw(two));
	report("destroy_qp", ibv_destroy_qp(qp));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("destroy_cq", ibv_destroy_cq(cq));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
