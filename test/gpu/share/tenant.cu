// One tenant of the GPU sharing benchmark (issue 36; run.sh drives it): a
// steady workload for --seconds, printing one JSON line per 1 s window (work
// done in it; for infer, the p50/p99 of its steps) and a last line with the
// whole run's totals. Modes:
//   sgemm   a tiled single-precision GEMM (N x N, --size) in a loop, synchronized every 8
//   train   a training-like step: forward GEMM, two backward GEMMs, an update; synchronized each step
//   infer   small-batch inference: 3 layers of a 32 x 1024 x 1024 GEMM + ReLU, synchronized each step (latency
//   measured) long    noisy: one kernel that spins --ms milliseconds, again and again bw      noisy: a streaming copy
//   over 2 x --size MiB, again and again storm   noisy: empty kernels launched back to back, synchronized every 4096
//   copy    emu-provider smoke: 64 KiB copies in and out (no kernel)
// Build: nvcc -O3 -arch=sm_90 -cudart=shared -o tenant tenant.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#define CK(x)                                                          \
  do {                                                                 \
    cudaError_t e_ = (x);                                              \
    if (e_ != cudaSuccess) {                                           \
      fprintf(stderr, "tenant: %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

constexpr int T = 16;
__global__ void sgemm(int m, int n, int k, const float *a, const float *b, float *c, int relu) {
  __shared__ float as[T][T], bs[T][T];
  int r = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < k; t += T) {
    as[threadIdx.y][threadIdx.x] = (r < m && t + threadIdx.x < k) ? a[r * k + t + threadIdx.x] : 0;
    bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : 0;
    __syncthreads();
    for (int i = 0; i < T; i++) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (r < m && col < n) c[r * n + col] = relu && acc < 0 ? 0 : acc;
}
__global__ void update(float *w, const float *g, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) w[i] -= 1e-6f * g[i];
}
__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
__global__ void stream(float4 *d, const float4 *s, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) d[i] = s[i];
}
__global__ void empty() {}

static void gemm(int m, int n, int k, const float *a, const float *b, float *c, int relu = 0) {
  sgemm<<<dim3((n + T - 1) / T, (m + T - 1) / T), dim3(T, T)>>>(m, n, k, a, b, c, relu);
}

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int main(int argc, char **argv) {
  std::string mode = "sgemm", name = "t";
  double seconds = 10, ms = 50;
  int size = 2048;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto val = [&](const char *k) { return a.rfind(k, 0) == 0 ? a.c_str() + strlen(k) : nullptr; };
    if (auto v = val("--mode="))
      mode = v;
    else if (auto v = val("--name="))
      name = v;
    else if (auto v = val("--seconds="))
      seconds = atof(v);
    else if (auto v = val("--size="))
      size = atoi(v);
    else if (auto v = val("--ms="))
      ms = atof(v);
    else {
      fprintf(stderr, "tenant: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int clockKhz = 1500000;
  if (mode != "copy") CK(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0));
  const int N = size, B = 32, H = 1024;
  size_t elems = mode == "bw" ? (static_cast<size_t>(size) << 20) / sizeof(float) : static_cast<size_t>(N) * N;
  if (mode == "infer") elems = static_cast<size_t>(H) * H;
  if (mode == "copy") elems = 16384;
  float *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  CK(cudaMalloc(&a, elems * 4));
  CK(cudaMalloc(&b, elems * 4));
  CK(cudaMalloc(&c, elems * 4));
  CK(cudaMalloc(&d, elems * 4));
  std::vector<float> host(elems, 0.5f);
  CK(cudaMemcpy(a, host.data(), elems * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, host.data(), elems * 4, cudaMemcpyHostToDevice));
  // Units of work: GFLOP for the GEMM modes, steps otherwise.
  const char *unit = (mode == "sgemm" || mode == "train") ? "gflop" : mode == "bw" ? "gbyte" : "steps";
  double perStep = mode == "sgemm"   ? 8 * 2.0 * N * N * N / 1e9
                   : mode == "train" ? 3 * 2.0 * N * N * N / 1e9
                   : mode == "bw"    ? 2.0 * elems * 4 / 1e9
                                     : 1;
  std::vector<double> lat, all;
  double t0 = now(), win = t0, units = 0, total = 0;
  int window = 0;
  auto flush = [&](double t) {
    printf("{\"tenant\":\"%s\",\"mode\":\"%s\",\"window\":%d,\"t\":%.3f,\"units\":%.4f,\"unit\":\"%s\",\"per_s\":%.4f",
           name.c_str(), mode.c_str(), window, t - t0, units, unit, units / (t - win));
    if (!lat.empty())
      printf(",\"steps\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f", lat.size(), pct(lat, 0.5), pct(lat, 0.99));
    printf("}\n");
    fflush(stdout);
    all.insert(all.end(), lat.begin(), lat.end());
    lat.clear();
    total += units;
    units = 0;
    win = t;
    window++;
  };
  for (;;) {
    double s = now();
    if (s - t0 >= seconds) break;
    if (mode == "sgemm") {
      for (int i = 0; i < 8; i++) gemm(N, N, N, a, b, c);
    } else if (mode == "train") {
      gemm(N, N, N, a, b, c);  // forward
      gemm(N, N, N, c, b, d);  // gradient of the input
      gemm(N, N, N, a, c, d);  // gradient of the weights
      update<<<264, 256>>>(b, d, elems);
    } else if (mode == "infer") {
      gemm(B, H, H, a, b, c, 1);
      gemm(B, H, H, c, b, d, 1);
      gemm(B, H, H, d, b, c, 1);
    } else if (mode == "long") {
      spin<<<1, 1>>>(static_cast<long long>(ms * clockKhz));
    } else if (mode == "bw") {
      stream<<<1056, 256>>>(reinterpret_cast<float4 *>(c), reinterpret_cast<const float4 *>(a), elems / 4);
      stream<<<1056, 256>>>(reinterpret_cast<float4 *>(d), reinterpret_cast<const float4 *>(b), elems / 4);
    } else if (mode == "storm") {
      for (int i = 0; i < 4096; i++) empty<<<1, 32>>>();
    } else if (mode == "idle") {
      usleep(100000);  // a neighbour with a context and nothing to run: the quiet baseline of the noisy scenarios
    } else if (mode == "copy") {
      CK(cudaMemcpy(a, host.data(), elems * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(host.data(), a, elems * 4, cudaMemcpyDeviceToHost));
    } else {
      fprintf(stderr, "tenant: unknown mode %s\n", mode.c_str());
      return 2;
    }
    CK(cudaDeviceSynchronize());
    double e = now();
    if (mode == "infer") lat.push_back((e - s) * 1e6);
    units += mode == "storm" ? 4096 : perStep;
    if (e - win >= 1.0) flush(e);
  }
  if (units > 0 && now() - win > 0.5) flush(now());
  double el = now() - t0;
  printf(
      "{\"tenant\":\"%s\",\"mode\":\"%s\",\"final\":true,\"seconds\":%.3f,\"units\":%.4f,\"unit\":\"%s\",\"per_s\":%."
      "4f",
      name.c_str(), mode.c_str(), el, total, unit, total / el);
  if (!all.empty()) printf(",\"steps\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f", all.size(), pct(all, 0.5), pct(all, 0.99));
  printf("}\n");
  return 0;
}
