/* Multicast attachments: commands to the shared NIC (pyroce.driver.calls.attach_mcast there: the
 * QP's checks and rxe's limits, EINVAL for a refusal), which then delivers each datagram sent
 * to the group to every QP attached. */
#include "pyroce_verbs.h"

static int mcast(struct ibv_qp *qp, const char *verb, const char *command, const union ibv_gid *gid, uint16_t lid)
{
	struct pr_qp *self = (struct pr_qp *)qp;

	return pr_run(self->ctx, verb, command, "hyi", self->handle, (const void *)gid->raw, sizeof(gid->raw),
		      (int)lid);
}

PR_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, "ibv_attach_mcast", "attach_mcast", gid, lid);
}

PR_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, "ibv_detach_mcast", "detach_mcast", gid, lid);
}
