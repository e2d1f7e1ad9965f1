// Unix stream sockets with SCM_RIGHTS: the vhost-user transport. Every call
// is non-blocking; EAGAIN is reported as a return value, not an exception.
#include "socket.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "errors.h"

namespace vhost_user {
namespace {

constexpr size_t kMaxFdsPerMsg = 32;

sockaddr_un UnixAddr(Napi::Env env, const std::string &path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    ThrowRange(env, "socket path must be 1.." + std::to_string(sizeof(addr.sun_path) - 1) + " bytes: " + path);
  memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Listens on path. The socket is bound and listening under a name of its
// own first and then renamed to path (never over an existing file: that is
// EADDRINUSE, as bind's), so a client that sees the path appear (QEMU, a test
// polling for it) can connect at once: a bare bind makes the file before
// listen, and a connect in between is refused.
Napi::Value UnixListen(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string path = info[0].As<Napi::String>().Utf8Value();
  UnixAddr(env, path);  // the path's own length check
  std::string staged = path + ".listening-" + std::to_string(getpid());
  bool rename_in = staged.size() < sizeof(sockaddr_un{}.sun_path);
  sockaddr_un addr = UnixAddr(env, rename_in ? staged : path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) ThrowErrno(env, "socket", errno);
  if (rename_in) unlink(staged.c_str());  // left by a process of this pid that died
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0 || listen(fd, 16) < 0 ||
      (rename_in && renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) < 0)) {
    int err = errno == EEXIST ? EADDRINUSE : errno;
    close(fd);
    if (rename_in) unlink(staged.c_str());
    ThrowErrno(env, "bind/listen", err);
  }
  return Napi::Number::New(env, fd);
}

Napi::Value UnixAccept(const Napi::CallbackInfo &info) {
  int fd = accept4(ArgFd(info, 0), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Napi::Number::New(info.Env(), -1);
    ThrowErrno(info.Env(), "accept4", errno);
  }
  return Napi::Number::New(info.Env(), fd);
}

// Connects synchronously (a unix connect completes at once or fails), then
// switches the socket to non-blocking for the event loop.
Napi::Value UnixConnect(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  sockaddr_un addr = UnixAddr(env, info[0].As<Napi::String>().Utf8Value());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ThrowErrno(env, "socket", errno);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    close(fd);
    ThrowErrno(env, "connect", err);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return Napi::Number::New(env, fd);
}

Napi::Value SocketPair(const Napi::CallbackInfo &info) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
    ThrowErrno(info.Env(), "socketpair", errno);
  Napi::Array out = Napi::Array::New(info.Env(), 2);
  out.Set(0u, sv[0]);
  out.Set(1u, sv[1]);
  return out;
}

// sendMsg(fd, bytes, fds) -> bytes sent, or -1 if the socket is full.
Napi::Value SendMsg(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  Napi::Uint8Array data = info[1].As<Napi::Uint8Array>();
  Napi::Array fdArr = info[2].As<Napi::Array>();
  if (fdArr.Length() > kMaxFdsPerMsg) ThrowRange(env, "too many fds for one message");
  iovec iov{data.Data(), data.ByteLength()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMsg)];
  if (fdArr.Length() > 0) {
    size_t n = fdArr.Length();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    int *fds = reinterpret_cast<int *>(CMSG_DATA(c));
    for (size_t i = 0; i < n; i++) fds[i] = fdArr.Get(i).As<Napi::Number>().Int32Value();
  }
  ssize_t r;
  do r = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Napi::Number::New(env, -1);
    ThrowErrno(env, "sendmsg", errno);
  }
  return Napi::Number::New(env, static_cast<double>(r));
}

// recvMsg(fd, buf, maxFds = 32) -> { n, fds, ctrunc }: n = -1 when nothing is ready, 0 at
// EOF. Received fds are close-on-exec; on MSG_CTRUNC the fds that did fit are
// still returned so the caller closes them.
Napi::Value RecvMsg(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  Napi::Uint8Array buf = info[1].As<Napi::Uint8Array>();
  size_t maxFds = info.Length() > 2 ? info[2].As<Napi::Number>().Uint32Value() : kMaxFdsPerMsg;
  if (maxFds < 1 || maxFds > kMaxFdsPerMsg) ThrowRange(env, "maxFds must be 1..32");
  iovec iov{buf.Data(), buf.ByteLength()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMsg)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * maxFds);
  ssize_t r;
  do r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  Napi::Object out = Napi::Object::New(env);
  if (r < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) ThrowErrno(env, "recvmsg", errno);
    out.Set("n", -1);
    return out;
  }
  std::vector<int> fds;
  for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int *p = reinterpret_cast<const int *>(CMSG_DATA(c));
    fds.insert(fds.end(), p, p + n);
  }
  Napi::Array fdArr = Napi::Array::New(env, fds.size());
  for (size_t i = 0; i < fds.size(); i++) fdArr.Set(i, fds[i]);
  out.Set("n", static_cast<double>(r));
  out.Set("fds", fdArr);
  out.Set("ctrunc", (msg.msg_flags & MSG_CTRUNC) != 0);
  return out;
}

Napi::Value CloseFd(const Napi::CallbackInfo &info) {
  if (close(ArgFd(info, 0)) < 0 && errno != EINTR) ThrowErrno(info.Env(), "close", errno);
  return info.Env().Undefined();
}

// dup(fd) -> a new close-on-exec fd for the same file (kept past the caller's close).
Napi::Value DupFd(const Napi::CallbackInfo &info) {
  int fd = fcntl(ArgFd(info, 0), F_DUPFD_CLOEXEC, 3);
  if (fd < 0) ThrowErrno(info.Env(), "dup", errno);
  return Napi::Number::New(info.Env(), fd);
}

// peerCred(fd) -> { pid, uid, gid }: who connected a unix socket, as the kernel
// recorded it at connect() (SO_PEERCRED; node has no way to read it).
Napi::Value PeerCred(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ucred c{};
  socklen_t len = sizeof(c);
  if (getsockopt(ArgFd(info, 0), SOL_SOCKET, SO_PEERCRED, &c, &len) < 0)
    ThrowErrno(env, "getsockopt(SO_PEERCRED)", errno);
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", static_cast<double>(c.pid));
  out.Set("uid", static_cast<double>(c.uid));
  out.Set("gid", static_cast<double>(c.gid));
  return out;
}

Napi::Value ShutdownFd(const Napi::CallbackInfo &info) {
  shutdown(ArgFd(info, 0), SHUT_RDWR);
  return info.Env().Undefined();
}

}  // namespace

void InitSocket(Napi::Env env, Napi::Object exports) {
  exports.Set("unixListen", Napi::Function::New(env, UnixListen));
  exports.Set("unixAccept", Napi::Function::New(env, UnixAccept));
  exports.Set("unixConnect", Napi::Function::New(env, UnixConnect));
  exports.Set("socketPair", Napi::Function::New(env, SocketPair));
  exports.Set("sendMsg", Napi::Function::New(env, SendMsg));
  exports.Set("recvMsg", Napi::Function::New(env, RecvMsg));
  exports.Set("close", Napi::Function::New(env, CloseFd));
  exports.Set("dup", Napi::Function::New(env, DupFd));
  exports.Set("shutdown", Napi::Function::New(env, ShutdownFd));
  exports.Set("peerCred", Napi::Function::New(env, PeerCred));
}

}  // namespace vhost_user
