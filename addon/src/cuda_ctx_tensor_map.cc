// CudaContext's code call for Hopper's tensor memory accelerator: the
// descriptors (CUtensorMap) that cuBLASLt, cuDNN, CUTLASS and Triton encode
// on the host and pass to their kernels. Encoding is a pure host function of
// its arguments whose 128-byte result only NVIDIA's driver knows how to lay
// out, so the worker runs the driver's encoder and returns the bytes. The
// descriptor names a global address the kernels of this context will read
// and write; it reaches no further than a pointer passed to a kernel does.
#include <cstring>

#include "cuda_args.h"
#include "cuda_context.h"
#include "qcuda_proto.h"

namespace qcuda::cuda {

namespace {

// The encoder args.kind names, with the driver's check of every field; rank was checked by
// the backend to fit the arrays (1..5; 3..5 for im2col).
bool Encode(Job &job, const qcuda_args_tensor_map &t, cu::TensorMap *map) {
  const cu::Api &a = cu::api();
  void *addr = reinterpret_cast<void *>(static_cast<uintptr_t>(t.global_address));
  uint64_t dim[5], strides[4];  // the wire's __le64 is another type of the same bytes
  std::memcpy(dim, t.global_dim, sizeof(dim));
  std::memcpy(strides, t.global_strides, sizeof(strides));
  switch (t.kind) {
    case 0:
      return Have(job, a.TensorMapEncodeTiled, "cuTensorMapEncodeTiled") &&
             job.Check(a.TensorMapEncodeTiled(map, t.data_type, t.rank, addr, dim, strides, t.box_dim,
                                              t.element_strides, t.interleave, t.swizzle, t.l2_promotion, t.oob_fill),
                       "cuTensorMapEncodeTiled");
    case 1: {
      int lower[3], upper[3];
      std::memcpy(lower, t.lower_corner, sizeof(lower));
      std::memcpy(upper, t.upper_corner, sizeof(upper));
      return Have(job, a.TensorMapEncodeIm2col, "cuTensorMapEncodeIm2col") &&
             job.Check(a.TensorMapEncodeIm2col(map, t.data_type, t.rank, addr, dim, strides, lower, upper,
                                               t.channels_per_pixel, t.pixels_per_column, t.element_strides,
                                               t.interleave, t.swizzle, t.l2_promotion, t.oob_fill),
                       "cuTensorMapEncodeIm2col");
    }
    case 2:
      return Have(job, a.TensorMapEncodeIm2colWide, "cuTensorMapEncodeIm2colWide") &&
             job.Check(a.TensorMapEncodeIm2colWide(
                           map, t.data_type, t.rank, addr, dim, strides, static_cast<int>(t.lower_corner[0]),
                           static_cast<int>(t.upper_corner[0]), t.channels_per_pixel, t.pixels_per_column,
                           t.element_strides, t.interleave, t.wide_mode, t.swizzle, t.l2_promotion, t.oob_fill),
                       "cuTensorMapEncodeIm2colWide");
    default:
      std::memcpy(map->words, t.map, sizeof(map->words));
      return Have(job, a.TensorMapReplaceAddress, "cuTensorMapReplaceAddress") &&
             job.Check(a.TensorMapReplaceAddress(map, addr), "cuTensorMapReplaceAddress");
  }
}

}  // namespace

// tensorMapEncode(args) -> the 128-byte CUtensorMap: args is a checked qcuda_args_tensor_map.
QCUDA_CONTEXT_METHOD(tensorMapEncode, ctx, info) {
  std::vector<uint8_t> raw = ArgBytes(info[0], "args");
  if (raw.size() != sizeof(qcuda_args_tensor_map))
    throw Napi::TypeError::New(info.Env(), "tensorMapEncode: args of the wrong size");
  qcuda_args_tensor_map t;
  std::memcpy(&t, raw.data(), sizeof(t));
  return ctx.Submit(info, Where::kInlineWhenIdle, [t](Job &job) -> res::Bytes {
    cu::TensorMap map = {};
    if (!Encode(job, t, &map)) return {};
    const auto *b = reinterpret_cast<const uint8_t *>(map.words);
    return {std::vector<uint8_t>(b, b + sizeof(map.words))};
  });
}

}  // namespace qcuda::cuda
