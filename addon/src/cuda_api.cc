// Loading libcuda.so.1 and naming its errors.
#include "cuda_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

namespace qcuda::cu {
namespace {

Api g_api;
ProbeResult *g_probe = nullptr;  // leaked on purpose: worker threads may outlive static destructors
std::once_flag g_once;

void DoProbe(ProbeResult *p) {
  const char *env = getenv("QCUDA_LIBCUDA");
  p->library = (env != nullptr && *env != '\0') ? env : "libcuda.so.1";
  dlerror();
  void *lib = dlopen(p->library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char *e = dlerror();
    std::string why = e != nullptr ? e : "unknown dlopen error";
    if (why.find("No such file") != std::string::npos)
      p->reason = p->library + " not found (no NVIDIA driver installed here)";
    else
      p->reason = "cannot load " + p->library + ": " + why;
    return;
  }
  // Prefer cuGetProcAddress (NVIDIA's way to ask for one ABI version of an entry
  // point, legacy-stream flavour); fall back to dlsym of the versioned names.
  using GetProc = Result (*)(const char *, void **, int, uint64_t, int *);
  auto getProc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  std::string missing;
  auto resolve = [&](auto &slot, const char *base, int version, const char *name, const char *alt, bool required) {
    void *fn = nullptr;
    int found = 0;
    if (getProc != nullptr &&
        getProc(base, &fn, version, 1 /* CU_GET_PROC_ADDRESS_LEGACY_STREAM */, &found) != kSuccess)
      fn = nullptr;
    if (fn == nullptr) fn = dlsym(lib, name);
    if (fn == nullptr && alt != nullptr) fn = dlsym(lib, alt);
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(fn);
    if (fn == nullptr && required && missing.empty()) missing = name;
  };
  Api &a = g_api;
#define QCUDA_CU_RESOLVE(name, params, base, version, symbol, alt, required) \
  resolve(a.name, base, version, symbol, alt, required);
  QCUDA_CU_API(QCUDA_CU_RESOLVE)
#undef QCUDA_CU_RESOLVE
  if (a.CtxCreate == nullptr && a.CtxCreateV4 == nullptr && missing.empty()) missing = "cuCtxCreate_v2";
  if (!missing.empty()) {
    p->reason = p->library + " has no " + missing + " (driver too old or not NVIDIA's)";
    return;
  }
  Result r = a.Init(0);
  if (r == kNoDevice) {
    p->reason = "no CUDA-capable device (cuInit: " + Describe(r) + ")";
    return;
  }
  if (r != kSuccess) {
    p->reason = "cuInit failed: " + Describe(r);
    return;
  }
  a.DriverGetVersion(&p->driverVersion);
  r = a.DeviceGetCount(&p->deviceCount);
  if (r != kSuccess) {
    p->reason = "cuDeviceGetCount failed: " + Describe(r);
    return;
  }
  if (p->deviceCount <= 0) {
    p->reason = "no CUDA-capable device";
    return;
  }
  p->ok = true;
}

// Every CUresult that has a cudaError_t of the same number (CUDA 13.0 headers:
// all of them but 202 CUDA_ERROR_CONTEXT_ALREADY_CURRENT, deprecated, and 916
// CUDA_ERROR_KEY_ROTATION). The names differ for some, the meaning does not:
// 2 OUT_OF_MEMORY = cudaErrorMemoryAllocation, 3 NOT_INITIALIZED =
// cudaErrorInitializationError, 4 DEINITIALIZED = cudaErrorCudartUnloading,
// 200 INVALID_IMAGE = cudaErrorInvalidKernelImage, 201 INVALID_CONTEXT =
// cudaErrorDeviceUninitialized, 209 NO_BINARY_FOR_GPU =
// cudaErrorNoKernelImageForDevice, 216 CONTEXT_ALREADY_IN_USE =
// cudaErrorDeviceAlreadyInUse, 400 INVALID_HANDLE =
// cudaErrorInvalidResourceHandle, 500 NOT_FOUND = cudaErrorSymbolNotFound,
// 708 PRIMARY_CONTEXT_ACTIVE = cudaErrorSetOnActiveProcess, 719 LAUNCH_FAILED =
// cudaErrorLaunchFailure.
constexpr int kShared[] = {1,   2,   3,   4,   5,   6,   7,   8,   34,  36,  46,  100, 101, 102, 200, 201, 205,
                           206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222,
                           223, 224, 225, 226, 300, 301, 302, 303, 304, 400, 401, 402, 500, 600, 700, 701, 702,
                           703, 704, 705, 708, 709, 710, 711, 712, 713, 714, 715, 716, 717, 718, 719, 720, 721,
                           800, 801, 802, 803, 804, 805, 806, 807, 808, 809, 810, 811, 812, 900, 901, 902, 903,
                           904, 905, 906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 999};

}  // namespace

const ProbeResult &Probe() {
  std::call_once(g_once, [] {
    auto *p = new ProbeResult;
    DoProbe(p);
    g_probe = p;
  });
  return *g_probe;
}

const Api &api() { return g_api; }

std::string Describe(Result r) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (g_api.GetErrorName != nullptr) g_api.GetErrorName(r, &name);
  if (g_api.GetErrorString != nullptr) g_api.GetErrorString(r, &text);
  std::string s = name != nullptr ? name : "CUresult " + std::to_string(r);
  if (text != nullptr) s += std::string(" (") + text + ")";
  return s;
}

int ToCudaError(Result r) {
  if (r == kSuccess) return 0;
  if (std::binary_search(std::begin(kShared), std::end(kShared), r)) return r;
  return 999;  // cudaErrorUnknown
}

}  // namespace qcuda::cu
