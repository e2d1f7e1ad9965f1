// cuFFT plans of each kind, executed; prints a checksum per plan so a native
// run and a qcuda run can be diffed.
#include <cufft.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <math.h>

static double sum_c(const cufftComplex *d, size_t n) {
  cufftComplex *h = (cufftComplex *)malloc(n * sizeof *h);
  cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost);
  double s = 0;
  for (size_t i = 0; i < n; i++) s += fabs(h[i].x) * (i % 7 + 1) + fabs(h[i].y) * (i % 5 + 1);
  free(h);
  return s;
}
static void fill(cufftComplex *d, size_t n) {
  cufftComplex *h = (cufftComplex *)malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) {
    h[i].x = (float)((i * 37) % 101) / 101.f;
    h[i].y = (float)((i * 13) % 53) / 53.f;
  }
  cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
  free(h);
}
#define TRY(name, call)                         \
  do {                                          \
    cufftResult r_ = (call);                    \
    if (r_ != CUFFT_SUCCESS) {                  \
      printf("%s: cufft error %d\n", name, r_); \
      return;                                   \
    }                                           \
  } while (0)

static void c2c1d(void) {
  int n = 4096;
  cufftComplex *d;
  cudaMalloc(&d, n * sizeof *d);
  fill(d, n);
  cufftHandle p;
  TRY("plan1d c2c", cufftPlan1d(&p, n, CUFFT_C2C, 1));
  TRY("exec c2c", cufftExecC2C(p, d, d, CUFFT_FORWARD));
  cudaDeviceSynchronize();
  printf("1d c2c 4096: %.3f\n", sum_c(d, n));
  cufftDestroy(p);
  cudaFree(d);
}
static void r2c2d(void) {
  int nx = 256, ny = 256;
  float *in;
  cufftComplex *out;
  cudaMalloc(&in, nx * ny * 4);
  cudaMalloc(&out, nx * (ny / 2 + 1) * sizeof *out);
  fill((cufftComplex *)in, nx * ny / 2);
  cufftHandle p;
  TRY("plan2d r2c", cufftPlan2d(&p, nx, ny, CUFFT_R2C));
  TRY("exec r2c", cufftExecR2C(p, in, out));
  cudaDeviceSynchronize();
  printf("2d r2c 256x256: %.3f\n", sum_c(out, nx * (ny / 2 + 1)));
  cufftDestroy(p);
  cudaFree(in);
  cudaFree(out);
}
static void c2r3d(void) {
  int n = 32;
  cufftComplex *in;
  float *out;
  cudaMalloc(&in, n * n * (n / 2 + 1) * sizeof *in);
  cudaMalloc(&out, n * n * n * 4);
  fill(in, n * n * (n / 2 + 1));
  cufftHandle p;
  TRY("plan3d c2r", cufftPlan3d(&p, n, n, n, CUFFT_C2R));
  TRY("exec c2r", cufftExecC2R(p, in, out));
  cudaDeviceSynchronize();
  printf("3d c2r 32^3: %.3f\n", sum_c((cufftComplex *)out, n * n * n / 2));
  cufftDestroy(p);
  cudaFree(in);
  cudaFree(out);
}
static void many(void) {
  int n[1] = {1000}, batch = 64;
  cufftComplex *d;
  cudaMalloc(&d, 1000 * batch * sizeof *d);
  fill(d, 1000 * batch);
  cufftHandle p;
  TRY("planmany", cufftPlanMany(&p, 1, n, NULL, 1, 1000, NULL, 1, 1000, CUFFT_C2C, batch));
  TRY("exec many", cufftExecC2C(p, d, d, CUFFT_INVERSE));
  cudaDeviceSynchronize();
  printf("many 1000 x64: %.3f\n", sum_c(d, 1000 * batch));
  cufftDestroy(p);
  cudaFree(d);
}
static void makemany(void) {
  long long n[1] = {1 << 20};
  size_t ws;
  cufftComplex *d;
  cudaMalloc(&d, (1 << 20) * sizeof *d);
  fill(d, 1 << 20);
  cufftHandle p;
  TRY("create", cufftCreate(&p));
  TRY("makeplanmany64", cufftMakePlanMany64(p, 1, n, NULL, 1, 0, NULL, 1, 0, CUFFT_C2C, 1, &ws));
  TRY("exec big", cufftExecC2C(p, d, d, CUFFT_FORWARD));
  cudaDeviceSynchronize();
  printf("makeplanmany64 2^20 (workspace %zu): %.1f\n", ws, sum_c(d, 1 << 20));
  cufftDestroy(p);
  cudaFree(d);
}
int main(void) {
  c2c1d();
  r2c2d();
  c2r3d();
  many();
  makemany();
  return 0;
}
