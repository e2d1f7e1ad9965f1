// vhost_user_bench: the benchmarks' guest driver loop in C (ring_loop.cc),
// loaded only by the test frontend's GuestRing.loop, never by a backend.
#include <napi.h>

#include "ring_loop.h"

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  vhost_user::InitRingLoop(env, exports);
  return exports;
}

NODE_API_MODULE(vhost_user_bench, Init)
