#pragma once
#include <napi.h>
namespace qcuda {
void InitWatcher(Napi::Env env, Napi::Object exports);
}
