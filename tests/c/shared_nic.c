/* A program on the shared NIC: opening the device leaves its locale and signal dispositions as
 * they were, and after fork() the child opens the device, creates a QP and moves a message on it
 * while the parent's QP goes on working; the parent's objects are refused to the child. Each line
 * is "<what> <value>" (0: it worked), read by tests/test_shared_nic_programs.py. */
#include <locale.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

struct endpoint {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static int open_endpoint(struct endpoint *end)
{
	int count;
	struct ibv_device **devices = ibv_get_device_list(&count);
	union ibv_gid gid;

	if (!devices || count < 1)
		return ENODEV;
	end->ctx = ibv_open_device(devices[0]);
	ibv_free_device_list(devices);
	if (!end->ctx)
		return errno;
	end->pd = ibv_alloc_pd(end->ctx);
	end->cq = end->pd ? ibv_create_cq(end->ctx, 16, NULL, NULL, 0) : NULL;
	if (!end->cq)
		return errno;
	struct ibv_qp_init_attr init = {.send_cq = end->cq, .recv_cq = end->cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	end->qp = ibv_create_qp(end->pd, &init);
	if (!end->qp)
		return errno;
	if (ibv_query_gid(end->ctx, 1, 0, &gid))
		return errno;
	return connect_to_itself(end->qp, &gid, 0, 0x1234);
}

/* A SEND with immediate from the QP to itself (no data, so no MR): 0 once both completions came. */
static int send_to_itself(struct endpoint *end, uint32_t imm)
{
	struct ibv_recv_wr recv = {.wr_id = 1}, *bad_recv;
	struct ibv_send_wr send = {.wr_id = 2, .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				   .imm_data = htobe32(imm)}, *bad_send;
	struct ibv_wc wc[2];
	int found = 0, error = ibv_post_recv(end->qp, &recv, &bad_recv);

	if (error || (error = ibv_post_send(end->qp, &send, &bad_send)))
		return error;
	for (long spins = 0; found < 2 && spins < 200000000L; spins++) {
		int got = ibv_poll_cq(end->cq, 2 - found, wc + found);
		if (got < 0)
			return EIO;
		found += got;
	}
	if (found < 2)
		return ETIMEDOUT;
	for (int i = 0; i < 2; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			return 1000 + wc[i].status;
		if (wc[i].wr_id == 1 && be32toh(wc[i].imm_data) != imm)
			return EBADMSG;
	}
	return 0;
}

static int disposition(int signum)
{
	struct sigaction current;

	sigaction(signum, NULL, &current);
	return current.sa_handler == SIG_IGN ? 1 : current.sa_handler == SIG_DFL ? 0 : 2;
}

int main(void)
{
	struct endpoint parent, child;
	char locale_before[256];
	int status;

	setlocale(LC_ALL, "C");
	snprintf(locale_before, sizeof(locale_before), "%s", setlocale(LC_ALL, NULL));
	int pipe_before = disposition(SIGPIPE), int_before = disposition(SIGINT);
	setvbuf(stdout, NULL, _IONBF, 0);
	report("parent_open", open_endpoint(&parent));
	report("locale_changed", strcmp(locale_before, setlocale(LC_ALL, NULL)) != 0);
	report("sigpipe_changed", disposition(SIGPIPE) != pipe_before);
	report("sigint_changed", disposition(SIGINT) != int_before);
	report("parent_send", send_to_itself(&parent, 1));

	pid_t pid = fork();
	if (pid == 0) {
		struct ibv_send_wr send = {.wr_id = 9, .opcode = IBV_WR_SEND_WITH_IMM}, *bad_send;
		report("child_open", open_endpoint(&child));
		report("child_send", send_to_itself(&child, 2));
		report("child_qp_distinct", child.qp->qp_num != parent.qp->qp_num ? 0 : 1);
		report("child_posts_on_parents_qp", ibv_post_send(parent.qp, &send, &bad_send));
		ibv_destroy_qp(child.qp);
		ibv_destroy_cq(child.cq);
		ibv_dealloc_pd(child.pd);
		ibv_close_device(child.ctx);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	report("child_exit", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	report("parent_send_after_fork", send_to_itself(&parent, 3));
	report("parent_destroy_qp", ibv_destroy_qp(parent.qp));
	report("parent_destroy_cq", ibv_destroy_cq(parent.cq));
	report("parent_dealloc_pd", ibv_dealloc_pd(parent.pd));
	report("parent_close", ibv_close_device(parent.ctx));
	return 0;
}
