// Budgets shared between processes (ledger.cc).
#pragma once
#include <napi.h>
namespace qcuda {
void InitLedger(Napi::Env env, Napi::Object exports);
}
