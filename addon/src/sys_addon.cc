// qcuda_sys: the system calls qcuda itself needs beside the vhost-user
// library's (addon/src/vhost-user/): a VM's quota ledger in shared memory
// and the GPU worker's sandbox.
#include <napi.h>

#include "ledger.h"
#include "sandbox.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  qcuda::InitLedger(env, exports);
  qcuda::InitSandbox(env, exports);
  return exports;
}

NODE_API_MODULE(qcuda_sys, Init)
