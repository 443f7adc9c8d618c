/* The rest of rdma-core 45 to 65's verbs (IBVERBS_1.15 to 1.18: DMA handles, device memory
 * dmabuf exports, ibv_alloc_buf buffers, completion counters), which a software NIC has no
 * hardware for: each answers as libibverbs' own dummy_ops do for a provider without them,
 * EOPNOTSUPP in errno and returned, NULL for an object, -1 for a descriptor. This file includes no verbs header (an
 * older one lacks the types; a newer one's prototypes would not match these argument-less
 * stubs: stubs/stubs.h). */
#include "stubs.h"

STUB_NULL(ibv_alloc_dmah)
STUB_ERRNO(ibv_dealloc_dmah)
STUB_MINUS(ibv_dm_export_dmabuf_fd)
STUB_NULL(ibv_alloc_buf)
STUB_VOID(ibv_free_buf)
STUB_NULL(ibv_reg_buf_mr)
STUB_MINUS(ibv_export_buf_dmabuf_fd)
STUB_ERRNO(_ibv_query_comp_cntr_caps)
STUB_NULL(ibv_create_comp_cntr)
STUB_ERRNO(ibv_destroy_comp_cntr)
STUB_ERRNO(ibv_set_comp_cntr)
STUB_ERRNO(ibv_set_err_comp_cntr)
STUB_ERRNO(ibv_inc_comp_cntr)
STUB_ERRNO(ibv_inc_err_comp_cntr)
STUB_ERRNO(ibv_read_comp_cntr)
STUB_ERRNO(ibv_read_err_comp_cntr)
STUB_ERRNO(ibv_qp_attach_comp_cntr)
