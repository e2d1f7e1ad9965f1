#pragma once
#include <napi.h>
namespace qcuda {
void InitSandbox(Napi::Env env, Napi::Object exports);
}
