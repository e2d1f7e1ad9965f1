// eventfds: the kick and call doorbells of a virtqueue.
#include "eventfd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "errors.h"

namespace qcuda {

int64_t DrainEventfd(int fd) {
  uint64_t v;
  ssize_t r;
  do r = read(fd, &v, sizeof(v));
  while (r < 0 && errno == EINTR);
  if (r != sizeof(v)) return -1;
  return static_cast<int64_t>(v);
}

namespace {

Napi::Value Create(const Napi::CallbackInfo &info) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) ThrowErrno(info.Env(), "eventfd", errno);
  return Napi::Number::New(info.Env(), fd);
}

// eventfdRead(fd) -> counter value, or -1 when it was zero.
Napi::Value Read(const Napi::CallbackInfo &info) {
  int fd = ArgFd(info, 0);
  int64_t v = DrainEventfd(fd);
  if (v < 0 && errno != EAGAIN) ThrowErrno(info.Env(), "read(eventfd)", errno);
  return Napi::Number::New(info.Env(), static_cast<double>(v));
}

// eventfdWrite(fd, n = 1): a full counter (EAGAIN) already means "signalled".
Napi::Value Write(const Napi::CallbackInfo &info) {
  int fd = ArgFd(info, 0);
  uint64_t v = info.Length() > 1 ? static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()) : 1;
  ssize_t r;
  do r = write(fd, &v, sizeof(v));
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno != EAGAIN) ThrowErrno(info.Env(), "write(eventfd)", errno);
  return info.Env().Undefined();
}

}  // namespace

void InitEventfd(Napi::Env env, Napi::Object exports) {
  exports.Set("eventfd", Napi::Function::New(env, Create));
  exports.Set("eventfdRead", Napi::Function::New(env, Read));
  exports.Set("eventfdWrite", Napi::Function::New(env, Write));
}

}  // namespace qcuda
