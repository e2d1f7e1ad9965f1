// Where the CUDA toolkit's headers are installed, check the addon's own
// declarations (cuda_api.h) against them at compile time. Elsewhere this file
// compiles to nothing: the addon never needs CUDA to build.
#if defined(__has_include)
#if __has_include(<cuda.h>) && __has_include(<cudaTypedefs.h>) && __has_include(<driver_types.h>)
#include <cstddef>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <driver_types.h>

#include <type_traits>

#include "cuda_api.h"

namespace qc = qcuda::cu;

static_assert(sizeof(qc::Ptr) == sizeof(CUdeviceptr), "CUdeviceptr");
static_assert(sizeof(qc::Device) == sizeof(CUdevice), "CUdevice");
static_assert(sizeof(qc::Uuid) == sizeof(CUuuid), "CUuuid");
static_assert(sizeof(qc::Memcpy3D) == sizeof(CUDA_MEMCPY3D) &&
                  offsetof(qc::Memcpy3D, dstXInBytes) == offsetof(CUDA_MEMCPY3D, dstXInBytes) &&
                  offsetof(qc::Memcpy3D, srcArray) == offsetof(CUDA_MEMCPY3D, srcArray) &&
                  offsetof(qc::Memcpy3D, dstArray) == offsetof(CUDA_MEMCPY3D, dstArray) &&
                  offsetof(qc::Memcpy3D, WidthInBytes) == offsetof(CUDA_MEMCPY3D, WidthInBytes),
              "CUDA_MEMCPY3D");
static_assert(sizeof(qc::LaunchAttribute) == sizeof(CUlaunchAttribute) &&
                  offsetof(qc::LaunchAttribute, value) == offsetof(CUlaunchAttribute, value),
              "CUlaunchAttribute");
static_assert(sizeof(qc::LaunchConfig) == sizeof(CUlaunchConfig) &&
                  offsetof(qc::LaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream) &&
                  offsetof(qc::LaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs),
              "CUlaunchConfig");
// The values, as ints: two enums of different types compared are a
// -Wenum-compare error.
static_assert(int{qc::kLaunchAttributeCooperative} == CU_LAUNCH_ATTRIBUTE_COOPERATIVE &&
                  int{qc::kLaunchAttributeClusterDimension} == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION &&
                  int{qc::kLaunchAttributeClusterSchedulingPolicy} ==
                      CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
              "");
static_assert(sizeof(qc::TensorMap) == sizeof(CUtensorMap) && alignof(qc::TensorMap) == alignof(CUtensorMap),
              "CUtensorMap");

static_assert(sizeof(qc::Array3DDescriptor) == sizeof(CUDA_ARRAY3D_DESCRIPTOR) &&
                  offsetof(qc::Array3DDescriptor, Flags) == offsetof(CUDA_ARRAY3D_DESCRIPTOR, Flags),
              "CUDA_ARRAY3D_DESCRIPTOR");
static_assert(sizeof(qc::ResourceDesc) == sizeof(CUDA_RESOURCE_DESC) &&
                  offsetof(qc::ResourceDesc, flags) == offsetof(CUDA_RESOURCE_DESC, flags) &&
                  offsetof(qc::ResourceDesc, res.pitch2D.pitchInBytes) ==
                      offsetof(CUDA_RESOURCE_DESC, res.pitch2D.pitchInBytes),
              "CUDA_RESOURCE_DESC");
static_assert(sizeof(qc::TextureDesc) == sizeof(CUDA_TEXTURE_DESC) &&
                  offsetof(qc::TextureDesc, borderColor) == offsetof(CUDA_TEXTURE_DESC, borderColor),
              "CUDA_TEXTURE_DESC");
static_assert(static_cast<int>(qc::kMemHost) == static_cast<int>(CU_MEMORYTYPE_HOST) &&
                  static_cast<int>(qc::kMemDevice) == static_cast<int>(CU_MEMORYTYPE_DEVICE) &&
                  static_cast<int>(qc::kMemArray) == static_cast<int>(CU_MEMORYTYPE_ARRAY),
              "CUmemorytype");
static_assert(static_cast<int>(qc::kResMipmap) == static_cast<int>(CU_RESOURCE_TYPE_MIPMAPPED_ARRAY), "CUresourcetype");
static_assert(static_cast<int>(qc::kResArray) == static_cast<int>(CU_RESOURCE_TYPE_ARRAY) &&
                  static_cast<int>(qc::kResLinear) == static_cast<int>(CU_RESOURCE_TYPE_LINEAR) &&
                  static_cast<int>(qc::kResPitch2D) == static_cast<int>(CU_RESOURCE_TYPE_PITCH2D),
              "CUresourcetype");
static_assert(sizeof(qc::Result) == sizeof(CUresult), "CUresult");
static_assert(sizeof(qc::KernelNodeParams) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2) &&
                  offsetof(qc::KernelNodeParams, extra) == offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra) &&
                  offsetof(qc::KernelNodeParams, ctx) == offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx),
              "CUDA_KERNEL_NODE_PARAMS_v2");
static_assert(sizeof(qc::MemsetNodeParams) == sizeof(CUDA_MEMSET_NODE_PARAMS) &&
                  offsetof(qc::MemsetNodeParams, width) == offsetof(CUDA_MEMSET_NODE_PARAMS, width),
              "CUDA_MEMSET_NODE_PARAMS");
static_assert(sizeof(qc::ConditionalNodeParams) == sizeof(CUDA_CONDITIONAL_NODE_PARAMS) &&
                  offsetof(qc::ConditionalNodeParams, phGraph_out) ==
                      offsetof(CUDA_CONDITIONAL_NODE_PARAMS, phGraph_out) &&
                  offsetof(qc::ConditionalNodeParams, ctx) == offsetof(CUDA_CONDITIONAL_NODE_PARAMS, ctx),
              "CUDA_CONDITIONAL_NODE_PARAMS");
static_assert(sizeof(qc::GraphNodeParams) == sizeof(CUgraphNodeParams) &&
                  offsetof(qc::GraphNodeParams, conditional) == offsetof(CUgraphNodeParams, conditional),
              "CUgraphNodeParams");
static_assert(qc::kGraphNodeConditional == CU_GRAPH_NODE_TYPE_CONDITIONAL, "");
static_assert(sizeof(qc::CondHandle) == sizeof(CUgraphConditionalHandle), "");
static_assert(qc::kEventDisableTiming == CU_EVENT_DISABLE_TIMING && qc::kEventBlockingSync == CU_EVENT_BLOCKING_SYNC,
              "");
static_assert(qc::kHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE, "");
static_assert(qc::kHostRegisterDeviceMap == CU_MEMHOSTREGISTER_DEVICEMAP, "");
static_assert(qc::kCtxMapHost == CU_CTX_MAP_HOST, "");
static_assert(qc::kJitWallTime == CU_JIT_WALL_TIME && qc::kJitInfoLogBuffer == CU_JIT_INFO_LOG_BUFFER &&
                  qc::kJitInfoLogBufferSizeBytes == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES &&
                  qc::kJitErrorLogBuffer == CU_JIT_ERROR_LOG_BUFFER &&
                  qc::kJitErrorLogBufferSizeBytes == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
              "CUjit_option");
static_assert(qc::kNumAttrs > CU_DEVICE_ATTRIBUTE_MAX - 1, "QCUDA_NUM_ATTRS covers every attribute");
static_assert(static_cast<int>(qc::kInvalidValue) == static_cast<int>(CUDA_ERROR_INVALID_VALUE) &&
                  static_cast<int>(qc::kOutOfMemory) == static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY),
              "");
static_assert(static_cast<int>(qc::kNoDevice) == static_cast<int>(CUDA_ERROR_NO_DEVICE) &&
                  static_cast<int>(qc::kInvalidHandle) == static_cast<int>(CUDA_ERROR_INVALID_HANDLE),
              "");
static_assert(static_cast<int>(qc::kNotReady) == static_cast<int>(CUDA_ERROR_NOT_READY) &&
                  static_cast<int>(qc::kContextIsDestroyed) == static_cast<int>(CUDA_ERROR_CONTEXT_IS_DESTROYED),
              "");
static_assert(static_cast<int>(qc::kInvalidContext) == static_cast<int>(CUDA_ERROR_INVALID_CONTEXT) &&
                  static_cast<int>(qc::kUnknown) == static_cast<int>(CUDA_ERROR_UNKNOWN),
              "");
static_assert(sizeof(qc::Module) == sizeof(CUmodule) && sizeof(qc::Function) == sizeof(CUfunction), "");
static_assert(static_cast<int>(qc::kNotFound) == static_cast<int>(CUDA_ERROR_NOT_FOUND), "");
static_assert(static_cast<int>(qc::kInvalidImage) == static_cast<int>(CUDA_ERROR_INVALID_IMAGE) &&
                  static_cast<int>(qc::kInvalidImage) == static_cast<int>(cudaErrorInvalidKernelImage),
              "");
static_assert(static_cast<int>(qc::kOperatingSystem) == static_cast<int>(CUDA_ERROR_OPERATING_SYSTEM) &&
                  static_cast<int>(qc::kOperatingSystem) == static_cast<int>(cudaErrorOperatingSystem),
              "");
static_assert(qc::kLaunchParamEnd == CU_LAUNCH_PARAM_END_AS_INT &&
                  qc::kLaunchParamBufferPointer == CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT &&
                  qc::kLaunchParamBufferSize == CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT,
              "");
static_assert(static_cast<int>(qc::kHostMemoryNotRegistered) == static_cast<int>(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
              "");

// Function attributes, limits and stream attributes cross with the runtime's
// numbers and layouts and reach the driver unchanged.
static_assert(qc::kNumFuncAttrs == CU_FUNC_ATTRIBUTE_MAX, "QCUDA_NUM_FUNC_ATTRS");
static_assert(static_cast<int>(cudaFuncAttributeMaxDynamicSharedMemorySize) ==
                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
                  static_cast<int>(cudaFuncAttributePreferredSharedMemoryCarveout) ==
                      CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT &&
                  static_cast<int>(cudaFuncAttributeClusterSchedulingPolicyPreference) ==
                      CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE &&
                  static_cast<int>(cudaFuncAttributeMax) == CU_FUNC_ATTRIBUTE_MAX,
              "cudaFuncAttribute == CUfunction_attribute");
static_assert(static_cast<int>(cudaLimitStackSize) == CU_LIMIT_STACK_SIZE &&
                  static_cast<int>(cudaLimitMallocHeapSize) == CU_LIMIT_MALLOC_HEAP_SIZE &&
                  static_cast<int>(cudaLimitPersistingL2CacheSize) == CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
              "cudaLimit == CUlimit");
static_assert(qc::kAttrValueBytes == sizeof(CUstreamAttrValue) &&
                  sizeof(cudaLaunchAttributeValue) == sizeof(CUstreamAttrValue),
              "QCUDA_ATTR_VALUE_BYTES");
static_assert(static_cast<int>(cudaLaunchAttributeAccessPolicyWindow) == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW &&
                  static_cast<int>(cudaLaunchAttributeSynchronizationPolicy) ==
                      CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
                  static_cast<int>(cudaLaunchAttributePriority) == CU_LAUNCH_ATTRIBUTE_PRIORITY &&
                  static_cast<int>(cudaLaunchAttributeMemSyncDomainMap) == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP &&
                  static_cast<int>(cudaLaunchAttributeMemSyncDomain) == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN &&
                  static_cast<int>(cudaLaunchAttributeNvlinkUtilCentricScheduling) ==
                      CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
              "cudaStreamAttrID == CUstreamAttrID");
static_assert(offsetof(CUaccessPolicyWindow, num_bytes) == 8 && offsetof(CUaccessPolicyWindow, hitRatio) == 16 &&
                  offsetof(CUaccessPolicyWindow, hitProp) == 20 && offsetof(CUaccessPolicyWindow, missProp) == 24 &&
                  sizeof(CUaccessPolicyWindow) == sizeof(cudaAccessPolicyWindow),
              "the access policy window layout commands.ts encodes");
static_assert(offsetof(CUlaunchMemSyncDomainMap, default_) == 0 && offsetof(CUlaunchMemSyncDomainMap, remote) == 1, "");

// Entry points' signatures (cuda_api.h's Api), against the toolkit's PFN_* typedefs of the
// ABI version cuda_api.cc asks for: the addon's opaque types stand for the driver's.
template <typename T>
struct Real {
  using type = T;
};
template <typename T>
struct Real<T *> {
  using type = typename Real<T>::type *;
};
template <>
struct Real<qc::Stream> {
  using type = CUstream;
};
template <typename... A>
struct Real<qc::Result (*)(A...)> {  // qc::Result is int: it stands for CUresult only as the return type
  using type = CUresult(CUDAAPI *)(typename Real<A>::type...);
};
template <typename Fp, typename Pfn>
constexpr bool kSameSignature = std::is_same_v<typename Real<Fp>::type, Pfn>;
static_assert(kSameSignature<decltype(qc::Api::CtxGetStreamPriorityRange), PFN_cuCtxGetStreamPriorityRange_v5050>, "");
static_assert(kSameSignature<decltype(qc::Api::StreamGetPriority), PFN_cuStreamGetPriority_v5050>, "");
static_assert(kSameSignature<decltype(qc::Api::CtxResetPersistingL2Cache), PFN_cuCtxResetPersistingL2Cache_v11000>, "");
template <>
struct Real<const qc::MemAllocationProp> {
  using type = const CUmemAllocationProp;
};
template <>
struct Real<const qc::MemAccessDesc> {
  using type = const CUmemAccessDesc;
};
static_assert(kSameSignature<decltype(qc::Api::MemAddressReserve), PFN_cuMemAddressReserve_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemAddressFree), PFN_cuMemAddressFree_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemCreate), PFN_cuMemCreate_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemRelease), PFN_cuMemRelease_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemMap), PFN_cuMemMap_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemUnmap), PFN_cuMemUnmap_v10020>, "");
static_assert(kSameSignature<decltype(qc::Api::MemSetAccess), PFN_cuMemSetAccess_v10020>, "");

// Virtual memory management's structs and constants (cuda_ctx_vmm.cc).
static_assert(sizeof(qc::MemAllocationProp) == sizeof(CUmemAllocationProp) &&
                  offsetof(qc::MemAllocationProp, location) == offsetof(CUmemAllocationProp, location) &&
                  offsetof(qc::MemAllocationProp, win32HandleMetaData) ==
                      offsetof(CUmemAllocationProp, win32HandleMetaData) &&
                  offsetof(qc::MemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags),
              "CUmemAllocationProp");
static_assert(sizeof(qc::MemAccessDesc) == sizeof(CUmemAccessDesc) &&
                  offsetof(qc::MemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags),
              "CUmemAccessDesc");
static_assert(sizeof(qc::MemHandle) == sizeof(CUmemGenericAllocationHandle), "");
static_assert(qc::kMemAllocationTypePinned == CU_MEM_ALLOCATION_TYPE_PINNED &&
                  qc::kMemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE &&
                  qc::kMemAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
              "");

// The runtime's numbers for the codes whose names differ (cuda_shared_errors.h
// lists the shared numbers; cuda_api.cc maps by number).
static_assert(CUDA_ERROR_OUT_OF_MEMORY == static_cast<int>(cudaErrorMemoryAllocation), "");
static_assert(CUDA_ERROR_NOT_INITIALIZED == static_cast<int>(cudaErrorInitializationError), "");
static_assert(CUDA_ERROR_DEINITIALIZED == static_cast<int>(cudaErrorCudartUnloading), "");
static_assert(CUDA_ERROR_INVALID_IMAGE == static_cast<int>(cudaErrorInvalidKernelImage), "");
static_assert(CUDA_ERROR_INVALID_CONTEXT == static_cast<int>(cudaErrorDeviceUninitialized), "");
static_assert(CUDA_ERROR_NO_BINARY_FOR_GPU == static_cast<int>(cudaErrorNoKernelImageForDevice), "");
static_assert(CUDA_ERROR_INVALID_HANDLE == static_cast<int>(cudaErrorInvalidResourceHandle), "");
static_assert(CUDA_ERROR_NOT_FOUND == static_cast<int>(cudaErrorSymbolNotFound), "");
static_assert(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE == static_cast<int>(cudaErrorSetOnActiveProcess), "");
static_assert(CUDA_ERROR_LAUNCH_FAILED == static_cast<int>(cudaErrorLaunchFailure), "");
static_assert(CUDA_ERROR_ILLEGAL_ADDRESS == static_cast<int>(cudaErrorIllegalAddress), "");
static_assert(CUDA_ERROR_NOT_SUPPORTED == static_cast<int>(cudaErrorNotSupported), "");

#endif
#endif
