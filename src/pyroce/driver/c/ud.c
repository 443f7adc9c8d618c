/* UD from C: address handles and the datagram segment. An AH is a pyroce.verbs.ah.AH of the
 * shared NIC's (its checks: a GRH, a GID table index, a GID the link reaches) and the 48 bytes of mlx5_wqe_av
 * that post_send copies into each UD WQE after the control segment, with the WR's Q_Key and
 * remote QPN (nic/wqe.py AddressVector, as verbs/qp.py writes it). ibv_init_ah_from_wc reads
 * the network header before a datagram as pyroce.verbs.ah does (IPv4 in its last 20 bytes,
 * else an IPv6 header / GRH), with libibverbs' generic fields. */
#include "pyroce_verbs.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GRH_BYTES 40

/* mlx5_wqe_av for RoCE: stat_rate_sl, tclass, hop_limit, grh_gid_fl (PYROCE_AV_GRH: the AV
 * carries a GRH, always on RoCE), rgid; the Q_Key and dqp_dct come with each WR. */
static void write_av(struct mlx5_wqe_av *av, const struct ibv_ah_attr *attr)
{
	const struct ibv_global_route *grh = &attr->grh;

	memset(av, 0, sizeof(*av));
	av->stat_rate_sl = (attr->sl & 7) << 1;
	av->tclass = grh->traffic_class;
	av->hop_limit = grh->hop_limit;
	av->grh_gid_fl = htobe32(PYROCE_AV_GRH | (uint32_t)grh->sgid_index << 20 | (grh->flow_label & 0xfffff));
	memcpy(av->rgid, grh->dgid.raw, sizeof(grh->dgid.raw));
}

int pr_datagram_segment(uint8_t *seg, const struct ibv_send_wr *wr)
{
	const struct pr_ah *ah = (const struct pr_ah *)wr->wr.ud.ah;
	struct mlx5_wqe_datagram_seg *dgram = (struct mlx5_wqe_datagram_seg *)seg;

	if (!ah || wr->wr.ud.remote_qpn > PYROCE_QPN_MASK)
		return EINVAL;
	dgram->av = ah->av;
	dgram->av.key.qkey.qkey = htobe32(wr->wr.ud.remote_qkey);
	dgram->av.dqp_dct = htobe32(MLX5_EXTENDED_UD_AV | wr->wr.ud.remote_qpn);
	return 0;
}

PR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct pr_context *ctx = pr_ctx(pd->context);
	struct pr_answer answer;
	struct pr_ah *ah = NULL;
	uint32_t handle;

	if (pr_command(&answer, ctx, "ibv_create_ah", "create_ah", "h" PR_AH_FORMAT, ((struct pr_pd *)pd)->handle,
		       PR_AH_ARGS(attr)))
		return NULL;
	if (!pr_unpack(&answer, "h", &handle))
		ah = pr_alloc_for(sizeof(*ah), ctx, "ibv_create_ah", "destroy_ah", handle);
	pr_answer_free(&answer);
	if (!ah)
		return NULL;
	ah->handle = handle;
	ah->ah = (struct ibv_ah){.context = pd->context, .pd = pd};
	write_av(&ah->av, attr);
	return &ah->ah;
}

PR_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct pr_ah *self = (struct pr_ah *)ah;
	int ret = pr_run(pr_ctx(ah->context), "ibv_destroy_ah", "destroy_ah", "h", self->handle);

	if (!ret)
		free(self);
	return ret;
}

PR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
				  struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	struct pr_context *ctx = pr_ctx(context);
	struct pr_answer answer;
	uint8_t dgid[16];
	uint32_t flow_label;
	int sgid_index, hop_limit, traffic_class, error;

	memset(ah_attr, 0, sizeof(*ah_attr)); /* libibverbs' generic fields first */
	ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0; /* a non-global AH: ibv_create_ah refuses it on RoCE */
	ah_attr->is_global = 1;
	if (pr_command(&answer, ctx, "ibv_init_ah_from_wc", "route_from_header", "hy", ctx->handle, (const void *)grh,
		       (size_t)GRH_BYTES))
		return -1;
	error = pr_unpack(&answer, "yIiii", dgid, sizeof(dgid), &flow_label, &sgid_index, &hop_limit, &traffic_class);
	pr_answer_free(&answer);
	if (error)
		return -1;
	memcpy(ah_attr->grh.dgid.raw, dgid, sizeof(ah_attr->grh.dgid.raw));
	ah_attr->grh.flow_label = flow_label;
	ah_attr->grh.sgid_index = sgid_index;
	ah_attr->grh.hop_limit = hop_limit;
	ah_attr->grh.traffic_class = traffic_class;
	return 0;
}

PR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
					       uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
