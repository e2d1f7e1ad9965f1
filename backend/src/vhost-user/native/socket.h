#pragma once
#include <napi.h>
namespace vhost_user {
void InitSocket(Napi::Env env, Napi::Object exports);
}
