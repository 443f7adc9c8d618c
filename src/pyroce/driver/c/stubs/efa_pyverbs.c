/* The rest of what Debian's pyverbs (python3-pyverbs, rdma-core 44) imports from libefa.so.1: its
 * provider modules are loaded with every pyverbs program (rdma-core's tests import them all),
 * and a Cython module is loaded with RTLD_NOW, so every symbol must be there. Each answers "not
 * this device" (stubs.h): pyverbs asks efadv_query_device first, which fails, and a test skips. */
#include "stubs.h"

STUB_NULL(efadv_create_driver_qp)
STUB_ERRNO(efadv_query_ah)
STUB_NULL(efadv_cq_from_ibv_cq_ex)
STUB_NULL(efadv_create_cq)
