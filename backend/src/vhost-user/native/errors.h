// Errors from system calls become JS exceptions carrying errno, its code (EBADF) and the call.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>

namespace vhost_user {
[[noreturn]] void ThrowErrno(Napi::Env env, const char *call, int err);
[[noreturn]] void ThrowRange(Napi::Env env, const std::string &msg);
int32_t ArgFd(const Napi::CallbackInfo &info, size_t i);
// Argument i as an integer from 0 to max: a bigint, or a number that is a safe integer; else RangeError naming `what`.
uint64_t ArgU64(const Napi::CallbackInfo &info, size_t i, const char *what, uint64_t max = UINT64_MAX);
}  // namespace vhost_user
