/* ibv_advise_mr on pyroce (every MR pages on demand, so a prefetch is its checks): good advice
 * of each kind, synchronous and not, and misuse with the kernel's errnos. Prints "<what> <errno>";
 * tests/test_c_driver.py reads it. */
#include <stdint.h>

#include "common.h"

#define MAX_SGES (UINT16_MAX / sizeof(struct ibv_sge)) /* libibverbs' 16-bit ioctl attribute */

static char buf[4096], read_only_buf[64], other_buf[64];
static struct ibv_sge many[MAX_SGES + 1];

static int advise(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge sge)
{
	return ibv_advise_mr(pd, advice, flags, &sge, 1);
}

int main(void)
{
	struct ibv_context *ctx = open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other_pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) : NULL;
	struct ibv_mr *read_only = pd ? ibv_reg_mr(pd, read_only_buf, sizeof(read_only_buf), 0) : NULL;
	struct ibv_mr *other = other_pd ? ibv_reg_mr(other_pd, other_buf, sizeof(other_buf), IBV_ACCESS_LOCAL_WRITE)
					: NULL;

	if (!mr || !read_only || !other) {
		perror("setup");
		return 1;
	}
	struct ibv_sge whole = {.addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey};
	struct ibv_sge past = {.addr = (uintptr_t)buf + 1, .length = sizeof(buf), .lkey = mr->lkey};

	report("prefetch_sync", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, whole));
	report("prefetch_write_sync", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, whole));
	report("prefetch_no_fault_sync",
	       advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH, whole));
	report("prefetch_write_async", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, whole));
	report("prefetch_async_past_the_mr", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, past));
	struct ibv_sge read_only_sge = {.addr = (uintptr_t)read_only_buf, .length = 64, .lkey = read_only->lkey};
	report("prefetch_read_only", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, read_only_sge));
	for (size_t i = 0; i <= MAX_SGES; i++)
		many[i] = whole;
	report("prefetch_4095_sges", ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, many,
						   MAX_SGES));

	report("einval_4096_sges", ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, many,
						 MAX_SGES + 1));
	report("einval_no_sge", ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, many, 0));
	report("einval_flags_2", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, whole));
	report("eopnotsupp_advice_3", advise(pd, (enum ibv_advise_mr_advice)3, IBV_ADVISE_MR_FLAG_FLUSH, whole));
	struct ibv_sge other_sge = {.addr = (uintptr_t)other_buf, .length = 64, .lkey = other->lkey};
	report("einval_mr_of_other_pd", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, other_sge));
	struct ibv_sge no_mr = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey ^ 0x100};
	report("einval_lkey_of_no_mr", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, no_mr));
	report("eperm_write_read_only",
	       advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, read_only_sge));
	report("efault_past_the_mr", advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, past));

	report("dereg_mr", ibv_dereg_mr(mr) | ibv_dereg_mr(read_only) | ibv_dereg_mr(other));
	report("dealloc_pd", ibv_dealloc_pd(pd) | ibv_dealloc_pd(other_pd));
	report("close_device", ibv_close_device(ctx));
	return 0;
}
