/* The rdma_cm file written to as librdmacm writes it (ucma commands, <rdma/rdma_user_cm.h>),
 * for what librdmacm never asks: short and unknown commands, no room for an answer, a file
 * made non-blocking, read(2). Run under `pyroce run` with the NIC's address; each line says
 * what a step got (tests/test_rdmacm_programs.py reads them). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define IBV_QPT_RC 2
#define GET_OPTION 13 /* RDMA_USER_CM_CMD_GET_OPTION: a command the kernel has no handler for */

static int fd;

/* One command: the header, then `size` bytes of `cmd`; the answer's room `out`. */
static int command(uint32_t op, void *cmd, size_t size, uint16_t out)
{
	uint8_t buffer[sizeof(struct rdma_ucm_cmd_hdr) + 512];
	struct rdma_ucm_cmd_hdr header = {.cmd = op, .in = (uint16_t)size, .out = out};

	memcpy(buffer, &header, sizeof(header));
	memcpy(buffer + sizeof(header), cmd, size);
	return write(fd, buffer, sizeof(header) + size) == (ssize_t)(sizeof(header) + size) ? 0 : -1;
}

static void say(const char *what, int ret)
{
	printf("%s: %s\n", what, ret ? strerror(errno) : "ok");
}

int main(int argc, char **argv)
{
	struct rdma_ucm_create_id_resp created;
	struct rdma_ucm_create_id create = {.uid = 42, .response = (uintptr_t)&created, .ps = RDMA_PS_TCP,
					    .qp_type = IBV_QPT_RC};
	struct rdma_ucm_query_route_resp route;
	struct rdma_ucm_event_resp event;
	struct rdma_ucm_destroy_id_resp destroyed;
	struct rdma_ucm_cmd_hdr unknown = {.cmd = 99};
	struct stat st;
	char byte;

	if (argc != 2) {
		fprintf(stderr, "usage: rdma_cm_file ADDRESS\n");
		return 2;
	}
	fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	printf("fstat: %s\n", !fstat(fd, &st) && S_ISCHR(st.st_mode) ? "character device" : "not one");
	say("short write", write(fd, "ab", 2) < 0 ? -1 : 0);
	say("unknown command", write(fd, &unknown, sizeof(unknown)) < 0 ? -1 : 0);
	say("get_option", command(GET_OPTION, &unknown, 0, 0));
	say("read", read(fd, &byte, 1) < 0 ? -1 : 0);
	if (command(RDMA_USER_CM_CMD_CREATE_ID, &create, sizeof(create), sizeof(created))) {
		say("create_id", -1);
		return 1;
	}
	printf("create_id: id %u\n", created.id);

	struct rdma_ucm_bind bind = {.id = created.id, .addr_size = 48};
	bind.addr.ss_family = AF_IB;
	say("af_ib bind", command(RDMA_USER_CM_CMD_BIND, &bind, sizeof(bind), 0));

	struct rdma_ucm_query query = {.response = (uintptr_t)&route, .id = created.id};
	say("no room for the answer", command(RDMA_USER_CM_CMD_QUERY_ROUTE, &query, sizeof(query), 4));

	struct rdma_ucm_get_event get = {.response = (uintptr_t)&event};
	fcntl(fd, F_SETFL, O_NONBLOCK);
	say("nonblocking get_event", command(RDMA_USER_CM_CMD_GET_EVENT, &get, sizeof(get), sizeof(event)));

	struct rdma_ucm_resolve_ip resolve = {.id = created.id, .timeout_ms = 2000};
	resolve.dst_addr.sin6_family = AF_INET; /* a sockaddr_in in the sockaddr_in6's room, as librdmacm writes it */
	struct sockaddr_in *dst = (struct sockaddr_in *)&resolve.dst_addr;
	dst->sin_port = htons(7999);
	inet_pton(AF_INET, argv[1], &dst->sin_addr);
	say("resolve_ip", command(RDMA_USER_CM_CMD_RESOLVE_IP, &resolve, sizeof(resolve), 0));

	struct pollfd readable = {.fd = fd, .events = POLLIN};
	printf("poll: %s\n", poll(&readable, 1, 10000) == 1 && readable.revents & POLLIN ? "readable" : "not readable");
	if (command(RDMA_USER_CM_CMD_GET_EVENT, &get, sizeof(get), sizeof(event))) {
		say("get_event", -1);
		return 1;
	}
	printf("get_event: %s status %d uid %llu id %u\n", event.event == 0 ? "ADDR_RESOLVED" : "another",
	       (int)event.status, (unsigned long long)event.uid, event.id);

	struct rdma_ucm_destroy_id destroy = {.response = (uintptr_t)&destroyed, .id = created.id};
	if (command(RDMA_USER_CM_CMD_DESTROY_ID, &destroy, sizeof(destroy), sizeof(destroyed))) {
		say("destroy_id", -1);
		return 1;
	}
	printf("destroy_id: %u events reported\n", destroyed.events_reported);
	say("destroy_id again", command(RDMA_USER_CM_CMD_DESTROY_ID, &destroy, sizeof(destroy), sizeof(destroyed)));
	return close(fd) ? 1 : 0;
}
