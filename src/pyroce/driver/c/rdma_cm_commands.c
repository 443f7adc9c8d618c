/* The ucma commands librdmacm writes (<rdma/rdma_user_cm.h>), served as the kernel's ucma serves
 * them: each one the `cm_*` command of the shared NIC's (driver/cm_calls.py) with its arguments
 * decoded, and the NIC's answer written where the command's `response` points. The checks that
 * are the file's (the header, sizes, the room for an answer) are made here with the kernel's
 * errnos; everything else is the NIC's connection manager's.
 *
 * The ids a program sees are numbers of this process (the lowest free, as the kernel's xarray
 * hands them out), each standing for a CmId handle on the program's connection to the NIC; an
 * id the NIC names first in an event (a CONNECT_REQUEST's new id) is numbered then. The
 * program's memory is read and written with process_vm_readv/writev on itself, so a bad
 * pointer is EFAULT, as the kernel's copy_from_user answers, never a crash here.
 *
 * Addresses are IPv4 and IPv6 only: an AF_IB address is EAFNOSUPPORT, so librdmacm (which tries
 * one at start, ucma_set_af_ib_support) uses BIND_IP, RESOLVE_IP and QUERY_ROUTE, as on a
 * kernel without AF_IB (and JOIN_IP_MCAST for a multicast join). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nic_client.h"
#include "rdma_cm.h"

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))
#define IB_SA_EQ 2            /* a path record's selectors: exactly this MTU, rate, life time */
#define NO_DEVICE_INDEX (-1)  /* pyroce's libibverbs gives its device no index (ibv_get_device_index) */

/* --- the program's memory ------------------------------------------------------------ */

static int copy_in(void *out, uint64_t address, size_t size)
{
	struct iovec local = {out, size}, remote = {(void *)(uintptr_t)address, size};

	return !size || process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : EFAULT;
}

static int copy_out(uint64_t address, const void *data, size_t size)
{
	struct iovec local = {(void *)data, size}, remote = {(void *)(uintptr_t)address, size};

	return !size || process_vm_writev(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : EFAULT;
}

/* --- ids and joins ----------------------------------------------------------------- */

/* The numbers the program sees, each standing for a handle of the NIC's: ids (CREATE_ID's, a
 * CONNECT_REQUEST's) and multicast joins (JOIN_MCAST's) are numbered apart, each the lowest
 * free, as the kernel's two xarrays hand them out. */
struct number {
	uint32_t handle; /* 0: a free number */
	int fd;          /* an id: the file it is on */
	uint32_t owner;  /* a join: the number of its id */
};

struct numbers {
	pthread_mutex_t lock;
	struct number *at;
	uint32_t size;
};

static struct numbers ids = {PTHREAD_MUTEX_INITIALIZER, NULL, 0}, joins = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

/* The number of `handle` in `t`, numbered now (with `fd` and `owner`) if it has none: 0 or ENOMEM. */
static int number_of(struct numbers *t, uint32_t handle, int fd, uint32_t owner, uint32_t *number)
{
	uint32_t i, free_one = UINT32_MAX;

	pthread_mutex_lock(&t->lock);
	for (i = 0; i < t->size && t->at[i].handle != handle; i++)
		if (!t->at[i].handle && free_one == UINT32_MAX)
			free_one = i;
	if (i == t->size) { /* a new one */
		if (free_one == UINT32_MAX) {
			uint32_t size = t->size ? 2 * t->size : 16;
			struct number *grown = realloc(t->at, size * sizeof(*grown));
			if (!grown) {
				pthread_mutex_unlock(&t->lock);
				return ENOMEM;
			}
			memset(grown + t->size, 0, (size - t->size) * sizeof(*grown));
			t->at = grown;
			free_one = t->size;
			t->size = size;
		}
		i = free_one;
		t->at[i].handle = handle;
		t->at[i].owner = owner;
	}
	t->at[i].fd = fd; /* an id migrated to another file is on that one now */
	*number = i;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

static int id_number(uint32_t handle, int fd, uint32_t *number)
{
	return number_of(&ids, handle, fd, 0, number);
}

/* The handle `t` numbers `number`: 0 or ENOENT (the kernel's answer). */
static int handle_of(struct numbers *t, uint32_t number, uint32_t *handle)
{
	pthread_mutex_lock(&t->lock);
	*handle = number < t->size ? t->at[number].handle : 0;
	pthread_mutex_unlock(&t->lock);
	return *handle ? 0 : ENOENT;
}

static int id_handle(uint32_t number, uint32_t *handle)
{
	return handle_of(&ids, number, handle);
}

/* Forget `number` of `t`; with `owned`, every join of the id `number` instead. */
static void forget(struct numbers *t, uint32_t number, int owned)
{
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < t->size; i++)
		if (owned ? t->at[i].handle && t->at[i].owner == number : i == number)
			t->at[i].handle = 0;
	pthread_mutex_unlock(&t->lock);
}

/* An id gone: its number and its joins'. */
static void forget_id(uint32_t number)
{
	forget(&joins, number, 1);
	forget(&ids, number, 0);
}

/* Forget `number` of `t` (an id with its joins). */
static void forget_number(struct numbers *t, uint32_t number)
{
	if (t == &ids)
		forget_id(number);
	else
		forget(t, number, 0);
}

/* The file `fd` closed: every id on it, with its joins. */
static void forget_file(int fd)
{
	pthread_mutex_lock(&ids.lock);
	for (uint32_t i = 0; i < ids.size; i++)
		if (ids.at[i].handle && ids.at[i].fd == fd) {
			forget(&joins, i, 1);
			ids.at[i].handle = 0;
		}
	pthread_mutex_unlock(&ids.lock);
}

/* --- addresses ------------------------------------------------------------------------ */

struct address {
	int none; /* AF_UNSPEC: no address given */
	char host[INET6_ADDRSTRLEN];
	int port;
};

/* A sockaddr of the program's as the NIC's (host, port): 0, EAFNOSUPPORT for AF_IB (pyroce's
 * CM speaks IP), EINVAL for another family or AF_UNSPEC where an address is needed. */
static int address_of(const void *sockaddr, int optional, struct address *out)
{
	sa_family_t family;
	const void *raw;

	memcpy(&family, sockaddr, sizeof(family));
	memset(out, 0, sizeof(*out));
	switch (family) {
	case AF_INET: {
		const struct sockaddr_in *in = sockaddr;
		raw = &in->sin_addr;
		out->port = ntohs(in->sin_port);
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *in6 = sockaddr;
		raw = &in6->sin6_addr;
		out->port = ntohs(in6->sin6_port);
		break;
	}
	case AF_UNSPEC:
		out->none = 1;
		return optional ? 0 : EINVAL;
	case AF_IB:
		return EAFNOSUPPORT;
	default:
		return EINVAL;
	}
	inet_ntop(family, raw, out->host, sizeof(out->host));
	return 0;
}

/* The NIC's (host, port) or None as a sockaddr in `out` (`size` bytes, zeroed first): its size. */
static size_t sockaddr_of(const struct pr_value *pair, void *out, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "";
	struct sockaddr_in in = {.sin_family = AF_INET};
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
	uint16_t port = htons((uint16_t)pr_u64(pr_item(pair, 1)));

	memset(out, 0, size);
	if (pr_text(pr_item(pair, 0), host, sizeof(host)))
		return 0;
	if (inet_pton(AF_INET, host, &in.sin_addr) == 1 && size >= sizeof(in)) {
		in.sin_port = port;
		memcpy(out, &in, sizeof(in));
		return sizeof(in);
	}
	if (inet_pton(AF_INET6, host, &in6.sin6_addr) == 1 && size >= sizeof(in6)) {
		in6.sin6_port = port;
		memcpy(out, &in6, sizeof(in6));
		return sizeof(in6);
	}
	return 0;
}

/* --- records ----------------------------------------------------------------------------- */

/* A struct member filled from the record field of the same name (an integer). */
struct member {
	const char *name;
	size_t offset, size;
};

#define MEMBER(type, field, name) {name, offsetof(type, field), sizeof(((type *)0)->field)}

/* Each member whose field the record has, in host order. */
static void fill(void *base, const struct member *members, size_t count, const struct pr_value *record)
{
	for (size_t i = 0; i < count; i++) {
		const struct pr_value *field = pr_field(record, members[i].name);
		uint64_t value = pr_u64(field);
		uint8_t *at = (uint8_t *)base + members[i].offset;
		if (!field)
			continue;
		switch (members[i].size) {
		case 1:
			*at = (uint8_t)value;
			break;
		case 2:
			*(uint16_t *)at = (uint16_t)value;
			break;
		default:
			*(uint32_t *)at = (uint32_t)value;
		}
	}
}

/* private data: up to `size` bytes of the record's, and its length */
static void private_data(const struct pr_value *record, uint8_t *out, size_t size, uint8_t *length)
{
	const struct pr_value *data = pr_field(record, "private_data");

	*length = data && data->tag == 'b' ? (uint8_t)(data->count < size ? data->count : size) : 0;
	if (*length)
		memcpy(out, data->bytes, *length);
}

/* pyroce.cm.records.AhValues as the kernel's ib_uverbs_ah_attr */
static void ah_attr_of(const struct pr_value *ah, struct ib_uverbs_ah_attr *out)
{
	static const struct member members[] = {
		MEMBER(struct ib_uverbs_ah_attr, grh.flow_label, "flow_label"),
		MEMBER(struct ib_uverbs_ah_attr, grh.sgid_index, "sgid_index"),
		MEMBER(struct ib_uverbs_ah_attr, grh.hop_limit, "hop_limit"),
		MEMBER(struct ib_uverbs_ah_attr, grh.traffic_class, "traffic_class"),
		MEMBER(struct ib_uverbs_ah_attr, dlid, "dlid"),
		MEMBER(struct ib_uverbs_ah_attr, sl, "sl"),
		MEMBER(struct ib_uverbs_ah_attr, is_global, "is_global"),
		MEMBER(struct ib_uverbs_ah_attr, port_num, "port_num"),
	};

	fill(out, members, COUNT(members), ah);
	pr_bytes(pr_field(ah, "dgid"), out->grh.dgid, sizeof(out->grh.dgid));
}

/* ConnParam as rdma_ucm_conn_param */
static void conn_of(const struct pr_value *conn, struct rdma_ucm_conn_param *out)
{
	static const struct member members[] = {
		MEMBER(struct rdma_ucm_conn_param, qp_num, "qp_num"),
		MEMBER(struct rdma_ucm_conn_param, srq, "srq"),
		MEMBER(struct rdma_ucm_conn_param, responder_resources, "responder_resources"),
		MEMBER(struct rdma_ucm_conn_param, initiator_depth, "initiator_depth"),
		MEMBER(struct rdma_ucm_conn_param, flow_control, "flow_control"),
		MEMBER(struct rdma_ucm_conn_param, retry_count, "retry_count"),
		MEMBER(struct rdma_ucm_conn_param, rnr_retry_count, "rnr_retry_count"),
	};

	fill(out, members, COUNT(members), conn);
	private_data(conn, out->private_data, sizeof(out->private_data), &out->private_data_len);
}

/* UdParam as rdma_ucm_ud_param */
static void ud_of(const struct pr_value *ud, struct rdma_ucm_ud_param *out)
{
	static const struct member members[] = {
		MEMBER(struct rdma_ucm_ud_param, qp_num, "qp_num"),
		MEMBER(struct rdma_ucm_ud_param, qkey, "qkey"),
	};

	fill(out, members, COUNT(members), ud);
	ah_attr_of(pr_field(ud, "ah"), &out->ah_attr);
	private_data(ud, out->private_data, sizeof(out->private_data), &out->private_data_len);
}

/* PathValues as the kernel's ib_user_path_rec (network order where it has it) */
static void path_of(const struct pr_value *path, struct ib_user_path_rec *out)
{
	static const struct member members[] = {
		MEMBER(struct ib_user_path_rec, flow_label, "flow_label"),
		MEMBER(struct ib_user_path_rec, reversible, "reversible"),
		MEMBER(struct ib_user_path_rec, mtu, "mtu"),
		MEMBER(struct ib_user_path_rec, pkey, "pkey"),
		MEMBER(struct ib_user_path_rec, hop_limit, "hop_limit"),
		MEMBER(struct ib_user_path_rec, traffic_class, "traffic_class"),
		MEMBER(struct ib_user_path_rec, numb_path, "numb_path"),
		MEMBER(struct ib_user_path_rec, sl, "sl"),
		MEMBER(struct ib_user_path_rec, rate, "rate"),
		MEMBER(struct ib_user_path_rec, packet_life_time, "packet_life_time"),
	};

	fill(out, members, COUNT(members), path);
	out->flow_label = htobe32(out->flow_label);
	out->pkey = htobe16(out->pkey);
	out->mtu_selector = out->rate_selector = out->packet_life_time_selector = IB_SA_EQ;
	pr_bytes(pr_field(path, "dgid"), out->dgid, sizeof(out->dgid));
	pr_bytes(pr_field(path, "sgid"), out->sgid, sizeof(out->sgid));
}

/* --- commands --------------------------------------------------------------------------- */

struct request {
	int fd;
	const struct pr_cm_file *file;
	const char *verb;  /* librdmacm's function, for PYROCE_VERBOSE */
	uint32_t out;      /* the room the program gave the answer (the header's `out`) */
};

/* The file's command `name` (the file's handle first, then `format`'s arguments). */
#define ASK(answer, r, name, format, ...)                                                                            \
	pr_command_on(answer, (r)->file->epoch, (r)->verb, name, "h" format, (r)->file->handle, ##__VA_ARGS__)

/* ASK for a command whose answer is none, or one number (`count`, may be NULL). */
#define ASK_NUMBER(count, r, name, format, ...)                                                                      \
	({                                                                                                           \
		struct pr_answer answer_;                                                                            \
		int error_ = ASK(&answer_, r, name, format, __VA_ARGS__);                                           \
		uint32_t *count_ = (count);                                                                          \
		if (!error_ && count_)                                                                               \
			error_ = pr_unpack(&answer_, "I", count_);                                                  \
		if (!error_)                                                                                         \
			pr_answer_free(&answer_);                                                                    \
		error_;                                                                                              \
	})

/* A refusal of the file's own, said with PYROCE_VERBOSE=1 as the NIC's are. */
static int refuse(const struct request *r, int error, const char *why)
{
	if (pr_verbose())
		fprintf(stderr, "pyroce: %s: %s\n", r->verb, why);
	return error;
}

/* The new id or join the NIC answered (a handle), numbered in `t` and written to `response` as
 * rdma_ucm_create_id_resp; one the program cannot be told of goes again (`undo`), as the
 * kernel's does. */
static int numbered(const struct request *r, struct pr_answer *answer, struct numbers *t, uint32_t owner,
		    uint64_t response, const char *undo)
{
	struct rdma_ucm_create_id_resp resp = {0};
	uint32_t handle;
	int error = pr_unpack(answer, "h", &handle);

	pr_answer_free(answer);
	if (error || (error = number_of(t, handle, r->fd, owner, &resp.id)) ||
	    !(error = copy_out(response, &resp, sizeof(resp))))
		return error;
	forget_number(t, resp.id);
	ASK_NUMBER(NULL, r, undo, "h", handle);
	return error;
}

static int create_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_create_id *cmd = in;
	struct pr_answer answer;
	int error;

	if (r->out < sizeof(struct rdma_ucm_create_id_resp))
		return ENOSPC;
	if ((error = ASK(&answer, r, "cm_create_id", "Kii", (unsigned long long)cmd->uid, (int)cmd->ps,
			 (int)cmd->qp_type)))
		return error;
	return numbered(r, &answer, &ids, 0, cmd->response, "cm_destroy_id");
}

/* DESTROY_ID, and LEAVE_MCAST (which names a join): `command` of what `t` numbers `cmd->id`,
 * the number of its events reported answered */
static int end_numbered(const struct request *r, const struct rdma_ucm_destroy_id *cmd, struct numbers *t,
			const char *command)
{
	struct rdma_ucm_destroy_id_resp resp = {0};
	uint32_t handle;
	int error;

	if (r->out < sizeof(resp))
		return ENOSPC;
	if ((error = handle_of(t, cmd->id, &handle)) ||
	    (error = ASK_NUMBER(&resp.events_reported, r, command, "h", handle)))
		return error;
	forget_number(t, cmd->id);
	return copy_out(cmd->response, &resp, sizeof(resp));
}

static int destroy_id(const struct request *r, const void *in)
{
	return end_numbered(r, in, &ids, "cm_destroy_id");
}

/* BIND_IP and BIND: cm_bind of the address */
static int bind_to(const struct request *r, uint32_t id, const void *sockaddr)
{
	struct address address;
	uint32_t handle;
	int error;

	if ((error = address_of(sockaddr, 0, &address)))
		return error == EAFNOSUPPORT ? refuse(r, error, "pyroce's rdma_cm binds IPv4 and IPv6 addresses") : error;
	if ((error = id_handle(id, &handle)))
		return error;
	return ASK_NUMBER(NULL, r, "cm_bind", "h(si)", handle, address.host, address.port);
}

static int bind_ip(const struct request *r, const void *in)
{
	const struct rdma_ucm_bind_ip *cmd = in;

	return bind_to(r, cmd->id, &cmd->addr);
}

static int bind_any(const struct request *r, const void *in)
{
	const struct rdma_ucm_bind *cmd = in;

	return bind_to(r, cmd->id, &cmd->addr);
}

/* RESOLVE_IP and RESOLVE_ADDR: cm_resolve_addr, the source None when the program gave none */
static int resolve(const struct request *r, uint32_t id, const void *src, const void *dst, uint32_t timeout_ms)
{
	struct address from, to;
	uint32_t handle;
	int error;

	if ((error = address_of(src, 1, &from)) || (error = address_of(dst, 0, &to)))
		return error == EAFNOSUPPORT ? refuse(r, error, "pyroce's rdma_cm resolves IPv4 and IPv6 addresses") : error;
	if ((error = id_handle(id, &handle)))
		return error;
	if (from.none)
		return ASK_NUMBER(NULL, r, "cm_resolve_addr", "hN(si)I", handle, to.host, to.port, timeout_ms);
	return ASK_NUMBER(NULL, r, "cm_resolve_addr", "h(si)(si)I", handle, from.host, from.port, to.host, to.port,
			  timeout_ms);
}

static int resolve_ip(const struct request *r, const void *in)
{
	const struct rdma_ucm_resolve_ip *cmd = in;

	return resolve(r, cmd->id, &cmd->src_addr, &cmd->dst_addr, cmd->timeout_ms);
}

static int resolve_addr(const struct request *r, const void *in)
{
	const struct rdma_ucm_resolve_addr *cmd = in;

	return resolve(r, cmd->id, &cmd->src_addr, &cmd->dst_addr, cmd->timeout_ms);
}

static int resolve_route(const struct request *r, const void *in)
{
	const struct rdma_ucm_resolve_route *cmd = in;
	uint32_t handle;
	int error = id_handle(cmd->id, &handle);

	return error ? error : ASK_NUMBER(NULL, r, "cm_resolve_route", "hI", handle, cmd->timeout_ms);
}

/* cm_query's CmRoute of the id, in `answer` (pr_answer_free it): 0 or the errno. */
static int route_of(const struct request *r, uint32_t id, struct pr_answer *answer)
{
	uint32_t handle;
	int error = id_handle(id, &handle);

	return error ? error : ASK(answer, r, "cm_query", "h", handle);
}

static int query_route(const struct request *r, const void *in)
{
	const struct rdma_ucm_query *cmd = in;
	struct rdma_ucm_query_route_resp resp = {0};
	struct pr_answer answer;
	int error;

	if (r->out < sizeof(resp))
		return ENOSPC;
	if ((error = route_of(r, cmd->id, &answer)))
		return error;
	const struct pr_value *route = answer.value, *paths = pr_field(route, "paths");
	resp.node_guid = htobe64(pr_u64(pr_field(route, "node_guid")));
	resp.port_num = (uint8_t)pr_u64(pr_field(route, "port_num"));
	resp.ibdev_index = (uint32_t)NO_DEVICE_INDEX;
	sockaddr_of(pr_field(route, "src"), &resp.src_addr, sizeof(resp.src_addr));
	sockaddr_of(pr_field(route, "dst"), &resp.dst_addr, sizeof(resp.dst_addr));
	for (uint32_t i = 0; paths && paths->tag == 'l' && i < paths->count && i < COUNT(resp.ib_route); i++)
		path_of(pr_item(paths, i), &resp.ib_route[resp.num_paths++]); /* resolved: as ucma_copy_iboe_route */
	if (!resp.num_paths) { /* not yet: the GIDs of the addresses and the default P_Key */
		pr_bytes(pr_field(route, "sgid"), resp.ib_route[0].sgid, sizeof(resp.ib_route[0].sgid));
		pr_bytes(pr_field(route, "dgid"), resp.ib_route[0].dgid, sizeof(resp.ib_route[0].dgid));
		resp.ib_route[0].pkey = htobe16((uint16_t)pr_u64(pr_field(route, "pkey")));
	}
	pr_answer_free(&answer);
	return copy_out(cmd->response, &resp, sizeof(resp));
}

/* QUERY: its address option (AF_IB's GID and path options are EOPNOTSUPP: no AF_IB here) */
static int query(const struct request *r, const void *in)
{
	const struct rdma_ucm_query *cmd = in;
	struct rdma_ucm_query_addr_resp resp = {0};
	struct pr_answer answer;
	int error;

	if (cmd->option != RDMA_USER_CM_QUERY_ADDR)
		return refuse(r, EOPNOTSUPP, "QUERY's GID and path options are AF_IB's, which pyroce's rdma_cm has not");
	if (r->out < sizeof(resp))
		return ENOSPC;
	if ((error = route_of(r, cmd->id, &answer)))
		return error;
	const struct pr_value *route = answer.value;
	resp.node_guid = htobe64(pr_u64(pr_field(route, "node_guid")));
	resp.port_num = (uint8_t)pr_u64(pr_field(route, "port_num"));
	resp.pkey = htobe16((uint16_t)pr_u64(pr_field(route, "pkey")));
	resp.ibdev_index = (uint32_t)NO_DEVICE_INDEX;
	resp.src_size = sockaddr_of(pr_field(route, "src"), &resp.src_addr, sizeof(resp.src_addr));
	resp.dst_size = sockaddr_of(pr_field(route, "dst"), &resp.dst_addr, sizeof(resp.dst_addr));
	pr_answer_free(&answer);
	return copy_out(cmd->response, &resp, sizeof(resp));
}

/* A ConnParam's mapping: the format's part and its arguments */
#define CONN_FORMAT "{yiiiiiii}"
#define CONN_ARGS(p)                                                                                                 \
	"private_data", (const void *)(p)->private_data, (size_t)(p)->private_data_len, "responder_resources",      \
		(int)(p)->responder_resources, "initiator_depth", (int)(p)->initiator_depth, "flow_control",          \
		(int)(p)->flow_control, "retry_count", (int)(p)->retry_count, "rnr_retry_count",                      \
		(int)(p)->rnr_retry_count, "srq", (int)(p)->srq, "qp_num", (int)(p)->qp_num

static int connect_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_connect *cmd = in;
	uint32_t handle;
	int error;

	if (!cmd->conn_param.valid)
		return EINVAL;
	if ((error = id_handle(cmd->id, &handle)))
		return error;
	return ASK_NUMBER(NULL, r, "cm_connect", "h" CONN_FORMAT, handle, CONN_ARGS(&cmd->conn_param));
}

static int listen_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_listen *cmd = in;
	uint32_t handle;
	int error = id_handle(cmd->id, &handle);

	return error ? error : ASK_NUMBER(NULL, r, "cm_listen", "hi", handle, (int)cmd->backlog);
}

/* ACCEPT: with parameters (the passive side's REP, the id's new uid), or without (librdmacm's
 * active side after CONNECT_RESPONSE: the RTU) */
static int accept_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_accept *cmd = in;
	uint32_t handle;
	int error;

	if ((error = id_handle(cmd->id, &handle)))
		return error;
	if (!cmd->conn_param.valid)
		return ASK_NUMBER(NULL, r, "cm_accept", "hNN", handle);
	return ASK_NUMBER(NULL, r, "cm_accept", "h" CONN_FORMAT "K", handle, CONN_ARGS(&cmd->conn_param),
			  (unsigned long long)cmd->uid);
}

static int reject_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_reject *cmd = in;
	uint32_t handle;
	int error = id_handle(cmd->id, &handle);

	if (error)
		return error;
	if (!cmd->reason) /* the CM's own: consumer defined */
		return ASK_NUMBER(NULL, r, "cm_reject", "hyN", handle, (const void *)cmd->private_data,
				  (size_t)cmd->private_data_len);
	return ASK_NUMBER(NULL, r, "cm_reject", "hyi", handle, (const void *)cmd->private_data,
			  (size_t)cmd->private_data_len, (int)cmd->reason);
}

static int disconnect_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_disconnect *cmd = in;
	uint32_t handle;
	int error = id_handle(cmd->id, &handle);

	return error ? error : ASK_NUMBER(NULL, r, "cm_disconnect", "h", handle);
}

static int init_qp_attr(const struct request *r, const void *in)
{
	static const struct member members[] = {
		MEMBER(struct ib_uverbs_qp_attr, qp_state, "qp_state"),
		MEMBER(struct ib_uverbs_qp_attr, qp_access_flags, "qp_access_flags"),
		MEMBER(struct ib_uverbs_qp_attr, pkey_index, "pkey_index"),
		MEMBER(struct ib_uverbs_qp_attr, port_num, "port_num"),
		MEMBER(struct ib_uverbs_qp_attr, qkey, "qkey"),
		MEMBER(struct ib_uverbs_qp_attr, path_mtu, "path_mtu"),
		MEMBER(struct ib_uverbs_qp_attr, dest_qp_num, "dest_qp_num"),
		MEMBER(struct ib_uverbs_qp_attr, rq_psn, "rq_psn"),
		MEMBER(struct ib_uverbs_qp_attr, max_dest_rd_atomic, "max_dest_rd_atomic"),
		MEMBER(struct ib_uverbs_qp_attr, min_rnr_timer, "min_rnr_timer"),
		MEMBER(struct ib_uverbs_qp_attr, sq_psn, "sq_psn"),
		MEMBER(struct ib_uverbs_qp_attr, timeout, "timeout"),
		MEMBER(struct ib_uverbs_qp_attr, retry_cnt, "retry_cnt"),
		MEMBER(struct ib_uverbs_qp_attr, rnr_retry, "rnr_retry"),
		MEMBER(struct ib_uverbs_qp_attr, max_rd_atomic, "max_rd_atomic"),
	};
	const struct rdma_ucm_init_qp_attr *cmd = in;
	struct ib_uverbs_qp_attr resp = {0};
	const struct pr_value *attrs;
	struct pr_answer answer;
	uint32_t handle;
	int error;

	if (r->out < sizeof(resp))
		return ENOSPC;
	if ((error = id_handle(cmd->id, &handle)) ||
	    (error = ASK(&answer, r, "cm_init_qp_attr", "hI", handle, cmd->qp_state)))
		return error;
	if (!(error = pr_unpack(&answer, "OI", &attrs, &resp.qp_attr_mask))) {
		fill(&resp, members, COUNT(members), attrs);
		const struct pr_value *ah = pr_field(attrs, "ah_attr");
		if (ah && ah->tag == 'r')
			ah_attr_of(ah, &resp.ah_attr);
	}
	pr_answer_free(&answer);
	return error ? error : copy_out(cmd->response, &resp, sizeof(resp));
}

/* The NIC's CmEvent (event, context, id, status, conn, ud, group) as rdma_ucm_event_resp: a
 * multicast event names its join (its number and uid), as ucma_create_uevent. */
static int event_of(const struct request *r, struct pr_answer *answer, struct rdma_ucm_event_resp *resp)
{
	const struct pr_value *conn, *ud, *group;
	uint32_t handle;
	int status, error;

	if ((error = pr_unpack(answer, "IKhiOOO", &resp->event, &resp->uid, &handle, &status, &conn, &ud, &group)))
		return error;
	if (group->tag == 'h')
		error = number_of(&joins, (uint32_t)pr_u64(group), r->fd, UINT32_MAX, &resp->id);
	else
		error = id_number(handle, r->fd, &resp->id);
	if (error)
		return error;
	resp->status = (uint32_t)status;
	if (conn->tag == 'r')
		conn_of(conn, &resp->param.conn);
	else if (ud->tag == 'r')
		ud_of(ud, &resp->param.ud);
	return 0;
}

/* GET_EVENT: the wait here, on the file's eventfd, as the kernel's waits (a signal ends it with
 * EINTR, a non-blocking file answers EAGAIN); then cm_get_event, which never waits (EAGAIN if
 * another thread took the event first: wait again). */
static int get_event(const struct request *r, const void *in)
{
	const size_t least = offsetof(struct rdma_ucm_event_resp, reserved); /* an older librdmacm's, without ECE */
	const struct rdma_ucm_get_event *cmd = in;
	struct rdma_ucm_event_resp resp = {0};
	struct pr_answer answer;
	int error;

	if (r->out < least)
		return ENOSPC;
	do {
		if (pr_wait_event(r->fd))
			return errno;
		error = ASK(&answer, r, "cm_get_event", "");
	} while (error == EAGAIN && !pr_nonblocking(r->fd));
	if (error)
		return error;
	error = event_of(r, &answer, &resp);
	pr_answer_free(&answer);
	return error ? error : copy_out(cmd->response, &resp, r->out < sizeof(resp) ? r->out : sizeof(resp));
}

#define MAX_OPTION 4096 /* bytes of an option's value: RDMA_OPTION_IB_PATH's records fit many times */

static int set_option(const struct request *r, const void *in)
{
	const struct rdma_ucm_set_option *cmd = in;
	uint8_t value[MAX_OPTION];
	uint32_t handle;
	int error;

	if (cmd->optlen > sizeof(value))
		return EINVAL;
	if ((error = id_handle(cmd->id, &handle)) || (error = copy_in(value, cmd->optval, cmd->optlen)))
		return error;
	return ASK_NUMBER(NULL, r, "cm_set_option", "hIIy", handle, cmd->level, cmd->optname, (const void *)value,
			  (size_t)cmd->optlen);
}

static int notify(const struct request *r, const void *in)
{
	const struct rdma_ucm_notify *cmd = in;
	uint32_t handle;
	int error = id_handle(cmd->id, &handle);

	return error ? error : ASK_NUMBER(NULL, r, "cm_notify", "hI", handle, cmd->event);
}

/* MIGRATE_ID, written to the file the id moves to; `fd` the file it is on */
static int migrate_id(const struct request *r, const void *in)
{
	const struct rdma_ucm_migrate_id *cmd = in;
	const struct pr_cm_file *from = pr_cm_file_of((int)cmd->fd);
	struct rdma_ucm_migrate_resp resp = {0};
	uint32_t handle, number;
	int error;

	if (r->out < sizeof(resp))
		return ENOSPC;
	if (!from)
		return fcntl((int)cmd->fd, F_GETFD) < 0 ? EBADF : EINVAL; /* not a file, or not this one */
	if ((error = id_handle(cmd->id, &handle)) ||
	    (error = ASK_NUMBER(&resp.events_reported, r, "cm_migrate_id", "hh", from->handle, handle)) ||
	    (error = id_number(handle, r->fd, &number)))
		return error;
	return copy_out(cmd->response, &resp, sizeof(resp));
}

/* JOIN_IP_MCAST and JOIN_MCAST: cm_join_multicast of the group's address, the join numbered
 * for the program (LEAVE_MCAST names it) */
static int join(const struct request *r, uint32_t id, uint64_t uid, const struct address *group,
		uint16_t join_flags, uint64_t response)
{
	struct pr_answer answer;
	uint32_t handle;
	int error;

	if ((error = id_handle(id, &handle)) ||
	    (error = ASK(&answer, r, "cm_join_multicast", "hsiK", handle, group->host, (int)join_flags,
			 (unsigned long long)uid)))
		return error;
	return numbered(r, &answer, &joins, id, response, "cm_leave_multicast");
}

/* the group's sockaddr as the NIC's address: AF_IB is EAFNOSUPPORT, another family EINVAL */
static int group_of(const struct request *r, const void *sockaddr, struct address *group)
{
	int error = address_of(sockaddr, 0, group);

	return error == EAFNOSUPPORT ? refuse(r, error, "pyroce's rdma_cm joins IPv4 and IPv6 groups") : error;
}

static int join_ip_mcast(const struct request *r, const void *in)
{
	const struct rdma_ucm_join_ip_mcast *cmd = in;
	struct address group;
	int error;

	if (r->out < sizeof(struct rdma_ucm_create_id_resp))
		return ENOSPC;
	if ((error = group_of(r, &cmd->addr, &group)))
		return error;
	return join(r, cmd->id, cmd->uid, &group, RDMA_MC_JOIN_FLAG_FULLMEMBER, cmd->response);
}

/* JOIN_MCAST: its address's size must be its family's (EINVAL), as ucma_process_join checks */
static int join_mcast(const struct request *r, const void *in)
{
	const struct rdma_ucm_join_mcast *cmd = in;
	struct address group;
	sa_family_t family;
	int error;

	if (r->out < sizeof(struct rdma_ucm_create_id_resp))
		return ENOSPC;
	if ((error = group_of(r, &cmd->addr, &group)))
		return error;
	memcpy(&family, &cmd->addr, sizeof(family));
	if (cmd->addr_size != (family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)))
		return EINVAL;
	return join(r, cmd->id, cmd->uid, &group, cmd->join_flags, cmd->response);
}

static int leave_mcast(const struct request *r, const void *in)
{
	return end_numbered(r, in, &joins, "cm_leave_multicast");
}

typedef int (*serve_fn)(const struct request *r, const void *in);

static const struct {
	serve_fn serve;
	size_t size; /* of the command after the header */
	const char *verb;
} commands[] = {
	[RDMA_USER_CM_CMD_CREATE_ID] = {create_id, sizeof(struct rdma_ucm_create_id), "rdma_create_id"},
	[RDMA_USER_CM_CMD_DESTROY_ID] = {destroy_id, sizeof(struct rdma_ucm_destroy_id), "rdma_destroy_id"},
	[RDMA_USER_CM_CMD_BIND_IP] = {bind_ip, sizeof(struct rdma_ucm_bind_ip), "rdma_bind_addr"},
	[RDMA_USER_CM_CMD_RESOLVE_IP] = {resolve_ip, sizeof(struct rdma_ucm_resolve_ip), "rdma_resolve_addr"},
	[RDMA_USER_CM_CMD_RESOLVE_ROUTE] = {resolve_route, sizeof(struct rdma_ucm_resolve_route),
					    "rdma_resolve_route"},
	[RDMA_USER_CM_CMD_QUERY_ROUTE] = {query_route, sizeof(struct rdma_ucm_query), "ucma_query_route"},
	[RDMA_USER_CM_CMD_CONNECT] = {connect_id, sizeof(struct rdma_ucm_connect), "rdma_connect"},
	[RDMA_USER_CM_CMD_LISTEN] = {listen_id, sizeof(struct rdma_ucm_listen), "rdma_listen"},
	[RDMA_USER_CM_CMD_ACCEPT] = {accept_id, sizeof(struct rdma_ucm_accept), "rdma_accept"},
	[RDMA_USER_CM_CMD_REJECT] = {reject_id, sizeof(struct rdma_ucm_reject), "rdma_reject"},
	[RDMA_USER_CM_CMD_DISCONNECT] = {disconnect_id, sizeof(struct rdma_ucm_disconnect), "rdma_disconnect"},
	[RDMA_USER_CM_CMD_INIT_QP_ATTR] = {init_qp_attr, sizeof(struct rdma_ucm_init_qp_attr), "rdma_init_qp_attr"},
	[RDMA_USER_CM_CMD_GET_EVENT] = {get_event, sizeof(struct rdma_ucm_get_event), "rdma_get_cm_event"},
	[RDMA_USER_CM_CMD_SET_OPTION] = {set_option, sizeof(struct rdma_ucm_set_option), "rdma_set_option"},
	[RDMA_USER_CM_CMD_NOTIFY] = {notify, sizeof(struct rdma_ucm_notify), "rdma_notify"},
	[RDMA_USER_CM_CMD_JOIN_IP_MCAST] = {join_ip_mcast, sizeof(struct rdma_ucm_join_ip_mcast),
					    "rdma_join_multicast"},
	[RDMA_USER_CM_CMD_LEAVE_MCAST] = {leave_mcast, sizeof(struct rdma_ucm_destroy_id), "rdma_leave_multicast"},
	[RDMA_USER_CM_CMD_MIGRATE_ID] = {migrate_id, sizeof(struct rdma_ucm_migrate_id), "rdma_migrate_id"},
	[RDMA_USER_CM_CMD_QUERY] = {query, sizeof(struct rdma_ucm_query), "ucma_query"},
	[RDMA_USER_CM_CMD_BIND] = {bind_any, sizeof(struct rdma_ucm_bind), "rdma_bind_addr"},
	[RDMA_USER_CM_CMD_RESOLVE_ADDR] = {resolve_addr, sizeof(struct rdma_ucm_resolve_addr), "rdma_resolve_addr"},
	[RDMA_USER_CM_CMD_JOIN_MCAST] = {join_mcast, sizeof(struct rdma_ucm_join_mcast), "rdma_join_multicast_ex"},
};

ssize_t pr_cm_write(int fd, const struct pr_cm_file *file, const void *buf, size_t len)
{
	struct rdma_ucm_cmd_hdr header;
	uint64_t command[64] = {0}; /* the largest command (CONNECT, ACCEPT, JOIN_MCAST) and more, aligned */
	int error;

	if (len < sizeof(header))
		error = EINVAL;
	else if ((error = copy_in(&header, (uintptr_t)buf, sizeof(header))))
		;
	else if (header.cmd >= COUNT(commands) || header.in + sizeof(header) > len)
		error = EINVAL;
	else if (!commands[header.cmd].serve) /* GET_OPTION: the kernel has none either */
		error = ENOSYS;
	else {
		size_t size = header.in < commands[header.cmd].size ? header.in : commands[header.cmd].size;
		struct request r = {.fd = fd, .file = file, .verb = commands[header.cmd].verb, .out = header.out};
		_Static_assert(sizeof(struct rdma_ucm_accept) <= sizeof(command) &&
				       sizeof(struct rdma_ucm_join_mcast) <= sizeof(command), "a command fits");
		error = copy_in(command, (uintptr_t)buf + sizeof(header), size);
		if (!error)
			error = commands[header.cmd].serve(&r, command);
	}
	if (error) {
		errno = error;
		return -1;
	}
	return (ssize_t)len;
}

int pr_cm_open(struct pr_cm_file *file, int flags)
{
	struct pr_answer answer;
	int fd = -1, error = pr_command_on(&answer, 0, "rdma_create_event_channel", "cm_open", "");

	if (error)
		return -1;
	error = pr_unpack(&answer, "hf", &file->handle, &fd);
	file->epoch = answer.epoch;
	pr_answer_free(&answer);
	if (error)
		return -1;
	if (!(flags & O_CLOEXEC)) /* received close-on-exec: as the program asked */
		fcntl(fd, F_SETFD, 0);
	if (flags & O_NONBLOCK)
		fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

void pr_cm_close(int fd, const struct pr_cm_file *file)
{
	struct pr_answer answer;

	forget_file(fd);
	if (!pr_command_on(&answer, file->epoch, "rdma_destroy_event_channel", "cm_close", "h", file->handle))
		pr_answer_free(&answer);
}
