/* SPDX-License-Identifier: MIT */
/*
 * The userspace transport's socket to the backend: vhost-user messages (a
 * 12-byte header, a payload, fds as SCM_RIGHTS), one at a time under a lock,
 * each waiting for its reply where one is due. See vhu.h.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vhu.h"

#define VHU_VERSION 0x1u
#define VHU_REPLY 0x4u
#define VHU_NEED_REPLY 0x8u
/* The largest reply payload we take: GET_CONFIG's 12 bytes and config. */
#define VHU_MAX_REPLY 512

struct vhu_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;
};

static int sock = -1;
static int acks; /* REPLY_ACK negotiated */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int vhu_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		int e = -errno;

		close(s);
		return e;
	}
	sock = s;
	return 0;
}

int vhu_conn_fd(void)
{
	return sock;
}

void vhu_conn_ack_on(void)
{
	acks = 1;
}

static int send_msg(const struct vhu_hdr *h, const void *payload, int fd)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)h, .iov_len = sizeof(*h) },
		{ .iov_base = (void *)payload, .iov_len = h->size },
	};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = h->size ? 2 : 1 };
	ssize_t n;

	if (fd >= 0) {
		struct cmsghdr *cm;

		memset(&c, 0, sizeof(c));
		m.msg_control = c.buf;
		m.msg_controllen = sizeof(c.buf);
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* A unix stream socket takes a message this small whole, or fails. */
	return (size_t)n == sizeof(*h) + h->size ? 0 : -EPROTO;
}

static int recv_all(void *p, size_t len)
{
	while (len) {
		ssize_t n = recv(sock, p, len, MSG_WAITALL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		p = (char *)p + n;
		len -= (size_t)n;
	}
	return 0;
}

/* The reply to req: its payload, up to len bytes, into buf (the rest read
 * and dropped). Replies carry no fds. */
static int recv_reply(enum vhu_req req, void *buf, uint32_t len, uint32_t *got)
{
	uint8_t payload[VHU_MAX_REPLY];
	struct vhu_hdr h;
	int r = recv_all(&h, sizeof(h));

	if (r)
		return r;
	if (h.request != (uint32_t)req || !(h.flags & VHU_REPLY) || h.size > sizeof(payload))
		return -EPROTO;
	r = recv_all(payload, h.size);
	if (r)
		return r;
	*got = h.size < len ? h.size : len;
	memcpy(buf, payload, *got);
	return 0;
}

int vhu_request(enum vhu_req req, const void *payload, uint32_t len, int fd, int want_reply, void *reply,
		uint32_t reply_len)
{
	struct vhu_hdr h = { .request = req, .flags = VHU_VERSION, .size = len };
	int ack = !want_reply && acks;
	uint64_t status = 0;
	uint32_t got = 0;
	int r;

	if (ack)
		h.flags |= VHU_NEED_REPLY;
	pthread_mutex_lock(&lock);
	r = send_msg(&h, payload, fd);
	if (!r && want_reply)
		r = recv_reply(req, reply, reply_len, &got);
	else if (!r && ack)
		r = recv_reply(req, &status, sizeof(status), &got);
	pthread_mutex_unlock(&lock);
	if (r)
		return r;
	if (want_reply && got < reply_len)
		return -EPROTO;
	return ack && (got != sizeof(status) || status) ? -EPROTO : 0;
}

int vhu_get_u64(enum vhu_req req, uint64_t *v)
{
	return vhu_request(req, NULL, 0, -1, 1, v, sizeof(*v));
}

int vhu_set_u64(enum vhu_req req, uint64_t v, int fd)
{
	return vhu_request(req, &v, sizeof(v), fd, 0, NULL, 0);
}
