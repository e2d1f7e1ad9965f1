// CudaContext's JIT linking: cuLinkCreate, cuLinkAddData of each input, cuLinkComplete, the
// cubin copied out, cuLinkDestroy, all in one job on the context thread (the linker needs the
// context current, and its state lives only for the job: nothing of it outlives the call).
// The inputs reach the driver's linker unchecked, in the guest process's own worker, as module
// images reach its loader; the cubin it makes is checked and counted when the guest loads it.
#include <cstring>

#include "cuda_args.h"
#include "cuda_context.h"
#include "cuda_image.h"

namespace qcuda::cuda {

namespace {

using cu::kJitWallTime, cu::kJitInfoLogBuffer, cu::kJitInfoLogBufferSizeBytes, cu::kJitErrorLogBuffer,
    cu::kJitErrorLogBufferSizeBytes;
// Each log's bytes at most: what a guest can ask for is bounded by what is kept.
constexpr size_t kLogBytes = 64 * 1024;
// The largest cubin copied out (QCUDA_MAX_MODULE: the guest loads it as a module).
constexpr size_t kMaxImage = 64u << 20;
constexpr size_t kHeader = 24;

struct LinkInput {
  int type;
  std::string name;
  std::vector<uint8_t> data;  // the input and kImagePadding zeros (a PTX input is read up to a NUL)
};

void PutU32(std::vector<uint8_t> &b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

// The result as native-cuda.ts's link() describes it.
std::vector<uint8_t> Pack(cu::Result status, const uint8_t *image, size_t imageLen, const char *info, const char *error,
                          float wallMs) {
  size_t infoLen = strnlen(info, kLogBytes), errorLen = strnlen(error, kLogBytes);
  std::vector<uint8_t> b(kHeader + imageLen + infoLen + errorLen, 0);
  PutU32(b, 0, static_cast<uint32_t>(status));
  PutU32(b, 4, static_cast<uint32_t>(imageLen));
  PutU32(b, 8, static_cast<uint32_t>(infoLen));
  PutU32(b, 12, static_cast<uint32_t>(errorLen));
  std::memcpy(b.data() + 16, &wallMs, 4);
  if (imageLen != 0) std::memcpy(b.data() + kHeader, image, imageLen);
  std::memcpy(b.data() + kHeader + imageLen, info, infoLen);
  std::memcpy(b.data() + kHeader + imageLen + infoLen, error, errorLen);
  return b;
}

std::vector<LinkInput> ArgInputs(const Napi::Value &v) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), "inputs must be an array");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<LinkInput> out;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a[i];
    if (!e.IsObject()) throw Napi::TypeError::New(v.Env(), "each input must be {type, name, data}");
    Napi::Object o = e.As<Napi::Object>();
    Napi::Uint8Array d = ArgUint8Array(o.Get("data"), "input data");
    Napi::Value name = o.Get("name");
    if (!name.IsString()) throw Napi::TypeError::New(v.Env(), "input name must be a string");
    LinkInput in{ArgI32(o.Get("type"), "input type"), name.As<Napi::String>().Utf8Value(),
                 std::vector<uint8_t>(d.ByteLength() + kImagePadding, 0)};
    if (d.ByteLength() != 0) std::memcpy(in.data.data(), d.Data(), d.ByteLength());
    out.push_back(std::move(in));
  }
  return out;
}

// The options as cuLinkCreate takes them: integers in the pointer-sized values.
std::vector<std::pair<int, uintptr_t>> ArgOptions(const Napi::Value &v) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), "options must be an array");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<std::pair<int, uintptr_t>> out;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a[i];
    if (!e.IsArray() || e.As<Napi::Array>().Length() != 2)
      throw Napi::TypeError::New(v.Env(), "each option must be [option, value]");
    Napi::Array p = e.As<Napi::Array>();
    out.emplace_back(ArgI32(p[0u], "option"), ArgU32(p[1u], "option value"));
  }
  return out;
}

}  // namespace

// link(inputs, options) -> Uint8Array: see native-cuda.ts. A link the driver refuses (bad PTX,
// an unresolved symbol) resolves with its CUresult and logs; a missing entry point, or a cubin
// larger than kMaxImage, fails the call.
QCUDA_CONTEXT_METHOD(link, ctx, info) {
  auto inputs = std::make_shared<std::vector<LinkInput>>(ArgInputs(info[0]));
  auto options = ArgOptions(info[1]);
  // kContextThreadOnly: a link JITs for milliseconds to seconds, as a module load does; the JS
  // thread keeps answering meanwhile.
  return ctx.Submit(info, Where::kContextThreadOnly, [inputs, options](Job &job) -> res::Bytes {
    const cu::Api &api = cu::api();
    if (!Have(job, api.LinkCreate, "cuLinkCreate_v2") || !Have(job, api.LinkAddData, "cuLinkAddData_v2") ||
        !Have(job, api.LinkComplete, "cuLinkComplete") || !Have(job, api.LinkDestroy, "cuLinkDestroy"))
      return {};
    std::vector<char> infoLog(kLogBytes + 1, 0), errorLog(kLogBytes + 1, 0);
    std::vector<int> keys = {kJitWallTime, kJitInfoLogBuffer, kJitInfoLogBufferSizeBytes, kJitErrorLogBuffer,
                             kJitErrorLogBufferSizeBytes};
    std::vector<void *> values = {nullptr, infoLog.data(), reinterpret_cast<void *>(kLogBytes), errorLog.data(),
                                  reinterpret_cast<void *>(kLogBytes)};
    for (auto [k, v] : options) {
      keys.push_back(k);
      values.push_back(reinterpret_cast<void *>(v));
    }
    cu::LinkState ls = nullptr;
    cu::Result r = api.LinkCreate(static_cast<unsigned>(keys.size()), keys.data(), values.data(), &ls);
    if (r != cu::kSuccess) return {Pack(r, nullptr, 0, infoLog.data(), errorLog.data(), 0)};
    for (LinkInput &in : *inputs) {
      size_t n = in.data.size() - kImagePadding;
      r = api.LinkAddData(ls, in.type, in.data.data(), n, in.name.c_str(), 0, nullptr, nullptr);
      if (r != cu::kSuccess) break;
    }
    void *cubin = nullptr;
    size_t size = 0;
    if (r == cu::kSuccess) r = api.LinkComplete(ls, &cubin, &size);
    if (r == cu::kSuccess && size > kMaxImage) {
      api.LinkDestroy(ls);
      job.Fail(cu::kNotSupported, "qcuda: the linked cubin has " + std::to_string(size) + " bytes, more than " +
                                      std::to_string(kMaxImage));
      return {};
    }
    float wallMs = 0;
    std::memcpy(&wallMs, &values[0], sizeof wallMs);  // the driver writes a float into the option's value
    res::Bytes out{Pack(r, r == cu::kSuccess ? static_cast<const uint8_t *>(cubin) : nullptr,
                        r == cu::kSuccess ? size : 0, infoLog.data(), errorLog.data(), wallMs)};
    api.LinkDestroy(ls);
    return out;
  });
}

}  // namespace qcuda::cuda
