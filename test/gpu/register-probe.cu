// Which cuMemHostRegister flags keep registered host memory fast for copies
// while out of reach of kernels? Each variant registers a 256 MiB memfd
// mapping, times 256 MiB HtoD/DtoH in a "guest" context, then has a kernel
// in that context read the memory. Run: register-probe N, N = 0..6.
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <stdlib.h>

__global__ void peek(const unsigned long long *p, unsigned long long *out) { *out = *p; }

#define CK(x)                        \
  do {                               \
    CUresult r_ = (x);               \
    if (r_ != CUDA_SUCCESS) {        \
      const char *s;                 \
      cuGetErrorName(r_, &s);        \
      printf("  %s -> %s\n", #x, s); \
    }                                \
  } while (0)
static const size_t N = 256u << 20;

static double gbps(CUcontext c, CUdeviceptr d, void *h, bool htod) {
  cuCtxSetCurrent(c);
  double best = 0;
  for (int i = 0; i < 5; i++) {
    auto t0 = std::chrono::steady_clock::now();
    CUresult r = htod ? cuMemcpyHtoD(d, h, N) : cuMemcpyDtoH(h, d, N);
    if (r != CUDA_SUCCESS) return -1;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (N / s / 1e9 > best) best = N / s / 1e9;
  }
  return best;
}

static void variant(const char *name, CUdevice dev, int where, unsigned flags, bool reg) {
  int fd = syscall(SYS_memfd_create, "guest", 0);
  ftruncate(fd, N);
  unsigned long long *h = (unsigned long long *)mmap(0, N, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  memset(h, 1, N);
  h[0] = 0x1234567887654321ULL;
  CUcontext guest, copier = 0;
  CUctxCreateParams *none = 0;
  CK(cuCtxCreate(&guest, none, 0, dev));
  if (where == 1) {
    CK(cuCtxCreate(&copier, none, 0, dev));
  }
  cuCtxSetCurrent(where == 1 ? copier : guest);
  if (reg) CK(cuMemHostRegister(h, N, flags));
  cuCtxSetCurrent(guest);
  CUdeviceptr d, out;
  CK(cuMemAlloc(&d, N));
  CK(cuMemAlloc(&out, 8));
  CK(cuMemsetD8(out, 0, 8));
  double up = gbps(guest, d, h, true), down = gbps(guest, d, h, false);
  h[0] = 0x1234567887654321ULL;
  peek<<<1, 1>>>(h, (unsigned long long *)out);
  CUresult k = cuCtxSynchronize();
  unsigned long long v = 0;
  cuMemcpyDtoH(&v, out, 8);
  const char *kn;
  cuGetErrorName(k, &kn);
  printf("%-44s HtoD %6.1f GB/s  DtoH %6.1f GB/s  kernel read: %s (%s)\n", name, up, down, kn,
         v == 0x1234567887654321ULL ? "REACHABLE" : "not reachable");
  cuCtxDestroy(guest);
  if (copier) {
    cuCtxSetCurrent(copier);
    if (reg) cuMemHostUnregister(h);
    cuCtxDestroy(copier);
  }
  munmap(h, N);
  close(fd);
}

int main(int argc, char **argv) {
  // One variant per process: a kernel fault is sticky for the whole process.
  int which = argc > 1 ? atoi(argv[1]) : -1;
  cuInit(0);
  CUdevice dev;
  cuDeviceGet(&dev, 0);
  if (which == 0) variant("unregistered (pageable)", dev, 0, 0, false);
  if (which == 1)
    variant("same ctx, PORTABLE|DEVICEMAP (today)", dev, 0, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP,
            true);
  if (which == 2) variant("same ctx, flags 0", dev, 0, 0, true);
  if (which == 3) variant("same ctx, PORTABLE", dev, 0, CU_MEMHOSTREGISTER_PORTABLE, true);
  if (which == 4) variant("other ctx, flags 0", dev, 1, 0, true);
  if (which == 5) variant("other ctx, PORTABLE", dev, 1, CU_MEMHOSTREGISTER_PORTABLE, true);
  if (which == 6)
    variant("other ctx, PORTABLE|DEVICEMAP", dev, 1, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP, true);
  return 0;
}
