// Virtual memory management through the driver API: reserve, create, map,
// set access, use from a kernel and copies, unmap, release.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#define CK(x)                      \
  do {                             \
    CUresult r_ = (x);             \
    if (r_ != CUDA_SUCCESS) {      \
      const char *s = 0;           \
      cuGetErrorName(r_, &s);      \
      printf("%s -> %s\n", #x, s); \
      return 1;                    \
    }                              \
  } while (0)
__global__ void inc(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += i;
}
int main(void) {
  cudaFree(0);
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  printf("granularity %zu\n", gran);
  size_t size = 2 * gran;
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, size * 2, 0, 0, 0));
  CUmemGenericAllocationHandle h;
  CK(cuMemCreate(&h, size, &prop, 0));
  CK(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc acc = {};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(va, size, &acc, 1));
  unsigned long long flags = 0;
  CK(cuMemGetAccess(&flags, &prop.location, va));
  printf("access %llu\n", flags);
  int n = (int)(size / 4);
  CK(cuMemsetD32(va, 1, n));
  inc<<<(n + 255) / 256, 256>>>((int *)va, n);
  cudaDeviceSynchronize();
  int h4[4];
  CK(cuMemcpyDtoH(h4, va + 4 * 1000, 16));
  printf("values %d %d %d %d\n", h4[0], h4[1], h4[2], h4[3]);
  CUmemAllocationProp got = {};
  CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
  printf("prop type %d loc %d\n", (int)got.type, got.location.id);
  CUmemGenericAllocationHandle h2;
  CK(cuMemRetainAllocationHandle(&h2, (void *)va));
  CK(cuMemRelease(h2));
  CK(cuMemUnmap(va, size));
  CK(cuMemRelease(h));
  CK(cuMemAddressFree(va, size * 2));
  printf("vmm ok\n");
  return 0;
}
