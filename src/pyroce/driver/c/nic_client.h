/* The C library's side of the shared NIC's command protocol (src/pyroce/nicd/protocol.py has the
 * reference: one message per SOCK_SEQPACKET datagram, a value of tagged little-endian parts, file
 * descriptors beside it with SCM_RIGHTS).
 *
 * One connection per process, made on the first command (the NIC started when none serves its
 * place: nic_place.c); one request and its answer at a time, under a mutex. A child of fork()
 * drops its copy and connects anew on its first command; its parent's objects are refused there
 * (EIO). Objects of the NIC are handles (uint32_t), numbered per connection.
 *
 * A command's arguments are written from a format, as Py_BuildValue's:
 *   h  a handle (unsigned int)            H  a handle, or None when 0 (unsigned int)
 *   i  an int                             I  an unsigned int
 *   L  a long long                        K  an unsigned long long (u above 2**63-1)
 *   s  text (const char *)                y  bytes (const void *, size_t)
 *   N  None (no argument)                 T / F  True / False (no argument)
 *   (...) a sequence                      {...} a mapping: each entry a key (const char *), then its value
 * The answer is a tree of pr_value, read with the accessors below or unpacked with pr_unpack.
 */
#ifndef PYROCE_NIC_CLIENT_H
#define PYROCE_NIC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#define PR_PROTOCOL 1
#define PR_MAX_MESSAGE (1 << 17) /* protocol.MAX_MESSAGE */
#define PR_MAX_FDS 8             /* protocol.MAX_FDS */

struct pr_value {
	char tag;               /* the protocol's: N T F i u b s l d r h a f */
	uint32_t count;         /* l, d, r: items; b, s: bytes */
	const char *key;        /* an item of d or r: its name, key_len bytes (not terminated) */
	uint32_t key_len;
	const char *kind;       /* r: the record's type name, kind_len bytes */
	uint32_t kind_len;
	union {
		int64_t i;              /* i */
		uint64_t u;             /* u; a: the address (the arena's base added); h: the handle */
		const uint8_t *bytes;   /* b, s */
		struct pr_value *items; /* l, d, r */
		uint32_t fd_index;      /* f: among the answer's descriptors */
	};
};

struct pr_answer {
	const struct pr_value *value; /* what ("ok", value) carried */
	unsigned int epoch;           /* the connection it came on */
	uint8_t *data;                /* the message (the values point into it) */
	struct pr_value *nodes;
	int fds[PR_MAX_FDS];          /* received with it; -1 once taken (pr_take_fd, pr_unpack) */
	unsigned int nfds;
};

struct pr_context;

/* What libpyroce_rdmacm.so (rdma_cm*.c) uses of this library: the program's one connection to the
 * NIC, shared with its verbs. Exported under the version node PYROCE_PRIVATE_1 (libibverbs.map);
 * everything else stays local. */
#define PR_SHARED __attribute__((visibility("default")))

/* Send `command` with the arguments `format` describes and wait for its answer. `ctx`: the
 * context the objects named belong to (NULL for none): a parent's after fork(), or one of a
 * connection the NIC closed, is EIO at once. 0 with `answer` filled (pr_answer_free it), or the
 * errno (also set in errno; with PYROCE_VERBOSE=1 "pyroce: <verb>: <why>" on stderr). */
int pr_command(struct pr_answer *answer, const struct pr_context *ctx, const char *verb, const char *command,
	       const char *format, ...);
/* pr_command for objects that are no verbs context's (libpyroce_rdmacm.so's): `epoch` is the
 * connection they were made on (an answer's), 0 for none; another connection (a child of fork(),
 * or the NIC closed it) is EIO at once, as for a context's. */
PR_SHARED int pr_command_on(struct pr_answer *answer, unsigned int epoch, const char *verb, const char *command,
			    const char *format, ...);
/* pr_command for a command whose answer is not needed: 0 or the errno. */
int pr_run(const struct pr_context *ctx, const char *verb, const char *command, const char *format, ...);
/* Free what the answer holds, closing the descriptors not taken. */
PR_SHARED void pr_answer_free(struct pr_answer *answer);

/* Unpack the answer's value: a sequence, one item per format character, or (one character) a
 * value alone. h: uint32_t *; I: uint32_t *; i: int *; K: uint64_t *; A: void ** (an arena
 * address); f: int * (a descriptor, the caller's from now); y: (void *, size_t) exactly that many
 * bytes; O: const struct pr_value ** (anything). 0, or EIO when the answer has another shape (then
 * nothing was taken). */
PR_SHARED int pr_unpack(struct pr_answer *answer, const char *format, ...);

PR_SHARED const struct pr_value *pr_field(const struct pr_value *value, const char *name); /* of d or r, else NULL */
PR_SHARED const struct pr_value *pr_item(const struct pr_value *value, uint32_t index);   /* of l, else NULL */
PR_SHARED uint64_t pr_u64(const struct pr_value *value); /* i, u, T, F, h, a as a number; 0 for NULL or another tag */
/* exactly `size` bytes of b into `out`: 0, else -1 */
PR_SHARED int pr_bytes(const struct pr_value *value, void *out, size_t size);
/* s into `out`, cut to `size` - 1 bytes and terminated: 0, else -1 */
PR_SHARED int pr_text(const struct pr_value *value, char *out, size_t size);
/* The descriptor of an f of the answer, the caller's from now: -1 if it is none */
int pr_take_fd(struct pr_answer *answer, const struct pr_value *value);

/* control.c: waiting on an event fd the NIC sent as a read(2) of the kernel's event file waits;
 * whether the program made it non-blocking. */
PR_SHARED int pr_wait_event(int fd);
PR_SHARED int pr_nonblocking(int fd);

/* PYROCE_VERBOSE is set (and not 0). */
PR_SHARED int pr_verbose(void);

#endif
