// CudaContext's methods that are one driver call each, generated from their
// declaration (wire/protocol.ts: a ContextDecl with `driver`) into
// context_calls.h, one QCUDA_DRIVER_CALL line each: no method of this kind
// is written by hand. The entry point's own signature (cuda_api.h) says the
// rest: its leading parameters are the declared arguments, each read from
// JS on the JS thread as its type asks (a stream's id looked up in the
// context, an int, a size), and every parameter after them is a pointer the
// driver writes a result through. The method resolves with nothing, the one
// result (a number, or a bigint for a 64-bit one), or, for several, an
// object of the out struct's field names. A query (a call with results)
// runs inline when the context thread is idle, which keeps it in order with
// the work queued there; a setting (none) runs on the context thread, after
// the work queued before it.
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

// An argument as read from JS (From, on the JS thread) and as the entry point
// takes it (To, in the job: false where it names nothing, the job failed).
template <typename T>
struct In {
  static_assert(std::is_arithmetic_v<T>, "a driver call's argument: a stream, an event, a function or a number");
  T v{};
  static In From(const Napi::Value &js) {
    if constexpr (std::is_same_v<T, int>)
      return {ArgI32(js, "argument")};
    else if constexpr (sizeof(T) <= 4)
      return {static_cast<T>(ArgU32(js, "argument"))};
    else
      return {static_cast<T>(ArgU64(js, "argument"))};
  }
  bool To(Job &, T *out) const {
    *out = v;
    return true;
  }
};
template <>
struct In<cu::Stream> {
  uint32_t id = 0;
  static In From(const Napi::Value &js) { return {ArgId(js, "stream")}; }
  bool To(Job &job, cu::Stream *out) const { return job.ctx->LookupStream(job, id, out); }
};
template <>
struct In<cu::Event> {
  uint32_t id = 0;
  static In From(const Napi::Value &js) { return {ArgId(js, "event")}; }
  bool To(Job &job, cu::Event *out) const {
    auto e = job.ctx->LookupEvent(job, id);
    if (e) *out = e->ev;
    return e != nullptr;
  }
};
template <>
struct In<cu::Function> {
  uint32_t id = 0;
  static In From(const Napi::Value &js) { return {ArgId(js, "function")}; }
  bool To(Job &job, cu::Function *out) const {
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, id);
    if (f) *out = f->fn;
    return f != nullptr;
  }
};

// What the method resolves with, by the entry point's result parameters (the pointers after the arguments).
template <typename... R>
struct Results {
  static_assert(((std::is_arithmetic_v<R> && sizeof(R) <= 4) && ...),
                "several results: each a 32-bit number (a JS number)");
  using Value = res::Named;
  static Value Of(const std::tuple<R...> &r, const char *const *names) {
    Value v;
    std::apply([&](const R &...x) { (v.fields.push_back({*names++, static_cast<double>(x)}), ...); }, r);
    return v;
  }
};
template <>
struct Results<> {
  using Value = res::None;
  static Value Of(const std::tuple<> &, const char *const *) { return {}; }
};
template <typename R>
struct Results<R> {
  static_assert(std::is_arithmetic_v<R>, "a driver call's result: a number");
  using Value = std::conditional_t<(sizeof(R) > 4), res::Big, res::Num>;
  static Value Of(const std::tuple<R> &r, const char *const *) {
    return {static_cast<decltype(Value::v)>(std::get<0>(r))};
  }
};

template <typename T>
struct Pointee;
template <typename T>
struct Pointee<T *> {
  static_assert(!std::is_const_v<T> && std::is_arithmetic_v<T>,
                "after the arguments, pointers the driver writes a number through");
  using type = T;
};

// An entry point of parameters P, the first N of them the call's arguments.
template <size_t N, typename Fp>
struct Call;
template <size_t N, typename... P>
struct Call<N, cu::Result (*)(P...)> {
  using Params = std::tuple<P...>;
  using Fp = cu::Result (*)(P...);
  template <size_t... I>
  static auto Ins(std::index_sequence<I...>) -> std::tuple<In<std::tuple_element_t<I, Params>>...>;
  template <size_t... I>
  static auto Outs(std::index_sequence<I...>)
      -> std::tuple<typename Pointee<std::tuple_element_t<N + I, Params>>::type...>;
  using InTuple = decltype(Ins(std::make_index_sequence<N>()));
  using OutTuple = decltype(Outs(std::make_index_sequence<sizeof...(P) - N>()));
  template <typename Tuple>
  struct ResultsOf;
  template <typename... R>
  struct ResultsOf<std::tuple<R...>> {
    using type = Results<R...>;
  };
  using Res = typename ResultsOf<OutTuple>::type;

  template <size_t... I>
  static InTuple Read(const Napi::CallbackInfo &info, std::index_sequence<I...>) {
    return {std::tuple_element_t<I, InTuple>::From(info[I])...};
  }

  template <size_t... I, size_t... O>
  static bool Run(Job &job, Fp fn, const char *name, const InTuple &ins, OutTuple &outs, std::index_sequence<I...>,
                  std::index_sequence<O...>) {
    std::tuple<std::remove_cv_t<std::tuple_element_t<I, Params>>...> args;
    if (!(std::get<I>(ins).To(job, &std::get<I>(args)) && ...)) return false;
    return job.Check(fn(std::get<I>(args)..., &std::get<O>(outs)...), name);
  }

  static Napi::Value Method(Context &ctx, const Napi::CallbackInfo &info, Fp cu::Api::*entry, const char *name,
                            const char *const *names) {
    static_assert(N <= sizeof...(P), "more arguments declared than the entry point takes");
    InTuple ins = Read(info, std::make_index_sequence<N>());
    // A setting (no result) acts on what the work queued before it leaves: it runs on the context thread after it.
    constexpr Where where =
        std::is_same_v<typename Res::Value, res::None> ? Where::kContextThread : Where::kInlineWhenIdle;
    return ctx.Submit(info, where, [ins, entry, name, names](Job &job) -> typename Res::Value {
      auto fn = cu::api().*entry;
      OutTuple outs{};
      if (!Have(job, fn, name) ||
          !Run(job, fn, name, ins, outs, std::make_index_sequence<N>(), std::make_index_sequence<sizeof...(P) - N>()))
        return {};
      return Res::Of(outs, names);
    });
  }
};

}  // namespace

// QCUDA_DRIVER_CALL(jsName, Entry, nArgs, fieldNames..., nullptr): jsName(args) calls cu::api().Entry
// (cuda_api.h) with its nArgs arguments; several results are named by fieldNames.
#define QCUDA_DRIVER_CALL(jsName, Entry, nArgs, ...)                                                      \
  QCUDA_CONTEXT_METHOD(jsName, ctx, info) {                                                               \
    static const char *const names[] = {__VA_ARGS__};                                                     \
    return Call<nArgs, decltype(cu::Api::Entry)>::Method(ctx, info, &cu::Api::Entry, "cu" #Entry, names); \
  }
#include "context_calls.h"

}  // namespace qcuda::cuda
