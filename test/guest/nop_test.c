// SPDX-License-Identifier: MIT
/*
 * nop_test: concurrent QCUDA_IOC_NOP round trips over every queue of
 * /dev/qcuda0. Each of T threads sends N NOPs, round robin over the queues,
 * each with a distinct cookie, and checks that the backend answered on the
 * queue it was sent to and echoed the cookie. Checks first that the device
 * speaks this build's protocol version. (NOPs need no session: a file that
 * only sends NOPs never opens one.)
 *
 *   nop_test [-t threads] [-n nops_per_thread] [-d device]
 *
 * Exit status: 0 all checks passed, 1 a check failed, 2 usage/setup error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

#define MAX_QUEUES 64
#define MAX_REPORTED 10 /* failures printed per thread */

struct worker {
	pthread_t tid;
	unsigned int id;
	unsigned long sent[MAX_QUEUES];
	unsigned long ok[MAX_QUEUES];
	unsigned long failures;
};

static int fd;
static unsigned int nthreads = 8, nops = 200, nqueues;

static void *run_worker(void *arg)
{
	struct worker *w = arg;
	unsigned int reported = 0;

	for (unsigned int i = 0; i < nops; i++) {
		unsigned int q = (w->id + i) % nqueues;
		uint64_t cookie = 0x9c0de00000000000ull ^ ((uint64_t)w->id << 32) ^ i;
		struct qcuda_nop nop = { .queue = q, .cookie = cookie };
		const char *what = NULL;
		char msg[160];

		w->sent[q]++;
		if (ioctl(fd, QCUDA_IOC_NOP, &nop) != 0)
			snprintf(msg, sizeof(msg), "ioctl: %s", strerror(errno)), what = msg;
		else if (nop.queue != q)
			snprintf(msg, sizeof(msg), "reply from queue %u", nop.queue), what = msg;
		else if (nop.cookie != cookie)
			snprintf(msg, sizeof(msg), "cookie echoed as %#" PRIx64, (uint64_t)nop.cookie), what = msg;

		if (!what) {
			w->ok[q]++;
			continue;
		}
		w->failures++;
		if (reported++ < MAX_REPORTED)
			fprintf(stderr, "nop_test: FAIL thread %u nop %u queue %u cookie %#" PRIx64 ": %s\n", w->id, i,
				q, cookie, what);
	}
	return NULL;
}

static unsigned int parse_count(const char *s, const char *opt)
{
	char *end;
	unsigned long v = strtoul(s, &end, 0);

	if (*s == '\0' || *end != '\0' || v == 0 || v > 1000000) {
		fprintf(stderr, "nop_test: bad value for %s: '%s'\n", opt, s);
		exit(2);
	}
	return (unsigned int)v;
}

int main(int argc, char **argv)
{
	const char *dev = "/dev/qcuda0";
	struct qcuda_info info;
	struct worker *workers;
	struct timespec t0, t1;
	unsigned long total_ok = 0, total_fail = 0;
	int opt;

	while ((opt = getopt(argc, argv, "t:n:d:h")) != -1) {
		switch (opt) {
		case 't':
			nthreads = parse_count(optarg, "-t");
			break;
		case 'n':
			nops = parse_count(optarg, "-n");
			break;
		case 'd':
			dev = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-t threads (8)] [-n nops per thread (200)] [-d device]\n", argv[0]);
			return 2;
		}
	}

	fd = open(dev, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "nop_test: FAIL cannot open %s: %s\n", dev, strerror(errno));
		return 2;
	}
	if (ioctl(fd, QCUDA_IOC_INFO, &info) != 0) {
		fprintf(stderr, "nop_test: FAIL QCUDA_IOC_INFO: %s\n", strerror(errno));
		return 2;
	}
	printf("device %s: %u queues, queue_size %u, vring_size %u, proto %u, capabilities %#" PRIx64
	       ", session %#" PRIx64 "\n",
	       dev, info.num_queues, info.queue_size, info.vring_size, info.proto_version, (uint64_t)info.capabilities,
	       (uint64_t)info.session);
	if (info.proto_version != QCUDA_PROTO_VERSION) {
		fprintf(stderr, "nop_test: FAIL protocol %u (want %u)\n", info.proto_version, QCUDA_PROTO_VERSION);
		return 1;
	}
	if (info.num_queues < 1 || info.num_queues > MAX_QUEUES) {
		fprintf(stderr, "nop_test: FAIL num_queues %u out of range 1..%u\n", info.num_queues, MAX_QUEUES);
		return 1;
	}
	nqueues = info.num_queues;

	workers = calloc(nthreads, sizeof(*workers));
	if (!workers) {
		perror("nop_test: calloc");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned int t = 0; t < nthreads; t++) {
		workers[t].id = t;
		int err = pthread_create(&workers[t].tid, NULL, run_worker, &workers[t]);
		if (err) {
			fprintf(stderr, "nop_test: FAIL pthread_create: %s\n", strerror(err));
			return 2;
		}
	}
	for (unsigned int t = 0; t < nthreads; t++)
		pthread_join(workers[t].tid, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%u threads x %u NOPs in %.3f s (%.0f NOP/s)\n", nthreads, nops, secs, nthreads * (double)nops / secs);
	for (unsigned int q = 0; q < nqueues; q++) {
		unsigned long sent = 0, ok = 0;

		for (unsigned int t = 0; t < nthreads; t++) {
			sent += workers[t].sent[q];
			ok += workers[t].ok[q];
		}
		printf("queue %u: sent %lu ok %lu\n", q, sent, ok);
		total_ok += ok;
	}
	for (unsigned int t = 0; t < nthreads; t++)
		total_fail += workers[t].failures;

	if (total_fail || total_ok != (unsigned long)nthreads * nops) {
		printf("nop_test: FAIL %lu of %lu NOPs failed\n", total_fail, (unsigned long)nthreads * nops);
		return 1;
	}
	printf("nop_test: PASS %lu NOPs\n", total_ok);
	return 0;
}
