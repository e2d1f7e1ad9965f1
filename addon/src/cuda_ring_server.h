// The RingServer JS class: a session's own queue served in C on its worker's
// JS thread, for the short calls of a round trip (cuda_ring_server.cc).
#pragma once
#include <napi.h>

namespace qcuda::cuda {

void InitRingServer(Napi::Env env, Napi::Object exports);

}  // namespace qcuda::cuda
