/* Zero-length RDMA WRITEs to address 0 with rkey 0, as UCX flushes a connection: with no SGE and
 * with one zero-length SGE, from an RC QP connected to itself. Both complete and nothing in the
 * buffer changes. Prints "<what> <errno>" and one line per WC; tests/test_c_driver.py reads it. */
#include <string.h>

#include "common.h"

static char buf[4096];

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1}};
	struct ibv_qp *qp = pd && cq && mr ? ibv_create_qp(pd, &init) : NULL;

	if (!qp || connect_to_itself(qp, &gid, IBV_ACCESS_REMOTE_WRITE, 0x10)) {
		perror("setup");
		return 1;
	}
	memset(buf, 'u', sizeof(buf));
	struct ibv_sge empty = {.addr = (uintptr_t)buf, .length = 0, .lkey = mr->lkey};
	struct ibv_send_wr none = {.wr_id = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   one = {.wr_id = 2, .sg_list = &empty, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	report("post_write_no_sge", ibv_post_send(qp, &none, &bad));
	report("post_write_zero_length_sge", ibv_post_send(qp, &one, &bad));
	struct ibv_wc wc[2];
	int found = 0;
	for (long spins = 0; found < 2 && spins < 200000000L; spins++)
		found += ibv_poll_cq(cq, 2 - found, wc + found);
	for (int i = 0; i < found; i++)
		printf("wc wr_id=%lu status=%s opcode=%d byte_len=%u\n", (unsigned long)wc[i].wr_id,
		       ibv_wc_status_str(wc[i].status), wc[i].opcode, wc[i].byte_len);
	int untouched = 1;
	for (size_t i = 0; i < sizeof(buf); i++)
		untouched &= buf[i] == 'u';
	printf("untouched %d\n", untouched);
	return 0; /* the device closes as the program exits */
}
