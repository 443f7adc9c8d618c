/* UD multicast from a program built against the system's libibverbs, run on pyroce's, as
 * rdma-core's mckey uses it after its join: two UD QPs attached to a group (ibv_attach_mcast), one
 * datagram from a third QP through an AH to the MGID with QPN 0xFFFFFF, received by both; the
 * errnos of attaching and detaching misused. Prints "<what> <errno>" (0: it worked) and one line
 * per receive; tests/test_c_driver.py reads it. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define QKEY 0x01234567
#define GRH_ROOM 40
#define SLOT 256
#define MULTICAST_QPN 0xFFFFFF

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = type,
					.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};

	return ibv_create_qp(pd, &init);
}

/* A UD QP in RTS with Q_Key QKEY: 0 or the errno. */
static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};

	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return errno;
	attr.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE))
		return errno;
	attr.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN) ? errno : 0;
}

static int post_recv(struct ibv_qp *qp, char *at, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)at, .length = SLOT, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static union ibv_gid mapped(const char *ipv4)
{
	union ibv_gid gid = {.raw = {[10] = 0xff, [11] = 0xff}};

	inet_pton(AF_INET, ipv4, gid.raw + 12);
	return gid;
}

int main(void)
{
	static char buf[4 * SLOT];
	char group[32];
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *sender = create_qp(pd, cq, IBV_QPT_UD), *rc = create_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp *members[2] = {create_qp(pd, cq, IBV_QPT_UD), create_qp(pd, cq, IBV_QPT_UD)};
	union ibv_gid mgid, unicast = mapped("10.1.2.3");

	if (!pd || !cq || !mr || !sender || !rc || !members[0] || !members[1]) {
		perror("setup");
		return 1;
	}
	snprintf(group, sizeof(group), "239.77.%d.%d", (getpid() >> 8) & 0xff, getpid() & 0xff);
	mgid = mapped(group);
	report("attach_rc_qp", ibv_attach_mcast(rc, &mgid, 0));
	report("attach_unicast_gid", ibv_attach_mcast(members[0], &unicast, 0));
	report("detach_not_attached", ibv_detach_mcast(members[0], &mgid, 0));
	for (int i = 0; i < 2; i++) {
		report("to_rts", to_rts(members[i]));
		report("attach", ibv_attach_mcast(members[i], &mgid, 0));
		report("post_recv", post_recv(members[i], buf + (i + 1) * SLOT, mr->lkey, 10 + i));
	}
	report("attach_again", ibv_attach_mcast(members[0], &mgid, 0));
	report("sender_to_rts", to_rts(sender));

	struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1,
				      .grh = {.dgid = mgid, .sgid_index = 3, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
	report("create_ah_to_the_group", null_errno(ah));
	strcpy(buf, "to every member");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.ud = {.ah = ah, .remote_qpn = MULTICAST_QPN, .remote_qkey = QKEY}}, *bad;
	report("post_send", ibv_post_send(sender, &wr, &bad));

	struct ibv_wc wc[3];
	int found = 0;
	while (found < 3)
		found += ibv_poll_cq(cq, 3 - found, wc + found);
	for (int i = 0; i < 3; i++) {
		if (wc[i].opcode != IBV_WC_RECV)
			continue;
		int member = wc[i].qp_num == members[1]->qp_num;
		printf("received member=%d wr_id=%lu status=%s byte_len=%u grh=%d src_qp_is_sender=%d data=%s\n",
		       member, (unsigned long)wc[i].wr_id, ibv_wc_status_str(wc[i].status), wc[i].byte_len,
		       !!(wc[i].wc_flags & IBV_WC_GRH), wc[i].src_qp == sender->qp_num,
		       buf + (member + 1) * SLOT + GRH_ROOM);
	}
	report("detach", ibv_detach_mcast(members[0], &mgid, 0));
	report("detach_twice", ibv_detach_mcast(members[0], &mgid, 0));
	report("destroy_attached_qp", ibv_destroy_qp(members[1])); /* detaches it */
	report("destroy_ah", ibv_destroy_ah(ah));
	report("destroy_qps", ibv_destroy_qp(members[0]) || ibv_destroy_qp(sender) || ibv_destroy_qp(rc));
	report("destroy_rest", ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx));
	return 0;
}
