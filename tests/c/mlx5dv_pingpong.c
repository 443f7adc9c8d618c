/* ibv_rc_pingpong's peer with its sends and receives posted by hand through mlx5dv: the same
 * options, TCP exchange ("LID:QPN:PSN:GID" + NUL each way, then the client's "done"), QP
 * transitions, output lines and ping-pong (the client sends first; each side sends its next
 * message once its last SEND and a RECV completed), but the QP and CQ taken with mlx5dv_init_obj,
 * SEND WQEs written with mlx5dv_set_ctrl_seg/mlx5dv_set_data_seg (fm_ce_se CQ_UPDATE: every SEND
 * signalled), the send doorbell record then a UAR store or a BlueFlame copy (alternately),
 * receive WQEs written into the receive ring and its doorbell record, and raw CQEs polled by
 * owner bit. SEND/RECV only: the exchange gives no rkey or address, so there is nothing to WRITE
 * or READ. It checks the data as well: the client's every reply is its own message echoed (the
 * server sends what it received, as rc_pingpong's one buffer does), the server's every message is
 * rc_pingpong's client's (0x7b, with -c 0 at each page's start). tools/rxe_interop.sh (-t dv_rc)
 * runs it against Linux rxe, tests/test_mlx5dv.py against pyroce's own ibv_rc_pingpong. */
#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "direct.h"

#define MSG_FORMAT "%04x:%06x:%06x:%s"
#define MSG_SIZE sizeof("0000:000000:000000:00000000000000000000000000000000")
#define FILL 0x7b /* rc_pingpong's memset of its buffer */

struct dest {
	int lid, qpn, psn;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "mlx5dv_pingpong: %s\n", what);
	exit(1);
}

static void print_dest(const char *which, const struct dest *dest)
{
	char gid[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, &dest->gid, gid, sizeof(gid));
	printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, dest->lid, dest->qpn, dest->psn,
	       gid);
}

/* rc_pingpong's wire message: the GID as its 16 bytes in order, 32 hex digits */
static void to_msg(const struct dest *dest, char msg[MSG_SIZE])
{
	char gid[33];

	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", dest->gid.raw[i]);
	snprintf(msg, MSG_SIZE, MSG_FORMAT, dest->lid, dest->qpn, dest->psn, gid);
}

static struct dest from_msg(const char msg[MSG_SIZE])
{
	struct dest dest = {0};
	char gid[33];

	if (sscanf(msg, "%x:%x:%x:%32s", &dest.lid, &dest.qpn, &dest.psn, gid) != 4 || strlen(gid) != 32)
		die("the peer's address message is not LID:QPN:PSN:GID");
	for (int i = 0; i < 16; i++) {
		unsigned int byte;

		sscanf(gid + 2 * i, "%02x", &byte);
		dest.gid.raw[i] = byte;
	}
	return dest;
}

static int full(ssize_t (*io)(int, void *, size_t), int fd, void *buf, size_t size)
{
	for (size_t done = 0; done < size;) {
		ssize_t n = io(fd, (uint8_t *)buf + done, size - done);

		if (n <= 0)
			return -1;
		done += n;
	}
	return 0;
}

static ssize_t write_some(int fd, void *buf, size_t size)
{
	return write(fd, buf, size);
}

/* A TCP socket to the first of `host`:`port`'s addresses that takes it: connected (a client), or
 * bound and listening (host NULL: a server) */
static int tcp_socket(const char *host, int port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = host ? 0 : AI_PASSIVE};
	struct addrinfo *infos, *info;
	char service[8];
	int fd = -1, on = 1;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &infos))
		die("getaddrinfo failed");
	for (info = infos; info; info = info->ai_next) {
		fd = socket(info->ai_family, info->ai_socktype, info->ai_protocol);
		if (fd < 0)
			continue;
		if (!host)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		if (host ? !connect(fd, info->ai_addr, info->ai_addrlen) : !bind(fd, info->ai_addr, info->ai_addrlen))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(infos);
	if (fd < 0)
		die(host ? "cannot connect to the server" : "cannot listen");
	if (!host && listen(fd, 1))
		die("listen failed");
	return fd;
}

static int connect_rc(struct ibv_qp *qp, const struct dest *mine, const struct dest *peer, enum ibv_mtu mtu, int gidx)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = peer->qpn,
				   .rq_psn = peer->psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				   .ah_attr = {.dlid = peer->lid, .port_num = 1}};

	if (peer->gid.global.interface_id)
		attr.ah_attr = (struct ibv_ah_attr){.is_global = 1, .dlid = peer->lid, .port_num = 1,
						    .grh = {.dgid = peer->gid, .sgid_index = gidx, .hop_limit = 1}};
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				    .sq_psn = mine->psn, .max_rd_atomic = 1};
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* `count` receive WQEs of `buf`'s `size` bytes written into the receive ring, then its record */
static void post_recvs(struct direct *d, struct ibv_mr *mr, void *buf, uint32_t size, int count)
{
	for (int i = 0; i < count; i++) {
		struct mlx5_wqe_data_seg *wqe = (struct mlx5_wqe_data_seg *)((uint8_t *)d->qp.rq.buf +
			(d->rq_head & (d->qp.rq.wqe_cnt - 1)) * d->qp.rq.stride);

		mlx5dv_set_data_seg(wqe, size, mr->lkey, (uintptr_t)buf);
		if (d->qp.rq.stride > sizeof(*wqe))
			mlx5dv_set_data_seg(wqe + 1, 0, MLX5_INVALID_LKEY, 0);
		d->rq_head++;
	}
	__atomic_store_n(&d->qp.dbrec[MLX5_RCV_DBR], htobe32(d->rq_head & 0xffff), __ATOMIC_RELEASE);
}

/* rc_pingpong's -m: the MTU's enum */
static enum ibv_mtu mtu_of(int bytes)
{
	for (enum ibv_mtu mtu = IBV_MTU_256; mtu <= IBV_MTU_4096; mtu++)
		if (bytes == 128 << mtu)
			return mtu;
	die("-m: 256, 512, 1024, 2048 or 4096");
	return 0;
}

int main(int argc, char *argv[])
{
	const char *dev_name = NULL, *servername = NULL;
	int port = 18515, gidx = -1, size = 4096, rx_depth = 500, iters = 1000, validate = 0, opt;
	enum ibv_mtu mtu = IBV_MTU_1024;
	long page = sysconf(_SC_PAGESIZE);

	while ((opt = getopt(argc, argv, "p:d:s:m:r:n:g:c")) != -1) {
		switch (opt) {
		case 'p': port = atoi(optarg); break;
		case 'd': dev_name = optarg; break;
		case 's': size = atoi(optarg); break;
		case 'm': mtu = mtu_of(atoi(optarg)); break;
		case 'r': rx_depth = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'g': gidx = atoi(optarg); break;
		case 'c': validate = 1; break;
		default: die("usage: [-d DEV] [-p PORT] [-s SIZE] [-m MTU] [-r RX_DEPTH] [-n ITERS] [-g GIDX] [-c] [SERVER]");
		}
	}
	if (optind == argc - 1)
		servername = argv[optind];
	int client = servername != NULL;

	if (size < 1 || rx_depth < 2 || iters < 1)
		die("-s, -r and -n want positive numbers (-r at least 2)");
	srand48(getpid() * time(NULL));

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device **dev = list;
	while (dev && *dev && dev_name && strcmp(ibv_get_device_name(*dev), dev_name))
		dev++;
	if (!dev || !*dev)
		die("no such device");
	struct ibv_context *ctx = ibv_open_device(*dev);
	ibv_free_device_list(list);
	if (!ctx)
		die("cannot open the device");

	uint8_t *send_buf = aligned_alloc(page, (size + page - 1) / page * page);
	uint8_t *recv_buf = aligned_alloc(page, (size + page - 1) / page * page);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!send_buf || !recv_buf || !pd)
		die("no memory or PD");
	memset(send_buf, FILL, size);
	if (client) /* our message: a pattern, 0 at each page's start as rc_pingpong -c writes */
		for (int i = 0; i < size; i++)
			send_buf[i] = i % page ? (uint8_t)(i * 7 + 1) : 0;
	struct ibv_mr *send_mr = ibv_reg_mr(pd, send_buf, size, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *recv_mr = ibv_reg_mr(pd, recv_buf, size, IBV_ACCESS_LOCAL_WRITE);
	struct mlx5dv_cq_init_attr dv_cq = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE, .cqe_size = 64};
	struct ibv_cq_init_attr_ex cq_attr = {.cqe = rx_depth + 1};
	struct ibv_cq_ex *cq_ex = mlx5dv_create_cq(ctx, &cq_attr, &dv_cq);
	if (!send_mr || !recv_mr || !cq_ex)
		die("cannot register the buffers or create the CQ");
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cq_ex);
	struct ibv_qp_init_attr_ex qp_attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 1, .max_recv_wr = rx_depth, .max_send_sge = 1,
						      .max_recv_sge = 1},
					      .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	struct mlx5dv_qp_init_attr dv_qp = {0};
	struct ibv_qp *qp = mlx5dv_create_qp(ctx, &qp_attr, &dv_qp);
	if (!qp)
		die("cannot create the QP");
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("Failed to modify QP to INIT");
	struct direct d = {.qpn = qp->qp_num};
	struct mlx5dv_obj obj = {.qp = {.in = qp, .out = &d.qp}, .cq = {.in = cq, .out = &d.cq}};
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
		die("mlx5dv_init_obj failed");
	post_recvs(&d, recv_mr, recv_buf, size, rx_depth);
	int routs = rx_depth;

	struct ibv_port_attr port_attr;
	struct dest mine = {.qpn = qp->qp_num, .psn = lrand48() & 0xffffff}, peer;
	if (ibv_query_port(ctx, 1, &port_attr))
		die("cannot query port 1");
	mine.lid = port_attr.lid;
	if (gidx >= 0 && ibv_query_gid(ctx, 1, gidx, &mine.gid))
		die("cannot read the GID");
	print_dest("local address: ", &mine);

	char msg[MSG_SIZE];
	to_msg(&mine, msg);
	if (client) {
		int fd = tcp_socket(servername, port);

		if (full(write_some, fd, msg, sizeof(msg)) || full(read, fd, msg, sizeof(msg)))
			die("Couldn't read/write remote address");
		peer = from_msg(msg);
		if (full(write_some, fd, "done", sizeof("done")))
			die("Couldn't send done");
		close(fd);
		if (connect_rc(qp, &mine, &peer, mtu, gidx))
			die("Couldn't connect to remote QP");
	} else {
		int listener = tcp_socket(NULL, port), fd = accept(listener, NULL, NULL);
		char done[sizeof("done")];

		close(listener);
		if (fd < 0 || full(read, fd, msg, sizeof(msg)))
			die("Couldn't read remote address");
		peer = from_msg(msg);
		if (connect_rc(qp, &mine, &peer, mtu, gidx))
			die("Couldn't connect to remote QP");
		to_msg(&mine, msg);
		if (full(write_some, fd, msg, sizeof(msg)) || full(read, fd, done, sizeof(done)))
			die("Couldn't send/recv local address");
		close(fd);
	}
	print_dest("remote address:", &peer);

	/* the ping-pong: SEND pending until its CQE, RECV pending until one arrives */
	enum { RECV = 1, SEND = 2 };
	int pending = RECV, scnt = 0, rcnt = 0, bad = 0;
	double start = now();
	if (client) {
		ring(&d, write_wqe(&d, MLX5_OPCODE_SEND, d.pi, 0, 0, send_mr, send_buf, size), 0);
		pending |= SEND;
	}
	while (rcnt < iters || scnt < iters) {
		struct mlx5_cqe64 *cqe = next_cqe(&d, CQE_WAIT_S);

		if (!cqe)
			die("no CQE for 10 s");
		uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);
		if (opcode == MLX5_CQE_REQ) {
			scnt++;
			pending &= ~SEND;
		} else if (opcode == MLX5_CQE_RESP_SEND) {
			if ((int)be32toh(cqe->byte_cnt) != size)
				die("a RECV of another size");
			if (client ? memcmp(recv_buf, send_buf, size) : 0)
				bad++;
			for (int i = 0; !client && i < size; i++)
				bad += recv_buf[i] != (validate && i % page == 0 ? 0 : FILL);
			if (!client) /* the echo: our next message is what we received */
				memcpy(send_buf, recv_buf, size);
			rcnt++;
			pending &= ~RECV;
		} else {
			fprintf(stderr, "mlx5dv_pingpong: CQE opcode %u, syndrome 0x%x\n", opcode,
				((struct mlx5_err_cqe *)cqe)->syndrome);
			die("a completion with an error");
		}
		consume(&d);
		if (opcode == MLX5_CQE_RESP_SEND && --routs <= 1) {
			post_recvs(&d, recv_mr, recv_buf, size, rx_depth - routs);
			routs = rx_depth;
		}
		if (scnt < iters && !pending) {
			ring(&d, write_wqe(&d, MLX5_OPCODE_SEND, d.pi, 0, 0, send_mr, send_buf, size), scnt & 1);
			pending = RECV | SEND;
		}
	}
	double seconds = now() - start;
	long long bytes = (long long)size * iters * 2;
	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, seconds, bytes * 8. / seconds / 1000000);
	printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, seconds, seconds * 1000000 / iters);
	if (bad)
		printf("invalid data in %d bytes\n", bad);
	int gone = ibv_destroy_qp(qp) ?: ibv_destroy_cq(cq) ?: ibv_dereg_mr(send_mr) ?: ibv_dereg_mr(recv_mr) ?:
		   ibv_dealloc_pd(pd) ?: ibv_close_device(ctx);
	free(send_buf);
	free(recv_buf);
	return gone || bad;
}
