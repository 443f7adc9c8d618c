/* A peer's RDMA WRITE into memory the program registered and then unmapped: on the shared NIC
 * the WRITE fails with a remote access error and the program goes on (in-process, the NIC's
 * engine thread would have taken SIGSEGV writing it). One QP writes to another: "<what> <value>". */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long spins = 0; spins < 200000000L; spins++) {
		int got = ibv_poll_cq(cq, 1, wc);
		if (got)
			return got < 0 ? EIO : 0;
	}
	return ETIMEDOUT;
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	union ibv_gid gid;
	struct ibv_wc wc;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	setvbuf(stdout, NULL, _IONBF, 0);
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &init), *peer = ibv_create_qp(pd, &init);
	char *source = malloc(page);
	char *target = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *from = ibv_reg_mr(pd, source, page, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *to = ibv_reg_mr(pd, target, 4 * page, access);

	report("setup", qp && peer && from && to ? connect_qp(qp, peer->qp_num, &gid, 0, 7) ||
						       connect_qp(peer, qp->qp_num, &gid, access, 7) : errno);
	memset(source, 'w', page);
	struct ibv_sge sge = {.addr = (uintptr_t)source, .length = (uint32_t)page, .lkey = from->lkey};
	struct ibv_send_wr write = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				    .send_flags = IBV_SEND_SIGNALED,
				    .wr.rdma = {.remote_addr = (uintptr_t)target + page, .rkey = to->rkey}}, *bad;
	report("write_mapped", ibv_post_send(qp, &write, &bad) || wait_one(cq, &wc) ? -1 : (int)wc.status);
	report("landed", target[page] == 'w' && target[2 * page - 1] == 'w' ? 0 : 1);
	munmap(target, 4 * page);
	write.wr_id = 2;
	report("write_unmapped", ibv_post_send(qp, &write, &bad) || wait_one(cq, &wc) ? -1 : (int)wc.status);
	report("still_running", 0);
	return 0;
}
