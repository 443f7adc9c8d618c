/* ibv_get_cq_event and ibv_get_async_event wait as a read(2) of the kernel's event files does:
 * a signal whose handler was installed without SA_RESTART ends the wait with EINTR, one with
 * SA_RESTART does not; a non-blocking fd with nothing ready is EAGAIN at once; an event that
 * comes is taken. Each check prints "<what> <errno>" (0: it worked), which
 * tests/test_c_driver.py reads. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static volatile sig_atomic_t alarms, restart_alarms;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char buf[4096];

/* A wait that never ends fails the test here, not by its timeout. */
static void on_alarm(int sig)
{
	static const char said[] = "a wait went on through 3 signals without SA_RESTART\n";

	if (++alarms >= 3) {
		write(2, said, sizeof(said) - 1);
		_exit(3);
	}
	alarm(1);
}

/* With SA_RESTART the wait goes on; the second alarm sends the SEND that ends it. */
static void on_restart_alarm(int sig)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;

	if (++restart_alarms == 1)
		alarm(1);
	else
		ibv_post_send(qp, &wr, &bad); /* async-signal-safe here: the data path takes no lock held now */
}

static void handle(void (*handler)(int), int flags)
{
	struct sigaction action = {.sa_handler = handler, .sa_flags = flags};

	sigemptyset(&action.sa_mask);
	sigaction(SIGALRM, &action, NULL);
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *channel = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, channel, 0), *event_cq;
	struct ibv_qp_init_attr attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_async_event async;
	union ibv_gid gid;
	void *context;

	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	qp = ibv_create_qp(pd, &attr);
	ibv_query_gid(ctx, 1, 0, &gid);
	int failed = connect_to_itself(qp, &gid, 0, 0x10);
	report("connect_to_itself", failed);
	if (failed)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* interrupted: -1 and EINTR, as read(2) answers */
	handle(on_alarm, 0);
	report("req_notify_cq", ibv_req_notify_cq(cq, 0));
	alarm(1);
	report("get_cq_event_interrupted", ibv_get_cq_event(channel, &event_cq, &context) ? errno : 0);
	alarm(1);
	report("get_async_event_interrupted", ibv_get_async_event(ctx, &async) ? errno : 0);
	alarm(0);

	/* non-blocking: EAGAIN at once */
	int flags = fcntl(channel->fd, F_GETFL);
	fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK);
	report("get_cq_event_nonblocking", ibv_get_cq_event(channel, &event_cq, &context) ? errno : 0);
	fcntl(channel->fd, F_SETFL, flags);
	flags = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
	report("get_async_event_nonblocking", ibv_get_async_event(ctx, &async) ? errno : 0);
	fcntl(ctx->async_fd, F_SETFL, flags);

	/* SA_RESTART: the wait goes on through the signals, and takes the event a SEND makes */
	struct ibv_sge sge = {.addr = (uintptr_t)buf + 2048, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr recv = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad_recv;
	report("post_recv", ibv_post_recv(qp, &recv, &bad_recv));
	handle(on_restart_alarm, SA_RESTART);
	alarm(1);
	int got = ibv_get_cq_event(channel, &event_cq, &context);
	report("get_cq_event_restarted", got ? errno : 0);
	printf("restarted alarms=%d event_cq_is_cq=%d\n", restart_alarms, !got && event_cq == cq);
	if (!got)
		ibv_ack_cq_events(cq, 1);
	handle(SIG_DFL, 0);

	/* an async event that comes is taken: SQ_DRAINED of a QP moved to SQD */
	struct ibv_qp_attr sqd = {.qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1};
	report("modify_to_sqd", ibv_modify_qp(qp, &sqd, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY));
	got = ibv_get_async_event(ctx, &async);
	report("get_async_event", got ? errno : 0);
	printf("async event_type=%d qp_is_qp=%d\n", got ? -1 : (int)async.event_type, !got && async.element.qp == qp);
	if (!got)
		ibv_ack_async_event(&async);

	/* a child of fork() waits for no event of its parent's objects: EIO at once */
	fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		handle(on_alarm, 0);
		alarm(1); /* a wait would end here with EINTR */
		report("fork_child_get_cq_event", ibv_get_cq_event(channel, &event_cq, &context) ? errno : 0);
		report("fork_child_get_async_event", ibv_get_async_event(ctx, &async) ? errno : 0);
		fflush(stdout);
		_exit(0);
	}
	waitpid(child, NULL, 0);

	struct ibv_wc wc[2];
	while (ibv_poll_cq(cq, 2, wc) > 0)
		;
	report("destroy_qp", ibv_destroy_qp(qp));
	report("destroy_cq", ibv_destroy_cq(cq));
	report("destroy_comp_channel", ibv_destroy_comp_channel(channel));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
