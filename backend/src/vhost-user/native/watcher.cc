// Fd readiness on the libuv loop (uv_poll). A Watcher must be closed before
// its fd is closed; the JS Fd owner does that. In "eventfd" mode the watcher
// drains the counter itself, saving the hot path one call into the addon.
#include "watcher.h"

#include <uv.h>

#include "errors.h"
#include "eventfd.h"

namespace vhost_user {
namespace {

class Watcher : public Napi::ObjectWrap<Watcher> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Watcher",
                       {InstanceMethod("start", &Watcher::Start), InstanceMethod("stop", &Watcher::Stop),
                        InstanceMethod("close", &Watcher::Close)});
  }

  // new Watcher(fd, callback(events, status), drainEventfd)
  explicit Watcher(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Watcher>(info) {
    Napi::Env env = info.Env();
    fd_ = ArgFd(info, 0);
    callback_ = Napi::Persistent(info[1].As<Napi::Function>());
    drain_ = info.Length() > 2 && info[2].ToBoolean();
    poll_ = new uv_poll_t;
    uv_loop_t *loop;
    napi_get_uv_event_loop(env, &loop);
    int r = uv_poll_init(loop, poll_, fd_);
    if (r < 0) {
      delete poll_;
      poll_ = nullptr;
      throw Napi::Error::New(env, std::string("uv_poll_init: ") + uv_strerror(r));
    }
    poll_->data = this;
  }

  ~Watcher() override { CloseHandle(); }

 private:
  // start(events): 1 = readable, 2 = writable. Keeps the JS object alive
  // while active so the callback cannot be collected under libuv.
  Napi::Value Start(const Napi::CallbackInfo &info) {
    if (poll_ == nullptr) throw Napi::Error::New(info.Env(), "watcher is closed");
    int events = info[0].As<Napi::Number>().Int32Value();
    int r = uv_poll_start(poll_, events, OnPoll);
    if (r < 0) throw Napi::Error::New(info.Env(), std::string("uv_poll_start: ") + uv_strerror(r));
    if (!active_) Ref();
    active_ = true;
    return info.Env().Undefined();
  }

  Napi::Value Stop(const Napi::CallbackInfo &info) {
    StopPoll();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    StopPoll();
    CloseHandle();
    return info.Env().Undefined();
  }

  void StopPoll() {
    if (poll_ != nullptr) uv_poll_stop(poll_);
    if (active_) Unref();
    active_ = false;
  }

  void CloseHandle() {
    if (poll_ == nullptr) return;
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t *>(poll_), [](uv_handle_t *h) { delete reinterpret_cast<uv_poll_t *>(h); });
    poll_ = nullptr;
  }

  static void OnPoll(uv_poll_t *handle, int status, int events) {
    Watcher *self = static_cast<Watcher *>(handle->data);
    if (self->drain_ && status == 0 && DrainEventfd(self->fd_) < 0) return;  // spurious wakeup
    Napi::Env env = self->Env();
    Napi::HandleScope scope(env);
    self->callback_.MakeCallback(env.Global(), {Napi::Number::New(env, events), Napi::Number::New(env, status)});
  }

  int fd_;
  bool drain_ = false;
  bool active_ = false;
  uv_poll_t *poll_ = nullptr;
  Napi::FunctionReference callback_;
};

}  // namespace

void InitWatcher(Napi::Env env, Napi::Object exports) { exports.Set("Watcher", Watcher::Define(env)); }

}  // namespace vhost_user
