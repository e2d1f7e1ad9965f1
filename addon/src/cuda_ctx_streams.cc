// CudaContext's ordering calls: synchronize, streams (and their attributes),
// events and the context's limits; and the wait for a stream that copies and
// synchronizes share (WaitForStream). Stream priorities and the persisting-L2
// reset are one driver call each: generated (cuda_ctx_calls.cc).
// Stream and event ids are the context's own (0 = the legacy NULL stream).
// Waits (synchronizes) run on the waiter pool; cheap queries and settings run
// inline when the context thread is idle, which keeps them in order with the
// work queued there.
#include <chrono>
#include <cstring>
#include <thread>

#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

// A transfer arrives as many chunks, each waiting on the pool at once: had
// they all spun (the driver's default where contexts are few), they would
// take the CPUs that the JS thread needs to enqueue the next chunks. So a
// waiter polls for a short while (a small copy is done by then: no sleep,
// no wake-up latency), then sleeps in the BLOCKING_SYNC event. It ends in
// cuEventSynchronize either way: a synchronize is where the driver flushes
// device printf output, as a blocking copy does natively.
void WaitEvent(Job &jb, cu::Event e) {
  constexpr auto kPoll = std::chrono::microseconds(40);
  auto until = std::chrono::steady_clock::now() + kPoll;
  while (cu::api().EventQuery(e) == cu::kNotReady && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  jb.Check(cu::api().EventSynchronize(e), "cuEventSynchronize");
}

}  // namespace

// What is queued on s so far: cuStreamQuery says when it is done, with no
// work of its own (an event recorded to mark it had to go through the GPU
// first, microseconds even for a 4 B copy). The query is only good right
// after the run, while nothing later is on s and s still exists; a wait that
// outlasts the inline poll records an event there and then (handOff), which
// marks the same work, and from then on waits for that event (on the pool,
// or parked for the poll loop's turns). Callers may wrap job.wait: it looks
// up which of the two it waits for when it runs.
void WaitForStream(Job &job, cu::Stream s) {
  struct Mark {
    cu::Stream stream;
    uint64_t launches;          // the launches it proves done once finished (CtxCore::LaunchesDone)
    cu::Event event = nullptr;  // recorded at handOff
    bool whole = false;         // no event could be recorded: the whole context
  };
  // The NULL stream of a context with no other is all of the context's work.
  CtxCore *c = job.ctx.get();
  auto m = std::make_shared<Mark>(Mark{s, s == nullptr && c->streams.empty() ? c->LaunchMark() : 0});
  job.readyLater = false;
  job.ready = [m] {
    return (m->event ? cu::api().EventQuery(m->event) : cu::api().StreamQuery(m->stream)) != cu::kNotReady;
  };
  job.wait = [m](Job &jb) {
    if (m->event) {
      WaitEvent(jb, m->event);
      jb.ctx->ReleaseEvent(m->event);
    } else if (m->whole) {
      jb.Check(cu::api().CtxSynchronize(), "cuCtxSynchronize");  // returns the sticky error, if that is why
    } else {
      // Ready (polled right after the run): returns at once; a synchronize is where the driver flushes device printf
      // output.
      jb.Check(cu::api().StreamSynchronize(m->stream), "cuStreamSynchronize");
    }
    if (jb.rc == cu::kSuccess) jb.ctx->LaunchesDone(m->launches);
  };
  job.handOff = [m](Job &jb) {
    cu::Event e = jb.ctx->AcquireEvent(jb);
    if (e != nullptr && jb.Check(cu::api().EventRecord(e, m->stream), "cuEventRecord")) {
      m->event = e;
      jb.readyLater = true;
      return;
    }
    if (e != nullptr) jb.ctx->ReleaseEvent(e);
    m->whole = true;
    jb.ready = nullptr;
  };
}

// The whole context: cuCtxSynchronize, which has no query; cuStreamQuery on
// every stream of the context (and the NULL stream) tells when it would
// return at once. A query asks the driver what the GPU has reported, with no
// work of its own: an event recorded to mark each stream instead had to go
// through the GPU first, a few microseconds even when nothing was queued.
// The wait phase ends in cuCtxSynchronize either way (the sticky error, the
// flush of device output).
void RunSynchronize(Job &job) {
  CtxCore *c = job.ctx.get();
  const uint64_t mark = c->LaunchMark();
  auto streams = std::make_shared<std::vector<cu::Stream>>();
  streams->reserve(c->streams.size() + 1);
  streams->push_back(nullptr);
  for (auto &s : c->streams) streams->push_back(s.second);
  // An error (a sticky one) is ready too: the wait reports it. A later job
  // may destroy one of these streams: queried only right after the run.
  job.readyLater = false;
  job.ready = [streams] {
    for (cu::Stream s : *streams)
      if (cu::api().StreamQuery(s) == cu::kNotReady) return false;
    return true;
  };
  job.wait = [mark](Job &jb) {
    if (jb.Check(cu::api().CtxSynchronize(), "cuCtxSynchronize")) jb.ctx->LaunchesDone(mark);
  };
}

QCUDA_CONTEXT_METHOD(synchronize, ctx, info) { return ctx.SubmitNow(info, Where::kInlineWhenIdle, RunSynchronize); }

// streamCreate(flags, priority) -> id
QCUDA_CONTEXT_METHOD(streamCreate, ctx, info) {
  uint32_t flags = ArgU32(info[0], "flags");
  int32_t prio = ArgI32Or(info[1], 0);
  return ctx.Submit(info, Where::kContextThread, [flags, prio](Job &job) -> res::Num {
    cu::Stream s = nullptr;
    if (!job.Check(cu::api().StreamCreateWithPriority(&s, flags, prio), "cuStreamCreateWithPriority")) return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->streams[id] = s;
    return {static_cast<double>(id)};
  });
}

QCUDA_CONTEXT_METHOD(streamDestroy, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  return ctx.Submit(info, Where::kContextThread, [sid](Job &job) {
    CtxCore *c = job.ctx.get();
    auto it = c->streams.find(sid);
    if (it == c->streams.end()) {
      job.Fail(cu::kInvalidHandle, "qcuda: no stream " + std::to_string(sid) + " in this context");
      return;
    }
    cu::Stream s = it->second;
    c->streams.erase(it);
    job.Check(cu::api().StreamDestroy(s), "cuStreamDestroy_v2");
  });
}

void RunStreamSynchronize(Job &job, uint32_t sid) {
  cu::Stream s;
  if (job.ctx->LookupStream(job, sid, &s)) WaitForStream(job, s);
}

QCUDA_CONTEXT_METHOD(streamSynchronize, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  return ctx.SubmitNow(info, Where::kInlineWhenIdle, [sid](Job &job) { RunStreamSynchronize(job, sid); });
}

// streamQuery(stream) -> true once everything enqueued on it is done.
QCUDA_CONTEXT_METHOD(streamQuery, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  return ctx.SubmitNow(info, Where::kInlineWhenIdle, [sid](Job &job) -> res::Flag {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return {};
    cu::Result r = cu::api().StreamQuery(s);
    if (r == cu::kNotReady) return {false};
    return {job.Check(r, "cuStreamQuery")};
  });
}

// streamWaitEvent(stream, event, flags)
QCUDA_CONTEXT_METHOD(streamWaitEvent, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  uint32_t eid = ArgId(info[1], "event");
  uint32_t flags = ArgU32(info[2], "flags");
  return ctx.Submit(info, Where::kInlineWhenIdle, [sid, eid, flags](Job &job) {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return;
    std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
    if (e) job.Check(cu::api().StreamWaitEvent(s, e->ev, flags), "cuStreamWaitEvent");
  });
}

// streamSetAttribute(stream, attr, value): cuStreamSetAttribute; value is the whole
// CUstreamAttrValue (kAttrValueBytes), as the dispatcher rebuilt it from checked fields.
QCUDA_CONTEXT_METHOD(streamSetAttribute, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  int32_t attr = ArgI32(info[1], "attr");
  std::vector<uint8_t> value = ArgBytes(info[2], "value");
  if (value.size() != cu::kAttrValueBytes)
    throw Napi::RangeError::New(info.Env(), "value must be " + std::to_string(cu::kAttrValueBytes) + " bytes");
  return ctx.Submit(info, Where::kInlineWhenIdle, [sid, attr, value = std::move(value)](Job &job) {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s) || !Have(job, cu::api().StreamSetAttribute, "cuStreamSetAttribute"))
      return;
    alignas(8) uint8_t v[cu::kAttrValueBytes];
    std::memcpy(v, value.data(), sizeof(v));
    job.Check(cu::api().StreamSetAttribute(s, attr, v), "cuStreamSetAttribute");
  });
}

// streamGetAttribute(stream, attr) -> Uint8Array(kAttrValueBytes): cuStreamGetAttribute.
QCUDA_CONTEXT_METHOD(streamGetAttribute, ctx, info) {
  uint32_t sid = ArgId(info[0], "stream");
  int32_t attr = ArgI32(info[1], "attr");
  return ctx.Submit(info, Where::kInlineWhenIdle, [sid, attr](Job &job) -> res::Bytes {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s) || !Have(job, cu::api().StreamGetAttribute, "cuStreamGetAttribute"))
      return {};
    alignas(8) uint8_t v[cu::kAttrValueBytes] = {};
    if (!job.Check(cu::api().StreamGetAttribute(s, attr, v), "cuStreamGetAttribute")) return {};
    return {std::vector<uint8_t>(v, v + sizeof(v))};
  });
}

// eventCreate(flags) -> id
QCUDA_CONTEXT_METHOD(eventCreate, ctx, info) {
  uint32_t flags = ArgU32(info[0], "flags");
  return ctx.Submit(info, Where::kInlineWhenIdle, [flags](Job &job) -> res::Num {
    CtxCore *c = job.ctx.get();
    cu::Event e = nullptr;
    if (!job.Check(cu::api().EventCreate(&e, flags), "cuEventCreate")) return {};
    auto ev = std::make_shared<Ev>();
    ev->ev = e;
    ev->ctx = c->ctx;
    uint32_t id = c->nextId++;
    c->events[id] = std::move(ev);
    return {static_cast<double>(id)};
  });
}

// The driver event goes when the last waiter on it is done (cuEventDestroy itself
// defers freeing until the device has passed the event).
QCUDA_CONTEXT_METHOD(eventDestroy, ctx, info) {
  uint32_t eid = ArgId(info[0], "event");
  return ctx.Submit(info, Where::kInlineWhenIdle, [eid](Job &job) {
    CtxCore *c = job.ctx.get();
    auto it = c->events.find(eid);
    if (it == c->events.end()) {
      job.Fail(cu::kInvalidHandle, "qcuda: no event " + std::to_string(eid) + " in this context");
      return;
    }
    c->events.erase(it);
  });
}

void RunEventRecord(Job &job, uint32_t eid, uint32_t sid) {
  cu::Stream s;
  if (!job.ctx->LookupStream(job, sid, &s)) return;
  std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
  if (e) job.Check(cu::api().EventRecord(e->ev, s), "cuEventRecord");
}

// eventRecord(event, stream)
QCUDA_CONTEXT_METHOD(eventRecord, ctx, info) {
  uint32_t eid = ArgId(info[0], "event");
  uint32_t sid = ArgId(info[1], "stream");
  return ctx.SubmitNow(info, Where::kInlineWhenIdle, [eid, sid](Job &job) { RunEventRecord(job, eid, sid); });
}

void RunEventSynchronize(Job &job, uint32_t eid) {
  std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
  if (!e) return;
  job.ready = [e] { return cu::api().EventQuery(e->ev) != cu::kNotReady; };
  job.wait = [e](Job &jb) { jb.Check(cu::api().EventSynchronize(e->ev), "cuEventSynchronize"); };
}

QCUDA_CONTEXT_METHOD(eventSynchronize, ctx, info) {
  uint32_t eid = ArgId(info[0], "event");
  return ctx.SubmitNow(info, Where::kInlineWhenIdle, [eid](Job &job) { RunEventSynchronize(job, eid); });
}

bool RunEventQuery(Job &job, uint32_t eid) {
  std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
  if (!e) return false;
  cu::Result r = cu::api().EventQuery(e->ev);
  if (r == cu::kNotReady) return false;
  return job.Check(r, "cuEventQuery");
}

// eventQuery(event) -> true once the device has passed it.
QCUDA_CONTEXT_METHOD(eventQuery, ctx, info) {
  uint32_t eid = ArgId(info[0], "event");
  return ctx.SubmitNow(info, Where::kInlineWhenIdle,
                       [eid](Job &job) -> res::Flag { return {RunEventQuery(job, eid)}; });
}

// eventElapsed(start, end) -> milliseconds
QCUDA_CONTEXT_METHOD(eventElapsed, ctx, info) {
  uint32_t a = ArgId(info[0], "start");
  uint32_t b = ArgId(info[1], "end");
  return ctx.Submit(info, Where::kInlineWhenIdle, [a, b](Job &job) -> res::Num {
    std::shared_ptr<Ev> ea = job.ctx->LookupEvent(job, a);
    std::shared_ptr<Ev> eb = job.ctx->LookupEvent(job, b);
    if (!ea || !eb) return {};
    float ms = 0;
    job.Check(cu::api().EventElapsedTime(&ms, ea->ev, eb->ev), "cuEventElapsedTime");
    return {ms};
  });
}

// limitSet(limit, value): cuCtxSetLimit, always on the context thread (a new stack size
// or heap makes the driver wait for the device and reallocate).
QCUDA_CONTEXT_METHOD(limitSet, ctx, info) {
  int32_t limit = ArgI32(info[0], "limit");
  uint64_t value = ArgU64(info[1], "value");
  return ctx.Submit(info, Where::kContextThread, [limit, value](Job &job) {
    if (Have(job, cu::api().CtxSetLimit, "cuCtxSetLimit"))
      job.Check(cu::api().CtxSetLimit(limit, static_cast<size_t>(value)), "cuCtxSetLimit");
  });
}

// limitGet(limit) -> bigint: cuCtxGetLimit.
QCUDA_CONTEXT_METHOD(limitGet, ctx, info) {
  int32_t limit = ArgI32(info[0], "limit");
  return ctx.Submit(info, Where::kInlineWhenIdle, [limit](Job &job) -> res::Big {
    if (!Have(job, cu::api().CtxGetLimit, "cuCtxGetLimit")) return {};
    size_t v = 0;
    job.Check(cu::api().CtxGetLimit(&v, limit), "cuCtxGetLimit");
    return {v};
  });
}

}  // namespace qcuda::cuda
