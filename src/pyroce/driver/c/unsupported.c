/* The verbs pyroce does not offer to C programs (yet): each fails as a real provider's
 * unsupported verb does, EOPNOTSUPP returned or in errno with NULL, never a crash. */
#include "pyroce_verbs.h"

#include <errno.h>

#define NULL_EOPNOTSUPP \
	do { \
		errno = EOPNOTSUPP; \
		return NULL; \
	} while (0)

PR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
					  uint8_t eth_mac[6], uint16_t *vid)
{
	return EOPNOTSUPP;
}

PR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0; /* nothing is promised in order beyond what IBA says */
}

PR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

PR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

PR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					   int access)
{
	NULL_EOPNOTSUPP;
}

PR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	NULL_EOPNOTSUPP; /* no kernel object to import */
}

PR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	NULL_EOPNOTSUPP;
}

PR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

PR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	NULL_EOPNOTSUPP;
}

PR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

PR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	NULL_EOPNOTSUPP;
}

PR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

PR_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	return 0; /* MRs are plain memory: nothing to protect from fork */
}

PR_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}
