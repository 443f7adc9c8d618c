/* pyroce's libefa.so.1: the EFA direct verbs perftest imports (efadv.h of rdma-core 44),
 * answering as the real library does for a device that is not an EFA: EOPNOTSUPP. perftest calls
 * them only for SRD, which pyroce0 does not offer; the real libefa needs libibverbs' private
 * provider interface and cannot load beside pyroce's libibverbs. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define STUB_EXPORT __attribute__((visibility("default")))

struct ibv_context;
struct ibv_qp;

STUB_EXPORT int efadv_query_device(struct ibv_context *ibvctx, void *attr, uint32_t inlen)
{
	return EOPNOTSUPP;
}

STUB_EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx, void *attr_ex, void *efa_attr,
					      uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}
