// JIT linking: cuLinkCreate with log options, PTX added, completed, loaded, launched.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
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
static const char *ptx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry add1(.param .u64 p) {\n .reg .b32 %r<3>; .reg .b64 %rd<3>;\n"
    " ld.param.u64 %rd1, [p]; cvta.to.global.u64 %rd2, %rd1; ld.global.u32 %r1, [%rd2];\n"
    " add.s32 %r2, %r1, 1; st.global.u32 [%rd2], %r2; ret;\n}\n";
int main(void) {
  cudaFree(0);
  char info[4096] = "", err[4096] = "";
  float walltime = 0;
  CUjit_option opts[] = {CU_JIT_WALL_TIME,
                         CU_JIT_INFO_LOG_BUFFER,
                         CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_LOG_VERBOSE};
  void *vals[] = {&walltime, info, (void *)(size_t)sizeof info, err, (void *)(size_t)sizeof err, (void *)1};
  CUlinkState ls;
  CK(cuLinkCreate(6, opts, vals, &ls));
  CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, "add1.ptx", 0, 0, 0));
  void *cubin;
  size_t cubinSize;
  CK(cuLinkComplete(ls, &cubin, &cubinSize));
  printf("linked cubin of %s bytes; info log: %s\n", cubinSize > 0 ? "some" : "no",
         strstr(info, "add1") ? "names add1" : "(other)");
  CUmodule m;
  CK(cuModuleLoadData(&m, cubin));  // the cubin is the link's: destroyed at the end
  CUfunction f;
  CK(cuModuleGetFunction(&f, m, "add1"));
  CUdeviceptr d;
  CK(cuMemAlloc(&d, 4));
  CK(cuMemsetD32(d, 41, 1));
  void *args[] = {&d};
  CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, args, 0));
  CK(cuCtxSynchronize());
  int v;
  CK(cuMemcpyDtoH(&v, d, 4));
  printf("value %d\n", v);
  // Load options: logs, wall time and optimization level with cuModuleLoadDataEx, of PTX,
  // of bad PTX and of the cubin (what the log sizes say natively, and under qcuda).
  CUjit_option o2[] = {CU_JIT_INFO_LOG_BUFFER,  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                       CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                       CU_JIT_LOG_VERBOSE,      CU_JIT_OPTIMIZATION_LEVEL,
                       CU_JIT_WALL_TIME};
  void *v2[7];
  const char *bad = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry bad() { frob; }\n";
  const void *images[] = {ptx, bad, cubin};
  const char *names[] = {"ptx", "bad ptx", "cubin"};
  for (int i = 0; i < 3; i++) {
    strcpy(info, "x");
    strcpy(err, "x");
    void *init[] = {info, (void *)(size_t)sizeof info, err, (void *)(size_t)sizeof err, (void *)1, (void *)3, 0};
    memcpy(v2, init, sizeof v2);
    CUmodule m2 = 0;
    CUresult r = cuModuleLoadDataEx(&m2, images[i], 7, o2, v2);
    const char *rs = "?";
    cuGetErrorName(r, &rs);
    float w;
    memcpy(&w, &v2[6], sizeof w);
    printf("loadDataEx %s: %s; info %s, size %zu; error %s, size %zu; wall %s\n", names[i], rs,
           info[0] == 0        ? "empty"
           : strcmp(info, "x") ? "has text"
                               : "untouched",
           (size_t)v2[1],
           err[0] == 0        ? "empty"
           : strcmp(err, "x") ? "has text"
                              : "untouched",
           (size_t)v2[3], w > 0 ? ">0" : "0");
    if (m2) cuModuleUnload(m2);
  }
  CK(cuLinkDestroy(ls));
  return 0;
}
