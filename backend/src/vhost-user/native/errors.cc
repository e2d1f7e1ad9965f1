#include "errors.h"

#include <uv.h>

#include <cstring>

namespace vhost_user {

void ThrowErrno(Napi::Env env, const char *call, int err) {
  Napi::Error e = Napi::Error::New(env, std::string(call) + ": " + strerror(err));
  e.Set("errno", Napi::Number::New(env, err));
  e.Set("code", Napi::String::New(
                    env, uv_err_name(-err)));  // "EBADF", as Node's SystemError says it (libuv's codes are -errno)
  e.Set("syscall", Napi::String::New(env, call));
  throw e;
}

void ThrowRange(Napi::Env env, const std::string &msg) { throw Napi::RangeError::New(env, msg); }

uint64_t ArgU64(const Napi::CallbackInfo &info, size_t i, const char *what, uint64_t max) {
  const std::string range = std::string(what) + " must be an integer from 0 to " + std::to_string(max);
  if (info.Length() <= i) ThrowRange(info.Env(), std::string(what) + " is required");
  uint64_t v;
  if (info[i].IsBigInt()) {
    bool lossless;
    v = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) ThrowRange(info.Env(), range);
  } else {
    double d = info[i].IsNumber() ? info[i].As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0) || d > 9007199254740991.0 || d != static_cast<double>(static_cast<uint64_t>(d)))
      ThrowRange(info.Env(), range);
    v = static_cast<uint64_t>(d);
  }
  if (v > max) ThrowRange(info.Env(), range);
  return v;
}

int32_t ArgFd(const Napi::CallbackInfo &info, size_t i) {
  if (info.Length() <= i || !info[i].IsNumber()) ThrowRange(info.Env(), "fd argument must be a number");
  int32_t fd = info[i].As<Napi::Number>().Int32Value();
  if (fd < 0) ThrowRange(info.Env(), "fd argument must be >= 0");
  return fd;
}

}  // namespace vhost_user
