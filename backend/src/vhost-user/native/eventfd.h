#pragma once
#include <napi.h>
namespace vhost_user {
void InitEventfd(Napi::Env env, Napi::Object exports);
// Reads and clears an eventfd counter: -1 when it was zero (EAGAIN).
int64_t DrainEventfd(int fd);
// Sets O_NONBLOCK where the fd's flags lack it; whether they did.
bool EnsureNonblocking(int fd);
}  // namespace vhost_user
