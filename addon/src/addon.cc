// qcuda's native addon: only the system calls JavaScript cannot make.
#include <napi.h>

#include "eventfd.h"
#include "ledger.h"
#include "memory.h"
#include "ring_loop.h"
#include "sandbox.h"
#include "socket.h"
#include "watcher.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  qcuda::InitSocket(env, exports);
  qcuda::InitMemory(env, exports);
  qcuda::InitEventfd(env, exports);
  qcuda::InitWatcher(env, exports);
  qcuda::InitLedger(env, exports);
  qcuda::InitRingLoop(env, exports);
  qcuda::InitSandbox(env, exports);
  return exports;
}

NODE_API_MODULE(qcuda_native, Init)
