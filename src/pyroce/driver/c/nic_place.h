/* Where the shared NIC is found, and starting it when none serves there: what
 * src/pyroce/nicd/place.py and launch.py do, in C (tests/test_nic_place.py checks that the names
 * agree). Needs nothing but libc, so a test builds it alone. */
#ifndef PYROCE_NIC_PLACE_H
#define PYROCE_NIC_PLACE_H

#include <limits.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#define PR_DEVICE "pyroce0"           /* place.DEFAULT_DEVICE */
#define PR_DEFAULT_ADDRESS "127.0.0.1" /* place.DEFAULT_ADDRESS */

struct pr_place {
	char device[16];
	char address[64];        /* PYROCE_ADDR in its normal text form (Python's ipaddress), or 127.0.0.1 */
	char folder[PATH_MAX];   /* the stats folder: counters, the log */
	struct sockaddr_un name; /* the abstract socket the NIC listens at */
	socklen_t name_len;
};

/* The place this process's settings name (PYROCE_ADDR, PYROCE_STATS_DIR or the temporary
 * folder's pyroce-<uid>, made 0700 if missing): 0, or EINVAL for a bad PYROCE_ADDR (why in `why`). */
int pr_nic_place(struct pr_place *place, char *why, size_t size);

/* NicPlace.log_path: the NIC's log, in the folder; the length it needs, as snprintf. */
int pr_log_path(const struct pr_place *place, char *out, size_t size);

/* FNV-1a, 64 bits (place.fnv1a64). */
unsigned long long pr_fnv1a64(const void *data, size_t length);

/* Start the NIC of `place` (`$PYROCE_PYTHON -m pyroce nicd --background`) and wait until it
 * serves: 0 (it serves, or one another program started does), or EIO, with why in `why`. The
 * started NIC's one line is printed on stderr here. */
int pr_launch(const struct pr_place *place, char *why, size_t size);

#endif
