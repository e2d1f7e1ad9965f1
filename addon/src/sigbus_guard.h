// Mappings of files other processes can cut short, kept from faulting this
// process (sigbus_guard.cc).
#pragma once
#include <napi.h>
namespace qcuda {
void InitSigbusGuard(Napi::Env env, Napi::Object exports);
}
