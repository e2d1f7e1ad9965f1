// Loading libcuda.so.1 and naming its errors.
#include "cuda_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "cuda_shared_errors.h"

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
  if (std::binary_search(std::begin(kSharedErrors), std::end(kSharedErrors), r)) return r;
  return 999;  // cudaErrorUnknown
}

}  // namespace qcuda::cu
