/* A program on pyroce's libibverbs.so.1 that has no interpreter in it: after opening the device
 * and using the verbs, no libpython is mapped (/proc/self/maps) and no Python symbol resolves.
 * A verb that fails (ibv_create_cq of 0 entries) says why on stderr only with PYROCE_VERBOSE=1.
 * With the argument "open-twice" it only opens the device twice (a NIC that cannot start). Each
 * line is "<what> <value>", read by tests/test_c_driver.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static int libpython_mapped(void)
{
	char line[4096];
	int found = 0;
	FILE *maps = fopen("/proc/self/maps", "r");

	if (!maps)
		return -1;
	while (fgets(line, sizeof(line), maps))
		found |= strstr(line, "libpython") != NULL;
	fclose(maps);
	return found;
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!list)
		return 1;
	if (argc > 1 && !strcmp(argv[1], "open-twice")) {
		for (int i = 0; i < 2; i++) {
			ctx = ibv_open_device(list[0]);
			report(i ? "open_second" : "open_first", null_errno(ctx));
			if (ctx)
				ibv_close_device(ctx);
		}
		ibv_free_device_list(list);
		return 0;
	}
	ctx = ibv_open_device(list[0]);
	report("open", null_errno(ctx));
	if (!ctx)
		return 1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	report("alloc_pd", null_errno(pd));
	struct ibv_cq *cq = ibv_create_cq(ctx, 0, NULL, NULL, 0);
	report("create_cq_zero", null_errno(cq));
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	report("create_cq", null_errno(cq));
	report("libpython_mapped", libpython_mapped());
	report("python_symbol", dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL);
	report("destroy_cq", ibv_destroy_cq(cq));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	ibv_free_device_list(list);
	return 0;
}
