// Device-side printf and assert output of the backend process.
//
// The CUDA driver prints what kernels printf through libc's `stdout` FILE and
// each failed device assert as one line on `stderr`, at synchronizing calls
// and from a thread of its own at other moments. That output belongs to a
// guest program, not to the backend's log, so the capture takes fds 1 and 2
// over with two pipes:
//  - everything written to fd 1 is device printf output (the backend itself
//    never writes to stdout);
//  - fd 2 is split into lines: device assert lines ("...: block: [x,y,z],
//    thread: [x,y,z] Assertion `...` failed.") are device output, every other
//    line (the backend's own log) goes through to the real stderr at once.
// A reader thread moves the bytes into a bounded queue and hands them to JS
// through a uv_async; drain() does the same synchronously, after flushing
// stdout, for the moments CUDA flushes device output.
//
// JS (exports of qcuda_cuda.node):
//   outputStart(cb: (kind: 1 | 2, bytes: Buffer) => void)   1 = stdout, 2 = stderr
//   outputDrain()   fflush(stdout), read both pipes dry, deliver everything queued (calls cb synchronously)
//   outputStop()    fds 1 and 2 restored, the thread ended, what is left delivered
//   outputStats() -> { running, queued, dropped }
// One capture per process (fds are per process); outputStart throws while one runs.
#pragma once
#include <napi.h>

namespace qcuda::cuda {

void InitOutput(Napi::Env env, Napi::Object exports);

}  // namespace qcuda::cuda
