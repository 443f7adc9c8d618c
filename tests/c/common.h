/* What the test programs here share: each prints "<what> <errno>" per verb (0: it worked), which
 * tests/test_c_driver.py reads, and most connect an RC QP to itself. */
#ifndef PYROCE_TEST_COMMON_H
#define PYROCE_TEST_COMMON_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

static inline void report(const char *what, int error)
{
	printf("%s %d\n", what, error);
}

/* The first device opened (pyroce0 under `pyroce run`); the program ends if there is none. */
static inline struct ibv_context *open_first_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;

	if (list)
		ibv_free_device_list(list);
	if (!ctx) {
		perror("open");
		exit(1);
	}
	return ctx;
}

/* The errno of a verb that returns an object, 0 if it returned one. */
static inline int null_errno(const void *object)
{
	return object ? 0 : errno;
}

/* An RC QP to INIT (remote ``access``), RTR (the peer QPN ``dest_qpn`` at ``gid``, receive PSN
 * ``psn``) and RTS (send PSN ``psn``): 0, or the error of the first transition that failed. */
static inline int connect_qp(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *gid, unsigned int access,
			     uint32_t psn)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	int failed = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

	if (failed)
		return failed;
	attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest_qpn,
				    .rq_psn = psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				    .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = *gid, .hop_limit = 1}}};
	failed = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (failed)
		return failed;
	attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				    .sq_psn = psn, .max_rd_atomic = 1};
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* An RC QP connected to itself (its own QPN and GID). */
static inline int connect_to_itself(struct ibv_qp *qp, const union ibv_gid *gid, unsigned int access, uint32_t psn)
{
	return connect_qp(qp, qp->qp_num, gid, access, psn);
}

#endif
