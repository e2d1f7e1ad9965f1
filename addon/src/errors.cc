#include "errors.h"

#include <uv.h>

#include <cstring>

namespace qcuda {

void ThrowErrno(Napi::Env env, const char *call, int err) {
  Napi::Error e = Napi::Error::New(env, std::string(call) + ": " + strerror(err));
  e.Set("errno", Napi::Number::New(env, err));
  e.Set("code", Napi::String::New(env, uv_err_name(-err)));  // "EBADF", as Node's SystemError says it (libuv's codes are -errno)
  e.Set("syscall", Napi::String::New(env, call));
  throw e;
}

void ThrowRange(Napi::Env env, const std::string &msg) {
  throw Napi::RangeError::New(env, msg);
}

int32_t ArgFd(const Napi::CallbackInfo &info, size_t i) {
  if (info.Length() <= i || !info[i].IsNumber()) ThrowRange(info.Env(), "fd argument must be a number");
  int32_t fd = info[i].As<Napi::Number>().Int32Value();
  if (fd < 0) ThrowRange(info.Env(), "fd argument must be >= 0");
  return fd;
}

}  // namespace qcuda
