// Device-side printf and assert output of the backend process.
//
// The CUDA driver prints what kernels printf through libc's `stdout` FILE and
// each failed device assert as one line on `stderr`, at synchronizing calls
// and from a thread of its own at other moments. That output belongs to a
// guest program, not to the backend's log, so the capture takes fds 1 and 2
// over with two pipes:
//  - everything written to fd 1 is device printf output (the backend itself
//    never writes to stdout);
//  - fd 2 is split into lines. The process's own stderr lines do not come
//    this way (JS writes them with outputWriteStderr, straight to the real
//    stderr), so every line here is the driver's, or another library's, and
//    goes to JS, never to the real stderr as it is (security review 2, L2:
//    an assert's message is guest text, and may hold newlines):
//     - a device assert ("...: block: [x,y,z], thread: [x,y,z] Assertion
//       `...` failed."), with the lines after its first up to the one that
//       ends with "` failed.", as stderr output (kind 2);
//     - any other line, one piece per line, as kind 3: the JS side gives it
//       to the session as stderr too, and logs it rate-limited and escaped.
// A reader thread moves the bytes into a bounded queue and hands them to JS
// through a uv_async; drain() does the same synchronously, after flushing
// stdout, for the moments CUDA flushes device output. At exit with the
// capture running, no JS is left to hand kind 3 lines to (they may be the
// process's last words, a fatal error's trace): a few go to the real stderr,
// marked and escaped.
//
// JS (exports of qcuda_cuda.node):
//   outputStart(cb: (kind: 1 | 2 | 3, bytes: Buffer) => void)   1 = stdout, 2 = stderr (asserts), 3 = another stderr
//   line outputDrain()   fflush(stdout), read both pipes dry, deliver everything queued (calls cb synchronously)
//   outputStop()    fds 1 and 2 restored, the thread ended, what is left delivered
//   outputWriteStderr(bytes)   to the real stderr (fd 2 itself while no capture runs)
//   outputStats() -> { running, queued, dropped }
// One capture per process (fds are per process); outputStart throws while one runs.
#pragma once
#include <napi.h>

namespace qcuda::cuda {

void InitOutput(Napi::Env env, Napi::Object exports);

}  // namespace qcuda::cuda
