#pragma once
#include <napi.h>
namespace vhost_user {
void InitWatcher(Napi::Env env, Napi::Object exports);
}
