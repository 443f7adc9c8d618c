/* The connection to the shared NIC and the protocol's values (nic_client.h): no interpreter, a
 * message each way per command.
 *
 * The connection is made on the first command: the NIC's place (nic_place.c), the NIC started
 * when none serves it, then ("hello", {"protocol": 1, "version": ..., "driver": <this library's
 * sources digest>}), whose answer carries the connection's shared memory (the arena: rings,
 * doorbell records, CQEs), mapped here; an `a` value of an answer is an offset in it, made an
 * address. A NIC built from other sources refuses the hello (EPROTO, one line). A connection
 * the NIC closed stays closed for the objects made on it (EIO); a command that names no object
 * (ibv_open_device) connects anew. In a child of fork() the connection and its mapping are
 * dropped (pthread_atfork) and the child's first command connects anew. */
#define _GNU_SOURCE
#include "nic_client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nic_place.h"
#include "pyroce_verbs.h"

#define CONNECT_TIMEOUT_S 10 /* client.CONNECT_TIMEOUT_S */
#define LOST "the shared NIC closed the connection (stopped, or crashed: see its log)"

static struct {
	pthread_mutex_t lock;
	int fd;               /* -1: none */
	unsigned int epoch;   /* one more for each connection made */
	uint8_t *arena;       /* the connection's shared memory, mapped here */
	size_t arena_size;
	uint8_t buffer[PR_MAX_MESSAGE]; /* the answer being received */
} conn = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* In a child of fork(): the parent's connection is the parent's (its socket copy closed, its
 * rings unmapped here); the first command connects anew. */
static void drop_in_child(void)
{
	pthread_mutex_init(&conn.lock, NULL);
	if (conn.fd >= 0)
		close(conn.fd);
	conn.fd = -1;
	if (conn.arena)
		munmap(conn.arena, conn.arena_size);
	conn.arena = NULL;
	conn.epoch++;
}

__attribute__((constructor)) static void watch_forks(void)
{
	pthread_atfork(NULL, NULL, drop_in_child);
}

int pr_verbose(void)
{
	const char *verbose = getenv("PYROCE_VERBOSE");

	return verbose && *verbose && strcmp(verbose, "0");
}

/* A reason the connection failed, on stderr once per reason (a program retrying is told once). */
static void tell(const char *why)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char told[512];

	pthread_mutex_lock(&lock);
	if (strncmp(told, why, sizeof(told) - 1)) {
		snprintf(told, sizeof(told), "%s", why);
		fprintf(stderr, "pyroce: %s\n", why);
	}
	pthread_mutex_unlock(&lock);
}

/* --- encoding ----------------------------------------------------------------------- */

struct writer {
	uint8_t *data;
	size_t used, size;
	int failed; /* out of memory, or over PR_MAX_MESSAGE */
};

static void put(struct writer *w, const void *bytes, size_t count)
{
	if (w->failed)
		return;
	if (w->used + count > w->size) {
		size_t size = w->size ? w->size : 256;
		while (size < w->used + count)
			size *= 2;
		uint8_t *data = size <= PR_MAX_MESSAGE ? realloc(w->data, size) : NULL;
		if (!data) {
			w->failed = 1;
			return;
		}
		w->data = data;
		w->size = size;
	}
	memcpy(w->data + w->used, bytes, count);
	w->used += count;
}

static void put_u32(struct writer *w, uint32_t value)
{
	uint8_t le[4] = {value, value >> 8, value >> 16, value >> 24};

	put(w, le, 4);
}

static void put_u64(struct writer *w, char tag, uint64_t value)
{
	uint8_t le[9] = {tag};

	for (int i = 0; i < 8; i++)
		le[1 + i] = value >> (8 * i);
	put(w, le, 9);
}

static void put_text(struct writer *w, char tag, const void *text, size_t length)
{
	if (tag)
		put(w, &tag, 1);
	put_u32(w, (uint32_t)length);
	put(w, text, length);
}

/* A count written later (a sequence's or mapping's items). */
static void patch_u32(struct writer *w, size_t at, uint32_t value)
{
	if (!w->failed)
		for (int i = 0; i < 4; i++)
			w->data[at + i] = value >> (8 * i);
}

static const char *encode_value(struct writer *w, const char *format, va_list *args);

/* Items up to `end` (each after its key in a mapping): where the format goes on. */
static const char *encode_items(struct writer *w, const char *format, va_list *args, char end, int mapping)
{
	size_t at = w->used;
	uint32_t count = 0;

	put_u32(w, 0);
	while (*format && *format != end) {
		if (mapping) {
			const char *key = va_arg(*args, const char *);
			put_text(w, 0, key, strlen(key));
		}
		format = encode_value(w, format, args);
		count++;
	}
	patch_u32(w, at, count);
	return *format ? format + 1 : format;
}

static const char *encode_value(struct writer *w, const char *format, va_list *args)
{
	char tag = *format++;

	switch (tag) {
	case 'h':
		put(w, "h", 1);
		put_u32(w, va_arg(*args, unsigned int));
		break;
	case 'H': {
		unsigned int handle = va_arg(*args, unsigned int);
		if (handle) {
			put(w, "h", 1);
			put_u32(w, handle);
		} else {
			put(w, "N", 1);
		}
		break;
	}
	case 'i':
		put_u64(w, 'i', (uint64_t)(int64_t)va_arg(*args, int));
		break;
	case 'I':
		put_u64(w, 'i', va_arg(*args, unsigned int));
		break;
	case 'L':
		put_u64(w, 'i', (uint64_t)va_arg(*args, long long));
		break;
	case 'K': {
		unsigned long long value = va_arg(*args, unsigned long long);
		put_u64(w, value >> 63 ? 'u' : 'i', value);
		break;
	}
	case 's': {
		const char *text = va_arg(*args, const char *);
		put_text(w, 's', text, strlen(text));
		break;
	}
	case 'y': {
		const void *bytes = va_arg(*args, const void *);
		put_text(w, 'b', bytes, va_arg(*args, size_t));
		break;
	}
	case 'N':
	case 'T':
	case 'F':
		put(w, &tag, 1);
		break;
	case '(':
		put(w, "l", 1);
		return encode_items(w, format, args, ')', 0);
	case '{':
		put(w, "d", 1);
		return encode_items(w, format, args, '}', 1);
	default:
		w->failed = 1; /* a format this file does not know: a bug here */
	}
	return format;
}

/* ("command", (arguments...)) */
static void encode_request(struct writer *w, const char *command, const char *format, va_list *args)
{
	put(w, "l", 1);
	put_u32(w, 2);
	put_text(w, 's', command, strlen(command));
	put(w, "l", 1);
	encode_items(w, format, args, 0, 0);
}

static void encode_requestf(struct writer *w, const char *command, const char *format, ...)
{
	va_list args;

	va_start(args, format);
	encode_request(w, command, format, &args);
	va_end(args);
}

/* --- decoding ----------------------------------------------------------------------- */

struct reader {
	const uint8_t *data;
	size_t at, size;
	unsigned int nfds;
	struct pr_value *nodes; /* NULL: only count them */
	size_t used;
};

static int take(struct reader *r, size_t count, const uint8_t **out)
{
	if (count > r->size - r->at)
		return -1;
	*out = r->data + r->at;
	r->at += count;
	return 0;
}

static int take_u32(struct reader *r, uint32_t *value)
{
	const uint8_t *le;

	if (take(r, 4, &le))
		return -1;
	*value = (uint32_t)le[0] | (uint32_t)le[1] << 8 | (uint32_t)le[2] << 16 | (uint32_t)le[3] << 24;
	return 0;
}

static int take_u64(struct reader *r, uint64_t *value)
{
	const uint8_t *le;

	if (take(r, 8, &le))
		return -1;
	*value = 0;
	for (int i = 7; i >= 0; i--)
		*value = *value << 8 | le[i];
	return 0;
}

static int take_text(struct reader *r, const uint8_t **text, uint32_t *length)
{
	return take_u32(r, length) || take(r, *length, text) ? -1 : 0;
}

static int read_value(struct reader *r, struct pr_value *out);

/* The items of l, d or r: a block of nodes, each filled in turn. */
static int read_items(struct reader *r, struct pr_value *out, int keyed)
{
	uint32_t count;

	if (take_u32(r, &count) || count > r->size - r->at) /* every item is a byte at least */
		return -1;
	struct pr_value *items = r->nodes ? r->nodes + r->used : NULL;
	r->used += count;
	if (out) {
		out->count = count;
		out->items = items;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct pr_value *item = items ? &items[i] : NULL;
		const uint8_t *key = NULL;
		uint32_t key_len = 0;
		if (keyed && take_text(r, &key, &key_len))
			return -1;
		if (read_value(r, item))
			return -1;
		if (item) {
			item->key = (const char *)key;
			item->key_len = key_len;
		}
	}
	return 0;
}

static int read_value(struct reader *r, struct pr_value *out)
{
	struct pr_value scratch, *value = out ? out : &scratch;
	const uint8_t *tag;
	uint32_t u32;

	memset(value, 0, sizeof(*value));
	if (take(r, 1, &tag))
		return -1;
	value->tag = (char)*tag;
	switch (value->tag) {
	case 'N':
	case 'T':
	case 'F':
		return 0;
	case 'i':
	case 'u':
		return take_u64(r, &value->u);
	case 'a':
		if (take_u64(r, &value->u) || value->u >= conn.arena_size)
			return -1;
		value->u += (uintptr_t)conn.arena;
		return 0;
	case 'h':
		if (take_u32(r, &u32))
			return -1;
		value->u = u32;
		return 0;
	case 'f':
		if (take_u32(r, &value->fd_index) || value->fd_index >= r->nfds)
			return -1;
		return 0;
	case 'b':
	case 's':
		return take_text(r, &value->bytes, &value->count);
	case 'l':
		return read_items(r, out, 0);
	case 'd':
		return read_items(r, out, 1);
	case 'r': {
		const uint8_t *kind;
		if (take_text(r, &kind, &value->kind_len))
			return -1;
		value->kind = (const char *)kind;
		return read_items(r, out, 1);
	}
	default:
		return -1;
	}
}

/* The message in `data` as a tree of nodes in `answer`: 0, or -1 if it does not decode. */
static int decode(struct pr_answer *answer, const uint8_t *data, size_t size)
{
	struct reader r = {.data = data, .size = size, .nfds = answer->nfds, .used = 1};

	if (read_value(&r, NULL) || r.at != size)
		return -1;
	answer->data = malloc(size ? size : 1);
	answer->nodes = calloc(r.used, sizeof(*answer->nodes));
	if (!answer->data || !answer->nodes)
		return -1;
	memcpy(answer->data, data, size);
	r = (struct reader){.data = answer->data, .size = size, .nfds = answer->nfds, .nodes = answer->nodes,
			    .used = 1};
	read_value(&r, answer->nodes);
	answer->value = answer->nodes;
	return 0;
}

/* --- accessors ---------------------------------------------------------------------- */

const struct pr_value *pr_field(const struct pr_value *value, const char *name)
{
	size_t length = strlen(name);

	if (!value || (value->tag != 'd' && value->tag != 'r'))
		return NULL;
	for (uint32_t i = 0; i < value->count; i++)
		if (value->items[i].key_len == length && !memcmp(value->items[i].key, name, length))
			return &value->items[i];
	return NULL;
}

const struct pr_value *pr_item(const struct pr_value *value, uint32_t index)
{
	return value && value->tag == 'l' && index < value->count ? &value->items[index] : NULL;
}

uint64_t pr_u64(const struct pr_value *value)
{
	if (!value)
		return 0;
	switch (value->tag) {
	case 'i':
	case 'u':
	case 'a':
	case 'h':
		return value->u;
	case 'T':
		return 1;
	default:
		return 0;
	}
}

int pr_bytes(const struct pr_value *value, void *out, size_t size)
{
	if (!value || value->tag != 'b' || value->count != size)
		return -1;
	memcpy(out, value->bytes, size);
	return 0;
}

int pr_text(const struct pr_value *value, char *out, size_t size)
{
	if (!value || value->tag != 's' || !size)
		return -1;
	snprintf(out, size, "%.*s", (int)value->count, (const char *)value->bytes);
	return 0;
}

int pr_take_fd(struct pr_answer *answer, const struct pr_value *value)
{
	int fd;

	if (!value || value->tag != 'f' || value->fd_index >= answer->nfds)
		return -1;
	fd = answer->fds[value->fd_index];
	answer->fds[value->fd_index] = -1;
	return fd;
}

static int integer_fits(const struct pr_value *value, int64_t low, int64_t high)
{
	if (!value || !strchr("iuTF", value->tag))
		return 0;
	if (value->tag == 'u')
		return high == INT64_MAX;
	int64_t number = value->tag == 'i' ? value->i : value->tag == 'T';
	return number >= low && number <= high;
}

/* One pass of pr_unpack: check only (store 0), or store. */
static int unpack(struct pr_answer *answer, const char *format, va_list args, int store)
{
	size_t count = strlen(format);
	const struct pr_value *whole = answer->value;

	if (count != 1 && (whole->tag != 'l' || whole->count != count))
		return EIO;
	for (size_t i = 0; i < count; i++) {
		const struct pr_value *value = count == 1 ? whole : &whole->items[i];
		void *out = va_arg(args, void *);
		switch (format[i]) {
		case 'h':
			if (value->tag != 'h')
				return EIO;
			if (store)
				*(uint32_t *)out = (uint32_t)value->u;
			break;
		case 'I':
			if (!integer_fits(value, 0, UINT32_MAX))
				return EIO;
			if (store)
				*(uint32_t *)out = (uint32_t)pr_u64(value);
			break;
		case 'i':
			if (!integer_fits(value, INT32_MIN, INT32_MAX))
				return EIO;
			if (store)
				*(int *)out = (int)(int64_t)pr_u64(value);
			break;
		case 'K':
			if (!integer_fits(value, INT64_MIN, INT64_MAX))
				return EIO;
			if (store)
				*(uint64_t *)out = pr_u64(value);
			break;
		case 'A':
			if (value->tag != 'a')
				return EIO;
			if (store)
				*(void **)out = (void *)(uintptr_t)value->u;
			break;
		case 'f':
			if (value->tag != 'f' || answer->fds[value->fd_index] < 0)
				return EIO;
			if (store)
				*(int *)out = pr_take_fd(answer, value);
			break;
		case 'y': {
			size_t size = va_arg(args, size_t);
			if (value->tag != 'b' || value->count != size)
				return EIO;
			if (store)
				memcpy(out, value->bytes, size);
			break;
		}
		case 'O':
			if (store)
				*(const struct pr_value **)out = value;
			break;
		default:
			return EIO;
		}
	}
	return 0;
}

int pr_unpack(struct pr_answer *answer, const char *format, ...)
{
	va_list args;
	int error;

	va_start(args, format);
	error = unpack(answer, format, args, 0);
	va_end(args);
	if (!error) {
		va_start(args, format);
		unpack(answer, format, args, 1);
		va_end(args);
	}
	if (error)
		errno = error;
	return error;
}

void pr_answer_free(struct pr_answer *answer)
{
	for (unsigned int i = 0; i < answer->nfds; i++)
		if (answer->fds[i] >= 0)
			close(answer->fds[i]);
	answer->nfds = 0;
	free(answer->data);
	free(answer->nodes);
	answer->data = NULL;
	answer->nodes = NULL;
	answer->value = NULL;
}

/* --- the connection ----------------------------------------------------------------- */

static void drop_connection(void)
{
	if (conn.fd >= 0)
		close(conn.fd);
	conn.fd = -1; /* the arena stays mapped: contexts made on it may still touch their rings */
}

/* One request on `fd` and its answer, decoded (the lock held): 0, or the errno with why. A
 * connection that fails here is dropped. */
static int exchange(int fd, const struct writer *request, struct pr_answer *answer, char *why, size_t size)
{
	struct iovec out = {.iov_base = request->data, .iov_len = request->used};
	struct msghdr message = {.msg_iov = &out, .msg_iovlen = 1};
	union {
		struct cmsghdr header;
		char space[CMSG_SPACE(PR_MAX_FDS * sizeof(int))];
	} control;
	ssize_t got;

	while ((got = sendmsg(fd, &message, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (got < 0) {
		snprintf(why, size, errno == EPIPE || errno == ECONNRESET ? LOST : "cannot send to the shared NIC: %s",
			 strerror(errno));
		return EIO;
	}
	struct iovec in = {.iov_base = conn.buffer, .iov_len = sizeof(conn.buffer)};
	message = (struct msghdr){.msg_iov = &in, .msg_iovlen = 1, .msg_control = control.space,
				  .msg_controllen = sizeof(control.space)};
	while ((got = recvmsg(fd, &message, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	for (struct cmsghdr *c = got >= 0 ? CMSG_FIRSTHDR(&message) : NULL; c; c = CMSG_NXTHDR(&message, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count; i++) {
			int received;
			memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (answer->nfds < PR_MAX_FDS)
				answer->fds[answer->nfds++] = received;
			else
				close(received);
		}
	}
	if (got <= 0) {
		snprintf(why, size, got == 0 || errno == ECONNRESET ? LOST : "cannot receive from the shared NIC: %s",
			 strerror(errno));
		return EIO;
	}
	if (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC) || decode(answer, conn.buffer, (size_t)got)) {
		snprintf(why, size, "the shared NIC's answer does not decode: is it another pyroce's?");
		return EIO;
	}
	return 0;
}

/* ("ok", value) or ("err", errno, message) into the answer's value, or the errno: 0, an errno
 * with its message in why, or -1 for a malformed answer. */
static int outcome(struct pr_answer *answer, char *why, size_t size)
{
	const struct pr_value *whole = answer->value, *status = pr_item(whole, 0);

	if (!status || status->tag != 's')
		return -1;
	if (status->count == 2 && !memcmp(status->bytes, "ok", 2) && whole->count == 2) {
		answer->value = pr_item(whole, 1);
		return 0;
	}
	const struct pr_value *code = pr_item(whole, 1), *text = pr_item(whole, 2);
	if (status->count != 3 || memcmp(status->bytes, "err", 3) || whole->count != 3 || !integer_fits(code, 1, 4095))
		return -1;
	if (pr_text(text, why, size))
		snprintf(why, size, "%s", strerror((int)code->i));
	return (int)code->i;
}

/* ("hello", ({"protocol", "version", "driver"},)) on a new connection, then the arena mapped:
 * 0, or the errno with why. */
static int greet(int fd, char *why, size_t size)
{
	struct writer request = {0};
	struct pr_answer answer = {0};
	int error, arena_fd;
	uint64_t arena_size;

	encode_requestf(&request, "hello", "{iss}", "protocol", PR_PROTOCOL, "version", PYROCE_VERSION, "driver",
			PYROCE_SOURCES_DIGEST);
	error = request.failed ? ENOMEM : exchange(fd, &request, &answer, why, size);
	free(request.data);
	if (!error && (error = outcome(&answer, why, size)) < 0) {
		snprintf(why, size, "the shared NIC's answer to hello does not decode: is it another pyroce's?");
		error = EIO;
	}
	if (!error) {
		arena_fd = pr_take_fd(&answer, pr_field(answer.value, "arena"));
		arena_size = pr_u64(pr_field(answer.value, "arena_size"));
		void *arena = arena_fd >= 0 && arena_size ? mmap(NULL, arena_size, PROT_READ | PROT_WRITE, MAP_SHARED,
								  arena_fd, 0)
							    : MAP_FAILED;
		if (arena == MAP_FAILED) {
			snprintf(why, size, "cannot map the shared NIC's memory: %s",
				 arena_fd < 0 ? "the NIC sent none" : strerror(errno));
			error = EIO;
		} else {
			conn.arena = arena;
			conn.arena_size = arena_size;
		}
		if (arena_fd >= 0)
			close(arena_fd);
	}
	pr_answer_free(&answer);
	return error;
}

static double now_s(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec + now.tv_nsec / 1e9;
}

/* A connection to the NIC of this process's place, started first if none serves it, greeted
 * (the lock held): 0, or the errno with why. */
static int connect_nic(char *why, size_t size)
{
	struct pr_place place;
	double deadline = now_s() + CONNECT_TIMEOUT_S;
	int started = 0, fd, error = pr_nic_place(&place, why, size);

	if (error)
		return error;
	for (;;) {
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			error = errno;
			snprintf(why, size, "cannot reach the shared NIC: %s", strerror(error));
			return error;
		}
		if (!connect(fd, (struct sockaddr *)&place.name, place.name_len))
			break;
		error = errno;
		close(fd);
		if (error == EINTR)
			continue;
		if (error != ECONNREFUSED && error != ENOENT) {
			snprintf(why, size, "cannot reach the shared NIC %s on %s: %s", place.device, place.address,
				 strerror(error));
			return error;
		}
		if (!started) {
			if ((error = pr_launch(&place, why, size)))
				return error;
			started = 1;
		} else if (now_s() > deadline) {
			char log[PATH_MAX + 128];
			pr_log_path(&place, log, sizeof(log));
			if (snprintf(why, size, "the shared NIC for %s on %s did not start: see %s", place.device,
				     place.address, log) >= (int)size)
				why[size - 2] = '.'; /* cut short */
			return ETIMEDOUT;
		}
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
	conn.arena = NULL; /* an arena of a connection the NIC closed stays mapped for its rings */
	if ((error = greet(fd, why, size))) {
		close(fd);
		return error;
	}
	conn.fd = fd;
	conn.epoch++;
	return 0;
}

static int failed(const char *verb, int error, const char *why, int connecting)
{
	if (connecting)
		tell(why); /* the NIC cannot be reached or started: always said, once */
	else if (pr_verbose() || strstr(why, "internal error"))
		fprintf(stderr, "pyroce: %s: %s\n", verb, why);
	errno = error;
	return error;
}

/* The command on the connection `epoch` (0: any, made if there is none). */
static int vcommand(struct pr_answer *answer, unsigned int epoch, const char *verb, const char *command,
		    const char *format, va_list *args)
{
	struct writer request = {0};
	char why[512];
	int error, connecting = 0;

	memset(answer, 0, sizeof(*answer));
	encode_request(&request, command, format, args);
	if (request.failed) {
		free(request.data);
		snprintf(why, sizeof(why), "%s: out of memory", command);
		return failed(verb, ENOMEM, why, 0);
	}
	pthread_mutex_lock(&conn.lock);
	if (epoch && (epoch != conn.epoch || conn.fd < 0)) {
		snprintf(why, sizeof(why), LOST);
		error = EIO;
	} else if (conn.fd < 0 && (error = connect_nic(why, sizeof(why)))) {
		connecting = 1;
	} else if ((error = exchange(conn.fd, &request, answer, why, sizeof(why)))) {
		drop_connection();
	}
	answer->epoch = conn.epoch;
	pthread_mutex_unlock(&conn.lock);
	free(request.data);
	if (!error && (error = outcome(answer, why, sizeof(why))) < 0) {
		snprintf(why, sizeof(why), "%s: the shared NIC's answer does not decode", command);
		error = EIO;
	}
	if (error) {
		pr_answer_free(answer);
		return failed(verb, error, why, connecting);
	}
	return 0;
}

/* A context's objects: a child of fork() is told once (pr_stale), then EIO. */
static int stale(struct pr_answer *answer, const struct pr_context *ctx)
{
	int error = ctx ? pr_stale(ctx) : 0;

	memset(answer, 0, sizeof(*answer));
	if (error)
		errno = error;
	return error;
}

int pr_command(struct pr_answer *answer, const struct pr_context *ctx, const char *verb, const char *command,
	       const char *format, ...)
{
	va_list args;
	int error = stale(answer, ctx);

	if (error)
		return error;
	va_start(args, format);
	error = vcommand(answer, ctx ? ctx->epoch : 0, verb, command, format, &args);
	va_end(args);
	return error;
}

int pr_command_on(struct pr_answer *answer, unsigned int epoch, const char *verb, const char *command,
		  const char *format, ...)
{
	va_list args;
	int error;

	va_start(args, format);
	error = vcommand(answer, epoch, verb, command, format, &args);
	va_end(args);
	return error;
}

int pr_run(const struct pr_context *ctx, const char *verb, const char *command, const char *format, ...)
{
	struct pr_answer answer;
	va_list args;
	int error = stale(&answer, ctx);

	if (error)
		return error;
	va_start(args, format);
	error = vcommand(&answer, ctx ? ctx->epoch : 0, verb, command, format, &args);
	va_end(args);
	if (!error)
		pr_answer_free(&answer);
	else
		errno = error;
	return error;
}
