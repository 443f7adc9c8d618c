/* verbs_context.query_device_ex, what ibv_query_device_ex (the header's inline) calls: without
 * it the inline falls back to ibv_query_device and leaves the extended fields 0, so a program
 * would read phys_port_cnt_ex 0 (rdma-core's test_phys_port_cnt_ex). The fields are
 * pyroce.verbs' DeviceAttrEx; the first `size` bytes of the program's struct are written. */
#include "pyroce_verbs.h"

#include <errno.h>
#include <string.h>

int pr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *out, size_t size)
{
	struct ibv_device_attr_ex attr = {0};
	PyGILState_STATE state;
	PyObject *found;
	int ret = ibv_query_device(context, &attr.orig_attr);

	if (ret)
		return ret;
	if (pr_enter(&state))
		return errno;
	found = pr_call("ibv_query_device_ex", "query_device_ex", "(O)", pr_ctx(context)->obj);
	if (!found) {
		pr_leave(state);
		return errno;
	}
	attr.completion_timestamp_mask = pr_long(found, "completion_timestamp_mask");
	attr.hca_core_clock = pr_long(found, "hca_core_clock");
	attr.device_cap_flags_ex = pr_long(found, "device_cap_flags_ex");
	attr.max_dm_size = pr_long(found, "max_dm_size");
	attr.phys_port_cnt_ex = pr_long(found, "phys_port_cnt_ex");
	Py_DECREF(found);
	pr_leave(state);
	memcpy(out, &attr, size < sizeof(attr) ? size : sizeof(attr));
	return 0;
}
