// Does a kernel reach host memory the process mapped but never registered?
// With HMM (open kernel modules, pageableMemoryAccess=1) it does, which
// decides how guest RAM may be held in a process that runs guest kernels.
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>

__global__ void peek(const unsigned long long *p, unsigned long long *out) { *out = *p; }

int main() {
  int pageable = -1, tables = -1, hostreg = -1;
  cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0);
  cudaDeviceGetAttribute(&tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0);
  cudaDeviceGetAttribute(&hostreg, cudaDevAttrHostRegisterSupported, 0);
  printf("pageableMemoryAccess=%d usesHostPageTables=%d hostRegisterSupported=%d\n", pageable, tables, hostreg);
  int fd = syscall(SYS_memfd_create, "guest", 0);
  ftruncate(fd, 1 << 21);
  unsigned long long *p = (unsigned long long *)mmap(0, 1 << 21, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  p[0] = 0x1234567887654321ULL;
  unsigned long long *out;
  cudaMalloc(&out, 8);
  cudaMemset(out, 0, 8);
  peek<<<1, 1>>>(p, out);
  cudaError_t e = cudaDeviceSynchronize();
  unsigned long long v = 0;
  cudaMemcpy(&v, out, 8, cudaMemcpyDeviceToHost);
  printf("kernel read of unregistered memfd mapping: %s value=%llx (%s)\n", cudaGetErrorName(e), v,
         v == p[0] ? "REACHABLE" : "not reachable");
  return 0;
}
