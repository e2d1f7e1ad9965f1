// Errors from system calls become JS exceptions carrying errno, its code (EBADF) and the call.
#pragma once
#include <napi.h>

namespace qcuda {
[[noreturn]] void ThrowErrno(Napi::Env env, const char *call, int err);
[[noreturn]] void ThrowRange(Napi::Env env, const std::string &msg);
int32_t ArgFd(const Napi::CallbackInfo &info, size_t i);
}  // namespace qcuda
