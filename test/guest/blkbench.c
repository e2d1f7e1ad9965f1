// Disk benchmark for the guest (no CUDA): a block device read and written
// with O_DIRECT, so every request reaches the device (no page cache).
// 1 MiB sequential writes and reads, then 4 KiB random reads and writes
// from THREADS threads at once, each for SECONDS. Prints one JSON line:
// GB/s for the sequential parts, requests a second for the random ones.
//   blkbench DEVICE [SECONDS] [THREADS]
// The device's contents are overwritten.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <time.h>
#include <unistd.h>

#define BIG (1u << 20)
#define SMALL 4096u

static int fd;
static uint64_t disk_bytes;
static double seconds = 2;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "blkbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *aligned(size_t n)
{
	void *p;
	if (posix_memalign(&p, 4096, n))
		die("posix_memalign");
	memset(p, 0x5a, n);
	return p;
}

/* Bytes a second of 1 MiB requests in order, wrapping at the disk's end. */
static double sequential(int write)
{
	char *buf = aligned(BIG);
	uint64_t off = 0, done = 0;
	double t0 = now(), t;
	do {
		ssize_t n = write ? pwrite(fd, buf, BIG, off) : pread(fd, buf, BIG, off);
		if (n != (ssize_t)BIG)
			die(write ? "pwrite" : "pread");
		done += BIG;
		off = (off + BIG) % (disk_bytes - disk_bytes % BIG);
	} while ((t = now() - t0) < seconds);
	free(buf);
	return done / t;
}

struct worker {
	pthread_t thread;
	int write;
	unsigned seed;
	uint64_t requests;
};

static void *random_io(void *arg)
{
	struct worker *w = arg;
	char *buf = aligned(SMALL);
	uint64_t blocks = disk_bytes / SMALL;
	double t0 = now();
	while (now() - t0 < seconds) {
		uint64_t off = ((uint64_t)rand_r(&w->seed) << 16 ^ rand_r(&w->seed)) % blocks * SMALL;
		ssize_t n = w->write ? pwrite(fd, buf, SMALL, off) : pread(fd, buf, SMALL, off);
		if (n != (ssize_t)SMALL)
			die(w->write ? "pwrite" : "pread");
		w->requests++;
	}
	free(buf);
	return NULL;
}

/* Requests a second of 4 KiB at random offsets from `threads` threads. */
static double random_iops(int write, int threads)
{
	struct worker w[64];
	double t0 = now();
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){ .write = write, .seed = 1234u + i };
		if (pthread_create(&w[i].thread, NULL, random_io, &w[i]))
			die("pthread_create");
	}
	uint64_t total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].requests;
	}
	return total / (now() - t0);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: blkbench DEVICE [SECONDS] [THREADS]\n");
		return 2;
	}
	if (argc > 2)
		seconds = atof(argv[2]);
	int threads = argc > 3 ? atoi(argv[3]) : 4;
	if (threads < 1 || threads > 64)
		threads = 4;
	fd = open(argv[1], O_RDWR | O_DIRECT);
	if (fd < 0)
		die(argv[1]);
	struct stat st;
	if (ioctl(fd, BLKGETSIZE64, &disk_bytes) != 0) /* a file, for a try on the host */
		disk_bytes = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	if (disk_bytes < BIG) {
		fprintf(stderr, "blkbench: %s: not a disk or file of at least 1 MiB\n", argv[1]);
		return 1;
	}
	double w = sequential(1), r = sequential(0);
	double rr = random_iops(0, threads), rw = random_iops(1, threads);
	printf("{\"seq_write_GBps\":%.3f,\"seq_read_GBps\":%.3f,\"rand_read_iops\":%.0f,\"rand_write_iops\":%.0f,"
	       "\"threads\":%d}\n",
	       w / 1e9, r / 1e9, rr, rw, threads);
	return 0;
}
