// vhost_user_native: only the system calls the vhost-user library needs and
// JavaScript cannot make (unix sockets with SCM_RIGHTS, memfd/mmap windows,
// eventfds, fd watchers).
#include <napi.h>

#include "eventfd.h"
#include "memory.h"
#include "socket.h"
#include "watcher.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  qcuda::InitSocket(env, exports);
  qcuda::InitMemory(env, exports);
  qcuda::InitEventfd(env, exports);
  qcuda::InitWatcher(env, exports);
  return exports;
}

NODE_API_MODULE(vhost_user_native, Init)
