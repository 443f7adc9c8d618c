/* What the test programs here share: each prints "<what> <errno>" per verb (0: it worked), which
 * tests/test_c_driver.py reads. */
#ifndef PYROCE_TEST_REPORT_H
#define PYROCE_TEST_REPORT_H

#include <errno.h>
#include <stdio.h>

static inline void report(const char *what, int error)
{
	printf("%s %d\n", what, error);
}

/* The errno of a verb that returns an object, 0 if it returned one. */
static inline int null_errno(const void *object)
{
	return object ? 0 : errno;
}

#endif
