// qcuda_sys: the system calls qcuda itself needs beside the vhost-user
// library's (backend/src/vhost-user/native/): a VM's quota ledger in shared
// memory, the GPU worker's sandbox, the GPU share table's layout
// (share_table.h) and the guard that keeps a cut-short table from faulting
// (sigbus_guard.cc).
#include <napi.h>

#include "ledger.h"
#include "sandbox.h"
#include "share_table.h"
#include "sigbus_guard.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  qcuda::InitLedger(env, exports);
  qcuda::InitSandbox(env, exports);
  qcuda::share::InitShare(env, exports);
  qcuda::InitSigbusGuard(env, exports);
  return exports;
}

NODE_API_MODULE(qcuda_sys, Init)
