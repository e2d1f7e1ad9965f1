#pragma once
#include <napi.h>
namespace qcuda {
void InitSocket(Napi::Env env, Napi::Object exports);
}
