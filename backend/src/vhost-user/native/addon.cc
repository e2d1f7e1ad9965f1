// vhost_user_native: only the system calls the vhost-user library needs and
// JavaScript cannot make (unix sockets with SCM_RIGHTS, memfd/mmap windows,
// eventfds, fd watchers).
#include <napi.h>

#include "eventfd.h"
#include "memory.h"
#include "socket.h"
#include "watcher.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  vhost_user::InitSocket(env, exports);
  vhost_user::InitMemory(env, exports);
  vhost_user::InitEventfd(env, exports);
  vhost_user::InitWatcher(env, exports);
  return exports;
}

NODE_API_MODULE(vhost_user_native, Init)
