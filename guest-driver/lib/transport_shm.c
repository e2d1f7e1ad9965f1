/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport (QCUDA_SHM=path): a region the backend created
 * and laid out (qcuda_shm.h) is mapped, claimed by this process and attached
 * (shm_attach.c): the backend then serves its data area as a vhost-user
 * frontend's memory and polls its rings. From there the path is the
 * userspace transport's (transport_user.c: slots, chunks, staging, pinned
 * memory carved from the region), with polling in place of eventfds.
 */
#include <errno.h>
#include <stdlib.h>

#include "shm_attach.h"
#include "transport_ops.h"
#include "vhu.h"

static struct shm_attach shm;

static int alive(void)
{
	return shm_alive(&shm);
}

/* At exit: the backend ends the session, and the region is free again. A
 * forked child has no mapping (qc_os_map_private_to_process) and nothing
 * to let go. */
static void detach(void)
{
	if (qc_os_pid() == shm.pid)
		shm_detach(&shm);
}

int qt_shm_open(const char *path, int *fd)
{
	const struct qcuda_shm_hdr *l = &shm.layout;
	int e = shm_attach(path, VHU_RING_SIZE, &shm);

	if (e)
		return e;
	qc_os_map_private_to_process(&shm.map);
	vhu_mem_use_file((int)shm.map.fd, shm.map.va + l->data_offset, l->data_gpa, l->data_offset, l->data_bytes);
	vhu_ring_use_polling(alive);
	if ((e = qt_user_start_polled(&shm.config))) {
		shm_detach(&shm);
		return e;
	}
	atexit(detach);
	*fd = (int)shm.map.fd;
	return 0;
}
