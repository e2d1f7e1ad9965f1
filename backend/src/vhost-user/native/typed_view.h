// The memory of a typed array passed in from JS, for the native code that
// works on it in place (a ring's views, a cursor, a record): checked for
// kind, length and alignment once, where it comes in. Header-only: both
// addons (vhost_user_bench's ring_loop.cc, qcuda_cuda's cuda_ring_server.cc) use it.
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace vhost_user {

/** v's memory, as at least atLeast Ts; a TypeError or RangeError, naming what, otherwise. */
template <typename T>
T *TypedView(const Napi::Value &v, size_t atLeast, const std::string &what) {
  if (!v.IsTypedArray()) throw Napi::TypeError::New(v.Env(), what + " must be a typed array");
  Napi::TypedArray a = v.As<Napi::TypedArray>();
  if (a.ByteLength() < atLeast * sizeof(T) || a.ByteOffset() % alignof(T) != 0)
    throw Napi::RangeError::New(v.Env(), what + " is too short or misaligned");
  return reinterpret_cast<T *>(static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset());
}

}  // namespace vhost_user
