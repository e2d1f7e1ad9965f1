// cudaMemcpyPeer between devices 0 and 1 (issue 37): 256 MiB each way, the
// bytes checked, the bandwidth measured over several copies. Runs natively
// and under `qcuda run --gpu=0,1` (test/gpu/multigpu/run.sh prints both).
// Prints one line per direction: "peer 0->1 <GB/s> ok" (or "BAD"), and
// cudaDeviceCanAccessPeer's answers. Exit 0 only if every byte matched.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE (256ull << 20)
#define REPS 10

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)

static unsigned char pattern(size_t i, int seed) { return (unsigned char)((i * 131 + (i >> 12) + seed) & 0xff); }

/** Copies dev `from`'s buffer to dev `to`'s REPS times; returns GB/s and checks the bytes. */
static int direction(int from, int to, void *buf[2], unsigned char *host, double *gbs) {
  for (size_t i = 0; i < SIZE; i++) host[i] = pattern(i, from);
  CHECK(cudaSetDevice(from));
  CHECK(cudaMemcpy(buf[from], host, SIZE, cudaMemcpyHostToDevice));
  CHECK(cudaSetDevice(to));
  CHECK(cudaMemset(buf[to], 0, SIZE));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpyPeer(buf[to], to, buf[from], from, SIZE));  // warm-up
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, 0));
  for (int r = 0; r < REPS; r++) CHECK(cudaMemcpyPeerAsync(buf[to], to, buf[from], from, SIZE, 0));
  CHECK(cudaEventRecord(b, 0));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  *gbs = (double)SIZE * REPS / (ms / 1e3) / 1e9;
  memset(host, 0, SIZE);
  CHECK(cudaMemcpy(host, buf[to], SIZE, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < SIZE; i++) bad += host[i] != pattern(i, from);
  if (bad) fprintf(stderr, "peer %d->%d: %zu bytes differ\n", from, to, bad);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return bad == 0;
}

int main(void) {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    printf("devices %d: needs 2\n", n);
    return 3;
  }
  int can01 = 0, can10 = 0;
  CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  printf("devices %d, can access peer 0->1 %d, 1->0 %d\n", n, can01, can10);
  void *buf[2];
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&buf[d], SIZE));
  }
  unsigned char *host = (unsigned char *)malloc(SIZE);
  if (!host) return 2;
  int ok = 1;
  for (int from = 0; from < 2; from++) {
    double gbs = 0;
    int good = direction(from, 1 - from, buf, host, &gbs);
    printf("peer %d->%d %.1f GB/s %s\n", from, 1 - from, gbs, good ? "ok" : "BAD");
    ok &= good;
  }
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaFree(buf[d]));
  }
  free(host);
  return ok ? 0 : 1;
}
