#pragma once
#include <napi.h>
namespace vhost_user {
void InitRingLoop(Napi::Env env, Napi::Object exports);
}
