#pragma once
#include <napi.h>
namespace qcuda {
void InitMemory(Napi::Env env, Napi::Object exports);
}
