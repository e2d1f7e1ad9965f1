// The CUDA driver's own cost of each sequence of calls that the cuda
// provider's worker makes for one guest call, on this GPU, with no qcuda in
// the way (the median of 2000 of each, microseconds, one JSON line). The
// worker's figures (test/bench/qcuda.ts) are read against these: what is
// above them is qcuda's. Guest RAM is host memory registered with the driver
// (cuMemHostRegister), as the worker registers it; `pinned` copies use such
// memory, `pageable` ones plain malloc'd memory.
//   nvcc -O2 -o driver_costs test/gpu/driver_costs.cu -lcuda   (test/gpu/run.sh, part latency: on the GPU machine,
//   as it links libcuda; the guest build takes test/bench/*.cu only)
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#define CHECK(x)                           \
  do {                                     \
    CUresult r_ = (x);                     \
    if (r_ != CUDA_SUCCESS) {              \
      const char *s_ = "";                 \
      cuGetErrorString(r_, &s_);           \
      fprintf(stderr, "%s: %s\n", #x, s_); \
      exit(1);                             \
    }                                      \
  } while (0)

// Kernels as PTX (the driver JIT-compiles them for this GPU): nop does
// nothing; spin(ns) runs for ns nanoseconds of the GPU's clock; big takes a
// 4 KiB parameter block and does nothing.
static const char kNopPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry nop()\n{\n\tret;\n}\n"
    ".visible .entry big(.param .align 8 .b8 p[4096])\n{\n\tret;\n}\n"
    ".visible .entry spin(.param .u64 ns)\n{\n"
    "\t.reg .u64 %n, %t0, %t1, %d;\n\t.reg .pred %p;\n"
    "\tld.param.u64 %n, [ns];\n\tmov.u64 %t0, %globaltimer;\n"
    "LOOP:\n\tmov.u64 %t1, %globaltimer;\n\tsub.u64 %d, %t1, %t0;\n"
    "\tsetp.lt.u64 %p, %d, %n;\n\t@%p bra LOOP;\n\tret;\n}\n";

static double now_us() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// The median of n runs of step (after 200 unmeasured ones).
static double median(int n, const std::function<void()> &step) {
  for (int i = 0; i < 200; i++) step();
  std::vector<double> xs(n);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    step();
    xs[i] = now_us() - t0;
  }
  std::sort(xs.begin(), xs.end());
  return xs[n / 2];
}

static void until_done(CUstream s) {
  CUresult r;
  while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) {
  }
  CHECK(r);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, kNopPtx));
  CUfunction nop;
  CHECK(cuModuleGetFunction(&nop, mod, "nop"));
  CUdeviceptr d;
  CHECK(cuMemAlloc(&d, 1 << 20));
  // Registered memory, as the worker registers guest RAM.
  size_t hostLen = 1 << 20;
  void *reg = aligned_alloc(4096, hostLen);
  memset(reg, 1, hostLen);
  CHECK(cuMemHostRegister(reg, hostLen, 0));
  void *pageable = malloc(hostLen);
  memset(pageable, 2, hostLen);
  CUstream own;
  CHECK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
  CUevent ev;
  CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

  std::vector<std::pair<std::string, double>> rows;
  auto row = [&](const char *what, const std::function<void()> &step) { rows.push_back({what, median(n, step)}); };
  auto launch = [&](CUstream s) { CHECK(cuLaunchKernel(nop, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr)); };

  row("ctx_sync_idle", [&] { CHECK(cuCtxSynchronize()); });
  row("stream_query_idle", [&] { CHECK(cuStreamQuery(nullptr)); });
  row("h2d4_pinned_async_query", [&] {
    CHECK(cuMemcpyHtoDAsync(d, reg, 4, nullptr));
    until_done(nullptr);
  });
  row("h2d4_pinned_async_query_streamsync", [&] {
    CHECK(cuMemcpyHtoDAsync(d, reg, 4, nullptr));
    until_done(nullptr);
    CHECK(cuStreamSynchronize(nullptr));
  });
  row("h2d4_pinned_async_own_stream_query", [&] {
    CHECK(cuMemcpyHtoDAsync(d, reg, 4, own));
    until_done(own);
  });
  row("h2d4_pinned_sync", [&] { CHECK(cuMemcpyHtoD(d, reg, 4)); });
  row("h2d4_pageable_sync", [&] { CHECK(cuMemcpyHtoD(d, pageable, 4)); });
  row("d2h4_pinned_async_query", [&] {
    CHECK(cuMemcpyDtoHAsync(reg, d, 4, nullptr));
    until_done(nullptr);
  });
  row("d2h4_pinned_sync", [&] { CHECK(cuMemcpyDtoH(reg, d, 4)); });
  row("d2h4_pageable_sync", [&] { CHECK(cuMemcpyDtoH(pageable, d, 4)); });
  row("launch_ctxsync", [&] {
    launch(nullptr);
    CHECK(cuCtxSynchronize());
  });
  row("launch_query_ctxsync", [&] {
    launch(nullptr);
    until_done(nullptr);
    CHECK(cuCtxSynchronize());
  });
  row("launch_query", [&] {
    launch(nullptr);
    until_done(nullptr);
  });
  // One query right after the launch (not done yet), then the synchronize: what a wait that is not polled costs.
  row("launch_query1_ctxsync", [&] {
    launch(nullptr);
    (void)cuStreamQuery(nullptr);
    CHECK(cuCtxSynchronize());
  });
  // After polling: a stream's synchronize, an event's, the context's.
  row("launch_query_streamsync", [&] {
    launch(nullptr);
    until_done(nullptr);
    CHECK(cuStreamSynchronize(nullptr));
  });
  row("launch_query_eventsync", [&] {
    launch(nullptr);
    CHECK(cuEventRecord(ev, nullptr));
    until_done(nullptr);
    CHECK(cuEventSynchronize(ev));
  });
  row("launch_streamsync", [&] {
    launch(nullptr);
    CHECK(cuStreamSynchronize(nullptr));
  });
  // The kernel done before the synchronize, with no driver call in between (a spin of 12 us).
  row("launch_idle12_ctxsync", [&] {
    launch(nullptr);
    double t = now_us();
    while (now_us() - t < 12) {
    }
    CHECK(cuCtxSynchronize());
  });
  row("launch_idle12_streamsync", [&] {
    launch(nullptr);
    double t = now_us();
    while (now_us() - t < 12) {
    }
    CHECK(cuStreamSynchronize(nullptr));
  });
  row("launch_idle12", [&] {
    launch(nullptr);
    double t = now_us();
    while (now_us() - t < 12) {
    }
  });
  row("launch_own_stream_query", [&] {
    launch(own);
    until_done(own);
  });
  {
    // The launch call alone (the kernels run meanwhile; a synchronize every 64 keeps the queue short).
    int k = 0;
    row("launch_call", [&] {
      launch(nullptr);
      if (++k % 64 == 0) CHECK(cuCtxSynchronize());
    });
  }
  row("event_record_query", [&] {
    CHECK(cuEventRecord(ev, nullptr));
    CUresult r;
    while ((r = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) {
    }
    CHECK(r);
  });
  // The copy again, now that a kernel has run in the context (device printf's buffer is live).
  row("h2d4_pinned_async_query_streamsync_after_launch", [&] {
    CHECK(cuMemcpyHtoDAsync(d, reg, 4, nullptr));
    until_done(nullptr);
    CHECK(cuStreamSynchronize(nullptr));
  });

  // How many launches queue behind a running kernel before cuLaunchKernel
  // blocks (a launch that takes over 1 ms): the bound on launches a
  // worker makes on its own thread (kInlineLaunchBound) must stay below it.
  CUfunction spin, big;
  CHECK(cuModuleGetFunction(&spin, mod, "spin"));
  CHECK(cuModuleGetFunction(&big, mod, "big"));
  auto depth = [&](CUfunction f, size_t paramBytes) {
    static unsigned char params[4096];
    size_t size = paramBytes;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    unsigned long long ns = 500000000ull;  // 0.5 s
    void *spinArgs[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, spinArgs, nullptr));
    int queued = 0;
    for (; queued < 100000; queued++) {
      double t0 = now_us();
      CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, paramBytes ? extra : nullptr));
      if (now_us() - t0 > 1000) break;
    }
    CHECK(cuCtxSynchronize());
    return (double)queued;
  };
  rows.push_back({"queue_depth_nop", depth(nop, 0)});
  rows.push_back({"queue_depth_4k_params", depth(big, 4096)});

  printf("{");
  for (size_t i = 0; i < rows.size(); i++) printf("%s\"%s\":%.2f", i ? "," : "", rows[i].first.c_str(), rows[i].second);
  printf("}\n");
  CHECK(cuMemHostUnregister(reg));
  return 0;
}
