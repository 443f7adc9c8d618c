/* verbs_context.query_device_ex, what ibv_query_device_ex (the header's inline) calls: without
 * it the inline falls back to ibv_query_device and leaves the extended fields 0, so a program
 * would read phys_port_cnt_ex 0 (rdma-core's test_phys_port_cnt_ex) and no ODP (test_odp). The
 * fields are pyroce.verbs' DeviceAttrEx (odp_caps: its ODPCaps); the first `size` bytes of the
 * program's struct are written. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <string.h>

int pr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *out, size_t size)
{
	struct pr_context *ctx = pr_ctx(context);
	struct ibv_device_attr_ex attr = {0};
	struct pr_answer answer;
	const struct pr_value *found;
	int ret = ibv_query_device(context, &attr.orig_attr);

	if (ret)
		return ret;
	if (pr_command(&answer, ctx, "ibv_query_device_ex", "query_device_ex", "h", ctx->handle))
		return errno;
	found = answer.value;
	attr.completion_timestamp_mask = pr_u64(pr_field(found, "completion_timestamp_mask"));
	attr.hca_core_clock = pr_u64(pr_field(found, "hca_core_clock"));
	attr.device_cap_flags_ex = pr_u64(pr_field(found, "device_cap_flags_ex"));
	attr.max_dm_size = pr_u64(pr_field(found, "max_dm_size"));
	attr.phys_port_cnt_ex = pr_u64(pr_field(found, "phys_port_cnt_ex"));
	const struct pr_value *odp = pr_field(found, "odp_caps");
	attr.odp_caps.general_caps = pr_u64(pr_field(odp, "general_caps"));
	attr.odp_caps.per_transport_caps.rc_odp_caps = pr_u64(pr_field(odp, "rc_odp_caps"));
	attr.odp_caps.per_transport_caps.uc_odp_caps = pr_u64(pr_field(odp, "uc_odp_caps"));
	attr.odp_caps.per_transport_caps.ud_odp_caps = pr_u64(pr_field(odp, "ud_odp_caps"));
	attr.xrc_odp_caps = pr_u64(pr_field(odp, "xrc_odp_caps"));
	pr_answer_free(&answer);
	memcpy(out, &attr, size < sizeof(attr) ? size : sizeof(attr));
	return 0;
}
