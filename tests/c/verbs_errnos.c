/* A program built against the system's libibverbs, run on pyroce's: each verb pyroce does not
 * offer, and each misuse, prints "<what> <errno>" (0: it worked), and a SEND from an RC QP to
 * itself (the device's internal loopback) checks the data path. tests/test_c_driver.py reads it. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return ibv_modify_qp(qp, attr, mask);
}

/* Up to `n` completions, spinning (a hang fails the test by its timeout). */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int found = 0;
	for (long spins = 0; found < n && spins < 200000000; spins++)
		found += ibv_poll_cq(cq, n - found, wc + found);
	for (int i = 0; i < found; i++)
		printf("wc wr_id=%lu status=%s opcode=%d byte_len=%u imm=0x%08x\n", (unsigned long)wc[i].wr_id,
		       ibv_wc_status_str(wc[i].status), wc[i].opcode, wc[i].byte_len, be32toh(wc[i].imm_data));
	return found;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		perror("open");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_port_attr port;
	union ibv_gid gid;

	/* what pyroce does not offer to C programs */
	struct ibv_qp_init_attr_ex ex = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_TSO,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	report("create_qp_ex_tso", null_errno(ibv_create_qp_ex(ctx, &ex)));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS; /* rxe takes it, with no flag set */
	ex.qp_type = IBV_QPT_UC;
	struct ibv_qp *no_flags = ibv_create_qp_ex(ctx, &ex);
	report("create_qp_ex_no_create_flags", null_errno(no_flags));
	if (no_flags)
		ibv_destroy_qp(no_flags);
	ex.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	report("create_qp_ex_create_flags", null_errno(ibv_create_qp_ex(ctx, &ex)));
	struct ibv_cq_init_attr_ex cq_ex = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	report("create_cq_ex", null_errno(ibv_create_cq_ex(ctx, &cq_ex)));
	struct ibv_mr *odp = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	report("reg_mr_on_demand", null_errno(odp));
	report("dereg_mr_on_demand", odp ? ibv_dereg_mr(odp) : EINVAL);
	report("reg_mr_implicit_odp", null_errno(ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND)));
	int cmd_fd = dup(ctx->cmd_fd); /* a descriptor, as the uverbs file is, that no context imports */
	report("dup_cmd_fd", cmd_fd < 0 ? errno : 0);
	report("import_device", null_errno(ibv_import_device(cmd_fd)));
	close(cmd_fd);

	/* a new translation: the MR names the other buffer from then on */
	static char other[4096];
	struct ibv_mr *moved = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	report("rereg_mr_translation",
	       ibv_rereg_mr(moved, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, sizeof(other), 0) ? errno : 0);
	printf("query moved_addr_is_other=%d length=%zu\n", moved->addr == (void *)other, moved->length);
	report("rereg_mr_translation_to_null",
	       ibv_rereg_mr(moved, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) ? errno : 0);
	ibv_dereg_mr(moved);

	/* misuse: libibverbs' errnos */
	report("reg_mr_remote_write_alone", null_errno(ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE)));
	report("query_port_2", ibv_query_port(ctx, 2, &port));
	report("query_gid_16", ibv_query_gid(ctx, 1, 16, &gid) ? errno : 0); /* past gid_tbl_len */
	struct ibv_gid_entry gid_entry;
	report("query_gid_ex_5", ibv_query_gid_ex(ctx, 1, 5, &gid_entry, 0)); /* an empty entry: ENODATA */
	report("query_gid_5_is_zero", ibv_query_gid(ctx, 1, 5, &gid) || gid.global.interface_id ? EINVAL : 0);
	report("create_cq_too_big", null_errno(ibv_create_cq(ctx, 1 << 20, NULL, NULL, 0)));

	/* a send queue of 65536 basic blocks (16-bit WQE counters); a CQ or SRQ of another context */
	struct ibv_qp_init_attr mixed = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 16384, .max_recv_wr = 1, .max_send_sge = 13, .max_recv_sge = 1}};
	report("create_qp_sq_too_big", null_errno(ibv_create_qp(pd, &mixed)));
	struct ibv_context *second = ibv_open_device(list[0]);
	struct ibv_pd *other_pd = second ? ibv_alloc_pd(second) : NULL;
	struct ibv_cq *other_cq = second ? ibv_create_cq(second, 4, NULL, NULL, 0) : NULL;
	struct ibv_srq_init_attr other_attr = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *other_srq = other_pd ? ibv_create_srq(other_pd, &other_attr) : NULL;
	report("other_context", null_errno(other_srq) || null_errno(other_cq));
	mixed.cap = (struct ibv_qp_cap){.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
	mixed.send_cq = other_cq;
	report("create_qp_send_cq_of_other_context", null_errno(ibv_create_qp(pd, &mixed)));
	mixed.send_cq = cq;
	mixed.srq = other_srq;
	report("create_qp_srq_of_other_context", null_errno(ibv_create_qp(pd, &mixed)));
	if (second) {
		ibv_destroy_srq(other_srq);
		ibv_destroy_cq(other_cq);
		ibv_dealloc_pd(other_pd);
		report("close_other_context", ibv_close_device(second));
	}

	struct ibv_qp_init_attr rc = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &rc);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 100, .lkey = mr->lkey};
	struct ibv_send_wr send = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_recv_wr recv = {.wr_id = 9, .sg_list = &sge, .num_sge = 1}, *bad_recv;
	report("post_send_in_reset", ibv_post_send(qp, &send, &bad));
	report("post_recv_in_reset", ibv_post_recv(qp, &recv, &bad_recv));
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS};
	report("modify_reset_to_rts", modify(qp, &attr, IBV_QP_STATE));
	report("destroy_cq_in_use", ibv_destroy_cq(cq));
	report("dealloc_pd_in_use", ibv_dealloc_pd(pd));
	struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &srq_attr);
	report("create_srq", null_errno(srq));
	srq_attr.attr.max_wr = 1 << 20;
	report("create_srq_too_big", null_errno(ibv_create_srq(pd, &srq_attr)));
	struct ibv_srq_attr limit = {.srq_limit = 8};
	report("modify_srq_limit_above_max_wr", ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT));

	/* to itself: INIT, RTR (its own QPN and GID), RTS */
	ibv_query_gid(ctx, 1, 0, &gid);
	int failed = connect_to_itself(qp, &gid, 0, 0xfffff0);
	report("connect_to_itself", failed);
	if (failed)
		return 1;
	struct ibv_send_wr bind = send;
	bind.opcode = IBV_WR_BIND_MW;
	report("post_bind_mw_without_window", ibv_post_send(qp, &bind, &bad));
	struct ibv_send_wr no_opcode = send;
	no_opcode.opcode = 99;
	report("post_opcode_99", ibv_post_send(qp, &no_opcode, &bad));
	struct ibv_send_wr two_sges = send;
	two_sges.num_sge = 2;
	report("post_two_sges", ibv_post_send(qp, &two_sges, &bad));

	memset(buf, 0, sizeof(buf));
	memcpy(buf, "pyroce from C", 14);
	struct ibv_sge into = {.addr = (uintptr_t)buf + 4096, .length = 100, .lkey = mr->lkey};
	recv.sg_list = &into;
	report("post_recv", ibv_post_recv(qp, &recv, &bad_recv));
	send.imm_data = htobe32(0x12345678);
	send.opcode = IBV_WR_SEND_WITH_IMM;
	report("post_send", ibv_post_send(qp, &send, &bad));
	struct ibv_wc wc[2];
	poll_n(cq, wc, 2);
	printf("received %s\n", buf + 4096);
	struct ibv_qp_init_attr init;
	report("query_qp", ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_CAP, &init));
	printf("query state=%d dest_qp_num_is_own=%d max_recv_wr=%u\n", attr.qp_state, attr.dest_qp_num == qp->qp_num,
	       attr.cap.max_recv_wr);

	/* a CQ resized keeps working in its new ring */
	report("resize_cq", ibv_resize_cq(cq, 200));

	/* to ERROR with a receive posted, whose flush is left unpolled; RESET skips it */
	recv.wr_id = 11;
	report("post_recv_before_error", ibv_post_recv(qp, &recv, &bad_recv));
	attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_ERR};
	report("to_error", modify(qp, &attr, IBV_QP_STATE));
	for (long spins = 0; spins < 2000000; spins++)
		; /* the engine writes the flush meanwhile */
	attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
	report("to_reset", modify(qp, &attr, IBV_QP_STATE));
	failed = connect_to_itself(qp, &gid, 0, 0xfffff0);
	report("connect_again", failed);
	if (failed)
		return 1;
	recv.wr_id = 19;
	send.wr_id = 17;
	memcpy(buf, "after reset", 12);
	report("post_recv_after_reset", ibv_post_recv(qp, &recv, &bad_recv));
	report("post_send_after_reset", ibv_post_send(qp, &send, &bad));
	poll_n(cq, wc, 2);
	printf("received %s\n", buf + 4096);

	/* a child of fork() is refused, not left hanging on the parent's engine, and its data path
	 * does not act on the parent's rings (copies of them, whose NIC stayed in the parent) */
	fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		struct ibv_send_wr *bad_send = NULL;
		struct ibv_recv_wr *bad_srq_recv = NULL;
		report("fork_child_alloc_pd", null_errno(ibv_alloc_pd(ctx)));
		bad_recv = NULL;
		report("fork_child_post_send", ibv_post_send(qp, &send, &bad_send));
		report("fork_child_post_recv", ibv_post_recv(qp, &recv, &bad_recv));
		report("fork_child_post_srq_recv", ibv_post_srq_recv(srq, &recv, &bad_srq_recv));
		report("fork_child_poll_cq", ibv_poll_cq(cq, 1, wc) < 0 ? errno : 0);
		report("fork_child_bad_wrs", bad_send != &send || bad_recv != &recv || bad_srq_recv != &recv);
		fflush(stdout);
		_exit(0);
	}
	waitpid(child, NULL, 0);

	report("destroy_qp", ibv_destroy_qp(qp));
	report("destroy_srq", ibv_destroy_srq(srq));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("destroy_cq", ibv_destroy_cq(cq));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	ibv_free_device_list(list);
	return 0;
}
