// eventfds: the kick and call doorbells of a virtqueue.
#include "eventfd.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "errors.h"

namespace vhost_user {

// A doorbell's file description is shared with the frontend, which can clear
// O_NONBLOCK on it at any time (security review 3, N5): a read or write
// that blocked would stop the backend's one JavaScript thread, and with it
// every other frontend of a shared backend. So neither may depend on the
// flag the frontend controls.

bool EnsureNonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || (fl & O_NONBLOCK) != 0) return false;
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return true;
}

int64_t DrainEventfd(int fd) {
  uint64_t v;
  iovec io{&v, sizeof(v)};
  ssize_t r;
  // RWF_NOWAIT: non-blocking whatever the file's flags say (eventfds since Linux 5.12).
  do r = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
  while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
    // An older kernel: the flag put back first (a frontend that clears it again at once can still win the race).
    EnsureNonblocking(fd);
    do r = read(fd, &v, sizeof(v));
    while (r < 0 && errno == EINTR);
  }
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

// eventfdWrite(fd, n = 1) -> 0: written; 1: the counter is full (EAGAIN),
// which already means "signalled"; 2: the fd had been made blocking (the
// flag is put back before the write, so the write did not block).
Napi::Value Write(const Napi::CallbackInfo &info) {
  int fd = ArgFd(info, 0);
  uint64_t v = info.Length() > 1 ? static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()) : 1;
  const bool wasBlocking = EnsureNonblocking(fd);
  ssize_t r;
  do r = write(fd, &v, sizeof(v));
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno != EAGAIN) ThrowErrno(info.Env(), "write(eventfd)", errno);
  return Napi::Number::New(info.Env(), wasBlocking ? 2 : r < 0 ? 1 : 0);
}

}  // namespace

void InitEventfd(Napi::Env env, Napi::Object exports) {
  exports.Set("eventfd", Napi::Function::New(env, Create));
  exports.Set("eventfdRead", Napi::Function::New(env, Read));
  exports.Set("eventfdWrite", Napi::Function::New(env, Write));
}

}  // namespace vhost_user
