/* The shared NIC's place as the C library computes it (src/pyroce/driver/c/nic_place.c, built
 * with this file alone): "name <the abstract socket name without its leading NUL>", "folder ...",
 * "address ...", or "error <errno> <why>". tests/test_nic_place.py compares it with Python's. */
#include <stdio.h>

#include "nic_place.h"

int main(void)
{
	struct pr_place place;
	char why[512];
	int error = pr_nic_place(&place, why, sizeof(why));

	if (error) {
		printf("error %d %s\n", error, why);
		return 0;
	}
	printf("name %.*s\nfolder %s\naddress %s\n",
	       (int)(place.name_len - offsetof(struct sockaddr_un, sun_path) - 1), place.name.sun_path + 1,
	       place.folder, place.address);
	return 0;
}
