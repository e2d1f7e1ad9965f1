// What a kernel can reach of host memory registered the way the backend
// registers guest RAM, by registration flags, and what each costs in copy
// bandwidth. The backend registers guest RAM so copies run at pinned speed;
// if kernels can address it too, a guest kernel that guesses the backend's
// host address reads all guest RAM (docs/security.md, "What a guest kernel can reach").
//
// Each case runs in a child process (a faulting kernel poisons every context
// of its process). Prints one line per case and a JSON line.
//   nvcc -o devicemap_probe devicemap_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIZE (256u << 20)

__global__ void peek(const volatile int *src, int *out) { *out = src[1234]; }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x)                          \
  do {                                 \
    CUresult r_ = (x);                 \
    if (r_ != CUDA_SUCCESS) {          \
      const char *s_;                  \
      cuGetErrorName(r_, &s_);         \
      printf("FAIL %s: %s\n", #x, s_); \
      exit(2);                         \
    }                                  \
  } while (0)

/* One case: register (or not) with flags, copy both ways, then let a kernel read the host pointer. */
static void run_case(const char *name, int do_register, unsigned flags, int fd) {
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  int *host = (int *)mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (host == MAP_FAILED) {
    printf("FAIL mmap\n");
    exit(2);
  }
  for (size_t i = 0; i < SIZE / 4; i++) host[i] = (int)i;
  if (do_register) CK(cuMemHostRegister(host, SIZE, flags));
  CUdeviceptr d;
  CK(cuMemAlloc(&d, SIZE));
  double gbs[2] = {0, 0};
  for (int dir = 0; dir < 2; dir++) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      double t0 = now();
      if (dir == 0)
        CK(cuMemcpyHtoD(d, host, SIZE));
      else
        CK(cuMemcpyDtoH(host, d, SIZE));
      double t = now() - t0;
      if (t < best) best = t;
    }
    gbs[dir] = SIZE / best / 1e9;
  }
  int *out;
  cudaMalloc(&out, 4);
  cudaMemset(out, 0, 4);
  peek<<<1, 1>>>(host, out);
  cudaError_t e = cudaDeviceSynchronize();
  int got = 0;
  if (e == cudaSuccess) cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost);
  printf("%-34s H2D %6.2f GB/s  D2H %6.2f GB/s  kernel reads the host pointer: %s%s\n", name, gbs[0], gbs[1],
         e == cudaSuccess ? (got == 1234 ? "YES (read the right value)" : "ran, wrong value") : "no: ",
         e == cudaSuccess ? "" : cudaGetErrorName(e));
  printf("JSON {\"case\":\"%s\",\"h2d\":%.2f,\"d2h\":%.2f,\"kernelReads\":%s}\n", name, gbs[0], gbs[1],
         e == cudaSuccess && got == 1234 ? "true" : "false");
  fflush(stdout);
}

static void attributes(void) {
  CUdevice dev;
  int a[4];
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDeviceGetAttribute(&a[0], CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
  CK(cuDeviceGetAttribute(&a[1], CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev));
  CK(cuDeviceGetAttribute(&a[2], CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, dev));
  CK(cuDeviceGetAttribute(&a[3], CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, dev));
  printf(
      "unified addressing %d, host pointer for registered memory %d, pageable memory access %d (host page tables %d)\n",
      a[0], a[1], a[2], a[3]);
  fflush(stdout);
}

/* Registering only what is in flight: each 16 MiB chunk registered, copied and unregistered. */
static void in_flight_case(int fd) {
  CUdevice dev;
  CUcontext ctx;
  const size_t chunk = 16u << 20;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  char *host = (char *)mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  memset(host, 1, SIZE);
  CUdeviceptr d;
  CK(cuMemAlloc(&d, SIZE));
  double gbs[2], reg = 0;
  for (int dir = 0; dir < 2; dir++) {
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
      double t0 = now();
      for (size_t off = 0; off < SIZE; off += chunk) {
        double r0 = now();
        CK(cuMemHostRegister(host + off, chunk, 0));
        reg += now() - r0;
        if (dir == 0)
          CK(cuMemcpyHtoD(d + off, host + off, chunk));
        else
          CK(cuMemcpyDtoH(host + off, d + off, chunk));
        r0 = now();
        CK(cuMemHostUnregister(host + off));
        reg += now() - r0;
      }
      double t = now() - t0;
      if (t < best) best = t;
    }
    gbs[dir] = SIZE / best / 1e9;
  }
  printf("%-34s H2D %6.2f GB/s  D2H %6.2f GB/s  (register+unregister: %.0f us per 16 MiB)\n",
         "registered per 16 MiB chunk", gbs[0], gbs[1], reg / (6.0 * SIZE / chunk) * 1e6);
  printf("JSON {\"case\":\"per-chunk registration\",\"h2d\":%.2f,\"d2h\":%.2f}\n", gbs[0], gbs[1]);
  fflush(stdout);
}

int main(void) {
  /* No CUDA in this process: each child initializes its own (CUDA does not survive a fork). */
  pid_t p0 = fork();
  if (p0 == 0) {
    attributes();
    _exit(0);
  }
  waitpid(p0, NULL, 0);
  struct {
    const char *name;
    int reg;
    unsigned flags;
  } cases[] = {
      {"not registered (pageable)", 0, 0},
      {"registered, flags 0", 1, 0},
      {"registered, PORTABLE", 1, CU_MEMHOSTREGISTER_PORTABLE},
      {"registered, PORTABLE|DEVICEMAP", 1, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP},
  };
  for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int fd = memfd_create("probe", 0);
    if (fd < 0 || ftruncate(fd, SIZE) != 0) {
      printf("FAIL memfd\n");
      return 2;
    }
    pid_t pid = fork();
    if (pid == 0) {
      run_case(cases[i].name, cases[i].reg, cases[i].flags, fd);
      _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    close(fd);
  }
  int fd = memfd_create("probe", 0);
  if (fd < 0 || ftruncate(fd, SIZE) != 0) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    in_flight_case(fd);
    _exit(0);
  }
  waitpid(pid, NULL, 0);
  return 0;
}
