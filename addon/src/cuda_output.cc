// Device output capture (see cuda_output.h).
#include "cuda_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qcuda::cuda {
namespace {

constexpr int kStdout = 1;
constexpr int kStderr = 2;
// A stderr line that is not (part of) a device assert: a piece of its own.
constexpr int kOtherLine = 3;
// Captured bytes waiting for JS; beyond this they are dropped and counted.
constexpr size_t kMaxQueued = 4u << 20;
// A longer stderr line is handled in pieces of this size (an assert line names
// the kernel's signature, which templates can make long).
constexpr size_t kMaxLine = 16u << 10;
// An assert's bytes, its message's lines included, at most: past this the
// lines are not taken for an assert's any more (a line that only looked like
// an assert's first must not make every later one device output).
constexpr size_t kMaxAssert = 64u << 10;
constexpr size_t kReadBuf = 64u << 10;
// One turn of the reader, and one drain, read at most this much (a writer
// that never stops must not hold the mutex or the JS thread forever).
constexpr size_t kMaxRead = 8u << 20;
// Asked for with F_SETPIPE_SZ: room for a burst while the reader is busy.
constexpr int kPipeSize = 1 << 20;
// Other stderr lines passed to the real stderr at exit, at most (and bytes of each).
constexpr int kMaxExitLines = 32;
constexpr size_t kMaxExitLine = 512;

struct Piece {
  int kind;
  std::string bytes;
};

// "<file>:<line>: <function>: block: [x,y,z], thread: [x,y,z] Assertion `<expr>` failed."
bool IsDeviceAssert(const std::string &line) {
  size_t b = line.find(": block: [");
  if (b == std::string::npos) return false;
  size_t t = line.find("], thread: [", b);
  return t != std::string::npos && line.find("] Assertion `", t) != std::string::npos;
}

// The line (or piece of one) that ends an assert: its message is over.
bool EndsAssert(const std::string &line) {
  static const std::string kEnd = "` failed.";
  size_t n = line.size();
  if (n > 0 && line[n - 1] == '\n') n--;
  return n >= kEnd.size() && line.compare(n - kEnd.size(), kEnd.size(), kEnd) == 0;
}

// For the real stderr: bytes outside printable ASCII (and the backslash) as \xNN, at most max of them.
std::string Escaped(const std::string &s, size_t max) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  size_t n = s.size();
  if (n > 0 && s[n - 1] == '\n') n--;
  for (size_t i = 0; i < n && i < max; i++) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (n > max) out += "...";
  return out;
}

// To the real stderr, which may be non-blocking (Node makes its stdio pipes so):
// waits a while for room, then gives up rather than stall the capture.
void WriteAll(int fd, const char *p, size_t n) {
  while (n > 0 && fd >= 0) {
    ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    pollfd pf{fd, POLLOUT, 0};
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll(&pf, 1, 1000) > 0) continue;
    return;
  }
}

bool SetNonBlock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

void CloseFd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

struct Capture {
  // Fixed while the capture runs.
  napi_env env = nullptr;
  uv_async_t *async = nullptr;
  Napi::FunctionReference cb;
  napi_async_context asyncCtx = nullptr;
  int realOut = -1, realErr = -1;  // dups of the original fds 1 and 2 (-1: was closed)
  int outR = -1, errR = -1;        // read ends of the pipes behind fds 1 and 2
  int wakeR = -1, wakeW = -1;      // a byte here ends the reader
  std::thread *reader = nullptr;

  // Held while reading the pipes, so that bytes are queued in the order read
  // whichever thread reads them.
  std::mutex mu;
  std::vector<char> buf = std::vector<char>(kReadBuf);
  std::string line;        // the stderr line being assembled
  bool inAssert = false;   // the lines coming are an assert's message, until the one that ends it
  size_t assertBytes = 0;  // of the assert being taken
  std::deque<Piece> q;
  size_t queued = 0;
  uint64_t dropped = 0;  // since the last report
  uint64_t droppedTotal = 0;

  void Queue(int kind, const char *p, size_t n);
  void EndLine();
  void PassOnAtExit();
  void TakeErr(const char *p, size_t n);
  bool ReadPipe(int fd, int kind, size_t limit);
  std::deque<Piece> Take();
  void ReaderLoop();
};

Capture *g_cap = nullptr;  // JS thread only

void Capture::Queue(int kind, const char *p, size_t n) {
  if (n > kMaxQueued - queued) {
    dropped += n - (kMaxQueued - queued);
    n = kMaxQueued - queued;
  }
  if (n == 0) return;
  if (kind != kOtherLine && !q.empty() && q.back().kind == kind && q.back().bytes.size() < kReadBuf)
    q.back().bytes.append(p, n);
  else
    q.push_back(Piece{kind, std::string(p, n)});
  queued += n;
}

void Capture::EndLine() {
  if (inAssert && line.size() > kMaxAssert - assertBytes) inAssert = false;
  if (inAssert || IsDeviceAssert(line)) {
    assertBytes = inAssert ? assertBytes + line.size() : line.size();
    Queue(kStderr, line.data(), line.size());
    inAssert = !EndsAssert(line);
  } else {
    Queue(kOtherLine, line.data(), line.size());
  }
  line.clear();
}

// At exit (JS is gone): other lines still queued go to the real stderr,
// kMaxExitLines at most, marked and escaped; device output is dropped.
void Capture::PassOnAtExit() {
  int passed = 0, dropped = 0;
  for (const Piece &p : q) {
    if (p.kind != kOtherLine) continue;
    if (passed == kMaxExitLines) {
      dropped++;
      continue;
    }
    std::string msg = "qcuda: stderr at exit: " + Escaped(p.bytes, kMaxExitLine) + "\n";
    WriteAll(realErr, msg.data(), msg.size());
    passed++;
  }
  if (dropped > 0) {
    std::string msg = "qcuda: stderr at exit: " + std::to_string(dropped) + " more lines dropped\n";
    WriteAll(realErr, msg.data(), msg.size());
  }
  q.clear();
  queued = 0;
}

void Capture::TakeErr(const char *p, size_t n) {
  while (n > 0) {
    const char *nl = static_cast<const char *>(memchr(p, '\n', n));
    size_t take = nl != nullptr ? static_cast<size_t>(nl - p) + 1 : n;
    if (take > kMaxLine - line.size()) take = kMaxLine - line.size();
    line.append(p, take);
    p += take;
    n -= take;
    if (line.back() == '\n' || line.size() >= kMaxLine) EndLine();
  }
}

// Reads fd until it is empty (or limit bytes); false at end of file.
bool Capture::ReadPipe(int fd, int kind, size_t limit) {
  size_t total = 0;
  while (fd >= 0 && total < limit) {
    ssize_t r = read(fd, buf.data(), buf.size());
    if (r > 0) {
      total += static_cast<size_t>(r);
      if (kind == kStdout)
        Queue(kStdout, buf.data(), static_cast<size_t>(r));
      else
        TakeErr(buf.data(), static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return false;
    if (errno != EINTR) break;  // EAGAIN: empty for now
  }
  return true;
}

std::deque<Piece> Capture::Take() {
  std::deque<Piece> out;
  out.swap(q);
  queued = 0;
  if (dropped != 0) {  // nothing was queued after the loss began: the note goes where the bytes were lost
    out.push_back(Piece{kStderr, "[qcuda: " + std::to_string(dropped) + " bytes of device output dropped]\n"});
    droppedTotal += dropped;
    dropped = 0;
  }
  return out;
}

void Capture::ReaderLoop() {
  pollfd fds[3] = {{outR, POLLIN, 0}, {errR, POLLIN, 0}, {wakeR, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[2].revents != 0) return;
    std::lock_guard<std::mutex> lk(mu);
    for (int i = 0; i < 2; i++) {
      // At end of file (every write end closed) poll would report it forever: stop watching.
      if (fds[i].revents != 0 && !ReadPipe(fds[i].fd, i + 1, kMaxRead)) fds[i].fd = -1;
    }
    if (!q.empty() || dropped != 0) uv_async_send(async);
  }
}

// JS thread: hands every queued piece to the callback. From the loop (the
// uv_async) inside a callback scope, so promise reactions run after it.
void Deliver(Capture *c, Napi::Env env, bool fromLoop) {
  std::deque<Piece> batch;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->q.empty() && c->dropped == 0) return;  // the usual case: no deque made and freed
    batch = c->Take();
  }
  if (batch.empty()) return;
  Napi::HandleScope hs(env);
  napi_callback_scope scope = nullptr;
  if (fromLoop) napi_open_callback_scope(env, Napi::Object::New(env), c->asyncCtx, &scope);
  std::string failure;
  Napi::Error first;
  for (const Piece &p : batch) {
    try {
      c->cb.Call({Napi::Number::New(env, p.kind), Napi::Buffer<char>::Copy(env, p.bytes.data(), p.bytes.size())});
    } catch (const Napi::Error &e) {
      if (failure.empty()) {
        failure = e.Message().empty() ? "exception" : e.Message();
        if (!fromLoop) first = e;
      }
    }
  }
  if (fromLoop) {
    napi_close_callback_scope(env, scope);
    if (!failure.empty()) {
      std::string msg = "qcuda: the device output callback threw: " + failure + "\n";
      WriteAll(c->realErr, msg.data(), msg.size());
    }
  } else if (!failure.empty()) {
    throw first;  // every piece was offered first
  }
}

void OnAsync(uv_async_t *h) {
  auto *c = static_cast<Capture *>(h->data);
  Deliver(c, Napi::Env(c->env), true);
}

// Puts fds 1 and 2 back, ends the reader and reads what is left in the pipes.
void Restore(Capture *c) {
  fflush(stdout);
  if (c->realOut >= 0)
    dup2(c->realOut, 1);
  else
    close(1);
  if (c->realErr >= 0)
    dup2(c->realErr, 2);
  else
    close(2);
  if (c->reader != nullptr) {
    char b = 1;
    while (write(c->wakeW, &b, 1) < 0 && errno == EINTR) {
    }
    c->reader->join();
    delete c->reader;
    c->reader = nullptr;
  }
  std::lock_guard<std::mutex> lk(c->mu);
  c->ReadPipe(c->outR, kStdout, kMaxRead);
  c->ReadPipe(c->errR, kStderr, kMaxRead);
  if (!c->line.empty()) c->EndLine();
}

void Release(Capture *c) {
  for (int *fd : {&c->realOut, &c->realErr, &c->outR, &c->errR, &c->wakeR, &c->wakeW}) CloseFd(fd);
  uv_close(reinterpret_cast<uv_handle_t *>(c->async), [](uv_handle_t *h) { delete reinterpret_cast<uv_async_t *>(h); });
  c->async = nullptr;
}

// The environment goes away without outputStop(): the fds go back; nothing is delivered.
void CleanupHook(void *arg) {
  auto *c = static_cast<Capture *>(arg);
  Restore(c);
  Release(c);
  if (g_cap == c) g_cap = nullptr;
  // c is leaked: its JS references die with the environment.
}

// The process exits with the capture running (process.exit(), an uncaught
// exception: neither stops it): the backend's last stderr lines, a stack trace
// printed by Node's C++ say, may still be in the pipe. Pass a few on (marked,
// escaped) and give fds 1 and 2 back.
void AtExit() {
  Capture *c = g_cap;
  if (c == nullptr) return;
  fflush(stdout);
  std::lock_guard<std::mutex> lk(c->mu);
  c->ReadPipe(c->errR, kStderr, kMaxRead);
  if (!c->line.empty()) c->EndLine();
  c->PassOnAtExit();
  if (c->realOut >= 0) dup2(c->realOut, 1);
  if (c->realErr >= 0) dup2(c->realErr, 2);
}

Capture *Running(Napi::Env env) {
  if (g_cap != nullptr && g_cap->env != env)
    throw Napi::Error::New(env, "the device output capture belongs to another Node environment");
  return g_cap;
}

// Creates the pipes and moves them behind fds 1 and 2 (c gets the fds).
void Redirect(Napi::Env env, Capture *c) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, pw[2] = {-1, -1};
  auto fail = [&](const char *what) {
    std::string msg = std::string("device output capture: ") + what + ": " + strerror(errno);
    for (int *fd : {&po[0], &po[1], &pe[0], &pe[1], &pw[0], &pw[1], &c->realOut, &c->realErr}) CloseFd(fd);
    throw Napi::Error::New(env, msg);
  };
  if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0 || pipe2(pw, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe2");
  if (!SetNonBlock(po[0]) || !SetNonBlock(pe[0])) fail("fcntl");
  fcntl(po[1], F_SETPIPE_SZ, kPipeSize);  // best effort: the default 64 KiB works too
  fcntl(pe[1], F_SETPIPE_SZ, kPipeSize);
  fflush(stdout);
  fflush(stderr);
  c->realOut = fcntl(1, F_DUPFD_CLOEXEC, 3);
  c->realErr = fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (dup2(po[1], 1) < 0) fail("dup2");
  if (dup2(pe[1], 2) < 0) {
    int e = errno;
    if (c->realOut >= 0) dup2(c->realOut, 1);
    errno = e;
    fail("dup2");
  }
  close(po[1]);
  close(pe[1]);
  c->outR = po[0];
  c->errR = pe[0];
  c->wakeR = pw[0];
  c->wakeW = pw[1];
  // stdout is a pipe now, so libc buffers it fully: line buffering brings what
  // the driver's own thread prints here at once instead of at the next drain.
  setvbuf(stdout, nullptr, _IOLBF, 0);
}

Napi::Value Start(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throw Napi::TypeError::New(env, "outputStart(callback)");
  if (Running(env) != nullptr) throw Napi::Error::New(env, "the device output capture is already running");
  auto *c = new Capture;
  try {
    Redirect(env, c);
  } catch (...) {
    delete c;
    throw;
  }
  c->env = env;
  c->cb = Napi::Persistent(info[0].As<Napi::Function>());
  napi_async_init(env, Napi::Object::New(env), Napi::String::New(env, "qcuda:output"), &c->asyncCtx);
  uv_loop_t *loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  c->async = new uv_async_t;
  uv_async_init(loop, c->async, OnAsync);
  c->async->data = c;
  uv_unref(reinterpret_cast<uv_handle_t *>(c->async));  // output alone does not keep the process alive
  try {
    c->reader = new std::thread([c] { c->ReaderLoop(); });
  } catch (const std::exception &e) {
    Restore(c);
    Release(c);
    napi_async_destroy(env, c->asyncCtx);
    delete c;
    throw Napi::Error::New(env, std::string("device output capture: no reader thread: ") + e.what());
  }
  napi_add_env_cleanup_hook(env, CleanupHook, c);
  static std::once_flag atExit;
  std::call_once(atExit, [] { atexit(AtExit); });
  g_cap = c;
  return env.Undefined();
}

Napi::Value Drain(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Capture *c = Running(env);
  if (c == nullptr) return env.Undefined();
  // Outside the mutex: while the pipe is full only the reader, which needs
  // it, makes room for the rest of the buffer.
  fflush(stdout);
  // One poll for both pipes first: a drain follows every synchronize and
  // blocking copy of a context that has launched, and mostly finds nothing
  // (two reads that fail cost a microsecond or more on the GPU machine).
  pollfd fds[2] = {{c->outR, POLLIN, 0}, {c->errR, POLLIN, 0}};
  if (poll(fds, 2, 0) != 0) {
    std::lock_guard<std::mutex> lk(c->mu);
    c->ReadPipe(c->outR, kStdout, kMaxRead);
    c->ReadPipe(c->errR, kStderr, kMaxRead);
  }
  Deliver(c, env, false);  // also what the reader thread queued
  return env.Undefined();
}

Napi::Value Stop(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Capture *c = Running(env);
  if (c == nullptr) return env.Undefined();
  g_cap = nullptr;
  napi_remove_env_cleanup_hook(env, CleanupHook, c);
  Restore(c);
  Release(c);
  struct Free {
    napi_env env;
    Capture *c;
    ~Free() {
      napi_async_destroy(env, c->asyncCtx);
      delete c;
    }
  } free{env, c};
  Deliver(c, env, false);  // what was left, before the callback goes
  return env.Undefined();
}

// outputWriteStderr(bytes): the process's own stderr output, past the capture.
Napi::Value WriteStderr(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(env, "outputWriteStderr(bytes: Uint8Array)");
  Napi::Uint8Array b = info[0].As<Napi::Uint8Array>();
  Capture *c = Running(env);
  WriteAll(c != nullptr ? c->realErr : 2, reinterpret_cast<const char *>(b.Data()), b.ByteLength());
  return env.Undefined();
}

Napi::Value Stats(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Capture *c = Running(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("running", c != nullptr);
  size_t queued = 0;
  uint64_t dropped = 0;
  if (c != nullptr) {
    std::lock_guard<std::mutex> lk(c->mu);
    queued = c->queued;
    dropped = c->droppedTotal + c->dropped;
  }
  o.Set("queued", static_cast<double>(queued));
  o.Set("dropped", static_cast<double>(dropped));
  return o;
}

}  // namespace

void InitOutput(Napi::Env env, Napi::Object exports) {
  exports.Set("outputStart", Napi::Function::New(env, Start));
  exports.Set("outputDrain", Napi::Function::New(env, Drain));
  exports.Set("outputStop", Napi::Function::New(env, Stop));
  exports.Set("outputStats", Napi::Function::New(env, Stats));
  exports.Set("outputWriteStderr", Napi::Function::New(env, WriteStderr));
}

}  // namespace qcuda::cuda
