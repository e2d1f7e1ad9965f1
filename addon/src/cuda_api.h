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

using Result = int;              // CUresult
using Device = int;              // CUdevice
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
struct ArraySt;
using Array = ArraySt *;  // CUarray
struct MipmapSt;
using Mipmap = MipmapSt *;             // CUmipmappedArray
using TexObject = unsigned long long;  // CUtexObject, CUsurfObject
struct GraphSt;
struct GraphExecSt;
struct GraphNodeSt;
using Graph = GraphSt *;                // CUgraph
using GraphExec = GraphExecSt *;        // CUgraphExec
using GraphNode = GraphNodeSt *;        // CUgraphNode
using CondHandle = unsigned long long;  // CUgraphConditionalHandle
struct LinkSt;
using LinkState = LinkSt *;  // CUlinkState

// CUmemorytype
enum : int { kMemHost = 1, kMemDevice = 2, kMemArray = 3 };
// CUresourcetype
enum : int { kResArray = 0, kResMipmap = 1, kResLinear = 2, kResPitch2D = 3 };

// The driver's structs qcuda fills, as cuda.h lays them out (cuda_check.cc compares).
struct Memcpy3D {  // CUDA_MEMCPY3D
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  Ptr srcDevice;
  Array srcArray;
  void *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost;
  Ptr dstDevice;
  Array dstArray;
  void *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
};
struct Array3DDescriptor {  // CUDA_ARRAY3D_DESCRIPTOR
  size_t Width, Height, Depth;
  int Format;
  unsigned NumChannels;
  unsigned Flags;
};
struct ResourceDesc {  // CUDA_RESOURCE_DESC
  int resType;
  union {
    struct {
      Array hArray;
    } array;
    struct {
      Mipmap hMipmappedArray;
    } mipmap;
    struct {
      Ptr devPtr;
      int format;
      unsigned numChannels;
      size_t sizeInBytes;
    } linear;
    struct {
      Ptr devPtr;
      int format;
      unsigned numChannels;
      size_t width, height, pitchInBytes;
    } pitch2D;
    struct {
      int reserved[32];
    } reserved;
  } res;
  unsigned flags;
};
struct TextureDesc {  // CUDA_TEXTURE_DESC
  int addressMode[3];
  int filterMode;
  unsigned flags;
  unsigned maxAnisotropy;
  int mipmapFilterMode;
  float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
  float borderColor[4];
  int reserved[12];
};

// CUlaunchAttributeID values the addon sets.
enum : int {
  kLaunchAttributeCooperative = 2,
  kLaunchAttributeClusterDimension = 4,
  kLaunchAttributeClusterSchedulingPolicy = 5,
};

struct LaunchAttribute {  // CUlaunchAttribute: an id, then a 64-byte value union
  int id;
  char pad[4];
  union {
    char bytes[64];
    int cooperative;
    struct {
      unsigned x, y, z;
    } clusterDim;
  } value;
};

struct LaunchConfig {  // CUlaunchConfig
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  Stream hStream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};

struct TensorMap {  // CUtensorMap: the driver's opaque 128-byte descriptor
  alignas(128) uint64_t words[16];
};

struct KernelNodeParams {  // CUDA_KERNEL_NODE_PARAMS (_v2)
  Function func;
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  void **kernelParams;
  void **extra;
  void *kern;  // CUkernel
  Ctx ctx;
};
struct MemsetNodeParams {  // CUDA_MEMSET_NODE_PARAMS
  Ptr dst;
  size_t pitch;
  unsigned value;
  unsigned elementSize;
  size_t width, height;
};
struct ConditionalNodeParams {  // CUDA_CONDITIONAL_NODE_PARAMS
  CondHandle handle;
  int type;  // CUgraphConditionalNodeType
  unsigned size;
  Graph *phGraph_out;
  Ctx ctx;
};
struct GraphNodeParams {  // CUgraphNodeParams (only its conditional member is used)
  int type;               // CUgraphNodeType
  int reserved0[3];
  union {
    long long reserved1[29];
    ConditionalNodeParams conditional;
  };
  long long reserved2;
};
constexpr int kGraphNodeConditional = 13;  // CU_GRAPH_NODE_TYPE_CONDITIONAL

struct Uuid {
  unsigned char bytes[16];
};

// Virtual memory management (cuda_ctx_vmm.cc).
// CUipcMemHandle and CUipcEventHandle: 64 opaque bytes, passed by value to the open calls.
constexpr size_t kIpcHandleBytes = 64;
struct IpcHandle {
  char reserved[kIpcHandleBytes];
};
constexpr unsigned kIpcLazyEnablePeerAccess = 0x1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

using MemHandle = unsigned long long;  // CUmemGenericAllocationHandle
struct MemLocation {                   // CUmemLocation
  int type;                            // CUmemLocationType
  int id;
};
struct MemAllocationProp {   // CUmemAllocationProp
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  MemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
struct MemAccessDesc {  // CUmemAccessDesc
  MemLocation location;
  int flags;  // CUmemAccess_flags
};
constexpr int kMemAllocationTypePinned = 1;  // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kMemLocationTypeDevice = 1;    // CU_MEM_LOCATION_TYPE_DEVICE
constexpr int kMemAccessReadWrite = 3;       // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kMemHandleTypePosixFd = 1;     // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

// CUresult values the addon itself produces or tests for.
enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidImage = 200,  // cudaErrorInvalidKernelImage
  kInvalidContext = 201,
  kOperatingSystem = 304,  // cudaErrorOperatingSystem
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kContextIsDestroyed = 709,
  kHostMemoryAlreadyRegistered = 712,
  kHostMemoryNotRegistered = 713,
  kNotSupported = 801,
  kUnknown = 999,
};

constexpr unsigned kEventBlockingSync = 0x1;      // CU_EVENT_BLOCKING_SYNC
constexpr unsigned kEventDisableTiming = 0x2;     // CU_EVENT_DISABLE_TIMING
constexpr unsigned kHostRegisterPortable = 0x1;   // CU_MEMHOSTREGISTER_PORTABLE
constexpr unsigned kHostRegisterDeviceMap = 0x2;  // CU_MEMHOSTREGISTER_DEVICEMAP
constexpr unsigned kCtxMapHost = 0x8;             // CU_CTX_MAP_HOST
// CUjit_option values the addon's link sets itself: the logs and the wall time.
constexpr int kJitWallTime = 2;                 // CU_JIT_WALL_TIME
constexpr int kJitInfoLogBuffer = 3;            // CU_JIT_INFO_LOG_BUFFER
constexpr int kJitInfoLogBufferSizeBytes = 4;   // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
constexpr int kJitErrorLogBuffer = 5;           // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogBufferSizeBytes = 6;  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
constexpr int kNumAttrs = 160;
// cuLaunchKernel's `extra` keys (CU_LAUNCH_PARAM_*): the parameters as one packed buffer.
constexpr uintptr_t kLaunchParamEnd = 0x00;
constexpr uintptr_t kLaunchParamBufferPointer = 0x01;
constexpr uintptr_t kLaunchParamBufferSize = 0x02;  // QCUDA_NUM_ATTRS (qcuda_proto.h)
constexpr int kNumFuncAttrs = 16;                   // CU_FUNC_ATTRIBUTE_MAX (QCUDA_NUM_FUNC_ATTRS)
constexpr int kFuncAttrLocalSizeBytes = 3;          // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
constexpr int kFuncAttrEssential =
    10;  // attributes 0..9 exist on every GPU qcuda serves; the cluster ones (10..15) need sm_90
constexpr size_t kAttrValueBytes = 64;  // sizeof(CUstreamAttrValue) (QCUDA_ATTR_VALUE_BYTES)

// Every driver entry point the addon uses, once: X(field, (parameters), base
// name for cuGetProcAddress, ABI version, versioned symbol, older symbol or
// nullptr, required). Each is resolved with cuGetProcAddress(base, version,
// LEGACY_STREAM) where the driver has it, else dlsym of the versioned name
// (then the older one); a required one missing means the driver is unusable,
// an optional one missing fails just the calls that need it.
#define QCUDA_CU_API(X)                                                                                                \
  X(Init, (unsigned), "cuInit", 2000, "cuInit", nullptr, true)                                                         \
  X(DriverGetVersion, (int *), "cuDriverGetVersion", 2020, "cuDriverGetVersion", nullptr, true)                        \
  X(DeviceGetCount, (int *), "cuDeviceGetCount", 2000, "cuDeviceGetCount", nullptr, true)                              \
  X(DeviceGet, (Device *, int), "cuDeviceGet", 2000, "cuDeviceGet", nullptr, true)                                     \
  X(DeviceGetName, (char *, int, Device), "cuDeviceGetName", 2000, "cuDeviceGetName", nullptr, true)                   \
  X(DeviceGetUuid, (Uuid *, Device), "cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", "cuDeviceGetUuid", true)          \
  X(DeviceTotalMem, (size_t *, Device), "cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", nullptr, true)                \
  X(DeviceGetAttribute, (int *, int, Device), "cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", nullptr, true)     \
  X(GetErrorName, (Result, const char **), "cuGetErrorName", 6000, "cuGetErrorName", nullptr, true)                    \
  X(GetErrorString, (Result, const char **), "cuGetErrorString", 6000, "cuGetErrorString", nullptr, true)              \
  X(CtxCreate, (Ctx *, unsigned, Device), "cuCtxCreate", 3020, "cuCtxCreate_v2", nullptr,                              \
    false) /* cuCtxCreate_v2 (may be null) */                                                                          \
  X(CtxCreateV4, (Ctx *, void *, unsigned, Device), "cuCtxCreate", 12050, "cuCtxCreate_v4", nullptr,                   \
    false) /* cuCtxCreate_v4 (may be null) */                                                                          \
  X(CtxDestroy, (Ctx), "cuCtxDestroy", 4000, "cuCtxDestroy_v2", nullptr, true)                                         \
  X(CtxSetCurrent, (Ctx), "cuCtxSetCurrent", 4000, "cuCtxSetCurrent", nullptr, true)                                   \
  X(CtxSynchronize, (), "cuCtxSynchronize", 2000, "cuCtxSynchronize", nullptr, true)                                   \
  X(DevicePrimaryCtxRetain, (Ctx *, Device), "cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", nullptr,    \
    true)                                                                                                              \
  X(DevicePrimaryCtxRelease, (Device), "cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", nullptr,    \
    true)                                                                                                              \
  X(MemAlloc, (Ptr *, size_t), "cuMemAlloc", 3020, "cuMemAlloc_v2", nullptr, true)                                     \
  X(MemFree, (Ptr), "cuMemFree", 3020, "cuMemFree_v2", nullptr, true)                                                  \
  X(MemGetInfo, (size_t *, size_t *), "cuMemGetInfo", 3020, "cuMemGetInfo_v2", nullptr, true)                          \
  X(MemcpyHtoDAsync, (Ptr, const void *, size_t, Stream), "cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", nullptr,  \
    true)                                                                                                              \
  X(MemcpyDtoHAsync, (void *, Ptr, size_t, Stream), "cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", nullptr, true)  \
  X(MemcpyDtoDAsync, (Ptr, Ptr, size_t, Stream), "cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", nullptr, true)     \
  X(MemsetD8Async, (Ptr, unsigned char, size_t, Stream), "cuMemsetD8Async", 3020, "cuMemsetD8Async", nullptr, true)    \
  X(StreamCreateWithPriority, (Stream *, unsigned, int), "cuStreamCreateWithPriority", 5050,                           \
    "cuStreamCreateWithPriority", nullptr, true)                                                                       \
  X(StreamDestroy, (Stream), "cuStreamDestroy", 4000, "cuStreamDestroy_v2", nullptr, true)                             \
  X(StreamQuery, (Stream), "cuStreamQuery", 2000, "cuStreamQuery", nullptr, true)                                      \
  X(StreamSynchronize, (Stream), "cuStreamSynchronize", 2000, "cuStreamSynchronize", nullptr, true)                    \
  X(StreamWaitEvent, (Stream, Event, unsigned), "cuStreamWaitEvent", 3020, "cuStreamWaitEvent", nullptr, true)         \
  X(EventCreate, (Event *, unsigned), "cuEventCreate", 2000, "cuEventCreate", nullptr, true)                           \
  X(EventRecord, (Event, Stream), "cuEventRecord", 2000, "cuEventRecord", nullptr, true)                               \
  X(EventQuery, (Event), "cuEventQuery", 2000, "cuEventQuery", nullptr, true)                                          \
  X(EventSynchronize, (Event), "cuEventSynchronize", 2000, "cuEventSynchronize", nullptr, true)                        \
  X(EventElapsedTime, (float *, Event, Event), "cuEventElapsedTime", 12080, "cuEventElapsedTime_v2",                   \
    "cuEventElapsedTime", true)                                                                                        \
  X(EventDestroy, (Event), "cuEventDestroy", 4000, "cuEventDestroy_v2", nullptr, true)                                 \
  X(MemHostRegister, (void *, size_t, unsigned), "cuMemHostRegister", 6050, "cuMemHostRegister_v2", nullptr, true)     \
  X(MemHostUnregister, (void *), "cuMemHostUnregister", 4000, "cuMemHostUnregister", nullptr, true)                    \
  X(MemHostGetDevicePointer, (Ptr *, void *, unsigned), "cuMemHostGetDevicePointer", 3020,                             \
    "cuMemHostGetDevicePointer_v2", nullptr, true)                                                                     \
  X(ModuleLoadData, (Module *, const void *), "cuModuleLoadData", 2000, "cuModuleLoadData", nullptr, true)             \
  X(ModuleUnload, (Module), "cuModuleUnload", 2000, "cuModuleUnload", nullptr, true)                                   \
  X(ModuleGetFunction, (Function *, Module, const char *), "cuModuleGetFunction", 2000, "cuModuleGetFunction",         \
    nullptr, true)                                                                                                     \
  X(ModuleGetGlobal, (Ptr *, size_t *, Module, const char *), "cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2",       \
    nullptr, true) /* cuModuleGetGlobal_v2 */                                                                          \
  X(FuncGetParamInfo, (Function, size_t, size_t *, size_t *), "cuFuncGetParamInfo", 12040, "cuFuncGetParamInfo",       \
    nullptr, false) /* driver >= 12.4 (may be null) */                                                                 \
  X(LaunchKernel,                                                                                                      \
    (Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Stream, void **, void **),        \
    "cuLaunchKernel", 4000, "cuLaunchKernel", nullptr, true)                                                           \
  X(LaunchKernelEx, (const LaunchConfig *, Function, void **, void **), "cuLaunchKernelEx", 11060, "cuLaunchKernelEx", \
    nullptr, false)                                                                                                    \
  X(FuncGetAttribute, (int *, int, Function), "cuFuncGetAttribute", 2020, "cuFuncGetAttribute", nullptr, false)        \
  X(FuncSetAttribute, (Function, int, int), "cuFuncSetAttribute", 9000, "cuFuncSetAttribute", nullptr, false)          \
  X(OccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int *, Function, int, size_t, unsigned),                      \
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,                                                      \
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", nullptr, false)                                            \
  X(OccupancyAvailableDynamicSMemPerBlock, (size_t *, Function, int, int), "cuOccupancyAvailableDynamicSMemPerBlock",  \
    11000, "cuOccupancyAvailableDynamicSMemPerBlock", nullptr, false)                                                  \
  X(OccupancyMaxActiveClusters, (int *, Function, const LaunchConfig *), "cuOccupancyMaxActiveClusters", 11070,        \
    "cuOccupancyMaxActiveClusters", nullptr, false)                                                                    \
  X(OccupancyMaxPotentialClusterSize, (int *, Function, const LaunchConfig *), "cuOccupancyMaxPotentialClusterSize",   \
    11070, "cuOccupancyMaxPotentialClusterSize", nullptr, false)                                                       \
  X(TensorMapEncodeTiled,                                                                                              \
    (TensorMap *, int, uint32_t, void *, const uint64_t *, const uint64_t *, const uint32_t *, const uint32_t *, int,  \
     int, int, int),                                                                                                   \
    "cuTensorMapEncodeTiled", 12000, "cuTensorMapEncodeTiled", nullptr, false)                                         \
  X(TensorMapEncodeIm2col,                                                                                             \
    (TensorMap *, int, uint32_t, void *, const uint64_t *, const uint64_t *, const int *, const int *, uint32_t,       \
     uint32_t, const uint32_t *, int, int, int, int),                                                                  \
    "cuTensorMapEncodeIm2col", 12000, "cuTensorMapEncodeIm2col", nullptr, false)                                       \
  X(TensorMapEncodeIm2colWide,                                                                                         \
    (TensorMap *, int, uint32_t, void *, const uint64_t *, const uint64_t *, int, int, uint32_t, uint32_t,             \
     const uint32_t *, int, int, int, int, int),                                                                       \
    "cuTensorMapEncodeIm2colWide", 12080, "cuTensorMapEncodeIm2colWide", nullptr, false)                               \
  X(TensorMapReplaceAddress, (TensorMap *, void *), "cuTensorMapReplaceAddress", 12000, "cuTensorMapReplaceAddress",   \
    nullptr, false)                                                                                                    \
  X(CtxSetLimit, (int, size_t), "cuCtxSetLimit", 3010, "cuCtxSetLimit", nullptr, false)                                \
  X(CtxGetLimit, (size_t *, int), "cuCtxGetLimit", 3010, "cuCtxGetLimit", nullptr, false)                              \
  X(StreamSetAttribute, (Stream, int, const void *), "cuStreamSetAttribute", 11000, "cuStreamSetAttribute", nullptr,   \
    false) /* value: a CUstreamAttrValue (kAttrValueBytes) */                                                          \
  X(StreamGetAttribute, (Stream, int, void *), "cuStreamGetAttribute", 11000, "cuStreamGetAttribute", nullptr, false)  \
  X(LaunchCooperativeKernel,                                                                                           \
    (Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Stream, void **),                 \
    "cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel", nullptr, false)                                    \
  X(CtxGetStreamPriorityRange, (int *, int *), "cuCtxGetStreamPriorityRange", 5050, "cuCtxGetStreamPriorityRange",     \
    nullptr, false) /* least, greatest */                                                                              \
  X(StreamGetPriority, (Stream, int *), "cuStreamGetPriority", 5050, "cuStreamGetPriority", nullptr, false)            \
  X(CtxResetPersistingL2Cache, (), "cuCtxResetPersistingL2Cache", 11000, "cuCtxResetPersistingL2Cache", nullptr,       \
    false)                                                                                                             \
  X(Array3DCreate, (Array *, const Array3DDescriptor *), "cuArray3DCreate", 3020, "cuArray3DCreate_v2", nullptr,       \
    false)                                                                                                             \
  X(ArrayDestroy, (Array), "cuArrayDestroy", 2000, "cuArrayDestroy", nullptr, false)                                   \
  X(MipmappedArrayCreate, (Mipmap *, const Array3DDescriptor *, unsigned), "cuMipmappedArrayCreate", 5000,             \
    "cuMipmappedArrayCreate", nullptr, false)                                                                          \
  X(MipmappedArrayGetLevel, (Array *, Mipmap, unsigned), "cuMipmappedArrayGetLevel", 5000, "cuMipmappedArrayGetLevel", \
    nullptr, false)                                                                                                    \
  X(MipmappedArrayDestroy, (Mipmap), "cuMipmappedArrayDestroy", 5000, "cuMipmappedArrayDestroy", nullptr, false)       \
  X(Memcpy3DAsync, (const Memcpy3D *, Stream), "cuMemcpy3DAsync", 3020, "cuMemcpy3DAsync_v2", nullptr, false)          \
  X(MemsetD2D8Async, (Ptr, size_t, unsigned char, size_t, size_t, Stream), "cuMemsetD2D8Async", 3020,                  \
    "cuMemsetD2D8Async", nullptr, false)                                                                               \
  X(TexObjectCreate, (TexObject *, const ResourceDesc *, const TextureDesc *, const void *), "cuTexObjectCreate",      \
    5000, "cuTexObjectCreate", nullptr, false)                                                                         \
  X(TexObjectDestroy, (TexObject), "cuTexObjectDestroy", 5000, "cuTexObjectDestroy", nullptr, false)                   \
  X(SurfObjectCreate, (TexObject *, const ResourceDesc *), "cuSurfObjectCreate", 5000, "cuSurfObjectCreate", nullptr,  \
    false)                                                                                                             \
  X(SurfObjectDestroy, (TexObject), "cuSurfObjectDestroy", 5000, "cuSurfObjectDestroy", nullptr, false)                \
  X(GraphCreate, (Graph *, unsigned), "cuGraphCreate", 10000, "cuGraphCreate", nullptr, false)                         \
  X(GraphDestroy, (Graph), "cuGraphDestroy", 10000, "cuGraphDestroy", nullptr, false)                                  \
  X(GraphConditionalHandleCreate, (CondHandle *, Graph, Ctx, unsigned, unsigned), "cuGraphConditionalHandleCreate",    \
    12030, "cuGraphConditionalHandleCreate", nullptr, false)                                                           \
  X(GraphAddKernelNode, (GraphNode *, Graph, const GraphNode *, size_t, const KernelNodeParams *),                     \
    "cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2", nullptr, false)                                          \
  X(GraphKernelNodeSetAttribute, (GraphNode, int, const void *), "cuGraphKernelNodeSetAttribute", 11000,               \
    "cuGraphKernelNodeSetAttribute", nullptr, false) /* value: a CUkernelNodeAttrValue (kAttrValueBytes) */            \
  X(GraphAddMemcpyNode, (GraphNode *, Graph, const GraphNode *, size_t, const Memcpy3D *, Ctx),                        \
    "cuGraphAddMemcpyNode", 10000, "cuGraphAddMemcpyNode", nullptr, false)                                             \
  X(GraphAddMemsetNode, (GraphNode *, Graph, const GraphNode *, size_t, const MemsetNodeParams *, Ctx),                \
    "cuGraphAddMemsetNode", 10000, "cuGraphAddMemsetNode", nullptr, false)                                             \
  X(GraphAddEmptyNode, (GraphNode *, Graph, const GraphNode *, size_t), "cuGraphAddEmptyNode", 10000,                  \
    "cuGraphAddEmptyNode", nullptr, false)                                                                             \
  X(GraphAddEventRecordNode, (GraphNode *, Graph, const GraphNode *, size_t, Event), "cuGraphAddEventRecordNode",      \
    11010, "cuGraphAddEventRecordNode", nullptr, false)                                                                \
  X(GraphAddEventWaitNode, (GraphNode *, Graph, const GraphNode *, size_t, Event), "cuGraphAddEventWaitNode", 11010,   \
    "cuGraphAddEventWaitNode", nullptr, false)                                                                         \
  X(GraphAddNode, (GraphNode *, Graph, const GraphNode *, const void *, size_t, GraphNodeParams *), "cuGraphAddNode",  \
    12040, "cuGraphAddNode_v2", nullptr, false) /* edge data: null */                                                  \
  X(GraphDestroyNode, (GraphNode), "cuGraphDestroyNode", 10000, "cuGraphDestroyNode", nullptr, false)                  \
  X(GraphInstantiateWithFlags, (GraphExec *, Graph, unsigned long long), "cuGraphInstantiateWithFlags", 11040,         \
    "cuGraphInstantiateWithFlags", nullptr, false)                                                                     \
  X(GraphExecDestroy, (GraphExec), "cuGraphExecDestroy", 10000, "cuGraphExecDestroy", nullptr, false)                  \
  X(GraphLaunch, (GraphExec, Stream), "cuGraphLaunch", 10000, "cuGraphLaunch", nullptr, false)                         \
  X(MemAddressReserve, (Ptr *, size_t, size_t, Ptr, unsigned long long), "cuMemAddressReserve", 10020,                 \
    "cuMemAddressReserve", nullptr, false)                                                                             \
  X(MemAddressFree, (Ptr, size_t), "cuMemAddressFree", 10020, "cuMemAddressFree", nullptr, false)                      \
  X(MemCreate, (MemHandle *, size_t, const MemAllocationProp *, unsigned long long), "cuMemCreate", 10020,             \
    "cuMemCreate", nullptr, false)                                                                                     \
  X(MemRelease, (MemHandle), "cuMemRelease", 10020, "cuMemRelease", nullptr, false)                                    \
  X(MemExportToShareableHandle, (void *, MemHandle, int, unsigned long long), "cuMemExportToShareableHandle", 10020,   \
    "cuMemExportToShareableHandle", nullptr, false) /* POSIX fd: an int */                                             \
  X(MemImportFromShareableHandle, (MemHandle *, void *, int), "cuMemImportFromShareableHandle", 10020,                 \
    "cuMemImportFromShareableHandle", nullptr, false) /* POSIX fd: the fd itself, as the pointer */                    \
  X(MemMap, (Ptr, size_t, size_t, MemHandle, unsigned long long), "cuMemMap", 10020, "cuMemMap", nullptr, false)       \
  X(MemUnmap, (Ptr, size_t), "cuMemUnmap", 10020, "cuMemUnmap", nullptr, false)                                        \
  X(MemSetAccess, (Ptr, size_t, const MemAccessDesc *, size_t), "cuMemSetAccess", 10020, "cuMemSetAccess", nullptr,    \
    false)                                                                                                             \
  X(LinkCreate, (unsigned, int *, void **, LinkState *), "cuLinkCreate", 6050, "cuLinkCreate_v2", nullptr,             \
    false) /* options: CUjit_option */                                                                                 \
  X(LinkAddData, (LinkState, int, void *, size_t, const char *, unsigned, int *, void **), "cuLinkAddData", 6050,      \
    "cuLinkAddData_v2", nullptr, false)                                                                                \
  X(LinkComplete, (LinkState, void **, size_t *), "cuLinkComplete", 5050, "cuLinkComplete", nullptr, false)            \
  X(LinkDestroy, (LinkState), "cuLinkDestroy", 5050, "cuLinkDestroy", nullptr, false)                                  \
  X(MemcpyPeer, (Ptr, Ctx, Ptr, Ctx, size_t), "cuMemcpyPeer", 4000, "cuMemcpyPeer", nullptr, false)                    \
  X(DeviceCanAccessPeer, (int *, Device, Device), "cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer", nullptr,     \
    false)                                                                                                             \
  X(DeviceGetP2PAttribute, (int *, int, Device, Device), "cuDeviceGetP2PAttribute", 8000, "cuDeviceGetP2PAttribute",   \
    nullptr, false)                                                                                                    \
  X(CtxEnablePeerAccess, (Ctx, unsigned), "cuCtxEnablePeerAccess", 4000, "cuCtxEnablePeerAccess", nullptr, false)      \
  X(CtxDisablePeerAccess, (Ctx), "cuCtxDisablePeerAccess", 4000, "cuCtxDisablePeerAccess", nullptr, false)             \
  X(IpcGetMemHandle, (IpcHandle *, Ptr), "cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle", nullptr, false)               \
  X(IpcOpenMemHandle, (Ptr *, IpcHandle, unsigned), "cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2",              \
    "cuIpcOpenMemHandle", false)                                                                                       \
  X(IpcCloseMemHandle, (Ptr), "cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle", nullptr, false)                      \
  X(IpcGetEventHandle, (IpcHandle *, Event), "cuIpcGetEventHandle", 4010, "cuIpcGetEventHandle", nullptr, false)       \
  X(IpcOpenEventHandle, (Event *, IpcHandle), "cuIpcOpenEventHandle", 4010, "cuIpcOpenEventHandle", nullptr, false)

struct Api {
#define QCUDA_CU_FIELD(name, params, base, version, symbol, alt, required) Result(*name) params;
  QCUDA_CU_API(QCUDA_CU_FIELD)
#undef QCUDA_CU_FIELD
};

struct ProbeResult {
  bool ok = false;
  std::string reason;   // why not, in plain words; "" when ok
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
