#pragma once
#include <napi.h>
namespace vhost_user {
void InitMemory(Napi::Env env, Napi::Object exports);
}
