// The CUDA driver API as qcuda uses it, loaded with dlopen("libcuda.so.1") at
// first use. Nothing here links against CUDA or needs its headers: the types
// and constants the addon uses are declared below (cuda_check.cc compares them
// with <cuda.h> where the toolkit is installed). Identifiers avoid the cu*
// names, which <cuda.h> turns into macros.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qcuda::cu {

using Result = int;  // CUresult
using Device = int;  // CUdevice
using Ptr = unsigned long long;  // CUdeviceptr
struct CtxSt;
struct StreamSt;
struct EventSt;
using Ctx = CtxSt *;
using Stream = StreamSt *;
using Event = EventSt *;
struct ModSt;
struct FuncSt;
using Module = ModSt *;
using Function = FuncSt *;
struct Uuid {
  unsigned char bytes[16];
};

// CUresult values the addon itself produces or tests for.
enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidImage = 200,      // cudaErrorInvalidKernelImage
  kInvalidContext = 201,
  kOperatingSystem = 304,   // cudaErrorOperatingSystem
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kContextIsDestroyed = 709,
  kHostMemoryAlreadyRegistered = 712,
  kHostMemoryNotRegistered = 713,
  kNotSupported = 801,
  kUnknown = 999,
};

constexpr unsigned kEventBlockingSync = 0x1;         // CU_EVENT_BLOCKING_SYNC
constexpr unsigned kEventDisableTiming = 0x2;        // CU_EVENT_DISABLE_TIMING
constexpr unsigned kHostRegisterPortable = 0x1;      // CU_MEMHOSTREGISTER_PORTABLE
constexpr unsigned kHostRegisterDeviceMap = 0x2;     // CU_MEMHOSTREGISTER_DEVICEMAP
constexpr unsigned kCtxMapHost = 0x8;                // CU_CTX_MAP_HOST
constexpr int kNumAttrs = 160;
// cuLaunchKernel's `extra` keys (CU_LAUNCH_PARAM_*): the parameters as one packed buffer.
constexpr uintptr_t kLaunchParamEnd = 0x00;
constexpr uintptr_t kLaunchParamBufferPointer = 0x01;
constexpr uintptr_t kLaunchParamBufferSize = 0x02;                       // QCUDA_NUM_ATTRS (qcuda_proto.h)
constexpr int kNumFuncAttrs = 16;      // CU_FUNC_ATTRIBUTE_MAX (QCUDA_NUM_FUNC_ATTRS)
constexpr int kFuncAttrEssential = 10; // attributes 0..9 exist on every GPU qcuda serves; the cluster ones (10..15) need sm_90
constexpr size_t kAttrValueBytes = 64; // sizeof(CUstreamAttrValue) (QCUDA_ATTR_VALUE_BYTES)

// Entry points, each of one fixed ABI version: cuGetProcAddress(name, version,
// LEGACY_STREAM) where the driver has it, else dlsym of the versioned name.
struct Api {
  Result (*Init)(unsigned);
  Result (*DriverGetVersion)(int *);
  Result (*DeviceGetCount)(int *);
  Result (*DeviceGet)(Device *, int);
  Result (*DeviceGetName)(char *, int, Device);
  Result (*DeviceGetUuid)(Uuid *, Device);
  Result (*DeviceTotalMem)(size_t *, Device);
  Result (*DeviceGetAttribute)(int *, int, Device);
  Result (*GetErrorName)(Result, const char **);
  Result (*GetErrorString)(Result, const char **);
  Result (*CtxCreate)(Ctx *, unsigned, Device);              // cuCtxCreate_v2 (may be null)
  Result (*CtxCreateV4)(Ctx *, void *, unsigned, Device);    // cuCtxCreate_v4 (may be null)
  Result (*CtxDestroy)(Ctx);
  Result (*CtxSetCurrent)(Ctx);
  Result (*CtxSynchronize)();
  Result (*DevicePrimaryCtxRetain)(Ctx *, Device);
  Result (*DevicePrimaryCtxRelease)(Device);
  Result (*MemAlloc)(Ptr *, size_t);
  Result (*MemFree)(Ptr);
  Result (*MemGetInfo)(size_t *, size_t *);
  Result (*MemcpyHtoDAsync)(Ptr, const void *, size_t, Stream);
  Result (*MemcpyDtoHAsync)(void *, Ptr, size_t, Stream);
  Result (*MemcpyDtoDAsync)(Ptr, Ptr, size_t, Stream);
  Result (*MemsetD8Async)(Ptr, unsigned char, size_t, Stream);
  Result (*StreamCreateWithPriority)(Stream *, unsigned, int);
  Result (*StreamDestroy)(Stream);
  Result (*StreamQuery)(Stream);
  Result (*StreamSynchronize)(Stream);
  Result (*StreamWaitEvent)(Stream, Event, unsigned);
  Result (*EventCreate)(Event *, unsigned);
  Result (*EventRecord)(Event, Stream);
  Result (*EventQuery)(Event);
  Result (*EventSynchronize)(Event);
  Result (*EventElapsedTime)(float *, Event, Event);
  Result (*EventDestroy)(Event);
  Result (*MemHostRegister)(void *, size_t, unsigned);
  Result (*MemHostUnregister)(void *);
  Result (*MemHostGetDevicePointer)(Ptr *, void *, unsigned);
  Result (*ModuleLoadData)(Module *, const void *);
  Result (*ModuleUnload)(Module);
  Result (*ModuleGetFunction)(Function *, Module, const char *);
  Result (*ModuleGetGlobal)(Ptr *, size_t *, Module, const char *);         // cuModuleGetGlobal_v2
  Result (*FuncGetParamInfo)(Function, size_t, size_t *, size_t *);          // driver >= 12.4 (may be null)
  Result (*LaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Stream,
                         void **, void **);
  // Function attributes, occupancy, limits, stream attributes, cooperative launches
  // (optional: null where the driver lacks them; the jobs say so).
  Result (*FuncGetAttribute)(int *, int, Function);
  Result (*FuncSetAttribute)(Function, int, int);
  Result (*OccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(int *, Function, int, size_t, unsigned);
  Result (*OccupancyAvailableDynamicSMemPerBlock)(size_t *, Function, int, int);
  Result (*CtxSetLimit)(int, size_t);
  Result (*CtxGetLimit)(size_t *, int);
  Result (*StreamSetAttribute)(Stream, int, const void *);  // value: a CUstreamAttrValue (kAttrValueBytes)
  Result (*StreamGetAttribute)(Stream, int, void *);
  Result (*LaunchCooperativeKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    Stream, void **);
};

struct ProbeResult {
  bool ok = false;
  std::string reason;  // why not, in plain words; "" when ok
  std::string library;  // what was dlopened
  int driverVersion = 0;
  int deviceCount = 0;
};

/** dlopen + dlsym + cuInit(0) + cuDeviceGetCount, once per process (thread-safe).
 *  QCUDA_LIBCUDA overrides the library path (tests, odd installs). */
const ProbeResult &Probe();
/** The entry points; only valid once Probe().ok. */
const Api &api();
/** "CUDA_ERROR_X (text)" for a CUresult. */
std::string Describe(Result r);
/** CUresult -> the runtime API's cudaError_t. */
int ToCudaError(Result r);

}  // namespace qcuda::cu
