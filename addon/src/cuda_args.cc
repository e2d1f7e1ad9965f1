// The CUDA addon's argument checks (see cuda_args.h).
#include "cuda_args.h"

#include <cmath>

namespace qcuda::cuda {

namespace {
// A number as a u64: a whole number from 0 to 2^53 - 1 (beyond, doubles skip integers).
uint64_t WholeNumber(Napi::Env env, double d, const char *what) {
  if (!(d >= 0) || d > 9007199254740991.0 || d != std::floor(d))
    throw Napi::RangeError::New(env, std::string(what) + " must be a non-negative integer");
  return static_cast<uint64_t>(d);
}
}  // namespace

uint64_t ArgU64(const Napi::Value &v, const char *what) {
  Napi::Env env = v.Env();
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) throw Napi::RangeError::New(env, std::string(what) + " out of range");
    return x;
  }
  if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string(what) + " must be a bigint or a number");
  return WholeNumber(env, v.As<Napi::Number>().DoubleValue(), what);
}

uint32_t ArgId(const Napi::Value &v, const char *what) {
  if (v.IsUndefined() || v.IsNull()) return 0;
  uint64_t x = ArgU64(v, what);
  if (x > 0xffffffffu) throw Napi::RangeError::New(v.Env(), std::string(what) + " out of range");
  return static_cast<uint32_t>(x);
}

uint32_t ArgU32(const Napi::Value &v, const char *what) {
  if (v.IsUndefined()) return 0;
  return ArgId(v, what);
}

int32_t ArgI32(const Napi::Value &v, const char *what) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != std::floor(d))
    throw Napi::RangeError::New(v.Env(), std::string(what) + " must be a 32-bit integer");
  return static_cast<int32_t>(d);
}

int32_t ArgI32Or(const Napi::Value &v, int32_t otherwise) {
  return v.IsNumber() ? v.As<Napi::Number>().Int32Value() : otherwise;
}

namespace {
void AddSeg(Napi::Env env, std::vector<Seg> &out, Seg s) {
  if (s.addr + s.len < s.addr) throw Napi::RangeError::New(env, "segment wraps around");
  if (s.len != 0) out.push_back(s);
}
}  // namespace

std::vector<Seg> ArgSegs(const Napi::Value &v) {
  Napi::Env env = v.Env();
  std::vector<Seg> out;
  // The quick form (packSegs, native-cuda.ts): one typed array read at once,
  // where each {addr, len} object costs two property lookups by name.
  if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_float64_array) {
    Napi::Float64Array a = v.As<Napi::Float64Array>();
    size_t n = a.ElementLength();
    if (n % 2 != 0) throw Napi::TypeError::New(env, "segments must be [addr, len] pairs");
    out.reserve(n / 2);
    const double *d = a.Data();
    for (size_t i = 0; i < n; i += 2)
      AddSeg(env, out, {WholeNumber(env, d[i], "segment addr"), WholeNumber(env, d[i + 1], "segment len")});
    return out;
  }
  if (!v.IsArray()) throw Napi::TypeError::New(env, "segments must be an array of {addr, len}");
  Napi::Array a = v.As<Napi::Array>();
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    if (!e.IsObject()) throw Napi::TypeError::New(env, "segments must be an array of {addr, len}");
    Napi::Object o = e.As<Napi::Object>();
    AddSeg(env, out, {ArgU64(o.Get("addr"), "segment addr"), ArgU64(o.Get("len"), "segment len")});
  }
  return out;
}

Napi::Uint8Array ArgUint8Array(const Napi::Value &v, const char *what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a Uint8Array");
  return v.As<Napi::Uint8Array>();
}

std::vector<uint8_t> ArgBytes(const Napi::Value &v, const char *what) {
  Napi::Uint8Array a = ArgUint8Array(v, what);
  return std::vector<uint8_t>(a.Data(), a.Data() + a.ByteLength());
}

namespace {
// The values of a typed array of element T (type: its napi type), copied.
template <typename T>
std::vector<T> ArgTyped(const Napi::Value &v, napi_typedarray_type type, const char *what, const char *typeName) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a " + typeName);
  Napi::TypedArrayOf<T> a = v.As<Napi::TypedArrayOf<T>>();
  return std::vector<T>(a.Data(), a.Data() + a.ElementLength());
}
}  // namespace

std::vector<uint64_t> ArgU64s(const Napi::Value &v, const char *what) {
  return ArgTyped<uint64_t>(v, napi_biguint64_array, what, "BigUint64Array");
}

std::vector<uint32_t> ArgU32s(const Napi::Value &v, const char *what) {
  return ArgTyped<uint32_t>(v, napi_uint32_array, what, "Uint32Array");
}

std::string ArgName(const Napi::Value &v) {
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), "name must be a string");
  std::string s = v.As<Napi::String>().Utf8Value();
  if (s.find('\0') != std::string::npos) throw Napi::TypeError::New(v.Env(), "name has a NUL");
  return s;
}

void ArgDims(const Napi::Value &v, const char *what, unsigned out[3]) {
  // The quick form (packDim3, native-cuda.ts): a Uint32Array of 3, read at once; an array costs a lookup per element.
  if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint32_array) {
    Napi::Uint32Array a = v.As<Napi::Uint32Array>();
    if (a.ElementLength() != 3) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be 3 values");
    for (uint32_t i = 0; i < 3; i++) out[i] = a[i];
    return;
  }
  if (!v.IsArray() || v.As<Napi::Array>().Length() != 3)
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an array of 3");
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < 3; i++) out[i] = ArgU32(a.Get(i), what);
}

}  // namespace qcuda::cuda
