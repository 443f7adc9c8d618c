/* Posting through mlx5dv by hand against ibv_post_send, on one shared NIC (run by mlx5dv_post.py):
 * a QP connected to another of the same NIC posts 2-byte RDMA WRITEs, every one signaled.
 *   mlx5dv_post MODE SECONDS     MODE: direct | verbs | idle-direct | idle-verbs
 * direct/verbs print "lone_p50_us X lone_p99_us Y" (a WRITE posted after 1 ms of quiet, its CQE
 * awaited, napping after 256 empty polls as pyroce's ibv_poll_cq does) and "rate_msgs_s Z" (16 outstanding for SECONDS); idle-* print "ready" and sleep. */
#include <infiniband/mlx5dv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "direct.h"

#define LONE 300
#define DEPTH 16

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static struct ibv_qp *qp;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t buf[4096];

/* One 2-byte signaled WRITE, by hand (`d`) or through the verbs. */
static void post(struct direct *d, int by_hand)
{
	if (by_hand) {
		ring(d, write_wqe(d, MLX5_OPCODE_RDMA_WRITE, d->pi, (uintptr_t)buf + 2048, mr->rkey, mr, buf, 2), 0);
		return;
	}
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 2, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr = {.rdma = {.remote_addr = (uintptr_t)buf + 2048, .rkey = mr->rkey}}}, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		exit(2);
}

/* Completions taken now (at most `most`). */
static int reap(struct direct *d, int by_hand, int most)
{
	int got = 0;

	if (!by_hand) {
		struct ibv_wc wc[DEPTH];

		got = ibv_poll_cq(cq, most < DEPTH ? most : DEPTH, wc);
		for (int i = 0; i < got; i++)
			if (wc[i].status)
				exit(3);
		return got;
	}
	while (got < most && next_cqe(d, 0)) {
		consume(d);
		got++;
	}
	return got;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[1] : "";
	double seconds = argc > 2 ? atof(argv[2]) : 0;
	int by_hand = strstr(mode, "direct") != NULL;
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct direct d = {0};
	union ibv_gid gid;

	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *peer_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	qp = ibv_create_qp(pd, &attr);
	attr.send_cq = attr.recv_cq = peer_cq;
	struct ibv_qp *peer = ibv_create_qp(pd, &attr);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), access);
	if (!mr || !qp || !peer || ibv_query_gid(ctx, 1, 0, &gid) || connect_qp(qp, peer->qp_num, &gid, access, 0) ||
	    connect_qp(peer, qp->qp_num, &gid, access, 0))
		return 1;
	if (by_hand) {
		struct mlx5dv_obj obj = {.qp = {.in = qp, .out = &d.qp}, .cq = {.in = cq, .out = &d.cq}};

		if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
			return 1;
		d.qpn = qp->qp_num;
	}
	if (!strncmp(mode, "idle", 4)) {
		printf("ready\n");
		fflush(stdout);
		usleep((useconds_t)(seconds * 1e6));
		return 0;
	}
	double lone[LONE];
	for (int i = 0; i < LONE; i++) {
		usleep(1000);
		double start = now();
		post(&d, by_hand);
		for (int empty = 0; !reap(&d, by_hand, 1); empty++)
			if (empty > 256) /* nap as ibv_poll_cq does: on 2 cores a spinning poller starves the NIC */
				nanosleep(&(struct timespec){.tv_nsec = 1}, NULL);
		lone[i] = (now() - start) * 1e6;
	}
	qsort(lone, LONE, sizeof(*lone), compare);
	printf("lone_p50_us %.0f lone_p99_us %.0f\n", lone[LONE / 2], lone[LONE * 99 / 100]);
	long done = 0;
	int outstanding = 0;
	double start = now(), until = start + seconds;
	while (now() < until) {
		for (; outstanding < DEPTH; outstanding++)
			post(&d, by_hand);
		int got = reap(&d, by_hand, outstanding);
		outstanding -= got;
		done += got;
	}
	printf("rate_msgs_s %.0f\n", done / (now() - start));
	return 0;
}
