/* SPDX-License-Identifier: MIT */
/*
 * The socket transport's notifications for vhu_ring.c (Linux only): a
 * queue's kick and call eventfds, sent to the backend with its ring's
 * addresses; a kick; and a waiter's sleep on the call eventfd and the
 * socket, which closes when the backend dies. The shared-memory transport
 * has none of these: it polls (vhu_ring_use_polling).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vhu.h"

#define PAGE 4096u

int vhu_events_start(unsigned int q, uint8_t *va, int *kick, int *call)
{
	struct {
		uint32_t index, flags;
		uint64_t desc, used, avail, log;
	} addr = {
		.index = q,
		.desc = (uintptr_t)va,
		.avail = (uintptr_t)va + PAGE,
		.used = (uintptr_t)va + 2 * PAGE,
	};
	struct {
		uint32_t index, num;
	} st = { q, VHU_RING_SIZE };
	int e;

	*kick = eventfd(0, EFD_CLOEXEC);
	*call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (*kick < 0 || *call < 0)
		return -errno;
	if ((e = vhu_request(VHU_SET_VRING_NUM, &st, sizeof(st), -1, 0, NULL, 0)))
		return e;
	st.num = 0;
	if ((e = vhu_request(VHU_SET_VRING_BASE, &st, sizeof(st), -1, 0, NULL, 0)))
		return e;
	/* Ring addresses are this process's (QEMU's) virtual addresses. */
	if ((e = vhu_request(VHU_SET_VRING_ADDR, &addr, sizeof(addr), -1, 0, NULL, 0)))
		return e;
	if ((e = vhu_set_u64(VHU_SET_VRING_KICK, q, *kick)))
		return e;
	if ((e = vhu_set_u64(VHU_SET_VRING_CALL, q, *call)))
		return e;
	st.num = 1;
	return vhu_request(VHU_SET_VRING_ENABLE, &st, sizeof(st), -1, 0, NULL, 0);
}

int vhu_events_kick(int kick)
{
	uint64_t one = 1;

	return write(kick, &one, sizeof(one)) == sizeof(one) ? 0 : -errno;
}

/* Whether the socket says the backend is gone (closed, or an error). A
 * reply waiting there is another thread's (vhu_request). */
static int socket_gone(short revents)
{
	char c;

	if (revents & (POLLHUP | POLLERR))
		return 1;
	return (revents & POLLIN) && recv(vhu_conn_fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int vhu_events_sleep(int call)
{
	struct pollfd p[2] = { { call, POLLIN, 0 }, { vhu_conn_fd(), POLLIN, 0 } };
	int gone = poll(p, 2, 1000) > 0 && socket_gone(p[1].revents);
	uint64_t v;

	if (read(call, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing was signalled (a timeout, the socket) */
	}
	return gone;
}
