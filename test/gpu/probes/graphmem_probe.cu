// A graph with a memory-allocation node whose memory is freed outside the
// graph (cudaFreeAsync on a stream), relaunched; then graph memory attributes.
#include <cuda_runtime.h>
#include <stdio.h>
#define CK(x)                                         \
  do {                                                \
    cudaError_t e_ = (x);                             \
    if (e_ != cudaSuccess) {                          \
      printf("%s -> %s\n", #x, cudaGetErrorName(e_)); \
      return 1;                                       \
    }                                                 \
  } while (0)
__global__ void set(int *p, int v) { p[threadIdx.x] = v + threadIdx.x; }
int main(void) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = 1 << 20;
  cudaGraphNode_t an;
  CK(cudaGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
  int *p = (int *)ap.dptr;
  cudaKernelNodeParams kp = {};
  int v = 7;
  void *args[] = {&p, &v};
  kp.func = (void *)set;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(32);
  kp.kernelParams = args;
  cudaGraphNode_t kn;
  CK(cudaGraphAddKernelNode(&kn, g, &an, 1, &kp));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int round = 0; round < 3; round++) {
    CK(cudaGraphLaunch(ge, s));
    int h[2];
    CK(cudaMemcpyAsync(h, p, 8, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    printf("round %d: %d %d\n", round, h[0], h[1]);
  }
  size_t used = 0;
  CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  printf("graph mem used %s\n", used ? "nonzero" : "0");
  CK(cudaDeviceGraphMemTrim(0));
  printf("graphmem ok\n");
  return 0;
}
