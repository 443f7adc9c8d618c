/* pyroce's libibverbs.so.1: the objects the C library keeps beside the shared NIC's.
 *
 * Control verbs are commands to the shared NIC (nic_client.c: the functions of
 * pyroce.driver.calls, run by `pyroce nicd` on its verbs objects), each object of the NIC a
 * handle here; the data path (post_send, post_recv, poll_cq in datapath.c) reads and writes the
 * rings those commands return, in the connection's shared memory and mlx5's layouts
 * (src/pyroce/nic/wqe.py, cqe.py), and rings the device's doorbell by writing a record to its
 * pipe (host/handoff.py). No interpreter runs in the program. The layouts and values come from
 * <infiniband/mlx5dv.h> where mlx5 defines them, else from pyroce_abi.h, which the build
 * renders from the Python definitions (driver/abi.py): none is restated here.
 */
#ifndef PYROCE_VERBS_H
#define PYROCE_VERBS_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nic_client.h"
#include "pyroce_abi.h"

#define PR_EXPORT __attribute__((visibility("default")))

struct pr_qp;
struct pr_srq;

struct pr_context {
	struct verbs_context vctx; /* ibv_context last inside it, as libibverbs lays them out */
	uint32_t handle;           /* the NIC's pyroce.verbs.device.Context */
	int doorbell_fd;           /* this process's copy of the NIC's doorbell pipe */
	unsigned int generation;   /* pr_generation at ibv_open_device */
	unsigned int epoch;        /* the connection to the NIC it was opened on */
	pthread_mutex_t lock;      /* the QP and CQ lists */
	struct pr_qp *qps;
	struct pr_cq *cqs;
	struct pr_srq *srqs;
};

struct pr_pd {
	struct ibv_pd pd;
	uint32_t handle;
};

struct pr_mr {
	struct ibv_mr mr;
	uint32_t handle;
};

struct pr_channel {
	struct ibv_comp_channel channel; /* fd: this process's copy of the NIC's event fd */
	uint32_t handle;
};

/* Whether a CQ's napping poll has its wake-up from the NIC (pr_cq.wake; datapath.c) */
enum { PR_WAKE_UNASKED, PR_WAKE_ASKING, PR_WAKE_READY, PR_WAKE_REFUSED };

struct pr_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cq_ex; /* ibv_create_cq_ex's: begins as an ibv_cq (ibv_cq_ex_to_cq) */
	};
	uint32_t handle;
	struct pr_cq *next;        /* in the context's list */
	uint32_t cqn;
	pthread_spinlock_t lock;
	uint8_t *ring;             /* count 64-byte CQEs */
	uint32_t count;
	uint32_t shift;            /* log2(count): the owner bit of counter c is (c >> shift) & 1 */
	volatile uint32_t *consumer_record; /* be32, read by the NIC */
	uint32_t consumer;
	struct pr_qp *last;        /* the QP of the previous CQE: most polls find the same one */
	uint32_t empty_polls;      /* in a row: past SPIN_POLLS each one naps (datapath.c) */
	int wake;                  /* the nap's wake-up: PR_WAKE_* (datapath.c) */
	int wake_fd;               /* the NIC's eventfd written with the next CQE while napping is set */
	volatile uint8_t *napping; /* set while a poll sleeps on wake_fd, in the NIC's shared memory */
	struct ibv_wc *current;    /* an extended CQ's completion being read (cq_ex.c), else NULL */
	void *uar;                 /* mlx5dv_init_obj's cq_uar: a register page of the NIC's, else NULL */
	int dv_owned;              /* taken by mlx5dv_init_obj: its consumer is the program's (no clean) */
};

#define PR_SRQ_COUNTERS (PYROCE_COUNTER_MASK + 1) /* an SRQ's wr_ids by 16-bit WQE counter, as its CQEs name them */

struct pr_srq {
	struct ibv_srq srq;
	uint32_t handle;
	struct pr_srq *next;       /* in the context's list */
	uint32_t srqn;
	pthread_spinlock_t lock;
	uint8_t *ring;             /* count WQEs of stride bytes (a resize moves it) */
	uint32_t count, stride, producer, outstanding, max_wr, max_sge;
	volatile uint32_t *doorbell; /* [MLX5_RCV_DBR] the producer (be32), read by the NIC when it needs a WQE */
	uint64_t *wr_ids;          /* PR_SRQ_COUNTERS: completions come out of ring order */
};

struct pr_ah {
	struct ibv_ah ah;
	uint32_t handle;           /* the NIC's pyroce.verbs.ah.AH: its checks were made there */
	struct mlx5_wqe_av av;     /* the datagram segment but its Q_Key and QPN, which each WR names */
};

struct pr_send_entry {
	uint32_t start;            /* first basic block */
	uint32_t wqebbs;
	uint64_t wr_id;
};

struct pr_wr_batch;

struct pr_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex; /* ibv_create_qp_ex's: begins as an ibv_qp (ibv_qp_to_qp_ex) */
	};
	uint32_t handle;
	struct pr_qp *next;        /* in the context's list */
	struct pr_context *ctx;
	struct pr_cq *scq, *rcq;
	struct pr_srq *srq;        /* where its receives come from, or NULL: its own queue */
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
	int sq_sig_all;
	pthread_spinlock_t sq_lock, rq_lock;
	uint8_t *sq;               /* sq_wqebbs 64-byte basic blocks */
	uint32_t sq_wqebbs;
	uint32_t sq_producer, sq_retired;
	struct pr_send_entry *sq_entries; /* the WQEs posted and not completed, oldest first */
	uint32_t sq_head, sq_count;       /* a ring of max_send_wr entries */
	uint8_t *rq;               /* rq_count WQEs of rq_stride bytes */
	uint32_t rq_count, rq_stride, rq_producer, rq_outstanding;
	uint64_t *rq_wr_ids;       /* by WQE counter modulo rq_count */
	volatile uint32_t *doorbell; /* [MLX5_RCV_DBR] receive producer, [MLX5_SND_DBR] send producer (be32) */
	uint32_t reset_at_scq, reset_at_rcq; /* CQEs before these counters belong to before a reset */
	struct pr_wr_batch *batch; /* an extended QP's wr_* state (qp_ex.c), else NULL */
	void *uar;                 /* taken by mlx5dv_init_obj: its register page (BlueFlame), else NULL */
};

/* control.c: the C side of an object the NIC just made: ``size`` zeroed bytes, or NULL with
 * ENOMEM after ``undo(handle)`` destroyed it on the NIC. */
void *pr_alloc_for(size_t size, const struct pr_context *ctx, const char *verb, const char *undo, uint32_t handle);

/* datapath.c */
int pr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int pr_post_one(struct pr_qp *qp, const struct ibv_send_wr *wr);
void pr_send_doorbell(struct pr_qp *qp);
int pr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int pr_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int pr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
uint64_t pr_retire_srq(struct pr_srq *srq, uint16_t counter);
void pr_write_recv_wqe(uint8_t *wqe, uint32_t stride, const struct ibv_recv_wr *wr);
void pr_qp_reset(struct pr_qp *qp, uint32_t scq_at, uint32_t rcq_at);
void pr_cq_clean(struct pr_cq *cq, struct pr_qp *gone);

/* control.c */
/* An ibv_ah_attr as calls.modify_qp and create_ah read it: a mapping (the format's part and its
 * arguments, for pr_command), the GID as 16 bytes. */
#define PR_AH_FORMAT "{yIiiiiiiiii}"
#define PR_AH_ARGS(ah)                                                                                               \
	"dgid", (const void *)(ah)->grh.dgid.raw, sizeof((ah)->grh.dgid.raw), "flow_label", (ah)->grh.flow_label,    \
		"sgid_index", (int)(ah)->grh.sgid_index, "hop_limit", (int)(ah)->grh.hop_limit, "traffic_class",      \
		(int)(ah)->grh.traffic_class, "dlid", (int)(ah)->dlid, "sl", (int)(ah)->sl, "src_path_bits",          \
		(int)(ah)->src_path_bits, "static_rate", (int)(ah)->static_rate, "is_global", (int)(ah)->is_global,   \
		"port_num", (int)(ah)->port_num
int pr_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int pr_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge);
struct pr_cq *pr_find_cq(struct pr_context *ctx, uint32_t cqn);
struct pr_qp *pr_find_qp(struct pr_context *ctx, uint32_t qpn);
struct pr_srq *pr_find_srq(struct pr_context *ctx, uint32_t srqn);

/* ud.c */
int pr_datagram_segment(uint8_t *seg, const struct ibv_send_wr *wr);

/* mw.c */
int pr_bind_segment(uint8_t *seg, const struct ibv_send_wr *wr);
struct ibv_mw *pr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int pr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
int pr_dealloc_mw(struct ibv_mw *mw);

/* qp_ex.c, cq_ex.c */
struct ibv_qp *pr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_cq_ex *pr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);

/* devices.c */
bool pr_own_device(const struct ibv_device *device); /* pyroce0, this library's one device */
extern unsigned int pr_generation; /* one more in each child of fork() (pthread_atfork) */
int pr_forked(void);
int pr_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr, size_t size);
int pr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t size);

static inline struct pr_context *pr_ctx(struct ibv_context *context)
{
	return (struct pr_context *)((uint8_t *)context - offsetof(struct verbs_context, context));
}

/* The data path's fork check, one compare: EIO (said once on stderr) for a context a parent
 * opened, whose objects belong to the parent's connection to the NIC (and whose rings are not
 * mapped in the child). Every command on an object checks it too. */
static inline int pr_stale(const struct pr_context *ctx)
{
	unsigned int now = __atomic_load_n(&pr_generation, __ATOMIC_RELAXED);

	return __builtin_expect(ctx->generation != now, 0) ? pr_forked() : 0;
}

#endif
