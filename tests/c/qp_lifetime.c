/* QPs destroyed while their completions are pending or being polled, and a QP the NIC moved to
 * ERROR: each check prints "<what> <errno or count>" or a "wc ..." line, which
 * tests/test_c_driver.py reads.
 *
 * - a thread polls a CQ while the main thread creates, uses and destroys QPs of that CQ: no
 *   completion of a destroyed QP may come back (wr_id 0 or another QP's), nothing may crash;
 * - CQEs left unpolled when their QP is destroyed are gone from the CQ (the other QPs'
 *   stay), and the SRQ WQEs they consumed are posted again;
 * - ibv_query_qp reports ERROR once a WRITE to an invalid rkey failed. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define ROUNDS 300
#define WRS 4
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static union ibv_gid gid;
static char buf[1 << 16];

static double now(void)
{
	struct timespec at;

	clock_gettime(CLOCK_MONOTONIC, &at);
	return at.tv_sec + at.tv_nsec / 1e9;
}

/* An RC QP connected to itself, or NULL. */
static struct ibv_qp *rc_qp(struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr attr = {.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &attr);

	if (qp && connect_to_itself(qp, &gid, ACCESS, 0x100)) {
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

static int post_send(struct ibv_qp *qp, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

/* Up to `n` completions within `seconds`. */
static int poll_for(struct ibv_cq *cq, struct ibv_wc *wc, int n, double seconds)
{
	int found = 0;

	for (double end = now() + seconds; found < n && now() < end;)
		found += ibv_poll_cq(cq, n - found, wc + found);
	return found;
}

/* --- a poller thread while QPs come and go ------------------------------------------ */

static struct ibv_cq *shared_cq;
static volatile int stop;
static long completed, strays; /* a stray: wr_id 0, or not the wr_id of the WC's QP */

static void *poller(void *unused)
{
	struct ibv_wc wc[4];

	while (!stop) {
		int n = ibv_poll_cq(shared_cq, 4, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id >> 32 == wc[i].qp_num && wc[i].wr_id & 0xffffffff)
				__atomic_add_fetch(&completed, 1, __ATOMIC_RELEASE);
			else if (strays++ < 3)
				printf("stray wc wr_id=0x%llx qp_num=0x%x status=%d\n", (unsigned long long)wc[i].wr_id,
				       wc[i].qp_num, wc[i].status);
		}
	}
	return NULL;
}

static void come_and_go(void)
{
	pthread_t thread;
	int failed = 0;

	shared_cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	pthread_create(&thread, NULL, poller, NULL);
	for (int round = 0; round < ROUNDS && !failed; round++) {
		struct ibv_qp *qp = rc_qp(shared_cq, shared_cq, NULL);
		if (!qp) {
			failed = errno ? errno : -1;
			break;
		}
		uint64_t tag = (uint64_t)qp->qp_num << 32;
		long before = __atomic_load_n(&completed, __ATOMIC_ACQUIRE);
		for (int i = 1; i <= WRS && !failed; i++)
			failed = post_recv(qp, NULL, tag | (100 + i)) || post_send(qp, tag | i);
		/* every other round, destroy while its completions arrive; else at once */
		for (double end = now() + 1; round % 2 && __atomic_load_n(&completed, __ATOMIC_ACQUIRE) == before &&
					     now() < end;)
			;
		failed = failed ? failed : ibv_destroy_qp(qp);
	}
	stop = 1;
	pthread_join(thread, NULL);
	report("come_and_go", failed);
	report("come_and_go_strays", (int)strays);
	printf("come_and_go completed_some=%d\n", completed > 0);
	report("destroy_shared_cq", ibv_destroy_cq(shared_cq));
}

/* --- CQEs pending at destroy ------------------------------------------------------------ */

static void destroy_with_cqes_pending(void)
{
	struct ibv_cq *sends = ibv_create_cq(ctx, 16, NULL, NULL, 0), *receives = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &srq_attr);
	struct ibv_qp *gone = rc_qp(sends, receives, srq), *kept = rc_qp(sends, receives, NULL);
	struct ibv_wc wc[8];
	int failed = !gone || !kept;

	for (int i = 0; i < 8 && !failed; i++)
		failed = post_recv(NULL, srq, 100 + i); /* the SRQ full: max_wr outstanding */
	for (int i = 0; i < 2 && !failed; i++)
		failed = post_recv(kept, NULL, 200 + i);
	report("post_receives", failed);
	if (failed)
		return;
	/* the QPs' receive CQEs in turn (gone, kept, gone, kept, gone): each SEND's own completion
	 * comes after the ACK, so after its receive CQE */
	for (int i = 0; i < 5; i++) {
		post_send(i % 2 ? kept : gone, 10 + i);
		failed |= poll_for(sends, wc, 1, 10) != 1 || wc[0].status != IBV_WC_SUCCESS;
	}
	report("sends_completed", failed);
	report("destroy_qp_with_cqes_pending", ibv_destroy_qp(gone));
	int found = poll_for(receives, wc, 8, 0.5);
	for (int i = 0; i < found; i++)
		printf("wc after destroy: wr_id=%llu of_kept_qp=%d status=%d\n", (unsigned long long)wc[i].wr_id,
		       wc[i].qp_num == kept->qp_num, wc[i].status);
	/* the 3 SRQ WQEs the destroyed QP's CQEs held are free again; a 4th is past max_wr */
	for (int i = 0; i < 3; i++)
		report("post_srq_recv_given_back", post_recv(NULL, srq, 300 + i));
	report("post_srq_recv_beyond_max_wr", post_recv(NULL, srq, 303));
	report("destroy_kept", ibv_destroy_qp(kept));
	report("destroy_srq", ibv_destroy_srq(srq));
	report("destroy_cqs", ibv_destroy_cq(sends) || ibv_destroy_cq(receives));
}

/* --- the NIC's state ---------------------------------------------------------------------- */

static void query_after_remote_access_error(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = rc_qp(cq, cq, NULL);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)buf, .rkey = mr->rkey ^ 0x7f000000}}, *bad;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct ibv_wc wc;

	report("post_write_invalid_rkey", qp ? ibv_post_send(qp, &wr, &bad) : errno);
	if (!qp)
		return;
	printf("write failed=%d\n", poll_for(cq, &wc, 1, 10) == 1 && wc.status != IBV_WC_SUCCESS);
	report("query_qp_after_error", ibv_query_qp(qp, &attr, IBV_QP_STATE, &init));
	printf("query state=%d qp_state=%d\n", attr.qp_state, qp->state);
	report("destroy_failed_qp", ibv_destroy_qp(qp));
	report("destroy_failed_cq", ibv_destroy_cq(cq));
}

int main(void)
{
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	ibv_query_gid(ctx, 1, 0, &gid);
	setvbuf(stdout, NULL, _IOLBF, 0);
	come_and_go();
	destroy_with_cqes_pending();
	query_after_remote_access_error();
	report("dereg_mr", ibv_dereg_mr(mr));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
