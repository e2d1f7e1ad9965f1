// Copy and call-latency benchmark that runs unchanged natively (NVIDIA's
// runtime) and in a qcuda guest (built with -cudart=shared), so the two
// figures come from the same program in the same GPU run. Prints one JSON
// line: bandwidths in GB/s (best of 5), latencies in microseconds (median).
// `copy_bench blk` instead gives the GPU disk's limit: pinned copies of its
// request sizes (1 MiB, 4 KiB) one after another for a second each, as GB/s
// and copies a second.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                 \
	do {                                                                     \
		cudaError_t e_ = (x);                                            \
		if (e_ != cudaSuccess) {                                         \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                                 \
		}                                                                \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double bandwidth(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
	double best = 1e9;
	CHECK(cudaMemcpy(dst, src, n, kind));
	for (int i = 0; i < 5; i++) {
		double t0 = now();
		CHECK(cudaMemcpy(dst, src, n, kind));
		double t = now() - t0;
		if (t < best)
			best = t;
	}
	return n / best / 1e9;
}

#define REPS 2000
static double lat_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
	static double t[REPS];
	for (int i = 0; i < REPS; i++) {
		double t0 = now();
		if (kind == (cudaMemcpyKind)-1)
			CHECK(cudaDeviceSynchronize());
		else
			CHECK(cudaMemcpy(dst, src, n, kind));
		t[i] = (now() - t0) * 1e6;
	}
	qsort(t, REPS, sizeof(double), cmp);
	return t[REPS / 2];
}

/* Copies of n bytes from (or to) pinned memory at consecutive offsets of a 256 MiB buffer for a second. */
static double copies_per_second(char *dev, char *pinned, size_t n, cudaMemcpyKind kind)
{
	const size_t span = 256u << 20;
	size_t off = 0, count = 0;
	double t0 = now(), t;
	do {
		if (kind == cudaMemcpyHostToDevice)
			CHECK(cudaMemcpy(dev + off, pinned, n, kind));
		else
			CHECK(cudaMemcpy(pinned, dev + off, n, kind));
		off = (off + n) % span;
		count++;
	} while ((t = now() - t0) < 1.0);
	return count / t;
}

static int blk_sizes(void)
{
	char *dev, *pinned;
	CHECK(cudaMalloc((void **)&dev, 256u << 20));
	CHECK(cudaMallocHost((void **)&pinned, 1u << 20));
	memset(pinned, 3, 1u << 20);
	copies_per_second(dev, pinned, 1u << 20, cudaMemcpyHostToDevice); /* warm-up */
	printf("{\"h2d_1MiB_GBps\":%.2f,\"d2h_1MiB_GBps\":%.2f,",
	       copies_per_second(dev, pinned, 1u << 20, cudaMemcpyHostToDevice) * (1u << 20) / 1e9,
	       copies_per_second(dev, pinned, 1u << 20, cudaMemcpyDeviceToHost) * (1u << 20) / 1e9);
	printf("\"h2d_4KiB_per_s\":%.0f,\"d2h_4KiB_per_s\":%.0f}\n",
	       copies_per_second(dev, pinned, 4096, cudaMemcpyHostToDevice),
	       copies_per_second(dev, pinned, 4096, cudaMemcpyDeviceToHost));
	CHECK(cudaFreeHost(pinned));
	CHECK(cudaFree(dev));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "blk") == 0)
		return blk_sizes();
	size_t big = (argc > 1 ? strtoul(argv[1], NULL, 0) : 256) << 20;
	void *dev, *pinned, *pageable = malloc(big);
	memset(pageable, 1, big);
	CHECK(cudaMalloc(&dev, big));
	CHECK(cudaMallocHost(&pinned, big));
	memset(pinned, 2, big);
	printf("{\"MiB\":%zu,\"h2d_pageable\":%.2f,\"d2h_pageable\":%.2f,", big >> 20,
	       bandwidth(dev, pageable, big, cudaMemcpyHostToDevice),
	       bandwidth(pageable, dev, big, cudaMemcpyDeviceToHost));
	printf("\"h2d_pinned\":%.2f,\"d2h_pinned\":%.2f,", bandwidth(dev, pinned, big, cudaMemcpyHostToDevice),
	       bandwidth(pinned, dev, big, cudaMemcpyDeviceToHost));
	printf("\"sync_us\":%.2f,", lat_copy(NULL, NULL, 0, (cudaMemcpyKind)-1));
	printf("\"h2d_4B_us\":%.2f,\"d2h_4B_us\":%.2f,", lat_copy(dev, pinned, 4, cudaMemcpyHostToDevice),
	       lat_copy(pinned, dev, 4, cudaMemcpyDeviceToHost));
	printf("\"h2d_64KiB_us\":%.2f,\"d2h_64KiB_us\":%.2f}\n", lat_copy(dev, pinned, 65536, cudaMemcpyHostToDevice),
	       lat_copy(pinned, dev, 65536, cudaMemcpyDeviceToHost));
	CHECK(cudaFreeHost(pinned));
	CHECK(cudaFree(dev));
	free(pageable);
	return 0;
}
