/* One-line stubs of a provider library's direct verbs, by what the real function returns for a
 * device that is not its own (driver/providers.py's KINDS), errno set to EOPNOTSUPP: NULL, the
 * errno, its negative, -1, nothing, false. A stub takes no arguments: on x86-64 and aarch64 the
 * caller's arguments are in registers (or on its stack) it may ignore. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define STUB_EXPORT __attribute__((visibility("default")))
#define STUB_NULL(name) STUB_EXPORT void *name(void) { errno = EOPNOTSUPP; return NULL; }
#define STUB_ERRNO(name) STUB_EXPORT int name(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }
#define STUB_NEGATIVE(name) STUB_EXPORT int name(void) { errno = EOPNOTSUPP; return -EOPNOTSUPP; }
#define STUB_MINUS(name) STUB_EXPORT ssize_t name(void) { errno = EOPNOTSUPP; return -1; }
#define STUB_VOID(name) STUB_EXPORT void name(void) { errno = EOPNOTSUPP; }
#define STUB_FALSE(name) STUB_EXPORT bool name(void) { errno = EOPNOTSUPP; return false; }
