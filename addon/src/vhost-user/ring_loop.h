#pragma once
#include <napi.h>
namespace qcuda {
void InitRingLoop(Napi::Env env, Napi::Object exports);
}
